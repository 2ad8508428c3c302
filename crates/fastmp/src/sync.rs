//! Synchronization primitives of the lock-free core (the shm device's ring, board and send
//! records), switchable to [loom]'s model-checked versions.
//!
//! Loom runs a small concurrent test under every interleaving (and every weak-memory outcome it
//! models) of the operations it can see, and those are only its own types: atomics, cells,
//! threads. So the modules to be model-checked import these names from here, never from `std`.
//!
//! - Normal builds (Miri included) get the std types, re-exported as they are, plus
//!   [`UnsafeCell`], a `#[repr(transparent)]` wrapper of `std::cell::UnsafeCell` with loom's
//!   closure API (`with` / `with_mut`) whose `#[inline]` methods compile to the same code as
//!   `get()`: the shim costs nothing.
//! - `RUSTFLAGS="--cfg loom"` builds get loom's types; the `loom_tests` modules then run the
//!   real code under `loom::model` (see `scripts/loom.sh`). Loom's types only work inside a
//!   model, so nothing but those tests can run in such a build.
//!
//! [loom]: https://docs.rs/loom

// The full set is offered even where the core does not (yet) use a name, e.g. `Arc` and `fence`.
#![allow(unused_imports)]

#[cfg(loom)]
pub(crate) use loom::{
    cell::UnsafeCell,
    sync::Arc,
    sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence},
    thread::yield_now,
};

#[cfg(not(loom))]
pub(crate) use std::{
    sync::Arc,
    sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence},
    thread::yield_now,
};

/// `std::cell::UnsafeCell` with the API of `loom::cell::UnsafeCell`: access goes through a
/// closure that receives the raw pointer, so that loom can check each access against the others
/// (a write concurrent with any other access is a data race it reports).
#[cfg(not(loom))]
#[derive(Default)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T: ?Sized>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    #[inline]
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }
}

#[cfg(not(loom))]
impl<T: ?Sized> UnsafeCell<T> {
    /// Calls `f` with a pointer for reading the contents.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Calls `f` with a pointer for writing (or reading) the contents.
    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
