//! Allreduce algorithms: flat, binomial, recursive doubling, ring, reduce+bcast, Rabenseifner,
//! segmented ring.

use std::ops::Range;

use bytemuck::Pod;

use super::fold::{Partial, exchange_flat, vector_of};
use super::op::Op;
use super::op::fold_in_rank_order;
use super::pattern::{
    Fold, pipelined_ring_pass, recursive_doubling as doubling_allgather, recursive_halving, ring_allgather,
    ring_reduce_scatter,
};
use super::select::{Algorithm, Collective, Pick};
use super::transport::Run;
use super::vector::{carve_in_order, even_block, even_bound};
use crate::error::Result;

const COLL: Collective = Collective::Allreduce;

/// `send` is `None` in place (MPI_IN_PLACE: `recv` holds this rank's vector). BDE and
/// Rabenseifner start from the vector in `recv` anyway; the others read it while `recv` fills, so
/// they get a copy.
pub(super) async fn allreduce<T: Pod>(
    comm: &Run<'_>,
    send: Option<&[T]>,
    recv: &mut [T],
    op: &dyn Op<T>,
    algorithm: Algorithm,
) -> Result<()> {
    if let Algorithm::Bde | Algorithm::Rabenseifner = algorithm {
        if let Some(send) = send {
            recv.copy_from_slice(send);
        }
        let folded = folded(comm, recv, op, async |fold, v, acc, spare| match algorithm {
            Algorithm::Bde => recursive_doubling(comm, fold, v, acc, spare, op).await,
            _ => rabenseifner(comm, fold, v, acc, spare, op).await,
        });
        return folded.await;
    }
    let copy;
    let send = match send {
        Some(send) => send,
        None => {
            copy = recv.to_vec();
            &copy
        }
    };
    match algorithm {
        Algorithm::Nbft => flat(comm, send, recv, op).await,
        // Tree reduce to rank 0, then binomial-tree bcast. The reduce runs on the MST, which
        // keeps rank order for any op; rooted at 0 it is a binomial tree only when np is a power
        // of two, so for other np the fan-in is shaped differently from the fan-out.
        Algorithm::Bt => reduce_then_bcast(comm, send, recv, op, Pick::Fixed(Algorithm::Bt)).await,
        Algorithm::ReduceBcast => reduce_then_bcast(comm, send, recv, op, Pick::Tuned).await,
        Algorithm::Bkt => ring(comm, send, recv, op).await,
        // Boxed: its state (two pipelined passes) is large, and every allreduce's future would
        // otherwise carry it, small ones included; it runs on large vectors only.
        Algorithm::RingSegmented => Box::pin(ring_segmented(comm, send, recv, op)).await,
        other => Err(Collective::Allreduce.unsupported(other)),
    }
}

/// Every rank sends its vector to every other one (nonblocking) and combines all in rank order.
async fn flat<T: Pod>(comm: &Run<'_>, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let others = exchange_flat(comm, send, 0..np, 0..np, COLL).await?;
    fold_in_rank_order(op, recv, 0..np, |r| vector_of(r, me, send, &others))
}

/// MST reduce to rank 0 (order-correct), then bcast of the result from rank 0 as `bcast` picks.
async fn reduce_then_bcast<T: Pod>(
    comm: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    bcast: Pick,
) -> Result<()> {
    comm.dispatch_reduce(send, recv, op, 0, Pick::Fixed(Algorithm::Mst)).await?;
    comm.dispatch_bcast(bytemuck::cast_slice_mut(recv), 0, bcast).await
}

/// Runs `body(fold, v, acc, spare)` on the fold's virtual ranks with `acc` (which is `recv`,
/// holding this rank's vector on entry) holding the folded vector, then hands the result to the
/// ranks that sat out.
async fn folded<T: Pod>(
    comm: &Run<'_>,
    recv: &mut [T],
    op: &dyn Op<T>,
    body: impl AsyncFnOnce(&Fold, usize, &mut [T], &mut [T]) -> Result<()>,
) -> Result<()> {
    let fold = Fold::new(comm.size());
    let mut spare = comm.process.scratch.take::<T>(recv.len());
    fold.fold_in(comm, recv, &mut spare, op, COLL).await?;
    if let Some(v) = fold.virtual_rank(comm.rank()) {
        body(&fold, v, recv, &mut spare).await?;
    }
    fold.unfold(comm, recv, COLL).await
}

/// Recursive doubling over the fold's virtual ranks: after the step with distance `mask` a
/// rank holds the reduction of an aligned run of `2·mask` virtual ranks, which are contiguous
/// real ranks, so combining lower ∘ higher keeps rank order.
async fn recursive_doubling<T: Pod>(
    comm: &Run<'_>,
    fold: &Fold,
    v: usize,
    acc: &mut [T],
    spare: &mut [T],
    op: &dyn Op<T>,
) -> Result<()> {
    let mut partial = Partial::new(acc, spare);
    let mut mask = 1;
    while mask < fold.pof2 {
        let partner = v ^ mask;
        let peer = fold.real_rank(partner);
        let (mine, incoming) = partial.buffers();
        comm.coll_sendrecv(bytemuck::cast_slice(mine), peer, bytemuck::cast_slice_mut(incoming), peer, COLL).await?;
        partial.absorb(op, partner < v);
        mask <<= 1;
    }
    partial.settle();
    Ok(())
}

/// Byte range of the element range `elements` of a `T` buffer.
fn bytes_of<T>(elements: Range<usize>) -> Range<usize> {
    elements.start * size_of::<T>()..elements.end * size_of::<T>()
}

/// Ring reduce-scatter then ring allgather over `np` near-equal blocks (commutative).
async fn ring<T: Pod>(comm: &Run<'_>, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
    let (np, me, len) = (comm.size(), comm.rank(), send.len());
    let block = |i| even_block(len, np, i);
    ring_reduce_scatter(comm, send, block, &mut recv[block(me)], op, COLL).await?;
    ring_allgather(comm, bytemuck::cast_slice_mut(recv), |i| bytes_of::<T>(block(i)), COLL).await
}

/// Rabenseifner: fold, recursive-halving reduce-scatter over `pof2` near-equal blocks,
/// recursive-doubling allgather of the blocks, unfold (commutative).
async fn rabenseifner<T: Pod>(
    comm: &Run<'_>,
    fold: &Fold,
    v: usize,
    acc: &mut [T],
    spare: &mut [T],
    op: &dyn Op<T>,
) -> Result<()> {
    let len = acc.len();
    let bound = |u| even_bound(len, fold.pof2, u);
    recursive_halving(comm, fold, v, acc, spare, bound, op, COLL).await?;
    let byte_bound = |u| bound(u) * size_of::<T>();
    doubling_allgather(comm, bytemuck::cast_slice_mut(acc), fold, v, byte_bound, COLL).await
}

/// Bytes a segment of [`ring_segmented`] aims at: large enough that a segment's own costs (a
/// message, a rendezvous round trip on tcp) stay small against its transfer, small enough that
/// several are in flight per block, so one is folded while the next arrives. Measured on tcp
/// (np 2 and 4, 1–8 MiB): 512 KiB and 1 MiB segments were the fastest, 256 KiB 5–10 % slower
/// at 8 MiB, 64 KiB up to twice as slow; 1 MiB messages hit the tcp device's slower single
/// rendezvous transfer (README, "TCP"), so 512 KiB.
const SEGMENT_BYTES: usize = 512 * 1024;

/// Most segments per block: each is a receive posted ahead, so huge blocks get larger segments
/// rather than an unbounded number of outstanding receives.
const MAX_SEGMENTS: usize = 64;

/// Segments per block of `block_bytes` (every rank derives the same count from the same size).
fn segments_per_block(block_bytes: usize) -> usize {
    block_bytes.div_ceil(SEGMENT_BYTES).clamp(1, MAX_SEGMENTS)
}

/// Ring reduce-scatter then ring allgather over `np` near-equal blocks, each block travelling as
/// several segments that move on one by one ([`pipelined_ring_pass`]): a segment is folded and
/// passed on while the later ones of its block are still arriving, so the transfers, the folds
/// and the next step overlap instead of taking turns. Reduces straight into `recv`, with no
/// temporary. Commutative operations only.
async fn ring_segmented<T: Pod>(comm: &Run<'_>, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
    let (np, me, len) = (comm.size(), comm.rank(), send.len());
    if np == 1 {
        recv.copy_from_slice(send);
        return Ok(());
    }
    let segments = segments_per_block(size_of_val(send) / np);
    let block = |i: usize| even_block(len, np, i % np);
    let segment = move |i: usize, k: usize| {
        let whole = block(i);
        whole.start + even_bound(whole.len(), segments, k)..whole.start + even_bound(whole.len(), segments, k + 1)
    };
    // Pieces of `recv` are indexed by (block, segment), in place order.
    let index = |(i, k): (usize, usize)| i % np * segments + k;
    let by_index = |i: usize| segment(i / segments, i % segments);
    // In a pass whose step 0 sends block `first`, step `s` receives block first-s-1.
    let arriving_block = move |first: usize, s: usize| first + np - 1 - s;
    let arriving =
        move |first| (0..np - 1).flat_map(move |s| (0..segments).map(move |k| (arriving_block(first, s), k)));

    // Reduce-scatter: step 0 sends this rank's part of block me-1; the partial of a segment of
    // block me-s-2 arriving in step s gets this rank's part folded in and moves on in step s+1,
    // ending with block `me` complete.
    let first = me + np - 1;
    let mut pieces: Vec<&mut [T]> =
        carve_in_order(&mut *recv, 0..np * segments, by_index).map(|(_, piece)| piece).collect();
    let incoming = arriving(first).map(|at| std::mem::take(&mut pieces[index(at)]));
    let own = (0..segments).map(|k| &send[segment(first, k)]);
    let fold = |s, k, partial: &mut [T]| op.combine(&send[segment(arriving_block(first, s), k)], partial);
    pipelined_ring_pass(comm, own, incoming, segments, fold, COLL).await?;

    // Allgather: step 0 sends block `me`; a segment of block me-s-1 arriving in step s moves on
    // in step s+1.
    let mut pieces: Vec<&mut [T]> = carve_in_order(recv, 0..np * segments, by_index).map(|(_, piece)| piece).collect();
    let complete: Vec<&[T]> = (0..segments).map(|k| &*std::mem::take(&mut pieces[index((me, k))])).collect();
    let incoming = arriving(me).map(|at| std::mem::take(&mut pieces[index(at)]));
    pipelined_ring_pass(comm, complete, incoming, segments, |_, _, _| {}, COLL).await
}
