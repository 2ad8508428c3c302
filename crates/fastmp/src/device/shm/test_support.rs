//! Helpers for the two-thread unit tests of the ring and the send record: a thread that panics
//! must not leave its partner waiting forever.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set when its thread ends, also by panicking: the peer then stops waiting for it.
pub(super) struct Gone<'a>(pub &'a AtomicBool);

impl Drop for Gone<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Waits (yielding) until `ready` yields a value; panics if the peer thread ended first.
pub(super) fn wait_for<T>(peer_gone: &AtomicBool, mut ready: impl FnMut() -> Option<T>) -> T {
    loop {
        let gone = peer_gone.load(Ordering::Acquire);
        if let Some(v) = ready() {
            return v;
        }
        assert!(!gone, "peer thread ended (panicked?) while this one waits");
        std::thread::yield_now();
    }
}
