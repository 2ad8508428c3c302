//! Reduce algorithms: flat trees and MST, combining in rank order.

use bytemuck::Pod;

use super::fold::{Partial, exchange_flat, vector_of};
use super::op::Op;
use super::select::{Algorithm, Collective};
use super::transport::Run;
use super::tree::Mst;
use crate::error::Result;

// `native.rs` still imports this from here; its new home is `fold`.
use super::op::fold_in_rank_order;

const COLL: Collective = Collective::Reduce;

pub(super) async fn reduce<T: Pod>(
    comm: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    root: usize,
    algorithm: Algorithm,
) -> Result<()> {
    match algorithm {
        Algorithm::Bft => flat_blocking(comm, send, recv, op, root).await,
        Algorithm::Nbft => flat_nonblocking(comm, send, recv, op, root).await,
        Algorithm::Mst => mst(comm, send, recv, op, root).await,
        other => Err(Collective::Reduce.unsupported(other)),
    }
}

/// Flat tree, blocking: the root receives the vectors from the highest rank down, folding each
/// in as `inout = lower ∘ inout`, which keeps rank order with a single temporary.
async fn flat_blocking<T: Pod>(comm: &Run<'_>, send: &[T], recv: &mut [T], op: &dyn Op<T>, root: usize) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    if me != root {
        return comm.coll_send(bytemuck::cast_slice(send), root, COLL).await;
    }
    let last = np - 1;
    if last == root {
        recv.copy_from_slice(send);
    } else {
        comm.coll_recv(bytemuck::cast_slice_mut(recv), last, COLL).await?;
    }
    let mut incoming = comm.process.scratch.take::<T>(if np > 1 { send.len() } else { 0 });
    for rank in (0..last).rev() {
        if rank == root {
            op.combine(send, recv);
        } else {
            comm.coll_recv(bytemuck::cast_slice_mut(&mut incoming), rank, COLL).await?;
            op.combine(&incoming, recv);
        }
    }
    Ok(())
}

/// Flat tree, nonblocking: the root posts every receive at once, then combines in rank order.
async fn flat_nonblocking<T: Pod>(
    comm: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    root: usize,
) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    if me != root {
        return comm.coll_send(bytemuck::cast_slice(send), root, COLL).await;
    }
    let others = exchange_flat(comm, send, 0..np, 0..0, COLL).await?;
    fold_in_rank_order(op, recv, 0..np, |r| vector_of(r, me, send, &others))
}

/// Minimum spanning tree (recursive interval halving, [`Mst`]) rooted at `root`: every subtree is
/// an interval of ranks, so folding in the children's results smallest subtree first (each one
/// adjacent to what is held so far) keeps rank order for any root, without an extra hop.
async fn mst<T: Pod>(comm: &Run<'_>, send: &[T], recv: &mut [T], op: &dyn Op<T>, root: usize) -> Result<()> {
    let me = comm.rank();
    let tree = Mst::new(comm.size(), root, me);
    let children = tree.children();
    if children.len() == 0 {
        // A leaf (or np == 1): nothing to combine.
        return match tree.parent {
            Some(parent) => comm.coll_send(bytemuck::cast_slice(send), parent, COLL).await,
            None => {
                recv.copy_from_slice(send);
                Ok(())
            }
        };
    }
    let mut own = comm.process.scratch.take::<T>(if me == root { 0 } else { send.len() });
    let held: &mut [T] = if me == root { recv } else { &mut own };
    held.copy_from_slice(send);
    let mut spare = comm.process.scratch.take::<T>(send.len());
    let mut partial = Partial::new(held, &mut spare);
    for (child, _) in children.rev() {
        comm.coll_recv(bytemuck::cast_slice_mut(partial.buffers().1), child, COLL).await?;
        partial.absorb(op, child < me);
    }
    if let Some(parent) = tree.parent {
        comm.coll_send(bytemuck::cast_slice(partial.value()), parent, COLL).await?;
    }
    partial.settle();
    Ok(())
}
