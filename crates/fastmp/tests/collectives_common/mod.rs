//! The checked cases shared by the collective suites (`collectives_*.rs`): one call of a
//! collective with a forced algorithm, on data derived from (case, rank, index), so each rank
//! computes the reference on its own; sums use closed forms so references stay O(n) at np = 16.
//! Failures name the collective, algorithm, np, size and root.

#![allow(dead_code)]

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

use fastmp::coll::{Algorithm, Collective};
use fastmp::op::Sum;
use fastmp::{Comm, Result};

use crate::coll_common::{Context, algorithms, check_each, forced, roots, seed_of, val};

/// Elements (u32) of the large vector case: just over 1 MiB and not a multiple of any np > 1
/// in [`NPS`].
pub const LARGE: usize = 262_147;
/// Fill of receive space that must not be written (gaps, rank 0's exscan output, ...).
pub const SENTINEL: u32 = 0xDEAD_BEEF;

/// Per-rank block (elements) of the large case of the block collectives: odd, and the blocks of
/// all ranks together hold at least [`LARGE`] elements.
pub fn large_block(np: usize) -> usize {
    LARGE.div_ceil(np) | 1
}

/// One checked call, for failure messages.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub coll: Collective,
    pub alg: Algorithm,
    pub np: usize,
    /// Elements: of the whole vector, or of one rank's block for block collectives.
    pub n: usize,
    pub root: Option<usize>,
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
    pub fn seed(&self) -> u32 {
        seed_of(&[self.coll as usize, self.alg as usize, self.np, self.n, self.root.unwrap_or(99)])
    }

    pub fn what(&self, detail: &str) -> impl Fn() -> String + '_ {
        let detail = detail.to_string();
        move || format!("{self}: {detail}")
    }
}

// ---------------------------------------------------------------- counts and displacements

/// Uneven counts of the `v` collectives for size parameter `s`: zero for every rank when `s` is
/// 0, otherwise zero for ranks 1, 4, 7, ... and `s`, `s + 1` or `s + 2` for the others.
pub fn v_counts(np: usize, s: usize) -> Vec<usize> {
    (0..np).map(|r| if s == 0 || r % 3 == 1 { 0 } else { s + (r * 5) % 3 }).collect()
}

/// Displacements that place the blocks in reverse rank order with a one-element gap before
/// each, and the buffer length (one more gap at the end).
pub fn v_displs(counts: &[usize]) -> (Vec<usize>, usize) {
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
pub fn check_v_buffer(
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
pub fn pair_count(s: usize, from: usize, to: usize) -> usize {
    if s == 0 || (from + 2 * to) % 3 == 1 { 0 } else { s + (from + to) % 3 }
}

// ---------------------------------------------------------------- the u32 sum reference

/// Rank `r`'s element `i` in the reduction cases: `a(i) * (r + 1) + r`, so sums over ranks have
/// a closed form.
pub fn reduce_input(seed: u32, r: usize, i: usize) -> u32 {
    val(seed, 0, i).wrapping_mul(r as u32 + 1).wrapping_add(r as u32)
}

/// Sum of [`reduce_input`] over ranks `0..k` for element `i`.
pub fn reduce_sum(seed: u32, k: usize, i: usize) -> u32 {
    let k = k as u64;
    let ranks_plus_one = (k * (k + 1) / 2) as u32;
    let ranks = (k * k.saturating_sub(1) / 2) as u32;
    val(seed, 0, i).wrapping_mul(ranks_plus_one).wrapping_add(ranks)
}

pub fn reduce_inputs(seed: u32, rank: usize, n: usize) -> Vec<u32> {
    (0..n).map(|i| reduce_input(seed, rank, i)).collect()
}

// ---------------------------------------------------------------- one case per collective

/// Sizes of a case: 0, 1, 3 elements, a medium one just past the default eager limit (8 KiB)
/// and the large one.
pub fn sizes(coll: Collective, np: usize) -> [usize; 5] {
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

pub fn is_rooted(coll: Collective) -> bool {
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
pub fn check_case(comm: &Comm, case: Case, barriers: &AtomicUsize, barriers_done: &mut usize) -> Result<()> {
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

/// Every collective with every algorithm that runs in one process on `comm`, for each of
/// `sizes` and every root.
pub fn sweep(comm: &Comm, sizes: &[usize], barriers: &AtomicUsize, barriers_done: &mut usize) -> Result<()> {
    sweep_algorithms(comm, sizes, algorithms, barriers, barriers_done)
}

/// [`sweep`] over the algorithms `algorithms_of` names for each collective.
pub fn sweep_algorithms(
    comm: &Comm,
    sizes: &[usize],
    algorithms_of: impl Fn(Collective) -> Vec<Algorithm>,
    barriers: &AtomicUsize,
    barriers_done: &mut usize,
) -> Result<()> {
    let np = comm.size();
    for coll in Collective::ALL {
        for alg in algorithms_of(coll) {
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
