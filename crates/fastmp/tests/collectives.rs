//! Collective operations against sequential references.
//!
//! One parameterized suite: for every [`Collective`] and every algorithm it implements (forced
//! through the communicator's tuning), every process count of [`NPS`], sizes of 0, 1 and 3
//! elements plus one of at least 1 MiB whose length is not a multiple of the process count,
//! and several roots. Data is derived from (case, rank, index), so each rank computes the
//! reference on its own; sums use closed forms so references stay O(n) at np = 16.
//! All cases of one collective and process count run inside one job; failures name the
//! collective, algorithm, np, size and root.
//!
//! Further sections: predefined ops and types (and 3/12/24-byte elements), a non-commutative
//! user op, serde objects, full sweeps on reordered sub-communicators, on 33 and 64 ranks and
//! with other eager limits, size-dependent tuning rules, random sequences of calls, buffer reuse
//! right after a call, barrier stress, collectives running concurrently on split / overlapping
//! communicators next to user point-to-point traffic, and argument errors (local, across ranks,
//! overflowing counts, a panicking user op) that must end in `Err`, never in a hang or a panic.
//!
//! Every job runs under a watchdog (`FASTMP_TEST_TIMEOUT_S`, default 120 s) so a hang fails the
//! test instead of blocking.

mod coll_common;
mod common;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytemuck::Pod;
use coll_common::{Context, NPS, algorithms, check_each, forced, job, roots, run_ok, seed_of, val};
use fastmp::coll::{Algorithm, Collective, Rule, Tuning};
use fastmp::op::{Band, Bor, Bxor, Land, Loc, Lor, Max, MaxLoc, Min, MinLoc, Op, Prod, Sum, UserOp};
use fastmp::{ANY_SOURCE, ANY_TAG, Comm, Config, Error, Result};
use serde::{Deserialize, Serialize};

/// Elements (u32) of the large vector case: just over 1 MiB and not a multiple of any np > 1
/// in [`NPS`].
const LARGE: usize = 262_147;
/// Fill of receive space that must not be written (gaps, rank 0's exscan output, ...).
const SENTINEL: u32 = 0xDEAD_BEEF;

/// Per-rank block (elements) of the large case of the block collectives: odd, and the blocks of
/// all ranks together hold at least [`LARGE`] elements.
fn large_block(np: usize) -> usize {
    LARGE.div_ceil(np) | 1
}

/// One checked call, for failure messages.
#[derive(Clone, Copy, Debug)]
struct Case {
    coll: Collective,
    alg: Algorithm,
    np: usize,
    /// Elements: of the whole vector, or of one rank's block for block collectives.
    n: usize,
    root: Option<usize>,
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} with algorithm {}, np={}, n={}", self.coll, self.alg, self.np, self.n)?;
        match self.root {
            Some(root) => write!(f, ", root={root}"),
            None => Ok(()),
        }
    }
}

impl Case {
    fn seed(&self) -> u32 {
        seed_of(&[self.coll as usize, self.alg as usize, self.np, self.n, self.root.unwrap_or(99)])
    }

    fn what(&self, detail: &str) -> impl Fn() -> String + '_ {
        let detail = detail.to_string();
        move || format!("{self}: {detail}")
    }
}

// ---------------------------------------------------------------- counts and displacements

/// Uneven counts of the `v` collectives for size parameter `s`: zero for every rank when `s` is
/// 0, otherwise zero for ranks 1, 4, 7, ... and `s`, `s + 1` or `s + 2` for the others.
fn v_counts(np: usize, s: usize) -> Vec<usize> {
    (0..np).map(|r| if s == 0 || r % 3 == 1 { 0 } else { s + (r * 5) % 3 }).collect()
}

/// Displacements that place the blocks in reverse rank order with a one-element gap before
/// each, and the buffer length (one more gap at the end).
fn v_displs(counts: &[usize]) -> (Vec<usize>, usize) {
    let mut displs = vec![0; counts.len()];
    let mut at = 0;
    for r in (0..counts.len()).rev() {
        at += 1;
        displs[r] = at;
        at += counts[r];
    }
    (displs, at + 1)
}

/// Checks the blocks of a `v` buffer (`block(r, i)` is element `i` of rank `r`'s block) and that
/// the gaps between them still hold [`SENTINEL`].
fn check_v_buffer(
    buf: &[u32],
    counts: &[usize],
    displs: &[usize],
    block: impl Fn(usize, usize) -> u32,
    what: &dyn Fn() -> String,
) {
    let mut owner = vec![None; buf.len()];
    for (r, (&c, &d)) in counts.iter().zip(displs).enumerate() {
        for (i, slot) in owner[d..d + c].iter_mut().enumerate() {
            *slot = Some((r, i));
        }
    }
    check_each(buf, |k| owner[k].map_or(SENTINEL, |(r, i)| block(r, i)), what);
}

/// Count that rank `from` sends to rank `to` in alltoallv: uneven, zero for some pairs.
fn pair_count(s: usize, from: usize, to: usize) -> usize {
    if s == 0 || (from + 2 * to) % 3 == 1 { 0 } else { s + (from + to) % 3 }
}

// ---------------------------------------------------------------- the u32 sum reference

/// Rank `r`'s element `i` in the reduction cases: `a(i) * (r + 1) + r`, so sums over ranks have
/// a closed form.
fn reduce_input(seed: u32, r: usize, i: usize) -> u32 {
    val(seed, 0, i).wrapping_mul(r as u32 + 1).wrapping_add(r as u32)
}

/// Sum of [`reduce_input`] over ranks `0..k` for element `i`.
fn reduce_sum(seed: u32, k: usize, i: usize) -> u32 {
    let k = k as u64;
    let ranks_plus_one = (k * (k + 1) / 2) as u32;
    let ranks = (k * k.saturating_sub(1) / 2) as u32;
    val(seed, 0, i).wrapping_mul(ranks_plus_one).wrapping_add(ranks)
}

fn reduce_inputs(seed: u32, rank: usize, n: usize) -> Vec<u32> {
    (0..n).map(|i| reduce_input(seed, rank, i)).collect()
}

// ---------------------------------------------------------------- one case per collective

/// Sizes of a case: 0, 1, 3 elements, a medium one just past the default eager limit (8 KiB)
/// and the large one.
fn sizes(coll: Collective, np: usize) -> [usize; 5] {
    match coll {
        Collective::Scatter
        | Collective::Gather
        | Collective::Allgather
        | Collective::Alltoall
        | Collective::Scatterv
        | Collective::Gatherv
        | Collective::Allgatherv
        | Collective::Alltoallv => [0, 1, 3, 2053, large_block(np)],
        _ => [0, 1, 3, 2053, LARGE],
    }
}

fn is_rooted(coll: Collective) -> bool {
    matches!(
        coll,
        Collective::Bcast
            | Collective::Scatter
            | Collective::Scatterv
            | Collective::Gather
            | Collective::Gatherv
            | Collective::Reduce
    )
}

/// Runs and checks one case on `comm` (the algorithm already forced). `barriers` counts barrier
/// arrivals of the whole job; `barriers_done` is this rank's number of finished barriers.
fn check_case(comm: &Comm, case: Case, barriers: &AtomicUsize, barriers_done: &mut usize) -> Result<()> {
    let (me, np, n, seed) = (comm.rank(), comm.size(), case.n, case.seed());
    let root = case.root.unwrap_or(0);
    let is_root = me == root;
    match case.coll {
        Collective::Barrier => {
            for _ in 0..3 {
                barriers.fetch_add(1, Ordering::SeqCst);
                comm.barrier().ctx(case.what("barrier"))?;
                *barriers_done += 1;
                let arrived = barriers.load(Ordering::SeqCst);
                assert!(
                    arrived >= np * *barriers_done,
                    "{case}: left barrier {} after only {arrived} arrivals (np={np})",
                    *barriers_done
                );
            }
        }
        Collective::Bcast => {
            let mut buf: Vec<u32> =
                if is_root { (0..n).map(|i| val(seed, root, i)).collect() } else { vec![SENTINEL; n] };
            comm.bcast(&mut buf, root).ctx(case.what("bcast"))?;
            check_each(&buf, |i| val(seed, root, i), &case.what(&format!("bcast result on rank {me}")));
        }
        Collective::Scatter => {
            let send: Vec<u32> =
                if is_root { (0..np * n).map(|k| val(seed, k / n.max(1), k % n.max(1))).collect() } else { Vec::new() };
            let mut recv = vec![SENTINEL; n];
            comm.scatter(&send, &mut recv, root).ctx(case.what("scatter"))?;
            check_each(&recv, |i| val(seed, me, i), &case.what(&format!("scatter block on rank {me}")));
        }
        Collective::Gather => {
            let send: Vec<u32> = (0..n).map(|i| val(seed, me, i)).collect();
            let mut recv = vec![SENTINEL; if is_root { np * n } else { 0 }];
            comm.gather(&send, &mut recv, root).ctx(case.what("gather"))?;
            check_each(&recv, |k| val(seed, k / n, k % n), &case.what("gather result at the root"));
        }
        Collective::Allgather => {
            let send: Vec<u32> = (0..n).map(|i| val(seed, me, i)).collect();
            let mut recv = vec![SENTINEL; np * n];
            comm.allgather(&send, &mut recv).ctx(case.what("allgather"))?;
            check_each(&recv, |k| val(seed, k / n, k % n), &case.what(&format!("allgather result on rank {me}")));
        }
        Collective::Alltoall => {
            let send: Vec<u32> = (0..np * n).map(|k| val(seed, me * np + k / n, k % n)).collect();
            let mut recv = vec![SENTINEL; np * n];
            comm.alltoall(&send, &mut recv).ctx(case.what("alltoall"))?;
            check_each(
                &recv,
                |k| val(seed, (k / n) * np + me, k % n),
                &case.what(&format!("alltoall result on rank {me}")),
            );
        }
        Collective::Scatterv => {
            let counts = v_counts(np, n);
            let (displs, len) = v_displs(&counts);
            let mut send = vec![SENTINEL; if is_root { len } else { 0 }];
            if is_root {
                for r in 0..np {
                    for i in 0..counts[r] {
                        send[displs[r] + i] = val(seed, r, i);
                    }
                }
            }
            let mut recv = vec![SENTINEL; counts[me]];
            // Counts and displacements are only read at the root.
            let (c, d): (&[usize], &[usize]) = if is_root { (&counts, &displs) } else { (&[], &[]) };
            comm.scatterv(&send, c, d, &mut recv, root).ctx(case.what("scatterv"))?;
            check_each(&recv, |i| val(seed, me, i), &case.what(&format!("scatterv block on rank {me}")));
        }
        Collective::Gatherv => {
            let counts = v_counts(np, n);
            let (displs, len) = v_displs(&counts);
            let send: Vec<u32> = (0..counts[me]).map(|i| val(seed, me, i)).collect();
            let mut recv = vec![SENTINEL; if is_root { len } else { 0 }];
            let (c, d): (&[usize], &[usize]) = if is_root { (&counts, &displs) } else { (&[], &[]) };
            comm.gatherv(&send, &mut recv, c, d, root).ctx(case.what("gatherv"))?;
            if is_root {
                check_v_buffer(
                    &recv,
                    &counts,
                    &displs,
                    |r, i| val(seed, r, i),
                    &case.what("gatherv result at the root"),
                );
            }
        }
        Collective::Allgatherv => {
            let counts = v_counts(np, n);
            let (displs, len) = v_displs(&counts);
            let send: Vec<u32> = (0..counts[me]).map(|i| val(seed, me, i)).collect();
            let mut recv = vec![SENTINEL; len];
            comm.allgatherv(&send, &mut recv, &counts, &displs).ctx(case.what("allgatherv"))?;
            let what = case.what(&format!("allgatherv result on rank {me}"));
            check_v_buffer(&recv, &counts, &displs, |r, i| val(seed, r, i), &what);
        }
        Collective::Alltoallv => {
            let send_counts: Vec<usize> = (0..np).map(|to| pair_count(n, me, to)).collect();
            let recv_counts: Vec<usize> = (0..np).map(|from| pair_count(n, from, me)).collect();
            let (send_displs, send_len) = v_displs(&send_counts);
            let (recv_displs, recv_len) = v_displs(&recv_counts);
            let mut send = vec![SENTINEL; send_len];
            for to in 0..np {
                for i in 0..send_counts[to] {
                    send[send_displs[to] + i] = val(seed, me * np + to, i);
                }
            }
            let mut recv = vec![SENTINEL; recv_len];
            comm.alltoallv(&send, &send_counts, &send_displs, &mut recv, &recv_counts, &recv_displs)
                .ctx(case.what("alltoallv"))?;
            let what = case.what(&format!("alltoallv result on rank {me}"));
            check_v_buffer(&recv, &recv_counts, &recv_displs, |from, i| val(seed, from * np + me, i), &what);
        }
        Collective::Reduce => {
            let send = reduce_inputs(seed, me, n);
            let mut recv = vec![SENTINEL; if is_root { n } else { 0 }];
            comm.reduce(&send, &mut recv, Sum, root).ctx(case.what("reduce"))?;
            check_each(&recv, |i| reduce_sum(seed, np, i), &case.what("reduce result at the root"));
        }
        Collective::Allreduce => {
            let send = reduce_inputs(seed, me, n);
            let mut recv = vec![SENTINEL; n];
            comm.allreduce(&send, &mut recv, Sum).ctx(case.what("allreduce"))?;
            check_each(&recv, |i| reduce_sum(seed, np, i), &case.what(&format!("allreduce result on rank {me}")));
        }
        Collective::ReduceScatter => {
            // Uneven counts (zero for some ranks) adding up to about `n`, then equal blocks of
            // `n / np` (rounded up) with reduce_scatter_block.
            let counts = v_counts(np, (2 * n).div_ceil(np));
            let total: usize = counts.iter().sum();
            let start: usize = counts[..me].iter().sum();
            let send = reduce_inputs(seed, me, total);
            let mut recv = vec![SENTINEL; counts[me]];
            comm.reduce_scatter(&send, &mut recv, &counts, Sum)
                .ctx(case.what(&format!("reduce_scatter {counts:?}")))?;
            let what = case.what(&format!("reduce_scatter block of rank {me}, counts {counts:?}"));
            check_each(&recv, |i| reduce_sum(seed, np, start + i), &what);

            let block = n.div_ceil(np);
            let send = reduce_inputs(seed, me, block * np);
            let mut recv = vec![SENTINEL; block];
            comm.reduce_scatter_block(&send, &mut recv, Sum).ctx(case.what("reduce_scatter_block"))?;
            let what = case.what(&format!("reduce_scatter_block (block {block}) result on rank {me}"));
            check_each(&recv, |i| reduce_sum(seed, np, me * block + i), &what);
        }
        Collective::Scan => {
            let send = reduce_inputs(seed, me, n);
            let mut recv = vec![SENTINEL; n];
            comm.scan(&send, &mut recv, Sum).ctx(case.what("scan"))?;
            check_each(&recv, |i| reduce_sum(seed, me + 1, i), &case.what(&format!("scan result on rank {me}")));

            let mut recv = vec![SENTINEL; n];
            comm.exscan(&send, &mut recv, Sum).ctx(case.what("exscan"))?;
            let what = case.what(&format!("exscan result on rank {me} (rank 0's must be untouched)"));
            check_each(&recv, |i| if me == 0 { SENTINEL } else { reduce_sum(seed, me, i) }, &what);
        }
    }
    Ok(())
}

/// Every algorithm of `coll`, every size and root, on `np` ranks in one job.
fn check_collective_on(coll: Collective, np: usize) {
    let barriers = Arc::new(AtomicUsize::new(0));
    run_ok(np, &format!("{coll} suite"), move |world| {
        let mut barriers_done = 0;
        for alg in algorithms(coll) {
            let comm = forced(&world, coll, alg)?;
            assert_eq!(comm.algorithm_for(coll, 0, true), alg, "{coll}: forcing {alg} did not select it");
            for n in sizes(coll, np) {
                let case_roots = if is_rooted(coll) { roots(np).into_iter().map(Some).collect() } else { vec![None] };
                for root in case_roots {
                    check_case(&comm, Case { coll, alg, np, n, root }, &barriers, &mut barriers_done)?;
                }
            }
        }
        Ok(())
    });
}

fn check_collective(coll: Collective) {
    for np in NPS {
        check_collective_on(coll, np);
    }
}

macro_rules! every_collective {
    ($($test:ident => $coll:ident),+ $(,)?) => {
        $(
            #[test]
            fn $test() {
                check_collective(Collective::$coll);
            }
        )+

        /// The tests above cover every collective there is.
        #[test]
        fn suite_covers_every_collective() {
            assert_eq!([$(Collective::$coll),+], Collective::ALL);
        }
    };
}

every_collective! {
    barrier_every_algorithm => Barrier,
    bcast_every_algorithm => Bcast,
    scatter_every_algorithm => Scatter,
    scatterv_every_algorithm => Scatterv,
    gather_every_algorithm => Gather,
    gatherv_every_algorithm => Gatherv,
    allgather_every_algorithm => Allgather,
    allgatherv_every_algorithm => Allgatherv,
    alltoall_every_algorithm => Alltoall,
    alltoallv_every_algorithm => Alltoallv,
    reduce_every_algorithm => Reduce,
    allreduce_every_algorithm => Allreduce,
    reduce_scatter_every_algorithm => ReduceScatter,
    scan_every_algorithm => Scan,
}

// ---------------------------------------------------------------- ops, types, combining order

/// `x0 ∘ x1 ∘ … ∘ x(k-1)` element-wise, combined strictly in rank order with `op` itself: the
/// sequential reference for any op, commutative or not. Empty for `k == 0`.
fn fold_ranks<T: Pod, O: Op<T>>(op: &O, input: &dyn Fn(usize, usize) -> T, k: usize, n: usize) -> Vec<T> {
    let mut acc: Vec<T> = Vec::new();
    for r in 0..k {
        let mut next: Vec<T> = (0..n).map(|i| input(r, i)).collect();
        if r > 0 {
            op.combine(&acc, &mut next);
        }
        acc = next;
    }
    acc
}

/// Checks reduce (every root), allreduce, reduce_scatter (uneven counts), reduce_scatter_block,
/// scan and exscan with every algorithm of each, for `op` on data `input(rank, index)`, against
/// [`fold_ranks`]. `sentinel` fills receive space that must stay untouched.
fn check_reductions<T, O>(
    world: &Comm,
    label: &str,
    op: &O,
    input: &dyn Fn(usize, usize) -> T,
    sizes: &[usize],
    sentinel: T,
) -> Result<()>
where
    T: Pod + PartialEq + fmt::Debug,
    O: Op<T>,
{
    let (me, np) = (world.rank(), world.size());
    for &n in sizes {
        let total = fold_ranks(op, input, np, n);
        let mine: Vec<T> = (0..n).map(|i| input(me, i)).collect();
        let prefix = fold_ranks(op, input, me + 1, n);
        let exclusive = fold_ranks(op, input, me, n);
        let counts = v_counts(np, n.div_ceil(np));
        let scattered_len: usize = counts.iter().sum();
        let scattered_total = fold_ranks(op, input, np, scattered_len);
        let scattered_start: usize = counts[..me].iter().sum();
        let block = n.div_ceil(np);
        let block_total = fold_ranks(op, input, np, block * np);
        for coll in [Collective::Reduce, Collective::Allreduce, Collective::ReduceScatter, Collective::Scan] {
            for alg in algorithms(coll) {
                let comm = forced(world, coll, alg)?;
                let what = |detail: &str| {
                    let detail = detail.to_string();
                    move || format!("{label}: {coll} with algorithm {alg}, np={np}, n={n}: {detail}")
                };
                match coll {
                    Collective::Reduce => {
                        for root in roots(np) {
                            let mut recv = vec![sentinel; if me == root { n } else { 0 }];
                            comm.reduce(&mine, &mut recv, op, root).ctx(what(&format!("reduce to root {root}")))?;
                            check_each(&recv, |i| total[i], &what(&format!("reduce result at root {root}")));
                        }
                    }
                    Collective::Allreduce => {
                        let mut recv = vec![sentinel; n];
                        comm.allreduce(&mine, &mut recv, op).ctx(what("allreduce"))?;
                        check_each(&recv, |i| total[i], &what(&format!("allreduce result on rank {me}")));
                    }
                    Collective::ReduceScatter => {
                        let send: Vec<T> = (0..scattered_len).map(|i| input(me, i)).collect();
                        let mut recv = vec![sentinel; counts[me]];
                        comm.reduce_scatter(&send, &mut recv, &counts, op).ctx(what("reduce_scatter"))?;
                        let w = what(&format!("reduce_scatter block on rank {me}, counts {counts:?}"));
                        check_each(&recv, |i| scattered_total[scattered_start + i], &w);

                        let send: Vec<T> = (0..block * np).map(|i| input(me, i)).collect();
                        let mut recv = vec![sentinel; block];
                        comm.reduce_scatter_block(&send, &mut recv, op).ctx(what("reduce_scatter_block"))?;
                        let w = what(&format!("reduce_scatter_block result on rank {me}"));
                        check_each(&recv, |i| block_total[me * block + i], &w);
                    }
                    _ => {
                        let mut recv = vec![sentinel; n];
                        comm.scan(&mine, &mut recv, op).ctx(what("scan"))?;
                        check_each(&recv, |i| prefix[i], &what(&format!("scan result on rank {me}")));
                        let mut recv = vec![sentinel; n];
                        comm.exscan(&mine, &mut recv, op).ctx(what("exscan"))?;
                        let w = what(&format!("exscan result on rank {me}"));
                        check_each(&recv, |i| if me == 0 { sentinel } else { exclusive[i] }, &w);
                    }
                }
            }
        }
    }
    Ok(())
}

/// 2x2 matrices of wrapping u32 (row-major): associative, not commutative.
type Mat = [u32; 4];

fn mat_mul(a: &Mat, b: &Mat) -> Mat {
    let m = |x: u32, y: u32| x.wrapping_mul(y);
    [
        m(a[0], b[0]).wrapping_add(m(a[1], b[2])),
        m(a[0], b[1]).wrapping_add(m(a[1], b[3])),
        m(a[2], b[0]).wrapping_add(m(a[3], b[2])),
        m(a[2], b[1]).wrapping_add(m(a[3], b[3])),
    ]
}

/// A matrix that differs per rank and element, so products in any other order differ.
fn rank_matrix(r: usize, i: usize) -> Mat {
    [val(1, r, i) | 1, val(2, r, i), val(3, r, i), val(4, r, i) | 1]
}

#[test]
fn non_commutative_op_combines_in_rank_order() {
    // The product of rank 0's and rank 1's matrices differs from the reverse product.
    assert_ne!(mat_mul(&rank_matrix(0, 0), &rank_matrix(1, 0)), mat_mul(&rank_matrix(1, 0), &rank_matrix(0, 0)));
    for np in NPS {
        run_ok(np, "non-commutative matrix product", |world| {
            // `inout = input · inout`, where `input` comes from lower ranks.
            let matmul = UserOp::non_commutative(|input: &[Mat], inout: &mut [Mat]| {
                for (a, b) in input.iter().zip(inout.iter_mut()) {
                    *b = mat_mul(a, b);
                }
            });
            assert!(!matmul.is_commutative());
            check_reductions(&world, "2x2 matrix product", &matmul, &rank_matrix, &[0, 1, 3, 4099], [SENTINEL; 4])
        });
    }
}

#[test]
fn predefined_ops_and_types() {
    for np in NPS {
        run_ok(np, "predefined ops", move |world| {
            let sizes = [1, 3, 1000];
            // Multiples of 1/4 below 2^20: every sum is exact in any order.
            let f64_gen = |r: usize, i: usize| (r as f64) * 0.5 + (i % 7) as f64 * 0.25 - 1.0;
            check_reductions(&world, "f64 sum", &Sum, &f64_gen, &sizes, -7.5)?;
            check_reductions(&world, "f64 max", &Max, &|r, i| ((r * 7 + i) % 11) as f64 - 5.0, &sizes, -99.0)?;
            check_reductions(&world, "f32 min", &Min, &|r, i| ((r * 3 + i) % 5) as f32, &sizes, -99.0)?;
            // Bits set in all / some ranks.
            let bits = |r: usize, i: usize| !((1u8 << (r % 8)) & (i as u8)) | (val(9, r, i) as u8 & 0x81);
            check_reductions(&world, "u8 band", &Band, &bits, &sizes, 0xA5)?;
            check_reductions(
                &world,
                "u8 bor",
                &Bor,
                &|r, i| (1u8 << ((r + i) % 8)) & val(8, r, i) as u8,
                &sizes,
                0xA5,
            )?;
            check_reductions(&world, "u16 bxor", &Bxor, &|r, i| val(7, r, i) as u16, &sizes, 0xA5A5)?;
            check_reductions(&world, "i32 min", &Min, &|r, i| val(6, r, i) as i32, &sizes, 12345)?;
            check_reductions(&world, "i64 max", &Max, &|r, i| val(5, r, i) as i64 - (1 << 31), &sizes, 12345)?;
            check_reductions(&world, "u64 prod", &Prod, &|r, i| u64::from(val(4, r, i)) | 1, &sizes, 12345)?;
            check_reductions(&world, "u8 land", &Land, &|r, i| u8::from((r + i) % 5 != 0), &sizes, 7)?;
            check_reductions(&world, "i32 lor", &Lor, &|r, i| i32::from((r * i) % 7 == 3), &sizes, 7)?;
            // Ties on the value: the smallest index must win.
            let loc = |r: usize, i: usize| Loc { value: ((r * 3 + i) % 4) as f64, index: r as i64 };
            let sentinel = Loc { value: -1.0, index: -1 };
            check_reductions(&world, "f64 minloc", &MinLoc, &loc, &sizes, sentinel)?;
            check_reductions(&world, "f64 maxloc", &MaxLoc, &loc, &sizes, sentinel)?;
            let iloc = |r: usize, i: usize| Loc { value: (val(3, r, i) % 3) as i32, index: (np - 1 - r) as i32 };
            check_reductions(&world, "i32 maxloc", &MaxLoc, &iloc, &sizes, Loc { value: -1, index: -1 })?;
            // Elements of 3, 12 and 24 bytes: chunked algorithms must split on element borders.
            let add3 = UserOp::commutative(|input: &[[u8; 3]], inout: &mut [[u8; 3]]| {
                for (a, b) in input.iter().zip(inout.iter_mut()) {
                    *b = [a[0].wrapping_add(b[0]), a[1] ^ b[1], a[2].max(b[2])];
                }
            });
            check_reductions(
                &world,
                "[u8; 3] user op",
                &add3,
                &|r, i| val(r as u32, i, 3).to_le_bytes()[..3].try_into().unwrap(),
                &[1, 3, 1001],
                [0xA5; 3],
            )?;
            let add12 = UserOp::commutative(|input: &[[u32; 3]], inout: &mut [[u32; 3]]| {
                for (a, b) in input.iter().zip(inout.iter_mut()) {
                    *b = [a[0].wrapping_add(b[0]), a[1] | b[1], a[2].min(b[2])];
                }
            });
            check_reductions(
                &world,
                "[u32; 3] user op",
                &add12,
                &|r, i| [val(1, r, i), val(2, r, i) & 0x0101_0101, val(3, r, i)],
                &[1, 3, 1001],
                [SENTINEL; 3],
            )?;
            let add24 = UserOp::commutative(|input: &[[u64; 3]], inout: &mut [[u64; 3]]| {
                for (a, b) in input.iter().zip(inout.iter_mut()) {
                    *b = [a[0].wrapping_add(b[0]), a[1].wrapping_mul(b[1]), a[2] ^ b[2]];
                }
            });
            check_reductions(
                &world,
                "[u64; 3] user op",
                &add24,
                &|r, i| [u64::from(val(1, r, i)), u64::from(val(2, r, i)) | 1, i as u64 * 31 + r as u64],
                &[1, 3, 1001],
                [7; 3],
            )?;
            Ok(())
        });
    }
}

// ---------------------------------------------------------------- serde objects

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Record {
    rank: usize,
    name: String,
    data: Vec<u32>,
    nested: Option<Box<Record>>,
}

/// A value that differs per rank and `variant`, sometimes empty and sometimes large (~400 KiB).
fn record(rank: usize, variant: usize) -> Record {
    let len = match (rank + variant) % 4 {
        0 => 0,
        1 => 3,
        2 => 100_000 + rank,
        _ => 17,
    };
    Record {
        rank,
        name: "é".repeat(rank % 3) + &format!("rank {rank} variant {variant}"),
        data: (0..len).map(|i| val(variant as u32, rank, i)).collect(),
        nested: (rank % 2 == 1).then(|| Box::new(Record { rank, name: String::new(), data: vec![1], nested: None })),
    }
}

/// The byte collectives that the object collectives are built on.
const OBJECT_CARRIERS: [Collective; 5] =
    [Collective::Bcast, Collective::Gather, Collective::Gatherv, Collective::Scatter, Collective::Scatterv];

#[test]
fn object_collectives() {
    for np in NPS {
        run_ok(np, "serde object collectives", move |world| {
            let me = world.rank();
            // Rotate the underlying algorithms so every one of them carries objects.
            let rounds = OBJECT_CARRIERS.iter().map(|&c| algorithms(c).len()).max().unwrap_or(1);
            for round in 0..rounds {
                let mut tuning = Tuning::defaults();
                for coll in OBJECT_CARRIERS {
                    let algs = algorithms(coll);
                    tuning = tuning.force(coll, algs[round % algs.len()])?;
                }
                let comm = world.with_tuning(tuning);
                for root in roots(np) {
                    let what = || format!("objects, round {round}, np={np}, root={root}");
                    let mut value = if me == root { record(root, round) } else { record(usize::MAX / 2, 0) };
                    comm.bcast_obj(&mut value, root).ctx(|| format!("{}: bcast_obj", what()))?;
                    assert_eq!(value, record(root, round), "{}: bcast_obj on rank {me}", what());

                    let mut names: Vec<String> =
                        if me == root { (0..3).map(|k| format!("{k}")).collect() } else { vec!["stale".into()] };
                    comm.bcast_obj(&mut names, root)?;
                    assert_eq!(names, ["0", "1", "2"], "{}: bcast_obj of a Vec<String>", what());

                    let gathered =
                        comm.gather_obj(&record(me, round), root).ctx(|| format!("{}: gather_obj", what()))?;
                    if me == root {
                        let want: Vec<Record> = (0..np).map(|r| record(r, round)).collect();
                        assert!(gathered == Some(want), "{}: gather_obj result differs", what());
                    } else {
                        assert!(gathered.is_none(), "{}: gather_obj gave a value off the root", what());
                    }

                    let values: Vec<Record> =
                        if me == root { (0..np).map(|r| record(r, round + 1)).collect() } else { vec![] };
                    let mine = comm.scatter_obj(&values, root).ctx(|| format!("{}: scatter_obj", what()))?;
                    assert!(mine == record(me, round + 1), "{}: scatter_obj on rank {me}", what());
                }
            }
            Ok(())
        });
    }
}

// ---------------------------------------------------------------- concurrency and contexts

/// Rotates through `coll`'s algorithms by iteration.
fn rotating(comm: &Comm, coll: Collective, iteration: usize) -> Result<Comm> {
    let algs = algorithms(coll);
    forced(comm, coll, algs[iteration % algs.len()])
}

#[test]
fn different_collectives_at_once_on_split_communicators() {
    const ITERATIONS: usize = 40;
    for np in [2, 3, 5, 8, 16] {
        run_ok(np, "split halves", move |world| {
            let me = world.rank();
            let half = world.split(Some((me % 2) as u32), 0)?.expect("every rank has a color");
            let (hr, hn) = (half.rank(), half.size());
            assert_eq!((hr, hn), (me / 2, (np + 1 - me % 2) / 2), "split by parity");
            for it in 0..ITERATIONS {
                let n = [1, 3, 700, 5000][it % 4];
                if me % 2 == 0 {
                    // Evens: allreduce.
                    let comm = rotating(&half, Collective::Allreduce, it)?;
                    let send: Vec<u64> = (0..n).map(|i| (i * 31 + hr * 7 + it) as u64).collect();
                    let mut recv = vec![0u64; n];
                    comm.allreduce(&send, &mut recv, Sum).ctx(|| format!("evens' allreduce {it}"))?;
                    let ranks = (hn * (hn - 1) / 2) as u64;
                    check_each(&recv, |i| ((i * 31 + it) * hn) as u64 + 7 * ranks, &|| {
                        format!("evens' allreduce {it}")
                    });
                } else {
                    // Odds: bcast and alltoall.
                    let comm = rotating(&half, Collective::Bcast, it)?;
                    let root = it % hn;
                    let mut buf: Vec<u32> =
                        if hr == root { (0..n).map(|i| val(it as u32, root, i)).collect() } else { vec![0; n] };
                    comm.bcast(&mut buf, root).ctx(|| format!("odds' bcast {it}"))?;
                    check_each(&buf, |i| val(it as u32, root, i), &|| format!("odds' bcast {it}"));
                    let comm = rotating(&half, Collective::Alltoall, it)?;
                    let send: Vec<u32> = (0..hn * n).map(|k| val(it as u32, hr * hn + k / n, k % n)).collect();
                    let mut recv = vec![0u32; hn * n];
                    comm.alltoall(&send, &mut recv).ctx(|| format!("odds' alltoall {it}"))?;
                    check_each(&recv, |k| val(it as u32, (k / n) * hn + hr, k % n), &|| format!("odds' alltoall {it}"));
                }
            }
            // The halves are done; the parent communicator still works.
            let mut total = [0u64];
            world.allreduce(&[me as u64], &mut total, Sum)?;
            assert_eq!(total[0], (np * (np - 1) / 2) as u64);
            Ok(())
        });
    }
}

#[test]
fn overlapping_communicators_used_alternately() {
    for np in [2, 3, 4, 7] {
        run_ok(np, "overlapping communicators", move |world| {
            let me = world.rank();
            let a = world.dup()?;
            let b = world.dup()?;
            // A communicator overlapping both on part of the ranks (ranks >= 1, reversed).
            let tail = world.split((me >= 1).then_some(0), -(me as i32))?;
            for it in 0..30 {
                let n = [1, 2, 64, 3000][it % 4];
                let ca = rotating(&a, Collective::Bcast, it)?;
                let cb = rotating(&b, Collective::Bcast, it + 1)?;
                // Same root and size on both: with eager flat trees the messages of both are in
                // flight to the same ranks at once, and only the context tells them apart.
                let root = it % np;
                let mut x: Vec<u32> = if me == root { vec![1000 + it as u32; n] } else { vec![0; n] };
                let mut y: Vec<u32> = if me == root { vec![2000 + it as u32; n] } else { vec![0; n] };
                ca.bcast(&mut x, root)?;
                cb.bcast(&mut y, root)?;
                assert!(x.iter().all(|&v| v == 1000 + it as u32), "bcast on dup A, iteration {it}");
                assert!(y.iter().all(|&v| v == 2000 + it as u32), "bcast on dup B, iteration {it}");
                let mut sa = [0u64];
                let mut sb = [0u64];
                rotating(&b, Collective::Allreduce, it)?.allreduce(&[me as u64], &mut sb, Sum)?;
                rotating(&a, Collective::Allreduce, it + 2)?.allreduce(&[1u64], &mut sa, Sum)?;
                assert_eq!(
                    (sa[0], sb[0]),
                    (np as u64, (np * (np - 1) / 2) as u64),
                    "allreduce on the dups, iteration {it}"
                );
                if let Some(tail) = &tail {
                    let mut g = vec![0u32; tail.size()];
                    rotating(tail, Collective::Allgather, it)?.allgather(&[me as u32], &mut g)?;
                    let want: Vec<u32> = (1..np as u32).rev().collect();
                    assert_eq!(g, want, "allgather on the reversed tail, iteration {it}");
                }
            }
            Ok(())
        });
    }
}

/// User tag of the point-to-point messages mixed with collectives.
const USER_TAG: i32 = 7;

/// Every collective with every algorithm on `comm`, for each of `sizes` and every root.
fn sweep(comm: &Comm, sizes: &[usize], barriers: &AtomicUsize, barriers_done: &mut usize) -> Result<()> {
    let np = comm.size();
    for coll in Collective::ALL {
        for alg in algorithms(coll) {
            let c = forced(comm, coll, alg)?;
            let case_roots = if is_rooted(coll) { roots(np).into_iter().map(Some).collect() } else { vec![None] };
            for &n in sizes {
                for &root in &case_roots {
                    check_case(&c, Case { coll, alg, np, n, root }, barriers, barriers_done)?;
                }
            }
        }
    }
    Ok(())
}

#[test]
fn every_algorithm_on_sub_communicators() {
    // Members in a different order than in the world, and sub-communicators of different sizes
    // working at the same time.
    for (np, colors) in [(7, 2), (16, 3)] {
        let barriers: Arc<Vec<AtomicUsize>> = Arc::new((0..colors).map(|_| AtomicUsize::new(0)).collect());
        run_ok(np, "sub-communicator sweep", move |world| {
            let me = world.rank();
            let color = me % colors;
            let key = if color == 1 { -(me as i32) } else { me as i32 };
            let sub = world.split(Some(color as u32), key)?.expect("every rank has a color");
            let mut done = 0;
            sweep(&sub, &[0, 1, 3, 1001], &barriers[color], &mut done)
                .ctx(|| format!("on the sub-communicator of color {color} (world rank {me}, sub rank {})", sub.rank()))
        });
    }
}

#[test]
fn every_algorithm_on_many_ranks() {
    // More ranks than the suite's largest np, and not a power of two: deeper trees, more rounds.
    for np in [33, 64] {
        let barriers = Arc::new(AtomicUsize::new(0));
        run_ok(np, "many-rank sweep", move |world| {
            let mut done = 0;
            sweep(&world, &[0, 1, 3, 700], &barriers, &mut done)
        });
    }
}

#[test]
fn size_dependent_rules_select_the_same_algorithm_on_every_rank() {
    // A table whose rules switch algorithm every few bytes: every rank of a call must still make
    // the same choice (selection only uses sizes all ranks know).
    let mut tuning = Tuning::defaults();
    for coll in Collective::ALL {
        let algs = algorithms(coll);
        let mut rules: Vec<Rule> = algs
            .iter()
            .enumerate()
            .map(|(i, &algorithm)| Rule { max_np: None, max_bytes: Some(4 * i), algorithm })
            .collect();
        rules.push(Rule::always(algs[algs.len() / 2]));
        tuning.set_rules(coll, rules).expect("valid rules");
    }
    for np in [3, 5] {
        let barriers = Arc::new(AtomicUsize::new(0));
        let config = Config::new().np(np).tuning(tuning.clone());
        job(config, "size-dependent rules", move |world| {
            let mut done = 0;
            for coll in Collective::ALL {
                for n in [0, 1, 2, 3, 4, 5, 6, 2053] {
                    let roots = if is_rooted(coll) { roots(np).into_iter().map(Some).collect() } else { vec![None] };
                    for root in roots {
                        // The algorithm named in failures is the one for a vector of n u32.
                        let alg = world.algorithm_for(coll, 4 * n, true);
                        check_case(&world, Case { coll, alg, np, n, root }, &barriers, &mut done)?;
                    }
                }
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("size-dependent rules, np={np}: {e}"));
    }
}

#[test]
fn every_algorithm_with_other_eager_limits() {
    for eager_limit in [0, 64, 1 << 20] {
        for np in [3, 8] {
            let barriers = Arc::new(AtomicUsize::new(0));
            let what = format!("sweep with eager limit {eager_limit}");
            let config = Config::new().np(np).eager_limit(eager_limit);
            job(config, &what, move |world| {
                let mut done = 0;
                sweep(&world, &[1, 3, 2053], &barriers, &mut done).ctx(|| format!("eager limit {eager_limit}"))
            })
            .unwrap_or_else(|e| panic!("{what}, np={np}: {e}"));
        }
    }
}

#[test]
fn random_sequences_of_collectives_and_algorithms() {
    // Consecutive calls switch collective, algorithm, size, root and communicator at random
    // (the same choices on every rank), so no algorithm may leave state or messages behind that
    // confuse the next one.
    for (np, steps) in [(2, 300), (3, 300), (6, 200), (9, 120)] {
        let barriers = Arc::new(AtomicUsize::new(0));
        run_ok(np, "random sequence", move |world| {
            let dup = world.dup()?;
            let mut rng = common::Rng::new(np as u64);
            let mut done = 0;
            for step in 0..steps {
                let coll = *rng.pick(&Collective::ALL);
                let algs = algorithms(coll);
                let alg = *rng.pick(&algs);
                let n = *rng.pick(&[0, 1, 2, 5, 17, 300, 2500]);
                let root = is_rooted(coll).then(|| rng.below(np as u64) as usize);
                let comm = if rng.chance(50) { &world } else { &dup };
                let comm = forced(comm, coll, alg)?;
                check_case(&comm, Case { coll, alg, np, n, root }, &barriers, &mut done)
                    .ctx(|| format!("step {step}"))?;
            }
            Ok(())
        });
    }
}

#[test]
fn collective_traffic_never_matches_user_receives() {
    for np in [1, 2, 3, 5, 8] {
        let barriers = Arc::new(AtomicUsize::new(0));
        run_ok(np, "wildcard receives during collectives", move |world| {
            let me = world.rank();
            let (left, right) = ((me + np - 1) % np, (me + 1) % np);
            let mut barriers_done = 0;
            let mut sweep = |comm: &Comm| sweep(comm, &[3], &barriers, &mut barriers_done);
            sweep(&world)?;
            world.barrier()?;
            assert!(world.iprobe(ANY_SOURCE, ANY_TAG)?.is_none(), "collective traffic is visible to a wildcard probe");
            let mut got = [0u64; 2];
            let st = world.scope(|s| {
                let req = s.irecv(&mut got, ANY_SOURCE, ANY_TAG)?;
                sweep(&world)?;
                world.send(&[me as u64, 42], right, USER_TAG)?;
                req.wait()
            })?;
            assert_eq!((st.source, st.tag, st.bytes), (left, USER_TAG, 16), "wildcard receive matched {st:?}");
            assert_eq!(got, [left as u64, 42], "wildcard receive got collective data");
            // Wildcard receives on a duplicate, with collectives on it and on the parent.
            let dup = world.dup()?;
            let mut got = [0u8; 1];
            let st = dup.scope(|s| {
                let req = s.irecv(&mut got, ANY_SOURCE, ANY_TAG)?;
                sweep(&world)?;
                sweep(&dup)?;
                dup.send(&[me as u8], right, USER_TAG + 1)?;
                req.wait()
            })?;
            assert_eq!(
                (st.source, st.tag, got[0]),
                (left, USER_TAG + 1, left as u8),
                "wildcard receive matched {st:?}"
            );
            Ok(())
        });
    }
}

// ---------------------------------------------------------------- argument errors

/// Asserts `result` is `Error::InvalidArgument` whose message contains `want`.
fn assert_invalid<T: fmt::Debug>(result: Result<T>, want: &str, what: &str) {
    match result {
        Err(Error::InvalidArgument(msg)) if msg.contains(want) => {}
        other => panic!("{what}: expected InvalidArgument containing {want:?}, got {other:?}"),
    }
}

#[test]
fn locally_detectable_errors_on_every_rank() {
    run_ok(4, "local argument errors", |world| {
        let me = world.rank();
        let mut buf = [0u32; 8];
        for root in [4, 99] {
            let want = format!("root {root} out of range for a communicator of size 4");
            assert_invalid(world.bcast(&mut buf, root), &want, "bcast");
            assert_invalid(world.scatter(&buf, &mut [0u32; 2], root), &want, "scatter");
            assert_invalid(world.gather(&[0u32; 2], &mut buf, root), &want, "gather");
            assert_invalid(world.scatterv(&buf, &[2; 4], &[0, 2, 4, 6], &mut [0u32; 2], root), &want, "scatterv");
            assert_invalid(world.gatherv(&[0u32; 2], &mut buf, &[2; 4], &[0, 2, 4, 6], root), &want, "gatherv");
            assert_invalid(world.reduce(&[1u32], &mut [0u32], Sum, root), &want, "reduce");
            let mut obj = 5u32;
            assert!(world.bcast_obj(&mut obj, root).is_err(), "bcast_obj with root {root}");
            assert!(world.gather_obj(&obj, root).is_err(), "gather_obj with root {root}");
        }
        let mut seven = [0u32; 7];
        assert_invalid(
            world.allgather(&[0u32; 2], &mut seven),
            "allgather receive buffer has 7 elements, expected 8",
            "allgather",
        );
        assert_invalid(
            world.alltoall(&[0u32; 8], &mut seven),
            "alltoall receive buffer has 7 elements, expected 8",
            "alltoall",
        );
        assert_invalid(
            world.alltoall(&[0u32; 6], &mut [0u32; 6]),
            "alltoall buffers of 6 elements do not split into 4 equal blocks",
            "alltoall",
        );
        let counts = [1usize, 2, 0, 3];
        let displs = [0usize, 1, 3, 3];
        assert_invalid(
            world.allgatherv(&vec![0u32; counts[me]], &mut buf, &counts[..3], &displs),
            "allgatherv: 3 counts and 4 displacements for a communicator of size 4",
            "allgatherv",
        );
        assert_invalid(
            world.allgatherv(&vec![0u32; counts[me]], &mut buf, &counts, &[0, 1, 3, 6]),
            "allgatherv: block of rank 3 (displacement 6, count 3) exceeds the buffer of 8 elements",
            "allgatherv",
        );
        assert_invalid(
            world.allgatherv(&vec![0u32; counts[me]], &mut buf, &counts, &[0, 1, 3, usize::MAX]),
            "allgatherv: block of rank 3",
            "allgatherv with an overflowing displacement",
        );
        assert_invalid(
            world.allgatherv(&vec![0u32; counts[me]], &mut buf, &counts, &[0, 1, 3, 2]),
            "allgatherv: blocks of ranks 1 and 3 overlap",
            "allgatherv",
        );
        assert_invalid(
            world.allgatherv(&[0u32; 5], &mut buf, &counts, &displs),
            &format!("allgatherv send buffer has 5 elements, expected {}", counts[me]),
            "allgatherv",
        );
        // Zero-length blocks may sit anywhere, even on top of others.
        let ok_counts = [0usize, 2, 0, 2];
        world.allgatherv(&vec![me as u32; ok_counts[me]], &mut buf, &ok_counts, &[1, 0, 1, 2])?;
        assert_eq!(buf[..4], [1, 1, 3, 3]);
        assert_invalid(
            world.alltoallv(&buf, &[2; 4], &[0, 2, 4, 5], &mut [0u32; 8], &[2; 4], &[0, 2, 4, 6]),
            "alltoallv send: blocks of ranks 2 and 3 overlap",
            "alltoallv",
        );
        assert_invalid(
            world.alltoallv(&buf, &[2; 4], &[0, 2, 4, 6], &mut [0u32; 8], &[2; 4], &[0, 2, 4, 7]),
            "alltoallv receive: block of rank 3 (displacement 7, count 2) exceeds the buffer of 8 elements",
            "alltoallv",
        );
        assert_invalid(
            world.alltoallv(&buf, &[2; 3], &[0, 2, 4], &mut [0u32; 8], &[2; 4], &[0, 2, 4, 6]),
            "alltoallv send: 3 counts and 3 displacements for a communicator of size 4",
            "alltoallv",
        );
        assert_invalid(
            world.allreduce(&[1u32; 3], &mut [0u32; 2], Sum),
            "allreduce receive buffer has 2 elements, expected 3",
            "allreduce",
        );
        assert_invalid(
            world.reduce_scatter(&[1u32; 6], &mut [0u32; 1], &[1, 2, 3], Sum),
            "reduce_scatter counts has 3 elements, expected 4",
            "reduce_scatter",
        );
        assert_invalid(
            world.reduce_scatter(&[1u32; 5], &mut [0u32; 1], &[1, 1, 1, 3], Sum),
            "reduce_scatter send buffer has 5 elements, expected 6",
            "reduce_scatter",
        );
        let rs_counts = [1usize, 1, 1, 3];
        assert_invalid(
            world.reduce_scatter(&[1u32; 6], &mut [0u32; 2], &rs_counts, Sum),
            &format!("reduce_scatter receive buffer has 2 elements, expected {}", rs_counts[me]),
            "reduce_scatter",
        );
        assert_invalid(
            world.reduce_scatter_block(&[1u32; 7], &mut [0u32; 2], Sum),
            "reduce_scatter_block send buffer has 7 elements, expected 8",
            "reduce_scatter_block",
        );
        assert_invalid(
            world.scan(&[1u32; 3], &mut [0u32; 4], Sum),
            "scan receive buffer has 4 elements, expected 3",
            "scan",
        );
        assert_invalid(
            world.exscan(&[1u32; 3], &mut [0u32; 2], Sum),
            "exscan receive buffer has 2 elements, expected 3",
            "exscan",
        );
        assert_invalid(
            Tuning::defaults().force(Collective::Bcast, Algorithm::Bkt),
            "bcast has no algorithm \"bkt\"",
            "forcing an algorithm a collective lacks",
        );
        // Nothing was sent: the communicator is still in step.
        let mut total = [0u32];
        world.allreduce(&[1u32], &mut total, Sum)?;
        assert_eq!(total, [4]);
        // After finalize every collective fails at once, on every communicator of the rank.
        let dup = world.dup()?;
        world.finalize()?;
        assert!(matches!(world.barrier(), Err(Error::Finalized(_))));
        assert!(matches!(dup.bcast(&mut buf, 0), Err(Error::Finalized(_))));
        assert!(matches!(dup.allreduce(&[1u32], &mut total, Sum), Err(Error::Finalized(_))));
        assert!(matches!(world.scan(&[1u32], &mut total, Sum), Err(Error::Finalized(_))));
        assert!(world.gather_obj(&1u8, 0).is_err());
        Ok(())
    });
}

#[test]
fn counts_that_overflow_are_errors_not_panics() {
    // Sums and products of element counts can overflow `usize`: with huge counts, or with
    // zero-sized elements, whose slices may be `usize::MAX` long. Each call must return
    // `InvalidArgument` (on every rank, so no communication starts); a panic is a library bug.
    run_ok(2, "overflowing counts", |world| {
        let me = world.rank();
        let huge = vec![(); usize::MAX];
        let mut huge_out = vec![(); usize::MAX];
        let noop = UserOp::commutative(|_: &[()], _: &mut [()]| {});
        let mut panicked = Vec::new();
        let mut probe = |what: &'static str, call: &mut dyn FnMut() -> Result<()>| match std::panic::catch_unwind(
            std::panic::AssertUnwindSafe(call),
        ) {
            Ok(Err(Error::InvalidArgument(_))) => {}
            Ok(other) => panic!("{what}: expected InvalidArgument, got {other:?}"),
            Err(_) => panicked.push(what),
        };
        probe("reduce_scatter with counts summing past usize::MAX", &mut || {
            world.reduce_scatter(&[0u32; 0], &mut [0u32; 0], &[usize::MAX, 1], Sum)
        });
        probe("allgather of usize::MAX zero-sized elements", &mut || world.allgather(&huge, &mut [(); 0]));
        probe("gather of usize::MAX zero-sized elements", &mut || world.gather(&huge, &mut [(); 0], me));
        probe("scatter into usize::MAX zero-sized elements", &mut || world.scatter(&[(); 0], &mut huge_out, me));
        probe("reduce_scatter_block into usize::MAX zero-sized elements", &mut || {
            world.reduce_scatter_block(&[(); 0], &mut huge_out, &noop)
        });
        assert!(panicked.is_empty(), "the library panicked on: {}", panicked.join("; "));
        Ok(())
    });
}

#[test]
fn root_only_errors_on_a_single_rank() {
    // With one rank the root is everyone, so root-only checks are local to every rank.
    run_ok(1, "root-only argument errors", |world| {
        assert_invalid(
            world.scatter(&[0u32; 3], &mut [0u32; 2], 0),
            "scatter send buffer has 3 elements, expected 2",
            "scatter",
        );
        assert_invalid(
            world.gather(&[0u32; 2], &mut [0u32; 3], 0),
            "gather receive buffer has 3 elements, expected 2",
            "gather",
        );
        assert_invalid(
            world.reduce(&[0u32; 2], &mut [0u32; 3], Sum, 0),
            "reduce receive buffer has 3 elements, expected 2",
            "reduce",
        );
        assert_invalid(
            world.scatterv(&[0u32; 4], &[3], &[2], &mut [0u32; 3], 0),
            "scatterv: block of rank 0 (displacement 2, count 3) exceeds the buffer of 4 elements",
            "scatterv",
        );
        assert_invalid(
            world.scatterv(&[0u32; 4], &[3], &[0], &mut [0u32; 2], 0),
            "scatterv receive buffer has 2 elements, expected 3",
            "scatterv",
        );
        assert_invalid(
            world.gatherv(&[0u32; 2], &mut [0u32; 4], &[3], &[0], 0),
            "gatherv send buffer has 2 elements, expected 3",
            "gatherv",
        );
        assert_invalid(
            world.gatherv(&[0u32; 3], &mut [0u32; 4], &[3, 1], &[0, 3], 0),
            "gatherv: 2 counts and 2 displacements",
            "gatherv",
        );
        assert_invalid(
            world.scatter_obj(&[1u8, 2], 0),
            "scatter_obj: 2 values for a communicator of size 1",
            "scatter_obj",
        );
        Ok(())
    });
}

/// One call of a collective: `bad` says whether this rank passes the wrong arguments.
type Call = fn(&Comm, bool) -> Result<()>;

/// For every algorithm of `coll`: rank `bad_rank` passes wrong arguments, gets `Err` naming
/// `want` and returns it; the other ranks (passing consistent arguments) must not hang, and the
/// job must fail naming that rank.
fn one_rank_errs(coll: Collective, np: usize, bad_rank: usize, want: &'static str, call: Call) {
    for alg in algorithms(coll) {
        let what = format!("{coll} with algorithm {alg}: rank {bad_rank} passes bad arguments");
        let result = job(Config::new().np(np), &what, move |world| {
            let comm = forced(&world, coll, alg)?;
            let bad = world.rank() == bad_rank;
            let result = call(&comm, bad);
            if bad {
                assert!(
                    matches!(&result, Err(Error::InvalidArgument(m)) if m.contains(want)),
                    "{coll} {alg}: {result:?}"
                );
            }
            result
        });
        match result {
            Err(Error::RankFailed { rank, cause }) if rank == bad_rank && cause.contains(want) => {}
            other => panic!("{what}: expected RankFailed of rank {bad_rank} with {want:?}, got {other:?}"),
        }
    }
}

#[test]
fn a_rank_with_bad_arguments_fails_the_job_without_hanging() {
    const NP: usize = 4;
    one_rank_errs(Collective::Bcast, NP, 1, "root 7 out of range", |c, bad| {
        c.bcast(&mut [0u32; 5], if bad { 7 } else { 0 })
    });
    one_rank_errs(Collective::Scatter, NP, 2, "scatter send buffer has 7 elements, expected 8", |c, bad| {
        let send = vec![0u32; if bad { 7 } else { 0 }];
        c.scatter(&send, &mut [0u32; 2], 2)
    });
    one_rank_errs(Collective::Gather, NP, 3, "gather receive buffer has 9 elements, expected 8", |c, bad| {
        let mut recv = vec![0u32; if bad { 9 } else { 0 }];
        c.gather(&[1u32, 2], &mut recv, 3)
    });
    one_rank_errs(Collective::Scatterv, NP, 0, "scatterv: blocks of ranks 0 and 1 overlap", |c, bad| {
        let recv_len = [2, 2, 1, 1][c.rank()];
        let (counts, displs): (&[usize], &[usize]) = if bad { (&[2, 2, 1, 1], &[0, 1, 4, 5]) } else { (&[], &[]) };
        c.scatterv(&[0u32; 6], counts, displs, &mut vec![0u32; recv_len], 0)
    });
    one_rank_errs(Collective::Gatherv, NP, 1, "gatherv: 4 counts and 3 displacements", |c, bad| {
        let (counts, displs): (&[usize], &[usize]) = if bad { (&[1; 4], &[0, 1, 2]) } else { (&[], &[]) };
        c.gatherv(&[0u32], &mut [0u32; 4], counts, displs, 1)
    });
    one_rank_errs(Collective::Allgather, NP, 3, "allgather receive buffer has 7 elements, expected 8", |c, bad| {
        c.allgather(&[0u32; 2], &mut vec![0u32; if bad { 7 } else { 8 }])
    });
    one_rank_errs(Collective::Allgatherv, NP, 2, "allgatherv send buffer has 3 elements, expected 2", |c, bad| {
        c.allgatherv(&vec![0u32; if bad { 3 } else { 2 }], &mut [0u32; 8], &[2; 4], &[0, 2, 4, 6])
    });
    one_rank_errs(Collective::Alltoall, NP, 0, "alltoall receive buffer has 7 elements, expected 8", |c, bad| {
        c.alltoall(&[0u32; 8], &mut vec![0u32; if bad { 7 } else { 8 }])
    });
    one_rank_errs(Collective::Alltoallv, NP, 1, "alltoallv receive: block of rank 3", |c, bad| {
        let recv_displs: &[usize] = if bad { &[0, 1, 2, 4] } else { &[0, 1, 2, 3] };
        c.alltoallv(&[0u32; 4], &[1; 4], &[0, 1, 2, 3], &mut [0u32; 4], &[1; 4], recv_displs)
    });
    one_rank_errs(Collective::Reduce, NP, 3, "reduce receive buffer has 1 elements, expected 2", |c, bad| {
        c.reduce(&[1u32, 2], &mut vec![0u32; if bad { 1 } else { 0 }], Sum, 3)
    });
    one_rank_errs(Collective::Allreduce, NP, 2, "allreduce receive buffer has 3 elements, expected 2", |c, bad| {
        c.allreduce(&[1u32, 2], &mut vec![0u32; if bad { 3 } else { 2 }], Sum)
    });
    one_rank_errs(
        Collective::ReduceScatter,
        NP,
        1,
        "reduce_scatter_block send buffer has 9 elements, expected 8",
        |c, bad| c.reduce_scatter_block(&vec![1u32; if bad { 9 } else { 8 }], &mut [0u32; 2], Sum),
    );
    one_rank_errs(Collective::Scan, NP, 0, "exscan receive buffer has 1 elements, expected 2", |c, bad| {
        c.exscan(&[1u32, 2], &mut vec![0u32; if bad { 1 } else { 2 }], Sum)
    });
    one_rank_errs(Collective::Scatter, NP, 2, "scatter_obj: 3 values for a communicator of size 4", |c, bad| {
        let values: Vec<u32> = if bad { vec![1, 2, 3] } else { vec![] };
        c.scatter_obj(&values, 2).map(drop)
    });
}

/// Runs `call` on np ranks with `coll` forced to each algorithm in turn; the ranks disagree on
/// the arguments in a way no single rank can see, so the job must end in `Err` (never a hang,
/// and never `Ok`).
fn mismatch_fails(coll: Collective, np: usize, label: &str, call: Call) {
    for alg in algorithms(coll) {
        let what = format!("{coll} with algorithm {alg}, np={np}: {label}");
        let result = job(Config::new().np(np), &what, move |world| {
            let comm = forced(&world, coll, alg)?;
            call(&comm, false)
        });
        assert!(result.is_err(), "{what}: the job succeeded");
    }
}

#[test]
fn cross_rank_mismatches_end_in_err() {
    for np in [2, 4, 5] {
        mismatch_fails(Collective::Bcast, np, "a receiver's buffer is shorter", |c, _| {
            c.bcast(&mut vec![0u32; if c.rank() == 1 { 8 } else { 10 }], 0)
        });
        mismatch_fails(Collective::Bcast, np, "a receiver's buffer is longer", |c, _| {
            c.bcast(&mut vec![0u32; if c.rank() == c.size() - 1 { 12 } else { 10 }], 0)
        });
        mismatch_fails(Collective::Bcast, np, "the root's buffer is empty", |c, _| {
            c.bcast(&mut vec![0u8; if c.rank() == 1 { 0 } else { 5 }], 1)
        });
        mismatch_fails(Collective::Bcast, np, "large buffers, one element apart", |c, _| {
            c.bcast(&mut vec![0u32; 100_000 + usize::from(c.rank() == c.size() / 2)], c.size() - 1)
        });
        mismatch_fails(Collective::Allreduce, np, "one rank reduces more elements", |c, _| {
            let n = if c.rank() == 1 { 1000 } else { 999 };
            c.allreduce(&vec![1u64; n], &mut vec![0u64; n], Sum)
        });
        mismatch_fails(Collective::Allgather, np, "one rank sends a shorter block", |c, _| {
            let n = if c.rank() == c.size() - 1 { 2 } else { 3 };
            c.allgather(&vec![1u32; n], &mut vec![0u32; n * c.size()])
        });
        mismatch_fails(Collective::Alltoall, np, "one rank exchanges longer blocks", |c, _| {
            let n = if c.rank() == 0 { 5 } else { 4 };
            c.alltoall(&vec![1u32; n * c.size()], &mut vec![0u32; n * c.size()])
        });
        mismatch_fails(Collective::Scatter, np, "a receiver expects a longer block", |c, _| {
            let n = if c.rank() == 1 { 4 } else { 3 };
            let send = vec![1u32; if c.rank() == 0 { 3 * c.size() } else { 0 }];
            c.scatter(&send, &mut vec![0u32; n], 0)
        });
        mismatch_fails(Collective::Scatterv, np, "a receiver expects a different count", |c, _| {
            let counts = vec![2usize; c.size()];
            let displs: Vec<usize> = (0..c.size()).map(|r| 2 * r).collect();
            let root = c.size() - 1;
            let (cs, ds): (&[usize], &[usize]) = if c.rank() == root { (&counts, &displs) } else { (&[], &[]) };
            let send = vec![1u16; if c.rank() == root { 2 * c.size() } else { 0 }];
            c.scatterv(&send, cs, ds, &mut vec![0u16; if c.rank() == 0 { 1 } else { 2 }], root)
        });
        mismatch_fails(Collective::Gatherv, np, "a sender sends more than the root's count", |c, _| {
            let counts = vec![2usize; c.size()];
            let displs: Vec<usize> = (0..c.size()).map(|r| 2 * r).collect();
            let mut recv = vec![0u16; if c.rank() == 0 { 2 * c.size() } else { 0 }];
            let (cs, ds): (&[usize], &[usize]) = if c.rank() == 0 { (&counts, &displs) } else { (&[], &[]) };
            c.gatherv(&vec![1u16; if c.rank() == c.size() - 1 { 3 } else { 2 }], &mut recv, cs, ds, 0)
        });
        mismatch_fails(Collective::Allgatherv, np, "ranks disagree on the counts", |c, _| {
            let mut counts = vec![2usize; c.size()];
            if c.rank() == 0 {
                counts[c.size() - 1] = 3;
            }
            let displs: Vec<usize> = (0..c.size()).map(|r| 3 * r).collect();
            let mut recv = vec![0u32; 3 * c.size()];
            c.allgatherv(&vec![1u32; counts[c.rank()]], &mut recv, &counts, &displs)
        });
        mismatch_fails(Collective::Alltoallv, np, "a receive count differs from the send count", |c, _| {
            let np = c.size();
            let send_counts = vec![2usize; np];
            let mut recv_counts = vec![2usize; np];
            if c.rank() == np - 1 {
                recv_counts[0] = 1;
            }
            let displs: Vec<usize> = (0..np).map(|r| 2 * r).collect();
            c.alltoallv(&vec![1u8; 2 * np], &send_counts, &displs, &mut vec![0u8; 2 * np], &recv_counts, &displs)
        });
        mismatch_fails(Collective::Reduce, np, "one rank reduces fewer elements", |c, _| {
            let n = if c.rank() == c.size() - 1 { 6 } else { 7 };
            let mut recv = vec![0i32; if c.rank() == 0 { 7 } else { 0 }];
            c.reduce(&vec![1i32; n], &mut recv, Sum, 0)
        });
        mismatch_fails(Collective::ReduceScatter, np, "one rank's blocks are longer", |c, _| {
            let n = if c.rank() == 0 { 3 } else { 2 };
            c.reduce_scatter_block(&vec![1u64; n * c.size()], &mut vec![0u64; n], Sum)
        });
        mismatch_fails(Collective::Scan, np, "one rank scans more elements", |c, _| {
            let n = if c.rank() == c.size() / 2 { 40 } else { 39 };
            c.scan(&vec![1u32; n], &mut vec![0u32; n], Sum)
        });
        mismatch_fails(Collective::Gather, np, "one rank sends a longer block", |c, _| {
            let n = if c.rank() == 1 { 4 } else { 3 };
            let mut recv = vec![0u16; if c.rank() == 0 { 3 * c.size() } else { 0 }];
            c.gather(&vec![1u16; n], &mut recv, 0)
        });
    }
}

#[test]
fn a_panicking_user_op_fails_the_job_without_hanging() {
    // The op panics on one rank only; peers may be reading that rank's buffers (native
    // reductions) or waiting for its messages. The job must end, and in `Err` whenever the op
    // ran on that rank.
    const NP: usize = 4;
    for coll in [Collective::Reduce, Collective::Allreduce, Collective::ReduceScatter, Collective::Scan] {
        for alg in algorithms(coll) {
            for victim in [0, 2] {
                let what = format!("{coll} with algorithm {alg}: the op panics on rank {victim}");
                let result = job(Config::new().np(NP), &what, move |world| {
                    let me = world.rank();
                    let comm = forced(&world, coll, alg)?;
                    let op = UserOp::commutative(move |input: &[u64], inout: &mut [u64]| {
                        assert!(me != victim, "user op panics on rank {me}");
                        for (a, b) in input.iter().zip(inout.iter_mut()) {
                            *b = b.wrapping_add(*a);
                        }
                    });
                    let n = 20_000;
                    let send = vec![me as u64; n];
                    let mut recv = vec![0u64; n];
                    match coll {
                        Collective::Reduce => comm.reduce(&send, &mut recv, &op, victim),
                        Collective::Allreduce => comm.allreduce(&send, &mut recv, &op),
                        Collective::ReduceScatter => comm.reduce_scatter_block(&send, &mut recv[..n / NP], &op),
                        _ => comm.scan(&send, &mut recv, &op),
                    }
                });
                // Peers only fail because of the panic, so the job names the panicking rank
                // (native collectives record the panic before peers can notice it).
                match result {
                    Ok(_) => {}
                    Err(Error::RankFailed { rank, cause }) if rank == victim && cause.contains("panicked") => {}
                    Err(e) => panic!("{what}: unexpected error {e}"),
                }
            }
        }
    }
}

#[test]
fn buffers_are_reusable_as_soon_as_a_call_returns() {
    // Right after each call every rank scribbles over its send buffer (and the bcast root over
    // its data): an algorithm that returns while peers still read this rank's memory (as native
    // ones do, in place) hands them garbage. Random yields vary the interleavings.
    const ITERATIONS: usize = 60;
    const N: usize = 3000;
    for np in [2, 3, 5] {
        run_ok(np, "buffer reuse", move |world| {
            let me = world.rank();
            let mut rng = common::Rng::new(me as u64 + 1);
            let mut jitter = || {
                for _ in 0..rng.below(3) {
                    std::thread::yield_now();
                }
            };
            for coll in [
                Collective::Bcast,
                Collective::Scatter,
                Collective::Allgather,
                Collective::Alltoall,
                Collective::Allreduce,
                Collective::Scan,
            ] {
                for alg in algorithms(coll) {
                    let comm = forced(&world, coll, alg)?;
                    let what = |it: usize| move || format!("{coll} with algorithm {alg}, np={np}, iteration {it}");
                    for it in 0..ITERATIONS {
                        let seed = seed_of(&[coll as usize, alg as usize, it]);
                        let root = it % np;
                        jitter();
                        match coll {
                            Collective::Bcast => {
                                let mut buf: Vec<u32> =
                                    if me == root { (0..N).map(|i| val(seed, 0, i)).collect() } else { vec![0; N] };
                                comm.bcast(&mut buf, root).ctx(what(it))?;
                                if me == root {
                                    buf.fill(SENTINEL);
                                } else {
                                    check_each(&buf, |i| val(seed, 0, i), &what(it));
                                }
                            }
                            Collective::Scatter => {
                                let mut send: Vec<u32> = if me == root {
                                    (0..N * np).map(|k| val(seed, k / N, k % N)).collect()
                                } else {
                                    vec![]
                                };
                                let mut recv = vec![0u32; N];
                                comm.scatter(&send, &mut recv, root).ctx(what(it))?;
                                send.fill(SENTINEL);
                                jitter();
                                check_each(&recv, |i| val(seed, me, i), &what(it));
                            }
                            Collective::Allgather => {
                                let mut send: Vec<u32> = (0..N).map(|i| val(seed, me, i)).collect();
                                let mut recv = vec![0u32; N * np];
                                comm.allgather(&send, &mut recv).ctx(what(it))?;
                                send.fill(SENTINEL);
                                jitter();
                                check_each(&recv, |k| val(seed, k / N, k % N), &what(it));
                            }
                            Collective::Alltoall => {
                                let mut send: Vec<u32> =
                                    (0..N * np).map(|k| val(seed, me * np + k / N, k % N)).collect();
                                let mut recv = vec![0u32; N * np];
                                comm.alltoall(&send, &mut recv).ctx(what(it))?;
                                send.fill(SENTINEL);
                                jitter();
                                check_each(&recv, |k| val(seed, (k / N) * np + me, k % N), &what(it));
                            }
                            Collective::Allreduce => {
                                let mut send = reduce_inputs(seed, me, N);
                                let mut recv = vec![0u32; N];
                                comm.allreduce(&send, &mut recv, Sum).ctx(what(it))?;
                                send.fill(SENTINEL);
                                jitter();
                                check_each(&recv, |i| reduce_sum(seed, np, i), &what(it));
                            }
                            _ => {
                                let mut send = reduce_inputs(seed, me, N);
                                let mut recv = vec![0u32; N];
                                comm.scan(&send, &mut recv, Sum).ctx(what(it))?;
                                send.fill(SENTINEL);
                                jitter();
                                check_each(&recv, |i| reduce_sum(seed, me + 1, i), &what(it));
                            }
                        }
                    }
                }
            }
            Ok(())
        });
    }
}

#[test]
fn barrier_stress_with_jitter() {
    // Nobody leaves barrier k before everyone has arrived at it, over many rounds in a row with
    // random delays (round k's flags must not be confused with round k + 1's).
    const ROUNDS: usize = 300;
    for np in [3, 7] {
        let arrivals = Arc::new(AtomicUsize::new(0));
        run_ok(np, "barrier stress", move |world| {
            let mut rng = common::Rng::new(world.rank() as u64 + 7);
            let mut done = 0;
            for alg in algorithms(Collective::Barrier) {
                let comm = forced(&world, Collective::Barrier, alg)?;
                for _ in 0..ROUNDS {
                    if rng.chance(30) {
                        std::thread::yield_now();
                    }
                    arrivals.fetch_add(1, Ordering::SeqCst);
                    comm.barrier().ctx(|| format!("barrier {alg}, np={np}"))?;
                    done += 1;
                    let seen = arrivals.load(Ordering::SeqCst);
                    assert!(seen >= np * done, "barrier {alg}, np={np}: left barrier {done} after {seen} arrivals");
                    assert!(seen <= np * (done + 1), "barrier {alg}, np={np}: {seen} arrivals while in round {done}");
                }
            }
            Ok(())
        });
    }
}

/// A rank waiting inside a native collective still moves its point-to-point traffic: here the
/// peer can only reach the barrier after the waiting rank has drained a ring the peer filled
/// (blocking sends beyond the ring's 64 slots), and after the waiting rank's own queued
/// nonblocking sends have been started.
#[test]
fn native_waits_keep_point_to_point_moving() {
    const MESSAGES: u32 = 300;
    run_ok(2, "native barrier with point-to-point in flight", |world| {
        let world = forced(&world, Collective::Barrier, Algorithm::Native)?;
        let peer = 1 - world.rank();
        let outgoing: Vec<u32> = (0..MESSAGES).collect();
        world.scope(|s| {
            // Nonblocking sends beyond the ring capacity: the tail is queued in the device.
            let sends: Vec<_> =
                outgoing.iter().map(|v| s.isend(std::slice::from_ref(v), peer, 1)).collect::<Result<_>>()?;
            if world.rank() == 0 {
                world.barrier()?;
                for expect in 0..MESSAGES {
                    let mut got = [0u32];
                    world.recv(&mut got, peer, 1)?;
                    assert_eq!(got[0], expect);
                }
            } else {
                for expect in 0..MESSAGES {
                    let mut got = [0u32];
                    world.recv(&mut got, peer, 1)?;
                    assert_eq!(got[0], expect);
                }
                world.barrier()?;
            }
            sends.into_iter().try_for_each(|r| r.wait().map(drop))
        })
    });
}

/// A user op that calls a collective on the communicator it is reducing over gets `Err` from
/// that inner call (on the native path it would otherwise republish the rank's slot while the
/// outer reduction still reads peers' buffers); the outer reduction still completes correctly.
#[test]
fn a_collective_inside_a_user_op_on_the_same_communicator_is_an_error() {
    run_ok(3, "allreduce whose op calls a barrier", |world| {
        let tuning = Tuning::defaults()
            .force(Collective::Allreduce, Algorithm::Native)?
            .force(Collective::Barrier, Algorithm::Native)?;
        let comm = world.with_tuning(tuning);
        let inner = std::cell::RefCell::new(Vec::new());
        let op = UserOp::commutative(|input: &[u64], inout: &mut [u64]| {
            inner.borrow_mut().push(comm.barrier());
            for (a, b) in input.iter().zip(inout.iter_mut()) {
                *b += *a;
            }
        });
        let mut sum = [0u64; 4];
        comm.allreduce(&[comm.rank() as u64 + 1; 4], &mut sum, &op)?;
        assert_eq!(sum, [6; 4]);
        let inner = inner.into_inner();
        assert!(!inner.is_empty(), "the op ran on every rank (each reduces a chunk)");
        for result in inner {
            assert!(
                matches!(&result, Err(Error::InvalidArgument(m)) if m.contains("inside another collective")),
                "{result:?}"
            );
        }
        comm.barrier()
    });
}

/// The k-ary tree's arity is a tuning parameter (four by default); other arities broadcast
/// correctly from every root.
#[test]
fn kary_bcast_with_other_arities() {
    for arity in [1, 2, 3, 7] {
        for np in [1, 2, 5, 8, 16] {
            run_ok(np, &format!("fat bcast with arity {arity}"), move |world| {
                let tuning = Tuning::defaults().force(Collective::Bcast, Algorithm::Fat)?.with_kary_arity(arity)?;
                let comm = world.with_tuning(tuning);
                for root in roots(np) {
                    let mut data: Vec<u32> =
                        (0..1000).map(|i| if comm.rank() == root { val(root as u32, arity, i) } else { 0 }).collect();
                    comm.bcast(&mut data, root)?;
                    check_each(&data, |i| val(root as u32, arity, i), &|| {
                        format!("arity {arity}, np {np}, root {root}")
                    });
                }
                Ok(())
            });
        }
    }
}

/// Every collective gives the same results on the tcp device (thread ranks over loopback
/// sockets, default selection, so the point-to-point algorithms run) as the arithmetic says,
/// for small and rendezvous-sized data and non-power-of-two rank counts.
#[test]
fn every_collective_runs_on_tcp() {
    use fastmp::op::Sum;
    for np in [1usize, 3, 4] {
        for n in [1usize, 3000, 70_000] {
            let config = fastmp::Config::new().device(fastmp::DeviceKind::Tcp).np(np);
            job(config, &format!("tcp collectives np={np} n={n}"), move |world| {
                let (rank, size) = (world.rank(), world.size());
                let value = |r: usize, i: usize| (r * 7 + i) as u64;
                world.barrier()?;
                let mut b: Vec<u64> = if rank == size - 1 { (0..n).map(|i| value(9, i)).collect() } else { vec![0; n] };
                world.bcast(&mut b, size - 1)?;
                assert!(b.iter().enumerate().all(|(i, &x)| x == value(9, i)), "bcast");
                let mine: Vec<u64> = (0..n).map(|i| value(rank, i)).collect();
                let mut sum = vec![0u64; n];
                world.allreduce(&mine, &mut sum, Sum)?;
                assert!(
                    sum.iter().enumerate().all(|(i, &x)| x == (0..size).map(|r| value(r, i)).sum::<u64>()),
                    "allreduce"
                );
                let mut all = vec![0u64; n * size];
                world.allgather(&mine, &mut all)?;
                assert!(
                    (0..size).all(|r| all[r * n..(r + 1) * n] == (0..n).map(|i| value(r, i)).collect::<Vec<_>>()[..]),
                    "allgather"
                );
                let send: Vec<u64> = (0..n * size).map(|i| value(rank, i)).collect();
                let mut got = vec![0u64; n * size];
                world.alltoall(&send, &mut got)?;
                assert!((0..size).all(|r| (0..n).all(|i| got[r * n + i] == value(r, rank * n + i))), "alltoall");
                let mut block = vec![0u64; n];
                world.reduce_scatter_block(&send, &mut block, Sum)?;
                assert!(
                    (0..n).all(|i| block[i] == (0..size).map(|r| value(r, rank * n + i)).sum::<u64>()),
                    "reduce_scatter_block"
                );
                let mut prefix = vec![0u64; n];
                world.scan(&mine, &mut prefix, Sum)?;
                assert!((0..n).all(|i| prefix[i] == (0..=rank).map(|r| value(r, i)).sum::<u64>()), "scan");
                let mut gathered = if rank == 0 { vec![0u64; n * size] } else { Vec::new() };
                world.gather(&mine, &mut gathered, 0)?;
                if rank == 0 {
                    assert_eq!(gathered, all, "gather");
                }
                let mut part = vec![0u64; n];
                let source = if rank == 0 { all.clone() } else { Vec::new() };
                world.scatter(&source, &mut part, 0)?;
                assert_eq!(part, mine, "scatter");
                Ok(())
            })
            .unwrap();
        }
    }
}
