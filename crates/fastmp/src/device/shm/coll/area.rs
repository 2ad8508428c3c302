//! Shared areas for the shm device's native collectives: one per communicator, holding per-rank
//! published buffer references and progress flags (see `algorithms` for the collectives).
//!
//! Ranks are threads of one process, so a rank publishes raw pointers to its (borrowed) buffers
//! and peers copy from or into them directly. Every flag is owned (written) by one rank and read
//! by the peers that wait on it; the exceptions are the claims on work several ranks could do
//! (an allreduce share, a bcast receiver's chunks), advanced by compare-and-swap. Flags hold
//! operation *epochs*: every rank numbers its native operations on a communicator 1, 2, … and
//! all ranks call them in the same order, so "peer reached epoch e" is `flag >= e`.
//!
//! # Why borrowed buffers stay valid (the enter/leave protocol)
//!
//! A rank's buffers are borrowed from its caller's frame, so it must not return (or unwind) while
//! a peer may still touch them. Each operation names, per rank, its *sources* (peers whose
//! buffers it touches) and *accessors* (peers that touch its buffers).
//!
//! 1. Enter: the rank publishes its buffers under a seqlock (`entered = 2e-1`, fields,
//!    `entered = 2e`); the first store is `SeqCst`.
//! 2. Before touching anything of a source `p`, the rank reads `p`'s snapshot, which must say
//!    epoch `e`, the same operation, and list this rank among `p`'s accessors, and loads `p`'s
//!    `given_up` (`SeqCst`): a source that gave `e` up is touched no more. After all sources
//!    were seen, it loads the job's abort flag (`SeqCst`) and touches nothing if it is set.
//! 3. Leave (always, also on errors and panics): store `given_up` (`SeqCst`, only when the
//!    session is dropped unfinished) and `failed` (on error), and `left = e`, then wait until
//!    every accessor `p` has `left_p >= e`, or is excused: `entered_p < 2e-1` and afterwards
//!    this rank gave `e` up, the job is aborted or `p` no longer runs.
//!
//! Excusing is sound: a rank that no longer runs never enters again (its earlier stores are
//! visible through the Acquire load of its state). For an abort the leaver loads the abort flag
//! (true) and then `entered_p` (old), both `SeqCst`; `p` stores `entered_p` and then loads the
//! abort flag, both `SeqCst`. In the single total order the abort store precedes the leaver's
//! loads, which precede `p`'s store and so `p`'s load: `p` sees the abort and touches nothing.
//! A session given up works the same way with its `given_up` store in the abort's place: an
//! accessor that had not begun to enter sees it and touches nothing, so a rank that gives an
//! operation up never waits for a peer that may never come (a peer whose earlier collective
//! failed and that skipped the rest of its calls). A session that merely fails still waits
//! for its accessors, which then blame the rank that caused the failure, not this one.
//! A source that sees this rank entered and in its accessors keeps this rank from passing its own
//! leave (and so from republishing) until the source has left; a mismatched snapshot (ranks
//! disagreeing on the operation, the root or the epoch) is an error, never an access.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering, fence};
use std::sync::{Arc, Mutex, Weak};
use std::task::Poll;

use crossbeam_utils::CachePadded;

use crate::device::shm::ShmWorld;
use crate::device::wait::{Backoff, Pause};
use crate::device::{ContextId, Device};
use crate::error::{Error, Result};

/// The buffers a rank publishes for one operation (null and 0 where unused).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Buffers {
    pub send: *const u8,
    pub send_len: usize,
    pub recv: *mut u8,
    pub recv_len: usize,
    /// Operation-specific description (a `Layout`); its type is implied by the operation kind.
    pub extra: *const (),
}

impl Default for Buffers {
    fn default() -> Self {
        Buffers {
            send: std::ptr::null(),
            send_len: 0,
            recv: std::ptr::null_mut(),
            recv_len: 0,
            extra: std::ptr::null(),
        }
    }
}

/// One rank's published state; written only by that rank.
struct Slot {
    /// `2e - 1` while publishing epoch `e`, `2e` once published (a seqlock over the fields below).
    entered: AtomicU64,
    /// Operation kind of the published epoch (also implies the type behind `extra`).
    kind: AtomicUsize,
    /// Communicator ranks that may touch this rank's buffers in the published epoch.
    accessors_start: AtomicUsize,
    accessors_end: AtomicUsize,
    send: AtomicPtr<u8>,
    send_len: AtomicUsize,
    recv: AtomicPtr<u8>,
    recv_len: AtomicUsize,
    extra: AtomicPtr<()>,
    /// Last epoch this rank chose a message-based algorithm for instead (it never enters it).
    bypassed: AtomicU64,
    /// Last epoch this rank left.
    left: AtomicU64,
    /// Last epoch this rank abandoned with an error.
    failed: AtomicU64,
    /// Last epoch this rank gave up: its session was dropped unfinished (step 3).
    given_up: AtomicU64,
    /// `epoch << BLAME_SHIFT | rank`: the rank this rank blamed when it failed `epoch` because a
    /// peer gave up (see [`NativeArea::blame`]).
    blame: AtomicU64,
    /// Who does the work on this rank's part when several ranks could (an allreduce share):
    /// `2e - 1` once a rank claimed it for epoch `e` (compare-and-swap from an older epoch),
    /// `2e` once it is done. A bcast receiver's copy is done when its last chunk is
    /// (`chunks_copied`).
    claim: AtomicU64,
    /// A bcast receiver's buffer is copied in chunks that the receiver and its root both take
    /// (compare-and-swap), so whichever of them is running copies: `e << CHUNK_INDEX_BITS | n`
    /// once `n` chunks of epoch `e` were taken.
    chunks_taken: AtomicU64,
    /// Chunks copied, encoded alike; whoever copies the last one sets `claim` to `2e`.
    chunks_copied: AtomicU64,
    /// Barrier arrivals: the fan-in's, or the dissemination's first round.
    arrived: AtomicU64,
    /// The dissemination barrier's later rounds, one flag each (none where the area's barrier
    /// is the fan-in: thousands of tiny allocations were a fifth of a 256-rank job's start-up).
    later_rounds: Box<[AtomicU64]>,
}

impl Slot {
    fn new(later_rounds: usize) -> Self {
        Slot {
            entered: AtomicU64::new(0),
            kind: AtomicUsize::new(0),
            accessors_start: AtomicUsize::new(0),
            accessors_end: AtomicUsize::new(0),
            send: AtomicPtr::new(std::ptr::null_mut()),
            send_len: AtomicUsize::new(0),
            recv: AtomicPtr::new(std::ptr::null_mut()),
            recv_len: AtomicUsize::new(0),
            extra: AtomicPtr::new(std::ptr::null_mut()),
            bypassed: AtomicU64::new(0),
            left: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            given_up: AtomicU64::new(0),
            blame: AtomicU64::new(0),
            claim: AtomicU64::new(0),
            chunks_taken: AtomicU64::new(0),
            chunks_copied: AtomicU64::new(0),
            arrived: AtomicU64::new(0),
            later_rounds: (0..later_rounds).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Slot {
    /// The dissemination barrier's flag for round `k`.
    fn round(&self, k: usize) -> &AtomicU64 {
        if k == 0 { &self.arrived } else { &self.later_rounds[k - 1] }
    }
}

/// Operations of one communicator that may be in flight at once (nonblocking ones), each in a
/// lane of its own: the seed's `NUMBER_OF_CONCURRENT_OPERATIONS` slots. Operation `n` of the
/// communicator uses lane `n % LANES`; a rank enters a lane only after it left the lane's previous
/// operation, so at most `LANES` operations per rank are open and a later one waits for its lane.
pub(crate) const LANES: usize = 8;

/// A communicator's native-collective area: per lane, one published slot per rank.
pub(crate) struct NativeArea {
    world: Arc<ShmWorld>,
    members: Box<[usize]>,
    lanes: Box<[Box<[CachePadded<Slot>]>]>,
}

/// How a rank waits for a flag: in place (blocking operations, with the device's spin → yield
/// → park policy), or by yielding to the progress engine (nonblocking ones).
#[derive(Clone, Copy)]
pub(crate) struct Waiting<'a> {
    pub me: usize,
    pub lane: usize,
    /// The rank's device as the collectives layer sees it (`None` in tests): drives this
    /// rank's point-to-point traffic while it waits (see [`NativeArea::wait`]).
    pub dev: Option<&'a dyn Device>,
    pub blocking: bool,
}

impl Waiting<'_> {
    fn progress(&self) {
        if let Some(dev) = self.dev {
            dev.progress();
        }
    }

    /// Whether to wait in place now: a blocking operation always, a nonblocking one while its
    /// rank waits for it alone (see [`Device::waits_in_place`]).
    fn in_place(&self) -> bool {
        self.blocking || self.dev.is_some_and(|dev| dev.waits_in_place())
    }
}

impl NativeArea {
    /// Number of ranks of the communicator.
    pub(crate) fn size(&self) -> usize {
        self.members.len()
    }

    fn barrier_rounds(np: usize) -> usize {
        np.next_power_of_two().trailing_zeros() as usize
    }

    /// Whether this area's barrier is the fan-in (ranks time-share cores), not dissemination.
    fn fan_in_barrier(world: &ShmWorld, np: usize) -> bool {
        world.policy.time_shared() && np > 2
    }

    fn slot(&self, lane: usize, p: usize) -> &Slot {
        &self.lanes[lane][p]
    }

    /// Waits with the device's spin → yield → park policy until `poll` is ready. Whoever changes
    /// what `poll` looks at notifies this rank's parker (flags: [`NativeArea::notify`]; aborts
    /// and exits: `ShmWorld::wake_all`), so a park ends promptly.
    ///
    /// It drives this rank's point-to-point traffic while it waits (MPI's progress rule): a
    /// peer may be blocked sending to us through a full ring, or waiting for a send we queued,
    /// before it can reach this collective.
    fn wait(&self, how: Waiting<'_>, poll: &mut dyn FnMut() -> Poll<Result<()>>) -> Result<()> {
        let (me, progress) = (how.me, || how.progress());
        let mut backoff = Backoff::new(self.world.policy);
        loop {
            if let Poll::Ready(outcome) = poll() {
                return outcome;
            }
            match backoff.next() {
                Pause::Spin => std::hint::spin_loop(),
                Pause::Yield => {
                    progress();
                    std::thread::yield_now()
                }
                Pause::Park => {
                    let mut outcome = None;
                    self.world.ranks[self.members[me]].parker.park(&mut || {
                        progress();
                        match poll() {
                            Poll::Ready(r) => {
                                outcome = Some(r);
                                true
                            }
                            Poll::Pending => false,
                        }
                    });
                    if let Some(r) = outcome {
                        return r;
                    }
                }
            }
        }
    }

    /// Waits until `poll` is ready, in place or by yielding (see [`Waiting`]). A yielding rank
    /// is polled again by its engine, which runs inside the device's waits: the parker
    /// notifications that end a blocking wait end those too, so no wake-up is lost.
    async fn until(&self, how: Waiting<'_>, mut poll: impl FnMut() -> Poll<Result<()>>) -> Result<()> {
        if how.blocking {
            return self.wait(how, &mut poll);
        }
        std::future::poll_fn(|_| if how.in_place() { Poll::Ready(self.wait(how, &mut poll)) } else { poll() }).await
    }

    /// Rank `me` will not take part in `epoch` of `lane` (it chose a message-based algorithm
    /// there): peers waiting for it in that epoch stop with an error ([`passed_by`]); it never
    /// touches their buffers. Without `wake`, parked peers see it when their park times out
    /// (for marks every correct program makes, where waking peers would only cost).
    pub(crate) fn bypass(&self, me: usize, lane: usize, epoch: u64, wake: bool) {
        // Only rank `me` writes its own mark: a load and a store keep the maximum without a
        // locked read-modify-write (this runs on every message-based choice).
        let mark = &self.slot(lane, me).bypassed;
        if mark.load(Ordering::Relaxed) < epoch {
            mark.store(epoch, Ordering::Release);
        }
        if wake {
            self.notify(me, 0..self.size());
        }
    }

    /// Aborts the job on behalf of communicator rank `me`, which is unwinding from a panic
    /// (inside the collective, or with the operation outstanding).
    pub(crate) fn fail_job(&self, me: usize) {
        self.world.mark_panicking(self.members[me]);
    }

    /// The error of rank `me`, whose peer `p` gave up on `epoch` of `lane`: the job's failure if
    /// it is aborted (a peer gives up because of it, and must not take the blame), else an
    /// argument error naming where the give-up began: `p`, or the rank `p` blamed when it
    /// failed because of another (failures spread through peers' flags, and the user must see
    /// the rank that started it). Recorded as `me`'s blame for its own peers; `failed`, stored
    /// after it (Release), publishes it. A peer's give-up flag is stored after what made it
    /// give up, so whoever sees it (Acquire) also sees the abort.
    fn blame(&self, me: usize, lane: usize, p: usize, epoch: u64) -> Error {
        if let Some(err) = self.world.abort_error() {
            return err;
        }
        let blamed = self.slot(lane, p).blame.load(Ordering::Acquire);
        let culprit = if blamed >> BLAME_SHIFT >= epoch { (blamed & BLAME_RANK) as usize } else { p };
        self.slot(lane, me).blame.store(epoch << BLAME_SHIFT | culprit as u64, Ordering::Relaxed);
        abandoned(culprit)
    }

    /// Wakes the ranks of `peers` (communicator ranks) other than `me` if they are parked; call
    /// after the store they wait for.
    fn notify(&self, me: usize, peers: Range<usize>) {
        for p in peers.filter(|&p| p != me) {
            self.world.ranks[self.members[p]].parker.notify();
        }
    }

    /// Polls whether `flag(p) >= epoch` in `how.lane`. Fails if the job is aborted, if `p`
    /// abandoned an epoch `>= epoch` without reaching the flag, or if `p` stopped running
    /// without reaching it.
    fn flag_reached(
        &self,
        (me, lane): (usize, usize),
        p: usize,
        epoch: u64,
        flag: &dyn Fn(&Slot) -> u64,
    ) -> Poll<Result<()>> {
        let slot = self.slot(lane, p);
        if flag(slot) >= epoch {
            return Poll::Ready(Ok(()));
        }
        if slot.failed.load(Ordering::Acquire) >= epoch || passed_by(slot, epoch) {
            // The flag may have been reached after the check above: `p` then went on to a later
            // operation of the lane, which it passed by or failed. Those marks are stored after
            // the flag and read here with Acquire, so the flag is visible now: check once more.
            // (A barrier never enters, so any later pass-by marks it: 0.5–1.4 % of oversubscribed
            // runs of `immediate_collectives` failed this way.)
            if flag(slot) >= epoch {
                return Poll::Ready(Ok(()));
            }
            return Poll::Ready(Err(self.blame(me, lane, p, epoch)));
        }
        if let Some(err) = self.world.abort_error() {
            return Poll::Ready(Err(err));
        }
        match self.world.gone(self.members[p]) {
            // Its last stores are visible now (Acquire on its state): check once more.
            Some(_) if flag(slot) >= epoch => Poll::Ready(Ok(())),
            Some(err) => Poll::Ready(Err(err)),
            None => Poll::Pending,
        }
    }

    async fn await_flag(&self, how: Waiting<'_>, p: usize, epoch: u64, flag: &dyn Fn(&Slot) -> u64) -> Result<()> {
        self.until(how, || self.flag_reached((how.me, how.lane), p, epoch, flag)).await
    }

    /// Barrier for `epoch`: dissemination while every rank has a core, else a fan-in to rank 0
    /// and its release ([`NativeArea::central_barrier`]).
    pub(crate) async fn barrier(&self, how: Waiting<'_>, epoch: u64) -> Result<()> {
        if Self::fan_in_barrier(&self.world, self.size()) {
            self.central_barrier(how, epoch).await
        } else {
            self.dissemination_barrier(how, epoch).await
        }
    }

    /// Fan-in to rank 0, which releases the others: when ranks time-share cores, rank 0 leaves
    /// first, so the collective that usually follows (rooted at 0) finds its root already
    /// running. A dissemination barrier lets rank 0 leave last as often as not, and every
    /// non-root then yields its core away waiting for it.
    async fn central_barrier(&self, how: Waiting<'_>, epoch: u64) -> Result<()> {
        let (np, me) = (self.size(), how.me);
        let mine = self.slot(how.lane, me);
        let flag = |s: &Slot| s.arrived.load(Ordering::Acquire);
        let outcome = if me == 0 {
            let mut arrived = Ok(());
            for p in 1..np {
                arrived = self.await_flag(how, p, epoch, &flag).await;
                if arrived.is_err() {
                    break;
                }
            }
            if arrived.is_ok() {
                mine.arrived.store(epoch, Ordering::Release);
                self.notify(me, 0..np);
            }
            arrived
        } else {
            mine.arrived.store(epoch, Ordering::Release);
            self.notify(me, 0..1);
            self.await_flag(how, 0, epoch, &flag).await
        };
        if outcome.is_err() {
            mine.failed.store(epoch, Ordering::Release);
            self.notify(me, 0..np);
        }
        outcome
    }

    /// Dissemination barrier for `epoch`: in round k rank i signals rank i + 2^k and waits for
    /// rank i - 2^k, so after ⌈log2 np⌉ rounds every rank has (transitively) heard from all.
    async fn dissemination_barrier(&self, how: Waiting<'_>, epoch: u64) -> Result<()> {
        let (np, me) = (self.size(), how.me);
        let mine = self.slot(how.lane, me);
        for k in 0..Self::barrier_rounds(np) {
            let distance = 1 << k;
            mine.round(k).store(epoch, Ordering::Release);
            let to = (me + distance) % np;
            self.notify(me, to..to + 1);
            let from = (me + np - distance % np) % np;
            if let Err(e) = self.await_flag(how, from, epoch, &|s| s.round(k).load(Ordering::Acquire)).await {
                mine.failed.store(epoch, Ordering::Release);
                self.notify(me, 0..np);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Starts operation `epoch` (of `kind`) on this rank in `how.lane`: publishes `buffers`,
    /// which the ranks in `accessors` may touch, and announces entry; `sources` are the ranks
    /// whose buffers this rank will touch. The returned session leaves (`Session::leave`, or in
    /// place when dropped) before the buffers' borrows end.
    pub(crate) fn enter<'a>(
        &'a self,
        how: Waiting<'a>,
        epoch: u64,
        kind: usize,
        buffers: Buffers,
        (sources, accessors): (Range<usize>, Range<usize>),
    ) -> Session<'a> {
        let slot = self.slot(how.lane, how.me);
        // Seqlock write: odd marker (SeqCst, step 1 of the protocol), fields, even marker.
        slot.entered.store(2 * epoch - 1, Ordering::SeqCst);
        fence(Ordering::Release);
        slot.kind.store(kind, Ordering::Relaxed);
        slot.accessors_start.store(accessors.start, Ordering::Relaxed);
        slot.accessors_end.store(accessors.end, Ordering::Relaxed);
        slot.send.store(buffers.send.cast_mut(), Ordering::Relaxed);
        slot.send_len.store(buffers.send_len, Ordering::Relaxed);
        slot.recv.store(buffers.recv, Ordering::Relaxed);
        slot.recv_len.store(buffers.recv_len, Ordering::Relaxed);
        slot.extra.store(buffers.extra.cast_mut(), Ordering::Relaxed);
        slot.entered.store(2 * epoch, Ordering::Release);
        self.notify(how.me, accessors.clone());
        Session { area: self, how, epoch, kind, sources, accessors, sources_ready: false, left: false }
    }
}

/// Bits of [`Slot::blame`] that hold the rank (the epoch is above them).
const BLAME_SHIFT: u32 = 24;
const BLAME_RANK: u64 = (1 << BLAME_SHIFT) - 1;

/// The error of a rank whose peer gave up on the operation.
fn abandoned(rank: usize) -> Error {
    Error::InvalidArgument(format!(
        "native collective: rank {rank} abandoned the operation (arguments differ between ranks, so it chose another algorithm or failed, or it is gone)"
    ))
}

/// The leave error of a rank that gave up an operation a peer had not entered yet (the peer
/// will see that and touch nothing).
fn never_entered(rank: usize) -> Error {
    Error::InvalidArgument(format!("native collective: rank {rank} had not entered the operation"))
}

fn mismatch(rank: usize) -> Error {
    Error::InvalidArgument(format!(
        "native collective: rank {rank} is in a different operation (ranks disagree on the sequence of collectives, their root, element type or algorithm)"
    ))
}

/// Bits of a chunk counter ([`Slot::chunks_taken`]) that count chunks; the epoch is above them.
const CHUNK_INDEX_BITS: u32 = 8;
/// Most chunks of one copy: a receiver that waits and its root copy about half each. More and
/// smaller chunks measured no better, and a 1 MiB copy in 16 KiB pieces was slower than whole.
const CHUNKS: usize = 4;
/// Fewest bytes of a chunk: taking one (a compare-and-swap on a line both sides use) costs
/// little beside its copy.
const CHUNK_BYTES: usize = 16 * 1024;
const _: () = assert!(CHUNKS < 1 << CHUNK_INDEX_BITS);

/// One copy into a bcast receiver's buffer, as chunks that the receiver and its root take, so
/// that a receiver already waiting copies alongside the root instead of watching it (see
/// [`Slot::chunks_taken`]). The root takes one chunk at a time and the receiver all that are
/// left: its copy writes its own cache's lines and runs faster than the root's, so the split
/// comes out about even, and a receiver alone copies in one piece.
#[derive(Clone, Copy)]
pub(crate) struct Chunks<'a> {
    area: &'a NativeArea,
    lane: usize,
    me: usize,
    p: usize,
    epoch: u64,
    len: usize,
    chunk_len: usize,
}

impl Chunks<'_> {
    fn count(&self) -> usize {
        self.len.div_ceil(self.chunk_len)
    }

    /// Takes the next chunk nobody has taken (the receiver: every one left): the byte range now
    /// this rank's to copy.
    pub(crate) fn take(&self) -> Option<Range<usize>> {
        let slot = self.area.slot(self.lane, self.p);
        let taker_is_receiver = self.me == self.p;
        let (first, end) = advance(&slot.chunks_taken, self.epoch, self.count(), |n| {
            if taker_is_receiver { self.count() - n } else { 1 }
        })?;
        Some(first * self.chunk_len..(end * self.chunk_len).min(self.len))
    }

    /// Takes chunks until none is left, copies each with `copy` and records it copied: the
    /// loop of every taker.
    pub(crate) fn copy_each(&self, mut copy: impl FnMut(Range<usize>)) {
        while let Some(chunk) = self.take() {
            copy(chunk.clone());
            self.copied(chunk);
        }
    }

    /// Records the bytes `taken` (from [`Chunks::take`]) as copied; the last copy completes the
    /// whole for `p` ([`Session::await_copied`]).
    pub(crate) fn copied(&self, taken: Range<usize>) {
        let slot = self.area.slot(self.lane, self.p);
        let chunks = taken.end.div_ceil(self.chunk_len) - taken.start / self.chunk_len;
        if let Some((_, end)) = advance(&slot.chunks_copied, self.epoch, self.count(), |_| chunks)
            && end == self.count()
        {
            // Release: every chunk's copy happens-before this store (the other copier's AcqRel
            // increments form a release sequence that our increment read).
            slot.claim.store(2 * self.epoch, Ordering::Release);
            self.area.notify(self.me, self.p..self.p + 1);
        }
    }
}

/// Moves the counter `word` of `epoch` (one of an earlier epoch reads as 0) from `n` to
/// `n + step(n)` if `n < count`, and returns `(n, n + step(n))`.
fn advance(word: &AtomicU64, epoch: u64, count: usize, step: impl Fn(usize) -> usize) -> Option<(usize, usize)> {
    debug_assert!(epoch < 1 << (64 - CHUNK_INDEX_BITS));
    let base = epoch << CHUNK_INDEX_BITS;
    let mut current = word.load(Ordering::Acquire);
    loop {
        let n = current.saturating_sub(base) as usize;
        if n >= count {
            return None;
        }
        let end = n + step(n);
        debug_assert!(end <= count);
        match word.compare_exchange_weak(current, base + end as u64, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some((n, end)),
            Err(now) => current = now,
        }
    }
}

/// One rank's part in one native operation. Dropped before it left (a nonblocking operation
/// abandoned at the end of its scope, or unwinding from a panic) it leaves in place, so the
/// published buffers still outlive every peer's access.
pub(crate) struct Session<'a> {
    area: &'a NativeArea,
    how: Waiting<'a>,
    epoch: u64,
    kind: usize,
    sources: Range<usize>,
    accessors: Range<usize>,
    /// Whether [`Session::await_sources`] succeeded.
    sources_ready: bool,
    /// Whether [`Session::leave`] finished.
    left: bool,
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        if self.left {
            return;
        }
        if std::thread::panicking() {
            // This rank fails anyway; peers report it (PeerFailed naming it) instead of "rank
            // abandoned the operation", and stop waiting for it.
            self.area.fail_job(self.how.me);
        }
        // SeqCst: accessors that have not begun to enter are excused by it (step 3).
        self.area.slot(self.how.lane, self.how.me).given_up.store(self.epoch, Ordering::SeqCst);
        self.announce_leave(false);
        let area = self.area;
        let _ = area.wait(self.how, &mut || self.poll_leave());
    }
}

impl<'a> Session<'a> {
    /// This rank.
    pub(crate) fn me(&self) -> usize {
        self.how.me
    }

    /// Waits until every source has entered this operation, validates their snapshots (step 2 of
    /// the protocol) and checks the abort flag. Only after this succeeded may [`Session::peer`]'s
    /// pointers be used.
    pub(crate) async fn await_sources(&mut self) -> Result<()> {
        let (area, how, epoch) = (self.area, self.how, self.epoch);
        for p in self.sources.clone().filter(|&p| p != how.me) {
            area.await_flag(how, p, epoch, &|s| s.entered.load(Ordering::Acquire) / 2).await?;
            self.snapshot(p).ok_or_else(|| mismatch(p))?;
            self.check_not_given_up(p)?;
        }
        // Step 2's abort check, after every source was seen entered (see the module comment).
        if area.world.is_aborted() {
            return Err(area.world.abort_error().unwrap_or_else(|| abandoned(how.me)));
        }
        self.sources_ready = true;
        Ok(())
    }

    /// `p`'s published buffers if its slot consistently shows this operation with this rank
    /// among its accessors (seqlock read).
    fn snapshot(&self, p: usize) -> Option<Buffers> {
        let slot = self.area.slot(self.how.lane, p);
        let expected = 2 * self.epoch;
        if slot.entered.load(Ordering::Acquire) != expected {
            return None;
        }
        let kind = slot.kind.load(Ordering::Relaxed);
        let accessors = slot.accessors_start.load(Ordering::Relaxed)..slot.accessors_end.load(Ordering::Relaxed);
        let buffers = Buffers {
            send: slot.send.load(Ordering::Relaxed),
            send_len: slot.send_len.load(Ordering::Relaxed),
            recv: slot.recv.load(Ordering::Relaxed),
            recv_len: slot.recv_len.load(Ordering::Relaxed),
            extra: slot.extra.load(Ordering::Relaxed),
        };
        fence(Ordering::Acquire);
        let stable = slot.entered.load(Ordering::Relaxed) == expected;
        (stable && kind == self.kind && accessors.contains(&self.how.me)).then_some(buffers)
    }

    /// Step 2's check of source `p` (see the module comment): once it gave this operation up
    /// it may have stopped waiting for this rank, so its buffers are not touched.
    fn check_not_given_up(&self, p: usize) -> Result<()> {
        if self.area.slot(self.how.lane, p).given_up.load(Ordering::SeqCst) >= self.epoch {
            return Err(self.area.blame(self.how.me, self.how.lane, p, self.epoch));
        }
        Ok(())
    }

    /// The buffers source `p` published, valid for access (as far as the operation allows)
    /// until this session leaves. Only after [`Session::await_sources`] succeeded; a validated
    /// source cannot republish before we leave, so reading its slot again is consistent.
    pub(crate) fn peer(&self, p: usize) -> Result<Buffers> {
        if !(self.sources_ready && self.sources.contains(&p) && p != self.how.me) {
            return Err(Error::InvalidArgument(format!("native collective: rank {p} is not a ready source")));
        }
        self.snapshot(p).ok_or_else(|| mismatch(p))
    }

    /// Fails the job because this rank panicked in the session's work (a user op), with the
    /// panic's message.
    pub(crate) fn fail_panicked(&self, message: &str) {
        let rank = self.area.members[self.how.me];
        let cause = format!("panicked in a native {}: {message}", self.collective());
        self.area.world.mark_failed(rank, crate::device::Failure { rank, cause, code: None });
    }

    /// The collective this session runs (its kind's low byte, `Collective as usize`).
    pub(crate) fn collective(&self) -> crate::coll::Collective {
        crate::coll::Collective::ALL[(self.kind & 0xff) % crate::coll::Collective::ALL.len()]
    }

    /// Source `p`'s published buffers if it has entered this operation already (validated as in
    /// [`Session::await_sources`], and then the abort flag checked), without waiting for it.
    pub(crate) fn try_peer(&self, p: usize) -> Result<Option<Buffers>> {
        if !self.sources.contains(&p) || p == self.how.me {
            return Err(Error::InvalidArgument(format!("native collective: rank {p} is not a source")));
        }
        let entered = self.area.slot(self.how.lane, p).entered.load(Ordering::Acquire) / 2;
        if entered < self.epoch {
            return Ok(None);
        }
        let buffers = self.snapshot(p).ok_or_else(|| mismatch(p))?;
        self.check_not_given_up(p)?;
        if self.area.world.is_aborted() {
            return Err(self.area.world.abort_error().unwrap_or_else(|| abandoned(self.how.me)));
        }
        Ok(Some(buffers))
    }

    /// Claims the copy into `p`'s buffer for this operation (`p` may be this rank): `true` for
    /// exactly one of the ranks that try.
    pub(crate) fn claim_copy(&self, p: usize) -> bool {
        let claim = &self.area.slot(self.how.lane, p).claim;
        let claimed = 2 * self.epoch - 1;
        let current = claim.load(Ordering::Acquire);
        current < claimed && claim.compare_exchange(current, claimed, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Announces that the claimed copy into `p`'s buffer is complete; a step another thread may
    /// take (the progress agent, right after making the copy), so `p` need not wait for this
    /// rank's next call.
    pub(crate) fn copied_signal(&self, p: usize) -> impl FnOnce() + Send + '_ {
        let (area, lane, me, epoch) = (self.area, self.how.lane, self.how.me, self.epoch);
        move || {
            area.slot(lane, p).claim.store(2 * epoch, Ordering::Release);
            area.notify(me, p..p + 1);
        }
    }

    /// The chunked copy of `len` bytes into `p`'s buffer (a bcast receiver), which `p` and its
    /// root share.
    pub(crate) fn chunks(&self, p: usize, len: usize) -> Chunks<'a> {
        let chunk_len = CHUNK_BYTES.max(len.div_ceil(CHUNKS));
        Chunks { area: self.area, lane: self.how.lane, me: self.how.me, p, epoch: self.epoch, len, chunk_len }
    }

    /// Waits until the copy into this rank's buffer is complete (its last chunk copied), failing
    /// if `copier`, the source that may still be copying, gave up.
    pub(crate) async fn await_copied(&self, copier: usize) -> Result<()> {
        let mine = self.area.slot(self.how.lane, self.how.me);
        self.area.await_flag(self.how, copier, self.epoch, &|_| mine.claim.load(Ordering::Acquire) / 2).await
    }

    /// Waits until whichever rank claimed the step into this rank's slot (an allreduce share)
    /// completed it, calling `meanwhile` at each check; fails if any peer gave up, as the
    /// claimer is not known.
    pub(crate) async fn await_claimed_done(&self, meanwhile: &dyn Fn()) -> Result<()> {
        let (area, how, epoch) = (self.area, self.how, self.epoch);
        let mine = area.slot(how.lane, how.me);
        let done = |_: &Slot| mine.claim.load(Ordering::Acquire) / 2;
        let any_peer = || {
            meanwhile();
            // Checked here too: without peers (one rank) nothing below would see it.
            if done(mine) >= epoch {
                return Poll::Ready(Ok(()));
            }
            (0..area.size())
                .filter(|&p| p != how.me)
                .map(|p| area.flag_reached((how.me, how.lane), p, epoch, &done))
                .find(Poll::is_ready)
                .unwrap_or(Poll::Pending)
        };
        area.until(how, any_peer).await
    }

    /// Step 3 of the protocol: records the outcome, then waits until no accessor can touch this
    /// rank's buffers any more. Never fails early: the wait ends when every accessor has left or
    /// is excused (each accessor's part is bounded, so this terminates). Returns an error if an
    /// accessor abandoned the operation or never took part. `failed` keeps only an accessor's
    /// latest failed epoch, and an accessor that left may already be further on, so a failure
    /// of its in a *later* operation is reported here too: conservative, never a missed one.
    pub(crate) async fn leave(mut self, succeeded: bool) -> Result<()> {
        self.announce_leave(succeeded);
        let outcome = self.area.until(self.how, || self.poll_leave()).await;
        self.left = true;
        outcome
    }

    /// Records the outcome and that this rank left, and wakes whoever waits for that.
    fn announce_leave(&self, succeeded: bool) {
        let (area, me) = (self.area, self.how.me);
        let mine = area.slot(self.how.lane, me);
        if !succeeded {
            mine.failed.store(self.epoch, Ordering::Release);
        }
        mine.left.store(self.epoch, Ordering::Release);
        area.notify(me, self.sources.clone());
        // Accessors waiting on this rank's flags (a bcast receiver on its copier) are woken too, so
        // they see `failed`.
        if !succeeded {
            area.notify(me, self.accessors.clone());
        }
    }

    /// One check of every accessor for [`Session::leave`]: ready once all have left or are
    /// excused, with the first error among them.
    fn poll_leave(&self) -> Poll<Result<()>> {
        let area = self.area;
        let (me, lane, epoch) = (self.how.me, self.how.lane, self.epoch);
        let mut first_error = None;
        for p in self.accessors.clone().filter(|&p| p != me) {
            let slot = area.slot(lane, p);
            if slot.left.load(Ordering::Acquire) >= epoch {
                if slot.failed.load(Ordering::Acquire) >= epoch {
                    first_error.get_or_insert_with(|| area.blame(me, lane, p, epoch));
                }
            } else if let Some(err) = excuse(area, lane, p, epoch, me) {
                first_error.get_or_insert(err);
            } else {
                return Poll::Pending;
            }
        }
        Poll::Ready(first_error.map_or(Ok(()), Err))
    }
}

/// Whether the slot's rank went past `epoch` without entering it: it bypassed `epoch` or a later
/// one (chose a message-based algorithm there) and never entered `epoch`. Its epochs only grow,
/// so it never will; `bypassed` is read first (Acquire), so an entry before a later bypass is
/// seen.
fn passed_by(slot: &Slot, epoch: u64) -> bool {
    slot.bypassed.load(Ordering::Acquire) >= epoch && slot.entered.load(Ordering::Acquire) < 2 * epoch - 1
}

/// Why accessor `p` (which has not left `epoch`) can be ignored: it has not started publishing
/// `epoch` and never will touch our buffers, because `me` gave `epoch` up or the job is aborted
/// (either checked before `entered`, all `SeqCst`), or it no longer runs (its state read with
/// Acquire, then `entered`).
fn excuse(area: &NativeArea, lane: usize, p: usize, epoch: u64, me: usize) -> Option<Error> {
    if passed_by(area.slot(lane, p), epoch) {
        return Some(abandoned(p));
    }
    let not_entered = || area.slot(lane, p).entered.load(Ordering::SeqCst) < 2 * epoch - 1;
    if area.slot(lane, me).given_up.load(Ordering::SeqCst) >= epoch && not_entered() {
        return Some(never_entered(p));
    }
    if area.world.is_aborted() && not_entered() {
        return area.world.abort_error();
    }
    match area.world.gone(area.members[p]) {
        Some(err) if not_entered() => Some(err),
        _ => None,
    }
}

/// Areas by (context, members in communicator order), created by the first member that asks.
/// Keying on the whole member list, not just a representative, means ranks that (erroneously)
/// built different groups on one context never share slots.
#[derive(Default)]
pub(crate) struct Registry {
    areas: Mutex<HashMap<AreaKey, Weak<NativeArea>>>,
}

/// A communicator's context and its members (world ranks in communicator order).
type AreaKey = (ContextId, Box<[usize]>);

impl ShmWorld {
    /// The area of the communicator with `context` over `members`; communicator creation only,
    /// never on a hot path.
    pub(crate) fn native_area(self: &Arc<Self>, context: ContextId, members: &[usize]) -> Arc<NativeArea> {
        let key: AreaKey = (context, members.into());
        let mut areas = self.native_areas.areas.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(area) = areas.get(&key).and_then(Weak::upgrade) {
            return area;
        }
        areas.retain(|_, weak| weak.strong_count() > 0);
        let np = members.len();
        let later_rounds =
            if NativeArea::fan_in_barrier(self, np) { 0 } else { NativeArea::barrier_rounds(np).saturating_sub(1) };
        let area = Arc::new(NativeArea {
            world: Arc::clone(self),
            members: members.into(),
            lanes: (0..LANES)
                .map(|_| members.iter().map(|_| CachePadded::new(Slot::new(later_rounds))).collect())
                .collect(),
        });
        areas.insert(key, Arc::downgrade(&area));
        area
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::device::Placement;

    /// A chunk counter left at an earlier epoch reads as zero; each epoch's chunks go out once,
    /// in order, and a counter already at a later epoch hands out nothing.
    #[test]
    fn chunk_counters_hand_out_each_chunk_once_per_epoch() {
        let word = AtomicU64::new(0);
        assert_eq!(advance(&word, 1, 4, |_| 1), Some((0, 1)));
        assert_eq!(advance(&word, 1, 4, |n| 4 - n), Some((1, 4)));
        assert_eq!(advance(&word, 1, 4, |_| 1), None);
        // The next epoch starts over although the word still holds epoch 1's count.
        assert_eq!(advance(&word, 2, 3, |_| 1), Some((0, 1)));
        assert_eq!(advance(&word, 2, 3, |_| 2), Some((1, 3)));
        assert_eq!(advance(&word, 2, 3, |_| 1), None);
        assert_eq!(advance(&word, 1, 4, |_| 1), None, "a later epoch's counter is not reset");
        assert_eq!(advance(&word, 3, 0, |_| 1), None, "an empty copy has no chunks");
    }

    /// Runs a blocking-mode area future, which completes in its first poll.
    fn finish<T>(future: impl std::future::Future<Output = T>) -> T {
        let mut future = std::pin::pin!(future);
        match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("a blocking wait returned pending"),
        }
    }

    /// A peer that reaches the awaited flag between a waiter's flag check and its pass-by check,
    /// then goes on to a later operation of the lane and passes it by, did not abandon this one
    /// (a barrier never enters, so the later mark alone looked like abandonment).
    #[test]
    fn a_flag_reached_just_before_a_later_pass_by_is_not_abandonment() {
        let world = ShmWorld::with_placement(3, 4096, Placement::single_process(3), 3);
        let area = world.native_area(0, &[0, 1, 2]);
        let (lane, epoch) = (0, 1);
        area.slot(lane, 0).arrived.store(epoch, Ordering::Release);
        area.bypass(0, lane, epoch + 16, false);
        // The waiter's first read is from before rank 0 stored the flag.
        let reads = std::cell::Cell::new(0);
        let stale_first = |s: &Slot| {
            reads.set(reads.get() + 1);
            if reads.get() == 1 { 0 } else { s.arrived.load(Ordering::Acquire) }
        };
        assert!(matches!(area.flag_reached((1, lane), 0, epoch, &stale_first), Poll::Ready(Ok(()))));
        // A peer that never reached the flag and passed the lane by is still reported.
        assert!(matches!(area.flag_reached((1, lane), 0, epoch, &|_: &Slot| 0), Poll::Ready(Err(_))));
    }

    /// A failure that spreads through peers' flags names the rank where it began: rank 2 fails
    /// because rank 1 passed the operation by, and rank 0, waiting on rank 2, blames rank 1.
    #[test]
    fn a_failure_passed_on_blames_the_rank_that_began_it() {
        let world = ShmWorld::with_placement(3, 4096, Placement::single_process(3), 3);
        let area = world.native_area(0, &[0, 1, 2]);
        let (lane, epoch) = (0, 1);
        area.bypass(1, lane, epoch, false);
        let never = |_: &Slot| 0;
        let Poll::Ready(Err(first)) = area.flag_reached((2, lane), 1, epoch, &never) else {
            panic!("rank 2 must fail on rank 1's pass-by")
        };
        assert!(first.to_string().contains("rank 1 abandoned"), "unexpected error: {first}");
        area.slot(lane, 2).failed.store(epoch, Ordering::Release);
        let Poll::Ready(Err(passed_on)) = area.flag_reached((0, lane), 2, epoch, &never) else {
            panic!("rank 0 must fail on rank 2's failure")
        };
        assert!(passed_on.to_string().contains("rank 1 abandoned"), "unexpected error: {passed_on}");
        // A later operation that rank 2 fails on its own account blames rank 2.
        area.slot(lane, 2).failed.store(epoch + 1, Ordering::Release);
        let Poll::Ready(Err(own)) = area.flag_reached((0, lane), 2, epoch + 1, &never) else {
            panic!("rank 0 must fail on rank 2's later failure")
        };
        assert!(own.to_string().contains("rank 2 abandoned"), "unexpected error: {own}");
    }

    /// A rank whose session is dropped (its nonblocking operation given up) before an accessor
    /// entered does not wait for it: the accessor may never come (its earlier collective failed
    /// and it skipped the rest). The accessor, entering later, sees the failure and touches
    /// nothing.
    #[test]
    fn a_dropped_session_does_not_wait_for_accessors_that_never_entered() {
        let world = ShmWorld::with_placement(2, 4096, Placement::single_process(2), 2);
        let area = world.native_area(0, &[0, 1]);
        let (lane, epoch, kind) = (0, 1, 1);
        let published = [7u8; 16];
        std::thread::scope(|s| {
            let giver = s.spawn(|| {
                world.ranks[1].parker.register_current();
                let buffers = Buffers { send: published.as_ptr(), send_len: published.len(), ..Buffers::default() };
                let how = Waiting { me: 1, lane, dev: None, blocking: true };
                drop(area.enter(how, epoch, kind, buffers, (1..1, 0..1)));
            });
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !giver.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let hung = !giver.is_finished();
            if hung {
                // Releases the drop another way, so the failure is reported rather than a hang.
                area.fail_job(0);
            }
            giver.join().expect("the giving-up rank");
            assert!(!hung, "the dropped session still waited 10 s for a peer that never entered");
        });
        world.ranks[0].parker.register_current();
        let how = Waiting { me: 0, lane, dev: None, blocking: true };
        let mut late = area.enter(how, epoch, kind, Buffers::default(), (1..2, 0..0));
        let err = finish(late.await_sources()).expect_err("a source that failed must not be touched");
        assert!(err.to_string().contains("rank 1 abandoned"), "unexpected error: {err}");
    }

    /// The fan-in barrier of ranks that time-share cores (forced by claiming 64 competing
    /// ranks, whatever the machine): no rank leaves round r before every rank arrived in it.
    #[test]
    fn time_shared_barrier_holds_every_rank_back() {
        const ROUNDS: usize = 200;
        for np in [3, 4, 5, 8] {
            let world = ShmWorld::with_placement(np, 4096, Placement::single_process(np), 64);
            assert!(world.policy.time_shared());
            let area = world.native_area(0, &(0..np).collect::<Vec<_>>());
            let arrived: Vec<AtomicUsize> = (0..ROUNDS).map(|_| AtomicUsize::new(0)).collect();
            std::thread::scope(|s| {
                for me in 0..np {
                    let (world, area, arrived) = (&world, &area, &arrived);
                    s.spawn(move || {
                        world.ranks[me].parker.register_current();
                        let how = Waiting { me, lane: 0, dev: None, blocking: true };
                        for (round, count) in arrived.iter().enumerate() {
                            count.fetch_add(1, Ordering::SeqCst);
                            finish(area.barrier(how, round as u64 + 1)).expect("barrier");
                            assert_eq!(count.load(Ordering::SeqCst), np, "np {np} rank {me} left round {round} early");
                        }
                    });
                }
            });
        }
    }
}
