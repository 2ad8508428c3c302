//! Sender-side state of a send that the receiver completes: rendezvous (the receiver copies out of
//! the sender's buffer) and synchronous eager sends (the receiver acknowledges the match).
//!
//! The record is shared through an `Arc`: the message in flight holds one reference, so the
//! record outlives whichever side finishes first, including a sender rank that has exited.

use std::cell::UnsafeCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

/// The receiver may claim the data.
pub(crate) const PENDING: u32 = 0;
/// Someone (receiver copying, or sender detaching) holds the data exclusively.
pub(crate) const CLAIMED: u32 = 1;
/// Matched and (for rendezvous) copied; the sender's request is complete.
pub(crate) const DONE: u32 = 2;
/// Cancelled by the sender before it matched; the receiver drops the message.
pub(crate) const CANCELLED: u32 = 3;

pub(crate) struct SendRecord {
    state: AtomicU32,
    /// Where the receiver copies from: the user's buffer, or `detached` after a detach.
    data: AtomicPtr<u8>,
    /// Owned copy of the data once the sender's buffer had to be given back (see `detach`).
    detached: UnsafeCell<Option<Box<[u8]>>>,
}

// SAFETY: `detached` is written only by the sender while it holds the CLAIMED state (or has
// exclusive `&mut` access through `Arc::get_mut`), and read by the receiver only through `data`
// while holding CLAIMED; `state` transitions order those accesses (AcqRel CAS / Release stores).
unsafe impl Sync for SendRecord {}
// SAFETY: plain owned data.
unsafe impl Send for SendRecord {}

impl SendRecord {
    pub fn new() -> Arc<Self> {
        Arc::new(SendRecord {
            state: AtomicU32::new(PENDING),
            data: AtomicPtr::new(std::ptr::null_mut()),
            detached: UnsafeCell::new(None),
        })
    }

    /// Re-arms a record nobody else references for a new send of `data`.
    pub fn reset(this: &mut Arc<Self>, data: *const u8) -> bool {
        let Some(rec) = Arc::get_mut(this) else { return false };
        *rec.state.get_mut() = PENDING;
        *rec.data.get_mut() = data as *mut u8;
        *rec.detached.get_mut() = None;
        true
    }

    pub fn state(&self) -> u32 {
        self.state.load(Ordering::Acquire)
    }

    /// Receiver: takes exclusive use of the data pointer; `None` if the sender cancelled.
    ///
    /// CLAIMED here can only mean the sender is detaching (copying its data into the record),
    /// which is short and ends in PENDING again, so we wait it out.
    pub fn claim(&self) -> Option<*const u8> {
        loop {
            match self.state.compare_exchange(PENDING, CLAIMED, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => return Some(self.data.load(Ordering::Relaxed)),
                Err(CLAIMED) => std::thread::yield_now(),
                Err(_) => return None,
            }
        }
    }

    /// Marks the transfer finished (from CLAIMED, or from PENDING for a synchronous ack).
    pub fn complete(&self) {
        self.state.store(DONE, Ordering::Release);
    }

    /// Synchronous eager ack: PENDING → DONE. `false` if the sender cancelled first.
    pub fn acknowledge(&self) -> bool {
        self.state.compare_exchange(PENDING, DONE, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Sender: withdraw an unmatched send. `true` if the cancel won.
    pub fn cancel(&self) -> bool {
        self.state.compare_exchange(PENDING, CANCELLED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Sender: copies the `len` pending bytes into the record so the user's buffer can be given
    /// back. Returns `false` if the transfer is past PENDING (claimed, done, or cancelled), in which
    /// case the caller waits for `DONE` instead.
    ///
    /// # Safety
    /// Sender thread only; the record's data pointer must still be valid for `len` bytes.
    pub unsafe fn detach(&self, len: usize) -> bool {
        if self.state.compare_exchange(PENDING, CLAIMED, Ordering::Acquire, Ordering::Acquire).is_err() {
            return false;
        }
        let src = self.data.load(Ordering::Relaxed);
        // SAFETY: caller guarantees `src` is valid for `len` bytes; CLAIMED gives us exclusive use
        // of `detached` (the receiver only reads through `data` while it holds CLAIMED).
        let copy: Box<[u8]> = unsafe { std::slice::from_raw_parts(src, len) }.into();
        let slot = unsafe { &mut *self.detached.get() };
        let ptr = slot.insert(copy).as_ptr();
        self.data.store(ptr as *mut u8, Ordering::Relaxed);
        self.state.store(PENDING, Ordering::Release);
        true
    }

    /// Turns a clone into the `usize` carried by a ring message.
    pub fn into_message(this: Arc<Self>) -> usize {
        Arc::into_raw(this) as usize
    }

    /// Takes back the reference carried by a ring message.
    ///
    /// # Safety
    /// `raw` must come from `into_message` and be taken back exactly once.
    pub unsafe fn from_message(raw: usize) -> Arc<Self> {
        // SAFETY: per the contract.
        unsafe { Arc::from_raw(raw as *const SendRecord) }
    }
}
