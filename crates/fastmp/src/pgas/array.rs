//! [`SharedArray`]: UPC's `shared [B] T a[B*THREADS]` over a communicator, built on a window.

use bytemuck::Pod;

use super::select::{Algorithm, Collective};
use super::team::Team;
use crate::coll::op::{Max, Min};
use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::scope::{Request, Scope};
use crate::window::{Assert, LocalGuard, Window};

/// A shared array with one block of `block_len` elements on every rank of a communicator (UPC's
/// `shared [B] T a[B*THREADS]`): rank `r` owns elements `r*B .. (r+1)*B` of the whole array.
/// The owner reaches its block as a slice ([`SharedArray::local`]); any rank reads and writes any
/// block with [`SharedArray::memget`] / [`SharedArray::memput`] (UPC `upc_memget`/`upc_memput`),
/// their request forms, and [`SharedArray::memcpy`]; the collectives of [`crate::pgas`] move
/// blocks between two arrays of the same communicator.
///
/// Created collectively by [`Comm::shared_array`]; freed collectively by [`SharedArray::free`]
/// (dropping it closes this rank's block alone, without waiting for peers). Remote writes are
/// visible to other ranks after [`SharedArray::barrier`] (UPC's `upc_barrier`) or a collective.
/// The memory model is the window's (see [`crate::window`]): no safe program can see a data race.
///
/// ```
/// fastmp::run(3, |world| {
///     let a = world.shared_array::<f64>(4)?;
///     let right = (world.rank() + 1) % world.size();
///     a.memput(&[world.rank() as f64; 4], right, 0)?;
///     a.barrier()?;
///     let left = (world.rank() + 2) % 3;
///     assert_eq!(*a.local()?, [left as f64; 4]);
///     a.free()
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub struct SharedArray<T: 'static> {
    pub(super) win: Window<'static, T>,
    pub(super) team: Team,
    block: usize,
}

impl Comm {
    /// Creates a [`SharedArray`] with `block_len` zeroed elements on every rank (UPC
    /// `upc_all_alloc(THREADS, B*sizeof(T))`). Collective; every rank must pass the same
    /// `block_len` (an `Err` everywhere otherwise).
    pub fn shared_array<T: Pod>(&self, block_len: usize) -> Result<SharedArray<T>> {
        let mut bounds = [0u64; 2];
        let mine = block_len as u64;
        self.allreduce(&[mine], &mut bounds[..1], Min)?;
        self.allreduce(&[mine], &mut bounds[1..], Max)?;
        if bounds[0] != bounds[1] {
            return Err(Error::InvalidArgument(format!(
                "shared_array: every rank must give the same block length (they range from {} to {})",
                bounds[0], bounds[1]
            )));
        }
        let win = self.win_allocate::<T>(block_len)?;
        let team = Team::new(self.dup()?)?;
        // One passive epoch for the array's whole life: UPC's always-accessible shared memory.
        win.lock_all(Assert::NOCHECK)?;
        Ok(SharedArray { win, team, block: block_len })
    }
}

impl<T: Pod> SharedArray<T> {
    /// Elements per block (UPC's block size B).
    pub fn block_len(&self) -> usize {
        self.block
    }

    /// Elements in the whole array (`block_len × ranks`).
    pub fn len(&self) -> usize {
        self.block * self.team.size()
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The array's communicator (UPC's THREADS and MYTHREAD are its size and rank).
    pub fn comm(&self) -> &Comm {
        &self.team.comm
    }

    /// This rank's block as a slice (UPC's cast of a pointer-to-shared with local affinity).
    /// Other ranks' operations on the block wait while the guard lives, and this rank's own calls
    /// on the array are refused; drop it before the next collective.
    pub fn local(&self) -> Result<LocalGuard<'_, T>> {
        self.win.local()
    }

    /// Copies `into.len()` elements from `rank`'s block, starting at `offset`, into `into`
    /// (UPC `upc_memget`).
    pub fn memget(&self, into: &mut [T], rank: usize, offset: usize) -> Result<()> {
        self.win.get(into, rank, offset)
    }

    /// Copies `data` into `rank`'s block at `offset` (UPC `upc_memput`); complete at the target
    /// when it returns.
    pub fn memput(&self, data: &[T], rank: usize, offset: usize) -> Result<()> {
        self.win.put(data, rank, offset)?;
        self.win.flush(rank)
    }

    /// [`SharedArray::memget`] as a request (Berkeley `bupc_memget_async`): `into` is filled
    /// when the request completes.
    pub fn memget_async<'scope>(
        &'scope self,
        scope: &'scope Scope<'scope, '_>,
        into: &'scope mut [T],
        rank: usize,
        offset: usize,
    ) -> Result<Request<'scope>> {
        scope.rget(&self.win, into, rank, offset)
    }

    /// [`SharedArray::memput`] as a request (Berkeley `bupc_memput_async`): `data` is free when
    /// it completes; the data is at the target after [`SharedArray::fence`] or a barrier.
    pub fn memput_async<'scope>(
        &'scope self,
        scope: &'scope Scope<'scope, '_>,
        data: &'scope [T],
        rank: usize,
        offset: usize,
    ) -> Result<Request<'scope>> {
        scope.rput(&self.win, data, rank, offset)
    }

    /// Copies `len` elements from `src`'s block on `src_rank` (from `src_offset`) into this
    /// array's block on `rank` (from `offset`) (UPC `upc_memcpy` between shared blocks); any rank
    /// may make the copy, complete at the target when it returns. `src` may be this array only
    /// if the ranges do not overlap.
    pub fn memcpy(
        &self,
        rank: usize,
        offset: usize,
        src: &SharedArray<T>,
        src_rank: usize,
        src_offset: usize,
        len: usize,
    ) -> Result<()> {
        let e = size_of::<T>();
        self.check_range("memcpy", rank, offset, len)?;
        src.check_range("memcpy", src_rank, src_offset, len)?;
        if std::ptr::eq(self, src) && rank == src_rank && offset < src_offset + len && src_offset < offset + len {
            return Err(Error::InvalidArgument("memcpy: source and destination ranges overlap".into()));
        }
        self.team.copy(self.block_at(rank, offset * e), src.block_at(src_rank, src_offset * e), len * e)
    }

    /// Completes every put this rank made to the array (UPC `upc_fence` for this array).
    pub fn fence(&self) -> Result<()> {
        self.win.flush_all()
    }

    /// Completes this rank's puts, then waits for every rank (UPC `upc_barrier`): after it, every
    /// write made before it by any rank is visible to all.
    pub fn barrier(&self) -> Result<()> {
        self.fence()?;
        self.team.barrier()
    }

    /// Uses `algorithm` for every later call of `coll` on this array (as destination). Every
    /// rank must make the same choice; `Err` if the algorithm does not implement `coll`.
    pub fn force_algorithm(&self, coll: Collective, algorithm: Algorithm) -> Result<()> {
        self.team.tuning.borrow_mut().force(coll, algorithm)
    }

    /// The algorithm the next call of `coll` moving `bytes` per block would use.
    pub fn algorithm(&self, coll: Collective, bytes: usize) -> Algorithm {
        self.team.tuning.borrow().select(coll, self.team.size(), bytes)
    }

    /// Frees the array (collective, like [`Window::free`]).
    pub fn free(self) -> Result<()> {
        let unlocked = self.win.unlock_all();
        let freed = self.win.free();
        unlocked.and(freed)
    }

    /// `rank`'s block from byte `offset`, for the transfers.
    pub(super) fn block_at(&self, rank: usize, offset: usize) -> super::transfer::Block<'_> {
        super::transfer::Block { core: self.win.core(), rank, offset }
    }

    /// `Err` unless elements `offset..offset + len` of `rank`'s block exist.
    pub(super) fn check_range(&self, call: &str, rank: usize, offset: usize, len: usize) -> Result<()> {
        let size = self.team.size();
        if rank >= size {
            return Err(Error::RankOutOfRange { rank, size });
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.block => Ok(()),
            _ => Err(Error::InvalidArgument(format!(
                "{call}: elements {offset}..{} lie outside the block of {} elements",
                offset.saturating_add(len),
                self.block
            ))),
        }
    }

    /// Checks the arguments every collective shares: usable arrays over the same ranks, a valid
    /// sync mode; returns the modes.
    pub(super) fn check_pair<S: Pod>(
        &self,
        call: &str,
        src: &SharedArray<S>,
        sync: super::Sync,
    ) -> Result<(super::InSync, super::OutSync)> {
        self.win.core().usable(call)?;
        src.win.core().usable(call)?;
        if self.team.comm.group.members() != src.team.comm.group.members() {
            return Err(Error::InvalidArgument(format!(
                "{call}: the source and destination arrays belong to different groups of ranks"
            )));
        }
        if std::ptr::eq(self.win.core(), src.win.core()) {
            return Err(Error::InvalidArgument(format!(
                "{call}: the source and destination must be different arrays (UPC's restrict)"
            )));
        }
        sync.modes().map_err(|e| Error::InvalidArgument(format!("{call}: {e}")))
    }
}

/// `Err` unless `root` is one of the `np` ranks.
pub(super) fn check_root(call: &str, root: usize, np: usize) -> Result<()> {
    if root < np {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!("{call}: root {root} is not a rank of the arrays' {np} ranks")))
    }
}

/// `Err` unless `need` elements (`None`: the product overflowed) fit a block of `block_len`.
pub(super) fn check_fits(call: &str, what: &str, need: impl Into<Option<usize>>, block_len: usize) -> Result<()> {
    match need.into() {
        Some(need) if need <= block_len => Ok(()),
        need => Err(Error::InvalidArgument(format!(
            "{call}: {} elements do not fit the {what} array's blocks of {block_len} elements",
            need.map_or_else(|| "more than usize::MAX".to_string(), |n| n.to_string())
        ))),
    }
}
