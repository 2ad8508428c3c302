//! The `shm` device: ranks are threads of one process, messages move by a single copy.
//!
//! Per ordered pair of ranks there is one SPSC [`ring::Ring`] of cache-line slots; per rank a
//! [`board::Board`] of published posted receives; matching itself (posted vs. unexpected) is
//! private to the receiving rank's thread, so it needs no lock. Protocols:
//! - eager (≤ eager limit): payload copied into the slot or its pooled spill buffer;
//! - rendezvous (> eager limit): the slot carries a ready-to-send; the receiver copies straight
//!   out of the sender's buffer;
//! - receiver-first: a large send that finds a matching published receive copies straight into
//!   it;
//! - synchronous: the receiver acknowledges the match through the send's [`record::SendRecord`].

mod board;
mod coll;
mod endpoint;
pub(crate) mod record;
pub(crate) mod ring;
#[cfg(all(test, not(loom)))]
mod test_support;

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use crossbeam_utils::CachePadded;

pub(crate) use coll::ShmCollectives;
pub(crate) use endpoint::ShmEndpoint;

use super::wait::{Parker, WaitPolicy};
use crate::error::{Error, Result};
use board::Board;
use ring::Ring;

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

#[derive(Default)]
struct RankShared {
    parker: Parker,
    state: CachePadded<AtomicU8>,
    board: Board,
    endpoint_taken: AtomicBool,
}

/// State shared by all ranks of one shm job.
pub(crate) struct ShmWorld {
    np: usize,
    eager_limit: usize,
    policy: WaitPolicy,
    /// `rings[dest * np + source]`: a receiver's incoming rings are contiguous.
    rings: Box<[Ring]>,
    ranks: Box<[RankShared]>,
    /// The rank whose failure aborted the job (set once; its cause is in `causes`).
    first_failure: OnceLock<usize>,
    /// Why each failed rank failed.
    causes: Box<[OnceLock<String>]>,
    /// Set (`SeqCst`, after `first_failure`) when a rank fails; the native collectives' protocol
    /// relies on its total order with their `SeqCst` entry stores (see `coll::area`).
    aborted: AtomicBool,
    /// Native-collective areas by communicator (context and member list).
    native_areas: coll::Registry,
    /// Every rank is a thread of this process.
    placement: super::Placement,
}

impl ShmWorld {
    pub fn new(np: usize, eager_limit: usize) -> Arc<Self> {
        super::wait::init_barriers();
        Arc::new(ShmWorld {
            np,
            eager_limit,
            policy: WaitPolicy::for_ranks(np),
            rings: (0..np * np).map(|_| Ring::new()).collect(),
            ranks: (0..np).map(|_| RankShared::default()).collect(),
            placement: super::Placement::single_process(np),
            first_failure: OnceLock::new(),
            causes: (0..np).map(|_| OnceLock::new()).collect(),
            aborted: AtomicBool::new(false),
            native_areas: coll::Registry::default(),
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

    /// Records that `rank` failed: the job is aborted and every blocked rank is woken to notice.
    pub fn mark_failed(&self, rank: usize, cause: String) {
        // The cause is published before the rank that names it.
        let _ = self.causes[rank].set(cause);
        self.ranks[rank].state.store(FAILED, Ordering::SeqCst);
        let _ = self.first_failure.set(rank);
        self.aborted.store(true, Ordering::SeqCst);
        self.wake_all();
    }

    /// The rank that failed first and why.
    pub fn first_failure(&self) -> Option<(usize, String)> {
        self.first_failure.get().map(|&rank| (rank, self.cause(rank)))
    }

    fn cause(&self, rank: usize) -> String {
        self.causes[rank].get().cloned().unwrap_or_else(|| "unknown".into())
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
        let (rank, cause) = self.first_failure()?;
        Some(Error::PeerFailed { rank, cause })
    }

    /// The error a rank waiting on `rank` gets, if `rank` is no longer running.
    fn gone(&self, rank: usize) -> Option<Error> {
        match self.liveness(rank) {
            Liveness::Running => None,
            Liveness::Exited => Some(Error::PeerExited { rank }),
            Liveness::Failed => Some(Error::PeerFailed { rank, cause: self.cause(rank) }),
        }
    }

    fn liveness(&self, rank: usize) -> Liveness {
        match self.ranks[rank].state.load(Ordering::Acquire) {
            RUNNING => Liveness::Running,
            EXITED => Liveness::Exited,
            _ => Liveness::Failed,
        }
    }

    #[inline]
    fn ring(&self, dest: usize, source: usize) -> &Ring {
        &self.rings[dest * self.np + source]
    }
}
