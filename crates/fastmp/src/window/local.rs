//! The owner's plain access to its part ([`LocalGuard`]) and direct access to the parts of a
//! shared-memory window ([`SharedPart`]).

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use bytemuck::Pod;

use super::{LocalGuard, SharedPart, Window};
use crate::error::{Error, Result};

impl<T: Pod> Window<'_, T> {
    pub(super) fn local_impl(&self) -> Result<LocalGuard<'_, T>> {
        self.core.usable("local")?;
        self.core.dev.begin_local_access()?;
        self.core.local.set(true);
        Ok(LocalGuard { core: &self.core, _part: PhantomData })
    }

    pub(super) fn shared_query_impl(&self, rank: usize) -> Result<SharedPart<'_, T>> {
        self.core.usable("shared_query")?;
        if !self.core.shared {
            return Err(Error::InvalidArgument(
                "shared_query: the window was not created by win_allocate_shared".into(),
            ));
        }
        if rank >= self.size() {
            return Err(Error::RankOutOfRange { rank, size: self.size() });
        }
        Ok(SharedPart { core: &self.core, rank, _part: PhantomData })
    }
}

impl<T> LocalGuard<'_, T> {
    fn part(&self) -> *mut [T] {
        // The part holds whole elements, aligned for `T` (owned: aligned to max(8, align_of T);
        // borrowed: it came from a `&mut [T]`).
        std::ptr::slice_from_raw_parts_mut(self.core.base.cast::<T>(), self.core.bytes / size_of::<T>())
    }
}

impl<T> Deref for LocalGuard<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: between begin_local_access and end_local_access (this guard's life) no origin's
        // operation is inside the part, this rank's own operations are refused (`Core::usable`),
        // and no other guard exists (the `local` flag): the memory is this guard's alone.
        unsafe { &*self.part() }
    }
}

impl<T> DerefMut for LocalGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`; `&mut self` makes the borrow exclusive.
        unsafe { &mut *self.part() }
    }
}

impl<T> Drop for LocalGuard<'_, T> {
    fn drop(&mut self) {
        self.core.local.set(false);
        self.core.dev.end_local_access();
    }
}

impl<T: Pod> SharedPart<'_, T> {
    /// Elements in this part.
    pub fn len(&self) -> usize {
        self.core.dev.part_lengths()[self.rank] / size_of::<T>()
    }
    /// Whether the part is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The element at `index`.
    pub fn load(&self, index: usize) -> Result<T> {
        let mut value = [T::zeroed()];
        self.core.get("SharedPart::load", bytemuck::cast_slice_mut(&mut value), self.rank, index)?;
        Ok(value[0])
    }
    /// Stores `value` at `index`.
    pub fn store(&self, index: usize, value: T) -> Result<()> {
        self.core.put("SharedPart::store", bytemuck::cast_slice(&[value]), self.rank, index)
    }
    /// Copies `into.len()` elements from `offset` into `into`.
    pub fn read(&self, offset: usize, into: &mut [T]) -> Result<()> {
        self.core.get("SharedPart::read", bytemuck::cast_slice_mut(into), self.rank, offset)
    }
    /// Copies `data` to `offset`.
    pub fn write(&self, offset: usize, data: &[T]) -> Result<()> {
        self.core.put("SharedPart::write", bytemuck::cast_slice(data), self.rank, offset)
    }
}
