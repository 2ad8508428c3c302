//! Reduce-scatter algorithms: recursive halving (BDE), ring (BKT), reduce+scatterv. Also the
//! block arithmetic, ring reduce-scatter, recursive halving and non-power-of-two fold that the
//! allreduce algorithms reuse.

use std::ops::Range;

use bytemuck::Pod;

use super::Layout;
use super::op::Op;
use super::reduce::zeroed;
use super::select::{Algorithm, Collective};
use super::transport::Run;
use crate::error::Result;

const COLL: Collective = Collective::ReduceScatter;

pub(super) async fn reduce_scatter<T: Pod>(
    comm: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    op: &dyn Op<T>,
    algorithm: Algorithm,
) -> Result<()> {
    match algorithm {
        Algorithm::Bde => halving(comm, send, recv, counts, op).await,
        Algorithm::Bkt => ring(comm, send, recv, counts, op).await,
        Algorithm::ReduceScatter => reduce_then_scatterv(comm, send, recv, counts, op).await,
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

/// Start of block `index` (`index` may be `parts`, giving `len`) when `len` elements are split
/// into `parts` near-equal blocks, the first `len % parts` of them one longer. Never overflows:
/// `index · (len / parts) ≤ len`.
pub(super) fn even_bound(len: usize, parts: usize, index: usize) -> usize {
    index * (len / parts) + index.min(len % parts)
}

/// Element range of block `index` of the split of [`even_bound`].
pub(super) fn even_block(len: usize, parts: usize, index: usize) -> Range<usize> {
    even_bound(len, parts, index)..even_bound(len, parts, index + 1)
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
    pub(super) async fn fold_in<T: Pod>(
        &self,
        comm: &Run<'_>,
        acc: &mut [T],
        spare: &mut [T],
        op: &dyn Op<T>,
        coll: Collective,
    ) -> Result<()> {
        let me = comm.rank();
        match self.pair(me) {
            Some(odd) if odd > me => comm.coll_send(bytemuck::cast_slice(acc), odd, coll).await,
            Some(even) => {
                comm.coll_recv(bytemuck::cast_slice_mut(spare), even, coll).await?;
                op.combine(spare, acc);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Unfolds the pairs: odd ranks send `result`, even ranks receive into it.
    pub(super) async fn unfold<T: Pod>(&self, comm: &Run<'_>, result: &mut [T], coll: Collective) -> Result<()> {
        let me = comm.rank();
        match self.pair(me) {
            Some(odd) if odd > me => comm.coll_recv(bytemuck::cast_slice_mut(result), odd, coll).await,
            Some(even) => comm.coll_send(bytemuck::cast_slice(result), even, coll).await,
            None => Ok(()),
        }
    }
}

/// Ring reduce-scatter of `send` split into `np` blocks (element ranges `block(i)`): in each of
/// `np - 1` steps a rank passes a partial reduction of one block to its right neighbour and
/// folds its own part of the next block into the one from its left, ending with the full
/// reduction of block `rank` in `result`. Only two block-sized temporaries, whatever `np`.
/// Commutative operations only.
pub(super) async fn ring_reduce_scatter<T: Pod>(
    comm: &Run<'_>,
    send: &[T],
    block: impl Fn(usize) -> Range<usize>,
    result: &mut [T],
    op: &dyn Op<T>,
    coll: Collective,
) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    if np == 1 {
        result.copy_from_slice(&send[block(0)]);
        return Ok(());
    }
    let (right, left) = ((me + 1) % np, (me + np - 1) % np);
    let largest = (0..np).map(|i| block(i).len()).max().unwrap_or(0);
    let mut buffers = zeroed::<T>(2 * largest);
    let (mut outgoing, mut incoming) = buffers.split_at_mut(largest);
    for step in 0..np - 1 {
        let sent = block((me + 2 * np - step - 1) % np);
        let folded = block((me + 2 * np - step - 2) % np);
        // The first step sends this rank's own part; later ones the partial received last.
        let out: &[T] = if step == 0 { &send[sent.clone()] } else { &outgoing[..sent.len()] };
        let into = &mut incoming[..folded.len()];
        comm.coll_sendrecv(bytemuck::cast_slice(out), right, bytemuck::cast_slice_mut(into), left, coll).await?;
        op.combine(&send[folded], into);
        std::mem::swap(&mut outgoing, &mut incoming);
    }
    result.copy_from_slice(&outgoing[..result.len()]);
    Ok(())
}

/// Recursive halving over the fold's virtual ranks: each step keeps half of the current span of
/// virtual blocks (`bound(v)..bound(v + 1)` in elements) and sends the other half to the
/// partner. On return block `v` of `acc` holds the full reduction. Commutative operations only.
#[allow(clippy::too_many_arguments)]
pub(super) async fn recursive_halving<T: Pod>(
    comm: &Run<'_>,
    fold: &Fold,
    v: usize,
    acc: &mut [T],
    spare: &mut [T],
    bound: impl Fn(usize) -> usize,
    op: &dyn Op<T>,
    coll: Collective,
) -> Result<()> {
    let (mut lo, mut hi) = (0, fold.pof2);
    let mut mask = fold.pof2 / 2;
    while mask > 0 {
        let partner = v ^ mask;
        let mid = lo + mask;
        let (keep, give) = if v < partner { ((lo, mid), (mid, hi)) } else { ((mid, hi), (lo, mid)) };
        let kept = bound(keep.0)..bound(keep.1);
        let incoming = &mut spare[..kept.len()];
        let peer = fold.real_rank(partner);
        comm.coll_sendrecv(
            bytemuck::cast_slice(&acc[bound(give.0)..bound(give.1)]),
            peer,
            bytemuck::cast_slice_mut(incoming),
            peer,
            coll,
        )
        .await?;
        op.combine(incoming, &mut acc[kept]);
        (lo, hi) = keep;
        mask /= 2;
    }
    Ok(())
}

/// Recursive halving after the fold; odd ranks of the folded pairs then return the even
/// rank's block.
async fn halving<T: Pod>(comm: &Run<'_>, send: &[T], recv: &mut [T], counts: &[usize], op: &dyn Op<T>) -> Result<()> {
    let me = comm.rank();
    let fold = Fold::new(comm.size());
    let offsets = offsets_of(counts);
    let mut acc = send.to_vec();
    let mut spare = zeroed::<T>(send.len());
    fold.fold_in(comm, &mut acc, &mut spare, op, COLL).await?;
    let Some(v) = fold.virtual_rank(me) else {
        return fold.unfold(comm, recv, COLL).await;
    };
    let bound = |u| offsets[fold.first_real(u)];
    recursive_halving(comm, &fold, v, &mut acc, &mut spare, bound, op, COLL).await?;
    if fold.first_real(v) != me {
        fold.unfold(comm, &mut acc[block(&offsets, me - 1)], COLL).await?;
    }
    recv.copy_from_slice(&acc[block(&offsets, me)]);
    Ok(())
}

/// Ring reduce-scatter over the `counts` blocks.
async fn ring<T: Pod>(comm: &Run<'_>, send: &[T], recv: &mut [T], counts: &[usize], op: &dyn Op<T>) -> Result<()> {
    let offsets = offsets_of(counts);
    ring_reduce_scatter(comm, send, |i| block(&offsets, i), recv, op, COLL).await
}

/// Composite: MST reduce to rank 0 (order-correct), then scatterv of the blocks.
async fn reduce_then_scatterv<T: Pod>(
    comm: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    op: &dyn Op<T>,
) -> Result<()> {
    let at_root = comm.rank() == 0;
    let mut reduced = zeroed::<T>(if at_root { send.len() } else { 0 });
    super::reduce::reduce(comm, send, &mut reduced, op, 0, Algorithm::Mst).await?;
    let layout = if at_root {
        let offsets = offsets_of(counts);
        Some(Layout::new::<T>(comm, "reduce_scatter", counts, &offsets[..counts.len()], send.len())?)
    } else {
        None
    };
    comm.scatterv_bytes(bytemuck::cast_slice(&reduced), layout.as_ref(), bytemuck::cast_slice_mut(recv), 0).await
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
        let even = |len, parts| (0..=parts).map(|i| even_bound(len, parts, i)).collect::<Vec<_>>();
        assert_eq!(even(7, 3), [0, 3, 5, 7]);
        assert_eq!(even(0, 2), [0, 0, 0]);
        assert_eq!(even(usize::MAX, 2), [0, usize::MAX / 2 + 1, usize::MAX]);
        assert_eq!(even_block(7, 3, 2), 5..7);
    }
}
