//! The `shm` device: ranks are threads of one process, messages move by a single copy.
//!
//! Per ordered pair of ranks that talk there is one SPSC [`ring::Ring`] of cache-line slots,
//! created on the pair's first send (see [`inbox`]); per rank a [`board::Board`] of published
//! posted receives; matching itself (posted vs. unexpected) is
//! private to the receiving rank's thread, so it needs no lock. Protocols:
//! - eager (≤ eager limit): payload copied into the slot or its pooled spill buffer;
//! - rendezvous (> eager limit): the slot carries a ready-to-send; the receiver copies straight
//!   out of the sender's buffer;
//! - receiver-first: a large send that finds a matching published receive copies straight into
//!   it;
//! - synchronous: the receiver acknowledges the match through the send's [`record::SendRecord`].

mod board;
mod coll;
mod copy;
mod endpoint;
mod inbox;
mod one_sided;
pub(crate) mod record;
pub(crate) mod ring;
#[cfg(all(test, not(loom)))]
mod test_support;

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_utils::CachePadded;

pub(crate) use coll::ShmCollectives;
pub(crate) use endpoint::ShmEndpoint;

use super::wait::{Parker, WaitPolicy};
use super::{Failure, lock_ignoring_poison};
use crate::error::{Error, Result};
use board::Board;
use inbox::Inbox;

const RUNNING: u8 = 0;
const EXITED: u8 = 1;
const FAILED: u8 = 2;

/// Liveness of a rank as seen by its peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Liveness {
    Running,
    Exited,
    Failed,
}

struct RankShared {
    parker: Parker,
    state: CachePadded<AtomicU8>,
    board: Board,
    /// The rings other ranks (and this one) have opened to this rank.
    inbox: Inbox,
    endpoint_taken: AtomicBool,
}

impl RankShared {
    fn new(policy: WaitPolicy) -> Self {
        RankShared {
            parker: Parker::for_policy(policy),
            state: CachePadded::default(),
            board: Board::default(),
            inbox: Inbox::default(),
            endpoint_taken: AtomicBool::new(false),
        }
    }
}

/// Slots of each per-pair ring in a job of `np` ranks: the full [`ring::SLOTS`] up to 64 ranks,
/// then fewer (16 from 256 ranks on: 1 KiB of slots per pair), since with many ranks up to np²
/// pairs may talk and each carries a smaller share of the traffic. A full ring only queues the
/// sender's later messages until the receiver drains it.
fn ring_slots(np: usize) -> usize {
    let min = 16.min(ring::SLOTS);
    (ring::SLOTS * 64 / np.max(1)).clamp(min, ring::SLOTS).next_power_of_two()
}

/// State shared by all ranks of one shm job.
pub(crate) struct ShmWorld {
    np: usize,
    eager_limit: usize,
    policy: WaitPolicy,
    ranks: Box<[RankShared]>,
    /// Rings created so far (one per ordered pair that has talked).
    rings_created: AtomicUsize,
    /// Slots of each ring (see [`ring_slots`]).
    ring_slots: usize,
    /// The failure that aborted the job: the first one recorded, and whether its cause is
    /// still provisional (a rank that is unwinding records itself before its panic message is
    /// known; `run` fills it in).
    first_failure: Mutex<Option<(Failure, bool)>>,
    /// Set (`SeqCst`, after `first_failure`, before the failed rank's state) when a rank fails;
    /// the native collectives' protocol relies on its total order with their `SeqCst` entry
    /// stores (see `coll::area`). So whoever sees a rank failed or the job aborted finds the
    /// first failure recorded, and every error names the rank that failed first.
    aborted: AtomicBool,
    /// Native-collective areas by communicator (context and member list).
    native_areas: coll::Registry,
    /// One-sided window parts by window (id and member list).
    windows: one_sided::Registry,
    /// Every rank is a thread of this process (unless the launcher asked for simulated
    /// processes, see `ShmWorld::with_placement`).
    placement: super::Placement,
}

impl ShmWorld {
    /// Whether this world's ranks time-share cores (waits yield at once instead of spinning).
    pub(crate) fn time_shared(&self) -> bool {
        self.policy.time_shared()
    }

    #[cfg(test)]
    pub fn new(np: usize, eager_limit: usize) -> Arc<Self> {
        Self::with_placement(np, eager_limit, super::Placement::single_process(np), np)
    }

    /// A world whose `placement()` reports `placement` (block-wise simulated processes, or the
    /// local part of a hybrid job) instead of one process. `competing_ranks` is how many ranks
    /// share this process's cores (its own, plus other processes' where they are not bound
    /// elsewhere): it sizes the spin phase of every wait, because a rank that spins while the
    /// rank it waits for has no core starves it.
    pub fn with_placement(
        np: usize,
        eager_limit: usize,
        placement: super::Placement,
        competing_ranks: usize,
    ) -> Arc<Self> {
        assert_eq!(placement.size(), np, "one placement entry per rank");
        super::wait::init_barriers();
        let policy = WaitPolicy::for_ranks(competing_ranks.max(np));
        Arc::new(ShmWorld {
            np,
            eager_limit,
            policy,
            rings_created: AtomicUsize::new(0),
            ring_slots: ring_slots(np),
            ranks: (0..np).map(|_| RankShared::new(policy)).collect(),
            placement,
            first_failure: Mutex::new(None),
            aborted: AtomicBool::new(false),
            native_areas: coll::Registry::default(),
            windows: one_sided::Registry::default(),
        })
    }

    /// The endpoint of `rank`; each rank's endpoint can be taken once, by the thread that runs it.
    pub fn endpoint(self: &Arc<Self>, rank: usize) -> Result<ShmEndpoint> {
        let shared = self.ranks.get(rank).ok_or(Error::RankOutOfRange { rank, size: self.np })?;
        if shared.endpoint_taken.swap(true, Ordering::AcqRel) {
            return Err(Error::InvalidArgument(format!("the endpoint of rank {rank} was already taken")));
        }
        shared.parker.register_current();
        Ok(ShmEndpoint::new(Arc::clone(self), rank))
    }

    /// Records that `rank`'s program returned normally and wakes anyone waiting on it.
    pub fn mark_exited(&self, rank: usize) {
        // SeqCst (not just Release): part of the native collectives' protocol (see `coll::area`).
        self.ranks[rank].state.store(EXITED, Ordering::SeqCst);
        self.wake_all();
    }

    /// Records that `rank` failed with `failure` (its own, or the job's earlier failure it ran
    /// into): the job is aborted and every blocked rank is woken to notice. The first failure
    /// recorded is the job's; a later one only completes a provisional cause of the same rank.
    pub fn mark_failed(&self, rank: usize, failure: Failure) {
        self.record(rank, failure, false);
    }

    /// Records that `rank` is unwinding from a panic whose message `run` will report later:
    /// peers learn now that it failed, before it stops taking part in anything.
    pub fn mark_panicking(&self, rank: usize) {
        let failure = Failure { rank, cause: "panicked".into(), code: None };
        self.record(rank, failure, true);
    }

    fn record(&self, rank: usize, failure: Failure, provisional: bool) {
        // A failure reported by another rank is a consequence it observed: provisional too, so
        // the failed rank's own report (its real cause) still completes it.
        let provisional = provisional || failure.rank != rank;
        {
            let mut first = lock_ignoring_poison(&self.first_failure);
            match &mut *first {
                None => *first = Some((failure, provisional)),
                // Only the failed rank itself completes its provisional cause: a survivor's
                // consequence (PeerFailed naming it) carries the provisional text, and must
                // not make it final before the rank's own cause arrives.
                Some((recorded, true)) if recorded.rank == failure.rank && rank == failure.rank && !provisional => {
                    *recorded = failure;
                    first.as_mut().expect("just matched").1 = false;
                }
                Some(_) => {}
            }
        }
        self.aborted.store(true, Ordering::SeqCst);
        self.ranks[rank].state.store(FAILED, Ordering::SeqCst);
        self.wake_all();
    }

    /// The failure that aborted the job, if one did.
    pub fn first_failure(&self) -> Option<Failure> {
        if !self.is_aborted() {
            return None;
        }
        lock_ignoring_poison(&self.first_failure).as_ref().map(|(failure, _)| failure.clone())
    }

    /// Wakes `rank` if it is parked (a hybrid rank's tcp side heard something for it).
    pub fn notify(&self, rank: usize) {
        self.ranks[rank].parker.notify();
    }

    /// Parks `rank`'s thread (the caller must be it) unless `ready`, as its own waits do.
    pub fn park(&self, rank: usize, ready: &mut dyn FnMut() -> bool) {
        self.ranks[rank].parker.park(ready);
    }

    fn wake_all(&self) {
        for r in self.ranks.iter() {
            r.parker.notify();
        }
    }

    /// Whether a rank failed (`SeqCst` load, see `aborted`).
    fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }

    fn abort_error(&self) -> Option<Error> {
        self.first_failure().map(|failure| failure.peer_error())
    }

    /// The error a rank waiting on `rank` gets, if `rank` is no longer running. A failed rank
    /// means an aborted job, reported as its first failure (which `rank` may only have run into).
    fn gone(&self, rank: usize) -> Option<Error> {
        match self.liveness(rank) {
            Liveness::Running => None,
            Liveness::Exited => Some(Error::PeerExited { rank }),
            Liveness::Failed => self.abort_error(),
        }
    }

    fn liveness(&self, rank: usize) -> Liveness {
        match self.ranks[rank].state.load(Ordering::Acquire) {
            RUNNING => Liveness::Running,
            EXITED => Liveness::Exited,
            _ => Liveness::Failed,
        }
    }

    /// How many per-pair rings the job has created: one per ordered pair of ranks that has
    /// sent point-to-point (tests: a job where few pairs talk stays far below np²).
    pub fn rings_created(&self) -> usize {
        self.rings_created.load(Ordering::Relaxed)
    }
}
