//! Where one-sided communication (MPI's RMA: windows, put/get/accumulate, atomics, flush) will
//! plug into the device layer. **Not implemented yet**: both devices answer `None` from
//! [`super::Device::one_sided`] and nothing above the device layer calls it. The one-sided issue
//! fills it in; this module fixes the place and the shape.
//!
//! A transport serves it in one of two ways:
//! - **Direct access**: the target's window memory is reachable from the origin (shm: one address
//!   space; later shared memory between processes, or RDMA), so the origin performs each operation
//!   itself, with atomic instructions for accumulate and the atomic operations.
//! - **Active messages** (the fallback for transports without direct access, such as tcp): every
//!   operation travels as a message on the window's context, which is reserved for it like a
//!   communicator's, and the target's progress (its own fastmp calls, or the tcp input thread)
//!   applies it to the window memory and answers gets, fetch-and-ops and compare-and-swaps with a
//!   reply. Messages from one origin arrive in order, so operations apply in issue order per
//!   (origin, target), and `flush` completes once the target has acknowledged everything issued
//!   before it. This needs only point-to-point messages, so it can be written once for every
//!   transport; only direct access needs transport code.
//!
//! Targets are world ranks and offsets are in bytes from the start of the target's window part;
//! the layer above (a future `Window` type) translates communicator ranks and element
//! displacements, and checks bounds against the sizes every rank registered.

use super::ContextId;
use crate::error::Result;

/// The operator accumulate and fetch-and-op apply at the target. Only predefined operators, as in
/// MPI: with active messages the target applies it, so it cannot be a closure of the origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccumulateOp {
    /// Overwrite (MPI_REPLACE): an atomic put.
    Replace,
    /// Leave the target alone (MPI_NO_OP): an atomic get with fetch-and-op.
    NoOp,
    Sum,
    Prod,
    Min,
    Max,
    Band,
    Bor,
    Bxor,
}

/// How the target interprets the bytes of an accumulate or atomic operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    I32,
    I64,
    U32,
    U64,
    F32,
    F64,
}

/// One-sided operations on windows (see the module documentation). Put, get and accumulate may
/// complete at any time up to the next `flush` of their target; the atomics complete in the call.
pub trait OneSided {
    /// Exposes `len` bytes at `base` as this rank's part of window `window` (a context reserved
    /// for it) over `members` (world ranks). Every member registers before anyone accesses it.
    ///
    /// # Safety
    /// `base..base + len` stays valid, and is accessed by this rank only through the window's
    /// rules, until [`OneSided::deregister`] returns.
    unsafe fn register(&self, window: ContextId, members: &[usize], base: *mut u8, len: usize) -> Result<()>;

    /// Withdraws this rank's part of `window` once every operation targeting it has completed.
    fn deregister(&self, window: ContextId) -> Result<()>;

    /// Writes `len` bytes from `data` into `target`'s part of `window` at `offset`.
    ///
    /// # Safety
    /// `data..data + len` stays readable and unmodified until the next flush of `target`.
    unsafe fn put(&self, window: ContextId, target: usize, offset: usize, data: *const u8, len: usize) -> Result<()>;

    /// Reads `len` bytes of `target`'s part of `window` at `offset` into `into`.
    ///
    /// # Safety
    /// `into..into + len` stays writable and otherwise untouched until the next flush of `target`.
    unsafe fn get(&self, window: ContextId, target: usize, offset: usize, into: *mut u8, len: usize) -> Result<()>;

    /// Combines `len` bytes of `element`s from `data` into `target`'s window at `offset`
    /// element-wise (`window = data ∘ window`), atomically per element.
    ///
    /// # Safety
    /// As for [`OneSided::put`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn accumulate(
        &self,
        window: ContextId,
        target: usize,
        offset: usize,
        data: *const u8,
        len: usize,
        element: Element,
        op: AccumulateOp,
    ) -> Result<()>;

    /// Atomically applies `op` with `operand` to the one `element` at `offset` in `target`'s
    /// window and stores the previous value in `previous` (MPI_Fetch_and_op). Both slices hold
    /// one element.
    #[allow(clippy::too_many_arguments)]
    fn fetch_and_op(
        &self,
        window: ContextId,
        target: usize,
        offset: usize,
        element: Element,
        op: AccumulateOp,
        operand: &[u8],
        previous: &mut [u8],
    ) -> Result<()>;

    /// Atomically replaces the `element` at `offset` in `target`'s window by `new` if it equals
    /// `expected`, and stores the previous value in `previous` (MPI_Compare_and_swap).
    #[allow(clippy::too_many_arguments)]
    fn compare_and_swap(
        &self,
        window: ContextId,
        target: usize,
        offset: usize,
        element: Element,
        expected: &[u8],
        new: &[u8],
        previous: &mut [u8],
    ) -> Result<()>;

    /// Completes every operation this rank issued on `window` towards `target` (every target for
    /// `None`): their effects are visible at the target and their buffers are free again
    /// (MPI_Win_flush / MPI_Win_flush_all).
    fn flush(&self, window: ContextId, target: Option<usize>) -> Result<()>;
}
