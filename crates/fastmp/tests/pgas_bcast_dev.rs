//! broadcast, scatter, gather and gather_all: every algorithm each lists × every sync mode ×
//! sizes around the pipeline chunk × several rank counts and roots, against a sequential
//! reference, on shm and tcp; MYSYNC's point-to-point meaning; argument errors.

use std::time::Duration;

use fastmp::pgas::{self, Algorithm, Collective, SharedArray, Sync};
use fastmp::{Comm, Config, DeviceKind, Error, Result};

mod alloc_counter;
use alloc_counter::allocations;

/// Elements per piece; 20 000 u16 is 40 000 bytes, above the 32 KiB static chunk.
const SIZES: [usize; 4] = [0, 1, 37, 20_000];
const MAX: usize = 20_000;
const SENTINEL: u16 = u16::MAX;

fn on_each_device(np: usize, f: impl Fn(&Comm) -> Result<()> + Send + std::marker::Sync) {
    for device in [DeviceKind::Shm, DeviceKind::Tcp, DeviceKind::Hybrid] {
        Config::new()
            .device(device)
            .np(np)
            .run(|world| f(&world))
            .unwrap_or_else(|e| panic!("{device:?} np={np}: {e}"));
    }
}

fn value(rank: usize, i: usize, salt: usize) -> u16 {
    ((rank * 1000 + i * 3 + salt) % 65_521) as u16
}

/// (src, dst) elements per block for `coll` with pieces of up to `MAX` on `np` ranks.
fn blocks(coll: Collective, np: usize) -> (usize, usize) {
    match coll {
        Collective::Broadcast => (MAX, MAX),
        Collective::Scatter => (np * MAX, MAX),
        _ => (MAX, np * MAX),
    }
}

fn call(
    coll: Collective,
    dst: &SharedArray<u16>,
    src: &SharedArray<u16>,
    root: usize,
    len: usize,
    sync: Sync,
) -> Result<()> {
    match coll {
        Collective::Broadcast => pgas::broadcast(dst, src, root, len, sync),
        Collective::Scatter => pgas::scatter(dst, src, root, len, sync),
        Collective::Gather => pgas::gather(dst, src, root, len, sync),
        Collective::GatherAll => pgas::gather_all(dst, src, len, sync),
        _ => unreachable!(),
    }
}

/// What `me`'s destination block must hold after the call.
fn expected(coll: Collective, np: usize, me: usize, root: usize, len: usize, salt: usize, dst_len: usize) -> Vec<u16> {
    let mut out = vec![SENTINEL; dst_len];
    match coll {
        Collective::Broadcast => (0..len).for_each(|i| out[i] = value(root, i, salt)),
        Collective::Scatter => (0..len).for_each(|i| out[i] = value(root, me * len + i, salt)),
        Collective::Gather if me != root => {}
        _ => {
            for r in 0..np {
                (0..len).for_each(|i| out[r * len + i] = value(r, i, salt));
            }
        }
    }
    out
}

/// Runs every algorithm of `coll` × sync mode × size on `np` ranks of each device.
fn every_case(coll: Collective, nps: &[usize]) {
    for &np in nps {
        on_each_device(np, |world| {
            let me = world.rank();
            let (src_len, dst_len) = blocks(coll, np);
            let src = world.shared_array::<u16>(src_len)?;
            let dst = world.shared_array::<u16>(dst_len)?;
            let mut salt = 0;
            for (a, algorithm) in coll.algorithms().into_iter().enumerate() {
                dst.force_algorithm(coll, algorithm)?;
                for (s, len) in SIZES.into_iter().enumerate() {
                    // The big size with fewer sync modes: it is the pipelines' case, not the modes'.
                    let syncs: &[Sync] = if len == MAX { &[Sync::ALL, Sync::MY, Sync::NO] } else { &Sync::EVERY };
                    for &sync in syncs {
                        salt += 1;
                        let root = (a + s + salt) % np;
                        {
                            let mut mine = src.local()?;
                            mine.iter_mut().enumerate().for_each(|(i, v)| *v = value(me, i, salt));
                            dst.local()?.fill(SENTINEL);
                        }
                        dst.barrier()?;
                        call(coll, &dst, &src, root, len, sync)?;
                        dst.barrier()?;
                        let want = expected(coll, np, me, root, len, salt, dst_len);
                        let got = dst.local()?;
                        if *got != want[..] {
                            let at = got.iter().zip(&want).position(|(g, w)| g != w).unwrap();
                            panic!(
                                "{coll:?} {algorithm} np={np} root={root} len={len} {sync}: rank {me} element {at} \
                                 is {} (want {})",
                                got[at], want[at]
                            );
                        }
                    }
                }
            }
            src.free()?;
            dst.free()
        });
    }
}

#[test]
fn broadcast_every_algorithm_sync_and_size() {
    every_case(Collective::Broadcast, &[1, 2, 3, 5, 8]);
}

#[test]
fn scatter_every_algorithm_sync_and_size() {
    every_case(Collective::Scatter, &[1, 2, 3, 5, 8]);
}

#[test]
fn gather_every_algorithm_sync_and_size() {
    every_case(Collective::Gather, &[1, 2, 3, 5, 8]);
}

#[test]
fn gather_all_every_algorithm_sync_and_size() {
    every_case(Collective::GatherAll, &[1, 2, 3, 5, 8]);
}

/// IN_MYSYNC: a late rank's destination is not written before it enters (it resets it just
/// before entering; a pusher that wrote earlier would leave the reset value there).
#[test]
fn in_mysync_leaves_a_late_rank_alone_until_it_enters() {
    on_each_device(4, |world| {
        let src = world.shared_array::<u16>(4 * 8)?;
        let dst = world.shared_array::<u16>(4 * 8)?;
        let late = 2;
        for coll in [Collective::Broadcast, Collective::Scatter, Collective::GatherAll] {
            for name in ["flat_push", "binomial_push", "binomial_push_static", "binomial_pull"] {
                let Ok(algorithm) = Algorithm::from_name(name) else { continue };
                if !coll.supports(algorithm) {
                    continue;
                }
                dst.force_algorithm(coll, algorithm)?;
                src.local()?.iter_mut().enumerate().for_each(|(i, v)| *v = value(world.rank(), i, 1));
                dst.barrier()?;
                if world.rank() == late {
                    std::thread::sleep(Duration::from_millis(30));
                    dst.local()?.fill(SENTINEL);
                }
                call(coll, &dst, &src, 0, 8, Sync::IN_MYSYNC | Sync::OUT_MYSYNC)?;
                if world.rank() == late {
                    let want = expected(coll, 4, late, 0, 8, 1, 32);
                    let got = dst.local()?;
                    assert_eq!(got[..8], want[..8], "{coll:?} {name}: written before rank {late} entered");
                }
                dst.barrier()?;
            }
        }
        Ok(())
    });
}

/// OUT_MYSYNC: a rank that returns may reuse its source at once (the root has read it).
#[test]
fn out_mysync_lets_early_returners_reuse_their_source() {
    on_each_device(4, |world| {
        let src = world.shared_array::<u16>(8)?;
        let dst = world.shared_array::<u16>(32)?;
        for name in ["flat_pull", "binomial_pull", "binomial_pull_static", "flat_push", "ring_push"] {
            dst.force_algorithm(Collective::Gather, Algorithm::from_name(name)?)?;
            src.local()?.iter_mut().enumerate().for_each(|(i, v)| *v = value(world.rank(), i, 2));
            dst.barrier()?;
            if world.rank() == 0 {
                std::thread::sleep(Duration::from_millis(30));
            }
            pgas::gather(&dst, &src, 0, 8, Sync::IN_MYSYNC | Sync::OUT_MYSYNC)?;
            src.local()?.fill(SENTINEL);
            if world.rank() == 0 {
                assert_eq!(*dst.local()?, expected(Collective::Gather, 4, 0, 0, 8, 2, 32)[..], "{name}");
            }
            dst.barrier()?;
        }
        Ok(())
    });
}

#[test]
fn bad_arguments_fail_on_every_rank_and_leave_the_arrays_usable() {
    on_each_device(3, |world| {
        let src = world.shared_array::<u16>(6)?;
        let dst = world.shared_array::<u16>(2)?;
        let invalid = |r: Result<()>, words: &str| match r {
            Err(Error::InvalidArgument(m)) => assert!(m.contains(words), "{m:?} lacks {words:?}"),
            other => panic!("expected InvalidArgument({words}), got {other:?}"),
        };
        invalid(pgas::broadcast(&dst, &src, 3, 1, Sync::ALL), "broadcast: root 3");
        invalid(pgas::broadcast(&dst, &src, 0, 3, Sync::ALL), "dst array's blocks of 2");
        invalid(pgas::scatter(&dst, &src, 0, 3, Sync::ALL), "scatter: 3 elements");
        invalid(pgas::scatter(&src, &dst, 0, 1, Sync::ALL), "scatter: 3 elements do not fit the src");
        invalid(pgas::gather(&dst, &src, 0, 1, Sync::ALL), "gather: 3 elements do not fit the dst");
        invalid(pgas::gather_all(&dst, &src, usize::MAX, Sync::ALL), "more than usize::MAX");
        invalid(pgas::gather_all(&dst, &dst, 1, Sync::ALL), "different arrays");
        invalid(pgas::broadcast(&dst, &src, 0, 1, Sync::IN_MYSYNC | Sync::IN_NOSYNC), "more than one IN_* flag");
        src.local()?.fill(world.rank() as u16 + 5);
        pgas::scatter(&dst, &src, 1, 2, Sync::ALL)?;
        assert_eq!(*dst.local()?, [6, 6]);
        Ok(())
    });
}

/// A rank that fails instead of entering turns its peers' semaphore waits into `PeerFailed`
/// naming it, on every algorithm shape that waits for it, instead of a hang.
#[test]
fn a_rank_failing_before_the_call_fails_its_peers() {
    for device in [DeviceKind::Shm, DeviceKind::Tcp, DeviceKind::Hybrid] {
        for (coll, name) in [
            (Collective::Broadcast, "binomial_push"),
            (Collective::Scatter, "ring_pull"),
            (Collective::Gather, "binomial_push_static"),
            (Collective::GatherAll, "flat_push"),
        ] {
            let result = Config::new().device(device).np(3).run(|world| {
                let src = world.shared_array::<u16>(3 * 4)?;
                let dst = world.shared_array::<u16>(3 * 4)?;
                dst.force_algorithm(coll, Algorithm::from_name(name)?)?;
                if world.rank() == 2 {
                    return Err(Error::other("rank 2 gives up"));
                }
                // Rank 0 waits for rank 2 in each of these; rank 1 may be done before it hears.
                match call(coll, &dst, &src, 0, 4, Sync::IN_MYSYNC | Sync::OUT_MYSYNC) {
                    Err(Error::PeerFailed { rank: 2, .. }) => Ok(()),
                    Ok(()) if world.rank() == 1 => Ok(()),
                    other => panic!("{device:?} {coll:?} {name}: rank {} got {other:?}", world.rank()),
                }
            });
            match result {
                Err(Error::RankFailed { rank: 2, .. }) => {}
                other => panic!("{device:?} {coll:?} {name}: run gave {other:?}"),
            }
        }
    }
}

/// Inner-node buffers above 16 MiB are given back after the call and made again by the next.
#[test]
fn scratch_above_the_keep_limit_is_released_and_remade() {
    const PIECE: usize = 9 << 20; // an inner rank of 4 holds two pieces: 18 MiB
    Config::new()
        .device(DeviceKind::Shm)
        .np(4)
        .run(|world| {
            let me = world.rank();
            let src = world.shared_array::<u8>(4 * PIECE)?;
            let dst = world.shared_array::<u8>(PIECE)?;
            for (round, name) in ["binomial_pull", "binomial_push_static", "binomial_pull"].into_iter().enumerate() {
                dst.force_algorithm(Collective::Scatter, Algorithm::from_name(name)?)?;
                src.local()?.iter_mut().enumerate().for_each(|(i, v)| *v = (i / PIECE * 7 + round + i % 251) as u8);
                pgas::scatter(&dst, &src, 1, PIECE, Sync::ALL)?;
                let got = dst.local()?;
                let bad =
                    got.iter().enumerate().position(|(i, v)| *v != (me * 7 + round + (me * PIECE + i) % 251) as u8);
                assert_eq!(bad, None, "{name}: rank {me}");
            }
            Ok(())
        })
        .unwrap();
}

/// Warm calls allocate nothing on shm (trees, scratch and semaphores are reused).
#[test]
fn warm_calls_allocate_nothing_on_shm() {
    Config::new()
        .device(DeviceKind::Shm)
        .np(4)
        .run(|world| {
            let src = world.shared_array::<u16>(4 * MAX)?;
            let dst = world.shared_array::<u16>(4 * MAX)?;
            for coll in [Collective::Broadcast, Collective::Scatter, Collective::Gather, Collective::GatherAll] {
                for algorithm in coll.algorithms() {
                    dst.force_algorithm(coll, algorithm)?;
                    for sync in [Sync::ALL, Sync::MY, Sync::NO] {
                        let calls = |n| (0..n).try_for_each(|i| call(coll, &dst, &src, i % 4, MAX, sync));
                        calls(4)?; // every root: its tree is built on first use
                        dst.barrier()?;
                        let before = allocations();
                        calls(10)?;
                        dst.barrier()?;
                        let n = allocations() - before;
                        assert_eq!(n, 0, "{coll:?} {algorithm} {sync}: rank {} allocated {n} times", world.rank());
                    }
                }
            }
            Ok(())
        })
        .unwrap();
}
