//! One-sided communication on the shm device: direct access.
//!
//! Every rank is a thread of this process, so an origin performs each operation itself, copying
//! once between its buffer and the target's part through the part's [`Segment`] (word atomics,
//! hardware read-modify-write for accumulates); the target takes no part. What the window layer
//! needs beyond the copy lives in a [`Part`], shared by all members through an `Arc`:
//! - a *gate*: a "held off" bit (the owner's local access) and a "closed" bit, plus one "inside"
//!   flag per origin, written only by that origin. An origin enters by raising its flag, an
//!   asymmetric barrier (`wait::light_barrier`: a compiler fence where membarrier is available),
//!   and a load of the bits; it leaves by lowering its flag: no read-modify-write on the hot path
//!   (they were a fifth of an 8-byte put). The owner sets a bit, runs the heavy side of the
//!   barrier (`membarrier`), and waits until every flag is down: either the origin saw the bit
//!   and backed off, or the owner sees its flag. So the owner's plain accesses and the memory's
//!   release never overlap an origin's copy;
//! - a passive-target *lock word* (shared count, or an exclusive bit with its holder);
//! - a count of ranks that may be parked waiting on either, so the common release path notifies
//!   nobody.
//!
//! Parts meet in the world's [`Registry`] under (window id, members): `expose` registers this
//! rank's part, `connect` (after the window layer's barrier) copies every member's `Arc<Part>`
//! into the handle, so an operation is a bounds check, two atomics and the copy: no lock, no
//! lookup, no allocation, no locked instruction. `close` withdraws the part; the registry forgets the window when its
//! last member closed.

use std::cell::{Cell, OnceCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_utils::CachePadded;

use super::{Liveness, ShmWorld};
use crate::device::lock_ignoring_poison;
use crate::device::one_sided::{AccumulateOp, Element, LockKind, OneSided, RmaWindow};
use crate::device::rma_memory::Segment;
use crate::device::wait::{Backoff, Pause, heavy_barrier, light_barrier};
use crate::device::{ContextId, RawStatus, Started};
use crate::error::{Error, Result};

/// Gate bits: local access, closed.
const HELD: u64 = 1 << 62;
const CLOSED: u64 = 1 << 63;

/// Lock word: shared holders (low 32 bits), or `EXCLUSIVE` with the holder's world rank above.
const EXCLUSIVE: u64 = 1 << 63;
const SHARED: u64 = u32::MAX as u64;

/// A window: its id and its members (world ranks in window order).
type WindowKey = (ContextId, Box<[usize]>);

/// Window parts by window, in member order.
#[derive(Default)]
pub(crate) struct Registry {
    windows: Mutex<HashMap<WindowKey, Vec<Option<Arc<Part>>>>>,
}

/// One member's part of a window, as every member sees it.
pub(crate) struct Part {
    segment: Segment,
    /// The owner's world rank.
    owner: usize,
    gate: CachePadded<AtomicU64>,
    /// Per origin (member index): it is inside the part. Each written only by its origin.
    inside: Box<[CachePadded<AtomicBool>]>,
    lock: CachePadded<AtomicU64>,
    /// Ranks that may be parked waiting for the gate to open or the lock to be released; the
    /// side that opens or releases notifies only when this is non-zero (`SeqCst` on both sides,
    /// so one of the two sees the other).
    sleepers: AtomicU32,
}

/// What an origin found at the gate.
enum Gate {
    Entered,
    HeldOff,
    Closed,
}

impl Part {
    #[inline]
    fn try_enter(&self, origin: usize) -> Gate {
        let flag = &self.inside[origin];
        flag.store(true, Ordering::Relaxed);
        // Pairs with the owner's `heavy_barrier` after it sets a bit: either we see the bit here,
        // or the owner sees our flag up and waits for it to go down.
        light_barrier();
        // Acquire: pairs with the owner's release of local access (its plain writes are
        // visible to our copy).
        let gate = self.gate.load(Ordering::Acquire);
        if gate & (HELD | CLOSED) == 0 {
            return Gate::Entered;
        }
        flag.store(false, Ordering::Release);
        if gate & CLOSED != 0 { Gate::Closed } else { Gate::HeldOff }
    }

    /// Leaves the part: the copy happens before the owner's acquire load that sees the flag down.
    #[inline]
    fn leave(&self, origin: usize) {
        self.inside[origin].store(false, Ordering::Release);
    }

    fn closed(&self) -> bool {
        self.gate.load(Ordering::Acquire) & CLOSED != 0
    }

    fn drained(&self) -> bool {
        self.inside.iter().all(|flag| !flag.load(Ordering::Acquire))
    }

    /// Notifies the ranks parked on this part, if any (after a `SeqCst` update they wait for).
    fn wake_sleepers(&self, world: &ShmWorld) {
        if self.sleepers.load(Ordering::SeqCst) != 0 {
            world.wake_all();
        }
    }
}

/// Leaves the gate on drop, so a part is never left counted as busy (even by a panic).
struct Inside<'a> {
    part: &'a Part,
    origin: usize,
}

impl Drop for Inside<'_> {
    #[inline]
    fn drop(&mut self) {
        self.part.leave(self.origin);
    }
}

/// This rank's handle of one shm window.
pub(crate) struct ShmWindow {
    world: Arc<ShmWorld>,
    /// This rank's world rank and its index in `members`.
    rank: usize,
    me: usize,
    key: WindowKey,
    own: Arc<Part>,
    /// Every member's part and length, resolved by `connect`.
    parts: OnceCell<Box<[Arc<Part>]>>,
    lengths: OnceCell<Box<[usize]>>,
    /// The passive-target lock this rank holds per member.
    held: OnceCell<Box<[Cell<Option<LockKind>>]>>,
    /// This rank holds local access to its own part (its own operations on it would wait for
    /// itself).
    local: Cell<bool>,
    closed: Cell<bool>,
}

impl ShmWorld {
    /// Registers `part` as member `me`'s part of the window `key` (replacing a closed part of
    /// an earlier window with the same id and members).
    fn register_part(&self, key: &WindowKey, me: usize, part: &Arc<Part>) -> Result<()> {
        let mut windows = lock_ignoring_poison(&self.windows.windows);
        let slots = windows.entry(key.clone()).or_insert_with(|| vec![None; key.1.len()]);
        if slots[me].as_ref().is_some_and(|p| !p.closed()) {
            return Err(Error::InvalidArgument(format!(
                "win expose: rank {} already exposes a live window with id {}",
                key.1[me], key.0
            )));
        }
        slots[me] = Some(Arc::clone(part));
        Ok(())
    }

    /// Every member's part of the window `key`, or the member that has none.
    fn resolve_parts(&self, key: &WindowKey) -> std::result::Result<Box<[Arc<Part>]>, usize> {
        let windows = lock_ignoring_poison(&self.windows.windows);
        let slots = windows.get(key).ok_or(0usize)?;
        slots.iter().enumerate().map(|(i, slot)| slot.clone().ok_or(i)).collect()
    }

    /// Forgets the window `key` once every member's part is closed. Closed parts stay until
    /// then, so a member that connects late still finds (and reports) a part closed early.
    fn forget_if_closed(&self, key: &WindowKey) {
        let mut windows = lock_ignoring_poison(&self.windows.windows);
        if windows.get(key).is_some_and(|slots| slots.iter().all(|p| p.as_ref().is_none_or(|p| p.closed()))) {
            windows.remove(key);
        }
    }

    /// Number of windows with a registered part (tests: nothing leaks).
    #[cfg(test)]
    fn live_windows(&self) -> usize {
        lock_ignoring_poison(&self.windows.windows).len()
    }
}

impl OneSided for super::ShmEndpoint {
    unsafe fn expose(
        &self,
        window: ContextId,
        members: &[usize],
        base: *mut u8,
        len: usize,
    ) -> Result<Box<dyn RmaWindow>> {
        let world = self.world();
        let rank = crate::device::Device::rank(self);
        let me = members.iter().position(|&m| m == rank).ok_or_else(|| {
            Error::InvalidArgument(format!("win expose: rank {rank} is not among the window's members {members:?}"))
        })?;
        if let Some(&bad) = members.iter().find(|&&m| m >= world.np) {
            return Err(Error::RankOutOfRange { rank: bad, size: world.np });
        }
        // SAFETY: the caller's contract (`OneSided::expose`): the memory stays valid and is
        // accessed only through this window's rules until `close` returns; `close` waits until
        // no origin is inside the part and bars later ones.
        let segment = unsafe { Segment::new(base, len) };
        let part = Arc::new(Part {
            segment,
            owner: rank,
            gate: CachePadded::new(AtomicU64::new(0)),
            inside: members.iter().map(|_| CachePadded::new(AtomicBool::new(false))).collect(),
            lock: CachePadded::new(AtomicU64::new(0)),
            sleepers: AtomicU32::new(0),
        });
        let key = (window, members.into());
        world.register_part(&key, me, &part)?;
        Ok(Box::new(ShmWindow {
            world: Arc::clone(world),
            rank,
            me,
            key,
            own: part,
            parts: OnceCell::new(),
            lengths: OnceCell::new(),
            held: OnceCell::new(),
            local: Cell::new(false),
            closed: Cell::new(false),
        }))
    }

    fn direct_access(&self, _members: &[usize]) -> bool {
        // Every shm rank is a thread of this process.
        true
    }
}

/// `Ok` status of an operation on `bytes` bytes of `target`'s part.
fn done(target: usize, bytes: usize) -> Result<Started> {
    Ok(Started::Complete(Ok(RawStatus { source: target, tag: 0, bytes, cancelled: false })))
}

impl ShmWindow {
    fn parts(&self, what: &str) -> Result<&[Arc<Part>]> {
        match self.parts.get() {
            Some(parts) => Ok(parts),
            None => Err(Error::RmaSync(format!("{what}: the window is not connected yet"))),
        }
    }

    /// `target`'s part, entered: no owner's local access or close can overlap until the guard
    /// drops. Waits while the owner holds local access.
    #[inline]
    fn enter(&self, what: &str, target: usize) -> Result<Inside<'_>> {
        let parts = self.parts(what)?;
        let Some(part) = parts.get(target) else {
            return Err(Error::InvalidArgument(format!(
                "{what}: target rank {target} is not in the window's group of {} ranks",
                parts.len()
            )));
        };
        match part.try_enter(self.me) {
            Gate::Entered => Ok(Inside { part, origin: self.me }),
            gate => self.enter_slow(what, target, part, gate),
        }
    }

    #[cold]
    fn enter_slow<'a>(&'a self, what: &str, target: usize, part: &'a Part, mut gate: Gate) -> Result<Inside<'a>> {
        loop {
            match gate {
                Gate::Entered => return Ok(Inside { part, origin: self.me }),
                Gate::Closed => return Err(self.part_gone(what, part)),
                Gate::HeldOff if target == self.me && self.local.get() => {
                    return Err(Error::RmaSync(format!(
                        "{what}: this rank targets its own part while it holds local access to it \
                         (a Window::local guard is alive)"
                    )));
                }
                Gate::HeldOff => {}
            }
            // Wait until the owner ends local access (or closes), then try again.
            self.wait_on(part, || {
                let gate = part.gate.load(Ordering::SeqCst);
                gate & HELD == 0 || gate & CLOSED != 0
            })?;
            gate = part.try_enter(self.me);
        }
    }

    /// The error for an operation on a part its owner withdrew.
    fn part_gone(&self, what: &str, part: &Part) -> Error {
        match self.world.liveness(part.owner) {
            Liveness::Failed => self
                .world
                .abort_error()
                .unwrap_or(Error::PeerFailed { rank: part.owner, cause: "failed while the window was open".into() }),
            // A collective free lets no origin reach a closed part, so the owner dropped its
            // window alone: on its way out of an error (the job is about to abort) or by
            // misuse. Either way the owner is to blame, so the job's record names it.
            _ => match self.world.abort_error() {
                Some(err) => err,
                None => Error::PeerFailed {
                    rank: part.owner,
                    cause: format!("{what}: rank {} freed its window part (dropped the window alone)", part.owner),
                },
            },
        }
    }

    /// Waits with the device's spin → yield → park policy until `ready`, failing if the job
    /// aborts. Whoever makes `ready` true and sees `part.sleepers` non-zero wakes every rank.
    /// `ready` may act when it succeeds (`lock` takes the lock in it), so the first `true` ends
    /// the wait, also when it comes from the parker's last check before sleeping.
    fn wait_on(&self, part: &Part, mut ready: impl FnMut() -> bool) -> Result<()> {
        let mut backoff = Backoff::new(self.world.policy);
        loop {
            if ready() {
                return Ok(());
            }
            if let Some(err) = self.world.abort_error() {
                return Err(err);
            }
            match backoff.next() {
                Pause::Spin => std::hint::spin_loop(),
                Pause::Yield => std::thread::yield_now(),
                Pause::Park => {
                    part.sleepers.fetch_add(1, Ordering::SeqCst);
                    let world = &self.world;
                    let mut done = false;
                    world.ranks[self.rank].parker.park(&mut || {
                        done = ready();
                        done || world.is_aborted()
                    });
                    part.sleepers.fetch_sub(1, Ordering::SeqCst);
                    if done {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Waits (without giving up on an abort: the memory's release depends on it) until no
    /// origin is inside this rank's own part, after a gate bit was set. Origins inside never
    /// block and do not notify on leaving, so this spins, then yields (never parks).
    fn drain_own(&self) {
        heavy_barrier();
        let mut backoff = Backoff::new(self.world.policy);
        while !self.own.drained() {
            match backoff.next() {
                Pause::Spin => std::hint::spin_loop(),
                Pause::Yield | Pause::Park => std::thread::yield_now(),
            }
        }
    }

    fn held(&self) -> &[Cell<Option<LockKind>>] {
        self.held.get().map_or(&[], |h| h)
    }
}

/// An origin buffer of `len` bytes as a slice (empty when `len` is 0, whatever the pointer).
///
/// # Safety
/// For `len > 0`, `data..data + len` is readable and unmodified for `'a`.
unsafe fn origin<'a>(data: *const u8, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(data, len) }
    }
}

/// A result buffer of `len` bytes as a slice (empty when `len` is 0).
///
/// # Safety
/// For `len > 0`, `into..into + len` is writable and otherwise untouched for `'a`.
unsafe fn result<'a>(into: *mut u8, len: usize) -> &'a mut [u8] {
    if len == 0 {
        &mut []
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(into, len) }
    }
}

impl RmaWindow for ShmWindow {
    fn connect(&self) -> Result<()> {
        if self.parts.get().is_some() {
            return Ok(());
        }
        let parts = self.world.resolve_parts(&self.key).map_err(|missing| {
            self.world.abort_error().unwrap_or_else(|| {
                Error::RmaSync(format!(
                    "win connect: rank {} has not exposed its part of window {}",
                    self.key.1[missing], self.key.0
                ))
            })
        })?;
        let _ = self.lengths.set(parts.iter().map(|p| p.segment.len()).collect());
        let _ = self.held.set(parts.iter().map(|_| Cell::new(None)).collect());
        let _ = self.parts.set(parts);
        Ok(())
    }

    fn part_lengths(&self) -> &[usize] {
        self.lengths.get().map_or(&[], |l| l)
    }

    fn with_part(&self, target: usize, f: &mut dyn FnMut(&Segment) -> Result<()>) -> Result<bool> {
        let inside = self.enter("direct access", target)?;
        f(&inside.part.segment)?;
        Ok(true)
    }

    unsafe fn put(&self, target: usize, offset: usize, data: *const u8, len: usize) -> Result<Started> {
        let inside = self.enter("put", target)?;
        // SAFETY: `RmaWindow::put`'s contract; the copy completes before we return.
        inside.part.segment.write(offset, unsafe { origin(data, len) })?;
        done(target, len)
    }

    unsafe fn get(&self, target: usize, offset: usize, into: *mut u8, len: usize) -> Result<Started> {
        let inside = self.enter("get", target)?;
        // SAFETY: `RmaWindow::get`'s contract; the copy completes before we return.
        inside.part.segment.read(offset, unsafe { result(into, len) })?;
        done(target, len)
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
        let inside = self.enter("accumulate", target)?;
        // SAFETY: as for `put`. With `NoOp` the data is not read (and may be dangling).
        let data = if op == AccumulateOp::NoOp { &[] } else { unsafe { origin(data, len) } };
        inside.part.segment.accumulate(offset, len, data, None, element, op)?;
        done(target, len)
    }

    unsafe fn get_accumulate(
        &self,
        target: usize,
        offset: usize,
        data: *const u8,
        into: *mut u8,
        len: usize,
        element: Element,
        op: AccumulateOp,
    ) -> Result<Started> {
        let inside = self.enter("get_accumulate", target)?;
        // SAFETY: as for `put` (data, not read for `NoOp`) and `get` (result).
        let data = if op == AccumulateOp::NoOp { &[] } else { unsafe { origin(data, len) } };
        // SAFETY: as above.
        let previous = unsafe { result(into, len) };
        inside.part.segment.accumulate(offset, len, data, Some(previous), element, op)?;
        done(target, len)
    }

    fn fetch_and_op(
        &self,
        target: usize,
        offset: usize,
        element: Element,
        op: AccumulateOp,
        operand: u64,
    ) -> Result<u64> {
        let inside = self.enter("fetch_and_op", target)?;
        inside.part.segment.fetch_and_op(offset, element, op, operand)
    }

    fn compare_and_swap(&self, target: usize, offset: usize, element: Element, expected: u64, new: u64) -> Result<u64> {
        let inside = self.enter("compare_and_swap", target)?;
        inside.part.segment.compare_and_swap(offset, element, expected, new)
    }

    fn lock(&self, target: usize, kind: LockKind) -> Result<()> {
        let parts = self.parts("lock")?;
        let (Some(part), Some(held)) = (parts.get(target), self.held().get(target)) else {
            return Err(Error::InvalidArgument(format!(
                "lock: target rank {target} is not in the window's group of {} ranks",
                parts.len()
            )));
        };
        if let Some(had) = held.get() {
            return Err(Error::RmaSync(format!("lock: this rank already holds a {had:?} lock on rank {target}")));
        }
        let want = match kind {
            LockKind::Shared => 1,
            LockKind::Exclusive => EXCLUSIVE | ((self.rank as u64) << 32),
        };
        let mut failure = None;
        let try_lock = || {
            let word = part.lock.load(Ordering::Relaxed);
            let free = match kind {
                LockKind::Shared => word & EXCLUSIVE == 0 && word & SHARED < SHARED,
                LockKind::Exclusive => word == 0,
            };
            // Acquire: the previous holder's operations (and release) happen before ours.
            free && part.lock.compare_exchange(word, word + want, Ordering::Acquire, Ordering::Relaxed).is_ok()
        };
        self.wait_on(part, || {
            if part.closed() {
                failure = Some(self.part_gone("lock", part));
                return true;
            }
            if try_lock() {
                return true;
            }
            // An exclusive holder that exited (its window leaked) never releases the lock.
            let word = part.lock.load(Ordering::Relaxed);
            if word & EXCLUSIVE != 0 {
                let holder = ((word & !EXCLUSIVE) >> 32) as usize;
                if holder != self.rank && self.world.liveness(holder) == Liveness::Exited {
                    failure = Some(Error::PeerExited { rank: holder });
                    return true;
                }
            }
            false
        })?;
        if let Some(err) = failure {
            return Err(err);
        }
        held.set(Some(kind));
        Ok(())
    }

    fn unlock(&self, target: usize) -> Result<()> {
        let parts = self.parts("unlock")?;
        let (Some(part), Some(held)) = (parts.get(target), self.held().get(target)) else {
            return Err(Error::InvalidArgument(format!(
                "unlock: target rank {target} is not in the window's group of {} ranks",
                parts.len()
            )));
        };
        let Some(kind) = held.take() else {
            return Err(Error::RmaSync(format!("unlock: this rank holds no lock on rank {target}")));
        };
        // Release (SeqCst, for `sleepers`): our operations happen before the next holder's.
        match kind {
            LockKind::Shared => part.lock.fetch_sub(1, Ordering::SeqCst),
            LockKind::Exclusive => part.lock.swap(0, Ordering::SeqCst),
        };
        part.wake_sleepers(&self.world);
        Ok(())
    }

    fn flush(&self, target: Option<usize>) -> Result<()> {
        if let Some(t) = target
            && t >= self.part_lengths().len()
        {
            return Err(Error::InvalidArgument(format!(
                "flush: target rank {t} is not in the window's group of {} ranks",
                self.part_lengths().len()
            )));
        }
        // Every operation completed in its call; the fence makes them happen before whatever
        // this rank does next for anyone who synchronises with that (a flag it puts and a peer
        // reads then flushes, a message, an unlock). Not `SeqCst`: every operation ends with the
        // gate's RMW, already a full barrier on x86, where a `SeqCst` fence would add an
        // `mfence` (a fifth of an 8-byte put + flush) and no ordering; elsewhere both are one
        // `dmb ish`.
        std::sync::atomic::fence(Ordering::AcqRel);
        Ok(())
    }

    fn begin_local_access(&self) -> Result<()> {
        if self.local.replace(true) {
            return Ok(());
        }
        // From here on origins back off; those inside finish their copy and leave.
        self.own.gate.fetch_or(HELD, Ordering::SeqCst);
        self.drain_own();
        Ok(())
    }

    fn end_local_access(&self) {
        if !self.local.replace(false) {
            return;
        }
        // Release: the owner's plain accesses happen before the next origin's (Acquire) entry.
        self.own.gate.fetch_and(!HELD, Ordering::SeqCst);
        self.own.wake_sleepers(&self.world);
    }

    fn close(&self) -> Result<()> {
        if self.closed.replace(true) {
            return Ok(());
        }
        if std::thread::panicking() {
            // The window layer closes alone while its rank unwinds: peers must learn that the
            // rank failed (and fail their waits) rather than see a part freed in due order.
            self.world.mark_panicking(self.rank);
        }
        self.own.gate.fetch_or(CLOSED, Ordering::SeqCst);
        // Origins waiting for local access to end, or for our lock, see the closed part now.
        self.own.wake_sleepers(&self.world);
        self.drain_own();
        self.local.set(false);
        self.world.forget_if_closed(&self.key);
        Ok(())
    }
}

impl Drop for ShmWindow {
    fn drop(&mut self) {
        // A handle dropped without `close` (the window layer always closes first) must not leave
        // its part reachable: the memory may go right after.
        let _ = self.close();
    }
}

#[cfg(test)]
mod tests;
