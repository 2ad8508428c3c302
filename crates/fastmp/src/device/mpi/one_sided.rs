//! One-sided communication on the mpi device: every fastmp window is an MPI window
//! (`MPI_Win_create` over the memory the window layer exposes, on a communicator of its members),
//! and every operation is the MPI one (`csrc/mpi_rma.c`).
//!
//! # Epochs
//! The window layer runs fence and post/start/complete/wait itself (messages and collectives) and
//! hands the device passive-target calls only, so every MPI operation here runs inside an MPI
//! passive-target epoch on its target:
//! - `lock(t, Exclusive)` is `MPI_Win_lock(EXCLUSIVE, t)`, held until `unlock(t)`; `lock(t, Shared)`
//!   (also each target of the window layer's `lock_all`) is *deferred*: the first operation
//!   towards `t` takes `MPI_Win_lock(SHARED, t)`, held until `unlock(t)` (MPI lets a lock be
//!   acquired that late), so an epoch without operations on a rank holds nothing there;
//! - an operation towards a target this rank has not locked (fence and PSCW epochs, NOCHECK locks)
//!   opens a *lazy* shared lock on it, which the next `flush` of that target closes
//!   (`MPI_Win_unlock`); fence and complete flush their targets, so lazy locks never outlive
//!   their epoch, and a get that opened one closes it at once;
//! - the owner's local access is `MPI_Win_lock(EXCLUSIVE, self)` (+ `MPI_Win_sync`): MPI grants it
//!   only once no origin holds a lock there (no operation of any origin is inside the part, since
//!   every operation runs under a lock) and keeps later ones out until the unlock. A shared epoch
//!   this rank has on itself goes back to deferred meanwhile. Unlike the shm and tcp devices,
//!   local access therefore also waits for the shared and exclusive epochs in which other ranks
//!   operated on this rank to end (the MPI rule for load/store access under passive target).
//!
//! Every blocking operation completes locally in the call (`MPI_Win_flush_local`), so it returns
//! `Started::Complete`; the request forms (`rput`, ...) are therefore complete when started.
//!
//! # Freeing
//! `MPI_Win_free` is collective: [`RmaWindow::free`] (every member, after the closing barrier of
//! `Window::free`) releases the MPI window. A lone [`RmaWindow::close`] (a rank abandoning its
//! window on an error path) cannot: it refuses this rank's later calls and reports that the part
//! stays exposed, so the window layer keeps owned memory allocated (leaked) rather than releasing
//! memory MPI peers may still reach.

use std::cell::{Cell, OnceCell};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::check;
use crate::device::one_sided::{AccumulateOp, Element, LockKind, OneSided, RmaWindow};
use crate::device::rma_memory::Segment;
use crate::device::{ContextId, RawStatus, Started};
use crate::error::{Error, Result};

unsafe extern "C" {
    fn fastmp_rma_create(
        world: c_int,
        members: *const c_int,
        n: c_int,
        tag: c_int,
        base: *mut c_void,
        len: usize,
        lengths: *mut u64,
        my_index: *mut c_int,
        out: *mut *mut c_void,
    ) -> c_int;
    fn fastmp_rma_free(win: *mut c_void) -> c_int;
    fn fastmp_rma_lock(win: *mut c_void, target: c_int, exclusive: c_int) -> c_int;
    fn fastmp_rma_unlock(win: *mut c_void, target: c_int) -> c_int;
    fn fastmp_rma_flush(win: *mut c_void, target: c_int) -> c_int;
    fn fastmp_rma_sync(win: *mut c_void) -> c_int;
    fn fastmp_rma_put(win: *mut c_void, target: c_int, offset: usize, data: *const c_void, len: usize) -> c_int;
    fn fastmp_rma_get(win: *mut c_void, target: c_int, offset: usize, into: *mut c_void, len: usize) -> c_int;
    fn fastmp_rma_accumulate(
        win: *mut c_void,
        target: c_int,
        offset: usize,
        data: *const c_void,
        result: *mut c_void,
        len: usize,
        element: c_int,
        op: c_int,
    ) -> c_int;
    fn fastmp_rma_fetch_and_op(
        win: *mut c_void,
        target: c_int,
        offset: usize,
        element: c_int,
        op: c_int,
        operand: *const c_void,
        result: *mut c_void,
    ) -> c_int;
    fn fastmp_rma_compare_and_swap(
        win: *mut c_void,
        target: c_int,
        offset: usize,
        element: c_int,
        expected: *const c_void,
        replacement: *const c_void,
        result: *mut c_void,
    ) -> c_int;
    fn fastmp_rma_open_mpi_major() -> c_int;
}

/// MPI windows of this process that peers may still operate on (connected, not freed).
static OPEN_WINDOWS: AtomicUsize = AtomicUsize::new(0);

/// Whether this process exposes an MPI window. Passive-target atomics and accumulates over
/// shared memory (Open MPI's vader) are applied by the target inside its MPI calls, so a rank
/// with windows should keep calling MPI while it waits rather than sleep (a 50 µs sleep per wait
/// step made fetch_and_op ~100 µs instead of ~1 µs).
pub(crate) fn windows_open() -> bool {
    OPEN_WINDOWS.load(Ordering::Relaxed) > 0
}

/// The mpi device's windows (one per endpoint): MPI windows on communicators created from the
/// job's world communicator.
pub(crate) struct MpiRma {
    /// Handle of the job's world communicator (the parent of every window's communicator).
    world: c_int,
}

impl MpiRma {
    pub(crate) fn new(world: c_int) -> MpiRma {
        MpiRma { world }
    }
}

/// Tags of `MPI_Comm_create_group` for window communicators: the upper half of the 0..=32767
/// every MPI library allows. (Creations are collective and made in one order by every member, so
/// a tag shared with another creation could only meet a disjoint or identical group.)
const WINDOW_TAG_BASE: c_int = 1 << 14;
const WINDOW_TAG_SPAN: ContextId = 1 << 14;

impl OneSided for MpiRma {
    unsafe fn expose(
        &self,
        window: ContextId,
        members: &[usize],
        base: *mut u8,
        len: usize,
    ) -> Result<Box<dyn RmaWindow>> {
        let members = members
            .iter()
            .map(|&m| c_int::try_from(m))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| Error::InvalidArgument("expose: a world rank does not fit an MPI rank".into()))?;
        let n = members.len();
        // The MPI window is created in `connect`: a collective MPI call here would hang members
        // whose own part failed to exist (they skip `expose` and go straight to the agreement).
        Ok(Box::new(MpiWindow {
            world: self.world,
            tag: WINDOW_TAG_BASE + (window % WINDOW_TAG_SPAN) as c_int,
            members,
            base,
            len,
            // SAFETY: the `expose` contract: valid for reads and writes, accessed by this rank only
            // through the window's rules, for the window's life.
            own: unsafe { Segment::new(base, len) },
            win: Cell::new(std::ptr::null_mut()),
            me: Cell::new(0),
            lengths: OnceCell::new(),
            locks: (0..n).map(|_| Cell::new(Lock::None)).collect(),
            local: Cell::new(None),
            closed: Cell::new(false),
        }))
    }

    fn direct_access(&self, _members: &[usize]) -> bool {
        false
    }
}

/// The MPI lock this rank holds on one target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lock {
    None,
    /// Taken by an operation outside a lock epoch; the next flush of the target releases it.
    Lazy,
    /// A shared lock epoch whose MPI lock the first operation takes (MPI lets a lock be acquired
    /// that late): an epoch without operations holds nothing at the target.
    Deferred,
    Held(LockKind),
}

/// One rank's MPI window.
struct MpiWindow {
    world: c_int,
    tag: c_int,
    /// World ranks of the members (the window communicator's ranks, in order).
    members: Vec<c_int>,
    base: *mut u8,
    len: usize,
    /// This rank's part, for the one operation done without MPI (see `compare_and_swap`).
    own: Segment,
    /// The C side's window (null before `connect` and after `free`).
    win: Cell<*mut c_void>,
    /// This rank's index among the members.
    me: Cell<usize>,
    lengths: OnceCell<Vec<usize>>,
    locks: Box<[Cell<Lock>]>,
    /// Local access is on: `Some(lock on itself to take back at its end)`.
    local: Cell<Option<Lock>>,
    closed: Cell<bool>,
}

impl MpiWindow {
    /// The MPI window, if `call` may use it now.
    fn usable(&self, call: &'static str) -> Result<*mut c_void> {
        let win = self.win.get();
        if self.closed.get() {
            return Err(Error::RmaSync(format!("{call}: the window was freed at this rank")));
        }
        if win.is_null() {
            return Err(Error::RmaSync(format!("{call}: the window is not connected yet")));
        }
        Ok(win)
    }

    /// Checks `offset..offset + len` against `target`'s part (the window layer checked it too;
    /// this is the device's own guard against writing outside a part).
    fn range(&self, call: &'static str, target: usize, offset: usize, len: usize) -> Result<*mut c_void> {
        let win = self.usable(call)?;
        let part = *self
            .part_lengths()
            .get(target)
            .ok_or_else(|| Error::RankOutOfRange { rank: target, size: self.members.len() })?;
        match offset.checked_add(len) {
            Some(end) if end <= part => Ok(win),
            _ => Err(Error::InvalidArgument(format!(
                "{call}: bytes {offset}..{} lie outside rank {target}'s window part of {part} bytes",
                offset.saturating_add(len)
            ))),
        }
    }

    /// An MPI epoch on `target` for an operation: a lazy shared lock unless one is held.
    fn access(&self, call: &'static str, target: usize, offset: usize, len: usize) -> Result<*mut c_void> {
        let win = self.range(call, target, offset, len)?;
        let taken = match self.locks[target].get() {
            Lock::None => Lock::Lazy,
            Lock::Deferred => Lock::Held(LockKind::Shared),
            Lock::Lazy | Lock::Held(_) => return Ok(win),
        };
        // SAFETY: `win` is this window's live C handle (checked by `usable`).
        check(unsafe { fastmp_rma_lock(win, target as c_int, 0) }, "MPI_Win_lock")?;
        self.locks[target].set(taken);
        Ok(win)
    }

    /// Completes this rank's operations towards `target` at the target: `MPI_Win_flush` inside a
    /// lock, the unlock of a lazy one.
    fn flush_one(&self, win: *mut c_void, target: usize) -> Result<()> {
        // SAFETY (all three calls): `win` is this window's live C handle.
        match self.locks[target].get() {
            Lock::None | Lock::Deferred => Ok(()),
            Lock::Lazy => {
                self.locks[target].set(Lock::None);
                check(unsafe { fastmp_rma_unlock(win, target as c_int) }, "MPI_Win_unlock")
            }
            Lock::Held(_) => check(unsafe { fastmp_rma_flush(win, target as c_int) }, "MPI_Win_flush"),
        }
    }

    /// Releases whatever lock is held on `target`.
    fn release(&self, win: *mut c_void, target: usize) -> Result<()> {
        if matches!(self.locks[target].replace(Lock::None), Lock::None | Lock::Deferred) {
            return Ok(());
        }
        // SAFETY: `win` is this window's live C handle.
        check(unsafe { fastmp_rma_unlock(win, target as c_int) }, "MPI_Win_unlock")
    }

    /// Releases every lock (also the local access's) before the window ends.
    fn release_all(&self, win: *mut c_void) -> Result<()> {
        self.end_local_access();
        (0..self.locks.len()).map(|t| self.release(win, t)).fold(Ok(()), Result::and)
    }

    fn done(&self, len: usize) -> Started {
        let source = self.members[self.me.get()] as usize;
        Started::Complete(Ok(RawStatus { source, tag: 0, bytes: len, cancelled: false }))
    }
}

fn element_code(element: Element) -> c_int {
    match element {
        Element::I8 => 0,
        Element::I16 => 1,
        Element::I32 => 2,
        Element::I64 => 3,
        Element::U8 => 4,
        Element::U16 => 5,
        Element::U32 => 6,
        Element::U64 => 7,
        Element::F32 => 8,
        Element::F64 => 9,
    }
}

fn op_code(op: AccumulateOp) -> c_int {
    match op {
        AccumulateOp::Replace => 0,
        AccumulateOp::NoOp => 1,
        AccumulateOp::Sum => 2,
        AccumulateOp::Prod => 3,
        AccumulateOp::Min => 4,
        AccumulateOp::Max => 5,
        AccumulateOp::Band => 6,
        AccumulateOp::Bor => 7,
        AccumulateOp::Bxor => 8,
        AccumulateOp::Land => 9,
        AccumulateOp::Lor => 10,
        AccumulateOp::Lxor => 11,
    }
}

/// Whether the MPI library is Open MPI before 5.0 (asked once per process).
fn open_mpi_before_5() -> bool {
    static BEFORE_5: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: a query of the initialised MPI library's version string.
    *BEFORE_5.get_or_init(|| matches!(unsafe { fastmp_rma_open_mpi_major() }, 1..=4))
}

/// `Err` for an operator the MPI library is known to apply wrongly: Open MPI 4's osc/rdma drops
/// MPI_LAND/MPI_LOR/MPI_LXOR accumulates of up to `osc_rdma_network_max_amo` (32) elements
/// silently (they take its network-atomics path, which has no logical operators).
fn check_op(call: &str, op: AccumulateOp) -> Result<()> {
    if matches!(op, AccumulateOp::Land | AccumulateOp::Lor | AccumulateOp::Lxor) && open_mpi_before_5() {
        return Err(Error::InvalidArgument(format!(
            "{call} with {op:?}: Open MPI before 5.0 silently drops logical accumulates (osc/rdma's atomic \
             path), so the mpi device refuses them; use Band/Bor/Bxor on 0/1 values"
        )));
    }
    Ok(())
}

/// The element's bytes: the low bytes of `value` (native endianness of the element).
fn element_bytes(value: u64, element: Element) -> [u8; 8] {
    let mut out = [0u8; 8];
    let size = element.size();
    let bytes = value.to_ne_bytes();
    if cfg!(target_endian = "little") {
        out[..size].copy_from_slice(&bytes[..size]);
    } else {
        out[..size].copy_from_slice(&bytes[8 - size..]);
    }
    out
}

/// The word whose low bytes are the element in `bytes`.
fn element_word(bytes: [u8; 8], element: Element) -> u64 {
    let size = element.size();
    let mut word = [0u8; 8];
    if cfg!(target_endian = "little") {
        word[..size].copy_from_slice(&bytes[..size]);
    } else {
        word[8 - size..].copy_from_slice(&bytes[..size]);
    }
    u64::from_ne_bytes(word)
}

impl RmaWindow for MpiWindow {
    fn connect(&self) -> Result<()> {
        if !self.win.get().is_null() || self.closed.get() {
            return Err(Error::RmaSync("connect: the window is connected or freed already".into()));
        }
        let n = c_int::try_from(self.members.len())
            .map_err(|_| Error::InvalidArgument("connect: too many members for MPI".into()))?;
        let mut lengths = vec![0u64; self.members.len()];
        let (mut me, mut win) = (0 as c_int, std::ptr::null_mut());
        // SAFETY: `members` and `lengths` hold `n` elements; `base..base + len` is valid for reads
        // and writes for the window's life (the `expose` contract), and MPI reaches it only
        // through the operations and locks of this window until `free` (or never stops, if the
        // window is leaked or abandoned: then the window layer leaks owned memory too).
        let code = unsafe {
            fastmp_rma_create(
                self.world,
                self.members.as_ptr(),
                n,
                self.tag,
                self.base.cast(),
                self.len,
                lengths.as_mut_ptr(),
                &mut me,
                &mut win,
            )
        };
        check(code, "MPI_Win_create")?;
        OPEN_WINDOWS.fetch_add(1, Ordering::Relaxed);
        self.win.set(win);
        self.me.set(me as usize);
        let lengths = lengths.into_iter().map(|l| l as usize).collect();
        let _ = self.lengths.set(lengths);
        Ok(())
    }

    fn part_lengths(&self) -> &[usize] {
        self.lengths.get().map_or(&[], Vec::as_slice)
    }

    fn with_part(&self, _target: usize, _f: &mut dyn FnMut(&Segment) -> Result<()>) -> Result<bool> {
        // Even this rank's own part is reached through MPI (its epochs guard it).
        Ok(false)
    }

    unsafe fn put(&self, target: usize, offset: usize, data: *const u8, len: usize) -> Result<Started> {
        let win = self.access("put", target, offset, len)?;
        // SAFETY: `data..data + len` is readable until this returns (caller contract), and the
        // C side completes the put locally before returning.
        check(unsafe { fastmp_rma_put(win, target as c_int, offset, data.cast(), len) }, "MPI_Put")?;
        Ok(self.done(len))
    }

    unsafe fn get(&self, target: usize, offset: usize, into: *mut u8, len: usize) -> Result<Started> {
        let fresh = self.locks[target].get() == Lock::None;
        let win = self.access("get", target, offset, len)?;
        // SAFETY: `into..into + len` is writable and untouched by others (caller contract); the
        // C side completes the get locally before returning.
        let got = check(unsafe { fastmp_rma_get(win, target as c_int, offset, into.cast(), len) }, "MPI_Get");
        // A completed get is no longer inside the target's part: a lazy lock taken for it alone
        // ends now, so the owner's local access does not wait for this rank's next flush.
        let released = if fresh { self.flush_one(win, target) } else { Ok(()) };
        got.and(released)?;
        Ok(self.done(len))
    }

    unsafe fn accumulate(
        &self,
        target: usize,
        offset: usize,
        data: *const u8,
        len: usize,
        element: Element,
        op: AccumulateOp,
    ) -> Result<Started> {
        // SAFETY: forwarded caller contract; no result buffer.
        unsafe { self.get_accumulate(target, offset, data, std::ptr::null_mut(), len, element, op) }
    }

    unsafe fn get_accumulate(
        &self,
        target: usize,
        offset: usize,
        data: *const u8,
        result: *mut u8,
        len: usize,
        element: Element,
        op: AccumulateOp,
    ) -> Result<Started> {
        let (call, mpi) =
            if result.is_null() { ("accumulate", "MPI_Accumulate") } else { ("get_accumulate", "MPI_Get_accumulate") };
        check_op(call, op)?;
        if !element.supports(op) || !len.is_multiple_of(element.size()) {
            return Err(Error::InvalidArgument(format!(
                "{call}: {op:?} on {len} bytes of {element:?} elements is not defined"
            )));
        }
        let win = self.access(call, target, offset, len)?;
        // SAFETY: `data` is readable (unless NoOp, when C never reads it) and `result` writable
        // for `len` bytes until this returns (caller contract); C completes the operation locally.
        let code = unsafe {
            fastmp_rma_accumulate(
                win,
                target as c_int,
                offset,
                data.cast(),
                result.cast(),
                len,
                element_code(element),
                op_code(op),
            )
        };
        check(code, mpi)?;
        Ok(self.done(len))
    }

    fn fetch_and_op(
        &self,
        target: usize,
        offset: usize,
        element: Element,
        op: AccumulateOp,
        operand: u64,
    ) -> Result<u64> {
        check_op("fetch_and_op", op)?;
        if !element.supports(op) {
            return Err(Error::InvalidArgument(format!("fetch_and_op: {op:?} is not defined on {element:?}")));
        }
        let win = self.access("fetch_and_op", target, offset, element.size())?;
        let operand = element_bytes(operand, element);
        let mut result = [0u8; 8];
        // SAFETY: both buffers hold 8 bytes, at least one element; C completes it locally.
        let code = unsafe {
            fastmp_rma_fetch_and_op(
                win,
                target as c_int,
                offset,
                element_code(element),
                op_code(op),
                operand.as_ptr().cast(),
                result.as_mut_ptr().cast(),
            )
        };
        check(code, "MPI_Fetch_and_op")?;
        Ok(element_word(result, element))
    }

    fn compare_and_swap(&self, target: usize, offset: usize, element: Element, expected: u64, new: u64) -> Result<u64> {
        let win = self.access("compare_and_swap", target, offset, element.size())?;
        if element.size() == 8 && target == self.me.get() && open_mpi_before_5() {
            // Open MPI before 5.0 segfaults in a 64-bit MPI_Compare_and_swap on the calling
            // process's own window (btl vader's emulated atomics have no endpoint for self). Its
            // remote ones run as hardware atomics in this process, so a hardware
            // compare-and-swap here is atomic with them.
            // SAFETY (both syncs): `win` is this window's live C handle.
            check(unsafe { fastmp_rma_sync(win) }, "MPI_Win_sync")?;
            let old = self.own.compare_and_swap(offset, element, expected, new)?;
            check(unsafe { fastmp_rma_sync(win) }, "MPI_Win_sync")?;
            return Ok(old);
        }
        let (expected, new) = (element_bytes(expected, element), element_bytes(new, element));
        let mut result = [0u8; 8];
        // SAFETY: the three buffers hold 8 bytes, at least one element; C completes it locally.
        let code = unsafe {
            fastmp_rma_compare_and_swap(
                win,
                target as c_int,
                offset,
                element_code(element),
                expected.as_ptr().cast(),
                new.as_ptr().cast(),
                result.as_mut_ptr().cast(),
            )
        };
        check(code, "MPI_Compare_and_swap")?;
        Ok(element_word(result, element))
    }

    fn lock(&self, target: usize, kind: LockKind) -> Result<()> {
        let win = self.range("lock", target, 0, 0)?;
        if let Lock::Held(_) | Lock::Deferred = self.locks[target].get() {
            return Err(Error::RmaSync(format!("lock({target}): rank {target} is already locked by this rank")));
        }
        // A lazy lock's operations complete first: MPI allows one lock per target.
        self.flush_one(win, target)?;
        if kind == LockKind::Shared {
            self.locks[target].set(Lock::Deferred);
            return Ok(());
        }
        let exclusive = c_int::from(kind == LockKind::Exclusive);
        // SAFETY: `win` is this window's live C handle.
        check(unsafe { fastmp_rma_lock(win, target as c_int, exclusive) }, "MPI_Win_lock")?;
        self.locks[target].set(Lock::Held(kind));
        Ok(())
    }

    fn unlock(&self, target: usize) -> Result<()> {
        let win = self.range("unlock", target, 0, 0)?;
        self.release(win, target)
    }

    fn flush(&self, target: Option<usize>) -> Result<()> {
        match target {
            Some(t) => {
                let win = self.range("flush", t, 0, 0)?;
                self.flush_one(win, t)
            }
            None => {
                let win = self.usable("flush")?;
                (0..self.locks.len()).map(|t| self.flush_one(win, t)).fold(Ok(()), Result::and)
            }
        }
    }

    fn begin_local_access(&self) -> Result<()> {
        let win = self.usable("local access")?;
        if self.local.get().is_some() {
            return Ok(());
        }
        let me = self.me.get();
        let held = self.locks[me].get();
        if held == Lock::Held(LockKind::Exclusive) {
            // Already exclusive: nothing else is inside the part.
            self.local.set(Some(held));
            // SAFETY: `win` is this window's live C handle.
            return check(unsafe { fastmp_rma_sync(win) }, "MPI_Win_sync");
        }
        // MPI allows one lock per target: this rank's own operations on its part complete and
        // its shared epoch there, if any, goes back to deferred (the next operation retakes it).
        self.release(win, me)?;
        // A shared epoch on itself (Held or Deferred) resumes deferred; a lazy lock is gone.
        let resume = if matches!(held, Lock::Deferred | Lock::Held(_)) { Lock::Deferred } else { Lock::None };
        self.local.set(Some(resume));
        // SAFETY: `win` is this window's live C handle. MPI_Win_lock on the calling process
        // blocks until the lock is granted.
        let locked = check(unsafe { fastmp_rma_lock(win, me as c_int, 1) }, "MPI_Win_lock");
        if locked.is_err() {
            self.locks[me].set(resume);
            self.local.set(None);
            return locked;
        }
        self.locks[me].set(Lock::Held(LockKind::Exclusive));
        // SAFETY: as above.
        check(unsafe { fastmp_rma_sync(win) }, "MPI_Win_sync")
    }

    fn end_local_access(&self) {
        let Some(resume) = self.local.take() else { return };
        let win = self.win.get();
        if win.is_null() || resume == Lock::Held(LockKind::Exclusive) {
            return;
        }
        let me = self.me.get();
        // SAFETY: `win` is this window's live C handle. Errors have nobody to go to here; the
        // unlock ends the exclusive epoch whatever it reports.
        let _ = unsafe { fastmp_rma_sync(win) };
        let _ = self.release(win, me);
        self.locks[me].set(resume);
    }

    fn free(&self) -> Result<()> {
        if self.closed.replace(true) {
            return Ok(());
        }
        let win = self.win.replace(std::ptr::null_mut());
        if win.is_null() {
            return Ok(());
        }
        let released = self.release_all(win);
        OPEN_WINDOWS.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: `win` is live, every member calls this after the closing barrier, and it is
        // never used again (the field is null now).
        let freed = check(unsafe { fastmp_rma_free(win) }, "MPI_Win_free");
        released.and(freed)
    }

    fn close(&self) -> Result<()> {
        if self.closed.replace(true) {
            return Ok(());
        }
        let win = self.win.get();
        if win.is_null() {
            // Never connected: MPI never saw the memory.
            return Ok(());
        }
        let released = self.release_all(win);
        released.and(Err(Error::RmaSync(
            "close: the mpi device cannot withdraw a window part without its peers (MPI_Win_free is \
             collective); the part stays exposed, and owned memory is kept"
                .into(),
        )))
    }
}
