//! Bulk copies between a run of window words and plain memory (or a second window part), as
//! fast as the hardware allows while every window word is still accessed as a relaxed atomic
//! `u64` would be.
//!
//! The portable form is a loop of relaxed `AtomicU64` loads or stores, one per word: sound, but
//! it does not vectorize (a 1 MiB put ran at under Open MPI's `memcpy` speed). On x86_64 the
//! middle of a run goes through an inline-assembly loop of *aligned* vector loads or stores on
//! the window side (AVX when the CPU has it, SSE2 otherwise) and unaligned ones on the plain
//! side. This is equivalent to per-word relaxed atomics:
//! - x86 performs an aligned 16- or 32-byte vector access as accesses that are at least
//!   8-byte-atomic per aligned quadword (Intel SDM vol. 3A §9.1.1; with AVX, aligned 16-byte
//!   accesses are atomic as a whole), so no word is ever observed torn, as with `AtomicU64`;
//! - a relaxed atomic load or store of x86_64 *is* a plain `mov`, with no fence, so the only
//!   orderings given up are ones relaxed accesses never had;
//! - inline assembly is outside the Rust memory model's data-race rule as long as what it does
//!   is something Rust atomics could have done, which is the case here; the compiler treats the
//!   block as opaque memory access (no `nomem`/`readonly`), so it neither caches nor reorders
//!   window words across it;
//! - non-temporal stores (`vmovntdq`, for large stores into large parts) are as atomic per
//!   aligned word as plain ones; being weakly ordered, they are followed by `sfence`, so they
//!   are ordered before the caller's later stores as plain stores would be.
//!
//! The window side is aligned first with single relaxed word accesses, so the vector accesses
//! never straddle a window word boundary or a cache line. Under Miri (which cannot run assembly)
//! and on other architectures the atomic loop does all of it, and the unit tests check both forms
//! against each other at every phase and length.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Stores `src` (any alignment, `8 * dst.len()` bytes) into the window words `dst`, which lie in
/// a window part of `part_len` bytes: a large store into a part far larger than a core's cache
/// streams past the cache (the part is then written as a stream, as the OSU bandwidth tests
/// do; into a smaller part, the data is likely to be read again soon and stays cached).
#[inline]
pub(super) fn store(dst: &[AtomicU64], src: &[u8], part_len: usize) {
    if src.len() < vector::MIN_BYTES {
        // The common small put: nothing to align, no feature check.
        return store_atomic(dst, src);
    }
    assert_eq!(src.len(), dst.len() * 8, "word_copy::store: lengths differ");
    let (head, body) = split(dst);
    store_atomic(&dst[..head], &src[..head * 8]);
    if body > 0 {
        vector::store(&dst[head..head + body], &src[head * 8..(head + body) * 8], part_len);
    }
    store_atomic(&dst[head + body..], &src[(head + body) * 8..]);
}

/// Loads the window words `src` into `dst` (any alignment, `8 * src.len()` bytes).
#[inline]
pub(super) fn load(src: &[AtomicU64], dst: &mut [u8]) {
    if dst.len() < vector::MIN_BYTES {
        return load_atomic(src, dst);
    }
    assert_eq!(dst.len(), src.len() * 8, "word_copy::load: lengths differ");
    let (head, body) = split(src);
    let (dst_head, rest) = dst.split_at_mut(head * 8);
    let (dst_body, dst_tail) = rest.split_at_mut(body * 8);
    load_atomic(&src[..head], dst_head);
    if body > 0 {
        vector::load(&src[head..head + body], dst_body);
    }
    load_atomic(&src[head + body..], dst_tail);
}

/// Copies the window words `src` to the window words `dst` (two different segments: a copy
/// between window parts). Vectorized when both sit at the same phase of the vector alignment
/// (the common case: parts are 64-aligned and offsets whole elements), word by word otherwise.
#[inline]
pub(super) fn copy(dst: &[AtomicU64], src: &[AtomicU64]) {
    assert_eq!(dst.len(), src.len(), "word_copy::copy: lengths differ");
    let (head, body) = split(dst);
    let same_phase = (dst.as_ptr() as usize).wrapping_sub(src.as_ptr() as usize).is_multiple_of(vector::ALIGN);
    if body == 0 || !same_phase {
        return copy_atomic(dst, src);
    }
    copy_atomic(&dst[..head], &src[..head]);
    vector::copy(&dst[head..head + body], &src[head..head + body]);
    copy_atomic(&dst[head + body..], &src[head + body..]);
}

/// The portable form of [`copy`]: one relaxed load and store per word.
#[inline]
fn copy_atomic(dst: &[AtomicU64], src: &[AtomicU64]) {
    for (to, from) in dst.iter().zip(src) {
        to.store(from.load(Relaxed), Relaxed);
    }
}

/// The portable form: one relaxed store per word (`src` is `8 * dst.len()` bytes).
#[inline]
pub(super) fn store_atomic(dst: &[AtomicU64], src: &[u8]) {
    debug_assert_eq!(src.len(), dst.len() * 8);
    for (word, bytes) in dst.iter().zip(src.chunks_exact(8)) {
        word.store(u64::from_ne_bytes(bytes.try_into().expect("8 bytes")), Relaxed);
    }
}

/// The portable form: one relaxed load per word (`dst` is `8 * src.len()` bytes).
#[inline]
pub(super) fn load_atomic(src: &[AtomicU64], dst: &mut [u8]) {
    debug_assert_eq!(dst.len(), src.len() * 8);
    for (word, bytes) in src.iter().zip(dst.chunks_exact_mut(8)) {
        bytes.copy_from_slice(&word.load(Relaxed).to_ne_bytes());
    }
}

/// Splits `words` into (head, body) word counts: the head brings the window side to the vector
/// alignment, the body is whole vector blocks, the rest is the tail. Without a vector form (or
/// for short runs) everything is head.
fn split(words: &[AtomicU64]) -> (usize, usize) {
    let n = words.len();
    if !vector::AVAILABLE || n * 8 < vector::MIN_BYTES {
        return (n, 0);
    }
    let align = vector::ALIGN;
    let addr = words.as_ptr() as usize;
    let head = ((addr.next_multiple_of(align) - addr) / 8).min(n);
    let body = (n - head) * 8 / vector::BLOCK * vector::BLOCK / 8;
    (head, body)
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod vector {
    use std::arch::asm;
    use std::sync::atomic::AtomicU64;

    pub(super) const AVAILABLE: bool = true;
    /// Window-side alignment of the vector accesses (32: AVX; SSE2 needs 16, which 32 implies).
    pub(super) const ALIGN: usize = 32;
    /// Bytes per loop iteration (four vectors of 32, or eight of 16).
    pub(super) const BLOCK: usize = 128;
    /// Below this, the word loop wins (no alignment head, no feature check).
    pub(super) const MIN_BYTES: usize = 256;
    /// A store of this size or more into a part of `STREAMING_PART` bytes or more streams past
    /// the cache (non-temporal): skipping the read-for-ownership of every target line saves a
    /// third of the memory traffic when the part is written as a stream. A heuristic, tuned on
    /// the development VM (2 MiB of L2 per core): 1 MiB puts spread over a 64 MiB part (OSU
    /// put_bw) went 1.4–2.4× faster streamed, while 0.5–2 MiB blocks of a 4 MiB part written
    /// over and over (UOMS memput) went 1.3–1.7× slower, as streamed stores always reach memory.
    const STREAMING_BYTES: usize = 1 << 18;
    const STREAMING_PART: usize = 32 << 20;

    fn has_avx() -> bool {
        std::arch::is_x86_feature_detected!("avx")
    }

    /// `dst` is 32-aligned and a whole number of `BLOCK`s; `src` has as many bytes.
    pub(super) fn store(dst: &[AtomicU64], src: &[u8], part_len: usize) {
        debug_assert!(dst.as_ptr().addr().is_multiple_of(ALIGN) && (dst.len() * 8).is_multiple_of(BLOCK));
        debug_assert_eq!(src.len(), dst.len() * 8);
        let (d, s, n) = (dst.as_ptr() as *mut u8, src.as_ptr(), src.len());
        if has_avx() && n >= STREAMING_BYTES && part_len >= STREAMING_PART {
            // SAFETY: as below; non-temporal stores are as atomic per word as plain ones.
            unsafe { store_avx_streaming(d, s, n) }
        } else if has_avx() {
            // SAFETY: AVX is present (checked above). `s..s + n` is readable (a slice) and
            // `d..d + n` is window memory we may store to as relaxed atomic words (`dst` is a
            // slice of `AtomicU64`, whose interior mutability permits writes through `&`); the
            // stores are 32-aligned vector stores, each 8-byte-atomic per word (module doc).
            unsafe { store_avx(d, s, n) }
        } else {
            // SAFETY: as above, with SSE2 (baseline on x86_64) and 16-aligned stores.
            unsafe { store_sse2(d, s, n) }
        }
    }

    /// `src` is 32-aligned and a whole number of `BLOCK`s; `dst` has as many bytes.
    pub(super) fn load(src: &[AtomicU64], dst: &mut [u8]) {
        debug_assert!(src.as_ptr().addr().is_multiple_of(ALIGN) && (src.len() * 8).is_multiple_of(BLOCK));
        debug_assert_eq!(dst.len(), src.len() * 8);
        let (s, d, n) = (src.as_ptr() as *const u8, dst.as_mut_ptr(), dst.len());
        if has_avx() {
            // SAFETY: AVX is present. `s..s + n` is window memory read as relaxed atomic words
            // (32-aligned vector loads, 8-byte-atomic per word); `d..d + n` is an exclusively
            // borrowed slice.
            unsafe { load_avx(s, d, n) }
        } else {
            // SAFETY: as above, with SSE2 and 16-aligned loads.
            unsafe { load_sse2(s, d, n) }
        }
    }

    /// `dst` and `src` are 32-aligned window words, a whole number of `BLOCK`s.
    pub(super) fn copy(dst: &[AtomicU64], src: &[AtomicU64]) {
        debug_assert!(dst.as_ptr().addr().is_multiple_of(ALIGN) && src.as_ptr().addr().is_multiple_of(ALIGN));
        debug_assert!(dst.len() == src.len() && (dst.len() * 8).is_multiple_of(BLOCK));
        let (d, s, n) = (dst.as_ptr() as *mut u8, src.as_ptr() as *const u8, dst.len() * 8);
        if has_avx() {
            // SAFETY: AVX is present; both ranges are window words we may load and store as
            // relaxed atomic words (slices of `AtomicU64`), with 32-aligned vector accesses,
            // each 8-byte-atomic per word (module doc); the segments differ, so no overlap.
            unsafe { copy_avx(d, s, n) }
        } else {
            // SAFETY: as above, with SSE2 and 16-aligned accesses.
            unsafe { copy_sse2(d, s, n) }
        }
    }

    /// One copy loop of four vector moves per iteration: `$load` from `s`, `$store` to `d`,
    /// `$n` bytes (a non-zero multiple of four vectors), then `$finish` (`vzeroupper` after
    /// AVX, `sfence` after non-temporal stores).
    macro_rules! copy_loop {
        ($load:literal, $store:literal, $class:ident, $ptr:literal, [$w1:literal, $w2:literal, $w3:literal, $step:literal],
         $s:expr, $d:expr, $n:expr, $($finish:literal),*) => {
            asm!(
                "2:",
                concat!($load, " {a}, ", $ptr, " ptr [{s}]"),
                concat!($load, " {b}, ", $ptr, " ptr [{s} + ", $w1, "]"),
                concat!($load, " {c}, ", $ptr, " ptr [{s} + ", $w2, "]"),
                concat!($load, " {e}, ", $ptr, " ptr [{s} + ", $w3, "]"),
                concat!($store, " ", $ptr, " ptr [{d}], {a}"),
                concat!($store, " ", $ptr, " ptr [{d} + ", $w1, "], {b}"),
                concat!($store, " ", $ptr, " ptr [{d} + ", $w2, "], {c}"),
                concat!($store, " ", $ptr, " ptr [{d} + ", $w3, "], {e}"),
                concat!("add {s}, ", $step),
                concat!("add {d}, ", $step),
                concat!("sub {n}, ", $step),
                "jnz 2b",
                $($finish,)*
                s = inout(reg) $s => _,
                d = inout(reg) $d => _,
                n = inout(reg) $n => _,
                a = out($class) _,
                b = out($class) _,
                c = out($class) _,
                e = out($class) _,
                options(nostack),
            )
        };
    }

    /// # Safety
    /// AVX present; `d` 32-aligned; `n` a non-zero multiple of 128; both ranges valid.
    #[target_feature(enable = "avx")]
    unsafe fn store_avx(d: *mut u8, s: *const u8, n: usize) {
        // SAFETY: the caller's contract; the loop touches exactly `s..s + n` and `d..d + n`.
        unsafe {
            copy_loop!("vmovdqu", "vmovdqa", ymm_reg, "ymmword", ["32", "64", "96", "128"], s, d, n, "vzeroupper")
        }
    }

    /// As [`store_avx`] with non-temporal stores (they bypass the cache: a large put does not
    /// read the target's lines first nor evict the origin's working set), fenced at the end so
    /// they are ordered before the caller's later stores, as plain stores would be.
    ///
    /// # Safety
    /// As for [`store_avx`].
    #[target_feature(enable = "avx")]
    unsafe fn store_avx_streaming(d: *mut u8, s: *const u8, n: usize) {
        // SAFETY: the caller's contract; the loop touches exactly `s..s + n` and `d..d + n`.
        unsafe {
            copy_loop!(
                "vmovdqu",
                "vmovntdq",
                ymm_reg,
                "ymmword",
                ["32", "64", "96", "128"],
                s,
                d,
                n,
                "sfence",
                "vzeroupper"
            )
        }
    }

    /// # Safety
    /// AVX present; `s` 32-aligned; `n` a non-zero multiple of 128; both ranges valid.
    #[target_feature(enable = "avx")]
    unsafe fn load_avx(s: *const u8, d: *mut u8, n: usize) {
        // SAFETY: the caller's contract; the loop touches exactly `s..s + n` and `d..d + n`.
        unsafe {
            copy_loop!("vmovdqa", "vmovdqu", ymm_reg, "ymmword", ["32", "64", "96", "128"], s, d, n, "vzeroupper")
        }
    }

    /// # Safety
    /// AVX present; `d` and `s` 32-aligned; `n` a non-zero multiple of 128; both ranges valid
    /// and disjoint.
    #[target_feature(enable = "avx")]
    unsafe fn copy_avx(d: *mut u8, s: *const u8, n: usize) {
        // SAFETY: the caller's contract; the loop touches exactly `s..s + n` and `d..d + n`.
        unsafe {
            copy_loop!("vmovdqa", "vmovdqa", ymm_reg, "ymmword", ["32", "64", "96", "128"], s, d, n, "vzeroupper")
        }
    }

    /// # Safety
    /// `d` and `s` 16-aligned; `n` a non-zero multiple of 64; both ranges valid and disjoint.
    unsafe fn copy_sse2(d: *mut u8, s: *const u8, n: usize) {
        // SAFETY: the caller's contract; the loop touches exactly `s..s + n` and `d..d + n`.
        unsafe { copy_loop!("movdqa", "movdqa", xmm_reg, "xmmword", ["16", "32", "48", "64"], s, d, n,) }
    }

    /// # Safety
    /// `d` 16-aligned; `n` a non-zero multiple of 64; both ranges valid.
    unsafe fn store_sse2(d: *mut u8, s: *const u8, n: usize) {
        // SAFETY: the caller's contract; the loop touches exactly `s..s + n` and `d..d + n`.
        unsafe { copy_loop!("movdqu", "movdqa", xmm_reg, "xmmword", ["16", "32", "48", "64"], s, d, n,) }
    }

    /// # Safety
    /// `s` 16-aligned; `n` a non-zero multiple of 64; both ranges valid.
    unsafe fn load_sse2(s: *const u8, d: *mut u8, n: usize) {
        // SAFETY: the caller's contract; the loop touches exactly `s..s + n` and `d..d + n`.
        unsafe { copy_loop!("movdqa", "movdqu", xmm_reg, "xmmword", ["16", "32", "48", "64"], s, d, n,) }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Each loop (also those the running CPU would not pick) on 32-aligned words.
        #[test]
        fn every_loop_copies_exactly_its_bytes() {
            #[repr(align(32))]
            struct Aligned([u8; 1024]);
            let src: Vec<u8> = (0..1024 + 1).map(|i| (i * 13 + 5) as u8).collect();
            type Store = unsafe fn(*mut u8, *const u8, usize);
            type Load = unsafe fn(*const u8, *mut u8, usize);
            let mut stores: Vec<(Store, usize)> = vec![(store_sse2, 64)];
            let mut loads: Vec<(Load, usize)> = vec![(load_sse2, 64)];
            if has_avx() {
                stores.extend([(store_avx as Store, 128), (store_avx_streaming as Store, 128)]);
                loads.push((load_avx as Load, 128));
            }
            let mut copies: Vec<(Store, usize)> = vec![(copy_sse2, 64)];
            if has_avx() {
                copies.push((copy_avx as Store, 128));
            }
            for (i, &(copy, block)) in copies.iter().enumerate() {
                for n in [block, 3 * block, 896] {
                    let mut from = Aligned([0; 1024]);
                    from.0.copy_from_slice(&src[..1024]);
                    let mut to = Aligned([0xEE; 1024]);
                    // SAFETY: both 32-aligned with room for `n` bytes, disjoint.
                    unsafe { copy(to.0.as_mut_ptr(), from.0.as_ptr(), n) };
                    assert_eq!(&to.0[..n], &src[..n], "copy {i}, {n} bytes");
                    assert!(to.0[n..].iter().all(|&b| b == 0xEE), "copy {i} wrote past {n}");
                }
            }
            for (i, &(store, block)) in stores.iter().enumerate() {
                for n in [block, 3 * block, 896] {
                    let mut window = Aligned([0xEE; 1024]);
                    // SAFETY: `window` is 32-aligned with room for `n` bytes, `src[1..]` has
                    // `n` readable bytes (deliberately unaligned), the CPU has what each loop needs.
                    unsafe { store(window.0.as_mut_ptr(), src[1..].as_ptr(), n) };
                    assert_eq!(&window.0[..n], &src[1..=n], "store {i}, {n} bytes");
                    assert!(window.0[n..].iter().all(|&b| b == 0xEE), "store {i} wrote past {n}");
                }
            }
            for (i, &(load, block)) in loads.iter().enumerate() {
                for n in [block, 3 * block, 896] {
                    let mut window = Aligned([0; 1024]);
                    window.0.copy_from_slice(&src[..1024]);
                    let mut out = vec![0xEEu8; 1025];
                    // SAFETY: as above, with the roles swapped (`out[1..]` unaligned).
                    unsafe { load(window.0.as_ptr(), out[1..].as_mut_ptr(), n) };
                    assert_eq!(&out[1..=n], &src[..n], "load {i}, {n} bytes");
                    assert!(out[0] == 0xEE && out[n + 1..].iter().all(|&b| b == 0xEE), "load {i} wrote outside");
                }
            }
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", not(miri))))]
mod vector {
    use std::sync::atomic::AtomicU64;

    pub(super) const AVAILABLE: bool = false;
    pub(super) const ALIGN: usize = 8;
    pub(super) const BLOCK: usize = 8;
    pub(super) const MIN_BYTES: usize = usize::MAX;

    pub(super) fn store(dst: &[AtomicU64], src: &[u8], _part_len: usize) {
        super::store_atomic(dst, src);
    }

    pub(super) fn load(src: &[AtomicU64], dst: &mut [u8]) {
        super::load_atomic(src, dst);
    }

    pub(super) fn copy(dst: &[AtomicU64], src: &[AtomicU64]) {
        super::copy_atomic(dst, src);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every phase of the window side against the plain side (and against a second window), every
    /// length around the vector thresholds: the vector form must equal the atomic loop, and
    /// touch nothing outside.
    #[test]
    fn vector_copies_match_the_word_loop() {
        let mut window = vec![0u64; 200];
        let mut plain = vec![0u8; 1700];
        for word_phase in 0..5 {
            for byte_phase in [0usize, 1, 3, 8, 13] {
                for words in [0usize, 1, 3, 31, 32, 33, 47, 48, 63, 64, 65, 130, 190] {
                    let src: Vec<u8> = (0..words * 8).map(|i| (i * 7 + word_phase + byte_phase) as u8).collect();
                    window.fill(u64::MAX);
                    plain.fill(0xEE);
                    let atomics = atomics(&mut window);
                    let dst = &atomics[word_phase..word_phase + words];
                    store(dst, &src, usize::MAX);
                    let mut expect = vec![0u8; words * 8];
                    load_atomic(dst, &mut expect);
                    assert_eq!(expect, src, "store: phase {word_phase} words {words}");
                    assert!(atomics[..word_phase].iter().all(|w| w.load(Relaxed) == u64::MAX));
                    assert!(atomics[word_phase + words..].iter().all(|w| w.load(Relaxed) == u64::MAX));
                    let mut second = vec![u64::MAX; 200];
                    let other = self::atomics(&mut second);
                    let to = &other[byte_phase % 5..byte_phase % 5 + words];
                    copy(to, dst);
                    let mut copied = vec![0u8; words * 8];
                    load_atomic(to, &mut copied);
                    assert_eq!(copied, src, "copy: phases {word_phase}/{} words {words}", byte_phase % 5);
                    let out = &mut plain[byte_phase..byte_phase + words * 8];
                    load(dst, out);
                    assert_eq!(out, &src[..], "load: phases {word_phase}/{byte_phase} words {words}");
                    assert!(plain[..byte_phase].iter().all(|&b| b == 0xEE));
                    assert!(plain[byte_phase + words * 8..].iter().all(|&b| b == 0xEE));
                }
            }
        }
    }

    fn atomics(words: &mut [u64]) -> &[AtomicU64] {
        // SAFETY: `AtomicU64` has the size and alignment of `u64`, and the exclusive borrow
        // means nothing else accesses the words meanwhile.
        unsafe { std::slice::from_raw_parts(words.as_mut_ptr() as *const AtomicU64, words.len()) }
    }
}
