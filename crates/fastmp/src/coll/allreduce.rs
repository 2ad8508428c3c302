//! Allreduce algorithms: flat, binomial, recursive doubling, ring, reduce+bcast, Rabenseifner.

use std::ops::Range;

use bytemuck::Pod;

use super::allgather::carve;
use super::op::Op;
use super::reduce::{Partial, combine_in_rank_order, exchange_flat, vector_of, zeroed};
use super::reduce_scatter::{Fold, block, even_offsets, recursive_halving, ring_reduce_scatter};
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
        // The MST rooted at rank 0 is the binomial tree (exactly so for powers of two).
        Algorithm::Bt => reduce_then_bcast(comm, send, recv, op, Algorithm::Bt),
        Algorithm::ReduceBcast => {
            let bcast = comm.algorithm_for(Collective::Bcast, size_of_val(recv), true);
            reduce_then_bcast(comm, send, recv, op, bcast)
        }
        Algorithm::Bde => recursive_doubling(comm, send, recv, op),
        Algorithm::Bkt => ring(comm, send, recv, op),
        Algorithm::Rabenseifner => rabenseifner(comm, send, recv, op),
        other => Err(Collective::Allreduce.unsupported(other)),
    }
}

/// Every rank sends its vector to every other one (nonblocking) and combines all in rank order.
fn flat<T: Pod>(comm: &Comm, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let peers = || (0..np).filter(move |&r| r != me);
    let others = exchange_flat(comm, send, peers(), peers(), COLL)?;
    combine_in_rank_order(op, np, |r| vector_of(r, me, send, &others), recv);
    Ok(())
}

/// MST reduce to rank 0 (order-correct), then a bcast of the result with `bcast`.
fn reduce_then_bcast<T: Pod>(comm: &Comm, send: &[T], recv: &mut [T], op: &dyn Op<T>, bcast: Algorithm) -> Result<()> {
    super::reduce::reduce(comm, send, recv, op, 0, Algorithm::Mst)?;
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(recv);
    match bcast {
        Algorithm::Native => super::native::bcast(comm, bytes, 0),
        algorithm => super::bcast::bcast(comm, bytes, 0, algorithm),
    }
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
    let (np, me) = (comm.size(), comm.rank());
    let offsets = even_offsets(send.len(), np);
    recv.copy_from_slice(send);
    ring_reduce_scatter(comm, recv, &offsets, op, COLL)?;
    let (right, left) = ((me + 1) % np, (me + np - 1) % np);
    for step in 0..np - 1 {
        let outgoing = bytes_of::<T>(block(&offsets, (me + np - step) % np));
        let incoming = bytes_of::<T>(block(&offsets, (me + 2 * np - step - 1) % np));
        let [outgoing, incoming] = carve(bytemuck::cast_slice_mut(recv), [outgoing, incoming]);
        comm.coll_sendrecv(outgoing, right, incoming, left, COLL)?;
    }
    Ok(())
}

/// Rabenseifner: fold, recursive-halving reduce-scatter over `pof2` near-equal blocks,
/// recursive-doubling allgather of the blocks, unfold (commutative).
fn rabenseifner<T: Pod>(comm: &Comm, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
    folded(comm, send, recv, op, |fold, v, acc, spare| {
        let bounds = even_offsets(send.len(), fold.pof2);
        recursive_halving(comm, fold, v, acc, spare, &bounds, op, COLL)?;
        let (mut lo, mut hi) = (v, v + 1);
        let mut mask = 1;
        while mask < fold.pof2 {
            let partner = v ^ mask;
            let (their_lo, their_hi) = if partner > v { (lo + mask, hi + mask) } else { (lo - mask, hi - mask) };
            let outgoing = bytes_of::<T>(bounds[lo]..bounds[hi]);
            let incoming = bytes_of::<T>(bounds[their_lo]..bounds[their_hi]);
            let [outgoing, incoming] = carve(bytemuck::cast_slice_mut(acc), [outgoing, incoming]);
            let peer = fold.real_rank(partner);
            comm.coll_sendrecv(outgoing, peer, incoming, peer, COLL)?;
            (lo, hi) = (lo.min(their_lo), hi.max(their_hi));
            mask <<= 1;
        }
        Ok(())
    })
}
