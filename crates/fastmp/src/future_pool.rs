//! Memory for the futures of a rank's nonblocking collectives, reused from one operation to the
//! next. Such a future holds every algorithm's state its collective might run (1–2.5 KiB), past
//! glibc's per-thread cache, so a fresh `Box` per operation cost more allocator work than a
//! small operation's own steps (callgrind, `iallreduce` of 8 bytes on one rank: ~700 of ~4200
//! instructions were `malloc` and `free`).
//!
//! A finished future is dropped in place and its block kept (a few, per layout); the next
//! future of the same layout is written into it. The boxes handed out are ordinary
//! `Pin<Box<..>>`s over memory the global allocator gave with that layout, so one dropped
//! elsewhere (an abandoned operation) simply frees its block.

use std::alloc::Layout;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;

use crate::error::Result;

/// A boxed operation future, as the progress engine keeps it.
pub(crate) type Boxed<'a> = Pin<Box<dyn Future<Output = Result<()>> + 'a>>;

/// Blocks kept for reuse: a rank rarely has more kinds of operation in flight at once.
const KEPT: usize = 4;

/// Freed future blocks of one rank (not `Send`: the engine is per rank).
#[derive(Default)]
pub(crate) struct FuturePool {
    spare: RefCell<Vec<(NonNull<u8>, Layout)>>,
}

impl FuturePool {
    /// The future `make` builds, in a box: in a kept block of its layout when there is one.
    /// Built by a closure so that it is built in its block, not built and then copied there
    /// (callgrind, one-rank 8-byte `iallreduce` round: 2966 → 2573 instructions).
    pub(crate) fn boxed<'a, F: Future<Output = Result<()>> + 'a>(&self, make: impl FnOnce() -> F) -> Boxed<'a> {
        let layout = Layout::new::<F>();
        let kept = {
            let mut spare = self.spare.borrow_mut();
            spare.iter().position(|&(_, l)| l == layout).map(|i| spare.swap_remove(i).0)
        };
        match kept {
            Some(block) => {
                let at = block.cast::<F>().as_ptr();
                // SAFETY: `block` came from the global allocator with `Layout::new::<F>()` (a
                // box of an `F`, see `recycle`) and nothing uses it, so it may hold an `F` and be
                // owned by a `Box<F>`, which frees it with the same layout. A fresh box's memory
                // never moves, so pinning it is sound.
                unsafe {
                    at.write(make());
                    Pin::new_unchecked(Box::from_raw(at))
                }
            }
            None => Box::pin(make()),
        }
    }

    /// Drops a future and keeps its block for [`FuturePool::boxed`].
    pub(crate) fn recycle(&self, future: Boxed<'_>) {
        // SAFETY: the future is dropped in place below and never touched again, so it is not
        // moved while pinned; its block is only reused after that drop.
        let raw = Box::into_raw(unsafe { Pin::into_inner_unchecked(future) });
        // SAFETY: `raw` is the live box's value.
        let layout = Layout::for_value(unsafe { &*raw });
        // SAFETY: the value is valid and dropped once; if its drop unwinds the block leaks.
        unsafe { std::ptr::drop_in_place(raw) };
        if layout.size() == 0 {
            return; // a zero-sized box owns no block
        }
        let block = NonNull::new(raw.cast::<u8>()).expect("a box is never null");
        let mut spare = self.spare.borrow_mut();
        if spare.len() < KEPT {
            spare.push((block, layout));
        } else {
            drop(spare);
            // SAFETY: the box's block, allocated with `layout`.
            unsafe { std::alloc::dealloc(block.as_ptr(), layout) };
        }
    }
}

impl Drop for FuturePool {
    fn drop(&mut self) {
        for (block, layout) in self.spare.get_mut().drain(..) {
            // SAFETY: each kept block came from the global allocator with `layout` and is unused.
            unsafe { std::alloc::dealloc(block.as_ptr(), layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;
    use std::task::{Context, Poll, Waker};

    /// A future that counts its drop in `dropped` and finishes at once.
    fn ready(dropped: &Rc<Cell<u32>>, payload: [u64; 32]) -> impl Future<Output = Result<()>> + 'static {
        struct Guard(Rc<Cell<u32>>);
        impl Drop for Guard {
            fn drop(&mut self) {
                self.0.set(self.0.get() + 1);
            }
        }
        let guard = Guard(dropped.clone());
        async move {
            let _guard = guard;
            assert_eq!(payload.iter().sum::<u64>(), 32 * 7);
            Ok(())
        }
    }

    fn poll(future: &mut Boxed<'_>) -> Poll<Result<()>> {
        future.as_mut().poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_recycled_block_serves_the_next_future_of_its_layout_and_every_future_drops_once() {
        let pool = FuturePool::default();
        let dropped = Rc::new(Cell::new(0));
        let mut first = pool.boxed(|| ready(&dropped, [7; 32]));
        let first_at = (&*first as *const dyn Future<Output = Result<()>>).cast::<u8>();
        assert!(matches!(poll(&mut first), Poll::Ready(Ok(()))));
        pool.recycle(first);
        assert_eq!(dropped.get(), 1);
        let mut second = pool.boxed(|| ready(&dropped, [7; 32]));
        let second_at = (&*second as *const dyn Future<Output = Result<()>>).cast::<u8>();
        assert_eq!(first_at, second_at, "the kept block is reused");
        assert!(matches!(poll(&mut second), Poll::Ready(Ok(()))));
        // An ordinary drop frees a reused block like any box's.
        drop(second);
        assert_eq!(dropped.get(), 2);
    }

    #[test]
    fn unpolled_and_differently_sized_futures_are_dropped_and_kept_apart() {
        let pool = FuturePool::default();
        let dropped = Rc::new(Cell::new(0));
        // Recycled before it ever ran: its captured state is dropped all the same.
        pool.recycle(pool.boxed(|| ready(&dropped, [7; 32])));
        assert_eq!(dropped.get(), 1);
        let mut small = pool.boxed(|| async { Ok(()) });
        assert!(matches!(poll(&mut small), Poll::Ready(Ok(()))));
        pool.recycle(small);
        for _ in 0..2 * KEPT {
            pool.recycle(pool.boxed(|| ready(&dropped, [7; 32])));
        }
        assert_eq!(dropped.get(), 1 + 2 * KEPT as u32);
        assert!(pool.spare.borrow().len() <= KEPT);
    }
}
