//! The `native` algorithm: the operation runs on the collective provider the device gave the
//! communicator (`Device::collectives`; the shm device's shared-buffer collectives). Selection
//! picks `native` only on communicators that have one (`Comm::algorithm_for`).
//!
//! This is the whole boundary: the run becomes a device-level `Operation` and the provider's
//! operation is awaited in place, as part of the collective's future.

use bytemuck::Pod;

use super::Layout;
use super::op::Op;
use super::select::{Algorithm, Collective, Pick};
use super::transport::Run;
use crate::comm::Comm;
use crate::device::collectives::{Call, CollectiveProvider, Collectives, Operation};
use crate::error::{Error, Result};
use crate::trace;

impl Comm {
    /// Whether [`run_now`] can take a call here at all, so that other devices skip its checks
    /// (constant `false` without the `mpi` feature: only the mpi device's provider takes calls).
    #[inline]
    pub(super) fn now_possible(&self) -> bool {
        cfg!(feature = "mpi") && self.collectives.as_deref().is_some_and(|c| c.provider().calls_now())
    }
}

/// Runs a blocking collective straight on the provider, without a [`Run`] and its future,
/// where the provider completes it in one synchronous step (the mpi device's calls): the fast
/// path of a call whose tuning picks `native` and that a `Run` would have nothing to watch for
/// (no tracing, no hierarchy levels to pass by). `bytes` and `commutative` are what the call's
/// dispatch selects with. Callers ask [`Comm::now_possible`] first (a provider that never
/// completes calls answers `None` here anyway). `None`, having done nothing, leaves the call to
/// a `Run`. Measured on
/// the mpi device (callgrind, one rank): an 8-byte allreduce went from 1099 instructions per
/// call, MPI's and the shim's ~300 included, to 696.
#[inline(always)]
pub(super) fn run_now<T: Pod>(
    comm: &Comm,
    coll: Collective,
    bytes: usize,
    commutative: bool,
    call: Call<'_, T>,
) -> Option<Result<()>> {
    let provider = comm.collectives.as_deref()?.provider();
    if !goes_straight(comm, provider, coll, bytes, commutative) {
        return None;
    }
    let seq = comm.coll_seq.get();
    let op = Operation {
        seq,
        dispatch: 0,
        blocking: true,
        engine_polling: comm.process.engine.is_polling(),
        dev: &*comm.dev,
    };
    let done = provider.call_now(&op, call)?;
    comm.coll_seq.set(seq + 1);
    provider.finished(seq);
    // Success is rebuilt rather than passed on, and the provider's error comes boxed
    // (`CalledNow`): an error-sized result written field by field and then copied whole made
    // the next wide load of it wait until those stores left the store buffer, behind the
    // device's own stores to memory a peer was reading (a non-root rank's delegated reduce took
    // 0.31 µs instead of 0.06).
    Some(match done {
        Ok(()) => Ok(()),
        Err(e) => Err(passed_on(e)),
    })
}

/// An error on its way out of [`run_now`], kept off the success path.
#[cold]
#[inline(never)]
#[allow(
    clippy::boxed_local,
    reason = "the provider hands the error over boxed; unboxing it here keeps the move off the success path"
)]
fn passed_on(e: Box<Error>) -> Error {
    *e
}

/// A nonblocking collective numbered to run straight on the provider, without a [`Run`]: the
/// nonblocking twin of [`run_now`], under the same conditions (a provider that calls now,
/// tuning picking `native`, no tracing, no levels). Its number is finished when it is dropped,
/// as a `Run`'s is.
pub(super) struct Direct<'c> {
    comm: &'c Comm,
    collectives: &'c Collectives,
    seq: u64,
}

/// Numbers a nonblocking collective for [`Direct::run`] where [`run_now`]'s conditions hold;
/// `None`, having done nothing, leaves it to a [`Run`]. Callers check the arguments first.
pub(super) fn direct(comm: &Comm, coll: Collective, bytes: usize, commutative: bool) -> Option<Direct<'_>> {
    let collectives = comm.collectives.as_deref()?;
    if !collectives.provider().calls_now() || !goes_straight(comm, collectives.provider(), coll, bytes, commutative) {
        return None;
    }
    let seq = comm.coll_seq.get();
    comm.coll_seq.set(seq + 1);
    Some(Direct { comm, collectives, seq })
}

impl Direct<'_> {
    /// Runs `call` (the arguments [`direct`] was asked about) on the provider.
    pub(super) async fn run<T: Pod>(&self, call: Call<'_, T>) -> Result<()> {
        let op = Operation {
            seq: self.seq,
            dispatch: 0,
            blocking: false,
            engine_polling: self.comm.process.engine.is_polling(),
            dev: &*self.comm.dev,
        };
        self.collectives.provider().run_call(&op, call).await
    }
}

impl Drop for Direct<'_> {
    fn drop(&mut self) {
        self.collectives.provider().finished(self.seq);
    }
}

/// Whether a call may skip the `Run`: tracing off (a `Run` records the event), no hierarchy
/// levels to pass by, the tuning picks `native`, and no collective is refused now.
#[inline(always)]
fn goes_straight(
    comm: &Comm,
    provider: &impl CollectiveProvider,
    coll: Collective,
    bytes: usize,
    commutative: bool,
) -> bool {
    !trace::on()
        && comm.levels().is_none()
        && comm.choose(coll, bytes, commutative, Pick::Tuned, false) == Algorithm::Native
        && provider.may_start().is_ok()
}

/// The communicator's provider.
fn provider<'r>(run: &Run<'r>) -> Result<&'r impl CollectiveProvider> {
    match run.collectives() {
        Some(collectives) => Ok(collectives.provider()),
        None => Err(Error::InvalidArgument("the native algorithm needs a device with its own collectives".into())),
    }
}

pub(super) async fn barrier(run: &Run<'_>) -> Result<()> {
    provider(run)?.barrier(&run.operation()).await
}

pub(super) async fn bcast(run: &Run<'_>, buf: &mut [u8], root: usize) -> Result<()> {
    provider(run)?.bcast(&run.operation(), buf, root).await
}

pub(super) async fn scatter(run: &Run<'_>, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    provider(run)?.scatter(&run.operation(), send, recv, root).await
}

pub(super) async fn scatterv(
    run: &Run<'_>,
    send: &[u8],
    layout: Option<&Layout>,
    recv: &mut [u8],
    root: usize,
) -> Result<()> {
    provider(run)?.scatterv(&run.operation(), send, layout, recv, root).await
}

pub(super) async fn gather(run: &Run<'_>, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    provider(run)?.gather(&run.operation(), send, recv, root).await
}

pub(super) async fn gatherv(
    run: &Run<'_>,
    send: &[u8],
    recv: &mut [u8],
    layout: Option<&Layout>,
    root: usize,
) -> Result<()> {
    provider(run)?.gatherv(&run.operation(), send, recv, layout, root).await
}

pub(super) async fn allgather(run: &Run<'_>, send: Option<&[u8]>, recv: &mut [u8]) -> Result<()> {
    provider(run)?.allgather(&run.operation(), send, recv).await
}

pub(super) async fn allgatherv(run: &Run<'_>, send: Option<&[u8]>, recv: &mut [u8], layout: &Layout) -> Result<()> {
    provider(run)?.allgatherv(&run.operation(), send, recv, layout).await
}

/// `send` is `None` in place.
pub(super) async fn alltoall(run: &Run<'_>, send: Option<&[u8]>, recv: &mut [u8]) -> Result<()> {
    provider(run)?.alltoall(&run.operation(), send, recv).await
}

/// `send` is `None` in place (then `send_layout` is `recv_layout`).
pub(super) async fn alltoallv(
    run: &Run<'_>,
    send: Option<&[u8]>,
    send_layout: &Layout,
    recv: &mut [u8],
    recv_layout: &Layout,
) -> Result<()> {
    provider(run)?.alltoallv(&run.operation(), send, send_layout, recv, recv_layout).await
}

/// `send` is `None` at a root in place.
pub(super) async fn reduce<T: Pod>(
    run: &Run<'_>,
    send: Option<&[T]>,
    recv: &mut [T],
    op: &dyn Op<T>,
    root: usize,
) -> Result<()> {
    provider(run)?.reduce(&run.operation(), send, recv, op, root).await
}

pub(super) async fn allreduce<T: Pod>(run: &Run<'_>, send: Option<&[T]>, recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
    provider(run)?.allreduce(&run.operation(), send, recv, op).await
}

pub(super) async fn reduce_scatter<T: Pod>(
    run: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    op: &dyn Op<T>,
) -> Result<()> {
    provider(run)?.reduce_scatter(&run.operation(), send, recv, counts, op).await
}

/// `send` is `None` in place (first and last rank only).
pub(super) async fn scan<T: Pod>(
    run: &Run<'_>,
    send: Option<&[T]>,
    recv: &mut [T],
    op: &dyn Op<T>,
    exclusive: bool,
) -> Result<()> {
    provider(run)?.scan(&run.operation(), send, recv, op, exclusive).await
}
