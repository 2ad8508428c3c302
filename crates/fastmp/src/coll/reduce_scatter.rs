//! Reduce-scatter algorithms: recursive halving (BDE), ring (BKT), reduce+scatterv.

use bytemuck::Pod;

use super::fold::zeroed;
use super::op::Op;
use super::pattern::{Fold, recursive_halving, ring_reduce_scatter};
use super::select::{Algorithm, Collective, Pick};
use super::transport::Run;
use super::vector::{Layout, offset_block, offsets_of};
use crate::error::Result;

// `native.rs` still imports this from here; its new home is `vector`.

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

/// Recursive halving after the fold; odd ranks of the folded pairs then return the even
/// rank's block.
async fn halving<T: Pod>(comm: &Run<'_>, send: &[T], recv: &mut [T], counts: &[usize], op: &dyn Op<T>) -> Result<()> {
    let me = comm.rank();
    let fold = Fold::new(comm.size());
    let offsets = offsets_of(counts);
    let mut acc = comm.process.scratch.copy_of(send, send.len());
    let mut spare = comm.process.scratch.take::<T>(send.len());
    fold.fold_in(comm, &mut acc, &mut spare, op, COLL).await?;
    let Some(v) = fold.virtual_rank(me) else {
        return fold.unfold(comm, recv, COLL).await;
    };
    let bound = |u| offsets[fold.first_real(u)];
    recursive_halving(comm, &fold, v, &mut acc, &mut spare, bound, op, COLL).await?;
    if fold.first_real(v) != me {
        fold.unfold(comm, &mut acc[offset_block(&offsets, me - 1)], COLL).await?;
    }
    recv.copy_from_slice(&acc[offset_block(&offsets, me)]);
    Ok(())
}

/// Ring reduce-scatter over the `counts` blocks.
async fn ring<T: Pod>(comm: &Run<'_>, send: &[T], recv: &mut [T], counts: &[usize], op: &dyn Op<T>) -> Result<()> {
    let offsets = offsets_of(counts);
    ring_reduce_scatter(comm, send, |i| offset_block(&offsets, i), recv, op, COLL).await
}

/// Composite: MST reduce to rank 0 (order-correct), then scatterv of the blocks with the
/// configured algorithm.
async fn reduce_then_scatterv<T: Pod>(
    comm: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    op: &dyn Op<T>,
) -> Result<()> {
    let at_root = comm.rank() == 0;
    let mut reduced = zeroed::<T>(if at_root { send.len() } else { 0 });
    comm.dispatch_reduce(send, &mut reduced, op, 0, Pick::Fixed(Algorithm::Mst)).await?;
    let layout = if at_root {
        let offsets = offsets_of(counts);
        Some(Layout::new::<T>(comm, "reduce_scatter", counts, &offsets[..counts.len()], send.len())?)
    } else {
        None
    };
    let (reduced, recv) = (bytemuck::cast_slice(&reduced), bytemuck::cast_slice_mut(recv));
    comm.dispatch_scatterv(reduced, layout.as_ref(), recv, 0, Pick::Tuned).await
}
