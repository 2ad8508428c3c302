//! Send modes and the null peer (issue 12): `bsend`/`ibsend` return at once with the buffer free
//! whatever the size, `rsend`/`irsend` deliver like standard sends, and `PROC_NULL` is accepted by
//! every point-to-point call as a no-op with an empty status. Conventions: `p2p_common`.

mod common;
mod p2p_common;

use common::{check_pattern, device_suite, pattern};
use fastmp::{ANY_SOURCE, ANY_TAG, DeviceKind, Error, PROC_NULL, Status, startall, waitall};
use p2p_common::{SENTINEL, assert_status, cfg, go, run, wait_go};

const LARGE: usize = 300_000;

fn assert_empty(st: &Status, what: &str) {
    assert_eq!((st.source, st.tag, st.bytes, st.cancelled), (PROC_NULL, ANY_TAG, 0, false), "{what}: {st:?}");
}

/// Both ranks buffered-send large messages before either receives (would deadlock with
/// synchronous sends), then overwrite their buffers: the data that arrives is the original.
fn bsend_returns_at_once_and_delivers(dev: DeviceKind) {
    cfg(dev, 2, 1000)
        .run(|world| {
            let (rank, peer) = (world.rank(), 1 - world.rank());
            let mut big = pattern(rank as u64, LARGE);
            let small = pattern(rank as u64 + 10, 50);
            world.bsend(&big, peer, 1)?;
            world.bsend(&small, peer, 2)?;
            let mut again = pattern(rank as u64 + 20, LARGE);
            world.scope(|s| {
                let req = s.ibsend(&again, peer, 3)?;
                assert!(req.is_active());
                req.wait().map(drop)
            })?;
            big.fill(0);
            again.fill(0);
            for (tag, seed, len) in [(1, peer as u64, LARGE), (2, peer as u64 + 10, 50), (3, peer as u64 + 20, LARGE)] {
                let mut buf = vec![SENTINEL; len];
                assert_status(&world.recv(&mut buf, peer, tag)?, peer, tag, len);
                check_pattern(&buf, seed, "bsend");
            }
            Ok(())
        })
        .unwrap();
}

/// Ready mode in a correct MPI program (the receive is posted before the send starts).
fn rsend_and_irsend_deliver(dev: DeviceKind) {
    cfg(dev, 2, 1000)
        .run(|world| {
            if world.rank() == 0 {
                let (mut a, mut b) = (vec![0u8; LARGE], vec![0u8; 10]);
                world.scope(|s| {
                    let mut reqs = vec![s.irecv(&mut a, 1, 1)?, s.irecv(&mut b, 1, 2)?];
                    go(&world, 1)?;
                    waitall(&mut reqs).map(drop)
                })?;
                check_pattern(&a, 1, "rsend");
                check_pattern(&b, 2, "irsend");
            } else {
                wait_go(&world, 0)?;
                world.rsend(&pattern(1, LARGE), 0, 1)?;
                let small = pattern(2, 10);
                world.scope(|s| s.irsend(&small, 0, 2)?.wait())?;
            }
            Ok(())
        })
        .unwrap();
}

/// Every point-to-point call accepts `PROC_NULL`: nothing is sent, receives complete at once
/// with an empty status and leave their buffers as they were; `recv_obj` has no value to return.
fn proc_null_in_every_call(dev: DeviceKind) {
    run(dev, 2, |world| {
        let peer = 1 - world.rank();
        let out = [7u8; 4];
        let mut buf = [SENTINEL; 4];
        world.send(&out, PROC_NULL, 0)?;
        world.ssend(&out, PROC_NULL, 0)?;
        world.rsend(&out, PROC_NULL, 0)?;
        world.bsend(&out, PROC_NULL, 0)?;
        world.send_obj(&"nothing", PROC_NULL, 0)?;
        assert_empty(&world.recv(&mut buf, PROC_NULL, 0)?, "recv");
        assert_empty(&world.recv(&mut buf, PROC_NULL, ANY_TAG)?, "recv ANY_TAG");
        assert_empty(&world.probe(PROC_NULL, 3)?, "probe");
        assert_empty(&world.iprobe(PROC_NULL, 3)?.expect("iprobe finds the null message"), "iprobe");
        assert_empty(&world.sendrecv(&out, PROC_NULL, 0, &mut buf, PROC_NULL, 0)?, "sendrecv");
        assert_empty(&world.sendrecv_replace(&mut buf, PROC_NULL, 0, PROC_NULL, 0)?, "sendrecv_replace");
        let obj = world.recv_obj::<String>(PROC_NULL, 0);
        assert!(matches!(&obj, Err(Error::InvalidArgument(m)) if m.contains("PROC_NULL")), "{obj:?}");
        // Bad tags are still errors with the null peer.
        assert!(matches!(world.send(&out, PROC_NULL, -5), Err(Error::TagOutOfRange { tag: -5, .. })));
        assert!(matches!(world.recv(&mut buf, PROC_NULL, -5), Err(Error::TagOutOfRange { tag: -5, .. })));
        world.scope(|s| {
            let mut reqs = vec![
                s.isend(&out, PROC_NULL, 0)?,
                s.issend(&out, PROC_NULL, 0)?,
                s.irsend(&out, PROC_NULL, 0)?,
                s.ibsend(&out, PROC_NULL, 0)?,
            ];
            for st in waitall(&mut reqs)? {
                assert_empty(&st, "nonblocking send");
            }
            assert_empty(&s.irecv(&mut buf, PROC_NULL, 1)?.wait()?, "irecv");
            Ok::<_, Error>(())
        })?;
        let mut other = [SENTINEL; 4];
        world.scope(|s| {
            let (got, st) = s.irecv_buf(&mut other, PROC_NULL, 1)?.wait()?;
            assert_empty(&st, "irecv_buf");
            assert_eq!(got, [SENTINEL; 4]);
            // SAFETY: `raw` is a valid, exclusively used buffer for the whole scope.
            let raw = unsafe { s.irecv_raw(got.as_mut_ptr(), 4, PROC_NULL, 1)? };
            assert_empty(&raw.wait()?, "irecv_raw");
            Ok::<_, Error>(())
        })?;
        for (buf, st) in [
            world.isend_owned(vec![1u8; 4], PROC_NULL, 0)?.wait()?,
            world.issend_owned(vec![1u8; 4], PROC_NULL, 0)?.wait()?,
            world.irecv_owned(vec![SENTINEL; 4], PROC_NULL, 0)?.wait()?,
        ] {
            assert_empty(&st, "owned");
            assert_eq!(buf.len(), 4);
        }
        let mut reqs = vec![
            world.send_init(vec![1u8; 4], PROC_NULL, 0)?,
            world.ssend_init(vec![1u8; 4], PROC_NULL, 0)?,
            world.recv_init(vec![SENTINEL; 4], PROC_NULL, 0)?,
        ];
        for _ in 0..2 {
            startall(&mut reqs)?;
            for st in waitall(&mut reqs)? {
                assert_empty(&st, "persistent");
            }
        }
        assert_eq!(reqs[2].buf()?, [SENTINEL; 4]);
        assert_eq!((buf, other), ([SENTINEL; 4], [SENTINEL; 4]), "a receive from PROC_NULL wrote its buffer");
        // Nothing above reached the peer: the only message it gets is this one.
        world.send(&[world.rank() as u8], peer, 9)?;
        let mut one = [0u8];
        assert_status(&world.recv(&mut one, ANY_SOURCE, ANY_TAG)?, peer, 9, 1);
        world.barrier()?;
        assert_eq!(world.iprobe(ANY_SOURCE, ANY_TAG)?, None);
        Ok(())
    })
    .unwrap();
}

device_suite! {
    both: [
        bsend_returns_at_once_and_delivers,
        rsend_and_irsend_deliver,
        proc_null_in_every_call,
    ],
    tcp_ignored: [],
}
