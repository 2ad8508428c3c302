use fastmp::{ANY_SOURCE, Config, DeviceKind};
#[test]
fn smoke() {
    for np in [1usize, 2, 3, 5] {
        eprintln!("np {np}");
        let r = Config::new()
            .device(DeviceKind::Tcp)
            .np(np)
            .run(|w| {
                let me = w.rank();
                let n = w.size();
                for len in [0usize, 1, 100, 8192, 8193, 100_000, 3_000_000] {
                    eprintln!("rank {me} len {len}");
                    let data: Vec<u8> = (0..len).map(|i| (i * 7 + me) as u8).collect();
                    let mut got = vec![0u8; len];
                    let st = w.sendrecv(&data, (me + 1) % n, 3, &mut got, (me + n - 1) % n, 3)?;
                    let src = (me + n - 1) % n;
                    assert_eq!(st.source, src);
                    assert!(got.iter().enumerate().all(|(i, &b)| b == (i * 7 + src) as u8), "len {len}");
                }
                let mut v = [0u64];
                w.allreduce(&[me as u64], &mut v, fastmp::op::Sum)?;
                let mut x = [0u8; 4];
                if me == 0 {
                    for _ in 1..n {
                        w.recv(&mut x, ANY_SOURCE, 9)?;
                    }
                } else {
                    w.send(&[1u8, 2, 3, 4], 0, 9)?;
                }
                Ok(v[0])
            })
            .unwrap();
        assert!(r.iter().all(|&s| s as usize == np * (np - 1) / 2), "{r:?}");
    }
}
