//! The `tcp` device (the seeds' iodev): ranks are processes, or threads, joined by a full mesh of
//! TCP connections.
//!
//! Protocols (see [`frame`] and [`protocol`]): messages up to the eager limit are written at once
//! with their header; longer and synchronous ones go by rendezvous (ready-to-send,
//! ready-to-receive, then the payload straight from the sender's buffer into the receiver's).
//! Messages to itself never touch a socket.
//!
//! Progress has two engines ([`progress`]). A rank waiting in the device polls its sockets itself
//! and receives directly; when nobody waits (the rank computes, or its waiter has parked), an
//! input-handler thread blocks in `poll(2)` and does the same work. The two never fight over a
//! connection: each connection's receive and send sides have their own locks, taken with
//! `try_lock` by whoever progresses.
//!
//! Files: `endpoint` (the [`Device`](crate::device::Device) implementation and its requests),
//! `protocol` (what each arriving frame does), `progress` (polling, parking, the input thread),
//! `state` (matching state), `rx`/`tx` (per-connection byte mechanics), `frame` (wire format),
//! `bootstrap`/`handshake` (start-up), `link`/`shm_ring` (same-node connections over
//! shared-memory rings), `peer_memory` (single-copy rendezvous payloads over those).
//!
//! Lock order: a connection's rx lock, then its tx lock, then the matching state. The state lock
//! is never held across I/O. One-sided serving (`one_sided`) takes the window table and a window
//! part's state lock only briefly, under an rx lock at most, never across I/O or another lock.

pub(crate) mod bootstrap;
mod endpoint;
pub(crate) mod frame;
#[cfg(test)]
mod frame_props;
pub(crate) mod fuzzing;
pub(crate) mod handshake;
mod link;
mod one_sided;
#[cfg(test)]
mod one_sided_tests;
#[cfg(test)]
mod paced_tests;
mod peer_memory;
mod progress;
mod protocol;
mod rx;
mod shm_ring;
mod state;
#[cfg(test)]
mod tests;
mod tx;

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use super::wait::WaitPolicy;
use crate::error::Error;
pub(crate) use endpoint::TcpEndpoint;
use rx::Rx;
use state::State;
use tx::Tx;

/// One connection to a peer.
struct Peer {
    link: link::Link,
    /// The peer's process where this one may read its memory (same-node links only): its
    /// rendezvous payloads are then read in one copy (see `peer_memory`).
    reads: Option<peer_memory::PeerProcess>,
    rx: Mutex<Rx>,
    tx: Mutex<Tx>,
    /// The tx queue is not empty (lets progress skip the lock when there is nothing to write).
    tx_busy: AtomicBool,
    /// Both directions are finished (or the connection broke): no longer polled.
    closed: AtomicBool,
    /// Our write side is shut down (after `Bye` and a flushed queue).
    write_shut: AtomicBool,
}

/// Device settings of the tcp device.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TcpOptions {
    pub eager_limit: usize,
    /// Make the input-handler thread a progress thread: it moves data as soon as it arrives,
    /// also while user threads progress by themselves (overlap for nonblocking operations
    /// during long computations, at the cost of a busier core). Off by default.
    pub progress_thread: bool,
    /// Pacing fragment of long payloads in bytes, 0: off (see `tx`).
    pub pace: usize,
    /// Read rendezvous payloads straight from same-node peers' memory where the kernel allows
    /// it (see `peer_memory`); otherwise they cross the link's ring.
    pub peer_reads: bool,
    /// How a waiting user thread spins, yields and parks. The launcher decides it from the
    /// ranks competing for this process's CPUs before it pins any thread: a pinned thread
    /// sees one CPU, and judged from there every rank looked oversubscribed and yielded at once.
    pub policy: WaitPolicy,
}

/// State shared by a rank's user threads and its input-handler thread.
struct Shared {
    rank: usize,
    size: usize,
    eager_limit: usize,
    peers: Vec<Option<Peer>>,
    state: Mutex<State>,
    policy: WaitPolicy,
    /// Bumped (under its lock) when something completed; parked waiters sleep on it.
    epoch: Mutex<u64>,
    woken: Condvar,
    parked: AtomicUsize,
    /// User threads currently polling inside a wait (the input thread stays out of their way).
    active: AtomicUsize,
    /// Counts user-thread progress calls: the input thread takes over only after a quiet spell.
    user_polls: AtomicU64,
    /// The input thread rests here while `active > 0`.
    idle: Mutex<()>,
    idle_cv: Condvar,
    /// Interrupts the input thread's `poll(2)`.
    wake_fd: OwnedFd,
    stop: AtomicBool,
    /// Live handles of the endpoint for the rank's other threads (`Comm::threaded`). While there
    /// are any, a blocked thread cannot conclude that no send to itself will come: another
    /// thread may start one.
    helpers: AtomicUsize,
    /// See [`TcpOptions::progress_thread`].
    progress_thread: bool,
    finalized: AtomicBool,
    /// Process and node of every rank, from the sites the bootstrap exchanged.
    placement: super::Placement,
    /// This rank's exposed window parts, by window id (see `one_sided`).
    windows: one_sided::Windows,
    /// One-sided requests served so far (the input thread keeps polling while they come).
    rma_served: AtomicU64,
    /// Who else to tell when waiters are woken (see [`Waker`]); set once, by a hybrid rank.
    waker: std::sync::OnceLock<Waker>,
    /// Some connections run over shared-memory rings (see `link`).
    shm_links: bool,
}

/// Told whenever the endpoint wakes its waiters: with the job's failure once it is aborted.
/// A hybrid rank parks on its shm parker, not on this endpoint's condition variable, so its
/// waker unparks it (and puts a remote failure on record in its shm world).
pub(crate) type Waker = Box<dyn Fn(Option<&crate::device::Failure>) + Send + Sync>;

/// Parks the waiting thread unless the readiness check it is given says done (see
/// `TcpEndpoint::wait_until_parking`).
pub(crate) type Park<'a> = &'a dyn Fn(&mut dyn FnMut() -> bool);

impl Shared {
    /// Whether only the rank's own thread can call in (no thread handles are out).
    fn single_threaded(&self) -> bool {
        self.helpers.load(Ordering::Acquire) == 0
    }

    /// Fails calls after `finalize`, and calls of other threads after the rank ended (its
    /// connections are closed then).
    fn check_live(&self) -> Result<(), Error> {
        if self.finalized.load(Ordering::Acquire) {
            Err(Error::Finalized("device"))
        } else if self.stop.load(Ordering::Acquire) {
            Err(Error::Finalized("tcp endpoint (its rank has ended)"))
        } else {
            Ok(())
        }
    }

    /// Why a probe that found nothing can never succeed: the job was aborted, or (only inside a
    /// blocking wait, which cannot start the missing send meanwhile) no peer can still send it.
    /// A non-blocking probe otherwise answers "no message".
    fn hopeless(&self, st: &State, spec: super::MatchSpec) -> Option<Error> {
        let blocked = self.active.load(Ordering::Acquire) > 0;
        st.abort_error().or_else(|| blocked.then(|| st.unreachable(self.rank, spec, self.single_threaded())).flatten())
    }
}

fn io_error(what: &str, e: std::io::Error) -> Error {
    Error::other(format!("tcp device: {what}: {e}"))
}
