//! The device side of one-sided communication (MPI's RMA): how a transport exposes a rank's part
//! of a window and carries puts, gets, accumulates, atomics, locks and flushes to it. The typed,
//! epoch-checked API above it is `crate::window`; everything epoch-related that can be said with
//! messages and collectives (fence, post/start/complete/wait) lives there, written once.
//!
//! A transport serves windows in one of two ways:
//! - **Direct access** (shm): the target's window memory is in the origin's address space, so the
//!   origin performs each operation itself (one copy, no target involvement), with hardware atomics
//!   for accumulate and the atomic operations.
//! - **Active messages** (tcp): every operation travels as a frame to the target, whose input
//!   handler (a thread, so a target busy in user code still serves it) applies it to the window
//!   memory and answers gets and atomics with a reply. Frames from one origin apply in issue order.
//!
//! # Memory model (see `crate::window` for the user-facing rules)
//! Window memory is never referenced as `&[u8]`/`&mut [u8]` by the device: every access to it
//! goes through [`rma_memory`](super::rma_memory) (word-wise relaxed atomics; hardware atomic
//! read-modify-write per element for accumulates). Conflicting accesses that MPI calls erroneous
//! (two origins putting to the same bytes in one epoch) therefore yield unspecified *values*, never
//! undefined behaviour. The owner reads and writes its part as a plain slice only between
//! [`RmaWindow::begin_local_access`] and [`RmaWindow::end_local_access`] (the window layer's
//! local-access guard): meanwhile no operation of any origin is inside the part; those that
//! arrive wait (direct access) or are queued and applied at `end_local_access` (active messages).
//!
//! Targets are ranks of the window's communicator (indices into `members`); offsets and lengths
//! are in bytes from the start of the target's part. The window layer checks every range against
//! the sizes all members registered before calling; devices check again where a check is cheap
//! (`Err`, never a write outside a segment).

use super::rma_memory::Segment;
use super::{ContextId, Started};
use crate::error::Result;

/// The operator accumulate, get-accumulate and fetch-and-op apply at the target
/// (`target = origin ∘ target`, element-wise, atomically per element). Only predefined operators,
/// as in MPI: with active messages the target applies it, so it cannot be a closure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccumulateOp {
    /// Overwrite (MPI_REPLACE): an element-atomic put.
    Replace,
    /// Leave the target alone (MPI_NO_OP): with get-accumulate, an element-atomic get.
    NoOp,
    Sum,
    Prod,
    Min,
    Max,
    /// Bitwise and/or/xor (integers only).
    Band,
    Bor,
    Bxor,
    /// Logical and/or/xor (integers only; non-zero is true, the result is 0 or 1).
    Land,
    Lor,
    Lxor,
}

/// How the target interprets the bytes of an accumulate or atomic operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Element {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F32,
    F64,
}

impl Element {
    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            Element::I8 | Element::U8 => 1,
            Element::I16 | Element::U16 => 2,
            Element::I32 | Element::U32 | Element::F32 => 4,
            Element::I64 | Element::U64 | Element::F64 => 8,
        }
    }

    /// Whether `op` is defined on this element type (bitwise and logical ops are not on floats).
    pub fn supports(self, op: AccumulateOp) -> bool {
        use AccumulateOp::*;
        let float = matches!(self, Element::F32 | Element::F64);
        !(float && matches!(op, Band | Bor | Bxor | Land | Lor | Lxor))
    }
}

/// Passive-target lock kinds (MPI_LOCK_SHARED / MPI_LOCK_EXCLUSIVE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockKind {
    Shared,
    Exclusive,
}

/// Where a device's windows come from: one per endpoint that supports one-sided communication
/// ([`super::Device::one_sided`]).
pub trait OneSided {
    /// Exposes `len` bytes at `base` as this rank's part of the window identified by `window`
    /// (a context reserved for it, unique among this rank's live windows) over `members` (world
    /// ranks, in the window communicator's order; this rank is among them). Every member calls it
    /// with the same `window` and `members`; the window layer then runs a barrier and calls
    /// [`RmaWindow::connect`]: no operation reaches a part before both happened everywhere.
    ///
    /// # Safety
    /// `base..base + len` is valid for reads and writes (and aligned to 8 bytes) and is accessed
    /// by this rank only through the returned window's rules until [`RmaWindow::close`] has
    /// returned (or, if the handle is leaked, forever).
    unsafe fn expose(
        &self,
        window: ContextId,
        members: &[usize],
        base: *mut u8,
        len: usize,
    ) -> Result<Box<dyn RmaWindow>>;

    /// Whether every member's part is directly addressable from this rank (all members are
    /// thread ranks of this process), so `win_allocate_shared` is possible: its `SharedPart`
    /// accessors are then this device's direct puts and gets.
    fn direct_access(&self, members: &[usize]) -> bool;
}

/// This rank's handle of one window at the device. Put, get and accumulate may complete at any
/// time up to the next `flush` of their target; their origin buffers are free as soon as the
/// returned [`Started`] has completed (`Started::Complete` at once, or a device request that
/// `Device::test`/`wait`/`release` complete, with the usual buffer contract).
pub trait RmaWindow {
    /// Learns every member's part (sizes, and for direct access the addresses). Called once, after
    /// every member's `expose` returned (the window layer runs a barrier between).
    fn connect(&self) -> Result<()>;

    /// Byte length of every member's part, in member order (valid after `connect`).
    fn part_lengths(&self) -> &[usize];

    /// Runs `f` on `target`'s part when this rank can address it directly (every member on a
    /// device with direct access, at least its own part elsewhere), entered as an operation is:
    /// the owner's local access or close cannot overlap. Returns `Ok(false)` without calling `f`
    /// when the part is not directly addressable: the caller then puts or gets.
    fn with_part(&self, target: usize, f: &mut dyn FnMut(&Segment) -> Result<()>) -> Result<bool>;

    /// Writes `len` bytes from `data` into `target`'s part at `offset`.
    ///
    /// # Safety
    /// `data..data + len` stays readable and unmodified until the returned operation completes.
    unsafe fn put(&self, target: usize, offset: usize, data: *const u8, len: usize) -> Result<Started>;

    /// Reads `len` bytes of `target`'s part at `offset` into `into`.
    ///
    /// # Safety
    /// `into..into + len` stays writable and otherwise untouched until the returned operation
    /// completes.
    unsafe fn get(&self, target: usize, offset: usize, into: *mut u8, len: usize) -> Result<Started>;

    /// Combines `len` bytes of `element`s from `data` into `target`'s part at `offset`:
    /// `target[i] = data[i] ∘ target[i]`, atomically per element.
    ///
    /// # Safety
    /// As for [`RmaWindow::put`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn accumulate(
        &self,
        target: usize,
        offset: usize,
        data: *const u8,
        len: usize,
        element: Element,
        op: AccumulateOp,
    ) -> Result<Started>;

    /// As [`RmaWindow::accumulate`], and stores each element's previous value in `result`
    /// (MPI_Get_accumulate; with `NoOp`, `data` is not read and may be dangling).
    ///
    /// # Safety
    /// As for [`RmaWindow::put`] for `data` and [`RmaWindow::get`] for `result`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn get_accumulate(
        &self,
        target: usize,
        offset: usize,
        data: *const u8,
        result: *mut u8,
        len: usize,
        element: Element,
        op: AccumulateOp,
    ) -> Result<Started>;

    /// Atomically applies `op` with `operand` to the one `element` at `offset` in `target`'s
    /// part and returns the previous value (MPI_Fetch_and_op); completes in the call. Values are
    /// the element's bytes in the low bytes of a `u64` (native endianness of the element).
    fn fetch_and_op(
        &self,
        target: usize,
        offset: usize,
        element: Element,
        op: AccumulateOp,
        operand: u64,
    ) -> Result<u64>;

    /// Atomically replaces the `element` at `offset` in `target`'s part by `new` if its bits equal
    /// `expected`, and returns the previous value (MPI_Compare_and_swap); completes in the call.
    fn compare_and_swap(&self, target: usize, offset: usize, element: Element, expected: u64, new: u64) -> Result<u64>;

    /// Acquires a passive-target lock on `target`'s part (MPI_Win_lock), waiting while it
    /// conflicts with locks other ranks hold (an exclusive lock excludes every other lock).
    /// `target` may be this rank.
    fn lock(&self, target: usize, kind: LockKind) -> Result<()>;

    /// Completes this rank's operations towards `target` (as `flush`) and releases its lock there.
    fn unlock(&self, target: usize) -> Result<()>;

    /// Completes every operation this rank issued towards `target` (every member for `None`):
    /// their effects are visible at the target (MPI_Win_flush / MPI_Win_flush_all).
    fn flush(&self, target: Option<usize>) -> Result<()>;

    /// Waits until no operation of any origin is inside this rank's own part, then holds later
    /// ones off (they wait, or are queued by the device) until [`RmaWindow::end_local_access`]:
    /// meanwhile the owner may use its part as plain memory. Independent of passive-target locks.
    /// Fails (rather than waiting forever) if the job aborted.
    fn begin_local_access(&self) -> Result<()>;

    /// Ends what [`RmaWindow::begin_local_access`] began; operations held off proceed (a device
    /// that queued them applies them here or in its progress). Unpaired calls are ignored.
    fn end_local_access(&self);

    /// Withdraws this rank's part: waits until no operation of any origin is inside it (direct
    /// access) or being applied to it (active messages), and makes every later operation that
    /// targets it fail with a clear error. Called after the closing barrier of a collective free,
    /// or alone when the owner unwinds; afterwards the memory may be released.
    fn close(&self) -> Result<()>;

    /// The collective form of [`RmaWindow::close`]: every member calls it after the closing
    /// barrier of a collective free, so no member has an operation pending anywhere. A device
    /// whose windows can only be released collectively (MPI_Win_free) releases them here.
    fn free(&self) -> Result<()> {
        self.close()
    }
}
