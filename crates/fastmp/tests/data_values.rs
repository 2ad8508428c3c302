//! Single values, vectors of unknown length, element counts, checked receives (bool, enums)
//! and the bytemuck/serde re-exports, on both devices.

use fastmp::bytemuck::{self, CheckedBitPattern, NoUninit, Pod, Zeroable};
use fastmp::{ANY_SOURCE, Comm, Config, DeviceKind, Error, Result};

fn run<R: Send>(dev: DeviceKind, np: usize, f: impl Fn(Comm) -> Result<R> + Sync) -> Vec<R> {
    Config::new().device(dev).np(np).run(f).unwrap()
}

/// A padded layout made explicit: derives through the re-export only.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[bytemuck(crate = "fastmp::bytemuck")]
#[repr(C)]
struct Particle {
    id: u32,
    _pad: u32,
    pos: [f64; 3],
}

/// Nested `Pod` structs are `Pod`.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[bytemuck(crate = "fastmp::bytemuck")]
#[repr(C)]
struct Pair {
    a: Particle,
    b: Particle,
}

#[derive(Clone, Copy, Debug, PartialEq, NoUninit, CheckedBitPattern)]
#[bytemuck(crate = "fastmp::bytemuck")]
#[repr(u8)]
enum Phase {
    Start = 1,
    Run = 2,
    Stop = 3,
}

#[derive(fastmp::serde::Serialize, fastmp::serde::Deserialize, Debug, PartialEq)]
#[serde(crate = "fastmp::serde")]
struct Job {
    name: String,
    steps: Vec<u32>,
}

fn particle(i: u32) -> Particle {
    Particle { id: i, _pad: 0, pos: [i as f64, -(i as f64), 0.5] }
}

fn values_round_trip(dev: DeviceKind) {
    run(dev, 2, |world| {
        if world.rank() == 0 {
            world.send_value(&0xDEAD_BEEF_u64, 1, 1)?;
            world.send_value(&true, 1, 2)?;
            world.send_value(&false, 1, 3)?;
            world.send_value(&Phase::Run, 1, 4)?;
            world.send_value(&Pair { a: particle(1), b: particle(2) }, 1, 5)?;
            world.send(&[Phase::Start, Phase::Stop], 1, 6)?;
            world.send_obj(&Job { name: "relax".into(), steps: vec![3, 1] }, 1, 7)?;
        } else {
            let (x, st) = world.recv_value::<u64>(0, 1)?;
            assert_eq!((x, st.source, st.tag, st.bytes, st.count::<u64>()), (0xDEAD_BEEF, 0, 1, 8, 1));
            assert!(world.recv_value::<bool>(0, 2)?.0);
            assert!(!world.recv_value::<bool>(ANY_SOURCE, 3)?.0);
            assert_eq!(world.recv_value::<Phase>(0, 4)?.0, Phase::Run);
            assert_eq!(world.recv_value::<Pair>(0, 5)?.0, Pair { a: particle(1), b: particle(2) });
            let mut phases = [Phase::Run; 3];
            let st = world.recv_checked(&mut phases, 0, 6)?;
            assert_eq!((phases, st.count::<Phase>()), ([Phase::Start, Phase::Stop, Phase::Run], 2));
            let (job, _) = world.recv_obj::<Job>(0, 7)?;
            assert_eq!(job, Job { name: "relax".into(), steps: vec![3, 1] });
        }
        Ok(())
    });
}

fn value_length_mismatches(dev: DeviceKind) {
    run(dev, 2, |world| {
        if world.rank() == 0 {
            world.send(&[1u32, 2], 1, 1)?;
            world.send::<u32>(&[], 1, 2)?;
            world.send(&[7u16], 1, 3)?;
        } else {
            let err = world.recv_value::<u32>(0, 1).unwrap_err();
            assert!(matches!(err, Error::Truncated { message_bytes: 8, capacity: 4, .. }), "{err}");
            let err = world.recv_value::<u32>(0, 2).unwrap_err();
            assert!(matches!(err, Error::MessageLength { call: "recv_value", bytes: 0, expected: 4, .. }), "{err}");
            let err = world.recv_value::<u32>(0, 3).unwrap_err();
            assert!(
                err.to_string().contains("recv_value: the message from rank 0 (tag 3) has 2 bytes, expected 4"),
                "{err}"
            );
        }
        Ok(())
    });
}

fn recv_vec_any_length(dev: DeviceKind) {
    // Empty, inline, eager and rendezvous sizes on both devices.
    let lens = [0usize, 1, 3, 1000, 100_000];
    run(dev, 2, |world| {
        if world.rank() == 0 {
            for (i, &n) in lens.iter().enumerate() {
                let v: Vec<u64> = (0..n as u64).map(|k| k * 3 + i as u64).collect();
                world.send(&v, 1, i as i32)?;
            }
            world.send(&[particle(4), particle(5)], 1, 10)?;
        } else {
            for (i, &n) in lens.iter().enumerate() {
                let (v, st) = world.recv_vec::<u64>(0, i as i32)?;
                assert_eq!((v.len(), v.capacity(), st.count::<u64>(), st.bytes), (n, n, n, 8 * n));
                assert!(v.iter().enumerate().all(|(k, &x)| x == k as u64 * 3 + i as u64), "message {i}");
            }
            let (ps, _) = world.recv_vec::<Particle>(ANY_SOURCE, 10)?;
            assert_eq!(ps, [particle(4), particle(5)]);
        }
        Ok(())
    });
}

fn recv_vec_mismatches(dev: DeviceKind) {
    run(dev, 2, |world| {
        if world.rank() == 0 {
            world.send(&[1u8, 2, 3], 1, 1)?;
            world.send(&[1u8, 0, 2, 1], 1, 2)?;
        } else {
            // Not a whole number of u16: an error, and the message is still there to receive.
            let err = world.recv_vec::<u16>(0, 1).unwrap_err();
            assert!(matches!(err, Error::ElementSize { bytes: 3, elem_size: 2 }), "{err}");
            let (bytes, _) = world.recv_vec::<u8>(0, 1)?;
            assert_eq!(bytes, [1, 2, 3]);
            let err = world.recv_vec::<bool>(0, 2).unwrap_err();
            assert!(
                matches!(err, Error::InvalidValue { call: "recv_vec", index: 2, source_rank: 0, tag: 2, .. }),
                "{err}"
            );
            assert!(err.to_string().contains("is not a valid bool"), "{err}");
            let err = world.recv_vec::<()>(0, 3).unwrap_err();
            assert!(err.to_string().contains("recv_vec::<()>"), "{err}");
        }
        Ok(())
    });
}

fn checked_receives_reject_invalid_bytes(dev: DeviceKind) {
    run(dev, 2, |world| {
        if world.rank() == 0 {
            world.send(&[true, false, true, true], 1, 1)?;
            world.send(&[0u8, 1, 2], 1, 2)?;
            world.send(&[2u8], 1, 3)?;
            world.send(&[1u8, 9], 1, 4)?;
            world.send(&[0u8], 1, 5)?;
        } else {
            let mut flags = [false; 6];
            let st = world.recv_checked(&mut flags, 0, 1)?;
            assert_eq!((flags, st.count::<bool>()), ([true, false, true, true, false, false], 4));
            let mut flags = [true; 3];
            let err = world.recv_checked(&mut flags, 0, 2).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::InvalidValue { call: "recv_checked", type_name: "bool", index: 2, source_rank: 0, tag: 2 }
                ),
                "{err}"
            );
            assert_eq!(flags, [true; 3], "nothing is written when a value is invalid");
            let err = world.recv_value::<bool>(0, 3).unwrap_err();
            assert!(matches!(err, Error::InvalidValue { call: "recv_value", index: 0, .. }), "{err}");
            let mut phases = [Phase::Start; 2];
            let err = world.recv_checked(&mut phases, 0, 4).unwrap_err();
            assert!(matches!(err, Error::InvalidValue { index: 1, .. }), "{err}");
            assert!(err.to_string().contains("Phase"), "{err}");
            let err = world.recv_value::<Phase>(0, 5).unwrap_err();
            assert!(matches!(err, Error::InvalidValue { index: 0, .. }), "{err}");
        }
        Ok(())
    });
}

fn counts_follow_the_type_asked_for(dev: DeviceKind) {
    run(dev, 2, |world| {
        if world.rank() == 0 {
            world.send(&[5u64; 6], 1, 0)?;
        } else {
            let probed = world.probe(0, 0)?;
            assert_eq!(
                (probed.bytes, probed.count::<u64>(), probed.count::<u8>(), probed.count::<u32>()),
                (48, 6, 48, 12)
            );
            assert_eq!((probed.count::<[u8; 5]>(), probed.count_of::<[u8; 5]>()), (9, None));
            assert_eq!(probed.count::<()>(), 0);
            let mut buf = vec![0u64; probed.count::<u64>()];
            let st = world.recv(&mut buf, 0, 0)?;
            assert_eq!((st.count::<u64>(), buf), (6, vec![5; 6]));
        }
        Ok(())
    });
}

#[test]
fn bytemuck_casts_through_the_reexport() {
    let p = particle(9);
    let bytes: &[u8] = bytemuck::bytes_of(&p);
    assert_eq!(bytes.len(), 32);
    assert_eq!(*bytemuck::from_bytes::<Particle>(bytes), p);
}

macro_rules! device_suite {
    ($($name:ident),* $(,)?) => {
        mod shm {
            $(#[test] fn $name() { super::$name(fastmp::DeviceKind::Shm) })*
        }
        mod tcp {
            $(#[test] fn $name() { super::$name(fastmp::DeviceKind::Tcp) })*
        }
    };
}

device_suite!(
    values_round_trip,
    value_length_mismatches,
    recv_vec_any_length,
    recv_vec_mismatches,
    checked_receives_reject_invalid_bytes,
    counts_follow_the_type_asked_for,
);
