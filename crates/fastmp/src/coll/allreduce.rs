//! Allreduce algorithms: flat, binomial, recursive doubling, ring, reduce+bcast, Rabenseifner.

use std::ops::Range;

use bytemuck::Pod;

use super::allgather::{all_steps, carve};
use super::op::Op;
use super::reduce::{Partial, exchange_flat, fold_in_rank_order, vector_of, zeroed};
use super::reduce_scatter::{Fold, even_block, even_bound, recursive_halving, ring_reduce_scatter};
use super::select::{Algorithm, Collective};
use crate::comm::Comm;
use crate::error::Result;

const COLL: Collective = Collective::Allreduce;

pub(super) fn allreduce<T: Pod>(
    comm: &Comm,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    algorithm: Algorithm,
) -> Result<()> {
    match algorithm {
        Algorithm::Nbft => flat(comm, send, recv, op),
        // Tree reduce to rank 0, then binomial-tree bcast. The reduce runs on the MST, which
        // keeps rank order for any op; rooted at 0 it is a binomial tree only when np is a power
        // of two, so for other np the fan-in is shaped differently from the fan-out.
        Algorithm::Bt => {
            reduce_then_bcast(comm, send, recv, op, |bytes| super::bcast::bcast(comm, bytes, 0, Algorithm::Bt))
        }
        Algorithm::ReduceBcast => reduce_then_bcast(comm, send, recv, op, |bytes| comm.bcast_bytes(bytes, 0)),
        Algorithm::Bde => recursive_doubling(comm, send, recv, op),
        Algorithm::Bkt => ring(comm, send, recv, op),
        Algorithm::Rabenseifner => rabenseifner(comm, send, recv, op),
        other => Err(Collective::Allreduce.unsupported(other)),
    }
}

/// Every rank sends its vector to every other one (nonblocking) and combines all in rank order.
fn flat<T: Pod>(comm: &Comm, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let others = exchange_flat(comm, send, 0..np, 0..np, COLL)?;
    fold_in_rank_order(op, recv, 0..np, |r| vector_of(r, me, send, &others))
}

/// MST reduce to rank 0 (order-correct), then `bcast` of the result from rank 0.
fn reduce_then_bcast<T: Pod>(
    comm: &Comm,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    bcast: impl FnOnce(&mut [u8]) -> Result<()>,
) -> Result<()> {
    super::reduce::reduce(comm, send, recv, op, 0, Algorithm::Mst)?;
    bcast(bytemuck::cast_slice_mut(recv))
}

/// Runs `body(fold, v, acc, spare)` on the fold's virtual ranks with `acc` (which is `recv`)
/// holding the folded vector, then hands the result to the ranks that sat out.
fn folded<T: Pod>(
    comm: &Comm,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    body: impl FnOnce(&Fold, usize, &mut [T], &mut [T]) -> Result<()>,
) -> Result<()> {
    let fold = Fold::new(comm.size());
    recv.copy_from_slice(send);
    let mut spare = zeroed::<T>(send.len());
    fold.fold_in(comm, recv, &mut spare, op, COLL)?;
    if let Some(v) = fold.virtual_rank(comm.rank()) {
        body(&fold, v, recv, &mut spare)?;
    }
    fold.unfold(comm, recv, COLL)
}

/// Recursive doubling over the fold's virtual ranks: after the step with distance `mask` a
/// rank holds the reduction of an aligned run of `2·mask` virtual ranks, which are contiguous
/// real ranks, so combining lower ∘ higher keeps rank order.
fn recursive_doubling<T: Pod>(comm: &Comm, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
    folded(comm, send, recv, op, |fold, v, acc, spare| {
        let mut partial = Partial::new(acc, spare);
        let mut mask = 1;
        while mask < fold.pof2 {
            let partner = v ^ mask;
            let peer = fold.real_rank(partner);
            let (mine, incoming) = partial.buffers();
            comm.coll_sendrecv(bytemuck::cast_slice(mine), peer, bytemuck::cast_slice_mut(incoming), peer, COLL)?;
            partial.absorb(op, partner < v);
            mask <<= 1;
        }
        partial.settle();
        Ok(())
    })
}

/// Byte range of the element range `elements` of a `T` buffer.
fn bytes_of<T>(elements: Range<usize>) -> Range<usize> {
    elements.start * size_of::<T>()..elements.end * size_of::<T>()
}

/// Ring reduce-scatter then ring allgather over `np` near-equal blocks (commutative).
fn ring<T: Pod>(comm: &Comm, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
    let (np, me, len) = (comm.size(), comm.rank(), send.len());
    let block = |i| even_block(len, np, i);
    ring_reduce_scatter(comm, send, block, &mut recv[block(me)], op, COLL)?;
    ring_allgather_in_place(comm, bytemuck::cast_slice_mut(recv), |i| bytes_of::<T>(block(i)), COLL)
}

/// Ring allgather of the byte ranges `block(i)` of `buf`, this rank's block already in place:
/// in step `s` each rank passes the block it received in step `s - 1` (its own in step 0) to
/// its right neighbour and receives the next one from its left. The pattern of the allgather
/// module's ring (which copies its own block in first), with its error policy: every step runs.
fn ring_allgather_in_place(
    comm: &Comm,
    buf: &mut [u8],
    block: impl Fn(usize) -> Range<usize>,
    coll: Collective,
) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let (right, left) = ((me + 1) % np, (me + np - 1) % np);
    all_steps((0..np - 1).map(|step| {
        let [outgoing, incoming] = carve(buf, [block((me + np - step) % np), block((me + np - step - 1) % np)]);
        comm.coll_sendrecv(outgoing, right, incoming, left, coll)
    }))
}

/// Recursive-doubling allgather of the fold's `pof2` blocks (`bound(u)..bound(u + 1)` bytes of
/// `buf`), run by virtual rank `v`, whose block is in place: before the step with distance
/// `mask` a rank holds the blocks of its aligned run of `mask` virtual ranks and swaps them
/// with `v ^ mask` for the partner's run. (With `Fold::new(np)` for a power-of-two `np` the
/// virtual ranks are the real ones, as in the allgather module's recursive doubling.)
fn doubling_allgather_in_place(
    comm: &Comm,
    buf: &mut [u8],
    fold: &Fold,
    v: usize,
    bound: impl Fn(usize) -> usize,
    coll: Collective,
) -> Result<()> {
    let run = |u: usize, mask: usize| bound(u & !(mask - 1))..bound((u & !(mask - 1)) + mask);
    let masks = std::iter::successors(Some(1usize), |mask| Some(mask << 1)).take_while(|&mask| mask < fold.pof2);
    all_steps(masks.map(|mask| {
        let partner = v ^ mask;
        let [outgoing, incoming] = carve(buf, [run(v, mask), run(partner, mask)]);
        let peer = fold.real_rank(partner);
        comm.coll_sendrecv(outgoing, peer, incoming, peer, coll)
    }))
}

/// Rabenseifner: fold, recursive-halving reduce-scatter over `pof2` near-equal blocks,
/// recursive-doubling allgather of the blocks, unfold (commutative).
fn rabenseifner<T: Pod>(comm: &Comm, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
    let len = send.len();
    folded(comm, send, recv, op, |fold, v, acc, spare| {
        let bound = |u| even_bound(len, fold.pof2, u);
        recursive_halving(comm, fold, v, acc, spare, bound, op, COLL)?;
        let byte_bound = |u| bound(u) * size_of::<T>();
        doubling_allgather_in_place(comm, bytemuck::cast_slice_mut(acc), fold, v, byte_bound, COLL)
    })
}
