//! Single-producer single-consumer slot ring: one per ordered pair of ranks.
//!
//! A slot is exactly one cache line holding a compact header and up to [`INLINE_BYTES`] of payload,
//! so a small message costs one cache-line transfer: the consumer polls the slot's sequence word,
//! which the producer writes last. A payload of up to [`CONTINUED_BYTES`] runs on into the next
//! slots' whole lines (a *continued* message: consecutive lines, no pointer to follow). Larger eager
//! payloads go to the slot's pooled spill buffer, which moves with the slot (or is swapped out by
//! the consumer, see [`SlotView::take_spill`]). The sender's record reference (synchronous and
//! rendezvous sends only) lives beside the slot, so the common message never pays for it in the
//! line.
//!
//! Ownership protocol: slot `i` belongs to the producer while `head > i - slots` has been observed,
//! and to the consumer once it sees `seq == i + 1`, until it advances `head` past it (by the
//! message's slot count). A continued message overwrites its later slots' sequence words with
//! payload; before the producer publishes a message whose successor would start on such a slot, it
//! stores 0 there (never a valid sequence), so the consumer can never take stale payload for a
//! header.

use crossbeam_utils::CachePadded;

use super::record::{RecordRef, SendRecord};
use crate::sync::{AtomicU64, Ordering, UnsafeCell};

/// Slots per ring (power of two), unless the job asks for fewer ([`Ring::with_slots`]).
#[cfg(not(loom))]
pub(crate) const SLOTS: usize = 64;
/// Slots per ring: few under loom, so that its models reach the full-ring case.
#[cfg(loom)]
pub(crate) const SLOTS: usize = 4;
/// Payload bytes carried inside the slot's cache line (64 − 8 sequence − 16 header).
pub(crate) const INLINE_BYTES: usize = 40;
/// Most slots one continued message takes (under loom: one, as the models look at each slot's
/// cells separately and a continued payload spans them).
#[cfg(not(loom))]
const MAX_CONTINUED_SLOTS: usize = 2;
#[cfg(loom)]
const MAX_CONTINUED_SLOTS: usize = 1;
/// Largest eager payload carried in the ring's own lines (header slot plus whole continuation
/// slots); larger ones spill.
pub(crate) const CONTINUED_BYTES: usize = INLINE_BYTES + (MAX_CONTINUED_SLOTS - 1) * 64;
/// How many messages ahead the producer asks for a writable slot line (see `Ring::prepare_ahead`).
const PREFETCH_AHEAD: u64 = 4;
/// How much of an upcoming spill buffer the producer asks for ahead (Intel VM, against 256:
/// osu_latency at 512 B 0.31 vs 0.39 µs, osu_bw at 512 B 1.2× higher; 1024 lost at 1 KiB bcast).
const PREFETCH_SPILL_BYTES: usize = 512;

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
    /// The `Arc<SendRecord>` reference this message owns, if any.
    pub record: Option<RecordRef>,
}

/// [`Header`] as stored in the slot: 16 bytes (a 48-bit length; the record is kept beside the slot).
#[derive(Clone, Copy)]
#[repr(C)]
struct SlotHeader {
    len_low: u32,
    tag: i32,
    context: u32,
    len_high: u16,
    kind: Kind,
    /// [`SYNC`] and [`HAS_RECORD`] bits.
    flags: u8,
}

const SYNC: u8 = 1;
const HAS_RECORD: u8 = 2;
/// The payload runs on into the following slots (see [`slots_for`]).
const CONTINUED: u8 = 4;

/// Slots a payload of `len` bytes takes when carried in the ring's lines.
const fn slots_for(len: usize) -> usize {
    if len <= INLINE_BYTES { 1 } else { 1 + (len - INLINE_BYTES).div_ceil(64) }
}

/// Lengths a slot header can carry: more than a 48-bit address space can hold, so any buffer that
/// exists fits.
const MAX_LEN: u64 = (1 << 48) - 1;

impl SlotHeader {
    fn new(h: &Header) -> Self {
        assert!(h.len <= MAX_LEN, "message length {} exceeds the ring's 48-bit length", h.len);
        SlotHeader {
            len_low: h.len as u32,
            tag: h.tag,
            context: h.context,
            len_high: (h.len >> 32) as u16,
            kind: h.kind,
            flags: if h.sync { SYNC } else { 0 } | if h.record.is_some() { HAS_RECORD } else { 0 },
        }
    }

    fn len(&self) -> u64 {
        u64::from(self.len_low) | (u64::from(self.len_high) << 32)
    }

    /// Whether the message owns a record reference (kept in the ring's `records`).
    fn has_record(&self) -> bool {
        self.flags & HAS_RECORD != 0
    }

    /// Ring slots the message takes.
    fn slots(&self) -> usize {
        if self.flags & CONTINUED != 0 { slots_for(self.len() as usize) } else { 1 }
    }
}

/// Hints the cache to fetch `addr`'s line for writing (x86 `prefetchw`; a no-op elsewhere).
#[inline]
fn prefetch_for_write(addr: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
    // SAFETY: a prefetch reads nothing the program sees and cannot fault, whatever the address;
    // CPUs without PREFETCHW execute its encoding as a no-op.
    unsafe {
        std::arch::asm!("prefetchw [{0}]", in(reg) addr, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri), not(loom))))]
    let _ = addr;
}

#[repr(C, align(64))]
struct Slot {
    /// `index + 1` once the message of ring position `index` is published; 0 or an older value
    /// before (or continued payload, until the producer clears it, see `ProducerPos::overwritten`).
    seq: AtomicU64,
    header: UnsafeCell<SlotHeader>,
    inline: UnsafeCell<[u8; INLINE_BYTES]>,
}

// One cache line per slot: a larger slot would make every message touch two lines.
#[cfg(not(loom))]
const _: () = assert!(size_of::<Slot>() == 64 && std::mem::offset_of!(Slot, inline) + INLINE_BYTES == 64);

/// A slot's pooled buffer for payloads that do not fit inline.
type SpillCell = UnsafeCell<Option<SpillBuf>>;

/// One cache line of a [`SpillBuf`].
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// A spill buffer: whole cache lines, starting on a line. A payload of `n` lines then touches
/// exactly `n` lines, all of which `Ring::prepare_ahead` can ask for (from the allocator's
/// 16-byte alignment, 128 bytes spanned three lines, the last one fetched on demand).
pub(crate) struct SpillBuf(Box<[Line]>);

impl SpillBuf {
    /// A zeroed buffer of at least `bytes` bytes (rounded up to whole lines).
    pub fn new(bytes: usize) -> Self {
        SpillBuf(vec![Line([0; 64]); bytes.div_ceil(64)].into_boxed_slice())
    }
}

impl std::ops::Deref for SpillBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

impl std::ops::DerefMut for SpillBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(&mut self.0)
    }
}

/// A slot's record reference, for the messages that carry one (see [`SlotHeader::has_record`]).
type RecordCell = UnsafeCell<Option<RecordRef>>;

/// The ring of one (sender → receiver) pair.
pub(crate) struct Ring {
    slots: Box<[Slot]>,
    spills: Box<[SpillCell]>,
    records: Box<[RecordCell]>,
    /// Consumer's position (messages consumed); written by the consumer only.
    head: CachePadded<AtomicU64>,
    /// Producer's position and its cached copy of `head`; touched by the producer only.
    tail: CachePadded<ProducerPos>,
}

struct ProducerPos {
    tail: AtomicU64,
    head_cache: AtomicU64,
    /// Bit `i`: slot `i`'s sequence word last held continued payload, so it must be cleared before
    /// the consumer may look at it as a header (rings have at most 64 slots).
    overwritten: AtomicU64,
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
        Self::with_slots(SLOTS)
    }

    /// A ring of `count` slots (a power of two): jobs of many ranks take fewer per pair.
    pub fn with_slots(count: usize) -> Self {
        assert!(count.is_power_of_two(), "ring slots must be a power of two, got {count}");
        assert!(count <= 64, "rings have at most 64 slots (one bit each in `overwritten`), got {count}");
        let slots = (0..count)
            .map(|_| Slot {
                seq: AtomicU64::new(0),
                header: UnsafeCell::new(SlotHeader::new(&Header {
                    len: 0,
                    tag: 0,
                    context: 0,
                    kind: Kind::Eager,
                    sync: false,
                    record: None,
                })),
                inline: UnsafeCell::new([0; INLINE_BYTES]),
            })
            .collect();
        let spills = (0..count).map(|_| UnsafeCell::new(None)).collect();
        let records = (0..count).map(|_| UnsafeCell::new(None)).collect();
        Ring {
            slots,
            spills,
            records,
            head: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(ProducerPos {
                tail: AtomicU64::new(0),
                head_cache: AtomicU64::new(0),
                overwritten: AtomicU64::new(0),
            }),
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
        let count = self.slots.len();
        let i = (tail as usize) & (count - 1);
        // A payload that fits in a few lines and does not wrap past the ring's end continues into
        // the next slots; others spill.
        let wanted = slots_for(payload.len());
        let continues = payload.len() > INLINE_BYTES && payload.len() <= CONTINUED_BYTES;
        let slots = if continues && wanted < count && i + wanted <= count { wanted } else { 1 };
        let next = (i + slots) & (count - 1);
        let overwritten = pos.overwritten.load(Ordering::Relaxed);
        let clear_next = overwritten & (1 << next) != 0;
        // Slots this message needs, plus its successor's when stale payload must be cleared there.
        let needed = (slots + usize::from(clear_next)) as u64;
        if tail + needed - pos.head_cache.load(Ordering::Relaxed) > count as u64 {
            // Acquire: the consumer's reads of the slot happen-before our overwrite.
            let head = self.head.load(Ordering::Acquire);
            pos.head_cache.store(head, Ordering::Relaxed);
            if tail + needed - head > count as u64 {
                return false;
            }
        }
        let slot = &self.slots[i];
        debug_assert!(payload.len() as u64 == header.len || header.kind == Kind::Rts);
        let mut stored = SlotHeader::new(&header);
        // SAFETY (cells below): the slots `i..i + slots` (and `next` when cleared) are the
        // producer's (head > tail + needed - count, checked above), so no other thread accesses
        // them until the Release store of `seq` below.
        // This slot's sequence word is about to be valid again; continuation slots' stop being.
        let mut now_overwritten = overwritten & !(1 << i);
        if slots > 1 {
            stored.flags |= CONTINUED;
            // SAFETY: as above; the slots are consecutive (no wrap) and `payload` fits in them.
            unsafe { self.continued_bytes(i).copy_from_nonoverlapping(payload.as_ptr(), payload.len()) };
            now_overwritten |= ((1u64 << slots) - 2) << i;
        }
        if clear_next {
            // Relaxed: ordered before the consumer's look at it by the Release store below.
            self.slots[next].seq.store(0, Ordering::Relaxed);
            now_overwritten &= !(1 << next);
        }
        if now_overwritten != overwritten {
            pos.overwritten.store(now_overwritten, Ordering::Relaxed);
        }
        // SAFETY: as above.
        slot.header.with_mut(|h| unsafe { *h = stored });
        if stored.has_record() {
            // SAFETY: as above.
            self.records[i].with_mut(|r| unsafe { *r = header.record });
        }
        if slots == 1 && payload.len() <= INLINE_BYTES {
            // SAFETY: as above.
            slot.inline.with_mut(|inline| unsafe { (&mut *inline)[..payload.len()].copy_from_slice(payload) });
        } else if slots == 1 {
            // SAFETY: as above.
            if self.spills[i].with(|spill| unsafe { (*spill).is_none() }) {
                let free_end = pos.head_cache.load(Ordering::Relaxed) + count as u64;
                // SAFETY: every slot in `tail..free_end` is the producer's (the cached head is at
                // most the consumer's real one).
                unsafe { self.provide_spills(tail..free_end, spill_capacity) };
            }
            self.spills[i].with_mut(|spill| {
                // SAFETY: as above.
                let spill = unsafe { &mut *spill };
                let buf = match spill {
                    Some(b) if b.len() >= payload.len() => b,
                    _ => spill.insert(SpillBuf::new(spill_capacity.max(payload.len()))),
                };
                buf[..payload.len()].copy_from_slice(payload);
            });
        }
        slot.seq.store(tail + 1, Ordering::Release);
        pos.tail.store(tail + slots as u64, Ordering::Relaxed);
        self.prepare_ahead(tail + slots as u64 - 1 + PREFETCH_AHEAD, payload.len());
        true
    }

    /// Asks for ring position `position`'s line (and, when this message spilled, the first lines
    /// of its spill buffer) in a writable state, a few messages before the producer writes there:
    /// the consumer read it last, so otherwise each message's first store waits for the line to
    /// come back, and a window of small sends is a chain of such waits.
    #[inline]
    fn prepare_ahead(&self, position: u64, len: usize) {
        let i = position as usize & (self.slots.len() - 1);
        prefetch_for_write(std::ptr::from_ref(&self.slots[i]).cast());
        // The spill cell is the producer's only once the consumer has left that position.
        if len > INLINE_BYTES && position < self.tail.head_cache.load(Ordering::Relaxed) + self.slots.len() as u64 {
            // SAFETY: the position is the producer's (checked against the cached head, which is
            // at most the consumer's real one), and only the producer calls `push`.
            let spill = self.spills[i].with(|spill| unsafe { (*spill).as_deref().map(<[u8]>::as_ptr) });
            if let Some(buf) = spill {
                for line in (0..len.min(PREFETCH_SPILL_BYTES)).step_by(64) {
                    prefetch_for_write(buf.wrapping_add(line));
                }
            }
        }
    }

    /// Where a continued payload starting in slot `i` lies: the slot's inline bytes and the whole
    /// lines of the slots after it, one run of memory.
    ///
    /// # Safety
    /// `i + slots_for(len)` must not pass the ring's end for the `len` bytes accessed; whoever
    /// accesses them must own those slots (see the module's protocol).
    #[cfg(not(loom))]
    unsafe fn continued_bytes(&self, i: usize) -> *mut u8 {
        // Every byte of a slot is inside an `UnsafeCell` (the sequence word's atomic included), so
        // writing through a pointer from the shared slice is allowed; the pointer comes from the
        // whole slice, so it may run on past slot `i`.
        let base = self.slots.as_ptr().cast::<u8>().cast_mut();
        // SAFETY: in bounds of the slot slice (the caller keeps `i` a slot index).
        unsafe { base.add(i * size_of::<Slot>() + std::mem::offset_of!(Slot, inline)) }
    }

    /// Continued messages do not exist under loom (`MAX_CONTINUED_SLOTS` is 1).
    #[cfg(loom)]
    unsafe fn continued_bytes(&self, _i: usize) -> *mut u8 {
        unreachable!("no continued messages under loom")
    }

    /// Gives every slot in `positions` that has no spill buffer one of `capacity` bytes, at once.
    /// Done at a slot's first spilled payload, so that a program's hot loop allocates nothing once
    /// any spill has happened: the receiver-first path (see the endpoint) leaves no trace in the
    /// ring, so which slots a program spills through would otherwise vary from run to run.
    ///
    /// # Safety
    /// Producer thread only, and every position in `positions` must be the producer's.
    unsafe fn provide_spills(&self, positions: std::ops::Range<u64>, capacity: usize) {
        let mask = self.slots.len() - 1;
        for p in positions {
            self.spills[p as usize & mask].with_mut(|spill| {
                // SAFETY: the caller guarantees the slot is the producer's.
                let spill = unsafe { &mut *spill };
                if spill.is_none() {
                    *spill = Some(SpillBuf::new(capacity));
                }
            });
        }
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
        let i = (head as usize) & (self.slots.len() - 1);
        let slot = &self.slots[i];
        if slot.seq.load(Ordering::Acquire) != head + 1 {
            return None;
        }
        self.prefetch(i + 1);
        // SAFETY: seq == head+1 (Acquire) means the producer finished writing this slot (and the
        // continuation slots of a continued message) and will not touch it until we advance
        // `head`; the caller is the only consumer.
        let stored = slot.header.with(|h| unsafe { *h });
        let slots = stored.slots();
        debug_assert!(slots <= MAX_CONTINUED_SLOTS);
        for later in 2..=slots.min(MAX_CONTINUED_SLOTS) {
            self.prefetch(i + later);
        }
        // SAFETY: as above (the record cell is written before the same Release store).
        let record = if stored.has_record() { self.records[i].with(|r| unsafe { *r }) } else { None };
        let header = Header {
            len: stored.len(),
            tag: stored.tag,
            context: stored.context,
            kind: stored.kind,
            sync: stored.flags & SYNC != 0,
            record,
        };
        Some(SlotView { ring: self, index: i, continued: slots > 1, header })
    }

    /// Starts loading ring position `position`'s line while the current message is handled:
    /// a streaming sender has usually written it already, so its cache miss overlaps our work
    /// instead of following it (one miss per message otherwise bounds the small-message rate).
    #[inline]
    fn prefetch(&self, position: usize) {
        #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
        {
            let slot: *const Slot = &self.slots[position & (self.slots.len() - 1)];
            // SAFETY: SSE is part of x86_64's baseline, and a prefetch only hints the cache: it
            // reads nothing the program sees and cannot fault (the address is a live slot anyway).
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(slot.cast()) };
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri), not(loom))))]
        let _ = position;
    }

    /// Consumes the message returned by the last `peek`, handing its slot back to the producer.
    ///
    /// # Safety
    /// Consumer thread only, after a successful `peek`.
    #[inline]
    pub unsafe fn pop(&self) {
        let head = self.head.load(Ordering::Relaxed);
        let i = (head as usize) & (self.slots.len() - 1);
        // SAFETY: the slot is still ours (published, `head` not yet advanced past it).
        let slots = self.slots[i].header.with(|h| unsafe { (*h).slots() });
        self.head.store(head + slots as u64, Ordering::Release);
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Messages never consumed still own their `Arc<SendRecord>`; release it.
        // SAFETY: `&mut self`: no other thread can use the ring now.
        while let Some(view) = unsafe { self.peek() } {
            if let Some(record) = view.header.record {
                // SAFETY: `record` came from `into_message` in the producer and was never consumed.
                drop(unsafe { SendRecord::from_message(record) });
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
    /// The payload runs on into the following slots.
    continued: bool,
    pub header: Header,
}

impl SlotView<'_> {
    /// The eager payload bytes.
    pub fn payload(&self) -> &[u8] {
        let len = self.header.len as usize;
        if self.continued {
            // SAFETY: the consumer owns the published message's slots until `pop` (see `peek`);
            // the producer wrote `len` bytes there in one run without wrapping.
            unsafe { std::slice::from_raw_parts(self.ring.continued_bytes(self.index), len) }
        } else if len <= INLINE_BYTES {
            // SAFETY: the consumer owns the published slot until `pop` (see `peek`).
            self.ring.slots[self.index].inline.with(|inline| unsafe { &(&*inline)[..len] })
        } else {
            // SAFETY: as above; the producer stored a spill buffer of at least `len` bytes.
            let spill = self.ring.spills[self.index].with(|spill| unsafe { &*spill });
            &spill.as_deref().expect("spilled payload")[..len]
        }
    }

    /// Whether the payload lies in the ring's own lines past this slot (so there is no spill
    /// buffer to take).
    pub fn is_continued(&self) -> bool {
        self.continued
    }

    /// Takes the spill buffer (payload > inline) leaving `replacement` in the slot, so an
    /// unexpected message can be queued without copying it. `&mut self`: no `payload()` slice
    /// can outlive the buffer it points into.
    pub fn take_spill(&mut self, replacement: Option<SpillBuf>) -> Option<SpillBuf> {
        // SAFETY: the consumer owns the published slot until `pop` (see `peek`).
        self.ring.spills[self.index].with_mut(|spill| unsafe { std::mem::replace(&mut *spill, replacement) })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    //! Two-thread tests of the SPSC protocol on the real ring (also run under Miri, see
    //! `scripts/miri.sh`): content and order of varied payloads (0 B, inline, spilled), the
    //! full-ring case, spill hand-over, and release of unconsumed records on drop.

    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    use super::super::record::SendRecord;
    use super::super::test_support::{Gone, wait_for};
    use super::*;

    /// Payload sizes cycled through: empty, inline, exactly inline, just continued, continued,
    /// fully continued, just spilled, spilled.
    const SIZES: [usize; 13] =
        [0, 1, 7, 23, 24, 25, INLINE_BYTES, INLINE_BYTES + 1, 39, 100, CONTINUED_BYTES, CONTINUED_BYTES + 1, 3];
    /// Sizes of messages that take one slot each (inline or spilled), for counting slots.
    const ONE_SLOT_SIZES: [usize; 11] = [0, 1, 7, 23, 24, 25, INLINE_BYTES, CONTINUED_BYTES + 1, 39, 300, 3];
    const SPILL_CAPACITY: usize = 64;

    fn byte(i: usize, j: usize) -> u8 {
        (i.wrapping_mul(31) ^ j.wrapping_mul(7)) as u8
    }

    fn payload(i: usize) -> Vec<u8> {
        payload_from(&SIZES, i)
    }

    fn payload_from(sizes: &[usize], i: usize) -> Vec<u8> {
        (0..sizes[i % sizes.len()]).map(|j| byte(i, j)).collect()
    }

    fn eager(i: usize, len: usize) -> Header {
        Header {
            len: len as u64,
            tag: i as i32,
            context: (i * 3) as u32,
            kind: Kind::Eager,
            sync: i.is_multiple_of(2),
            record: None,
        }
    }

    fn rts(i: usize, len: usize, record: RecordRef) -> Header {
        Header { len: len as u64, tag: i as i32, context: 7, kind: Kind::Rts, sync: false, record: Some(record) }
    }

    fn check(view: &SlotView<'_>, i: usize) {
        check_from(&SIZES, view, i);
    }

    fn check_from(sizes: &[usize], view: &SlotView<'_>, i: usize) {
        let want = payload_from(sizes, i);
        assert_eq!(view.header.len, want.len() as u64, "message {i}: length");
        assert_eq!(view.header.tag, i as i32, "message {i}: tag");
        assert_eq!(view.header.context, (i * 3) as u32, "message {i}: context");
        assert_eq!(view.header.kind, Kind::Eager);
        assert_eq!(view.header.sync, i.is_multiple_of(2));
        assert_eq!(view.payload(), &want[..], "message {i}: payload");
    }

    #[test]
    fn single_thread_full_ring_and_wraparound() {
        full_ring_and_wraparound(Ring::new(), SLOTS);
        // The smaller rings of jobs with many ranks.
        full_ring_and_wraparound(Ring::with_slots(8), 8);
    }

    fn one_slot(i: usize) -> Vec<u8> {
        payload_from(&ONE_SLOT_SIZES, i)
    }

    fn full_ring_and_wraparound(ring: Ring, slots: usize) {
        // SAFETY (whole test): this thread is both the only producer and the only consumer.
        unsafe {
            assert!(ring.peek().is_none());
            assert!(ring.producer_idle());
            for i in 0..slots {
                let p = one_slot(i);
                assert!(ring.push(eager(i, p.len()), &p, SPILL_CAPACITY), "slot {i} should be free");
            }
            assert!(!ring.producer_idle());
            // Full: the next push must fail (twice, to exercise the refreshed head cache) and leave
            // the ring unchanged.
            let p = one_slot(slots);
            assert!(!ring.push(eager(slots, p.len()), &p, SPILL_CAPACITY));
            assert!(!ring.push(eager(slots, p.len()), &p, SPILL_CAPACITY));
            // Consume one, then exactly one more fits.
            check_from(&ONE_SLOT_SIZES, &ring.peek().expect("published"), 0);
            ring.pop();
            assert!(ring.push(eager(slots, p.len()), &p, SPILL_CAPACITY));
            let q = one_slot(slots + 1);
            assert!(!ring.push(eager(slots + 1, q.len()), &q, SPILL_CAPACITY));
            // Drain in order across the wrap-around.
            for i in 1..=slots {
                let view = ring.peek().expect("published");
                check_from(&ONE_SLOT_SIZES, &view, i);
                // Peeking again without popping shows the same message.
                check_from(&ONE_SLOT_SIZES, &ring.peek().expect("still published"), i);
                ring.pop();
            }
            assert!(ring.peek().is_none());
            assert!(ring.producer_idle());
        }
    }

    #[test]
    fn take_spill_hands_the_buffer_over() {
        let ring = Ring::new();
        // SAFETY (whole test): single thread acting as the only producer and consumer.
        unsafe {
            // A spilled payload: the consumer takes the buffer without a replacement.
            let big: Vec<u8> = (0..150).map(|j| byte(1, j)).collect();
            assert!(ring.push(eager(0, big.len()), &big, 256));
            let mut view = ring.peek().expect("published");
            assert!(!view.is_continued());
            assert_eq!(view.payload(), &big[..]);
            let spill = view.take_spill(None).expect("spill buffer");
            assert_eq!(spill.len(), 256, "allocated with the requested spill capacity");
            assert_eq!(spill.as_ptr() as usize % 64, 0, "spill buffers start on a cache line");
            assert_eq!(&spill[..150], &big[..]);
            ring.pop();

            // Cycle back to slot 0 with empty messages, then spill again: the producer must
            // allocate a fresh buffer (the old one was taken).
            for i in 1..SLOTS {
                assert!(ring.push(eager(i, 0), &[], 0));
                ring.peek().expect("published");
                ring.pop();
            }
            let big2: Vec<u8> = (0..200).map(|j| byte(2, j)).collect();
            assert!(ring.push(eager(SLOTS, big2.len()), &big2, 64));
            let mut view = ring.peek().expect("published");
            assert_eq!(view.payload(), &big2[..]);
            // Replace it with a buffer too small for the next payload...
            let spill2 = view.take_spill(Some(SpillBuf::new(8))).expect("spill buffer");
            assert_eq!(spill2.len(), 256, "payload larger than the spill capacity sizes the buffer (whole lines)");
            assert_eq!(&spill2[..200], &big2[..]);
            ring.pop();
            // ...which the producer must then replace, not overflow.
            for i in 1..SLOTS {
                assert!(ring.push(eager(SLOTS + i, 0), &[], 0));
                ring.peek().expect("published");
                ring.pop();
            }
            let big3: Vec<u8> = (0..150).map(|j| byte(3, j)).collect();
            assert!(ring.push(eager(2 * SLOTS, big3.len()), &big3, 48));
            let mut view = ring.peek().expect("published");
            assert_eq!(view.payload(), &big3[..]);
            // A large-enough replacement is reused as is.
            let spill3 = view.take_spill(Some(SpillBuf::new(512))).expect("spill buffer");
            assert_eq!(&spill3[..150], &big3[..]);
            ring.pop();
            for i in 1..SLOTS {
                assert!(ring.push(eager(i, 0), &[], 0));
                ring.pop();
            }
            let big4: Vec<u8> = (0..300).map(|j| byte(4, j)).collect();
            assert!(ring.push(eager(0, big4.len()), &big4, 32));
            assert_eq!(ring.peek().expect("published").payload(), &big4[..]);
            ring.pop();
        }
    }

    /// A continued message's payload overwrites the next slot's sequence word. Here that payload
    /// is exactly the sequence number the consumer will expect when, one lap later, a header
    /// position lands on that slot: the producer must have cleared it, or the consumer would take
    /// stale payload for a published message. Also: a continued message never wraps past the
    /// ring's end (it spills there), and the ring fills up by slots, not by messages.
    #[test]
    fn continued_payload_is_never_taken_for_a_header() {
        const N: usize = 16;
        let ring = Ring::with_slots(N);
        // SAFETY (whole test): this thread is both the only producer and the only consumer.
        unsafe {
            // Position 0: a continued message over slots 0 and 1; the bytes over slot 1's sequence
            // word read as the sequence number of position N + 1.
            let mut first = vec![0xC5u8; 2 * 64 - 24];
            first[INLINE_BYTES..INLINE_BYTES + 8].copy_from_slice(&(N as u64 + 2).to_le_bytes());
            assert!(ring.push(eager(0, first.len()), &first, 0));
            let view = ring.peek().expect("published");
            assert!(view.is_continued());
            assert_eq!(view.payload(), &first[..]);
            ring.pop();
            assert!(ring.peek().is_none(), "the continuation slot is not a message");
            // Positions 2..=N: one-slot messages, consumed as they come, up to the slot before
            // the stale one's next lap.
            for i in 2..=N {
                assert!(ring.push(eager(i, 3), &[1, 2, 3], 0));
                let view = ring.peek().expect("published");
                assert_eq!(view.header.tag, i as i32);
                ring.pop();
                assert!(ring.peek().is_none(), "nothing is published after position {i}");
            }
            // Position N + 1 (slot 1) is published only now.
            assert!(ring.push(eager(N + 1, 0), &[], 0));
            assert_eq!(ring.peek().expect("published").header.tag, (N + 1) as i32);
            ring.pop();

            // The ring fills by slots: from slot 2, N / 2 two-slot messages fill all N slots
            // (none straddles the end: slots 2..N, then 0 and 1).
            let two: Vec<u8> = (0..CONTINUED_BYTES).map(|j| byte(7, j)).collect();
            let mut pushed = 0;
            while ring.push(eager(pushed, two.len()), &two, 0) {
                pushed += 1;
            }
            assert_eq!(pushed, N / 2, "two slots each");
            for _ in 0..pushed {
                assert_eq!(ring.peek().expect("published").payload(), &two[..]);
                ring.pop();
            }
            // Near the end of the ring, a message that would wrap spills instead.
            for i in 0..N - 1 {
                let p = ring.tail.tail.load(Ordering::Relaxed) as usize;
                if p % N == N - 1 {
                    break;
                }
                assert!(ring.push(eager(i, 0), &[], 0));
                ring.pop();
            }
            assert!(ring.push(eager(99, two.len()), &two, 256));
            let mut view = ring.peek().expect("published");
            assert!(!view.is_continued(), "a message that would wrap spills");
            assert_eq!(view.payload(), &two[..]);
            assert!(view.take_spill(None).is_some());
            ring.pop();
            assert!(ring.producer_idle());
        }
    }

    #[test]
    fn rts_carries_no_payload_and_drop_releases_unconsumed_records() {
        let rec = SendRecord::new();
        {
            let ring = Ring::new();
            // SAFETY (block): single thread acting as the only producer and consumer.
            unsafe {
                for i in 0..5 {
                    let raw = SendRecord::into_message(Arc::clone(&rec));
                    assert!(ring.push(rts(i, 1 << 20, raw), &[], 0));
                }
                assert_eq!(Arc::strong_count(&rec), 6);
                // Consume two the way the endpoint does: take the reference back exactly once.
                for i in 0..2 {
                    let view = ring.peek().expect("published");
                    assert_eq!(view.header.kind, Kind::Rts);
                    assert_eq!(view.header.tag, i);
                    assert_eq!(view.header.len, 1 << 20);
                    drop(SendRecord::from_message(view.header.record.expect("rts record")));
                    ring.pop();
                }
                // One eager message without a record in the middle of the unconsumed ones.
                assert!(ring.push(eager(9, 3), &[1, 2, 3], 0));
            }
            assert_eq!(Arc::strong_count(&rec), 4);
        }
        // Dropping the ring released the three references still in flight.
        assert_eq!(Arc::strong_count(&rec), 1);
    }

    /// Producer and consumer on two threads: every message arrives once, in order, intact, also
    /// while the ring keeps filling up (the consumer is slowed down periodically).
    #[test]
    fn two_threads_fifo_with_full_ring() {
        let n: usize = if cfg!(miri) { 3 * SLOTS + 7 } else { 50_000 };
        let ring = Ring::new();
        let (producer_gone, consumer_gone) = (AtomicBool::new(false), AtomicBool::new(false));
        std::thread::scope(|s| {
            s.spawn(|| {
                let _gone = Gone(&producer_gone);
                for i in 0..n {
                    let p = payload(i);
                    // SAFETY: this thread is the ring's only producer.
                    wait_for(&consumer_gone, || {
                        unsafe { ring.push(eager(i, p.len()), &p, SPILL_CAPACITY) }.then_some(())
                    });
                }
                // `producer_idle` turns true once the consumer has popped everything.
                // SAFETY: producer thread.
                wait_for(&consumer_gone, || unsafe { ring.producer_idle() }.then_some(()));
            });
            s.spawn(|| {
                let _gone = Gone(&consumer_gone);
                let mut spare: Option<SpillBuf> = None;
                for i in 0..n {
                    // SAFETY: this thread is the ring's only consumer; the view is dropped before
                    // `pop`.
                    let mut view = wait_for(&producer_gone, || unsafe { ring.peek() });
                    check(&view, i);
                    let len = view.header.len as usize;
                    if len > INLINE_BYTES && !view.is_continued() && i % 3 == 0 {
                        // Take the spill (as for an unexpected message) and give back the one
                        // taken last time, like the endpoint's spare pool.
                        let taken = view.take_spill(spare.take()).expect("spilled payload");
                        assert_eq!(&taken[..len], &payload(i)[..]);
                        spare = Some(taken);
                    }
                    // SAFETY: consumer thread, after a successful peek.
                    unsafe { ring.pop() };
                    if i % 97 == 0 {
                        // Let the producer fill the ring.
                        for _ in 0..8 {
                            std::thread::yield_now();
                        }
                    }
                }
                // SAFETY: consumer thread.
                assert!(unsafe { ring.peek() }.is_none());
            });
        });
    }

    /// Records travel through the ring as raw `Arc` pointers; the consumer takes each back once
    /// and acknowledges it, and the producer sees every acknowledgement.
    #[test]
    fn two_threads_records_in_flight() {
        let n: usize = if cfg!(miri) { 40 } else { 5_000 };
        let ring = Ring::new();
        let records: Vec<Arc<SendRecord>> = (0..n).map(|_| SendRecord::new()).collect();
        let (producer_gone, consumer_gone) = (AtomicBool::new(false), AtomicBool::new(false));
        std::thread::scope(|s| {
            s.spawn(|| {
                let _gone = Gone(&producer_gone);
                for (i, rec) in records.iter().enumerate() {
                    let raw = SendRecord::into_message(Arc::clone(rec));
                    let p = payload(i);
                    let mut h = eager(i, p.len());
                    h.record = Some(raw);
                    // SAFETY: only producer.
                    wait_for(&consumer_gone, || unsafe { ring.push(h, &p, SPILL_CAPACITY) }.then_some(()));
                }
                for rec in &records {
                    wait_for(&consumer_gone, || (rec.state() == super::super::record::DONE).then_some(()));
                }
            });
            s.spawn(|| {
                let _gone = Gone(&consumer_gone);
                for i in 0..n {
                    // SAFETY: only consumer; view dropped before pop.
                    let view = wait_for(&producer_gone, || unsafe { ring.peek() });
                    assert_eq!(view.payload(), &payload(i)[..]);
                    // SAFETY: the message owns one reference; taken back once.
                    let rec = unsafe { SendRecord::from_message(view.header.record.expect("record")) };
                    // SAFETY: consumer, after peek.
                    unsafe { ring.pop() };
                    assert!(rec.acknowledge());
                }
            });
        });
        for rec in &records {
            assert_eq!(Arc::strong_count(rec), 1);
        }
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! Loom models of the real ring (SLOTS = 4 under loom): every interleaving of one producer
    //! and one consumer, with loom checking each slot-cell access against the seq/head protocol.
    //! Run with `scripts/loom.sh`.

    use loom::sync::Arc;
    use loom::sync::atomic::AtomicBool;

    use super::*;

    fn header(tag: i32, len: usize) -> Header {
        Header { len: len as u64, tag, context: 9, kind: Kind::Eager, sync: false, record: None }
    }

    /// Message `i`'s payload: one inline, one spilled (> INLINE_BYTES), one empty.
    fn payload(i: usize) -> Vec<u8> {
        let len = [5, INLINE_BYTES + 8, 0][i % 3];
        (0..len).map(|j| (i * 31 + j) as u8).collect()
    }

    /// Consumer: waits for message `i` and checks its header and payload.
    fn consume(ring: &Ring, i: usize) {
        loop {
            // SAFETY: the calling thread is the ring's only consumer; the view is dropped before
            // `pop`.
            if let Some(view) = unsafe { ring.peek() } {
                let want = payload(i);
                assert_eq!((view.header.tag, view.header.len, view.header.context), (i as i32, want.len() as u64, 9));
                assert_eq!(view.payload(), &want[..], "message {i}: payload");
                break;
            }
            loom::thread::yield_now();
        }
        // SAFETY: consumer thread, after a successful peek.
        unsafe { ring.pop() };
    }

    /// Three messages (inline, spilled, empty) arrive intact and in order while producer and
    /// consumer run concurrently; the producer's `producer_idle` ends true.
    #[test]
    fn fifo_inline_spilled_empty() {
        loom::model(|| {
            let ring = Arc::new(Ring::new());
            let producer = {
                let ring = Arc::clone(&ring);
                loom::thread::spawn(move || {
                    for i in 0..3 {
                        let p = payload(i);
                        // SAFETY: this thread is the ring's only producer.
                        assert!(unsafe { ring.push(header(i as i32, p.len()), &p, 0) }, "4 slots hold 3 messages");
                    }
                    // SAFETY: producer thread.
                    while !unsafe { ring.producer_idle() } {
                        loom::thread::yield_now();
                    }
                })
            };
            for i in 0..3 {
                consume(&ring, i);
            }
            // SAFETY: consumer thread.
            assert!(unsafe { ring.peek() }.is_none());
            producer.join().unwrap();
        });
    }

    /// The producer fills all 4 slots; a fifth push fails while the ring is full and succeeds once
    /// the consumer has popped one (the producer refreshes its cached head); all 5 messages arrive
    /// in order.
    #[test]
    fn full_ring_then_pop_frees_a_slot() {
        loom::model(|| {
            let ring = Arc::new(Ring::new());
            let popped = Arc::new(AtomicBool::new(false));
            let producer = {
                let (ring, popped) = (Arc::clone(&ring), Arc::clone(&popped));
                loom::thread::spawn(move || {
                    for i in 0..SLOTS {
                        let p = payload(i);
                        // SAFETY: this thread is the ring's only producer.
                        assert!(unsafe { ring.push(header(i as i32, p.len()), &p, 0) }, "slot {i} is free");
                    }
                    let p = payload(SLOTS);
                    let h = header(SLOTS as i32, p.len());
                    // SAFETY (both pushes): producer thread.
                    if !unsafe { ring.push(h, &p, 0) } {
                        // Full: once the consumer says it popped, the push must go through.
                        while !popped.load(Ordering::Acquire) {
                            loom::thread::yield_now();
                        }
                        assert!(unsafe { ring.push(h, &p, 0) }, "a popped slot is free again");
                    }
                })
            };
            consume(&ring, 0);
            popped.store(true, Ordering::Release);
            for i in 1..=SLOTS {
                consume(&ring, i);
            }
            producer.join().unwrap();
        });
    }
}
