//! The per-communicator collective hook: when a communicator is created, the device may hand back
//! a [`CollectiveProvider`] that runs the collectives it accelerates (the shm device: ranks copy
//! straight between each other's buffers). The collectives layer selects it under the algorithm
//! name `native` and uses its message-based algorithms where a communicator has none (tcp).
//!
//! The boundary is device-level, so providers never see the layer above: an operation arrives as
//! an [`Operation`] (its number on the communicator, blocking or not, the rank's device for
//! progress and waits) and buffers as bytes, except the reductions', which stay typed (`T: Pod`
//! with the user's `&dyn Op<T>`, combined in rank order). Three types are shared with the
//! collectives layer rather than duplicated: `coll::op::Op`, `coll::Layout` (a validated `v`
//! layout, which the shm provider publishes to peers as is) and `coll::Collective` (the
//! operation kinds ranks compare before touching each other's buffers).
//!
//! Dispatch is static: a provider's operations return their `async` bodies as `impl Future`, and
//! [`Collectives`] is an enum of the crate's providers (the shm device's and, with the `mpi`
//! feature, the mpi device's, which delegates to the MPI library's collectives); its provider
//! implementation matches on the variant inside one `async` block, so the body is part of the
//! collective's own future, exactly like an algorithm of the collectives layer: a blocking
//! collective runs it on the caller's stack and a nonblocking one inside the future its engine
//! keeps, so nothing is boxed or called indirectly per operation. A trait object (`Rc<dyn ...>`,
//! each operation driving its body to its end in blocking mode and boxing it otherwise) was built
//! first and measured: it added about 150 instructions to a one-rank barrier (345 before) and
//! took its latency from 0.06 to 0.10 µs.

use std::future::Future;

use bytemuck::Pod;

use super::Device;
#[cfg(feature = "mpi")]
use super::mpi::collectives::MpiCollectives;
use super::shm::ShmCollectives;
use crate::coll::op::Op;
use crate::coll::{Blocks, Layout};
use crate::error::{Error, Result};

/// The end of a [`CollectiveProvider::call_now`]. The error is boxed so that the whole result
/// fits in registers: a success written into the error-sized `Result` and read back with wider
/// loads waited for the device's stores to memory a peer was reading (seen as a stall right
/// after `MPI_Reduce` returned on a non-root rank).
pub(crate) type CalledNow = std::result::Result<(), Box<Error>>;

/// The `dispatch` of [`CollectiveProvider::bypassed`] that marks every choice of an operation.
pub(crate) const EVERY_DISPATCH: u64 = u64::MAX;

/// One collective operation of this rank, as a provider sees it.
pub(crate) struct Operation<'a> {
    /// Number of the operation on its communicator. Every rank issues a communicator's
    /// collectives in the same order, so it is the same on every rank: providers order their
    /// shared state by it.
    pub(crate) seq: u64,
    /// Number of the algorithm choice within the operation (0 for the collective itself, then
    /// one per collective a composite runs): the same on every rank of a correct call, so a
    /// provider can tell its part of the operation from a peer's different choice.
    pub(crate) dispatch: u64,
    /// The caller waits for the outcome (a blocking collective): the operation waits for peers in
    /// place instead of yielding to the progress engine.
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

/// A device's collectives for one communicator, as [`Device::collectives`] hands them over:
/// opaque outside the crate, whose own devices are the providers.
pub struct Collectives(Provider);

/// One blocking collective's checked arguments as data, the operations' of the same names (byte
/// collectives take `T = u8`): what [`CollectiveProvider::call_now`] runs without a future.
/// Only the mpi device's provider reads them.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) enum Call<'a, T> {
    Barrier,
    Bcast { buf: &'a mut [u8], root: usize },
    Scatter { send: &'a [u8], recv: &'a mut [u8], root: usize },
    Scatterv { send: &'a [u8], layout: Option<Blocks<'a>>, recv: &'a mut [u8], root: usize },
    Gather { send: &'a [u8], recv: &'a mut [u8], root: usize },
    Gatherv { send: &'a [u8], recv: &'a mut [u8], layout: Option<Blocks<'a>>, root: usize },
    Allgather { send: Option<&'a [u8]>, recv: &'a mut [u8] },
    Allgatherv { send: Option<&'a [u8]>, recv: &'a mut [u8], layout: Blocks<'a> },
    Alltoall { send: Option<&'a [u8]>, recv: &'a mut [u8] },
    Alltoallv { send: Option<&'a [u8]>, send_layout: Blocks<'a>, recv: &'a mut [u8], recv_layout: Blocks<'a> },
    Reduce { send: Option<&'a [T]>, recv: &'a mut [T], op: &'a dyn Op<T>, root: usize },
    Allreduce { send: Option<&'a [T]>, recv: &'a mut [T], op: &'a dyn Op<T> },
    ReduceScatter { send: &'a [T], recv: &'a mut [T], counts: &'a [usize], op: &'a dyn Op<T> },
    Scan { send: Option<&'a [T]>, recv: &'a mut [T], op: &'a dyn Op<T>, exclusive: bool },
}

/// A [`Call`] of a collective over bytes (every one but the reductions).
pub(crate) type ByteCall<'a> = Call<'a, u8>;

/// The crate's providers, one variant per device that has one.
enum Provider {
    Shm(ShmCollectives),
    #[cfg(feature = "mpi")]
    Mpi(MpiCollectives),
}

impl Collectives {
    pub(crate) fn new(provider: ShmCollectives) -> Self {
        Collectives(Provider::Shm(provider))
    }

    /// The mpi device's provider.
    #[cfg(feature = "mpi")]
    pub(crate) fn mpi(provider: MpiCollectives) -> Self {
        Collectives(Provider::Mpi(provider))
    }

    /// The provider.
    pub(crate) fn provider(&self) -> &impl CollectiveProvider {
        &self.0
    }
}

/// Runs `$call` on the variant's provider `$p` (an operation's future is awaited in place, so
/// the variants' bodies become states of one future: no boxing).
macro_rules! on_provider {
    ($self:ident, $p:ident => $call:expr) => {
        match $self {
            Provider::Shm($p) => $call,
            #[cfg(feature = "mpi")]
            Provider::Mpi($p) => $call,
        }
    };
}

impl CollectiveProvider for Provider {
    #[inline]
    fn may_start(&self) -> Result<()> {
        on_provider!(self, p => p.may_start())
    }

    #[inline]
    fn finished(&self, seq: u64) {
        on_provider!(self, p => p.finished(seq))
    }

    #[inline]
    fn bypassed(&self, seq: u64, dispatch: u64) {
        on_provider!(self, p => p.bypassed(seq, dispatch))
    }

    fn abandoned(&self, seq: u64) {
        on_provider!(self, p => p.abandoned(seq))
    }

    #[inline]
    fn calls_now(&self) -> bool {
        on_provider!(self, p => p.calls_now())
    }

    #[inline(always)]
    fn call_now<T: Pod>(&self, op: &Operation<'_>, call: Call<'_, T>) -> Option<CalledNow> {
        on_provider!(self, p => p.call_now(op, call))
    }

    async fn barrier<'a>(&'a self, op: &'a Operation<'a>) -> Result<()> {
        on_provider!(self, p => p.barrier(op).await)
    }

    async fn bcast<'a>(&'a self, op: &'a Operation<'a>, buf: &'a mut [u8], root: usize) -> Result<()> {
        on_provider!(self, p => p.bcast(op, buf, root).await)
    }

    async fn scatter<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        root: usize,
    ) -> Result<()> {
        on_provider!(self, p => p.scatter(op, send, recv, root).await)
    }

    async fn scatterv<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [u8],
        layout: Option<&'a Layout>,
        recv: &'a mut [u8],
        root: usize,
    ) -> Result<()> {
        on_provider!(self, p => p.scatterv(op, send, layout, recv, root).await)
    }

    async fn gather<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        root: usize,
    ) -> Result<()> {
        on_provider!(self, p => p.gather(op, send, recv, root).await)
    }

    async fn gatherv<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        layout: Option<&'a Layout>,
        root: usize,
    ) -> Result<()> {
        on_provider!(self, p => p.gatherv(op, send, recv, layout, root).await)
    }

    async fn allgather<'a>(&'a self, op: &'a Operation<'a>, send: Option<&'a [u8]>, recv: &'a mut [u8]) -> Result<()> {
        on_provider!(self, p => p.allgather(op, send, recv).await)
    }

    async fn allgatherv<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [u8]>,
        recv: &'a mut [u8],
        layout: &'a Layout,
    ) -> Result<()> {
        on_provider!(self, p => p.allgatherv(op, send, recv, layout).await)
    }

    async fn alltoall<'a>(&'a self, op: &'a Operation<'a>, send: Option<&'a [u8]>, recv: &'a mut [u8]) -> Result<()> {
        on_provider!(self, p => p.alltoall(op, send, recv).await)
    }

    async fn alltoallv<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [u8]>,
        send_layout: &'a Layout,
        recv: &'a mut [u8],
        recv_layout: &'a Layout,
    ) -> Result<()> {
        on_provider!(self, p => p.alltoallv(op, send, send_layout, recv, recv_layout).await)
    }

    async fn reduce<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [T]>,
        recv: &'a mut [T],
        reduction: &'a dyn Op<T>,
        root: usize,
    ) -> Result<()> {
        on_provider!(self, p => p.reduce(op, send, recv, reduction, root).await)
    }

    async fn allreduce<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [T]>,
        recv: &'a mut [T],
        reduction: &'a dyn Op<T>,
    ) -> Result<()> {
        on_provider!(self, p => p.allreduce(op, send, recv, reduction).await)
    }

    async fn reduce_scatter<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [T],
        recv: &'a mut [T],
        counts: &'a [usize],
        reduction: &'a dyn Op<T>,
    ) -> Result<()> {
        on_provider!(self, p => p.reduce_scatter(op, send, recv, counts, reduction).await)
    }

    async fn scan<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [T]>,
        recv: &'a mut [T],
        reduction: &'a dyn Op<T>,
        exclusive: bool,
    ) -> Result<()> {
        on_provider!(self, p => p.scan(op, send, recv, reduction, exclusive).await)
    }
}

/// The collectives a device accelerates on one communicator (see [`Device::collectives`]). Each
/// operation is the `Comm` collective of the same name (over bytes, except reductions); it returns
/// the operation's `async` body, which the caller awaits. Static dispatch allows the reductions'
/// generic element type, so nothing is erased at the boundary.
///
/// Arguments were checked by the collectives layer as far as one rank can check them (roots in
/// range, buffer lengths against the communicator's size and counts, `v` layouts inside their
/// buffers and not overlapping); disagreements between ranks are the provider's to detect and
/// report as `Err`. `recv` is only written at the root of rooted operations. A `send` of `None`
/// is MPI_IN_PLACE: this rank's contribution already lies in `recv` (its own block, or the whole
/// vector of a reduction).
pub(crate) trait CollectiveProvider {
    /// Fails when no collective may start on the communicator now: this rank is inside the
    /// provider's synchronous work on it (a user reduction op calling a collective), which would
    /// run out of step with the other ranks.
    fn may_start(&self) -> Result<()>;

    /// Collective `seq` of the communicator is over on this rank (finished, failed or dropped),
    /// whether or not it ran on this provider; called exactly once per operation, in any order.
    fn finished(&self, seq: u64);

    /// Choice `dispatch` of collective `seq` runs a message-based algorithm on this rank, not the
    /// provider: peers that chose the provider there (their arguments differ from this rank's)
    /// must fail instead of waiting for this rank. [`EVERY_DISPATCH`]: the whole operation
    /// (every choice up to the last a provider numbers) never runs on this rank.
    fn bypassed(&self, seq: u64, dispatch: u64);

    /// Collective `seq` is given up on this rank before its end (a nonblocking operation dropped
    /// unfinished, or a level operation never started): peers waiting for it in a part this
    /// rank never entered must fail, and be woken, instead of waiting for this rank. Called
    /// before [`Self::finished`]; a part this rank did enter was left by then.
    fn abandoned(&self, seq: u64);

    /// Whether [`Self::call_now`] may complete calls: lets the layer above skip its selection
    /// for providers that never do.
    fn calls_now(&self) -> bool;

    /// Runs blocking operation `op` (its number not yet counted, its choice `native`) to its
    /// end without a future, where the provider completes it in one synchronous step (the mpi
    /// device: one blocking MPI call). `None`, having done nothing, leaves it to the operation
    /// of the same name, awaited through the layer's general path; the caller reports
    /// [`Self::finished`] after `Some`.
    fn call_now<T: Pod>(&self, op: &Operation<'_>, call: Call<'_, T>) -> Option<CalledNow>;

    /// Runs `call` as the operation of its name (the nonblocking fast path's way in, which
    /// builds no `Run`). The `v` collectives take built layouts only: they start through a `Run`.
    fn run_call<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        call: Call<'a, T>,
    ) -> impl Future<Output = Result<()>> + 'a {
        async move {
            match call {
                Call::Barrier => self.barrier(op).await,
                Call::Bcast { buf, root } => self.bcast(op, buf, root).await,
                Call::Scatter { send, recv, root } => self.scatter(op, send, recv, root).await,
                Call::Gather { send, recv, root } => self.gather(op, send, recv, root).await,
                Call::Allgather { send, recv } => self.allgather(op, send, recv).await,
                Call::Alltoall { send, recv } => self.alltoall(op, send, recv).await,
                Call::Reduce { send, recv, op: reduction, root } => self.reduce(op, send, recv, reduction, root).await,
                Call::Allreduce { send, recv, op: reduction } => self.allreduce(op, send, recv, reduction).await,
                Call::ReduceScatter { send, recv, counts, op: reduction } => {
                    self.reduce_scatter(op, send, recv, counts, reduction).await
                }
                Call::Scan { send, recv, op: reduction, exclusive } => {
                    self.scan(op, send, recv, reduction, exclusive).await
                }
                Call::Scatterv { .. } | Call::Gatherv { .. } | Call::Allgatherv { .. } | Call::Alltoallv { .. } => {
                    Err(crate::error::Error::InvalidArgument("a v collective's call needs its built layout".into()))
                }
            }
        }
    }

    fn barrier<'a>(&'a self, op: &'a Operation<'a>) -> impl Future<Output = Result<()>> + 'a;

    fn bcast<'a>(
        &'a self,
        op: &'a Operation<'a>,
        buf: &'a mut [u8],
        root: usize,
    ) -> impl Future<Output = Result<()>> + 'a;

    fn scatter<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        root: usize,
    ) -> impl Future<Output = Result<()>> + 'a;

    /// `layout` is only given (and required) at the root.
    fn scatterv<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [u8],
        layout: Option<&'a Layout>,
        recv: &'a mut [u8],
        root: usize,
    ) -> impl Future<Output = Result<()>> + 'a;

    fn gather<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        root: usize,
    ) -> impl Future<Output = Result<()>> + 'a;

    /// `layout` is only given (and required) at the root.
    fn gatherv<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        layout: Option<&'a Layout>,
        root: usize,
    ) -> impl Future<Output = Result<()>> + 'a;

    fn allgather<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [u8]>,
        recv: &'a mut [u8],
    ) -> impl Future<Output = Result<()>> + 'a;

    fn allgatherv<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [u8]>,
        recv: &'a mut [u8],
        layout: &'a Layout,
    ) -> impl Future<Output = Result<()>> + 'a;

    /// `send` is `None` in place (`recv` holds the blocks to send).
    fn alltoall<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [u8]>,
        recv: &'a mut [u8],
    ) -> impl Future<Output = Result<()>> + 'a;

    /// `send` is `None` in place (`recv` holds the blocks to send; the layouts are one).
    fn alltoallv<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [u8]>,
        send_layout: &'a Layout,
        recv: &'a mut [u8],
        recv_layout: &'a Layout,
    ) -> impl Future<Output = Result<()>> + 'a;

    /// `send` is `None` at a root in place (`recv` holds its contribution).
    fn reduce<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [T]>,
        recv: &'a mut [T],
        reduction: &'a dyn Op<T>,
        root: usize,
    ) -> impl Future<Output = Result<()>> + 'a;

    fn allreduce<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [T]>,
        recv: &'a mut [T],
        reduction: &'a dyn Op<T>,
    ) -> impl Future<Output = Result<()>> + 'a;

    /// Rank `i` gets the reduced elements `sum(counts[..i])..sum(counts[..=i])` (`counts` in
    /// elements).
    fn reduce_scatter<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [T],
        recv: &'a mut [T],
        counts: &'a [usize],
        reduction: &'a dyn Op<T>,
    ) -> impl Future<Output = Result<()>> + 'a;

    /// Inclusive (`exclusive == false`) or exclusive prefix reduction; rank 0's `recv` is left
    /// alone by the exclusive one.
    /// `send` is `None` in place, which only the first and the last rank may use (a middle
    /// rank's input is read by the ranks above it while its result is written: it passes a copy).
    fn scan<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [T]>,
        recv: &'a mut [T],
        reduction: &'a dyn Op<T>,
        exclusive: bool,
    ) -> impl Future<Output = Result<()>> + 'a;
}
