//! The `native` algorithm: the operation runs on the collective provider the device gave the
//! communicator (`Device::collectives`; the shm device's shared-buffer collectives). Selection
//! picks `native` only on communicators that have one (`Comm::algorithm_for`).
//!
//! This is the whole boundary: the run becomes a device-level `Operation`, buffers become bytes
//! and a reduction operator `&dyn Op<T>` becomes a byte-level [`Fold`]. The functions are plain
//! (not `async`): the dispatcher awaits the provider's `Completion` directly, which a blocking
//! operation's provider has finished already.

use std::ops::Range;

use bytemuck::Pod;

use super::Layout;
use super::op::Op;
use super::reduce::fold_in_rank_order;
use super::transport::Run;
use crate::device::collectives::{CollectiveProvider, Completion, Fold, Operation, Reduction};
use crate::error::{Error, Result};

/// Hands `run` to the communicator's provider: `call` with the provider and the device-level
/// description of the operation; `Err` if the communicator has none.
fn on_provider<'a>(
    run: &'a Run<'_>,
    call: impl FnOnce(&'a dyn CollectiveProvider, Operation<'a>) -> Completion<'a>,
) -> Completion<'a> {
    let Some(provider) = run.provider() else {
        return Completion::finished(Err(Error::InvalidArgument(
            "the native algorithm needs a device with its own collectives".into(),
        )));
    };
    let operation = Operation {
        seq: run.seq(),
        blocking: run.is_blocking(),
        engine_polling: run.process.engine.is_polling(),
        dev: &*run.dev,
    };
    call(provider, operation)
}

pub(super) fn barrier<'a>(run: &'a Run<'_>) -> Completion<'a> {
    on_provider(run, |provider, op| provider.barrier(op))
}

pub(super) fn bcast<'a>(run: &'a Run<'_>, buf: &'a mut [u8], root: usize) -> Completion<'a> {
    on_provider(run, |provider, op| provider.bcast(op, buf, root))
}

pub(super) fn scatter<'a>(run: &'a Run<'_>, send: &'a [u8], recv: &'a mut [u8], root: usize) -> Completion<'a> {
    on_provider(run, |provider, op| provider.scatter(op, send, recv, root))
}

pub(super) fn scatterv<'a>(
    run: &'a Run<'_>,
    send: &'a [u8],
    layout: Option<&'a Layout>,
    recv: &'a mut [u8],
    root: usize,
) -> Completion<'a> {
    on_provider(run, |provider, op| provider.scatterv(op, send, layout, recv, root))
}

pub(super) fn gather<'a>(run: &'a Run<'_>, send: &'a [u8], recv: &'a mut [u8], root: usize) -> Completion<'a> {
    on_provider(run, |provider, op| provider.gather(op, send, recv, root))
}

pub(super) fn gatherv<'a>(
    run: &'a Run<'_>,
    send: &'a [u8],
    recv: &'a mut [u8],
    layout: Option<&'a Layout>,
    root: usize,
) -> Completion<'a> {
    on_provider(run, |provider, op| provider.gatherv(op, send, recv, layout, root))
}

pub(super) fn allgather<'a>(run: &'a Run<'_>, send: &'a [u8], recv: &'a mut [u8]) -> Completion<'a> {
    on_provider(run, |provider, op| provider.allgather(op, send, recv))
}

pub(super) fn allgatherv<'a>(
    run: &'a Run<'_>,
    send: &'a [u8],
    recv: &'a mut [u8],
    layout: &'a Layout,
) -> Completion<'a> {
    on_provider(run, |provider, op| provider.allgatherv(op, send, recv, layout))
}

pub(super) fn alltoall<'a>(run: &'a Run<'_>, send: &'a [u8], recv: &'a mut [u8]) -> Completion<'a> {
    on_provider(run, |provider, op| provider.alltoall(op, send, recv))
}

pub(super) fn alltoallv<'a>(
    run: &'a Run<'_>,
    send: &'a [u8],
    send_layout: &'a Layout,
    recv: &'a mut [u8],
    recv_layout: &'a Layout,
) -> Completion<'a> {
    on_provider(run, |provider, op| provider.alltoallv(op, send, send_layout, recv, recv_layout))
}

/// The reductions take the operator by double reference: `&dyn Op<T>` itself is the [`Fold`]
/// handed to the device, so nothing is built or boxed per call.
pub(super) fn reduce<'a, T: Pod>(
    run: &'a Run<'_>,
    send: &'a [T],
    recv: &'a mut [T],
    op: &'a &'a dyn Op<T>,
    root: usize,
) -> Completion<'a> {
    on_provider(run, |provider, o| provider.reduce(o, bytes(send), bytes_mut(recv), reduction(op), root))
}

pub(super) fn allreduce<'a, T: Pod>(
    run: &'a Run<'_>,
    send: &'a [T],
    recv: &'a mut [T],
    op: &'a &'a dyn Op<T>,
) -> Completion<'a> {
    on_provider(run, |provider, o| provider.allreduce(o, bytes(send), bytes_mut(recv), reduction(op)))
}

pub(super) fn reduce_scatter<'a, T: Pod>(
    run: &'a Run<'_>,
    send: &'a [T],
    recv: &'a mut [T],
    counts: &'a [usize],
    op: &'a &'a dyn Op<T>,
) -> Completion<'a> {
    on_provider(run, |provider, o| provider.reduce_scatter(o, bytes(send), bytes_mut(recv), counts, reduction(op)))
}

pub(super) fn scan<'a, T: Pod>(
    run: &'a Run<'_>,
    send: &'a [T],
    recv: &'a mut [T],
    op: &'a &'a dyn Op<T>,
    exclusive: bool,
) -> Completion<'a> {
    on_provider(run, |provider, o| provider.scan(o, bytes(send), bytes_mut(recv), reduction(op), exclusive))
}

fn reduction<'a, T: Pod>(op: &'a &'a dyn Op<T>) -> Reduction<'a> {
    Reduction { elem_size: size_of::<T>(), fold: op }
}

/// A typed operator over bytes: operands must be whole, aligned elements of `T` (ranks may
/// disagree on the element type), combined in rank order.
impl<T: Pod> Fold for &dyn Op<T> {
    fn fold<'s>(&self, dest: &mut [u8], ranks: Range<usize>, input: &dyn Fn(usize) -> Result<&'s [u8]>) -> Result<()> {
        fold_in_rank_order(*self, typed_mut(dest)?, ranks, |j| typed(input(j)?))
    }
}

/// The bytes of `values` (none for zero-sized types, whose vectors reduce as empty).
fn bytes<T: Pod>(values: &[T]) -> &[u8] {
    if size_of::<T>() == 0 { &[] } else { bytemuck::cast_slice(values) }
}

fn bytes_mut<T: Pod>(values: &mut [T]) -> &mut [u8] {
    if size_of::<T>() == 0 { &mut [] } else { bytemuck::cast_slice_mut(values) }
}

fn typed<T: Pod>(bytes: &[u8]) -> Result<&[T]> {
    if bytes.is_empty() {
        return Ok(&[]);
    }
    bytemuck::try_cast_slice(bytes).map_err(type_mismatch)
}

fn typed_mut<T: Pod>(bytes: &mut [u8]) -> Result<&mut [T]> {
    if bytes.is_empty() {
        return Ok(&mut []);
    }
    bytemuck::try_cast_slice_mut(bytes).map_err(type_mismatch)
}

fn type_mismatch(e: bytemuck::PodCastError) -> Error {
    Error::InvalidArgument(format!("native collective: element types differ between ranks ({e:?})"))
}
