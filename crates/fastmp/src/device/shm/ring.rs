//! Single-producer single-consumer slot ring: one per ordered pair of ranks.
//!
//! A slot is one cache line holding the header and up to [`INLINE_BYTES`] of payload, so a small
//! message costs one cache-line transfer: the consumer polls the slot's sequence word, which the
//! producer writes last. Larger eager payloads go to the slot's pooled spill buffer, which moves
//! with the slot (or is swapped out by the consumer, see [`SlotView::take_spill`]).
//!
//! Ownership protocol: slot `i` belongs to the producer while `head > i - SLOTS` has been observed,
//! and to the consumer once it sees `seq == i + 1`, until it advances `head` past it.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

/// Slots per ring (power of two).
pub(crate) const SLOTS: usize = 64;
/// Payload bytes carried inside the slot's cache line.
pub(crate) const INLINE_BYTES: usize = 24;

/// What a slot carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// Payload is in the slot (inline or spill buffer).
    Eager = 0,
    /// Ready-to-send: the payload stays in the sender's buffer; `record` describes it.
    Rts = 1,
}

/// Message header as written by the producer.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub(crate) struct Header {
    pub len: u64,
    pub tag: i32,
    pub context: u32,
    pub kind: Kind,
    /// Synchronous eager send: the receiver must complete `record` when it matches.
    pub sync: bool,
    /// `Arc<SendRecord>` raw pointer (or 0), owned by the message.
    pub record: usize,
}

#[repr(C, align(64))]
struct Slot {
    /// `index + 1` once the message of ring position `index` is published.
    seq: AtomicU64,
    header: UnsafeCell<Header>,
    inline: UnsafeCell<[u8; INLINE_BYTES]>,
}

/// A slot's pooled buffer for payloads that do not fit inline.
type SpillCell = UnsafeCell<Option<Box<[u8]>>>;

/// The ring of one (sender → receiver) pair.
pub(crate) struct Ring {
    slots: Box<[Slot]>,
    spills: Box<[SpillCell]>,
    /// Consumer's position (messages consumed); written by the consumer only.
    head: CachePadded<AtomicU64>,
    /// Producer's position and its cached copy of `head`; touched by the producer only.
    tail: CachePadded<ProducerPos>,
}

struct ProducerPos {
    tail: AtomicU64,
    head_cache: AtomicU64,
}

// SAFETY: the `UnsafeCell` contents are handed between exactly one producer thread and one
// consumer thread by the seq/head protocol above (Release stores, Acquire loads), so no cell is
// ever accessed by both at once. Callers uphold "one producer, one consumer" (see `push`/`peek`).
unsafe impl Sync for Ring {}
// SAFETY: all fields are owned data; moving the ring between threads is fine.
unsafe impl Send for Ring {}

impl Default for Ring {
    fn default() -> Self {
        Self::new()
    }
}

impl Ring {
    pub fn new() -> Self {
        let slots = (0..SLOTS)
            .map(|_| Slot {
                seq: AtomicU64::new(0),
                header: UnsafeCell::new(Header {
                    len: 0,
                    tag: 0,
                    context: 0,
                    kind: Kind::Eager,
                    sync: false,
                    record: 0,
                }),
                inline: UnsafeCell::new([0; INLINE_BYTES]),
            })
            .collect();
        let spills = (0..SLOTS).map(|_| UnsafeCell::new(None)).collect();
        Ring {
            slots,
            spills,
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(ProducerPos { tail: AtomicU64::new(0), head_cache: AtomicU64::new(0) }),
        }
    }

    /// Publishes a message; `payload` is copied in (eager) and must be empty for an RTS.
    /// Returns `false` if the ring is full.
    ///
    /// # Safety
    /// Only one thread (the ring's producer) may ever call `push` or `producer_idle` on this ring.
    pub unsafe fn push(&self, header: Header, payload: &[u8], spill_capacity: usize) -> bool {
        let pos = &self.tail;
        let tail = pos.tail.load(Ordering::Relaxed);
        if tail - pos.head_cache.load(Ordering::Relaxed) >= SLOTS as u64 {
            // Acquire: the consumer's reads of the slot happen-before our overwrite.
            let head = self.head.load(Ordering::Acquire);
            pos.head_cache.store(head, Ordering::Relaxed);
            if tail - head >= SLOTS as u64 {
                return false;
            }
        }
        let i = (tail as usize) & (SLOTS - 1);
        let slot = &self.slots[i];
        debug_assert!(payload.len() as u64 == header.len || header.kind == Kind::Rts);
        // SAFETY: the slot is the producer's (head > tail - SLOTS, checked above), so no other
        // thread accesses its cells until the Release store of `seq` below.
        unsafe {
            *slot.header.get() = header;
            if payload.len() <= INLINE_BYTES {
                (&mut *slot.inline.get())[..payload.len()].copy_from_slice(payload);
            } else {
                let spill = &mut *self.spills[i].get();
                let buf = match spill {
                    Some(b) if b.len() >= payload.len() => b,
                    _ => spill.insert(vec![0u8; spill_capacity.max(payload.len())].into_boxed_slice()),
                };
                buf[..payload.len()].copy_from_slice(payload);
            }
        }
        slot.seq.store(tail + 1, Ordering::Release);
        pos.tail.store(tail + 1, Ordering::Relaxed);
        true
    }

    /// True when every message this producer pushed has been consumed.
    ///
    /// # Safety
    /// Producer thread only (reads the producer-private position).
    pub unsafe fn producer_idle(&self) -> bool {
        self.head.load(Ordering::Acquire) == self.tail.tail.load(Ordering::Relaxed)
    }

    /// The oldest unconsumed message, if any.
    ///
    /// # Safety
    /// Only one thread (the ring's consumer) may call `peek`/`pop`, and it must not keep a
    /// `SlotView` across `pop`.
    #[inline]
    pub unsafe fn peek(&self) -> Option<SlotView<'_>> {
        let head = self.head.load(Ordering::Relaxed);
        let i = (head as usize) & (SLOTS - 1);
        let slot = &self.slots[i];
        if slot.seq.load(Ordering::Acquire) != head + 1 {
            return None;
        }
        // SAFETY: seq == head+1 (Acquire) means the producer finished writing this slot and will
        // not touch it until we advance `head`; the caller is the only consumer.
        let header = unsafe { *slot.header.get() };
        Some(SlotView { ring: self, index: i, header })
    }

    /// Consumes the message returned by the last `peek`, handing its slot back to the producer.
    ///
    /// # Safety
    /// Consumer thread only, after a successful `peek`.
    #[inline]
    pub unsafe fn pop(&self) {
        let head = self.head.load(Ordering::Relaxed);
        self.head.store(head + 1, Ordering::Release);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Messages never consumed still own their `Arc<SendRecord>`; release it.
        // SAFETY: `&mut self`: no other thread can use the ring now.
        while let Some(view) = unsafe { self.peek() } {
            let record = view.header.record;
            if record != 0 {
                // SAFETY: `record` came from `Arc::into_raw` in the producer and was never consumed.
                drop(unsafe { super::record::SendRecord::from_message(record) });
            }
            // SAFETY: as above.
            unsafe { self.pop() };
        }
    }
}

/// Consumer's view of a published slot.
pub(crate) struct SlotView<'r> {
    ring: &'r Ring,
    index: usize,
    pub header: Header,
}

impl SlotView<'_> {
    /// The eager payload bytes.
    pub fn payload(&self) -> &[u8] {
        let len = self.header.len as usize;
        if len <= INLINE_BYTES {
            // SAFETY: the consumer owns the published slot until `pop` (see `peek`).
            unsafe { &(&*self.ring.slots[self.index].inline.get())[..len] }
        } else {
            // SAFETY: as above; the producer stored a spill buffer of at least `len` bytes.
            unsafe { &(&*self.ring.spills[self.index].get()).as_deref().expect("spilled payload")[..len] }
        }
    }

    /// Takes the spill buffer (payload > inline) leaving `replacement` in the slot, so an
    /// unexpected message can be queued without copying it.
    pub fn take_spill(&self, replacement: Option<Box<[u8]>>) -> Option<Box<[u8]>> {
        // SAFETY: the consumer owns the published slot until `pop` (see `peek`).
        unsafe { std::mem::replace(&mut *self.ring.spills[self.index].get(), replacement) }
    }
}
