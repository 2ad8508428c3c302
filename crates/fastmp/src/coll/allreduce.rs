//! Allreduce algorithms: flat, binomial, recursive doubling, ring, reduce+bcast, Rabenseifner.

use std::ops::Range;

use bytemuck::Pod;

use super::allgather::{all_steps, carve};
use super::op::Op;
use super::reduce::{Partial, exchange_flat, fold_in_rank_order, vector_of, zeroed};
use super::reduce_scatter::{Fold, even_block, even_bound, recursive_halving, ring_reduce_scatter};
use super::select::{Algorithm, Collective};
use super::transport::Run;
use crate::error::Result;

const COLL: Collective = Collective::Allreduce;

pub(super) async fn allreduce<T: Pod>(
    comm: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    algorithm: Algorithm,
) -> Result<()> {
    match algorithm {
        Algorithm::Nbft => flat(comm, send, recv, op).await,
        // Tree reduce to rank 0, then binomial-tree bcast. The reduce runs on the MST, which
        // keeps rank order for any op; rooted at 0 it is a binomial tree only when np is a power
        // of two, so for other np the fan-in is shaped differently from the fan-out.
        Algorithm::Bt => {
            reduce_then_bcast(comm, send, recv, op, async |bytes| {
                super::bcast::bcast(comm, bytes, 0, Algorithm::Bt).await
            })
            .await
        }
        Algorithm::ReduceBcast => {
            reduce_then_bcast(comm, send, recv, op, async |bytes| comm.bcast_bytes(bytes, 0).await).await
        }
        Algorithm::Bde => recursive_doubling(comm, send, recv, op).await,
        Algorithm::Bkt => ring(comm, send, recv, op).await,
        Algorithm::Rabenseifner => rabenseifner(comm, send, recv, op).await,
        other => Err(Collective::Allreduce.unsupported(other)),
    }
}

/// Every rank sends its vector to every other one (nonblocking) and combines all in rank order.
async fn flat<T: Pod>(comm: &Run<'_>, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let others = exchange_flat(comm, send, 0..np, 0..np, COLL).await?;
    fold_in_rank_order(op, recv, 0..np, |r| vector_of(r, me, send, &others))
}

/// MST reduce to rank 0 (order-correct), then `bcast` of the result from rank 0.
async fn reduce_then_bcast<T: Pod>(
    comm: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    bcast: impl AsyncFnOnce(&mut [u8]) -> Result<()>,
) -> Result<()> {
    super::reduce::reduce(comm, send, recv, op, 0, Algorithm::Mst).await?;
    bcast(bytemuck::cast_slice_mut(recv)).await
}

/// Runs `body(fold, v, acc, spare)` on the fold's virtual ranks with `acc` (which is `recv`)
/// holding the folded vector, then hands the result to the ranks that sat out.
async fn folded<T: Pod>(
    comm: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    body: impl AsyncFnOnce(&Fold, usize, &mut [T], &mut [T]) -> Result<()>,
) -> Result<()> {
    let fold = Fold::new(comm.size());
    recv.copy_from_slice(send);
    let mut spare = zeroed::<T>(send.len());
    fold.fold_in(comm, recv, &mut spare, op, COLL).await?;
    if let Some(v) = fold.virtual_rank(comm.rank()) {
        body(&fold, v, recv, &mut spare).await?;
    }
    fold.unfold(comm, recv, COLL).await
}

/// Recursive doubling over the fold's virtual ranks: after the step with distance `mask` a
/// rank holds the reduction of an aligned run of `2·mask` virtual ranks, which are contiguous
/// real ranks, so combining lower ∘ higher keeps rank order.
async fn recursive_doubling<T: Pod>(comm: &Run<'_>, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
    folded(comm, send, recv, op, async |fold, v, acc, spare| {
        let mut partial = Partial::new(acc, spare);
        let mut mask = 1;
        while mask < fold.pof2 {
            let partner = v ^ mask;
            let peer = fold.real_rank(partner);
            let (mine, incoming) = partial.buffers();
            comm.coll_sendrecv(bytemuck::cast_slice(mine), peer, bytemuck::cast_slice_mut(incoming), peer, COLL)
                .await?;
            partial.absorb(op, partner < v);
            mask <<= 1;
        }
        partial.settle();
        Ok(())
    })
    .await
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
    ring_allgather_in_place(comm, bytemuck::cast_slice_mut(recv), |i| bytes_of::<T>(block(i)), COLL).await
}

/// Ring allgather of the byte ranges `block(i)` of `buf`, this rank's block already in place:
/// in step `s` each rank passes the block it received in step `s - 1` (its own in step 0) to
/// its right neighbour and receives the next one from its left. The pattern of the allgather
/// module's ring (which copies its own block in first), with its error policy: every step runs.
async fn ring_allgather_in_place(
    comm: &Run<'_>,
    buf: &mut [u8],
    block: impl Fn(usize) -> Range<usize>,
    coll: Collective,
) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let (right, left) = ((me + 1) % np, (me + np - 1) % np);
    all_steps(0..np - 1, async |step| {
        let [outgoing, incoming] = carve(buf, [block((me + np - step) % np), block((me + np - step - 1) % np)]);
        comm.coll_sendrecv(outgoing, right, incoming, left, coll).await
    })
    .await
}

/// Recursive-doubling allgather of the fold's `pof2` blocks (`bound(u)..bound(u + 1)` bytes of
/// `buf`), run by virtual rank `v`, whose block is in place: before the step with distance
/// `mask` a rank holds the blocks of its aligned run of `mask` virtual ranks and swaps them
/// with `v ^ mask` for the partner's run. (With `Fold::new(np)` for a power-of-two `np` the
/// virtual ranks are the real ones, as in the allgather module's recursive doubling.)
async fn doubling_allgather_in_place(
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

/// Rabenseifner: fold, recursive-halving reduce-scatter over `pof2` near-equal blocks,
/// recursive-doubling allgather of the blocks, unfold (commutative).
async fn rabenseifner<T: Pod>(comm: &Run<'_>, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
    let len = send.len();
    folded(comm, send, recv, op, async |fold, v, acc, spare| {
        let bound = |u| even_bound(len, fold.pof2, u);
        recursive_halving(comm, fold, v, acc, spare, bound, op, COLL).await?;
        let byte_bound = |u| bound(u) * size_of::<T>();
        doubling_allgather_in_place(comm, bytemuck::cast_slice_mut(acc), fold, v, byte_bound, COLL).await
    })
    .await
}
