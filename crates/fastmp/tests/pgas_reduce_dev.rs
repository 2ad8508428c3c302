//! The "reduce" part of the PGAS collectives (exchange, permute, reduce, prefix_reduce) against
//! sequential references: every algorithm `Collective::algorithms()` lists × the nine sync
//! modes × np ∈ {1, 2, 3, 5, 8} × nelems/len ∈ {0, 1, a partial last block, all}, with a
//! commutative and a non-commutative operation, on shm and tcp thread ranks; argument errors on
//! every rank, with the team still usable afterwards.
//!
//! MYSYNC is checked for what it promises: under IN_MYSYNC every rank resets its destination
//! right before entering and no barrier separates that from the peers' transfers (an early
//! write would be overwritten and the check fails); under OUT_MYSYNC a rank checks its own
//! destination as soon as it returns, with no barrier.

#[path = "watchdog/mod.rs"]
mod watchdog;

use fastmp::op::{Band, Bor, Bxor, Land, Lor, Lxor, Max, Min, Op, Prod, Sum, UserOp};
use fastmp::pgas::{self, Collective, InSync, OutSync, SharedArray, Sync};
use fastmp::{Comm, Config, DeviceKind, Error, Result};
use watchdog::watchdog;

const NPS: [usize; 5] = [1, 2, 3, 5, 8];
const DEVICES: [DeviceKind; 3] = [DeviceKind::Shm, DeviceKind::Tcp, DeviceKind::Hybrid];

/// One job under the shared watchdog.
fn job(dev: DeviceKind, np: usize, f: impl Fn(&Comm) -> Result<()> + std::marker::Sync) {
    let what = format!("{dev:?} np={np}");
    let _watchdog = watchdog(what.clone());
    Config::new().device(dev).np(np).run(|w| f(&w)).unwrap_or_else(|e| panic!("{what}: {e}"));
}

fn every_job(f: impl Fn(&Comm) -> Result<()> + std::marker::Sync) {
    for dev in DEVICES {
        for np in NPS {
            job(dev, np, &f);
        }
    }
}

/// Affine maps `x ↦ a·x + b` composed left to right: associative, not commutative.
type Affine = [u64; 2];

fn compose() -> impl Op<Affine> {
    UserOp::non_commutative(|lower: &[Affine], upper: &mut [Affine]| {
        for (l, u) in lower.iter().zip(upper.iter_mut()) {
            *u = [l[0].wrapping_mul(u[0]), l[1].wrapping_mul(u[0]).wrapping_add(u[1])];
        }
    })
}

fn add() -> impl Op<Affine> {
    UserOp::commutative(|lower: &[Affine], upper: &mut [Affine]| {
        for (l, u) in lower.iter().zip(upper.iter_mut()) {
            *u = [l[0].wrapping_add(u[0]), l[1].wrapping_add(u[1])];
        }
    })
}

/// Global element `g`.
fn value(g: usize) -> Affine {
    [g as u64 * 2 + 3, g as u64 * 7 + 1]
}

/// `xs[0] ∘ … ∘ xs[n-1]` sequentially.
fn fold<T: Copy>(op: &impl Op<T>, xs: &[T]) -> Option<T> {
    let (&first, rest) = xs.split_first()?;
    Some(rest.iter().fold(first, |acc, &x| {
        let mut out = [x];
        op.combine(&[acc], &mut out);
        out[0]
    }))
}

/// 0, 1, a partial last block, all (those that exist), deduplicated.
fn counts(block: usize, np: usize) -> Vec<usize> {
    let mut out = vec![0, 1, block * (np - 1) + block / 2 + 1, block * np];
    out.retain(|&n| n <= block * np);
    out.sort_unstable();
    out.dedup();
    out
}

const SENTINEL: Affine = [u64::MAX, 12345];

fn fill_src(src: &SharedArray<Affine>, me: usize) -> Result<()> {
    let block = src.block_len();
    src.local()?.iter_mut().enumerate().for_each(|(i, x)| *x = value(me * block + i));
    src.barrier()
}

fn reduce_all_ways(world: &Comm, op: &impl Op<Affine>) -> Result<()> {
    const B: usize = 3;
    let (me, np) = (world.rank(), world.size());
    let src = world.shared_array::<Affine>(B)?;
    let dst = world.shared_array::<Affine>(2)?;
    fill_src(&src, me)?;
    let all: Vec<Affine> = (0..B * np).map(value).collect();
    for alg in Collective::Reduce.algorithms() {
        dst.force_algorithm(Collective::Reduce, alg)?;
        for sync in Sync::EVERY {
            for nelems in counts(B, np) {
                for root in [0, np / 2, np - 1] {
                    dst.local()?.fill(SENTINEL);
                    pgas::reduce(&dst, &src, root, nelems, op, sync)?;
                    if me == root {
                        let expect = fold(op, &all[..nelems]).unwrap_or(SENTINEL);
                        assert_eq!(dst.local()?[0], expect, "reduce {alg} {sync} nelems {nelems} root {root} np {np}");
                        assert_eq!(dst.local()?[1], SENTINEL, "reduce wrote beyond element 0");
                    }
                }
            }
        }
    }
    Ok(())
}

fn prefix_all_ways(world: &Comm, op: &impl Op<Affine>) -> Result<()> {
    const B: usize = 3;
    let (me, np) = (world.rank(), world.size());
    let src = world.shared_array::<Affine>(B)?;
    let dst = world.shared_array::<Affine>(B)?;
    fill_src(&src, me)?;
    let all: Vec<Affine> = (0..B * np).map(value).collect();
    for alg in Collective::PrefixReduce.algorithms() {
        dst.force_algorithm(Collective::PrefixReduce, alg)?;
        for sync in Sync::EVERY {
            for nelems in counts(B, np) {
                dst.local()?.fill(SENTINEL);
                pgas::prefix_reduce(&dst, &src, nelems, op, sync)?;
                let expect: Vec<Affine> = (me * B..(me + 1) * B)
                    .map(|g| if g < nelems { fold(op, &all[..=g]).unwrap() } else { SENTINEL })
                    .collect();
                assert_eq!(*dst.local()?, expect[..], "prefix_reduce {alg} {sync} nelems {nelems} np {np} rank {me}");
            }
        }
    }
    Ok(())
}

#[test]
fn reduce_every_algorithm_sync_and_count_non_commutative() {
    every_job(|w| reduce_all_ways(w, &compose()));
}

#[test]
fn reduce_every_algorithm_sync_and_count_commutative() {
    every_job(|w| reduce_all_ways(w, &add()));
}

#[test]
fn prefix_reduce_every_algorithm_sync_and_count_non_commutative() {
    every_job(|w| prefix_all_ways(w, &compose()));
}

#[test]
fn prefix_reduce_every_algorithm_sync_and_count_commutative() {
    every_job(|w| prefix_all_ways(w, &add()));
}

/// Resets `dst` for a call under `sync` (a barrier after the reset where IN_NOSYNC lets peers
/// write at once), makes it, and returns once this rank's `dst` may be checked (a barrier where
/// OUT_NOSYNC lets peers still write).
fn call(dst: &SharedArray<u32>, sync: Sync, f: impl FnOnce() -> Result<()>) -> Result<()> {
    let (input, output) = sync.modes()?;
    dst.local()?.fill(u32::MAX);
    if input == InSync::No {
        dst.barrier()?;
    }
    f()?;
    if output == OutSync::No { dst.barrier() } else { Ok(()) }
}

/// Element `e` of rank `r`'s source block.
fn tagged(r: usize, e: usize) -> u32 {
    (r * 10_000 + e) as u32
}

#[test]
fn exchange_every_algorithm_sync_and_len() {
    every_job(|world| {
        let (me, np) = (world.rank(), world.size());
        const L: usize = 3;
        let src = world.shared_array::<u32>(np * L + 1)?;
        let dst = world.shared_array::<u32>(np * L + 2)?;
        src.local()?.iter_mut().enumerate().for_each(|(e, x)| *x = tagged(me, e));
        src.barrier()?;
        for alg in Collective::Exchange.algorithms() {
            dst.force_algorithm(Collective::Exchange, alg)?;
            for sync in Sync::EVERY {
                for len in [0, 1, L] {
                    call(&dst, sync, || pgas::exchange(&dst, &src, len, sync))?;
                    let got = dst.local()?.to_vec();
                    for (e, &x) in got.iter().enumerate() {
                        // Slot j (= e / len) came from slot me of rank j.
                        let expect = if e < np * len { tagged(e / len, me * len + e % len) } else { u32::MAX };
                        assert_eq!(x, expect, "exchange {alg} {sync} len {len} np {np}: rank {me} element {e}");
                    }
                }
            }
        }
        Ok(())
    });
}

#[test]
fn permute_every_algorithm_sync_and_len() {
    every_job(|world| {
        let (me, np) = (world.rank(), world.size());
        const B: usize = 4;
        let src = world.shared_array::<u32>(B)?;
        let dst = world.shared_array::<u32>(B)?;
        src.local()?.iter_mut().enumerate().for_each(|(k, x)| *x = tagged(me, k));
        src.barrier()?;
        let perms: [Vec<usize>; 3] =
            [(0..np).collect(), (0..np).map(|i| (i + 1) % np).collect(), (0..np).rev().collect()];
        for alg in Collective::Permute.algorithms() {
            dst.force_algorithm(Collective::Permute, alg)?;
            for sync in Sync::EVERY {
                for perm in &perms {
                    for len in [0, 1, B] {
                        call(&dst, sync, || pgas::permute(&dst, &src, perm, len, sync))?;
                        let from = perm.iter().position(|&p| p == me).unwrap();
                        let expect: Vec<u32> =
                            (0..B).map(|k| if k < len { tagged(from, k) } else { u32::MAX }).collect();
                        assert_eq!(*dst.local()?, expect[..], "permute {alg} {sync} {perm:?} len {len}: rank {me}");
                    }
                }
            }
        }
        Ok(())
    });
}

fn expect_invalid<T: std::fmt::Debug>(r: Result<T>, words: &[&str]) {
    match r {
        Err(Error::InvalidArgument(m)) => {
            for w in words {
                assert!(m.contains(w), "{m:?} lacks {w:?}");
            }
        }
        other => panic!("expected InvalidArgument naming {words:?}, got {other:?}"),
    }
}

#[test]
fn bad_arguments_fail_on_every_rank_and_leave_the_arrays_usable() {
    for dev in DEVICES {
        job(dev, 3, |world| {
            let a = world.shared_array::<u64>(3)?;
            let b = world.shared_array::<u64>(3)?;
            let c = world.shared_array::<u64>(2)?;
            expect_invalid(pgas::exchange(&a, &b, 2, Sync::ALL), &["exchange", "len 2"]);
            expect_invalid(pgas::exchange(&a, &c, 1, Sync::ALL), &["exchange", "source"]);
            expect_invalid(pgas::exchange(&a, &a, 1, Sync::ALL), &["exchange", "different arrays"]);
            expect_invalid(pgas::permute(&a, &b, &[0, 1], 1, Sync::ALL), &["permute", "2 entries"]);
            expect_invalid(pgas::permute(&a, &b, &[0, 1, 1], 1, Sync::ALL), &["permute", "rank 1 appears twice"]);
            expect_invalid(pgas::permute(&a, &b, &[0, 3, 1], 1, Sync::ALL), &["permute", "perm[1] = 3"]);
            expect_invalid(pgas::permute(&a, &b, &[0, 1, 2], 4, Sync::ALL), &["permute", "len 4"]);
            expect_invalid(pgas::reduce(&a, &b, 3, 1, Sum, Sync::ALL), &["reduce", "root 3"]);
            expect_invalid(pgas::reduce(&a, &b, 0, 10, Sum, Sync::ALL), &["reduce", "nelems 10"]);
            expect_invalid(
                pgas::reduce(&a, &b, 0, 1, Sum, Sync::IN_MYSYNC | Sync::IN_NOSYNC),
                &["reduce", "more than one IN_"],
            );
            expect_invalid(pgas::prefix_reduce(&c, &b, 1, Sum, Sync::ALL), &["prefix_reduce", "block length"]);
            expect_invalid(pgas::prefix_reduce(&a, &b, 10, Sum, Sync::ALL), &["prefix_reduce", "nelems 10"]);
            // Nothing was sent: the arrays still work, with no stray semaphore in the way.
            b.local()?.fill(world.rank() as u64 + 1);
            b.barrier()?;
            pgas::reduce(&a, &b, 1, 9, Sum, Sync::MY)?;
            if world.rank() == 1 {
                assert_eq!(a.local()?[0], 3 * (1 + 2 + 3));
            }
            Ok(())
        });
    }
}

/// Every predefined operation through reduce and prefix_reduce (default algorithms).
#[test]
fn predefined_operations() {
    fn check<O: Op<u64> + Copy>(world: &Comm, src: &SharedArray<u64>, dst: &SharedArray<u64>, op: O) -> Result<()> {
        let np = world.size();
        let all: Vec<u64> = (0..2 * np).map(|g| (g as u64 * 37 + 5) % 11).collect();
        pgas::reduce(dst, src, 0, all.len(), op, Sync::ALL)?;
        if world.rank() == 0 {
            assert_eq!(dst.local()?[0], fold(&op, &all).unwrap());
        }
        pgas::prefix_reduce(dst, src, all.len(), op, Sync::ALL)?;
        let me = world.rank();
        let expect: Vec<u64> = (2 * me..2 * me + 2).map(|g| fold(&op, &all[..=g]).unwrap()).collect();
        assert_eq!(*dst.local()?, expect[..]);
        Ok(())
    }
    for dev in DEVICES {
        job(dev, 3, |world| {
            let src = world.shared_array::<u64>(2)?;
            let dst = world.shared_array::<u64>(2)?;
            let me = world.rank();
            src.local()?.iter_mut().enumerate().for_each(|(i, x)| *x = ((2 * me + i) as u64 * 37 + 5) % 11);
            src.barrier()?;
            check(world, &src, &dst, Sum)?;
            check(world, &src, &dst, Prod)?;
            check(world, &src, &dst, Min)?;
            check(world, &src, &dst, Max)?;
            check(world, &src, &dst, Band)?;
            check(world, &src, &dst, Bor)?;
            check(world, &src, &dst, Bxor)?;
            check(world, &src, &dst, Land)?;
            check(world, &src, &dst, Lor)?;
            check(world, &src, &dst, Lxor)
        });
    }
}

/// Blocks longer than the library's piece of 64 elements: the fold and the scan carry across
/// pieces, in order.
#[test]
fn long_blocks_reduce_and_scan_in_order() {
    const B: usize = 150;
    for dev in DEVICES {
        job(dev, 3, |world| {
            let me = world.rank();
            let src = world.shared_array::<Affine>(B)?;
            let dst = world.shared_array::<Affine>(B)?;
            fill_src(&src, me)?;
            let all: Vec<Affine> = (0..3 * B).map(value).collect();
            let op = compose();
            for nelems in [B - 1, 2 * B + 70, 3 * B] {
                pgas::reduce(&dst, &src, 1, nelems, &op, Sync::ALL)?;
                if me == 1 {
                    assert_eq!(dst.local()?[0], fold(&op, &all[..nelems]).unwrap(), "reduce nelems {nelems}");
                }
                dst.barrier()?;
                pgas::prefix_reduce(&dst, &src, nelems, &op, Sync::ALL)?;
                let got = dst.local()?.to_vec();
                for (i, x) in got.iter().enumerate().take(nelems.saturating_sub(me * B).min(B)) {
                    assert_eq!(*x, fold(&op, &all[..=me * B + i]).unwrap(), "prefix nelems {nelems} rank {me} i {i}");
                }
                dst.barrier()?;
            }
            Ok(())
        });
    }
}

/// A rank that fails instead of joining makes its peers' waits fail: the job ends in an error,
/// never a hang (the watchdog would abort).
#[test]
fn a_rank_failing_mid_collective_fails_its_peers() {
    for dev in DEVICES {
        for coll in ["reduce", "prefix_reduce", "exchange"] {
            let _watchdog = watchdog(format!("{coll} on {dev:?}: peers of a failed rank"));
            let result = Config::new().device(dev).np(4).run(|world| {
                let src = world.shared_array::<u64>(4)?;
                let dst = world.shared_array::<u64>(4)?;
                if world.rank() == 2 {
                    return Err(Error::other("rank 2 gives up"));
                }
                match coll {
                    "reduce" => pgas::reduce(&dst, &src, 0, 16, Sum, Sync::MY),
                    "prefix_reduce" => pgas::prefix_reduce(&dst, &src, 16, Sum, Sync::NO),
                    _ => pgas::exchange(&dst, &src, 1, Sync::MY),
                }
            });
            assert!(result.is_err(), "{coll} on {dev:?}: the job succeeded without rank 2");
        }
    }
}
