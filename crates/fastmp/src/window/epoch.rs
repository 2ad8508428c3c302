//! The origin-side epoch state machine of one window: which synchronisation is open on this rank
//! and which targets its operations may reach. Pure bookkeeping (no communication), so every rule
//! is unit-tested here; `sync.rs` runs the messages and collectives around these transitions.
//!
//! Rules (MPI-3 §11.5, checked so that misuse is an `Err`, never a hang or UB):
//! - A fence without NOSUCCEED makes the window *fence-ready*; the first operation turns that
//!   into an open fence epoch. As in MPICH, a ready (still unused) fence may be followed by
//!   `post`/`start`/`lock`/`lock_all` (the fence then opened nothing); an open fence epoch may not.
//! - `fence` is refused while a PSCW or passive-target epoch is open.
//! - `start`/`complete` (access), `post`/`wait` (exposure) and locks nest as MPI allows: access and
//!   exposure epochs may coexist; locks exclude `start` and `lock_all`, and a target is locked once.

use std::cell::{Cell, RefCell};

use crate::error::{Error, Result};
use crate::window::{Assert, LockKind};

/// Per-target flags (`Epochs::targets`).
const STARTED: u8 = 1;
const LOCKED: u8 = 2;
const EXCLUSIVE: u8 = 4;
/// Locked with NOCHECK: the device lock was not taken, unlock only flushes.
const NOCHECK: u8 = 8;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fence {
    /// No fence epoch (never fenced, or the last fence said NOSUCCEED, or another epoch took over).
    Off,
    /// A fence opened an epoch no operation has used yet.
    Ready,
    /// Operations ran in the fence epoch.
    Active,
}

/// How a lock was taken (what `unlock` must undo at the device).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Held {
    /// The device holds a lock of this kind.
    Device,
    /// NOCHECK: no device lock; unlock is a flush.
    Asserted,
}

/// This rank's epochs on one window.
pub(crate) struct Epochs {
    fence: Cell<Fence>,
    /// `STARTED`/`LOCKED`/`EXCLUSIVE`/`NOCHECK` bits per target rank.
    targets: Box<[Cell<u8>]>,
    /// Ranks of the open `start` (empty with `started` false).
    access: RefCell<Vec<usize>>,
    started: Cell<bool>,
    /// Targets currently locked by `lock`.
    locks: Cell<usize>,
    /// `lock_all` is open (Some), and how it was taken.
    lock_all: Cell<Option<Held>>,
    /// Ranks of the open `post` whose `complete` has not arrived yet.
    exposure: RefCell<Vec<usize>>,
    posted: Cell<bool>,
}

fn sync_err(message: String) -> Error {
    Error::RmaSync(message)
}

impl Epochs {
    pub(crate) fn new(size: usize) -> Epochs {
        Epochs {
            fence: Cell::new(Fence::Off),
            targets: (0..size).map(|_| Cell::new(0)).collect(),
            access: RefCell::new(Vec::new()),
            started: Cell::new(false),
            locks: Cell::new(0),
            lock_all: Cell::new(None),
            exposure: RefCell::new(Vec::new()),
            posted: Cell::new(false),
        }
    }

    /// Checks that an operation `call` may reach `target` now (`target < size`, checked by the
    /// caller) and records that the fence epoch, if that is what covers it, is in use.
    #[inline]
    pub(crate) fn access(&self, call: &str, target: usize) -> Result<()> {
        if self.targets[target].get() & (STARTED | LOCKED) != 0 || self.lock_all.get().is_some() {
            return Ok(());
        }
        match self.fence.get() {
            Fence::Active => Ok(()),
            Fence::Ready => {
                self.fence.set(Fence::Active);
                Ok(())
            }
            Fence::Off => Err(sync_err(format!(
                "{call} to rank {target} outside an access epoch: call fence, start, lock or lock_all first"
            ))),
        }
    }

    /// Whether a passive-target epoch covers `target` (flush and flush_local need one).
    pub(crate) fn passive(&self, call: &str, target: usize) -> Result<()> {
        if self.targets[target].get() & LOCKED != 0 || self.lock_all.get().is_some() {
            Ok(())
        } else {
            Err(sync_err(format!("{call}({target}): rank {target} is not locked (call lock or lock_all first)")))
        }
    }

    /// Whether some passive-target epoch is open (flush_all needs one).
    pub(crate) fn any_passive(&self, call: &str) -> Result<()> {
        if self.locks.get() > 0 || self.lock_all.get().is_some() {
            Ok(())
        } else {
            Err(sync_err(format!("{call} outside a passive-target epoch (call lock or lock_all first)")))
        }
    }

    /// Why this rank may not take part in a fence with `assert` now, if it may not.
    pub(crate) fn fence_refusal(&self, assert: Assert) -> Option<String> {
        if self.started.get() {
            Some("fence while an access epoch of start is open (call complete first)".into())
        } else if self.posted.get() {
            Some("fence while an exposure epoch of post is open (call wait first)".into())
        } else if self.locks.get() > 0 || self.lock_all.get().is_some() {
            Some("fence while a passive-target epoch is open (call unlock or unlock_all first)".into())
        } else if assert.contains(Assert::NOPRECEDE) && self.fence.get() == Fence::Active {
            Some("fence(NOPRECEDE) after operations in the fence epoch it would close".into())
        } else {
            None
        }
    }

    /// Records a completed fence.
    pub(crate) fn fenced(&self, assert: Assert) {
        self.fence.set(if assert.contains(Assert::NOSUCCEED) { Fence::Off } else { Fence::Ready });
    }

    /// A PSCW or passive epoch is about to open: refused inside an open fence epoch; a ready
    /// (unused) one is dropped.
    fn leave_fence(&self, call: &str) -> Result<()> {
        match self.fence.get() {
            Fence::Active => {
                Err(sync_err(format!("{call} inside an open fence epoch (end it with fence(Assert::NOSUCCEED) first)")))
            }
            _ => {
                self.fence.set(Fence::Off);
                Ok(())
            }
        }
    }

    /// Opens an access epoch to `targets` (window ranks, checked by the caller).
    pub(crate) fn start(&self, targets: impl Iterator<Item = usize>) -> Result<()> {
        if self.started.get() {
            return Err(sync_err("start while an access epoch of start is open (call complete first)".into()));
        }
        if self.locks.get() > 0 || self.lock_all.get().is_some() {
            return Err(sync_err(
                "start while a passive-target epoch is open (call unlock or unlock_all first)".into(),
            ));
        }
        self.leave_fence("start")?;
        let mut access = self.access.borrow_mut();
        access.clear();
        for t in targets {
            if self.targets[t].get() & STARTED != 0 {
                // A duplicate is impossible in a Group; stay defensive anyway.
                continue;
            }
            self.targets[t].set(self.targets[t].get() | STARTED);
            access.push(t);
        }
        self.started.set(true);
        Ok(())
    }

    /// The targets of the open `start`, for `complete` (which then calls [`Epochs::completed`]).
    pub(crate) fn access_group(&self) -> Result<std::cell::Ref<'_, Vec<usize>>> {
        if !self.started.get() {
            return Err(sync_err("complete without a matching start".into()));
        }
        Ok(self.access.borrow())
    }

    /// Closes the access epoch of `start`.
    pub(crate) fn completed(&self) {
        for &t in self.access.borrow().iter() {
            self.targets[t].set(self.targets[t].get() & !STARTED);
        }
        self.access.borrow_mut().clear();
        self.started.set(false);
    }

    /// Opens an exposure epoch to `origins` (window ranks, checked by the caller).
    pub(crate) fn post(&self, origins: impl Iterator<Item = usize>) -> Result<()> {
        if self.posted.get() {
            return Err(sync_err("post while an exposure epoch of post is open (call wait or test first)".into()));
        }
        self.leave_fence("post")?;
        let mut exposure = self.exposure.borrow_mut();
        exposure.clear();
        exposure.extend(origins);
        self.posted.set(true);
        Ok(())
    }

    /// Ranks whose `complete` the open exposure epoch still waits for.
    pub(crate) fn awaiting(&self, call: &str) -> Result<usize> {
        if !self.posted.get() {
            return Err(sync_err(format!("{call} without a matching post")));
        }
        Ok(self.exposure.borrow().len())
    }

    /// `origin`'s `complete` arrived; `Ok(true)` once every origin's has (the epoch is closed).
    pub(crate) fn complete_from(&self, call: &str, origin: usize) -> Result<bool> {
        let mut exposure = self.exposure.borrow_mut();
        let Some(at) = exposure.iter().position(|&o| o == origin) else {
            return Err(sync_err(format!(
                "{call}: rank {origin} completed an access epoch to this rank, but it is not in the group this \
                 rank posted to, or completed twice (its start group and this rank's post group disagree)"
            )));
        };
        exposure.swap_remove(at);
        if exposure.is_empty() {
            self.posted.set(false);
        }
        Ok(exposure.is_empty())
    }

    /// Closes an exposure epoch whose group was empty (nothing to wait for).
    pub(crate) fn close_exposure_if_done(&self) -> bool {
        let done = self.exposure.borrow().is_empty();
        if done {
            self.posted.set(false);
        }
        done
    }

    /// Takes a lock on `target`.
    pub(crate) fn lock(&self, target: usize, kind: LockKind, held: Held) -> Result<()> {
        let flags = self.targets[target].get();
        if flags & LOCKED != 0 {
            return Err(sync_err(format!("lock({target}): rank {target} is already locked by this rank")));
        }
        if self.lock_all.get().is_some() {
            return Err(sync_err(format!("lock({target}) while lock_all is open (call unlock_all first)")));
        }
        if self.started.get() {
            return Err(sync_err(format!(
                "lock({target}) while an access epoch of start is open (call complete first)"
            )));
        }
        self.leave_fence("lock")?;
        let mut bits = flags | LOCKED;
        if kind == LockKind::Exclusive {
            bits |= EXCLUSIVE;
        }
        if held == Held::Asserted {
            bits |= NOCHECK;
        }
        self.targets[target].set(bits);
        self.locks.set(self.locks.get() + 1);
        Ok(())
    }

    /// How `target` was locked, for `unlock` (which then calls [`Epochs::unlocked`]).
    pub(crate) fn lock_of(&self, target: usize) -> Result<Held> {
        let flags = self.targets[target].get();
        if flags & LOCKED == 0 {
            return Err(sync_err(format!("unlock({target}) without a matching lock({target})")));
        }
        Ok(if flags & NOCHECK != 0 { Held::Asserted } else { Held::Device })
    }

    pub(crate) fn unlocked(&self, target: usize) {
        let flags = self.targets[target].get();
        self.targets[target].set(flags & !(LOCKED | EXCLUSIVE | NOCHECK));
        self.locks.set(self.locks.get() - 1);
    }

    /// Targets locked by `lock` (for an abandoning close).
    pub(crate) fn locked_targets(&self) -> impl Iterator<Item = (usize, Held)> + '_ {
        self.targets.iter().enumerate().filter_map(|(t, f)| {
            let f = f.get();
            (f & LOCKED != 0).then_some((t, if f & NOCHECK != 0 { Held::Asserted } else { Held::Device }))
        })
    }

    pub(crate) fn lock_all(&self, held: Held) -> Result<()> {
        if self.lock_all.get().is_some() {
            return Err(sync_err("lock_all while lock_all is already open".into()));
        }
        if self.locks.get() > 0 {
            return Err(sync_err("lock_all while this rank holds a lock (call unlock first)".into()));
        }
        if self.started.get() {
            return Err(sync_err("lock_all while an access epoch of start is open (call complete first)".into()));
        }
        self.leave_fence("lock_all")?;
        self.lock_all.set(Some(held));
        Ok(())
    }

    /// How `lock_all` was taken, for `unlock_all` (which then calls [`Epochs::unlocked_all`]).
    pub(crate) fn lock_all_held(&self) -> Result<Held> {
        self.lock_all.get().ok_or_else(|| sync_err("unlock_all without a matching lock_all".into()))
    }

    pub(crate) fn unlocked_all(&self) {
        self.lock_all.set(None);
    }

    /// `Err` naming the epoch still open, for `free`.
    pub(crate) fn idle(&self, call: &str) -> Result<()> {
        let open = if self.started.get() {
            "an access epoch of start (call complete)"
        } else if self.posted.get() {
            "an exposure epoch of post (call wait)"
        } else if self.locks.get() > 0 {
            "a lock (call unlock)"
        } else if self.lock_all.get().is_some() {
            "lock_all (call unlock_all)"
        } else if self.fence.get() == Fence::Active {
            "a fence epoch with operations (call fence(Assert::NOSUCCEED))"
        } else {
            return Ok(());
        };
        Err(sync_err(format!("{call} while this rank has {open} open")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sync_message(result: Result<impl std::fmt::Debug>) -> String {
        match result {
            Err(Error::RmaSync(m)) => m,
            other => panic!("expected an RmaSync error, got {other:?}"),
        }
    }

    #[test]
    fn operations_need_an_epoch_covering_their_target() {
        let e = Epochs::new(3);
        let m = sync_message(e.access("put", 1));
        assert!(m.contains("put to rank 1 outside an access epoch"), "{m}");
        e.fenced(Assert::NONE);
        e.access("put", 1).unwrap();
        e.fenced(Assert::NOSUCCEED);
        assert!(e.access("get", 2).is_err());
        e.start([2].into_iter()).unwrap();
        e.access("get", 2).unwrap();
        assert!(e.access("get", 1).is_err(), "rank 1 is not in the start group");
        e.access_group().unwrap();
        e.completed();
        assert!(e.access("get", 2).is_err());
        e.lock(0, LockKind::Shared, Held::Device).unwrap();
        e.access("accumulate", 0).unwrap();
        assert!(e.access("accumulate", 1).is_err());
        e.lock_of(0).unwrap();
        e.unlocked(0);
        assert!(e.access("accumulate", 0).is_err());
        e.lock_all(Held::Device).unwrap();
        for t in 0..3 {
            e.access("put", t).unwrap();
        }
        e.unlocked_all();
        assert!(e.access("put", 0).is_err());
    }

    #[test]
    fn unpaired_and_repeated_calls_are_errors() {
        let e = Epochs::new(2);
        assert!(sync_message(e.lock_of(1)).contains("unlock(1) without a matching lock(1)"));
        assert!(sync_message(e.lock_all_held()).contains("unlock_all without"));
        assert!(sync_message(e.access_group()).contains("complete without a matching start"));
        assert!(sync_message(e.awaiting("wait")).contains("wait without a matching post"));
        e.lock(1, LockKind::Exclusive, Held::Device).unwrap();
        assert!(sync_message(e.lock(1, LockKind::Shared, Held::Device)).contains("already locked"));
        assert!(sync_message(e.lock_all(Held::Device)).contains("holds a lock"));
        assert!(sync_message(e.start([0].into_iter())).contains("passive-target epoch is open"));
        e.unlocked(1);
        e.lock_all(Held::Asserted).unwrap();
        assert!(sync_message(e.lock(0, LockKind::Shared, Held::Device)).contains("while lock_all"));
        assert!(sync_message(e.lock_all(Held::Device)).contains("already open"));
        assert_eq!(e.lock_all_held().unwrap(), Held::Asserted);
        e.unlocked_all();
        e.start([0].into_iter()).unwrap();
        assert!(sync_message(e.start([1].into_iter())).contains("start while an access epoch"));
        e.post([1].into_iter()).unwrap();
        assert!(sync_message(e.post([1].into_iter())).contains("post while an exposure epoch"));
    }

    #[test]
    fn fence_is_refused_inside_other_epochs() {
        let e = Epochs::new(2);
        assert!(e.fence_refusal(Assert::NONE).is_none());
        e.start([1].into_iter()).unwrap();
        assert!(e.fence_refusal(Assert::NONE).unwrap().contains("start"));
        e.completed();
        e.post([1].into_iter()).unwrap();
        assert!(e.fence_refusal(Assert::NONE).unwrap().contains("post"));
        assert!(e.complete_from("wait", 1).unwrap());
        e.lock(0, LockKind::Shared, Held::Device).unwrap();
        assert!(e.fence_refusal(Assert::NONE).unwrap().contains("passive"));
        e.unlocked(0);
        e.fenced(Assert::NONE);
        e.access("put", 1).unwrap();
        assert!(e.fence_refusal(Assert::NOPRECEDE).unwrap().contains("NOPRECEDE"));
        assert!(e.fence_refusal(Assert::NONE).is_none());
    }

    #[test]
    fn an_unused_fence_gives_way_but_an_open_one_does_not() {
        let e = Epochs::new(2);
        e.fenced(Assert::NONE);
        e.lock(1, LockKind::Shared, Held::Device).unwrap();
        e.unlocked(1);
        assert!(e.access("put", 1).is_err(), "the lock ended the ready fence epoch");
        e.fenced(Assert::NONE);
        e.access("put", 1).unwrap();
        let m = sync_message(e.lock(1, LockKind::Shared, Held::Device));
        assert!(m.contains("inside an open fence epoch"), "{m}");
        assert!(sync_message(e.post([0].into_iter())).contains("inside an open fence epoch"));
        assert!(sync_message(e.idle("free")).contains("fence epoch"));
        e.fenced(Assert::NOSUCCEED);
        e.idle("free").unwrap();
    }

    #[test]
    fn completes_must_come_from_the_posted_group_once_each() {
        let e = Epochs::new(4);
        e.post([1, 3].into_iter()).unwrap();
        assert_eq!(e.awaiting("wait").unwrap(), 2);
        let m = sync_message(e.complete_from("wait", 2));
        assert!(m.contains("rank 2 completed an access epoch"), "{m}");
        assert!(!e.complete_from("wait", 3).unwrap());
        assert!(e.complete_from("wait", 3).is_err(), "twice");
        assert!(e.complete_from("wait", 1).unwrap());
        assert!(e.awaiting("wait").is_err(), "the epoch is closed");
        e.post(std::iter::empty()).unwrap();
        assert!(e.close_exposure_if_done());
        e.idle("free").unwrap();
    }

    #[test]
    fn free_names_the_open_epoch() {
        let e = Epochs::new(2);
        e.lock(1, LockKind::Exclusive, Held::Asserted).unwrap();
        assert!(sync_message(e.idle("free")).contains("a lock"));
        assert_eq!(e.locked_targets().collect::<Vec<_>>(), [(1, Held::Asserted)]);
        e.unlocked(1);
        e.idle("free").unwrap();
    }
}
