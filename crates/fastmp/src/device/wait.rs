//! Waiting policy: spin briefly, then yield, then park.
//!
//! On the development VM a cache-line hand-off costs ~0.17 µs but a futex wake-up ~20 µs, so a
//! waiter that parks early loses two orders of magnitude. Spinning only pays while every rank has
//! a core, though; oversubscribed runs shorten the spin phase and move on to yielding, which hands
//! the core to the rank we are waiting for.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering, compiler_fence, fence};
use std::thread::Thread;
use std::time::Duration;

use crossbeam_utils::CachePadded;

/// How long a parked waiter sleeps before re-checking on its own. Wake-ups are explicit
/// ([`Parker::notify`]); this bound only limits the cost of a missed one.
const PARK_TIMEOUT: Duration = Duration::from_millis(20);

/// Spin/yield budget of one wait.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WaitPolicy {
    pub spins: u32,
    pub yields: u32,
}

impl WaitPolicy {
    /// Ranks ≤ cores: spin ~tens of µs (cheaper than a ~20 µs futex round trip); oversubscribed:
    /// give the core away at once (yield), and park only after many fruitless yields. Spinning
    /// at all while oversubscribed only delays the rank that is awaited: on 2 cores, 4 ranks
    /// with 64 spins first took 9.5 µs per 8-byte shm allreduce and 50 µs per 64 KiB tcp bcast,
    /// against 3.2 and 27 µs when yielding at once.
    pub fn for_ranks(np: usize) -> Self {
        Self::for_ranks_on(np, std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// As [`WaitPolicy::for_ranks`] for `np` ranks sharing `cores` (process ranks bound to one
    /// core each see one core of their own, but share the node's).
    pub fn for_ranks_on(np: usize, cores: usize) -> Self {
        if np <= cores { WaitPolicy { spins: 20_000, yields: 200 } } else { WaitPolicy { spins: 0, yields: 128 } }
    }

    /// Whether ranks time-share cores (the oversubscribed policy: no spin phase).
    pub fn time_shared(&self) -> bool {
        self.spins == 0
    }
}

/// One rank's wake-up channel: other ranks call [`Parker::notify`] after publishing anything the
/// rank may be waiting for.
#[derive(Default)]
pub(crate) struct Parker {
    parked: CachePadded<AtomicBool>,
    thread: OnceLock<Thread>,
    /// Both sides of the handshake take a `SeqCst` fence instead of the asymmetric pair
    /// (see [`Parker::for_policy`]).
    symmetric: bool,
}

impl Parker {
    /// A parker for a rank waiting under `policy`. Ranks that time-share cores park often and
    /// all at once (hundreds in one barrier), and every membarrier interrupts each CPU running
    /// the process under one kernel-wide lock: at 256 ranks it was a fifth of start-up. There a
    /// fence on the notifier is cheap beside the yields around it, so both sides fence.
    pub fn for_policy(policy: WaitPolicy) -> Self {
        Parker { symmetric: policy.time_shared(), ..Parker::default() }
    }

    /// Binds the parker to the calling thread (the rank's thread).
    pub fn register_current(&self) {
        let _ = self.thread.set(std::thread::current());
    }

    /// Wakes the rank if it is parked. Call after the Release store that publishes the event.
    #[inline]
    pub fn notify(&self) {
        // Pairs with the barrier in `park`: either the waiter sees our event in its final
        // check, or we see its `parked` flag (Dekker; asymmetric unless `symmetric`).
        if self.symmetric {
            fence(Ordering::SeqCst);
        } else {
            light_barrier();
        }
        if self.parked.load(Ordering::Relaxed)
            && let Some(t) = self.thread.get()
        {
            t.unpark();
        }
    }

    /// Parks the calling thread unless `ready` (re-checked after announcing the park) says the
    /// awaited event already happened.
    pub fn park(&self, ready: &mut dyn FnMut() -> bool) {
        self.parked.store(true, Ordering::Relaxed);
        if self.symmetric {
            fence(Ordering::SeqCst);
        } else {
            heavy_barrier();
        }
        if !ready() {
            std::thread::park_timeout(PARK_TIMEOUT);
        }
        self.parked.store(false, Ordering::Relaxed);
    }
}

/// Per-wait state machine of the spin → yield → park policy.
pub(crate) struct Backoff {
    policy: WaitPolicy,
    step: u32,
}

/// What the waiter should do next.
pub(crate) enum Pause {
    Spin,
    Yield,
    Park,
}

impl Backoff {
    pub fn new(policy: WaitPolicy) -> Self {
        Backoff { policy, step: 0 }
    }

    #[inline]
    pub fn next(&mut self) -> Pause {
        self.step = self.step.saturating_add(1);
        if self.step <= self.policy.spins {
            Pause::Spin
        } else if self.step <= self.policy.spins + self.policy.yields {
            Pause::Yield
        } else {
            Pause::Park
        }
    }
}

/// Whether `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` is registered for this process.
///
/// Notifiers run on every message, waiters park rarely: with membarrier the notifier's side of the
/// Dekker handshake is a compiler fence, and the parking side pays a syscall that makes every
/// running thread of the process execute a full barrier. A `SeqCst` fence on the notifier would
/// stall each send until the slot's cache line arrived (measured: halves the small-message rate).
fn membarrier_ready() -> bool {
    static READY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *READY.get_or_init(register_membarrier)
}

#[cfg(all(target_os = "linux", not(miri)))]
fn register_membarrier() -> bool {
    const CMD_QUERY: libc::c_long = 0;
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;
    // SAFETY: membarrier takes (cmd, flags, cpu_id) integers and touches no user memory.
    let supported = unsafe { libc::syscall(libc::SYS_membarrier, CMD_QUERY, 0, 0) };
    if supported < 0 || supported & CMD_PRIVATE_EXPEDITED == 0 {
        return false;
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_membarrier, CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 }
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn register_membarrier() -> bool {
    false
}

/// Makes sure the asymmetric barrier is set up before any rank can park (a notifier that saw
/// "not ready" must have used a full fence).
pub(crate) fn init_barriers() {
    let _ = membarrier_ready();
}

#[inline]
pub(crate) fn light_barrier() {
    if membarrier_ready() {
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

pub(crate) fn heavy_barrier() {
    #[cfg(all(target_os = "linux", not(miri)))]
    if membarrier_ready() {
        const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
        // SAFETY: see `register_membarrier`.
        if unsafe { libc::syscall(libc::SYS_membarrier, CMD_PRIVATE_EXPEDITED, 0, 0) } == 0 {
            return;
        }
    }
    fence(Ordering::SeqCst);
}
