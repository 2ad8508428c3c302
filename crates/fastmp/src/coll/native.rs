//! The `native` algorithm: the operation runs on the collective provider the device gave the
//! communicator (`Device::collectives`; the shm device's shared-buffer collectives). Selection
//! picks `native` only on communicators that have one (`Comm::algorithm_for`).
//!
//! This is the whole boundary: the run becomes a device-level `Operation`, buffers become bytes
//! and a reduction operator `&dyn Op<T>` becomes a byte-level fold (`Reduction`).

use std::ops::Range;

use bytemuck::Pod;

use super::Layout;
use super::op::Op;
use super::reduce::fold_in_rank_order;
use super::transport::Run;
use crate::device::collectives::{CollectiveProvider, Operation, Reduction};
use crate::error::{Error, Result};

/// The communicator's provider and the device-level description of `run`.
fn provider<'r>(run: &'r Run<'_>) -> Result<(&'r dyn CollectiveProvider, Operation<'r>)> {
    let provider = run
        .collectives
        .as_deref()
        .ok_or_else(|| Error::InvalidArgument("the native algorithm needs a device with its own collectives".into()))?;
    let operation = Operation {
        seq: run.seq(),
        blocking: run.is_blocking(),
        engine_polling: run.process.engine.is_polling(),
        dev: &*run.dev,
    };
    Ok((provider, operation))
}

pub(super) async fn barrier(run: &Run<'_>) -> Result<()> {
    let (provider, op) = provider(run)?;
    provider.barrier(op).await
}

pub(super) async fn bcast(run: &Run<'_>, buf: &mut [u8], root: usize) -> Result<()> {
    let (provider, op) = provider(run)?;
    provider.bcast(op, buf, root).await
}

pub(super) async fn scatter(run: &Run<'_>, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    let (provider, op) = provider(run)?;
    provider.scatter(op, send, recv, root).await
}

pub(super) async fn scatterv(
    run: &Run<'_>,
    send: &[u8],
    layout: Option<&Layout>,
    recv: &mut [u8],
    root: usize,
) -> Result<()> {
    let (provider, op) = provider(run)?;
    provider.scatterv(op, send, layout, recv, root).await
}

pub(super) async fn gather(run: &Run<'_>, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    let (provider, op) = provider(run)?;
    provider.gather(op, send, recv, root).await
}

pub(super) async fn gatherv(
    run: &Run<'_>,
    send: &[u8],
    recv: &mut [u8],
    layout: Option<&Layout>,
    root: usize,
) -> Result<()> {
    let (provider, op) = provider(run)?;
    provider.gatherv(op, send, recv, layout, root).await
}

pub(super) async fn allgather(run: &Run<'_>, send: &[u8], recv: &mut [u8]) -> Result<()> {
    let (provider, op) = provider(run)?;
    provider.allgather(op, send, recv).await
}

pub(super) async fn allgatherv(run: &Run<'_>, send: &[u8], recv: &mut [u8], layout: &Layout) -> Result<()> {
    let (provider, op) = provider(run)?;
    provider.allgatherv(op, send, recv, layout).await
}

pub(super) async fn alltoall(run: &Run<'_>, send: &[u8], recv: &mut [u8]) -> Result<()> {
    let (provider, op) = provider(run)?;
    provider.alltoall(op, send, recv).await
}

pub(super) async fn alltoallv(
    run: &Run<'_>,
    send: &[u8],
    send_layout: &Layout,
    recv: &mut [u8],
    recv_layout: &Layout,
) -> Result<()> {
    let (provider, op) = provider(run)?;
    provider.alltoallv(op, send, send_layout, recv, recv_layout).await
}

pub(super) async fn reduce<T: Pod>(
    run: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    root: usize,
) -> Result<()> {
    let (provider, operation) = provider(run)?;
    let fold = byte_fold(op);
    provider.reduce(operation, bytes(send), bytes_mut(recv), reduction::<T>(&fold), root).await
}

pub(super) async fn allreduce<T: Pod>(run: &Run<'_>, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
    let (provider, operation) = provider(run)?;
    let fold = byte_fold(op);
    provider.allreduce(operation, bytes(send), bytes_mut(recv), reduction::<T>(&fold)).await
}

pub(super) async fn reduce_scatter<T: Pod>(
    run: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    op: &dyn Op<T>,
) -> Result<()> {
    let (provider, operation) = provider(run)?;
    let fold = byte_fold(op);
    provider.reduce_scatter(operation, bytes(send), bytes_mut(recv), counts, reduction::<T>(&fold)).await
}

pub(super) async fn scan<T: Pod>(
    run: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    exclusive: bool,
) -> Result<()> {
    let (provider, operation) = provider(run)?;
    let fold = byte_fold(op);
    provider.scan(operation, bytes(send), bytes_mut(recv), reduction::<T>(&fold), exclusive).await
}

/// `op` over bytes, for a provider: operands must be whole, aligned elements of `T` (ranks may
/// disagree on the element type), combined in rank order.
fn byte_fold<T: Pod>(
    op: &dyn Op<T>,
) -> impl for<'s> Fn(&mut [u8], Range<usize>, &dyn Fn(usize) -> Result<&'s [u8]>) -> Result<()> + '_ {
    move |dest, ranks, input| fold_in_rank_order(op, typed_mut(dest)?, ranks, |j| typed(input(j)?))
}

fn reduction<'a, T>(
    fold: &'a (impl for<'s> Fn(&mut [u8], Range<usize>, &dyn Fn(usize) -> Result<&'s [u8]>) -> Result<()> + 'a),
) -> Reduction<'a> {
    Reduction { elem_size: size_of::<T>(), fold }
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
