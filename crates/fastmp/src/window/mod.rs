//! One-sided communication (MPI RMA): windows, put/get/accumulate and atomics, and their
//! synchronisation (fence, post/start/complete/wait, passive-target locks and flushes).
//!
//! The typed, epoch-checked layer over the device's `RmaWindow` (`device::one_sided`); see
//! `docs/ARCHITECTURE.md`, "One-sided communication".
//!
//! # The model, in safe Rust
//! Window memory is shared between ranks that run concurrently, so the rules that keep every
//! access free of data races (and therefore every safe program free of undefined behaviour) are:
//! 1. **No slice while others may access.** Remote operations, and this rank's own operations on
//!    itself, reach window memory only through the device's `rma_memory` accessors: whole words
//!    of the 8-byte grid as relaxed `AtomicU64` loads and stores, partial words and accumulate
//!    elements as atomic read-modify-writes, the few bytes outside the grid (unaligned
//!    `win_create` memory) under a lock. Conflicting operations that MPI calls erroneous (two
//!    puts to one element in an epoch, a put racing a get) therefore give unspecified *values*,
//!    never undefined behaviour; accumulates to one element compose, as MPI requires.
//! 2. **The owner's plain access is exclusive.** The owner reads and writes its own part as a
//!    `&[T]`/`&mut [T]` only through [`Window::local`]. While the guard lives the device holds
//!    every origin's operations on this part off (they wait, or the device queues them), this
//!    rank's own calls on the window are refused (`Err`), and a second guard is refused: the
//!    slice aliases nothing. Leaking the guard keeps the window refusing calls (never UB).
//!    Holding it while waiting for a peer that is itself blocked in an operation on this part is
//!    a deadlock of the program, as holding any lock would be.
//! 3. **Nothing outside a window is ever written.** Every operation is checked at the origin
//!    before anything moves: the target rank exists, an access epoch covers it (an open fence
//!    epoch, a `start`ed group containing it, a `lock` on it or `lock_all`), elements
//!    `disp..disp + len` lie inside the target's part, buffer lengths match. Violations are `Err`
//!    ([`crate::Error::RmaSync`], [`crate::Error::InvalidArgument`]); the device checks ranges again.
//! 4. **Memory outlives every access.** A part is released only after the device closed it (no
//!    operation inside it, every later one fails): by [`Window::free`] (collective), by dropping
//!    the window (this rank alone), or by `win_create` before its borrow ends, even when its
//!    closure panics. `mem::forget` of a [`Comm::win_allocate`] window leaks its memory, which
//!    peers may still reach; `win_create`'s window is never handed out by value, so it cannot be
//!    leaked.
//! 5. **Buffers outlive the operations on them.** Blocking operations complete locally before they
//!    return (the origin buffer is free, a get's data has arrived); request-based forms
//!    ([`crate::Scope::rput`], ...) borrow their buffers for the scope, like `isend`, and the
//!    scope's end finishes requests that were dropped or leaked.
//!
//! Displacements and lengths are in elements of `T` from the start of the target's part. Remote
//! completion (visible at the target) comes with `flush`, `unlock`, `complete` or `fence`.
//! `PROC_NULL` is a valid target of every operation and does nothing, as in MPI.
//!
//! Passive target, with a counter every rank increments atomically (MPI_Fetch_and_op):
//! ```
//! use fastmp::op::Sum;
//! use fastmp::window::{Assert, LockKind};
//! fastmp::run(3, |world| {
//!     let win = world.win_allocate::<u64>(1)?;
//!     win.lock(LockKind::Shared, 0, Assert::NONE)?;
//!     let ticket = win.fetch_and_op(1, 0, 0, Sum)?;
//!     win.unlock(0)?;
//!     assert!(ticket < 3);
//!     world.barrier()?;
//!     if world.rank() == 0 {
//!         assert_eq!(win.local()?[0], 3);
//!     }
//!     win.free()
//! })?;
//! # Ok::<(), fastmp::Error>(())
//! ```
//!
//! Post/start/complete/wait between neighbours, over memory the caller owns (MPI_Win_create):
//! ```
//! use fastmp::window::Assert;
//! fastmp::run(2, |world| {
//!     let peer = 1 - world.rank();
//!     let mut mine = [0i32; 2];
//!     world.win_create(&mut mine, |win| {
//!         let other = win.comm().group().incl(&[peer])?;
//!         win.post(&other, Assert::NONE)?;
//!         win.start(&other, Assert::NONE)?;
//!         win.put(&[peer as i32 + 5], peer, 1)?;
//!         win.complete()?;
//!         win.wait()
//!     })?;
//!     assert_eq!(mine, [0, world.rank() as i32 + 5]);
//!     Ok(())
//! })?;
//! # Ok::<(), fastmp::Error>(())
//! ```

mod elements;
mod epoch;
pub(crate) mod lifecycle;
mod local;
mod memory;
mod ops;
mod requests;
mod sync;

use std::marker::PhantomData;
use std::ops::BitOr;

use bytemuck::Pod;

use crate::comm::Comm;
use crate::error::Result;
use crate::group::Group;
use crate::layout::Layout;
use lifecycle::{Core, Creation};
use memory::Part;

pub use crate::device::one_sided::LockKind;

/// Assertions of the synchronisation calls (MPI_MODE_*), combined with `|`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Assert(u32);

impl Assert {
    /// No assertion.
    pub const NONE: Assert = Assert(0);
    /// `lock`/`start`/`post`: no conflicting lock or matching call can be pending (MPI_MODE_NOCHECK).
    pub const NOCHECK: Assert = Assert(1);
    /// `fence`/`post`: the local part was not updated by local stores since the last sync (MPI_MODE_NOSTORE).
    pub const NOSTORE: Assert = Assert(2);
    /// `fence`/`post`: the local part will not be updated by put or accumulate until the next sync (MPI_MODE_NOPUT).
    pub const NOPUT: Assert = Assert(4);
    /// `fence`: the fence completes no epoch (MPI_MODE_NOPRECEDE); every rank must say it.
    pub const NOPRECEDE: Assert = Assert(8);
    /// `fence`: the fence starts no epoch (MPI_MODE_NOSUCCEED); every rank must say it.
    pub const NOSUCCEED: Assert = Assert(16);

    /// Whether every assertion of `other` is in `self`.
    pub fn contains(self, other: Assert) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Assert {
    type Output = Assert;
    fn bitor(self, rhs: Assert) -> Assert {
        Assert(self.0 | rhs.0)
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Element types that accumulate, get-accumulate, fetch-and-op and compare-and-swap work on:
/// the primitive integers up to 64 bits and `f32`/`f64` (the target applies the operation, so
/// it must know the type).
pub trait RmaElement: Pod + sealed::Sealed {
    #[doc(hidden)]
    const ELEMENT: crate::device::one_sided::Element;
}

/// Operations accumulate can apply to `T`: [`crate::op::Sum`], `Prod`, `Min`, `Max`, `Band`,
/// `Bor`, `Bxor`, `Land`, `Lor`, `Lxor` (bitwise and logical ones on integers only) and
/// [`Replace`] / [`NoOp`] (MPI_REPLACE / MPI_NO_OP).
pub trait RmaOp<T: RmaElement>: Copy + sealed::Sealed {
    #[doc(hidden)]
    const OP: crate::device::one_sided::AccumulateOp;
}

/// MPI_REPLACE: accumulate overwrites (an element-atomic put).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replace;

/// MPI_NO_OP: the target is left alone (get-accumulate and fetch-and-op read it atomically).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoOp;

/// One rank's handle of a window (MPI_Win): a part of memory on every rank of a communicator
/// that the others can put into, get from and accumulate into. Created collectively by
/// [`Comm::win_allocate`], [`Comm::win_allocate_shared`] or [`Comm::win_create`]; freed
/// collectively by [`Window::free`]. Dropping it without `free` closes this rank's part alone
/// (without waiting for peers, so an error path never hangs; peers' later operations on the part
/// fail); leaking it with `mem::forget` leaks its memory, which peers may still reach. Not
/// `Send`: it belongs to its rank, like [`Comm`].
///
/// ```
/// use fastmp::window::Assert;
/// fastmp::run(2, |world| {
///     let win = world.win_allocate::<u64>(4)?;
///     win.fence(Assert::NONE)?;
///     let peer = 1 - world.rank();
///     win.put(&[world.rank() as u64 + 10], peer, 2)?;
///     win.fence(Assert::NOSUCCEED)?;
///     assert_eq!(win.local()?[2], peer as u64 + 10);
///     win.free()
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub struct Window<'mem, T> {
    core: Core,
    _memory: PhantomData<&'mem mut [T]>,
    _not_send: PhantomData<*const ()>,
}

/// The owner's plain access to its own part of a window (see [`Window::local`]); origins'
/// operations on the part wait until it is dropped. Leaking it keeps them waiting and leaves the
/// window refusing every call until it is freed (never UB).
pub struct LocalGuard<'w, T> {
    core: &'w Core,
    _part: PhantomData<&'w mut [T]>,
}

/// Direct access to one rank's part of a [`Comm::win_allocate_shared`] window (MPI_Win_shared_query
/// plus load/store): element loads and stores, checked like `get`/`put` (inside an access epoch
/// to that rank, inside its part), copied with the window's atomic accessors.
pub struct SharedPart<'w, T> {
    core: &'w Core,
    rank: usize,
    _part: PhantomData<&'w [T]>,
}

impl Comm {
    /// Creates a window of `len` zeroed elements per rank in memory the library owns (the fast,
    /// recommended path; MPI_Win_allocate). Collective; `len` may differ between ranks.
    pub fn win_allocate<T: Pod>(&self, len: usize) -> Result<Window<'static, T>> {
        Self::allocate_window("win_allocate", self, len, false)
    }

    /// As [`Comm::win_allocate`], for ranks that share an address space (all thread ranks of one
    /// process, e.g. the shm device, or a `split_type(SharedProcess)` communicator): every part is
    /// reachable through [`Window::shared_query`] (MPI_Win_allocate_shared). `Err` otherwise.
    pub fn win_allocate_shared<T: Pod>(&self, len: usize) -> Result<Window<'static, T>> {
        Self::allocate_window("win_allocate_shared", self, len, true)
    }

    /// Exposes `memory` as this rank's part of a new window for the duration of `f`
    /// (MPI_Win_create), then frees the window collectively and returns `f`'s result. The borrow
    /// lasts until the window is freed everywhere, so the memory is never reachable by others
    /// after this returns, even if the window handle is leaked or `f` panics.
    pub fn win_create<'mem, T: Pod, R>(
        &self,
        memory: &'mem mut [T],
        f: impl FnOnce(&Window<'mem, T>) -> Result<R>,
    ) -> Result<R> {
        Part::check_type::<T>("win_create")?;
        let part = Part::borrowed(memory);
        let how = Creation { call: "win_create", shared: false, elem: size_of::<T>() };
        let window = Window::<'mem, T>::wrap(Core::create(self, how, Ok(part))?);
        // On unwinding, `window`'s drop abandons the part (close only) before the borrow ends.
        match f(&window) {
            Ok(value) => window.free().map(|()| value),
            Err(e) => {
                // Peers may not reach a free now: leave without waiting for them.
                window.core.abandon();
                Err(e)
            }
        }
    }
}

impl Comm {
    fn allocate_window<T: Pod>(
        call: &'static str,
        comm: &Comm,
        len: usize,
        shared: bool,
    ) -> Result<Window<'static, T>> {
        Part::check_type::<T>(call)?;
        let how = Creation { call, shared, elem: size_of::<T>() };
        Core::create(comm, how, Part::allocate::<T>(call, len)).map(Window::wrap)
    }
}

impl<'mem, T: Pod> Window<'mem, T> {
    fn wrap(core: Core) -> Self {
        Window { core, _memory: PhantomData, _not_send: PhantomData }
    }

    /// The window's communicator (a duplicate of the one it was created on).
    /// The untyped window (the PGAS layer moves bytes between windows).
    pub(crate) fn core(&self) -> &Core {
        &self.core
    }

    pub fn comm(&self) -> &Comm {
        &self.core.comm
    }
    /// This rank in the window's communicator.
    pub fn rank(&self) -> usize {
        self.core.comm.rank()
    }
    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.core.comm.size()
    }
    /// Elements in this rank's part.
    pub fn len(&self) -> usize {
        self.core.bytes / size_of::<T>()
    }
    /// Whether this rank's part is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Elements in `rank`'s part.
    pub fn len_of(&self, rank: usize) -> Result<usize> {
        match self.core.dev.part_lengths().get(rank) {
            Some(bytes) => Ok(bytes / size_of::<T>()),
            None => Err(crate::Error::RankOutOfRange { rank, size: self.size() }),
        }
    }

    /// The owner's plain access to its own part; origins' operations on it wait while the guard
    /// lives. `Err` while another guard of this window is alive.
    pub fn local(&self) -> Result<LocalGuard<'_, T>> {
        self.local_impl()
    }

    /// `rank`'s part of a [`Comm::win_allocate_shared`] window (MPI_Win_shared_query).
    pub fn shared_query(&self, rank: usize) -> Result<SharedPart<'_, T>> {
        self.shared_query_impl(rank)
    }

    /// Frees the window (MPI_Win_free): collective; completes this rank's operations, then waits
    /// until every rank has, so no part is touched afterwards. `Err` inside an epoch.
    pub fn free(self) -> Result<()> {
        self.core.free("free")
    }

    // ----- operations -----

    /// Writes `data` into `target`'s part at element `disp` (MPI_Put).
    pub fn put(&self, data: &[T], target: usize, disp: usize) -> Result<()> {
        self.core.put("put", bytemuck::cast_slice(data), target, disp)
    }
    /// Reads `into.len()` elements of `target`'s part at `disp` into `into` (MPI_Get).
    pub fn get(&self, into: &mut [T], target: usize, disp: usize) -> Result<()> {
        self.core.get("get", bytemuck::cast_slice_mut(into), target, disp)
    }
    /// `target[disp + i] = data[i] ∘ target[disp + i]`, atomically per element (MPI_Accumulate).
    pub fn accumulate<O: RmaOp<T>>(&self, data: &[T], target: usize, disp: usize, op: O) -> Result<()>
    where
        T: RmaElement,
    {
        let _ = op;
        self.core.accumulate("accumulate", bytemuck::cast_slice(data), target, disp, T::ELEMENT, O::OP)
    }
    /// As `accumulate`, storing the previous values in `result` (MPI_Get_accumulate; with
    /// [`NoOp`], `data` is ignored and may be empty).
    pub fn get_accumulate<O: RmaOp<T>>(
        &self,
        data: &[T],
        result: &mut [T],
        target: usize,
        disp: usize,
        op: O,
    ) -> Result<()>
    where
        T: RmaElement,
    {
        let _ = op;
        let (data, result) = (bytemuck::cast_slice(data), bytemuck::cast_slice_mut(result));
        self.core.get_accumulate("get_accumulate", data, result, target, disp, T::ELEMENT, O::OP)
    }
    /// Atomically applies `op` with `value` to one element; returns its previous value
    /// (MPI_Fetch_and_op).
    pub fn fetch_and_op<O: RmaOp<T>>(&self, value: T, target: usize, disp: usize, op: O) -> Result<T>
    where
        T: RmaElement,
    {
        let _ = op;
        self.fetch_and_op_impl(value, target, disp, O::OP)
    }
    /// Atomically replaces one element by `new` if it equals `compare` (bitwise); returns its
    /// previous value (MPI_Compare_and_swap).
    pub fn compare_and_swap(&self, compare: T, new: T, target: usize, disp: usize) -> Result<T>
    where
        T: RmaElement,
    {
        self.compare_and_swap_impl(compare, new, target, disp)
    }
    /// Strided put: the elements `origin_layout` selects from `origin` go, in order, to the
    /// elements `target_layout` selects from `target`'s part starting at `disp` (equal counts).
    pub fn put_strided(
        &self,
        origin: &[T],
        origin_layout: &impl Layout,
        target: usize,
        disp: usize,
        target_layout: &impl Layout,
    ) -> Result<()> {
        self.put_strided_impl(origin, origin_layout, target, disp, target_layout)
    }
    /// Strided get (the mirror of [`Window::put_strided`]).
    pub fn get_strided(
        &self,
        into: &mut [T],
        origin_layout: &impl Layout,
        target: usize,
        disp: usize,
        target_layout: &impl Layout,
    ) -> Result<()> {
        self.get_strided_impl(into, origin_layout, target, disp, target_layout)
    }
    /// Strided accumulate.
    pub fn accumulate_strided<O: RmaOp<T>>(
        &self,
        origin: &[T],
        origin_layout: &impl Layout,
        target: usize,
        disp: usize,
        target_layout: &impl Layout,
        op: O,
    ) -> Result<()>
    where
        T: RmaElement,
    {
        let _ = op;
        self.accumulate_strided_impl::<O>(origin, origin_layout, target, disp, target_layout)
    }

    // ----- synchronisation -----

    /// Collective fence (MPI_Win_fence): completes every operation of the epoch it closes, and
    /// opens the next epoch unless [`Assert::NOSUCCEED`]. NOPRECEDE/NOSUCCEED must agree on every
    /// rank (`Err` everywhere otherwise).
    pub fn fence(&self, assert: Assert) -> Result<()> {
        self.core.fence(assert)
    }
    /// Opens an exposure epoch for the ranks of `group` (MPI_Win_post).
    pub fn post(&self, group: &Group, assert: Assert) -> Result<()> {
        self.core.post(group, assert)
    }
    /// Opens an access epoch to the ranks of `group`; waits for their `post` (MPI_Win_start).
    pub fn start(&self, group: &Group, assert: Assert) -> Result<()> {
        self.core.start(group, assert)
    }
    /// Completes the access epoch of `start` (MPI_Win_complete).
    pub fn complete(&self) -> Result<()> {
        self.core.complete()
    }
    /// Waits until every rank of the `post`ed group has called `complete` (MPI_Win_wait).
    pub fn wait(&self) -> Result<()> {
        self.core.wait()
    }
    /// `wait` without blocking: `true` once it would return (MPI_Win_test).
    pub fn test(&self) -> Result<bool> {
        self.core.test()
    }
    /// Passive-target lock on `target` (MPI_Win_lock).
    pub fn lock(&self, kind: LockKind, target: usize, assert: Assert) -> Result<()> {
        self.core.lock(kind, target, assert)
    }
    /// Completes the operations to `target` and releases its lock (MPI_Win_unlock).
    pub fn unlock(&self, target: usize) -> Result<()> {
        self.core.unlock(target)
    }
    /// Shared lock on every rank (MPI_Win_lock_all).
    pub fn lock_all(&self, assert: Assert) -> Result<()> {
        self.core.lock_all(assert)
    }
    /// Releases `lock_all` (MPI_Win_unlock_all).
    pub fn unlock_all(&self) -> Result<()> {
        self.core.unlock_all()
    }
    /// Completes every operation to `target` at the target (MPI_Win_flush).
    pub fn flush(&self, target: usize) -> Result<()> {
        self.core.flush("flush", target)
    }
    /// `flush` for every rank (MPI_Win_flush_all).
    pub fn flush_all(&self) -> Result<()> {
        self.core.flush_all("flush_all")
    }
    /// Completes every operation to `target` locally (MPI_Win_flush_local).
    pub fn flush_local(&self, target: usize) -> Result<()> {
        self.core.flush("flush_local", target)
    }
    /// `flush_local` for every rank (MPI_Win_flush_local_all).
    pub fn flush_local_all(&self) -> Result<()> {
        self.core.flush_all("flush_local_all")
    }
    /// Synchronises the public and private copies (MPI_Win_sync): a memory barrier here.
    pub fn sync(&self) -> Result<()> {
        self.core.usable("sync")?;
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}
