//! Per-rank reusable temporaries for the in-place collectives, so that a warm rank's
//! `*_in_place` calls allocate nothing (a `buf.to_vec()` per call cost more than the copy itself
//! at 64 KiB: fresh pages fault in).
//!
//! The pool lives in the rank's `ProcessState`; a [`Scratch`] takes one buffer out and gives it
//! back when dropped, so overlapping nonblocking operations each get their own. Buffers are
//! 64-byte lines, aligned for any element type up to that alignment; rarer types get a plain
//! `Vec<T>`. The pool keeps at most [`KEPT`] buffers, each as large as the largest request it
//! served (like an MPI library's internal temporaries, they are freed when the rank ends).

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

use bytemuck::{Pod, Zeroable};

/// The unit of a pooled buffer: alignment for any element type of alignment ≤ 64.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Buffers kept between calls (more than this many outstanding temporaries are freed on return).
const KEPT: usize = 4;

/// The rank's free temporaries.
#[derive(Default)]
pub(crate) struct ScratchPool {
    free: RefCell<Vec<Vec<Line>>>,
}

impl ScratchPool {
    /// A temporary of `len` elements holding a copy of `from` at its start (`from.len() <= len`);
    /// the rest has unspecified (initialized) contents.
    pub(crate) fn copy_of<T: Pod>(&self, from: &[T], len: usize) -> Scratch<'_, T> {
        let mut scratch = self.take(len);
        scratch[..from.len()].copy_from_slice(from);
        scratch
    }

    /// A temporary of `len` elements with unspecified (initialized) contents.
    pub(crate) fn take<T: Pod>(&self, len: usize) -> Scratch<'_, T> {
        if size_of::<T>() == 0 || align_of::<T>() > align_of::<Line>() {
            return Scratch { pool: self, lines: Vec::new(), owned: vec![T::zeroed(); len], len };
        }
        let lines = (len * size_of::<T>()).div_ceil(size_of::<Line>());
        let mut free = self.free.borrow_mut();
        // The smallest buffer that fits, else the largest (grown below): only growth allocates.
        let fitting = (0..free.len()).filter(|&i| free[i].capacity() >= lines).min_by_key(|&i| free[i].capacity());
        let pick = fitting.or_else(|| (0..free.len()).max_by_key(|&i| free[i].capacity()));
        let mut buf = pick.map(|i| free.swap_remove(i)).unwrap_or_default();
        drop(free);
        // Only lines never initialized before are written; reused contents stay (any bytes are
        // valid `Pod` values).
        buf.resize(lines.max(buf.len()), Line::zeroed());
        Scratch { pool: self, lines: buf, owned: Vec::new(), len }
    }
}

/// A temporary from a [`ScratchPool`], given back on drop; dereferences to its `len` elements.
pub(crate) struct Scratch<'p, T: Pod> {
    pool: &'p ScratchPool,
    lines: Vec<Line>,
    /// Element types the lines cannot hold (zero-sized, or aligned beyond 64 bytes).
    owned: Vec<T>,
    len: usize,
}

impl<T: Pod> Deref for Scratch<'_, T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        if self.lines.is_empty() {
            return &self.owned;
        }
        bytemuck::cast_slice(&bytemuck::cast_slice::<Line, u8>(&self.lines)[..self.len * size_of::<T>()])
    }
}

impl<T: Pod> DerefMut for Scratch<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        if self.lines.is_empty() {
            return &mut self.owned;
        }
        let bytes = self.len * size_of::<T>();
        bytemuck::cast_slice_mut(&mut bytemuck::cast_slice_mut::<Line, u8>(&mut self.lines)[..bytes])
    }
}

impl<T: Pod> Drop for Scratch<'_, T> {
    fn drop(&mut self) {
        if self.lines.capacity() == 0 {
            return;
        }
        let mut free = self.pool.free.borrow_mut();
        if free.len() < KEPT {
            free.push(std::mem::take(&mut self.lines));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_buffers_and_keeps_contents_typed() {
        let pool = ScratchPool::default();
        let first = pool.copy_of(&[1u64, 2, 3], 5);
        assert_eq!(&first[..3], &[1, 2, 3]);
        assert_eq!(first.len(), 5);
        let ptr = first.as_ptr().cast::<u8>();
        drop(first);
        // The same buffer comes back for a request that fits, for another element type too.
        let second: Scratch<'_, u16> = pool.take(20);
        assert_eq!(second.as_ptr().cast::<u8>(), ptr);
        assert_eq!(second.len(), 20);
        // Two at once are distinct buffers.
        let third: Scratch<'_, u8> = pool.take(3);
        assert_ne!(third.as_ptr(), second.as_ptr().cast::<u8>());
        assert!(pool.free.borrow().is_empty());
    }

    #[test]
    fn zero_sized_and_overaligned_types_get_their_own_vectors() {
        #[derive(Clone, Copy, Pod, Zeroable)]
        #[repr(C, align(128))]
        struct Wide([u8; 128]);
        let pool = ScratchPool::default();
        let wide = pool.copy_of(&[Wide([7; 128])], 2);
        assert_eq!(wide[0].0, [7; 128]);
        assert_eq!(wide.as_ptr().align_offset(128), 0);
        let unit: Scratch<'_, ()> = pool.take(9);
        assert_eq!(unit.len(), 9);
        drop((wide, unit));
        assert!(pool.free.borrow().is_empty());
    }
}
