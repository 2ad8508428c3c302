//! Bulk payload copies, with the store kind chosen by size.
//!
//! Below [`STREAMING_MIN`] the copy is `ptr::copy_nonoverlapping` (glibc's `memcpy`: `rep movsb`
//! or an AVX loop, both as fast as anything here while source and destination fit in the
//! core's cache). From [`STREAMING_MIN`] on, source plus destination no longer fit in the
//! private L2, and non-temporal stores, which write whole lines to memory without first reading
//! them into the cache, were 1.3–1.5× faster on the development VM (Intel Xeon, L2 4 MiB/core):
//! 2 MiB 19.9 vs 13.6 GB/s, 4 MiB 16.4 vs 12.5, 8 MiB 14.4 vs 10.2; at 1 MiB they lost (21 vs
//! 28). glibc switches to them only above ¾ of the shared L3 per thread, ~100 MiB on that VM.
//!
//! The streaming path is x86_64 only (SSE2 is baseline there; AVX is used when the CPU has it)
//! and never runs under Miri, which takes the portable path.

/// Messages of at least this many bytes are copied with non-temporal stores (measured, above).
pub(crate) const STREAMING_MIN: usize = 2 << 20;

/// Copies `len` bytes from `src` to `dst`, as part of a message of `message_len` bytes (whose
/// size, not the piece's, picks the store kind, so every piece of a split copy agrees). On
/// return every store is globally ordered before the caller's next store (an `sfence` follows
/// streaming stores), so a Release flag published afterwards covers the data.
///
/// # Safety
/// `src` readable and `dst` writable for `len` bytes, the two ranges not overlapping, and no
/// other thread accessing `dst` meanwhile.
pub(crate) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize, message_len: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if message_len >= STREAMING_MIN {
        // SAFETY: forwarded caller contract.
        unsafe { streaming::copy(dst, src, len) };
        return;
    }
    let _ = message_len;
    // SAFETY: forwarded caller contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod streaming {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128, _mm256_loadu_si256, _mm256_stream_si256,
    };

    /// Non-temporal copy: plain copies up to the first 32-byte-aligned destination byte and after
    /// the last whole block, streaming stores in between, then a store fence.
    ///
    /// # Safety
    /// As [`super::copy`].
    pub(super) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) {
        const ALIGN: usize = 32;
        let head = dst.align_offset(ALIGN).min(len);
        let body = (len - head) & !(BLOCK - 1);
        // SAFETY: `head + body <= len`, so every range below lies inside the caller's ranges;
        // `dst + head` is 32-byte aligned (as the streaming stores need) whenever `body > 0`.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, head);
            if std::is_x86_feature_detected!("avx") {
                blocks_avx(dst.add(head), src.add(head), body);
            } else {
                blocks_sse2(dst.add(head), src.add(head), body);
            }
            std::ptr::copy_nonoverlapping(src.add(head + body), dst.add(head + body), len - head - body);
            _mm_sfence();
        }
    }

    /// Bytes per loop iteration (two cache lines).
    const BLOCK: usize = 128;

    /// # Safety
    /// `len` a multiple of `BLOCK`, `dst` 32-byte aligned, ranges as in [`super::copy`], and the
    /// CPU has AVX.
    #[target_feature(enable = "avx")]
    unsafe fn blocks_avx(dst: *mut u8, src: *const u8, len: usize) {
        let (d, s) = (dst.cast::<__m256i>(), src.cast::<__m256i>());
        for block in 0..len / BLOCK {
            let i = block * (BLOCK / 32);
            // SAFETY: `i + 3 < len / 32`: inside both ranges; unaligned loads, aligned stores.
            unsafe {
                let (a, b, c, e) = (
                    _mm256_loadu_si256(s.add(i)),
                    _mm256_loadu_si256(s.add(i + 1)),
                    _mm256_loadu_si256(s.add(i + 2)),
                    _mm256_loadu_si256(s.add(i + 3)),
                );
                _mm256_stream_si256(d.add(i), a);
                _mm256_stream_si256(d.add(i + 1), b);
                _mm256_stream_si256(d.add(i + 2), c);
                _mm256_stream_si256(d.add(i + 3), e);
            }
        }
    }

    /// # Safety
    /// As [`blocks_avx`], SSE2 (always present on x86_64) instead of AVX.
    unsafe fn blocks_sse2(dst: *mut u8, src: *const u8, len: usize) {
        let (d, s) = (dst.cast::<__m128i>(), src.cast::<__m128i>());
        for i in 0..len / 16 {
            // SAFETY: `i < len / 16`: inside both ranges; `dst` 16-byte aligned.
            unsafe { _mm_stream_si128(d.add(i), _mm_loadu_si128(s.add(i))) };
        }
    }

    #[cfg(test)]
    mod tests {
        /// The SSE2 loop directly (the dispatcher takes AVX on most test machines).
        #[test]
        fn sse2_blocks_copy_exactly() {
            let src: Vec<u8> = (0..4096 + 64).map(|i| (i * 7 + 3) as u8).collect();
            let mut dst = vec![0u8; 4096 + 64];
            let off = dst.as_ptr().align_offset(32);
            // SAFETY: 4096 bytes from aligned `dst + off` and from `src + 5` lie inside both vectors.
            unsafe { super::blocks_sse2(dst.as_mut_ptr().add(off), src.as_ptr().add(5), 4096) };
            assert_eq!(&dst[off..off + 4096], &src[5..5 + 4096]);
            assert!(dst[..off].iter().chain(&dst[off + 4096..]).all(|&b| b == 0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copies `len` bytes between offsets `src_off` and `dst_off` (mod 64) of fresh buffers as a
    /// piece of a message of `message_len` bytes; checks the bytes and that nothing around them
    /// changed.
    fn check(src_off: usize, dst_off: usize, len: usize, message_len: usize) {
        let src: Vec<u8> = (0..len + 128).map(|i| (i * 31 + src_off) as u8).collect();
        let mut dst = vec![0xA5u8; len + 128];
        let src_off = src_off + (64 - src.as_ptr() as usize % 64) % 64;
        let dst_off = dst_off + (64 - dst.as_ptr() as usize % 64) % 64;
        // SAFETY: offsets < 128 leave `len` bytes inside each vector; distinct allocations.
        unsafe { copy(dst.as_mut_ptr().add(dst_off), src.as_ptr().add(src_off), len, message_len) };
        assert_eq!(&dst[dst_off..dst_off + len], &src[src_off..src_off + len], "{src_off} {dst_off} {len}");
        assert!(dst[..dst_off].iter().all(|&b| b == 0xA5), "wrote before the range");
        assert!(dst[dst_off + len..].iter().all(|&b| b == 0xA5), "wrote past the range");
    }

    /// Every destination alignment 0..64 with lengths around the block and alignment sizes, on
    /// both paths (the message length picks the path).
    #[test]
    fn every_alignment_and_odd_lengths() {
        let lens: &[usize] =
            if cfg!(miri) { &[0, 1, 31, 33, 129] } else { &[0, 1, 15, 31, 32, 33, 127, 128, 129, 255, 1000, 4099] };
        let offsets = if cfg!(miri) { 0..4 } else { 0..64 };
        for message_len in [1024, STREAMING_MIN] {
            for dst_off in offsets.clone() {
                for &len in lens {
                    check((dst_off * 7) % 64, dst_off, len, message_len);
                }
            }
        }
    }

    /// Pieces at and around the streaming threshold, as whole messages.
    #[test]
    #[cfg_attr(miri, ignore = "megabytes take minutes under Miri; the cases above cover the path")]
    fn lengths_around_the_threshold() {
        for len in [STREAMING_MIN - 1, STREAMING_MIN, STREAMING_MIN + 1, STREAMING_MIN + 63] {
            for off in [0, 1, 17, 32, 63] {
                check(off, (off * 3) % 64, len, len);
            }
        }
    }
}
