//! The eight PGAS collectives against their sequential reference (`pgas_common::Call::expected`):
//! every algorithm a collective lists in `Collective::algorithms()` (forced on the destination
//! array) × every sync mode (`Sync::EVERY`) × sizes 0, 1 and 7 elements, at np 1, 2, 3 and 5
//! on shm and np 2, 3 and 5 on tcp (thread ranks over loopback); sizes above the 32 KiB
//! pipeline chunk for every algorithm (a sample of the sync modes) at np 3 on both devices; np 8
//! and 16 for every algorithm (a sample of the sync modes) on shm. Each job runs its cases back
//! to back on one pair of arrays, with new data, roots and permutations each time, so it also
//! checks that calls with different algorithms and sync modes do not mix their semaphores.

mod pgas_common;

use fastmp::DeviceKind;
use fastmp::op::Sum;
use pgas_common::{Call, Case, Collective, full_cross, run_cases, sampled};

/// u32 elements: sizes 0, 4 and 28 bytes per block.
const SMALL: [usize; 3] = [0, 1, 7];
/// 68 000 bytes (u32): three static chunks (the last partial), two dynamic halves.
const LARGE: usize = 17_000;

/// Block length for the data movers at `np` ranks with at most `n` elements per rank (exchange
/// and gather_all need `np * n`), and the sizes to test: elements per rank for the data movers,
/// elements of the whole array for the reductions (empty, one, ending inside the last block,
/// the whole array).
fn plan(coll: Collective, np: usize, sizes: &[usize]) -> (usize, Vec<usize>) {
    let max = sizes.iter().copied().max().unwrap_or(0);
    let block = (np * max).max(1);
    match coll {
        Collective::Reduce | Collective::PrefixReduce => {
            let whole = np * block;
            (block, vec![0, 1, whole - block.min(3), whole])
        }
        _ => (block, sizes.to_vec()),
    }
}

fn small(dev: DeviceKind, coll: Collective) {
    let nps: &[usize] = if dev != DeviceKind::Shm { &[2, 3, 5] } else { &[1, 2, 3, 5] };
    for &np in nps {
        let (block, sizes) = plan(coll, np, &SMALL);
        run_cases::<u32, _>(dev, np, block, &full_cross(coll, np, &sizes), Sum);
    }
}

fn large(dev: DeviceKind, coll: Collective) {
    let np = 3;
    let (block, sizes) = plan(coll, np, &[LARGE]);
    let sizes: Vec<usize> = sizes.into_iter().filter(|&n| n > 1).collect();
    run_cases::<u32, _>(dev, np, block, &sampled(coll, np, &sizes), Sum);
}

fn many_ranks(coll: Collective) {
    for np in [8, 16] {
        let (block, sizes) = plan(coll, np, &[1, 7]);
        let sizes: Vec<usize> = sizes.into_iter().filter(|&n| n > 0).collect();
        run_cases::<u32, _>(DeviceKind::Shm, np, block, &sampled(coll, np, &sizes), Sum);
    }
}

/// The library's own choice (no forced algorithm) at a few sizes, including one above the
/// pipeline chunk, under the default sync mode.
fn defaults(dev: DeviceKind) {
    let np = 4;
    let mut cases = Vec::new();
    for coll in Collective::ALL {
        for n in [1, 7, LARGE / 4] {
            let n = if matches!(coll, Collective::Reduce | Collective::PrefixReduce) { n * 3 } else { n };
            cases.push(Case { call: Call::of(coll, np, n, cases.len()), algorithm: None, sync: Default::default() });
        }
    }
    run_cases::<u32, _>(dev, np, np * LARGE / 4, &cases, Sum);
}

/// 3-byte elements (block boundaries and chunk ends at odd byte offsets) for the six data
/// movers at np 3: sizes of 3, 33 and 33 003 bytes (above the static chunk, odd halves).
fn odd_element_size(dev: DeviceKind) {
    let np = 3;
    let never = fastmp::op::UserOp::commutative(|_: &[[u8; 3]], _: &mut [[u8; 3]]| unreachable!("no reduction"));
    let movers = &Collective::ALL[..6];
    let cases: Vec<Case> = movers.iter().flat_map(|&coll| sampled(coll, np, &[1, 11, 11_001])).collect();
    run_cases::<[u8; 3], _>(dev, np, np * 11_001, &cases, never);
}

macro_rules! suite {
    ($($name:ident: $coll:ident),* $(,)?) => {
        mod shm {
            $(mod $name {
                #[test]
                fn every_algorithm_and_sync_small() {
                    crate::small(fastmp::DeviceKind::Shm, crate::Collective::$coll)
                }
                #[test]
                fn every_algorithm_above_the_pipeline_chunk() {
                    crate::large(fastmp::DeviceKind::Shm, crate::Collective::$coll)
                }
                #[test]
                fn every_algorithm_at_8_and_16_ranks() {
                    crate::many_ranks(crate::Collective::$coll)
                }
            })*
            #[test]
            fn default_selection() {
                crate::defaults(fastmp::DeviceKind::Shm)
            }
            #[test]
            fn odd_element_size() {
                crate::odd_element_size(fastmp::DeviceKind::Shm)
            }
        }
        mod tcp {
            $(mod $name {
                #[test]
                fn every_algorithm_and_sync_small() {
                    crate::small(fastmp::DeviceKind::Tcp, crate::Collective::$coll)
                }
                #[test]
                fn every_algorithm_above_the_pipeline_chunk() {
                    crate::large(fastmp::DeviceKind::Tcp, crate::Collective::$coll)
                }
            })*
            #[test]
            fn default_selection() {
                crate::defaults(fastmp::DeviceKind::Tcp)
            }
            #[test]
            fn odd_element_size() {
                crate::odd_element_size(fastmp::DeviceKind::Tcp)
            }
        }
        // Hybrid (two processes of thread ranks): the small sweep only, the large one is
        // tcp's path between processes again.
        mod hybrid {
            $(mod $name {
                #[test]
                fn every_algorithm_and_sync_small() {
                    crate::small(fastmp::DeviceKind::Hybrid, crate::Collective::$coll)
                }
            })*
            #[test]
            fn default_selection() {
                crate::defaults(fastmp::DeviceKind::Hybrid)
            }
            #[test]
            fn odd_element_size() {
                crate::odd_element_size(fastmp::DeviceKind::Hybrid)
            }
        }
    };
}

suite!(
    broadcast: Broadcast,
    scatter: Scatter,
    gather: Gather,
    gather_all: GatherAll,
    exchange: Exchange,
    permute: Permute,
    reduce: Reduce,
    prefix_reduce: PrefixReduce,
);
