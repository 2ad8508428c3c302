//! The sync modes' promises, tested as a user relies on them, for every collective and every
//! algorithm on both devices:
//! - IN_MYSYNC (and IN_ALLSYNC): a late rank's blocks are untouched until it enters, so data
//!   it writes into its source block (and the destination block it resets) just before calling
//!   is what the others see;
//! - OUT_MYSYNC (and OUT_ALLSYNC): a rank that has returned may at once overwrite its own
//!   source and destination blocks without corrupting anyone's result;
//! - chains of calls without user barriers: NOSYNC calls with distinct roots (ranks run ahead
//!   into later calls while others are still in earlier ones), and MYSYNC calls passing data
//!   back and forth between two arrays, with a different algorithm each time.
//!
//! Sleeps only make the interesting interleaving likely; no verdict depends on timing.

mod pgas_common;

use std::time::Duration;

use fastmp::op::Sum;
use fastmp::{DeviceKind, Error};
use pgas_common::{Algorithm, Call, Collective, InSync, OutSync, Sync, Value, diff, permutation, run, splitmix, value};

const NP: usize = 4;
/// Elements per rank for the data movers (exchange and gather_all need NP × LEN per block).
const LEN: usize = 5;
const BLOCK: usize = NP * LEN;

fn nap() {
    std::thread::sleep(Duration::from_millis(15));
}

/// Every (collective, algorithm) with a call that fits blocks of [`BLOCK`], and a sync mode
/// drawn from `syncs` in turn.
fn every_algorithm(syncs: &[Sync]) -> Vec<(Call, Algorithm, Sync)> {
    let mut cases = Vec::new();
    for coll in Collective::ALL {
        let n = if matches!(coll, Collective::Reduce | Collective::PrefixReduce) { NP * BLOCK - 2 } else { LEN };
        for algorithm in coll.algorithms() {
            let k = cases.len();
            cases.push((Call::of(coll, NP, n, k * 3 + 1), algorithm, syncs[k % syncs.len()]));
        }
    }
    cases
}

/// A rank whose blocks the call touches from elsewhere: alternately the root (its source is
/// read by a broadcast or scatter, its destination written by a gather or reduce) and another.
fn late_rank(call: &Call, k: usize) -> usize {
    let root = match *call {
        Call::Broadcast { root, .. } | Call::Scatter { root, .. } | Call::Gather { root, .. } => root,
        Call::Reduce { root, .. } => root,
        _ => 0,
    };
    if k.is_multiple_of(2) { root } else { (root + 1 + k / 2 % (NP - 1)) % NP }
}

/// IN_MYSYNC / IN_ALLSYNC: every rank starts with stale data everywhere; the late rank sleeps,
/// then writes fresh source data and resets its destination block just before calling, the
/// others at once. Any touch of the late rank's blocks before it entered shows in the results.
fn late_rank_blocks_are_untouched_until_it_enters(dev: DeviceKind) {
    let syncs: Vec<Sync> = [Sync::IN_MYSYNC, Sync::IN_ALLSYNC]
        .into_iter()
        .flat_map(|i| [Sync::OUT_MYSYNC, Sync::OUT_ALLSYNC, Sync::OUT_NOSYNC].map(|o| i | o))
        .collect();
    let cases = every_algorithm(&syncs);
    run(dev, NP, |world| {
        let me = world.rank();
        let src = world.shared_array::<u32>(BLOCK)?;
        let dst = world.shared_array::<u32>(BLOCK)?;
        let mut wrong = Vec::new();
        for (k, (call, algorithm, sync)) in cases.iter().enumerate() {
            let (stale, fresh) = (splitmix(k as u64 * 2 + 1), splitmix(k as u64 * 2 + 2));
            dst.force_algorithm(call.collective(), *algorithm)?;
            fill(&src, stale, me)?;
            fill(&dst, stale ^ 1, me)?;
            src.barrier()?;
            if me == late_rank(call, k) {
                nap();
            }
            fill(&src, fresh, me)?;
            dst.local()?.fill(u32::SENTINEL);
            call.invoke(&dst, &src, &Sum, *sync)?;
            if sync.output()? == OutSync::No {
                dst.barrier()?;
            }
            let want = call.expected(me, NP, BLOCK, BLOCK, &|r, i| value(fresh, r, i), &Sum);
            if let Some(d) = diff(&dst.local()?, &want) {
                wrong.push(format!("{call:?} {algorithm} {sync}, late rank {}: {d}", late_rank(call, k)));
            }
        }
        src.barrier()?;
        assert!(wrong.is_empty(), "{dev:?} rank {me}: {wrong:#?}");
        dst.free()?;
        src.free()
    })
    .unwrap();
}

/// OUT_MYSYNC / OUT_ALLSYNC: the moment a call returns, the rank keeps a copy of its result and
/// overwrites its own source and destination blocks; one rank (a different one each time)
/// enters late so that the others return first. Every kept result must be right.
fn early_returners_may_reuse_their_blocks(dev: DeviceKind) {
    let syncs: Vec<Sync> = [Sync::IN_ALLSYNC, Sync::IN_MYSYNC, Sync::IN_NOSYNC]
        .into_iter()
        .flat_map(|i| [Sync::OUT_MYSYNC, Sync::OUT_ALLSYNC, Sync::OUT_MYSYNC].map(|o| i | o))
        .collect();
    let cases = every_algorithm(&syncs);
    run(dev, NP, |world| {
        let me = world.rank();
        let src = world.shared_array::<u32>(BLOCK)?;
        let dst = world.shared_array::<u32>(BLOCK)?;
        let mut wrong = Vec::new();
        for (k, (call, algorithm, sync)) in cases.iter().enumerate() {
            let seed = splitmix(k as u64 + 77);
            dst.force_algorithm(call.collective(), *algorithm)?;
            fill(&src, seed, me)?;
            dst.local()?.fill(u32::SENTINEL);
            if sync.input()? == InSync::No {
                src.barrier()?;
            }
            if me == late_rank(call, k + 1) {
                nap();
            }
            call.invoke(&dst, &src, &Sum, *sync)?;
            let kept = dst.local()?.to_vec();
            fill(&src, !seed, me)?;
            fill(&dst, !seed, me)?;
            let want = call.expected(me, NP, BLOCK, BLOCK, &|r, i| value(seed, r, i), &Sum);
            if let Some(d) = diff(&kept, &want) {
                wrong.push(format!("{call:?} {algorithm} {sync}: {d}"));
            }
            dst.barrier()?;
        }
        assert!(wrong.is_empty(), "{dev:?} rank {me}: {wrong:#?}");
        dst.free()?;
        src.free()
    })
    .unwrap();
}

/// Rounds of one call per root with no barrier between them: gathers (even roots) and
/// reductions (odd roots) write only their root's block, so the calls of a round are
/// independent and every sync mode is legal, IN_NOSYNC and OUT_NOSYNC included; ranks race
/// ahead into later calls while others are still in earlier ones. Algorithms and modes change
/// every call; a barrier ends each round before the check.
fn nosync_chains_with_distinct_roots(dev: DeviceKind) {
    const ROUNDS: usize = 6;
    run(dev, NP, |world| {
        let me = world.rank();
        let src = world.shared_array::<u32>(BLOCK)?;
        let dst = world.shared_array::<u32>(BLOCK)?;
        let gathers = Collective::Gather.algorithms();
        let reduces = Collective::Reduce.algorithms();
        for round in 0..ROUNDS {
            let seed = splitmix(round as u64 + 1000);
            fill(&src, seed, me)?;
            dst.local()?.fill(u32::SENTINEL);
            src.barrier()?;
            let mut mine = None;
            for root in (0..NP).map(|r| (r + round) % NP) {
                let pick = round * NP + root;
                let sync = Sync::EVERY[(pick * 5) % Sync::EVERY.len()];
                let call = if root % 2 == 0 {
                    dst.force_algorithm(Collective::Gather, gathers[pick % gathers.len()])?;
                    Call::Gather { root, len: LEN }
                } else {
                    dst.force_algorithm(Collective::Reduce, reduces[pick % reduces.len()])?;
                    Call::Reduce { root, nelems: NP * BLOCK - round }
                };
                if me == (round + root) % NP {
                    std::thread::yield_now();
                }
                call.invoke(&dst, &src, &Sum, sync)?;
                if root == me {
                    mine = Some(call);
                }
            }
            dst.barrier()?;
            let call = mine.expect("one call per root");
            let want = call.expected(me, NP, BLOCK, BLOCK, &|r, i| value(seed, r, i), &Sum);
            if let Some(d) = diff(&dst.local()?, &want) {
                return Err(Error::other(format!("{dev:?} round {round} rank {me}: {call:?}: {d}")));
            }
        }
        dst.free()?;
        src.free()
    })
    .unwrap();
}

/// Data passes back and forth between two arrays through permutes, exchanges, broadcasts and
/// scatters with IN_MYSYNC/IN_ALLSYNC × OUT_MYSYNC/OUT_ALLSYNC and no user barrier: legal,
/// since a rank enters the next call only after the last one stopped touching its blocks, and
/// the next call touches only blocks of ranks that have entered it. Checked once at the end
/// against the same sequence applied sequentially.
fn mysync_ping_pong_without_barriers(dev: DeviceKind) {
    const CALLS: usize = 40;
    let syncs = [Sync::MY, Sync::IN_MYSYNC | Sync::OUT_ALLSYNC, Sync::IN_ALLSYNC | Sync::OUT_MYSYNC, Sync::ALL];
    let colls =
        [Collective::Permute, Collective::Exchange, Collective::Permute, Collective::Broadcast, Collective::Scatter];
    let plan: Vec<(Call, Algorithm, Sync)> = (0..CALLS)
        .map(|k| {
            let coll = colls[k % colls.len()];
            let algs = coll.algorithms();
            let call = match coll {
                Collective::Permute => Call::Permute { perm: permutation(NP, k as u64 + 5), len: BLOCK },
                Collective::Exchange => Call::Exchange { len: LEN },
                Collective::Broadcast => Call::Broadcast { root: k % NP, len: BLOCK - k % 3 },
                _ => Call::Scatter { root: (k + 1) % NP, len: LEN },
            };
            (call, algs[(k / colls.len()) % algs.len()], syncs[k % syncs.len()])
        })
        .collect();
    // The sequential model: every rank's block of both arrays.
    let mut model = [
        (0..NP).map(|r| (0..BLOCK).map(|i| value::<u32>(9, r, i)).collect()).collect::<Vec<Vec<u32>>>(),
        vec![vec![0; BLOCK]; NP],
    ];
    for (k, (call, _, _)) in plan.iter().enumerate() {
        let (from, to) = (k % 2, 1 - k % 2);
        let next: Vec<Vec<u32>> = (0..NP)
            .map(|r| {
                let mut block = call.expected(r, NP, BLOCK, BLOCK, &|q, i| model[from][q][i], &Sum);
                for (b, old) in block.iter_mut().zip(&model[to][r]) {
                    if *b == u32::SENTINEL {
                        *b = *old;
                    }
                }
                block
            })
            .collect();
        model[to] = next;
    }
    run(dev, NP, |world| {
        let me = world.rank();
        let arrays = [world.shared_array::<u32>(BLOCK)?, world.shared_array::<u32>(BLOCK)?];
        fill(&arrays[0], 9, me)?;
        arrays[0].barrier()?;
        for (k, (call, algorithm, sync)) in plan.iter().enumerate() {
            let (src, dst) = (&arrays[k % 2], &arrays[1 - k % 2]);
            dst.force_algorithm(call.collective(), *algorithm)?;
            if (k + me) % 3 == 0 {
                std::thread::yield_now();
            }
            call.invoke(dst, src, &Sum, *sync)?;
        }
        arrays[0].barrier()?;
        for (a, array) in arrays.iter().enumerate() {
            if let Some(d) = diff(&array.local()?, &model[a][me]) {
                return Err(Error::other(format!("{dev:?} rank {me}, array {a} after {CALLS} calls: {d}")));
            }
        }
        let [a, b] = arrays;
        a.free()?;
        b.free()
    })
    .unwrap();
}

/// Fills this rank's block of `array` with the values of `seed`.
fn fill(array: &pgas_common::SharedArray<u32>, seed: u64, me: usize) -> fastmp::Result<()> {
    for (i, v) in array.local()?.iter_mut().enumerate() {
        *v = value(seed, me, i);
    }
    Ok(())
}

mod shm {
    use fastmp::DeviceKind::Shm;
    #[test]
    fn late_rank_blocks_are_untouched_until_it_enters() {
        super::late_rank_blocks_are_untouched_until_it_enters(Shm)
    }
    #[test]
    fn early_returners_may_reuse_their_blocks() {
        super::early_returners_may_reuse_their_blocks(Shm)
    }
    #[test]
    fn nosync_chains_with_distinct_roots() {
        super::nosync_chains_with_distinct_roots(Shm)
    }
    #[test]
    fn mysync_ping_pong_without_barriers() {
        super::mysync_ping_pong_without_barriers(Shm)
    }
}

mod tcp {
    use fastmp::DeviceKind::Tcp;
    #[test]
    fn late_rank_blocks_are_untouched_until_it_enters() {
        super::late_rank_blocks_are_untouched_until_it_enters(Tcp)
    }
    #[test]
    fn early_returners_may_reuse_their_blocks() {
        super::early_returners_may_reuse_their_blocks(Tcp)
    }
    #[test]
    fn nosync_chains_with_distinct_roots() {
        super::nosync_chains_with_distinct_roots(Tcp)
    }
    #[test]
    fn mysync_ping_pong_without_barriers() {
        super::mysync_ping_pong_without_barriers(Tcp)
    }
}

mod hybrid {
    use fastmp::DeviceKind::Hybrid;
    #[test]
    fn late_rank_blocks_are_untouched_until_it_enters() {
        super::late_rank_blocks_are_untouched_until_it_enters(Hybrid)
    }
    #[test]
    fn early_returners_may_reuse_their_blocks() {
        super::early_returners_may_reuse_their_blocks(Hybrid)
    }
    #[test]
    fn nosync_chains_with_distinct_roots() {
        super::nosync_chains_with_distinct_roots(Hybrid)
    }
    #[test]
    fn mysync_ping_pong_without_barriers() {
        super::mysync_ping_pong_without_barriers(Hybrid)
    }
}
