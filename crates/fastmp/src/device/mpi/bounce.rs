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

/// Slots a thread gave back, kept for its next receives: taking and giving back a slot through
/// the shared bit set costs two atomic read-modify-writes per message, each a full barrier.
/// A thread keeps at most [`KEPT_MAX`], so others always find some in [`FREE`] (a thread
/// that finds none takes the matched-probe path); all go back when the thread ends.
struct Kept(Cell<u64>);

/// At most this many slots stay with one thread (a window of 48 receives in flight reuses them
/// without touching [`FREE`]).
const KEPT_MAX: u32 = 48;

impl Drop for Kept {
    fn drop(&mut self) {
        let kept = self.0.take();
        if kept != 0 {
            FREE.fetch_or(kept, Ordering::Release);
        }
    }
}

thread_local! {
    static KEPT: Kept = const { Kept(Cell::new(0)) };
}

/// A bounce slot held by one receive; freed when dropped (a forgotten one is only lost to the
/// pool, whose receives then take the matched-probe path).
#[derive(Debug)]
pub(super) struct BounceSlot(c_int);

impl BounceSlot {
    /// A free slot, if the shim could reserve them (not under strict overcommit or a small
    /// `ulimit -v`) and one is free.
    pub(super) fn acquire() -> Option<BounceSlot> {
        if let Ok(Some(index)) = KEPT.try_with(|k| take_lowest(&k.0)) {
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

/// Takes the lowest slot of a thread's kept set.
fn take_lowest(kept: &Cell<u64>) -> Option<c_int> {
    let set = kept.get();
    (set != 0).then(|| {
        kept.set(set & (set - 1));
        set.trailing_zeros() as c_int
    })
}

impl Drop for BounceSlot {
    fn drop(&mut self) {
        let bit = 1u64 << self.0;
        // Kept by this thread below its share (a thread being torn down gives it back).
        let kept = KEPT
            .try_with(|k| {
                let set = k.0.get();
                let keep = set.count_ones() < KEPT_MAX;
                if keep {
                    k.0.set(set | bit);
                }
                keep
            })
            .unwrap_or(false);
        if !kept {
            FREE.fetch_or(bit, Ordering::Release);
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

    /// One test takes every slot, so none runs beside it in this binary.
    #[test]
    fn each_slot_is_held_once_comes_back_when_dropped_and_a_thread_keeps_only_its_share() {
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
        // This thread kept KEPT_MAX of them; the others are free for any thread.
        let others = std::thread::spawn(|| std::iter::from_fn(BounceSlot::acquire).collect::<Vec<_>>().len())
            .join()
            .expect("thread");
        let kept = KEPT_MAX.min(slots as u32) as usize;
        assert_eq!(others, slots as usize - kept, "another thread finds all but this thread's share");
        let again: Vec<BounceSlot> = std::iter::from_fn(BounceSlot::acquire).collect();
        assert_eq!(again.len(), slots as usize, "the other thread gave its slots back when it ended");
    }
}
