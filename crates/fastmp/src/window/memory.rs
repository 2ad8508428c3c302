//! A window part's memory: owned (zeroed, aligned allocation of `win_allocate`) or borrowed
//! (`win_create`). It has no `Drop`: memory is released only by [`Part::release`], which the
//! window calls after the device closed the part, so a leaked or failed window leaks its memory
//! rather than freeing what a peer might still reach.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

use crate::error::{Error, Result};

/// Largest element alignment a window supports (a cache line).
pub(crate) const MAX_ALIGN: usize = 64;

/// One rank's part of a window.
pub(crate) struct Part {
    base: NonNull<u8>,
    bytes: usize,
    /// The allocation to give back, for owned memory with a non-zero size.
    owned: Option<Layout>,
}

impl Part {
    /// Checks that windows of `T` are possible (`call` names the creating call).
    pub(crate) fn check_type<T>(call: &str) -> Result<()> {
        if size_of::<T>() == 0 {
            return Err(Error::InvalidArgument(format!(
                "{call}: {} is zero-sized, so a window of it would have no bytes to address",
                std::any::type_name::<T>()
            )));
        }
        if align_of::<T>() > MAX_ALIGN {
            return Err(Error::InvalidArgument(format!(
                "{call}: {} needs {}-byte alignment; windows support at most {MAX_ALIGN}",
                std::any::type_name::<T>(),
                align_of::<T>()
            )));
        }
        Ok(())
    }

    /// `len` zeroed elements of `T`, aligned to `max(8, align_of::<T>())`.
    pub(crate) fn allocate<T>(call: &str, len: usize) -> Result<Part> {
        let align = align_of::<T>().max(8);
        let bytes = len.checked_mul(size_of::<T>()).filter(|&b| b <= isize::MAX as usize - align).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{call}: {len} elements of {} do not fit in memory",
                std::any::type_name::<T>()
            ))
        })?;
        if bytes == 0 {
            // A well-aligned dangling pointer: zero bytes are never accessed.
            let base = NonNull::new(align as *mut u8).expect("non-zero");
            return Ok(Part { base, bytes, owned: None });
        }
        let layout = Layout::from_size_align(bytes, align).expect("size and alignment checked above");
        // SAFETY: `layout` has a non-zero size.
        let base = NonNull::new(unsafe { alloc::alloc_zeroed(layout) })
            .ok_or_else(|| Error::InvalidArgument(format!("{call}: allocating {bytes} bytes for the window failed")))?;
        Ok(Part { base, bytes, owned: Some(layout) })
    }

    /// The caller's memory (borrowed by `win_create` for longer than the part lives).
    pub(crate) fn borrowed<T>(memory: &mut [T]) -> Part {
        let base = NonNull::new(memory.as_mut_ptr().cast::<u8>()).expect("slices are non-null");
        Part { base, bytes: std::mem::size_of_val(memory), owned: None }
    }

    pub(crate) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Gives owned memory back (borrowed memory is the caller's). Only once no device can reach
    /// the part any more (after `RmaWindow::close`, or when it was never exposed).
    pub(crate) fn release(self) {
        if let Some(layout) = self.owned {
            // SAFETY: allocated in `allocate` with this layout, released once (`self` is consumed).
            unsafe { alloc::dealloc(self.base.as_ptr(), layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_zeroed_aligned_and_checked() {
        let p = Part::allocate::<u16>("win_allocate", 5).unwrap();
        assert_eq!(p.bytes(), 10);
        assert_eq!(p.base() as usize % 8, 0);
        // SAFETY: 10 bytes were just allocated (zeroed) at `base`.
        assert!(unsafe { std::slice::from_raw_parts(p.base(), 10) }.iter().all(|&b| b == 0));
        p.release();
        let empty = Part::allocate::<u64>("win_allocate", 0).unwrap();
        assert_eq!((empty.bytes(), empty.base() as usize % 8), (0, 0));
        empty.release();
        assert!(Part::allocate::<u64>("win_allocate", usize::MAX / 4).is_err());
        assert!(Part::check_type::<()>("win_allocate").unwrap_err().to_string().contains("zero-sized"));
        #[repr(align(128))]
        struct Wide(#[allow(dead_code)] u8);
        assert!(Part::check_type::<Wide>("win_allocate").unwrap_err().to_string().contains("at most 64"));
    }
}
