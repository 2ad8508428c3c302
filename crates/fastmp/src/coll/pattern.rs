//! Message patterns that several collectives share, over ranks that are not trees (those are in
//! `tree.rs`): the error policy of running every step, rings (allgather, the reduce-scatter of
//! allreduce and reduce_scatter, and a segmented ring pass whose segments move on one by one),
//! and the hypercube with MPICH's fold of a non-power-of-two process count (recursive halving
//! and doubling).

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::ops::Range;
use std::pin::Pin;
use std::task::Poll;

use bytemuck::Pod;

use super::fold::zeroed;
use super::op::Op;
use super::select::Collective;
use super::transport::Run;
use super::vector::carve;
use crate::error::Result;

/// Runs every step even after one fails and returns the first error, so this rank still does
/// its part of the message pattern for the others.
pub(super) async fn all_steps<S>(
    steps: impl IntoIterator<Item = S>,
    mut step: impl AsyncFnMut(S) -> Result<()>,
) -> Result<()> {
    let mut first = Ok(());
    for s in steps {
        first = first.and(step(s).await);
    }
    first
}

/// Ring allgather (BKT) of the byte ranges `block_of(rank)` of `buf`, this rank's block already
/// in place: in step `s` each rank passes the block it received in step `s - 1` (its own in step
/// 0) to its right neighbour and receives the next one from its left; `np - 1` steps, each run
/// even if an earlier one failed.
pub(super) async fn ring_allgather(
    comm: &Run<'_>,
    buf: &mut [u8],
    block_of: impl Fn(usize) -> Range<usize>,
    coll: Collective,
) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let (right, left) = ((me + 1) % np, (me + np - 1) % np);
    all_steps(0..np.saturating_sub(1), async |step| {
        let outgoing = (me + np - step) % np;
        let incoming = (me + np - step - 1) % np;
        let [out, inc] = carve(buf, [block_of(outgoing), block_of(incoming)]);
        comm.coll_sendrecv(out, right, inc, left, coll).await
    })
    .await
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

/// A receive posted now and finished later that gives its buffer back, so a pipeline can read
/// one segment while the later ones are still in flight (a batch keeps its buffers borrowed
/// until it is gone). Dropping it unfinished releases the receive.
struct Posted<'a, T> {
    receive: Pin<Box<dyn Future<Output = Result<&'a mut [T]>> + 'a>>,
    /// The outcome, if the receive completed as it was posted.
    done: Option<Result<&'a mut [T]>>,
}

impl<'a, T: Pod> Posted<'a, T> {
    /// Posts the receive of exactly `piece.len()` elements from `peer` into `piece`.
    async fn new(comm: &'a Run<'a>, piece: &'a mut [T], peer: usize, coll: Collective) -> Self {
        let mut receive: Pin<Box<dyn Future<Output = Result<&'a mut [T]>> + 'a>> = Box::pin(async move {
            let mut batch = comm.batch();
            batch.irecv(bytemuck::cast_slice_mut(&mut *piece), peer, coll)?;
            batch.wait_all().await?;
            Ok(piece)
        });
        // The first poll posts it (and may already finish it: an async block must then not be
        // polled again).
        let engine = &comm.process.engine;
        let done = poll_fn(|cx| Poll::Ready(engine.polling_parts(|| receive.as_mut().poll(cx)))).await;
        Posted {
            receive,
            done: match done {
                Poll::Ready(outcome) => Some(outcome),
                Poll::Pending => None,
            },
        }
    }

    /// Waits for the data; returns the buffer holding it.
    async fn finish(mut self) -> Result<&'a mut [T]> {
        match self.done.take() {
            Some(outcome) => outcome,
            None => self.receive.await,
        }
    }
}

/// A ring pass of `np - 1` steps pipelined by segment: in step `s` every rank sends `segments`
/// segments to its right neighbour and receives as many from its left, and each received
/// segment, once `arrived(step, segment, data)` has seen it, is what the rank sends on in step
/// `s + 1`. `first` is step 0's outgoing segments; `incoming` yields the buffers of the
/// received segments in (step, segment) order. A segment moves on as soon as it arrived,
/// whatever the others do, so transfers, `arrived`'s work (a fold) and the next step overlap;
/// the next step's receive of a segment is posted before this step's is waited for.
pub(super) async fn pipelined_ring_pass<'a, T: Pod>(
    comm: &'a Run<'a>,
    first: impl IntoIterator<Item = &'a [T]>,
    mut incoming: impl Iterator<Item = &'a mut [T]>,
    segments: usize,
    mut arrived: impl FnMut(usize, usize, &mut [T]),
    coll: Collective,
) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let (right, left) = ((me + 1) % np, (me + np - 1) % np);
    let steps = np.saturating_sub(1);
    let first_step = if steps > 0 { segments } else { 0 };
    // Sends first: on tcp a peer's receive then finds the request to send already there and
    // answers it as it is posted (measured: 8 MiB at np 2 about 15 % faster than receives
    // first, the same at np 4).
    let mut sends = comm.batch();
    for segment in first.into_iter().take(first_step) {
        sends.isend(bytemuck::cast_slice(segment), right, coll)?;
    }
    let mut posted = VecDeque::with_capacity(segments + 1);
    for piece in incoming.by_ref().take(first_step) {
        posted.push_back(Posted::new(comm, piece, left, coll).await);
    }
    for step in 0..steps {
        let forward = step + 1 < steps;
        for segment in 0..segments {
            if forward && let Some(piece) = incoming.next() {
                posted.push_back(Posted::new(comm, piece, left, coll).await);
            }
            let Some(receive) = posted.pop_front() else { break };
            let data = receive.finish().await?;
            arrived(step, segment, data);
            if forward {
                let data: &'a [T] = data;
                sends.isend(bytemuck::cast_slice(data), right, coll)?;
            }
        }
    }
    sends.wait_all().await
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

/// Recursive-doubling allgather of the fold's `pof2` blocks (`bound(u)..bound(u + 1)` bytes of
/// `buf`), run by virtual rank `v`, whose block is in place: before the step with distance
/// `mask` a rank holds the blocks of its aligned run of `mask` virtual ranks and swaps them
/// with `v ^ mask` for the partner's run; `log2 pof2` steps, each run even if an earlier one
/// failed. With `Fold::new(np)` for a power-of-two `np` the virtual ranks are the real ones.
pub(super) async fn recursive_doubling(
    comm: &Run<'_>,
    buf: &mut [u8],
    fold: &Fold,
    v: usize,
    bound: impl Fn(usize) -> usize,
    coll: Collective,
) -> Result<()> {
    let run = |u: usize, mask: usize| bound(u & !(mask - 1))..bound((u & !(mask - 1)) + mask);
    let masks = std::iter::successors(Some(1usize), |mask| Some(mask << 1)).take_while(|&mask| mask < fold.pof2);
    all_steps(masks, async |mask| {
        let partner = v ^ mask;
        let [outgoing, incoming] = carve(buf, [run(v, mask), run(partner, mask)]);
        let peer = fold.real_rank(partner);
        comm.coll_sendrecv(outgoing, peer, incoming, peer, coll).await
    })
    .await
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
}
