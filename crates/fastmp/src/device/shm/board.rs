//! Posted-receive board: the receives a rank has posted, published so that a sender of a large
//! message can claim one and copy straight into the receive buffer (receiver-first direct copy).
//!
//! Every posting gets a sequence number (`next`, the post count), and a claimer takes the matching
//! entry with the lowest one, which is MPI's matching order. A remote claimer only considers
//! entries posted before it started looking (sequence below the `next` it read first): an entry
//! it skips that way was posted concurrently with its send, so the sender falls back to the ring,
//! where the owner matches in order. Entries are allocated round-robin; when the round-robin
//! position is still busy the owner switches to private (unpublished) receives until they drain,
//! and `overflow` tells senders to stay away meanwhile.
//!
//! Each entry's state word carries a generation, so a sender that read a stale posting cannot
//! claim a newer one (ABA).

use crossbeam_utils::CachePadded;

use crate::device::{MatchSpec, Source};
use crate::sync::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Entries per board: one bit each in the 64-bit `mask`.
#[cfg(not(loom))]
pub(crate) const ENTRIES: usize = 64;
/// Entries per board: few under loom, so that its models reach the round-robin wrap-around.
#[cfg(loom)]
pub(crate) const ENTRIES: usize = 4;
// `claim_own` rotates the whole 64-bit mask: entry `i` lands at offset `(i - start) mod 64`, which
// maps back to `i` and keeps circular order as long as ENTRIES divides 64.
const _: () = assert!(ENTRIES <= 64 && 64 % ENTRIES == 0);

const FREE: u64 = 0;
const POSTED: u64 = 1;
/// Claimed by a sender (remote or the owner's own send), which will fill and complete it.
const CLAIMED: u64 = 2;
const DONE: u64 = 3;
/// Claimed by the owner while it matches a message from its ring; may go back to POSTED if that
/// message turns out to be cancelled, so senders must not skip past it (see `claim`).
const OWNER_CLAIMED: u64 = 4;
const PHASE_BITS: u64 = 3;
const PHASE_MASK: u64 = (1 << PHASE_BITS) - 1;
const ANY: usize = usize::MAX;

#[derive(Default)]
#[repr(align(64))]
struct Entry {
    /// `generation << PHASE_BITS | phase`.
    state: AtomicU64,
    /// Posting sequence number of the current posting.
    seq: AtomicU64,
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
    /// Number of postings so far: the next posting's sequence number; `next % ENTRIES` is the
    /// entry it will use.
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
        e.seq.store(next, Ordering::Relaxed);
        let generation = (state >> PHASE_BITS) + 1;
        e.state.store(generation << PHASE_BITS | POSTED, Ordering::Release);
        self.set_mask_bit(index, true);
        self.ctl.next.store(next + 1, Ordering::Release);
        Some((index, generation))
    }

    /// Only the owner writes the mask, so a plain load/store pair (no locked RMW) suffices.
    fn set_mask_bit(&self, index: usize, set: bool) {
        let mask = self.ctl.mask.load(Ordering::Relaxed);
        let mask = if set { mask | 1 << index } else { mask & !(1 << index) };
        self.ctl.mask.store(mask, Ordering::Release);
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
        self.set_mask_bit(index, false);
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
            self.set_mask_bit(index, false);
            true
        } else {
            false
        }
    }

    /// Re-opens an entry the owner claimed (`claim_own`) but could not fill (the message was
    /// cancelled).
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
        self.claim(context, source, tag, CLAIMED)
    }

    /// Owner: claims the oldest posted receive matching a message it took from its ring.
    /// Board entries are always older than the owner's private receives.
    pub fn claim_own(&self, context: u32, source: usize, tag: i32) -> Option<Claim> {
        self.claim(context, source, tag, OWNER_CLAIMED)
    }

    /// Claims the oldest posted receive matching an incoming envelope among those posted before
    /// this call, leaving it in phase `as_phase`.
    ///
    /// Live postings have sequence numbers in `[bound - ENTRIES, bound)`: posting `n` uses entry
    /// `n % ENTRIES`, and it only happens if that entry is free. So circular order from entry
    /// `bound % ENTRIES` is posting order, and the first match in that order is the oldest.
    ///
    /// A sender that meets a matching entry the owner holds gives up (`None`: it falls back to the
    /// ring, where the owner matches in order): the owner may hand the entry back, and taking a
    /// newer receive meanwhile would break posting order.
    fn claim(&self, context: u32, source: usize, tag: i32, as_phase: u64) -> Option<Claim> {
        // Read the posting count first: every posting below it has its state and mask bit
        // published (the Release store of `next` comes last in `post`). Postings at or above it
        // are concurrent with this claim and skipped.
        let bound = self.ctl.next.load(Ordering::Acquire);
        let mask = self.ctl.mask.load(Ordering::Acquire);
        let start = (bound % ENTRIES as u64) as u32;
        let mut rotated = mask.rotate_right(start);
        while rotated != 0 {
            let offset = rotated.trailing_zeros();
            rotated &= rotated - 1;
            let index = ((start + offset) as usize) % ENTRIES;
            let e = &self.entries[index];
            let state = e.state.load(Ordering::Acquire);
            let phase = state & PHASE_MASK;
            if (phase != POSTED && phase != OWNER_CLAIMED) || e.seq.load(Ordering::Relaxed) >= bound {
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
            if phase == OWNER_CLAIMED {
                return None;
            }
            let buf = e.buf.load(Ordering::Relaxed);
            let capacity = e.capacity.load(Ordering::Relaxed);
            // The CAS on the full (generation, phase) word validates the fields read above.
            let claimed = (state & !PHASE_MASK) | as_phase;
            match e.state.compare_exchange(state, claimed, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(Claim { index, generation: state >> PHASE_BITS, buf, capacity }),
                // The owner took it meanwhile and may hand it back: same rule as above.
                Err(now) if now == (state & !PHASE_MASK) | OWNER_CLAIMED => return None,
                // Cancelled or claimed by another sender: later entries are newer.
                Err(_) => {}
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

#[cfg(all(test, not(loom)))]
mod tests {
    //! The board's lock-free protocol on the real code (also run under Miri, see
    //! `scripts/miri.sh`): posting order, claim/complete/poll/free, cancel and unclaim, the
    //! generation (ABA) check, overflow, and two-thread claim-vs-cancel races.

    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::*;
    use crate::device::{ANY_TAG, ContextId};

    const CTX: ContextId = 5;

    /// Sets its flag when dropped, also while unwinding: a thread's peer never waits forever on a
    /// thread that panicked.
    struct SetOnDrop<'a>(&'a AtomicBool);

    impl Drop for SetOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }

    fn spec(source: Source, tag: i32) -> MatchSpec {
        MatchSpec { context: CTX, source, tag }
    }

    #[test]
    fn post_claim_complete_poll_free() {
        let board = Board::default();
        let mut buf = [0u8; 16];
        let (index, generation) = board.post(spec(Source::Rank(2), 9), buf.as_mut_ptr(), buf.len()).expect("posted");
        assert_eq!((index, generation), (0, 1));
        assert!(board.poll(index, generation).is_none(), "not completed yet");
        // Mismatches in context, source or tag do not claim.
        assert!(board.claim_remote(CTX + 1, 2, 9).is_none());
        assert!(board.claim_remote(CTX, 3, 9).is_none());
        assert!(board.claim_remote(CTX, 2, 8).is_none());
        let claim = board.claim_remote(CTX, 2, 9).expect("matching claim");
        assert_eq!((claim.index, claim.generation, claim.capacity), (0, 1, 16));
        assert_eq!(claim.buf, buf.as_mut_ptr());
        // A claimed entry can be neither claimed again nor cancelled.
        assert!(board.claim_remote(CTX, 2, 9).is_none());
        assert!(!board.cancel(index, generation));
        board.complete(&claim, Completion { source: 2, tag: 9, bytes: 11 });
        let done = board.poll(index, generation).expect("completed");
        assert_eq!((done.source, done.tag, done.bytes), (2, 9, 11));
        board.free(index, generation);
        assert!(board.poll(index, generation).is_none(), "freed entries report nothing");
        assert!(board.claim_remote(CTX, 2, 9).is_none(), "freed entries cannot be claimed");
        // Round robin: the next post takes the next entry.
        let (i2, g2) = board.post(spec(Source::Any, ANY_TAG), buf.as_mut_ptr(), 4).expect("posted");
        assert_eq!((i2, g2), (1, 1));
        let c = board.claim_own(CTX, 7, 123).expect("wildcards match anything in the context");
        assert_eq!((c.index, c.capacity), (1, 4));
        assert!(board.claim_own(CTX + 1, 7, 123).is_none());
    }

    #[test]
    fn claims_follow_posting_order_across_wraparound() {
        let board = Board::default();
        let mut buf = [0u8; 8];
        let p = buf.as_mut_ptr();
        // Fill all entries: tags 0..ENTRIES.
        let posted: Vec<(usize, u64)> =
            (0..ENTRIES).map(|t| board.post(spec(Source::Rank(1), t as i32), p, 8).expect("posted")).collect();
        for (t, &(i, g)) in posted.iter().enumerate() {
            assert_eq!((i, g), (t, 1));
        }
        // Full: the round-robin entry is busy, so the next post stays private and sets overflow.
        assert!(board.post(spec(Source::Rank(1), 0), p, 8).is_none());
        assert!(board.claim_remote(CTX, 1, 10).is_none(), "senders stay away during overflow");
        let own = board.claim_own(CTX, 1, 10).expect("the owner still matches board entries");
        assert_eq!(own.index, 10);
        board.unclaim(&own);
        assert!(board.post(spec(Source::Rank(1), 0), p, 8).is_none(), "still overflowing");
        board.end_overflow();
        // Withdraw the four oldest, then post two wildcard receives: they land in entries 0 and 1
        // (generation 2) and are the *newest* in circular order.
        for &(i, g) in &posted[..4] {
            assert!(board.cancel(i, g));
            assert!(!board.cancel(i, g), "cancel twice");
        }
        assert_eq!(board.post(spec(Source::Any, ANY_TAG), p, 8), Some((0, 2)));
        assert_eq!(board.post(spec(Source::Rank(1), ANY_TAG), p, 8), Some((1, 2)));
        // Tag 5 (entry 5) is older than the wildcards in entries 0 and 1.
        let c = board.claim_remote(CTX, 1, 5).expect("tag 5");
        assert_eq!((c.index, c.generation), (5, 1));
        // Tag 2 was cancelled: the oldest match is now the wildcard in entry 0, then entry 1.
        let c0 = board.claim_remote(CTX, 1, 2).expect("wildcard");
        assert_eq!((c0.index, c0.generation), (0, 2));
        let c1 = board.claim_remote(CTX, 1, 2).expect("second wildcard");
        assert_eq!((c1.index, c1.generation), (1, 2));
        assert!(board.claim_remote(CTX, 1, 2).is_none());
        // Source 3 matches only the ANY_SOURCE entry, which is taken.
        assert!(board.claim_remote(CTX, 3, 63).is_none());
        // The old generation of entry 0 is gone for good.
        assert!(board.poll(0, 1).is_none());
        assert!(!board.cancel(0, 1));
        board.complete(&c0, Completion { source: 1, tag: 2, bytes: 0 });
        assert!(board.poll(0, 1).is_none(), "stale generation never sees the new completion");
        assert!(board.poll(0, 2).is_some());
    }

    /// A claimer that read an entry's state before the owner cancelled and re-posted it must not
    /// be able to claim the new posting with the old state (ABA): emulated here by running the
    /// claimer's CAS with a stale state word.
    #[test]
    fn generation_defeats_aba() {
        let board = Board::default();
        let mut buf = [0u8; 8];
        let p = buf.as_mut_ptr();
        let (i, g) = board.post(spec(Source::Rank(1), 1), p, 8).expect("posted");
        let stale = board.entries[i].state.load(Ordering::Acquire);
        assert!(board.cancel(i, g));
        // Cycle the round robin back to entry `i` and re-post it with different fields.
        for _ in 1..ENTRIES {
            let (j, h) = board.post(spec(Source::Rank(1), 99), p, 8).expect("posted");
            assert!(board.cancel(j, h));
        }
        let (i2, g2) = board.post(spec(Source::Rank(2), 2), p, 8).expect("re-posted");
        assert_eq!((i2, g2), (i, g + 1));
        let stale_claim = (stale & !PHASE_MASK) | CLAIMED;
        assert!(
            board.entries[i].state.compare_exchange(stale, stale_claim, Ordering::AcqRel, Ordering::Acquire).is_err(),
            "a stale state word must not claim the new posting"
        );
        // The new posting is claimable only with its own fields.
        assert!(board.claim_remote(CTX, 1, 1).is_none());
        let c = board.claim_remote(CTX, 2, 2).expect("new posting");
        assert_eq!((c.index, c.generation), (i, g + 1));
        // Unclaim re-opens exactly that generation.
        board.unclaim(&c);
        let c = board.claim_own(CTX, 2, 2).expect("re-opened");
        assert_eq!((c.index, c.generation), (i, g + 1));
        board.complete(&c, Completion { source: 2, tag: 2, bytes: 8 });
        assert!(board.poll(i, g).is_none());
        assert_eq!(board.poll(i, g + 1).map(|d| d.bytes), Some(8));
        board.free(i, g + 1);
    }

    /// Owner posts a receive and races a cancel against a sender thread that claims and fills it.
    /// Exactly one side wins each round; a cancelled receive's buffer is never written, a claimed
    /// one is completed with the sender's data.
    #[test]
    fn two_threads_claim_races_cancel() {
        let rounds: usize = if cfg!(miri) { 24 } else { 20_000 };
        let board = Board::default();
        let stop = AtomicBool::new(false);
        let claims = AtomicUsize::new(0);
        let wrong_tag = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Acquire) {
                    // Only tag 1 is claimed; the owner also posts tag 2 receives that must never
                    // be handed to this claimer, whatever the interleaving (ABA / stale fields).
                    if let Some(c) = board.claim_remote(CTX, 1, 1) {
                        // SAFETY: a claim grants exclusive write access to `capacity` bytes.
                        let dst = unsafe { std::slice::from_raw_parts_mut(c.buf, c.capacity) };
                        if dst[0] != 1 {
                            wrong_tag.store(true, Ordering::Relaxed);
                        }
                        dst.fill(0xC1);
                        board.complete(&c, Completion { source: 1, tag: 1, bytes: c.capacity });
                        claims.fetch_add(1, Ordering::Relaxed);
                    } else {
                        std::thread::yield_now();
                    }
                }
            });
            s.spawn(|| {
                let _stop = SetOnDrop(&stop);
                let mut won = [0usize; 2];
                for round in 0..rounds {
                    let tag = if round % 3 == 2 { 2 } else { 1 };
                    let mut buf = vec![0u8; 16];
                    buf[0] = tag as u8;
                    let Some((i, g)) = board.post(spec(Source::Rank(1), tag), buf.as_mut_ptr(), buf.len()) else {
                        panic!("round {round}: the board cannot be full, every entry is freed");
                    };
                    for _ in 0..(round % 4) {
                        std::thread::yield_now();
                    }
                    if board.cancel(i, g) {
                        won[0] += 1;
                        assert!(buf[1..].iter().all(|&b| b == 0), "cancelled receive was written");
                    } else {
                        assert_eq!(tag, 1, "a tag-2 receive was claimed");
                        let done = loop {
                            if let Some(d) = board.poll(i, g) {
                                break d;
                            }
                            std::thread::yield_now();
                        };
                        assert_eq!((done.source, done.tag, done.bytes), (1, 1, 16));
                        assert!(buf.iter().all(|&b| b == 0xC1), "claimed receive not filled");
                        board.free(i, g);
                        won[1] += 1;
                    }
                }
                assert_eq!(won[0] + won[1], rounds);
                won
            });
        });
        assert!(claims.load(Ordering::Relaxed) <= rounds);
        assert!(!wrong_tag.load(Ordering::Relaxed), "claimed a receive posted with another tag");
    }

    /// Several posted receives at once; a sender thread claims them while the owner keeps
    /// posting and reaping (the round robin wraps several times). Returns the claims that were not
    /// the oldest posted receive at the time, as (expected sequence, claimed sequence).
    fn windowed_claims(total: usize) -> Vec<(usize, usize)> {
        const WINDOW: usize = 5;
        let board = Board::default();
        let mut out_of_order = Vec::new();
        let mut claimed_twice = Vec::new();
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            // The claimer records problems instead of panicking, so the owner never waits for a
            // completion that cannot come.
            s.spawn(|| {
                let mut claimed = vec![false; total];
                let mut oldest = 0usize;
                while !done.load(Ordering::Acquire) {
                    let Some(c) = board.claim_remote(CTX, 0, 4) else {
                        std::thread::yield_now();
                        continue;
                    };
                    // SAFETY: exclusive access to the claimed buffer.
                    let dst = unsafe { std::slice::from_raw_parts_mut(c.buf, c.capacity) };
                    let seq = u64::from_le_bytes(dst[..8].try_into().unwrap()) as usize;
                    if claimed[seq] {
                        claimed_twice.push(seq);
                    }
                    claimed[seq] = true;
                    if seq != oldest {
                        out_of_order.push((oldest, seq));
                    }
                    while oldest < total && claimed[oldest] {
                        oldest += 1;
                    }
                    dst[8..].copy_from_slice(&(!seq as u64).to_le_bytes());
                    board.complete(&c, Completion { source: 0, tag: 4, bytes: 16 });
                }
            });
            s.spawn(|| {
                let _done = SetOnDrop(&done);
                // One allocation for all receive buffers, accessed only through `base` (moving
                // per-receive boxes around would invalidate the pointers handed out).
                let mut storage = vec![[0u8; 16]; total];
                let base = storage.as_mut_ptr();
                let buf = |seq: usize| {
                    // SAFETY: `seq < total`; each buffer is touched by one side at a time, as the
                    // board protocol hands it over.
                    unsafe { &mut *base.add(seq) }
                };
                let mut live: std::collections::VecDeque<(usize, usize, u64)> = Default::default();
                let mut next = 0usize;
                let mut reaped = 0usize;
                while reaped < total {
                    while next < total && live.len() < WINDOW {
                        buf(next)[..8].copy_from_slice(&(next as u64).to_le_bytes());
                        let ptr = buf(next).as_mut_ptr();
                        let (i, g) = board.post(spec(Source::Any, ANY_TAG), ptr, 16).expect("posted");
                        live.push_back((next, i, g));
                        next += 1;
                    }
                    // Reap whichever completed (claims may come out of order, see below).
                    let before = live.len();
                    live.retain(|&(seq, i, g)| {
                        if board.poll(i, g).is_none() {
                            return true;
                        }
                        board.free(i, g);
                        assert_eq!(u64::from_le_bytes(buf(seq)[8..].try_into().unwrap()), !(seq as u64));
                        false
                    });
                    reaped += before - live.len();
                    if live.len() == before {
                        std::thread::yield_now();
                    }
                }
                drop(storage);
            });
        });
        assert!(claimed_twice.is_empty(), "receives claimed twice: {claimed_twice:?}");
        out_of_order
    }

    /// Data integrity of concurrent post / claim / complete / poll / free with several receives
    /// outstanding.
    #[test]
    fn two_threads_windowed_claims() {
        windowed_claims(if cfg!(miri) { 80 } else { 20_000 });
    }

    /// MPI order: a sender must claim the *oldest* matching posted receive, also while the owner
    /// keeps posting (regression: a claimer once read a new mask bit with an old `next` and took
    /// the newest receive first).
    #[test]
    fn two_threads_claims_in_posting_order() {
        let bad = windowed_claims(if cfg!(miri) { 200 } else { 200_000 });
        assert!(
            bad.is_empty(),
            "{} claims out of posting order, first (expected, claimed): {:?}",
            bad.len(),
            &bad[..bad.len().min(5)]
        );
    }

    /// Single-threaded random post / cancel / claim / complete+free sequences against a model of
    /// the board: every claim takes the oldest matching posting, across many wrap-arounds of the
    /// round robin and of the rotated mask scan. Independent of ENTRIES (loom builds use 4).
    #[test]
    fn claims_match_a_reference_model() {
        #[derive(Clone, Copy, PartialEq)]
        enum Phase {
            Posted,
            Claimed,
        }
        // (sequence, index, generation, tag, phase), oldest first.
        let mut live: Vec<(u64, usize, u64, i32, Phase)> = Vec::new();
        let board = Board::default();
        let mut buf = [0u8; 4];
        let p = buf.as_mut_ptr();
        let mut next_seq = 0u64;
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut rand = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let ops = if cfg!(miri) { 500 } else { 20_000 };
        for _ in 0..ops {
            match rand(4) {
                0 => {
                    let tag = if rand(4) == 0 { ANY_TAG } else { rand(3) as i32 };
                    let busy = live.iter().any(|&(_, i, ..)| i == next_seq as usize % ENTRIES);
                    match board.post(spec(Source::Rank(1), tag), p, 4) {
                        Some((i, g)) => {
                            assert!(!busy, "posted into a busy entry");
                            assert_eq!(i, next_seq as usize % ENTRIES);
                            live.push((next_seq, i, g, tag, Phase::Posted));
                            next_seq += 1;
                        }
                        None => {
                            assert!(busy, "refused a free entry");
                            assert!(board.claim_remote(CTX, 1, 0).is_none(), "overflow keeps senders away");
                            board.end_overflow();
                        }
                    }
                }
                1 if !live.is_empty() => {
                    let k = rand(live.len() as u64) as usize;
                    let (_, i, g, _, phase) = live[k];
                    assert_eq!(board.cancel(i, g), phase == Phase::Posted);
                    if phase == Phase::Posted {
                        live.remove(k);
                    }
                }
                2 => {
                    let tag = rand(3) as i32;
                    let want =
                        live.iter().position(|&(.., t, phase)| phase == Phase::Posted && (t == ANY_TAG || t == tag));
                    let got = board.claim_remote(CTX, 1, tag);
                    match (want, got) {
                        (None, None) => {}
                        (Some(k), Some(c)) => {
                            assert_eq!((c.index, c.generation), (live[k].1, live[k].2), "not the oldest match");
                            live[k].4 = Phase::Claimed;
                        }
                        (want, got) => {
                            panic!("model {:?} vs board {:?}", want.map(|k| live[k].1), got.map(|c| c.index))
                        }
                    }
                }
                _ => {
                    if let Some(k) = live.iter().position(|&(.., phase)| phase == Phase::Claimed) {
                        let (_, i, g, tag, _) = live.remove(k);
                        let claim = Claim { index: i, generation: g, buf: p, capacity: 4 };
                        board.complete(&claim, Completion { source: 1, tag, bytes: 4 });
                        assert_eq!(board.poll(i, g).map(|d| d.tag), Some(tag));
                        board.free(i, g);
                    }
                }
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! Loom models of the real board (ENTRIES = 4 under loom): the owner posting, cancelling,
    //! polling and freeing against a remote claimer, under every interleaving. Receive buffers
    //! are loom cells, so loom also checks that a buffer is written by one side at a time.
    //! Run with `scripts/loom.sh`.

    use loom::sync::Arc as LoomArc;

    use super::*;
    use crate::device::ContextId;
    use crate::sync::UnsafeCell;

    const CTX: ContextId = 5;

    /// The receive buffers of one model; receive `id` posts `buf(id)` with capacity `id + 1`, so
    /// a claim tells which receive it got.
    struct Buffers(Vec<UnsafeCell<u8>>);

    impl Buffers {
        fn new(n: usize) -> Self {
            Buffers((0..n).map(|_| UnsafeCell::new(0)).collect())
        }

        fn ptr(&self, id: usize) -> *mut u8 {
            self.0[id].with_mut(|p| p)
        }

        /// Claimer side: fill the claimed receive's buffer, returning the receive's id.
        fn fill(&self, claim: &Claim, value: u8) -> usize {
            let id = claim.capacity - 1;
            assert_eq!(claim.buf, self.0[id].with(|p| p.cast_mut()), "buffer and capacity of one posting");
            // SAFETY: a claim grants exclusive write access to the buffer.
            self.0[id].with_mut(|p| unsafe { *p = value });
            id
        }

        fn read(&self, id: usize) -> u8 {
            // SAFETY: the owner reads a buffer it got back (cancelled, or completed and polled).
            self.0[id].with(|p| unsafe { *p })
        }
    }

    /// Posts receive `id` for messages from rank 1 (or any rank) with `tag` in context `CTX`.
    fn post(board: &Board, bufs: &Buffers, id: usize, tag: i32) -> Option<(usize, u64)> {
        post_from(board, bufs, id, Source::Rank(1), tag)
    }

    fn post_from(board: &Board, bufs: &Buffers, id: usize, source: Source, tag: i32) -> Option<(usize, u64)> {
        board.post(MatchSpec { context: CTX, source, tag }, bufs.ptr(id), id + 1)
    }

    /// The claimer takes the oldest matching receive among those posted before it started, while
    /// the owner cancels the oldest one and posts two more that wrap around the round robin
    /// (re-using entries 0 and 1 with a new generation):
    /// - it gets A if its claim beat the cancel, else B; never a cancelled receive, never C or D
    ///   (newer than B, which stays posted), whatever `next` it read (so the mask scan starts at
    ///   any entry);
    /// - cancel and claim of A have exactly one winner; a cancelled buffer is never written.
    #[test]
    fn claim_takes_the_oldest_while_owner_cancels_and_posts() {
        const A: usize = 0;
        const B: usize = 1;
        const C: usize = 2;
        const D: usize = 3;
        const FILLER: usize = 4;
        loom::model(|| {
            let board = LoomArc::new(Board::default());
            let bufs = LoomArc::new(Buffers::new(5));
            // Sequences 0 and 1 (entries 0, 1) come and go: A and B get entries 2 and 3.
            for _ in 0..2 {
                let (i, g) = post(&board, &bufs, FILLER, 1).expect("free entry");
                assert!(board.cancel(i, g));
            }
            let (a_index, a_gen) = post(&board, &bufs, A, 1).expect("free entry");
            let _b = post(&board, &bufs, B, crate::device::ANY_TAG).expect("free entry");
            assert_eq!(a_index, 2);
            let claimer = {
                let (board, bufs) = (LoomArc::clone(&board), LoomArc::clone(&bufs));
                loom::thread::spawn(move || {
                    let claim = board.claim_remote(CTX, 1, 1)?;
                    let id = bufs.fill(&claim, 0xC1);
                    board.complete(&claim, Completion { source: 1, tag: 1, bytes: id + 1 });
                    Some(id)
                })
            };
            let cancelled = board.cancel(a_index, a_gen);
            if cancelled {
                // The buffer is the owner's again.
                assert_eq!(bufs.read(A), 0, "cancelled receive was written");
            }
            // Sequences 4 and 5: entries 0 and 1, generation 2; both match the claimer's message.
            assert_eq!(post(&board, &bufs, C, 1).map(|(i, _)| i), Some(0));
            assert_eq!(post(&board, &bufs, D, 1).map(|(i, _)| i), Some(1));
            let got = claimer.join().unwrap();
            assert_eq!(got, Some(if cancelled { B } else { A }), "claimed receive (A=0, B=1, C=2, D=3)");
        });
    }

    /// Completion handshake: the owner polls until the claimer's `complete`, then sees the
    /// claimer's fields and buffer write; after `free` the round robin moves on and a second
    /// claim (concurrent with the re-post and its cancel) never sees the freed posting again.
    #[test]
    fn complete_poll_free_handshake() {
        const R: usize = 0;
        const S: usize = 1;
        loom::model(|| {
            let board = LoomArc::new(Board::default());
            let bufs = LoomArc::new(Buffers::new(2));
            let (r_index, r_gen) = post(&board, &bufs, R, 7).expect("free entry");
            let claimer = {
                let (board, bufs) = (LoomArc::clone(&board), LoomArc::clone(&bufs));
                loom::thread::spawn(move || {
                    let first = board.claim_remote(CTX, 1, 7).expect("R was posted before the claimer started");
                    assert_eq!(bufs.fill(&first, 0xA5), R);
                    board.complete(&first, Completion { source: 1, tag: 7, bytes: 11 });
                    // R is done (then freed): a second claim gets S or nothing.
                    let second = board.claim_remote(CTX, 1, 7)?;
                    let id = bufs.fill(&second, 0x5A);
                    board.complete(&second, Completion { source: 1, tag: 7, bytes: 22 });
                    Some(id)
                })
            };
            let done = loop {
                if let Some(done) = board.poll(r_index, r_gen) {
                    break done;
                }
                loom::thread::yield_now();
            };
            assert_eq!((done.source, done.tag, done.bytes), (1, 7, 11), "completion fields");
            assert_eq!(bufs.read(R), 0xA5, "the claimer's write is visible after poll");
            board.free(r_index, r_gen);
            assert!(board.poll(r_index, r_gen).is_none(), "freed");
            let (s_index, s_gen) = post(&board, &bufs, S, 7).expect("free entry");
            assert_eq!(s_index, 1, "round robin");
            let s_claimed = !board.cancel(s_index, s_gen);
            if s_claimed {
                let done = loop {
                    if let Some(done) = board.poll(s_index, s_gen) {
                        break done;
                    }
                    loom::thread::yield_now();
                };
                assert_eq!(done.bytes, 22);
                assert_eq!(bufs.read(S), 0x5A);
                board.free(s_index, s_gen);
            } else {
                assert_eq!(bufs.read(S), 0, "cancelled receive was written");
            }
            let second = claimer.join().unwrap();
            assert_eq!(second, s_claimed.then_some(S), "second claim: S exactly when the cancel lost");
        });
    }

    /// Two senders claim concurrently while the owner cancels the newer of two matching
    /// receives: no receive is handed out twice, the older one (A) is always taken, and B goes to
    /// a sender exactly when its cancel lost.
    #[test]
    fn two_claimers_never_share_a_receive() {
        const A: usize = 0;
        const B: usize = 1;
        loom::model(|| {
            let board = LoomArc::new(Board::default());
            let bufs = LoomArc::new(Buffers::new(2));
            post(&board, &bufs, A, 1).expect("free entry");
            let (b_index, b_gen) = post(&board, &bufs, B, 1).expect("free entry");
            let claimers: Vec<_> = (0..2u8)
                .map(|k| {
                    let (board, bufs) = (LoomArc::clone(&board), LoomArc::clone(&bufs));
                    loom::thread::spawn(move || {
                        let claim = board.claim_remote(CTX, 1, 1)?;
                        let id = bufs.fill(&claim, k + 1);
                        board.complete(&claim, Completion { source: 1, tag: 1, bytes: 1 });
                        Some(id)
                    })
                })
                .collect();
            let b_cancelled = board.cancel(b_index, b_gen);
            if b_cancelled {
                assert_eq!(bufs.read(B), 0, "cancelled receive was written");
            }
            let mut got: Vec<usize> = claimers.into_iter().filter_map(|c| c.join().unwrap()).collect();
            got.sort_unstable();
            assert_eq!(got, if b_cancelled { vec![A] } else { vec![A, B] });
        });
    }

    /// ABA: the claimer may read entry 0's posting X (state and fields) before the owner cancels
    /// X, cycles the round robin and re-posts entry 0 with Y, which the claimer's message does not
    /// match. The generation in the state word makes the stale CAS fail: the claimer gets X
    /// exactly when the cancel of X lost, and never Y (nor writes a cancelled buffer).
    #[test]
    fn stale_claim_cannot_take_a_reposted_entry() {
        const X: usize = 0;
        const Y: usize = 1;
        const FILLER: usize = 2;
        loom::model(|| {
            let board = LoomArc::new(Board::default());
            let bufs = LoomArc::new(Buffers::new(3));
            let (x_index, x_gen) = post(&board, &bufs, X, 1).expect("free entry");
            let claimer = {
                let (board, bufs) = (LoomArc::clone(&board), LoomArc::clone(&bufs));
                loom::thread::spawn(move || {
                    let claim = board.claim_remote(CTX, 1, 1)?;
                    let id = bufs.fill(&claim, 0xC1);
                    board.complete(&claim, Completion { source: 1, tag: 1, bytes: 1 });
                    Some((id, claim.index, claim.generation))
                })
            };
            let cancelled = board.cancel(x_index, x_gen);
            if cancelled {
                assert_eq!(bufs.read(X), 0, "cancelled receive was written");
            }
            // Entries 1..ENTRIES come and go; then entry 0 again, for Y (tag 2), if X is gone.
            for _ in 1..ENTRIES {
                let (i, g) = post(&board, &bufs, FILLER, 2).expect("free entry");
                assert!(board.cancel(i, g));
            }
            let y = post(&board, &bufs, Y, 2);
            assert_eq!(y.is_some(), cancelled, "entry 0 is free again exactly when X was cancelled");
            let got = claimer.join().unwrap();
            if cancelled {
                assert_eq!(got, None, "claimed a cancelled or re-posted receive");
            } else {
                assert_eq!(got, Some((X, x_index, x_gen)));
            }
        });
    }

    /// The owner claims its oldest receive A for a ring message whose sender then turns out to
    /// have cancelled it, and `unclaim`s A. A sender claiming meanwhile must not take the newer B
    /// (regression: it skipped A while the owner held it): it gets A, or backs off to the ring
    /// (`None`), where the owner matches in posting order.
    #[test]
    fn owner_unclaim_keeps_posting_order() {
        const A: usize = 0;
        const B: usize = 1;
        loom::model(|| {
            let board = LoomArc::new(Board::default());
            let bufs = LoomArc::new(Buffers::new(2));
            post_from(&board, &bufs, A, Source::Any, 1).expect("free entry");
            post_from(&board, &bufs, B, Source::Any, 1).expect("free entry");
            let claimer = {
                let (board, bufs) = (LoomArc::clone(&board), LoomArc::clone(&bufs));
                loom::thread::spawn(move || {
                    let claim = board.claim_remote(CTX, 1, 1)?;
                    let id = bufs.fill(&claim, 0xC1);
                    board.complete(&claim, Completion { source: 1, tag: 1, bytes: 1 });
                    Some(id)
                })
            };
            // The owner matches an incoming message (another sender's, also matching A and B)...
            let own = board.claim_own(CTX, 2, 1);
            // ...whose data vanished (the send was cancelled): A is re-opened.
            if let Some(own) = own {
                board.unclaim(&own);
            }
            let got = claimer.join().unwrap();
            assert_ne!(got, Some(B), "the sender must never take the newer receive B while A is posted");
        });
    }
}
