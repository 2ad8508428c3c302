//! Waiting policy: spin briefly, then yield, then park.
//!
//! On the development VM a cache-line hand-off costs ~0.17 µs but a futex wake-up ~20 µs, so a
//! waiter that parks early loses two orders of magnitude. Spinning only pays while every rank has
//! a core, though; oversubscribed runs shorten the spin phase and move on to yielding, which hands
//! the core to the rank we are waiting for.

use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::sync::OnceLock;
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
    /// spin a little, then give the core away.
    pub fn for_ranks(np: usize) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if np <= cores {
            WaitPolicy { spins: 20_000, yields: 200 }
        } else {
            WaitPolicy { spins: 64, yields: 64 }
        }
    }
}

/// One rank's wake-up channel: other ranks call [`Parker::notify`] after publishing anything the
/// rank may be waiting for.
#[derive(Default)]
pub(crate) struct Parker {
    parked: CachePadded<AtomicBool>,
    thread: OnceLock<Thread>,
}

impl Parker {
    /// Binds the parker to the calling thread (the rank's thread).
    pub fn register_current(&self) {
        let _ = self.thread.set(std::thread::current());
    }

    /// Wakes the rank if it is parked. Call after the Release store that publishes the event.
    #[inline]
    pub fn notify(&self) {
        // Pairs with the fence in `park`: either the waiter sees our event in its final check, or
        // we see its `parked` flag (Dekker-style).
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }

    /// Parks the calling thread unless `ready` (re-checked after announcing the park) says the
    /// awaited event already happened.
    pub fn park(&self, ready: &mut dyn FnMut() -> bool) {
        self.parked.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
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
