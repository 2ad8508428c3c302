//! The one way the library touches window memory (see `device::one_sided` for why).
//!
//! A [`Segment`] is one rank's part of a window. Its bytes split into a *word region* (the whole
//! 8-byte words between `align_up(base, 8)` and `align_down(end, 8)`) and at most two short
//! *edges* (only when user memory given to `win_create` is not 8-aligned at its ends).
//! - Word-region bytes are only ever accessed as `AtomicU64` on that grid: whole words with
//!   relaxed loads/stores, partly covered words and sub-word elements with a compare-exchange
//!   loop on their word. No access of another size ever races with them, so concurrent
//!   conflicting operations (erroneous in MPI) give unspecified values, never undefined behaviour.
//!   Bulk runs of whole words go through [`word_copy`], whose vector loops are equivalent to
//!   those relaxed word accesses (its module doc says why).
//! - Edge bytes are accessed only under the segment's edge lock.
//!
//! Accumulates apply per element with one atomic read-modify-write (`fetch_add` and friends on
//! whole 8-byte elements, a compare-exchange loop otherwise), so concurrent accumulates to the
//! same element compose, as MPI requires. Every method checks its range against the segment and
//! is an `Err` outside it, so nothing is ever written outside a window.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

mod word_copy;

use super::lock_ignoring_poison;
use super::one_sided::{AccumulateOp, Element};
use crate::error::{Error, Result};

/// One rank's part of a window, as raw memory accessed only through this module.
pub struct Segment {
    base: *mut u8,
    len: usize,
    /// Byte offsets of the word region: `[words_start, words_end)`, both multiples of 8 from an
    /// 8-aligned address.
    words_start: usize,
    words_end: usize,
    /// Serialises every access to edge bytes (outside the word region).
    edges: Mutex<()>,
}

// SAFETY: a segment is a pointer to memory whose owner promised (`Segment::new`) it stays valid;
// every access through it is atomic (word region) or under `edges`, so sharing it between
// threads creates no data race.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl Segment {
    /// # Safety
    /// `base..base + len` is valid for reads and writes for as long as this segment (or anything
    /// it is shared through) lives, and is not accessed by anyone except through segments over it
    /// while they may be used (the window layer's local-access guard excludes them).
    pub(crate) unsafe fn new(base: *mut u8, len: usize) -> Segment {
        let addr = base as usize;
        let (first, last) = (addr.next_multiple_of(8), (addr + len) / 8 * 8);
        let (words_start, words_end) = if first < last { (first - addr, last - addr) } else { (len, len) };
        Segment { base, len, words_start, words_end, edges: Mutex::new(()) }
    }

    /// Byte length of the segment.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn check(&self, what: &str, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::InvalidArgument(format!(
                "{what}: bytes {offset}..{} lie outside the target's window part of {} bytes",
                offset.saturating_add(len),
                self.len
            ))),
        }
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(
            offset.wrapping_sub(self.words_start).is_multiple_of(8)
                && offset >= self.words_start
                && offset + 8 <= self.words_end
        );
        // SAFETY: the word lies inside the segment (checked by callers against the word region),
        // is 8-aligned, and word-region bytes are only ever accessed as `AtomicU64`.
        unsafe { &*(self.base.add(offset) as *const AtomicU64) }
    }

    /// Splits `[offset, offset + len)` into the edge part before the word region, the word-region
    /// part and the edge part after it (each possibly empty), as byte ranges.
    fn split(&self, offset: usize, len: usize) -> [(usize, usize); 3] {
        let end = offset + len;
        let a = offset.min(self.words_start);
        let a_end = end.min(self.words_start);
        let w = offset.clamp(self.words_start, self.words_end);
        let w_end = end.clamp(self.words_start, self.words_end);
        let z = offset.max(self.words_end);
        let z_end = end.max(self.words_end);
        [(a, a_end.max(a)), (w, w_end.max(w)), (z, z_end.max(z))]
    }

    /// Whether checked bytes `[offset, offset + len)` lie in the word region (the common case:
    /// every part of an allocated window, and of 8-aligned user memory, is all words).
    #[inline]
    fn in_words(&self, offset: usize, len: usize) -> bool {
        offset >= self.words_start && offset + len <= self.words_end
    }

    /// Writes `src` at `offset` (a put).
    #[inline]
    pub(crate) fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check("put", offset, src.len())?;
        if self.in_words(offset, src.len()) {
            self.write_words(offset, src);
            return Ok(());
        }
        for (lo, hi) in self.split(offset, src.len()) {
            if lo == hi {
                continue;
            }
            let part = &src[lo - offset..hi - offset];
            if lo >= self.words_start && hi <= self.words_end {
                self.write_words(lo, part);
            } else {
                let _edges = lock_ignoring_poison(&self.edges);
                // SAFETY: edge bytes inside the segment, accessed only under `edges`.
                unsafe { std::ptr::copy_nonoverlapping(part.as_ptr(), self.base.add(lo), part.len()) };
            }
        }
        Ok(())
    }

    /// Reads `dst.len()` bytes at `offset` into `dst` (a get).
    #[inline]
    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check("get", offset, dst.len())?;
        if self.in_words(offset, dst.len()) {
            self.read_words(offset, dst);
            return Ok(());
        }
        for (lo, hi) in self.split(offset, dst.len()) {
            if lo == hi {
                continue;
            }
            let part = &mut dst[lo - offset..hi - offset];
            if lo >= self.words_start && hi <= self.words_end {
                self.read_words(lo, part);
            } else {
                let _edges = lock_ignoring_poison(&self.edges);
                // SAFETY: edge bytes inside the segment, accessed only under `edges`.
                unsafe { std::ptr::copy_nonoverlapping(self.base.add(lo), part.as_mut_ptr(), part.len()) };
            }
        }
        Ok(())
    }

    /// Copies `len` bytes at `src_offset` of `src` to `offset` of this segment (a copy between two
    /// window parts, as the PGAS collectives make). Whole words that line up on both grids go in
    /// one word copy (`word_copy::copy`, vectorized); anything else through a small stack
    /// buffer. The segments must not be one and the same (ranges could overlap).
    pub(crate) fn copy_from(&self, offset: usize, src: &Segment, src_offset: usize, len: usize) -> Result<()> {
        self.check("copy", offset, len)?;
        src.check("copy", src_offset, len)?;
        debug_assert!(!std::ptr::eq(self, src), "copy within one segment");
        let mut done = 0;
        if self.in_words(offset, len)
            && src.in_words(src_offset, len)
            && (offset - self.words_start).is_multiple_of(8)
            && (src_offset - src.words_start).is_multiple_of(8)
        {
            let n = len / 8;
            word_copy::copy(self.words(offset, n), src.words(src_offset, n));
            done = n * 8;
        }
        let mut bounce = [0u8; 4096];
        while done < len {
            let step = (len - done).min(bounce.len());
            src.read(src_offset + done, &mut bounce[..step])?;
            self.write(offset + done, &bounce[..step])?;
            done += step;
        }
        Ok(())
    }

    /// The whole words `[offset, offset + 8 * n)` of the word region, as atomics.
    fn words(&self, offset: usize, n: usize) -> &[AtomicU64] {
        if n == 0 {
            return &[];
        }
        let _ = self.word(offset + 8 * (n - 1));
        // SAFETY: as in `word`, for each of the `n` consecutive words (the first and last are
        // checked against the word region in debug builds; callers pass whole-word ranges).
        unsafe { std::slice::from_raw_parts(self.base.add(offset) as *const AtomicU64, n) }
    }

    /// Splits word-region bytes `[offset, offset + len)` into a partial first word, whole words
    /// and a partial last word: returns the byte counts (head, whole-word bytes).
    fn word_split(&self, offset: usize, len: usize) -> (usize, usize) {
        let head = ((8 - (offset - self.words_start) % 8) % 8).min(len);
        (head, (len - head) / 8 * 8)
    }

    /// Whole words go as relaxed word stores (vectorized by `word_copy`: the bulk of a large
    /// put); only partly covered words need a compare-exchange.
    fn write_words(&self, offset: usize, src: &[u8]) {
        let (head, whole) = self.word_split(offset, src.len());
        let (first, rest) = src.split_at(head);
        let (middle, last) = rest.split_at(whole);
        self.write_partial(offset, first);
        word_copy::store(self.words(offset + head, whole / 8), middle, self.len);
        self.write_partial(offset + head + whole, last);
    }

    /// Writes `bytes` (inside one word) at `offset`, keeping the word's other bytes.
    fn write_partial(&self, offset: usize, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let word_at = offset - (offset - self.words_start) % 8;
        let lo = offset - word_at;
        let _ = self.word(word_at).fetch_update(Relaxed, Relaxed, |old| {
            let mut b = old.to_ne_bytes();
            b[lo..lo + bytes.len()].copy_from_slice(bytes);
            Some(u64::from_ne_bytes(b))
        });
    }

    fn read_words(&self, offset: usize, dst: &mut [u8]) {
        let (head, whole) = self.word_split(offset, dst.len());
        let (first, rest) = dst.split_at_mut(head);
        let (middle, last) = rest.split_at_mut(whole);
        self.read_partial(offset, first);
        word_copy::load(self.words(offset + head, whole / 8), middle);
        self.read_partial(offset + head + whole, last);
    }

    /// Reads `dst.len()` bytes (inside one word) at `offset`.
    fn read_partial(&self, offset: usize, dst: &mut [u8]) {
        if dst.is_empty() {
            return;
        }
        let word_at = offset - (offset - self.words_start) % 8;
        let lo = offset - word_at;
        dst.copy_from_slice(&self.word(word_at).load(Relaxed).to_ne_bytes()[lo..lo + dst.len()]);
    }

    /// Applies `op` element-wise: `segment[i] = data[i] ∘ segment[i]`, one atomic step per
    /// element; the previous values go to `previous` when given (get-accumulate). With `NoOp`,
    /// `data` is ignored (it may be empty).
    pub(crate) fn accumulate(
        &self,
        offset: usize,
        len: usize,
        data: &[u8],
        mut previous: Option<&mut [u8]>,
        element: Element,
        op: AccumulateOp,
    ) -> Result<()> {
        self.check("accumulate", offset, len)?;
        let size = element.size();
        if !element.supports(op) {
            return Err(Error::InvalidArgument(format!("accumulate: {op:?} is not defined on {element:?}")));
        }
        if !len.is_multiple_of(size) || !offset.is_multiple_of(size) {
            return Err(Error::InvalidArgument(format!(
                "accumulate: {len} bytes at offset {offset} are not whole {element:?} elements"
            )));
        }
        if op != AccumulateOp::NoOp && data.len() != len {
            return Err(Error::InvalidArgument(format!(
                "accumulate: {} origin bytes for {len} target bytes",
                data.len()
            )));
        }
        if previous.as_ref().is_some_and(|p| p.len() != len) {
            return Err(Error::InvalidArgument("get_accumulate: result length differs from the origin's".into()));
        }
        for i in (0..len).step_by(size) {
            let operand = if op == AccumulateOp::NoOp { 0 } else { load_element(&data[i..i + size]) };
            let old = self.apply(offset + i, element, |old| Some(combine(element, op, operand, old)));
            if let Some(p) = previous.as_deref_mut() {
                p[i..i + size].copy_from_slice(&old.to_ne_bytes()[..size]);
            }
        }
        Ok(())
    }

    /// MPI_Fetch_and_op on one element; returns the previous value (low bytes of the `u64`).
    pub(crate) fn fetch_and_op(&self, offset: usize, element: Element, op: AccumulateOp, operand: u64) -> Result<u64> {
        self.check("fetch_and_op", offset, element.size())?;
        check_element(offset, element, op)?;
        Ok(self.apply(offset, element, |old| Some(combine(element, op, operand, old))))
    }

    /// MPI_Compare_and_swap on one element; returns the previous value.
    pub(crate) fn compare_and_swap(&self, offset: usize, element: Element, expected: u64, new: u64) -> Result<u64> {
        self.check("compare_and_swap", offset, element.size())?;
        check_element(offset, element, AccumulateOp::Replace)?;
        let mask = mask(element);
        Ok(self.apply(offset, element, |old| (old == expected & mask).then_some(new & mask)))
    }

    /// Atomically replaces the element at `offset` by `f(old)` (no store for `None`) and returns
    /// the old value, zero-extended.
    fn apply(&self, offset: usize, element: Element, f: impl Fn(u64) -> Option<u64>) -> u64 {
        let size = element.size();
        let mask = mask(element);
        if offset >= self.words_start && offset + size <= self.words_end {
            let word_at = offset - (offset - self.words_start) % 8;
            let shift = (offset - word_at) * 8;
            let word = self.word(word_at);
            // Native endianness: on little-endian targets byte k of the word is bits 8k..8k+8.
            let shift = if cfg!(target_endian = "little") { shift } else { 64 - shift - size * 8 };
            let field = |w: u64| (w >> shift) & mask;
            match word
                .fetch_update(Relaxed, Relaxed, |w| f(field(w)).map(|v| (w & !(mask << shift)) | ((v & mask) << shift)))
            {
                Ok(w) | Err(w) => field(w),
            }
        } else {
            let _edges = lock_ignoring_poison(&self.edges);
            let mut b = [0u8; 8];
            // SAFETY: edge bytes inside the segment (checked), accessed only under `edges`.
            unsafe { std::ptr::copy_nonoverlapping(self.base.add(offset), b.as_mut_ptr(), size) };
            let old = load_element(&b[..size]);
            if let Some(new) = f(old) {
                let nb = new.to_ne_bytes();
                let src = if cfg!(target_endian = "little") { &nb[..size] } else { &nb[8 - size..] };
                // SAFETY: as above.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(offset), size) };
            }
            old
        }
    }
}

fn check_element(offset: usize, element: Element, op: AccumulateOp) -> Result<()> {
    if !element.supports(op) {
        return Err(Error::InvalidArgument(format!("{op:?} is not defined on {element:?}")));
    }
    if !offset.is_multiple_of(element.size()) {
        return Err(Error::InvalidArgument(format!("offset {offset} is not aligned to a {element:?} element")));
    }
    Ok(())
}

fn mask(element: Element) -> u64 {
    match element.size() {
        8 => u64::MAX,
        s => (1u64 << (s * 8)) - 1,
    }
}

/// The element's bytes (native endianness) as the low bytes of a `u64`.
pub(crate) fn load_element(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    if cfg!(target_endian = "little") {
        b[..bytes.len()].copy_from_slice(bytes);
    } else {
        b[8 - bytes.len()..].copy_from_slice(bytes);
    }
    u64::from_ne_bytes(b)
}

/// `operand ∘ old` for one element held in the low bytes of `u64`s.
pub(crate) fn combine(element: Element, op: AccumulateOp, operand: u64, old: u64) -> u64 {
    use AccumulateOp::*;
    macro_rules! int {
        ($t:ty) => {{
            let (a, b) = (operand as $t, old as $t);
            let r: $t = match op {
                Replace => a,
                NoOp => b,
                Sum => a.wrapping_add(b),
                Prod => a.wrapping_mul(b),
                Min => a.min(b),
                Max => a.max(b),
                Band => a & b,
                Bor => a | b,
                Bxor => a ^ b,
                Land => ((a != 0) && (b != 0)) as $t,
                Lor => ((a != 0) || (b != 0)) as $t,
                Lxor => ((a != 0) != (b != 0)) as $t,
            };
            r as u64 & mask(element)
        }};
    }
    macro_rules! float {
        ($t:ty, $bits:ty) => {{
            let (a, b) = (<$t>::from_bits(operand as $bits), <$t>::from_bits(old as $bits));
            let r: $t = match op {
                Replace => a,
                NoOp => b,
                Sum => a + b,
                Prod => a * b,
                Min => a.min(b),
                Max => a.max(b),
                Band | Bor | Bxor | Land | Lor | Lxor => unreachable!("checked by Element::supports"),
            };
            r.to_bits() as u64
        }};
    }
    match element {
        Element::I8 => int!(i8),
        Element::I16 => int!(i16),
        Element::I32 => int!(i32),
        Element::I64 => int!(i64),
        Element::U8 => int!(u8),
        Element::U16 => int!(u16),
        Element::U32 => int!(u32),
        Element::U64 => int!(u64),
        Element::F32 => float!(f32, u32),
        Element::F64 => float!(f64, u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment_over(buf: &mut [u8]) -> Segment {
        // SAFETY: the test keeps `buf` alive and untouched while the segment is used.
        unsafe { Segment::new(buf.as_mut_ptr(), buf.len()) }
    }

    #[test]
    fn put_and_get_at_every_offset_and_alignment() {
        let mut backing = [0u8; 64];
        for start in 0..8 {
            for len in [0usize, 1, 5, 8, 13, 30] {
                let seg_len = 40 - start;
                let region = &mut backing[start..start + seg_len];
                region.fill(0);
                let seg = segment_over(region);
                for offset in 0..=(seg_len - len) {
                    let data: Vec<u8> = (0..len).map(|i| (i + offset + 1) as u8).collect();
                    seg.write(offset, &data).unwrap();
                    let mut back = vec![0u8; len];
                    seg.read(offset, &mut back).unwrap();
                    assert_eq!(back, data, "start {start} len {len} offset {offset}");
                }
                assert!(seg.write(seg_len - len + 1, &vec![0; len.max(1)]).is_err());
            }
        }
    }

    #[test]
    fn copies_between_segments_at_every_phase() {
        let mut a = [0u8; 48];
        let mut b = [0u8; 48];
        for (a_start, b_start) in [(0, 0), (8, 0), (3, 3), (1, 6), (0, 5)] {
            for len in [0usize, 1, 7, 8, 17, 24] {
                let src_bytes: Vec<u8> = (0..40).map(|i| i as u8 + 1).collect();
                a[a_start..a_start + 40].copy_from_slice(&src_bytes);
                b.fill(0);
                let src = segment_over(&mut a[a_start..a_start + 40]);
                let dst = segment_over(&mut b[b_start..b_start + 40]);
                for (from, to) in [(0, 0), (3, 11), (8, 1), (16, 16)] {
                    if from + len > 40 || to + len > 40 {
                        continue;
                    }
                    dst.copy_from(to, &src, from, len).unwrap();
                    let mut back = vec![0u8; len];
                    dst.read(to, &mut back).unwrap();
                    assert_eq!(back, src_bytes[from..from + len], "phases {a_start}/{b_start} len {len} {from}->{to}");
                }
                assert!(dst.copy_from(40 - len, &src, 0, len + 1).is_err());
                assert!(dst.copy_from(0, &src, 40 - len, len + 1).is_err());
            }
        }
    }

    #[test]
    fn writes_stay_inside_the_segment() {
        let mut backing = [0xAAu8; 32];
        let seg = segment_over(&mut backing[3..21]);
        seg.write(0, &[1u8; 18]).unwrap();
        assert!(seg.write(1, &[1u8; 18]).is_err());
        assert!(seg.write(usize::MAX, &[1u8; 2]).is_err());
        let _ = seg;
        assert_eq!(&backing[..3], &[0xAA; 3]);
        assert_eq!(&backing[3..21], &[1; 18]);
        assert_eq!(&backing[21..], &[0xAA; 11]);
    }

    #[test]
    fn accumulate_fetch_and_op_and_cas() {
        let mut backing = vec![0u64; 4];
        let bytes = bytemuck::cast_slice_mut::<u64, u8>(&mut backing);
        let seg = segment_over(bytes);
        let ones: Vec<u8> = bytemuck::cast_slice(&[1i32, 2, 3, 4]).to_vec();
        seg.accumulate(4, 16, &ones, None, Element::I32, AccumulateOp::Sum).unwrap();
        seg.accumulate(4, 16, &ones, None, Element::I32, AccumulateOp::Sum).unwrap();
        let mut out = [0i32; 4];
        seg.read(4, bytemuck::cast_slice_mut(&mut out)).unwrap();
        assert_eq!(out, [2, 4, 6, 8]);
        assert_eq!(seg.fetch_and_op(4, Element::I32, AccumulateOp::Sum, 10).unwrap(), 2);
        assert_eq!(seg.fetch_and_op(4, Element::I32, AccumulateOp::NoOp, 0).unwrap(), 12);
        assert_eq!(seg.compare_and_swap(8, Element::I32, 4, 99).unwrap(), 4);
        assert_eq!(seg.compare_and_swap(8, Element::I32, 4, 5).unwrap(), 99);
        let neg = (-3i32) as u32 as u64;
        assert_eq!(seg.fetch_and_op(12, Element::I32, AccumulateOp::Min, neg).unwrap(), 6);
        assert_eq!(seg.fetch_and_op(12, Element::I32, AccumulateOp::NoOp, 0).unwrap() as u32 as i32, -3);
        let f = 1.5f64.to_bits();
        seg.fetch_and_op(24, Element::F64, AccumulateOp::Replace, f).unwrap();
        assert_eq!(f64::from_bits(seg.fetch_and_op(24, Element::F64, AccumulateOp::Sum, f).unwrap()), 1.5);
        assert_eq!(f64::from_bits(seg.fetch_and_op(24, Element::F64, AccumulateOp::NoOp, 0).unwrap()), 3.0);
        assert!(seg.fetch_and_op(24, Element::F64, AccumulateOp::Band, 0).is_err());
        assert!(seg.fetch_and_op(2, Element::I32, AccumulateOp::Sum, 0).is_err());
    }

    #[test]
    fn concurrent_accumulates_compose() {
        let mut backing = vec![0u64; 2];
        let seg = segment_over(bytemuck::cast_slice_mut(&mut backing));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        seg.fetch_and_op(0, Element::U16, AccumulateOp::Sum, 1).unwrap();
                        seg.fetch_and_op(2, Element::U16, AccumulateOp::Sum, 2).unwrap();
                        seg.fetch_and_op(8, Element::I64, AccumulateOp::Sum, 3).unwrap();
                    }
                });
            }
        });
        assert_eq!(seg.fetch_and_op(0, Element::U16, AccumulateOp::NoOp, 0).unwrap(), 4000);
        assert_eq!(seg.fetch_and_op(2, Element::U16, AccumulateOp::NoOp, 0).unwrap(), 8000);
        assert_eq!(seg.fetch_and_op(8, Element::I64, AccumulateOp::NoOp, 0).unwrap(), 12000);
    }
}
