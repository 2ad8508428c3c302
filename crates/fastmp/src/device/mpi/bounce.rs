//! The shim's bounce slots (`fastmp_mpi_bounce_*`): small receives are posted to MPI at once
//! into one of them, as `MPI_Recv`/`MPI_Irecv` are, where a matched probe makes Open MPI queue
//! the message as unexpected first (about twice the 8-byte latency). Each slot is address space
//! larger than any message (so MPI never truncates into it), handed to one receive at a time.

use std::cell::Cell;
use std::ffi::c_int;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use super::ffi;
use crate::error::{Error, Result};

/// Receives into buffers up to this long use a slot, at the cost of copying at most this many
/// bytes out of it.
pub(super) const LIMIT: usize = 4096;

/// Free slots, one bit each (the shim has at most 64).
static FREE: AtomicU64 = AtomicU64::new(0);

/// The slot a thread used last, kept for its next receive: a ping-pong takes and gives back a
/// slot per message, and the shared bit set costs two atomic read-modify-writes each time.
/// Given back to [`FREE`] when the thread ends.
struct Cached(Cell<Option<c_int>>);

impl Drop for Cached {
    fn drop(&mut self) {
        if let Some(index) = self.0.take() {
            give_back(index);
        }
    }
}

thread_local! {
    static CACHED: Cached = const { Cached(Cell::new(None)) };
}

fn give_back(index: c_int) {
    FREE.fetch_or(1 << index, Ordering::Release);
}

/// A bounce slot held by one receive; freed when dropped (a forgotten one is only lost to the
/// pool, whose receives then take the matched-probe path).
#[derive(Debug)]
pub(super) struct BounceSlot(c_int);

impl BounceSlot {
    /// A free slot, if the shim could reserve them (not under strict overcommit or a small
    /// `ulimit -v`) and one is free.
    pub(super) fn acquire() -> Option<BounceSlot> {
        if let Some(index) = CACHED.try_with(|c| c.0.take()).ok().flatten() {
            return Some(BounceSlot(index));
        }
        static READY: OnceLock<()> = OnceLock::new();
        READY.get_or_init(|| {
            // SAFETY: no arguments; the shim reserves the slots once (pthread_once).
            let slots = unsafe { ffi::fastmp_mpi_bounce_slots() }.clamp(0, 64) as u32;
            FREE.store(if slots == 64 { u64::MAX } else { (1u64 << slots) - 1 }, Ordering::Release);
        });
        let mut free = FREE.load(Ordering::Acquire);
        while free != 0 {
            let bit = free & free.wrapping_neg();
            match FREE.compare_exchange_weak(free, free & !bit, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => return Some(BounceSlot(bit.trailing_zeros() as c_int)),
                Err(now) => free = now,
            }
        }
        None
    }

    /// The shim's index of the slot.
    pub(super) fn index(&self) -> c_int {
        self.0
    }

    /// Copies the first `copy` bytes of a completed receive of `received` bytes to `buf`.
    ///
    /// # Safety
    /// `buf` holds `copy` writable bytes; the receive posted on this slot has completed.
    pub(super) unsafe fn take(&self, buf: *mut u8, copy: usize, received: usize) {
        // SAFETY: forwarded; the slot is this receive's alone.
        unsafe { ffi::fastmp_mpi_bounce_take(self.0, buf.cast(), copy, received) }
    }
}

impl Drop for BounceSlot {
    fn drop(&mut self) {
        // Kept by this thread if it holds none (a thread being torn down gives it back).
        let spare = CACHED.try_with(|c| c.0.replace(Some(self.0))).unwrap_or(Some(self.0));
        if let Some(index) = spare {
            give_back(index);
        }
    }
}

/// Refuses a message longer than a bounce slot: a small receive on a peer may be posted on one,
/// and MPI may write a message past the end of the buffer it truncates into.
pub(super) fn check_length(len: usize) -> Result<()> {
    // SAFETY: returns a constant of the shim.
    let limit = unsafe { ffi::fastmp_mpi_bounce_bytes() };
    if len > limit {
        return Err(Error::InvalidArgument(format!(
            "mpi device: a message of {len} bytes is longer than the device's largest message ({limit} bytes, the \
             address space reserved for each small receive); send it in parts"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_longer_than_a_slot_are_refused_before_mpi_sees_them() {
        // SAFETY: a constant of the shim.
        let limit = unsafe { ffi::fastmp_mpi_bounce_bytes() };
        assert!(check_length(limit).is_ok());
        let message = check_length(limit + 1).expect_err("one byte too long").to_string();
        assert!(
            message.contains(&format!("{} bytes is longer than the device's largest message", limit + 1)),
            "{message}"
        );
    }

    #[test]
    fn each_slot_is_held_once_and_comes_back_when_dropped() {
        let held: Vec<BounceSlot> = std::iter::from_fn(BounceSlot::acquire).collect();
        // SAFETY: no arguments.
        let slots = unsafe { ffi::fastmp_mpi_bounce_slots() };
        assert_eq!(held.len(), slots as usize, "every reserved slot, once");
        if slots == 0 {
            return; // not reserved here (strict overcommit): receives take the matched-probe path
        }
        let mut indices: Vec<c_int> = held.iter().map(BounceSlot::index).collect();
        indices.sort_unstable();
        indices.dedup();
        assert_eq!(indices.len(), held.len(), "no slot handed out twice");
        drop(held);
        assert!(BounceSlot::acquire().is_some());
    }
}
