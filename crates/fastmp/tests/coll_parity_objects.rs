//! Collectives on serde values, overlapping send blocks, and a user op that panics inside a
//! collective: on shm and tcp.

mod coll_common;

use coll_common::job;
use fastmp::coll::{Collective, Tuning};
use fastmp::op::UserOp;
use fastmp::{Config, DeviceKind, Error};

const DEVICES: [DeviceKind; 3] = [DeviceKind::Shm, DeviceKind::Tcp, DeviceKind::Hybrid];

#[test]
fn object_collectives() {
    for device in DEVICES {
        for np in [1, 2, 3] {
            let outcome = job(Config::new().device(device).np(np), "objects", |world| {
                let (me, np) = (world.rank(), world.size());
                let name = |r: usize| format!("rank-{r}-{}", "x".repeat(r * 3));
                let root = np - 1;
                let mut v = if me == root { vec![name(root); 2] } else { Vec::new() };
                world.bcast_obj(&mut v, root)?;
                assert_eq!(v, vec![name(root); 2]);
                let all: Vec<String> = (0..np).map(name).collect();
                assert_eq!(world.gather_obj(&name(me), root)?, (me == root).then(|| all.clone()));
                assert_eq!(world.allgather_obj(&name(me))?, all);
                let values = if me == root { all.clone() } else { Vec::new() };
                assert_eq!(world.scatter_obj(&values, root)?, name(me));
                let to: Vec<(usize, usize)> = (0..np).map(|j| (me, j)).collect();
                let from: Vec<(usize, usize)> = (0..np).map(|j| (j, me)).collect();
                assert_eq!(world.alltoall_obj(&to)?, from);
                // Concatenation: associative, not commutative, so rank order shows.
                let joined: String = all.concat();
                assert_eq!(world.allreduce_obj(&name(me), |a, b| a + &b)?, joined);
                assert_eq!(world.reduce_obj(&name(me), |a, b| a + &b, 0)?, (me == 0).then(|| joined.clone()));
                assert_eq!(world.scan_obj(&name(me), |a, b| a + &b)?, all[..=me].concat());
                assert_eq!(world.exscan_obj(&name(me), |a, b| a + &b)?, (me > 0).then(|| all[..me].concat()));
                let err = world.alltoall_obj(&[1u8]).map(drop);
                assert!(np == 1 || matches!(&err, Err(Error::InvalidArgument(m)) if m.contains("alltoall_obj")));
                Ok(())
            });
            outcome.unwrap_or_else(|e| panic!("{device:?} np {np}: {e}"));
        }
    }
}

#[test]
fn overlapping_send_blocks_are_accepted() {
    for device in DEVICES {
        for coll in [Collective::Scatterv, Collective::Alltoallv] {
            for &algorithm in coll.algorithms() {
                let tuning = Tuning::defaults_for(device).force(coll, algorithm).expect("force");
                let what = format!("{device:?} {coll} {algorithm}");
                let outcome = job(Config::new().device(device).np(3).tuning(tuning), &what, |world| {
                    let me = world.rank();
                    // Every rank's block is elements 1..3 of the same buffer.
                    let send = [10u32, 11, 12, 13];
                    let (counts, displs) = ([2usize; 3], [1usize; 3]);
                    let mut recv = [0u32; 2];
                    world.scatterv(&send, &counts, &displs, &mut recv, 0)?;
                    assert_eq!(recv, [11, 12]);
                    let send = [me as u32; 2];
                    let mut recv = [0u32; 6];
                    world.alltoallv(&send, &counts, &[0; 3], &mut recv, &counts, &[0, 2, 4])?;
                    assert_eq!(recv, [0, 0, 1, 1, 2, 2]);
                    Ok(())
                });
                outcome.unwrap_or_else(|e| panic!("{what}: {e}"));
            }
        }
    }
}

#[test]
fn a_user_op_panic_message_reaches_run() {
    for device in DEVICES {
        for coll in [Collective::Allreduce, Collective::Reduce, Collective::Scan, Collective::ReduceScatter] {
            for &algorithm in coll.algorithms() {
                let tuning = Tuning::defaults_for(device).force(coll, algorithm).expect("force");
                let what = format!("{device:?} {coll} {algorithm}");
                let outcome = job(Config::new().device(device).np(2).tuning(tuning), &what, move |world| {
                    // Every algorithm combines at least once somewhere at np 2.
                    let op = UserOp::commutative(|_: &[u64], _: &mut [u64]| panic!("boom in the user op"));
                    let mut out = vec![0u64; 4];
                    let send = vec![1u64; 4];
                    match coll {
                        Collective::Allreduce => world.allreduce(&send, &mut out, &op),
                        Collective::Reduce => world.reduce(&send, &mut out, &op, 0),
                        Collective::Scan => world.scan(&send, &mut out, &op),
                        _ => world.reduce_scatter_block(&send, &mut out[..2], &op),
                    }
                });
                match outcome {
                    Err(e) => assert!(e.to_string().contains("boom in the user op"), "{what}: {e}"),
                    Ok(_) => panic!("{what}: the job succeeded"),
                }
            }
        }
    }
}
