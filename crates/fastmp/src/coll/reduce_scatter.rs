//! Reduce-scatter algorithms: recursive halving (BDE), ring (BKT), reduce+scatterv. Also the
//! block arithmetic, ring reduce-scatter, recursive halving and non-power-of-two fold that the
//! allreduce algorithms reuse.

use std::ops::Range;

use bytemuck::Pod;

use super::op::Op;
use super::reduce::zeroed;
use super::select::{Algorithm, Collective};
use super::{Layout, native, scatter_gather};
use crate::comm::Comm;
use crate::error::Result;

const COLL: Collective = Collective::ReduceScatter;

pub(super) fn reduce_scatter<T: Pod>(
    comm: &Comm,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    op: &dyn Op<T>,
    algorithm: Algorithm,
) -> Result<()> {
    match algorithm {
        Algorithm::Bde => halving(comm, send, recv, counts, op),
        Algorithm::Bkt => ring(comm, send, recv, counts, op),
        Algorithm::ReduceScatter => reduce_then_scatterv(comm, send, recv, counts, op),
        other => Err(COLL.unsupported(other)),
    }
}

/// Element offsets of consecutive blocks of `counts` elements: block `i` is
/// `offsets[i]..offsets[i + 1]`.
pub(super) fn offsets_of(counts: &[usize]) -> Vec<usize> {
    std::iter::once(0)
        .chain(counts.iter().scan(0, |end, &count| {
            *end += count;
            Some(*end)
        }))
        .collect()
}

/// Offsets of `parts` near-equal blocks of `len` elements (the first `len % parts` one longer).
pub(super) fn even_offsets(len: usize, parts: usize) -> Vec<usize> {
    (0..=parts).map(|i| i * (len / parts) + i.min(len % parts)).collect()
}

/// Element range of block `i` given its offsets.
pub(super) fn block(offsets: &[usize], i: usize) -> Range<usize> {
    offsets[i]..offsets[i + 1]
}

/// MPICH's fold of a non-power-of-two process count onto the largest power of two `pof2` below
/// it: of the first `2·rem` ranks each even one hands its vector to the odd one above it and sits
/// out. The others are renumbered `0..pof2` in rank order, so virtual rank `v` stands for the
/// contiguous real ranks `first_real(v)..first_real(v + 1)`, which keeps rank order.
pub(super) struct Fold {
    pub(super) pof2: usize,
    rem: usize,
}

impl Fold {
    pub(super) fn new(np: usize) -> Fold {
        let pof2 = 1 << np.ilog2();
        Fold { pof2, rem: np - pof2 }
    }

    /// Virtual rank of `rank`, or `None` if it sits out.
    pub(super) fn virtual_rank(&self, rank: usize) -> Option<usize> {
        if rank >= 2 * self.rem {
            Some(rank - self.rem)
        } else if !rank.is_multiple_of(2) {
            Some(rank / 2)
        } else {
            None
        }
    }

    /// The real rank that acts for virtual rank `v`.
    pub(super) fn real_rank(&self, v: usize) -> usize {
        if v < self.rem { 2 * v + 1 } else { v + self.rem }
    }

    /// The lowest real rank that virtual rank `v` stands for (`v` may be `pof2`).
    pub(super) fn first_real(&self, v: usize) -> usize {
        if v < self.rem { 2 * v } else { v + self.rem }
    }

    /// The other member of `rank`'s pair, if it is one of the first `2·rem` ranks.
    fn pair(&self, rank: usize) -> Option<usize> {
        (rank < 2 * self.rem).then_some(rank ^ 1)
    }

    /// Folds the pairs: even ranks send `acc`, odd ranks set `acc = received ∘ acc`.
    pub(super) fn fold_in<T: Pod>(
        &self,
        comm: &Comm,
        acc: &mut [T],
        spare: &mut [T],
        op: &dyn Op<T>,
        coll: Collective,
    ) -> Result<()> {
        let me = comm.rank();
        match self.pair(me) {
            Some(odd) if odd > me => comm.coll_send(bytemuck::cast_slice(acc), odd, coll),
            Some(even) => {
                comm.coll_recv(bytemuck::cast_slice_mut(spare), even, coll)?;
                op.combine(spare, acc);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Unfolds the pairs: odd ranks send `result`, even ranks receive into it.
    pub(super) fn unfold<T: Pod>(&self, comm: &Comm, result: &mut [T], coll: Collective) -> Result<()> {
        let me = comm.rank();
        match self.pair(me) {
            Some(odd) if odd > me => comm.coll_recv(bytemuck::cast_slice_mut(result), odd, coll),
            Some(even) => comm.coll_send(bytemuck::cast_slice(result), even, coll),
            None => Ok(()),
        }
    }
}

/// Ring reduce-scatter on `acc` (this rank's vector on entry): after `np - 1` steps block `r`
/// of `acc` (per `offsets`) holds the full reduction at rank `r`. Each step sends a block to the
/// right neighbour and folds in the one from the left. Commutative operations only.
pub(super) fn ring_reduce_scatter<T: Pod>(
    comm: &Comm,
    acc: &mut [T],
    offsets: &[usize],
    op: &dyn Op<T>,
    coll: Collective,
) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let (right, left) = ((me + 1) % np, (me + np - 1) % np);
    let largest = offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let mut incoming = zeroed::<T>(largest);
    for step in 0..np - 1 {
        let outgoing = block(offsets, (me + 2 * np - step - 1) % np);
        let folded = block(offsets, (me + 2 * np - step - 2) % np);
        let incoming = &mut incoming[..folded.len()];
        comm.coll_sendrecv(
            bytemuck::cast_slice(&acc[outgoing]),
            right,
            bytemuck::cast_slice_mut(incoming),
            left,
            coll,
        )?;
        op.combine(incoming, &mut acc[folded]);
    }
    Ok(())
}

/// Recursive halving over the fold's virtual ranks: each step keeps half of the current span of
/// virtual blocks (`bounds[v]..bounds[v + 1]` in elements) and sends the other half to the
/// partner. On return block `v` of `acc` holds the full reduction. Commutative operations only.
#[allow(clippy::too_many_arguments)]
pub(super) fn recursive_halving<T: Pod>(
    comm: &Comm,
    fold: &Fold,
    v: usize,
    acc: &mut [T],
    spare: &mut [T],
    bounds: &[usize],
    op: &dyn Op<T>,
    coll: Collective,
) -> Result<()> {
    let (mut lo, mut hi) = (0, fold.pof2);
    let mut mask = fold.pof2 / 2;
    while mask > 0 {
        let partner = v ^ mask;
        let mid = lo + mask;
        let (keep, give) = if v < partner { ((lo, mid), (mid, hi)) } else { ((mid, hi), (lo, mid)) };
        let kept = bounds[keep.0]..bounds[keep.1];
        let incoming = &mut spare[..kept.len()];
        let peer = fold.real_rank(partner);
        comm.coll_sendrecv(
            bytemuck::cast_slice(&acc[bounds[give.0]..bounds[give.1]]),
            peer,
            bytemuck::cast_slice_mut(incoming),
            peer,
            coll,
        )?;
        op.combine(incoming, &mut acc[kept]);
        (lo, hi) = keep;
        mask /= 2;
    }
    Ok(())
}

/// Recursive halving after the fold; odd ranks of the folded pairs then return the even
/// rank's block.
fn halving<T: Pod>(comm: &Comm, send: &[T], recv: &mut [T], counts: &[usize], op: &dyn Op<T>) -> Result<()> {
    let me = comm.rank();
    let fold = Fold::new(comm.size());
    let offsets = offsets_of(counts);
    let mut acc = send.to_vec();
    let mut spare = zeroed::<T>(send.len());
    fold.fold_in(comm, &mut acc, &mut spare, op, COLL)?;
    let Some(v) = fold.virtual_rank(me) else {
        return fold.unfold(comm, recv, COLL);
    };
    let bounds: Vec<usize> = (0..=fold.pof2).map(|u| offsets[fold.first_real(u)]).collect();
    recursive_halving(comm, &fold, v, &mut acc, &mut spare, &bounds, op, COLL)?;
    if fold.first_real(v) != me {
        fold.unfold(comm, &mut acc[block(&offsets, me - 1)], COLL)?;
    }
    recv.copy_from_slice(&acc[block(&offsets, me)]);
    Ok(())
}

/// Ring reduce-scatter over the `counts` blocks.
fn ring<T: Pod>(comm: &Comm, send: &[T], recv: &mut [T], counts: &[usize], op: &dyn Op<T>) -> Result<()> {
    let offsets = offsets_of(counts);
    let mut acc = send.to_vec();
    ring_reduce_scatter(comm, &mut acc, &offsets, op, COLL)?;
    recv.copy_from_slice(&acc[block(&offsets, comm.rank())]);
    Ok(())
}

/// Composite: MST reduce to rank 0 (order-correct), then scatterv of the blocks.
fn reduce_then_scatterv<T: Pod>(
    comm: &Comm,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    op: &dyn Op<T>,
) -> Result<()> {
    let at_root = comm.rank() == 0;
    let mut reduced = zeroed::<T>(if at_root { send.len() } else { 0 });
    super::reduce::reduce(comm, send, &mut reduced, op, 0, Algorithm::Mst)?;
    let layout = if at_root {
        let offsets = offsets_of(counts);
        Some(Layout::new::<T>(comm, "reduce_scatter", counts, &offsets[..counts.len()], send.len())?)
    } else {
        None
    };
    let (reduced, recv): (&[u8], &mut [u8]) = (bytemuck::cast_slice(&reduced), bytemuck::cast_slice_mut(recv));
    match comm.algorithm_for(Collective::Scatterv, 0, true) {
        Algorithm::Native => native::scatterv(comm, reduced, layout.as_ref(), recv, 0),
        algorithm => scatter_gather::scatterv(comm, reduced, layout.as_ref(), recv, 0, algorithm),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fold_keeps_virtual_ranks_contiguous_and_in_order() {
        for np in 1..40 {
            let fold = Fold::new(np);
            assert!(fold.pof2 <= np && np < 2 * fold.pof2);
            assert_eq!(fold.first_real(0), 0);
            assert_eq!(fold.first_real(fold.pof2), np);
            for v in 0..fold.pof2 {
                let real = fold.real_rank(v);
                assert_eq!(fold.virtual_rank(real), Some(v));
                assert!((fold.first_real(v)..fold.first_real(v + 1)).contains(&real));
            }
        }
    }

    #[test]
    fn block_offsets() {
        assert_eq!(offsets_of(&[2, 0, 3]), [0, 2, 2, 5]);
        assert_eq!(even_offsets(7, 3), [0, 3, 5, 7]);
        assert_eq!(even_offsets(0, 2), [0, 0, 0]);
    }
}
