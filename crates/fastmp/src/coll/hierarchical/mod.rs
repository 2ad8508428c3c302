//! The `hierarchical` algorithms: a collective over the members inside each process (the local
//! level, where the device's native collectives run) and over one leader per process (the
//! network level), for communicators that span several processes (`Levels`). Where a
//! process's members span several NUMA nodes, the local level's bcasts, reduces and barriers
//! run NUMA-local first ([`local`]); one module per family of collectives.
//!
//! Each level's steps are ordinary collectives on the level's communicator, dispatched through
//! its own selection. Their operation numbers are taken when the hierarchical operation starts
//! ([`LevelRuns`]), so every member of a level numbers them alike however the parent's
//! nonblocking operations interleave. Long vectors move in chunks (`Tuning::hierarchical_chunk`)
//! through a two-stage pipeline: the stage that produces chunk k (a local reduce, a network
//! bcast) runs ahead while the other stage consumes chunk k - 1, so the network and the local
//! copies overlap. Pipelined levels run nonblocking (their steps yield), which is what lets the
//! two stages interleave inside a blocking call too.

mod blocks;
mod exchange;
mod local;
mod reduction;

use std::cell::Cell;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;

pub(super) use blocks::{allgather, allgatherv, gather, gatherv, scatter, scatterv};
pub(super) use exchange::{alltoall, alltoallv};
pub(super) use reduction::{allreduce, barrier, bcast, reduce, reduce_scatter, scan};

use super::hierarchy::{Grouping, Levels};
use super::transport::Run;
use super::vector::Layout;
use crate::comm::Comm;
use crate::error::{Error, Result};

/// The levels of `run`'s communicator (selection picks this algorithm only where they exist).
fn levels<'c>(run: &Run<'c>) -> Result<&'c Levels> {
    run.comm().levels().map(|levels| &**levels).ok_or_else(|| {
        Error::InvalidArgument(
            "the hierarchical algorithm needs a communicator spanning several processes, one of them with several members"
                .into(),
        )
    })
}

/// Chunks of `len` elements of `elem_size` bytes: the pipeline's unit, at least one element.
fn chunk_len(run: &Run<'_>, elem_size: usize) -> usize {
    (run.tuning.hierarchical_chunk() / elem_size.max(1)).max(1)
}

/// Start of each of `counts`' blocks packed one after another.
fn displacements(counts: &[usize]) -> Vec<usize> {
    counts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect()
}

/// Blocks of `counts` bytes one after another, as a layout of `comm`'s ranks.
fn packed_layout(comm: &Comm, counts: &[usize]) -> Result<Layout> {
    Layout::new::<u8>(comm, "hierarchical blocks", counts, &displacements(counts), counts.iter().sum())
}

/// The leaders' layout of the processes' blocks: each process's members' blocks of `block`
/// bytes, one after another in process order.
fn process_layout(leaders: &Comm, processes: &Grouping, block: usize) -> Result<Layout> {
    let counts: Vec<usize> = (0..processes.groups()).map(|p| processes.members(p).len() * block).collect();
    packed_layout(leaders, &counts)
}

/// The communicator's members process by process (each process's members ascending): the
/// order in which leaders pack blocks.
fn in_process_order(processes: &Grouping) -> impl Iterator<Item = usize> + '_ {
    (0..processes.groups()).flat_map(|p| processes.members(p).iter().copied())
}

/// Copies blocks gathered process by process (each process's members in rank order) to their
/// members' places in `ordered`.
fn into_rank_order(processes: &Grouping, by_process: &[u8], ordered: &mut [u8], block: usize) {
    for (from, member) in by_process.chunks_exact(block.max(1)).zip(in_process_order(processes)) {
        ordered[member * block..(member + 1) * block].copy_from_slice(from);
    }
}

/// The inverse of [`into_rank_order`]: every member's block of `ordered` to its place in
/// process order.
fn into_process_order(processes: &Grouping, ordered: &[u8], by_process: &mut [u8], block: usize) {
    for (to, member) in by_process.chunks_exact_mut(block.max(1)).zip(in_process_order(processes)) {
        to.copy_from_slice(&ordered[member * block..(member + 1) * block]);
    }
}

/// Runs `first` then `second` on every chunk in order; `second` of chunk k overlaps `first` of
/// the chunks after it. A missing stage passes chunks straight on. The first error ends both.
async fn pipeline<T>(
    run: &Run<'_>,
    chunks: &[Cell<Option<&mut [T]>>],
    first: Option<impl AsyncFn(&mut [T]) -> Result<()>>,
    second: Option<impl AsyncFn(&mut [T]) -> Result<()>>,
) -> Result<()> {
    let produced = Cell::new(0);
    let producer = async {
        for slot in chunks {
            if let Some(first) = &first {
                run_on(slot, first).await?;
            }
            produced.set(produced.get() + 1);
        }
        Ok(())
    };
    let consumer = async {
        let Some(second) = &second else { return Ok(()) };
        for (k, slot) in chunks.iter().enumerate() {
            poll_fn(|_| if produced.get() > k { Poll::Ready(()) } else { Poll::Pending }).await;
            run_on(slot, second).await?;
        }
        Ok(())
    };
    join(run, producer, consumer).await
}

/// Runs `step` on the chunk in `slot`, which is back in its slot when this returns.
async fn run_on<T>(slot: &Cell<Option<&mut [T]>>, step: &impl AsyncFn(&mut [T]) -> Result<()>) -> Result<()> {
    let chunk = slot.take().expect("a chunk is in one stage at a time");
    let outcome = step(&mut *chunk).await;
    slot.set(Some(chunk));
    outcome
}

/// Both futures to their ends (each polled once more after the other, so progress of one is
/// seen by the other in the same poll, and neither waits in place); the first error wins at once.
async fn join(run: &Run<'_>, a: impl Future<Output = Result<()>>, b: impl Future<Output = Result<()>>) -> Result<()> {
    let (mut a, mut b) = (pin!(a), pin!(b));
    let (mut a_done, mut b_done) = (false, false);
    poll_fn(|cx| {
        run.process.engine.polling_parts(|| {
            for _ in 0..2 {
                if !a_done && let Poll::Ready(result) = a.as_mut().poll(cx) {
                    result?;
                    a_done = true;
                }
                if !b_done && let Poll::Ready(result) = b.as_mut().poll(cx) {
                    result?;
                    b_done = true;
                }
            }
            if a_done && b_done { Poll::Ready(Ok(())) } else { Poll::Pending }
        })
    })
    .await
}
