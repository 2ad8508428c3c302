//! The per-communicator collective hook: when a communicator is created, the device may hand back
//! a [`CollectiveProvider`] that runs the collectives it accelerates (the shm device: ranks copy
//! straight between each other's buffers). The collectives layer selects it under the algorithm
//! name `native` and uses its message-based algorithms where a communicator has none (tcp).
//!
//! The boundary is device-level, so providers never see the layer above: an operation arrives as
//! an [`Operation`] (its number on the communicator, blocking or not, the rank's device for
//! progress and waits), buffers as bytes, and reductions with their element type erased
//! ([`Reduction`]). Two types are shared with the collectives layer rather than duplicated:
//! `coll::Layout` (a validated `v` layout, which the shm provider publishes to peers as is) and
//! `coll::Collective` (the operation kinds ranks compare before touching each other's buffers).
//!
//! Every provider operation is written once, as an `async` body, and handed to
//! [`Completion::of`]: a blocking operation runs to its end on the caller's stack (no allocation
//! on the blocking path), a nonblocking one comes back boxed for the rank's progress engine, whose
//! operations are boxed anyway.

use std::future::Future;
use std::ops::Range;
use std::pin::{Pin, pin};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use super::Device;
use crate::coll::Layout;
use crate::error::Result;

/// One collective operation of this rank, as a provider sees it.
#[derive(Clone, Copy)]
pub(crate) struct Operation<'a> {
    /// Number of the operation on its communicator. Every rank issues a communicator's
    /// collectives in the same order, so it is the same on every rank: providers order their
    /// shared state by it.
    pub(crate) seq: u64,
    /// The caller waits for the outcome (a blocking collective), so the operation runs to its end
    /// inside the provider's call.
    pub(crate) blocking: bool,
    /// The call comes from inside a stage of a nonblocking operation (the rank's progress engine
    /// is polling): a blocking operation cannot wait for earlier operations of this rank then,
    /// because nothing would drive them.
    pub(crate) engine_polling: bool,
    /// The rank's device as the collectives layer sees it: its `progress` and `wait_until` also
    /// drive the rank's outstanding nonblocking operations (MPI's progress rule), so a provider
    /// waiting for peers calls them rather than its own endpoint's.
    pub(crate) dev: &'a dyn Device,
}

/// A reduction operator over bytes, implemented by the collectives layer for its typed operators.
pub(crate) trait Fold {
    /// `dest = x(first) ∘ … ∘ x(last)` over `ranks`, where `input(j)` is rank `j`'s operand (as
    /// many bytes as `dest`), combined in rank order so non-commutative operators stay correct.
    /// Fails when the bytes are not whole, aligned elements of the operator's type (ranks
    /// disagree on the element type).
    fn fold<'s>(&self, dest: &mut [u8], ranks: Range<usize>, input: &dyn Fn(usize) -> Result<&'s [u8]>) -> Result<()>;
}

/// A reduction operator with its element type erased, since trait objects cannot have generic
/// methods: the collectives layer hands its `&dyn Op<T>` over as a byte-level [`Fold`] that checks
/// the element type and keeps rank order wherever a provider splits the work.
#[derive(Clone, Copy)]
pub(crate) struct Reduction<'a> {
    /// Bytes per element (0 for zero-sized types, whose vectors reduce as empty). Ranks compare
    /// it before combining each other's data: chunk boundaries are computed in elements.
    pub(crate) elem_size: usize,
    pub(crate) fold: &'a dyn Fold,
}

impl Reduction<'_> {
    /// Elements in a vector of `bytes` bytes.
    pub(crate) fn elements(&self, bytes: usize) -> usize {
        bytes.checked_div(self.elem_size).unwrap_or(0)
    }
}

/// A device's collectives for one communicator, as [`Device::collectives`] hands them over:
/// opaque outside the crate, whose own devices are the providers.
pub struct Collectives(pub(crate) Rc<dyn CollectiveProvider>);

/// The collectives a device accelerates on one communicator (see [`Device::collectives`]).
///
/// Arguments were checked by the collectives layer as far as one rank can check them (roots in
/// range, buffer lengths against the communicator's size and counts, `v` layouts inside their
/// buffers and not overlapping); disagreements between ranks are the provider's to detect and
/// report as `Err`. Buffers are bytes; `recv` is only written at the root of rooted operations.
pub(crate) trait CollectiveProvider {
    /// Fails when no collective may start on the communicator now: this rank is inside the
    /// provider's synchronous work on it (a user reduction op calling a collective), which would
    /// run out of step with the other ranks.
    fn may_start(&self) -> Result<()>;

    /// Collective `seq` of the communicator is over on this rank (finished, failed or dropped),
    /// whether or not it ran on this provider; called exactly once per operation, in any order.
    fn finished(&self, seq: u64);

    fn barrier<'a>(&'a self, op: Operation<'a>) -> Completion<'a>;

    fn bcast<'a>(&'a self, op: Operation<'a>, buf: &'a mut [u8], root: usize) -> Completion<'a>;

    fn scatter<'a>(&'a self, op: Operation<'a>, send: &'a [u8], recv: &'a mut [u8], root: usize) -> Completion<'a>;

    /// `layout` is only given (and required) at the root.
    fn scatterv<'a>(
        &'a self,
        op: Operation<'a>,
        send: &'a [u8],
        layout: Option<&'a Layout>,
        recv: &'a mut [u8],
        root: usize,
    ) -> Completion<'a>;

    fn gather<'a>(&'a self, op: Operation<'a>, send: &'a [u8], recv: &'a mut [u8], root: usize) -> Completion<'a>;

    /// `layout` is only given (and required) at the root.
    fn gatherv<'a>(
        &'a self,
        op: Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        layout: Option<&'a Layout>,
        root: usize,
    ) -> Completion<'a>;

    fn allgather<'a>(&'a self, op: Operation<'a>, send: &'a [u8], recv: &'a mut [u8]) -> Completion<'a>;

    fn allgatherv<'a>(
        &'a self,
        op: Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        layout: &'a Layout,
    ) -> Completion<'a>;

    fn alltoall<'a>(&'a self, op: Operation<'a>, send: &'a [u8], recv: &'a mut [u8]) -> Completion<'a>;

    fn alltoallv<'a>(
        &'a self,
        op: Operation<'a>,
        send: &'a [u8],
        send_layout: &'a Layout,
        recv: &'a mut [u8],
        recv_layout: &'a Layout,
    ) -> Completion<'a>;

    fn reduce<'a>(
        &'a self,
        op: Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        reduction: Reduction<'a>,
        root: usize,
    ) -> Completion<'a>;

    fn allreduce<'a>(
        &'a self,
        op: Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        reduction: Reduction<'a>,
    ) -> Completion<'a>;

    /// Rank `i` gets the reduced elements `sum(counts[..i])..sum(counts[..=i])` (`counts` in
    /// elements).
    fn reduce_scatter<'a>(
        &'a self,
        op: Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        counts: &'a [usize],
        reduction: Reduction<'a>,
    ) -> Completion<'a>;

    /// Inclusive (`exclusive == false`) or exclusive prefix reduction; rank 0's `recv` is left
    /// alone by the exclusive one.
    fn scan<'a>(
        &'a self,
        op: Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        reduction: Reduction<'a>,
        exclusive: bool,
    ) -> Completion<'a>;
}

/// A provider's answer: a blocking operation's outcome, or a nonblocking operation's remaining
/// work. Await it either way.
pub(crate) struct Completion<'a>(Stage<'a>);

enum Stage<'a> {
    /// Taken by the one poll that reports it.
    Finished(Option<Result<()>>),
    Running(Pin<Box<dyn Future<Output = Result<()>> + 'a>>),
}

impl<'a> Completion<'a> {
    /// Runs `body`, a provider's one implementation of an operation: to its end in place when
    /// `op` is blocking, boxed for the caller to await otherwise.
    pub(crate) fn of(op: Operation<'_>, body: impl Future<Output = Result<()>> + 'a) -> Self {
        if op.blocking {
            Self::finished(finish_in_place(op.dev, body))
        } else {
            Completion(Stage::Running(Box::pin(body)))
        }
    }

    /// An operation that is over already (or could not start).
    pub(crate) fn finished(outcome: Result<()>) -> Self {
        Completion(Stage::Finished(Some(outcome)))
    }
}

impl Future for Completion<'_> {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        match &mut self.0 {
            Stage::Finished(outcome) => Poll::Ready(outcome.take().expect("a completion is awaited once")),
            Stage::Running(body) => body.as_mut().poll(cx),
        }
    }
}

/// Runs a blocking operation's future to its end on the caller's stack. Its steps complete in
/// place, so it normally finishes in one poll; it yields only while a step waits for an earlier
/// nonblocking operation of this rank (a provider's shared slot still in use), and then `dev`'s
/// wait drives both.
pub(crate) fn finish_in_place(dev: &dyn Device, operation: impl Future<Output = Result<()>>) -> Result<()> {
    let mut operation = pin!(operation);
    let mut cx = Context::from_waker(Waker::noop());
    if let Poll::Ready(outcome) = operation.as_mut().poll(&mut cx) {
        return outcome;
    }
    let mut outcome = None;
    dev.wait_until(&mut || match operation.as_mut().poll(&mut cx) {
        Poll::Ready(result) => {
            outcome = Some(result);
            Ok(true)
        }
        Poll::Pending => Ok(false),
    })?;
    outcome.expect("the operation finished")
}
