//! Posted-receive board: the receives a rank has posted, published so that a sender of a large
//! message can claim one and copy straight into the receive buffer (receiver-first direct copy).
//!
//! Entries are allocated round-robin, so circular order from `next` is posting order and a sender
//! that claims the first matching entry in that order respects MPI's matching order. When the
//! round-robin position is still busy the receiver switches to private (unpublished) receives
//! until they drain — `overflow` tells senders to stay away meanwhile.
//!
//! Each entry's state word carries a generation, so a sender that read a stale posting cannot
//! claim a newer one (ABA).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

use crate::device::{MatchSpec, Source};

pub(crate) const ENTRIES: usize = 64;

const FREE: u64 = 0;
const POSTED: u64 = 1;
const CLAIMED: u64 = 2;
const DONE: u64 = 3;
const PHASE_BITS: u64 = 2;
const PHASE_MASK: u64 = (1 << PHASE_BITS) - 1;
const ANY: usize = usize::MAX;

#[derive(Default)]
#[repr(align(64))]
struct Entry {
    /// `generation << PHASE_BITS | phase`.
    state: AtomicU64,
    source: AtomicUsize,
    tag: AtomicI32,
    context: AtomicU32,
    buf: AtomicPtr<u8>,
    capacity: AtomicUsize,
    // Filled in by whoever completes the entry.
    got_source: AtomicUsize,
    got_tag: AtomicI32,
    got_bytes: AtomicUsize,
}

#[derive(Default)]
struct Control {
    /// Bit i set: entry i may be POSTED (maintained by the owner; may be stale-set).
    mask: AtomicU64,
    /// Next entry to allocate (mod ENTRIES): the oldest in circular order.
    next: AtomicU64,
    overflow: AtomicBool,
}

/// One rank's board. The owner posts, cancels and frees; senders claim and complete.
pub(crate) struct Board {
    entries: Box<[Entry]>,
    ctl: CachePadded<Control>,
}

/// A claimed entry: the claimer may write `capacity` bytes at `buf`, then must call `complete`.
pub(crate) struct Claim {
    pub index: usize,
    pub generation: u64,
    pub buf: *mut u8,
    pub capacity: usize,
}

/// Result a completed entry reports to its owner.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Completion {
    pub source: usize,
    pub tag: i32,
    pub bytes: usize,
}

impl Default for Board {
    fn default() -> Self {
        Board { entries: (0..ENTRIES).map(|_| Entry::default()).collect(), ctl: CachePadded::default() }
    }
}

impl Board {
    // ---- owner side (the rank whose receives these are) ----

    /// Publishes a receive; `None` if it must stay private (round-robin slot busy, or overflow).
    pub fn post(&self, spec: MatchSpec, buf: *mut u8, capacity: usize) -> Option<(usize, u64)> {
        if self.ctl.overflow.load(Ordering::Relaxed) {
            return None;
        }
        let next = self.ctl.next.load(Ordering::Relaxed);
        let index = (next as usize) % ENTRIES;
        let e = &self.entries[index];
        let state = e.state.load(Ordering::Acquire);
        if state & PHASE_MASK != FREE {
            self.ctl.overflow.store(true, Ordering::Relaxed);
            return None;
        }
        e.source.store(
            match spec.source {
                Source::Any => ANY,
                Source::Rank(r) => r,
            },
            Ordering::Relaxed,
        );
        e.tag.store(spec.tag, Ordering::Relaxed);
        e.context.store(spec.context, Ordering::Relaxed);
        e.buf.store(buf, Ordering::Relaxed);
        e.capacity.store(capacity, Ordering::Relaxed);
        let generation = (state >> PHASE_BITS) + 1;
        e.state.store(generation << PHASE_BITS | POSTED, Ordering::Release);
        self.ctl.mask.fetch_or(1 << index, Ordering::Release);
        self.ctl.next.store(next + 1, Ordering::Release);
        Some((index, generation))
    }

    /// Leaves overflow mode once no private receive is outstanding.
    pub fn end_overflow(&self) {
        self.ctl.overflow.store(false, Ordering::Relaxed);
    }

    /// Owner's view of its entry: `Some` once completed.
    pub fn poll(&self, index: usize, generation: u64) -> Option<Completion> {
        let e = &self.entries[index];
        if e.state.load(Ordering::Acquire) != generation << PHASE_BITS | DONE {
            return None;
        }
        Some(Completion {
            source: e.got_source.load(Ordering::Relaxed),
            tag: e.got_tag.load(Ordering::Relaxed),
            bytes: e.got_bytes.load(Ordering::Relaxed),
        })
    }

    /// Returns a completed or cancelled entry to the free pool.
    pub fn free(&self, index: usize, generation: u64) {
        self.ctl.mask.fetch_and(!(1 << index), Ordering::Relaxed);
        self.entries[index].state.store(generation << PHASE_BITS | FREE, Ordering::Release);
    }

    /// Withdraws a still-unclaimed receive. `false` if a claimer got it first (it will complete).
    pub fn cancel(&self, index: usize, generation: u64) -> bool {
        let e = &self.entries[index];
        if e.state
            .compare_exchange(
                generation << PHASE_BITS | POSTED,
                generation << PHASE_BITS | FREE,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            self.ctl.mask.fetch_and(!(1 << index), Ordering::Relaxed);
            true
        } else {
            false
        }
    }

    /// Re-opens an entry the owner claimed but could not fill (the message was cancelled).
    pub fn unclaim(&self, claim: &Claim) {
        self.entries[claim.index].state.store(claim.generation << PHASE_BITS | POSTED, Ordering::Release);
    }

    // ---- claimer side (any rank, including the owner) ----

    /// Sender: claims the oldest posted receive matching its message, unless the owner has
    /// private receives outstanding (then only the owner may match, to keep posting order).
    pub fn claim_remote(&self, context: u32, source: usize, tag: i32) -> Option<Claim> {
        if self.ctl.overflow.load(Ordering::Acquire) {
            return None;
        }
        self.claim_own(context, source, tag)
    }

    /// Owner: claims the oldest posted receive matching an incoming envelope (board entries are
    /// always older than private receives).
    pub fn claim_own(&self, context: u32, source: usize, tag: i32) -> Option<Claim> {
        let mask = self.ctl.mask.load(Ordering::Acquire);
        if mask == 0 {
            return None;
        }
        let start = (self.ctl.next.load(Ordering::Acquire) as usize) % ENTRIES;
        let mut rotated = mask.rotate_right(start as u32);
        while rotated != 0 {
            let offset = rotated.trailing_zeros() as usize;
            rotated &= rotated - 1;
            let index = (start + offset) % ENTRIES;
            let e = &self.entries[index];
            let state = e.state.load(Ordering::Acquire);
            if state & PHASE_MASK != POSTED {
                continue;
            }
            let want_source = e.source.load(Ordering::Relaxed);
            let want_tag = e.tag.load(Ordering::Relaxed);
            let matches = e.context.load(Ordering::Relaxed) == context
                && (want_source == ANY || want_source == source)
                && (want_tag == crate::device::ANY_TAG || want_tag == tag);
            if !matches {
                continue;
            }
            let buf = e.buf.load(Ordering::Relaxed);
            let capacity = e.capacity.load(Ordering::Relaxed);
            let claimed = (state & !PHASE_MASK) | CLAIMED;
            // The CAS on the full (generation, phase) word validates the fields read above.
            if e.state.compare_exchange(state, claimed, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return Some(Claim { index, generation: state >> PHASE_BITS, buf, capacity });
            }
        }
        None
    }

    /// Publishes the result of a claim; the owner sees it through `poll`.
    pub fn complete(&self, claim: &Claim, done: Completion) {
        let e = &self.entries[claim.index];
        e.got_source.store(done.source, Ordering::Relaxed);
        e.got_tag.store(done.tag, Ordering::Relaxed);
        e.got_bytes.store(done.bytes, Ordering::Relaxed);
        e.state.store(claim.generation << PHASE_BITS | DONE, Ordering::Release);
    }
}
