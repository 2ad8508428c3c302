//! MPI_IN_PLACE variants (`Comm::*_in_place`, `Scope::i*_in_place`): one buffer holds this rank's
//! contribution and receives its result.
//!
//! They run the same operations as their out-of-place twins. Where an algorithm can take its
//! contribution from the receive buffer (allgather(v) on every algorithm, allreduce's native,
//! BDE and Rabenseifner algorithms, the root of the native reduce) nothing is copied; alltoall(v)
//! swaps blocks where they lie (native) or trades them pair by pair through one block's
//! temporary (messages); the others read their input while the result is written, so they get a
//! copy of the part they read (the root's own block of gather(v)/scatter(v), the whole vector of
//! reduce on message algorithms, reduce_scatter and scan). Temporaries come from the rank's
//! [`ScratchPool`](super::scratch::ScratchPool), so a warm rank allocates none.
//!
//! Shapes (as in MPI, only the root of a rooted collective is "in place"):
//! - `gather(v)_in_place(buf, .., root)`: at the root `buf` is the receive buffer, its own block
//!   already in place; elsewhere `buf` is what the rank sends.
//! - `scatter(v)_in_place(buf, .., root)`: at the root `buf` is the send buffer and its own
//!   block stays where it is; elsewhere `buf` receives the rank's block.
//! - `reduce_in_place(buf, op, root)`: every rank contributes `buf`; only the root's is
//!   overwritten with the result.
//! - `reduce_scatter(_block)_in_place(buf, ..)`: `buf` holds the whole vector; this rank's
//!   reduced block ends up at its start (`buf[..counts[rank]]`), the rest is unspecified.
//! - `exscan_in_place`: rank 0's `buf` is left unchanged.

use bytemuck::Pod;

use super::op::Op;
use super::select::{Algorithm, Collective};
use super::transport::Run;
use super::vector::Layout;
use super::{alltoall, hierarchical, native, reduce, scan};
use crate::comm::Comm;
use crate::device::collectives::{ByteCall, Call};
use crate::error::{Error, Result};
use crate::scope::{Request, Scope};

impl Comm {
    /// Checks that `what` (`len` elements) splits into `size()` equal blocks.
    pub(super) fn check_split(&self, call: &str, what: &str, len: usize) -> Result<()> {
        if len.is_multiple_of(self.size()) {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{call}: {what} has {len} elements, which do not split into {} equal blocks",
                self.size()
            )))
        }
    }
}

impl Run<'_> {
    pub(crate) async fn gather_in_place<T: Pod>(&self, buf: &mut [T], root: usize) -> Result<()> {
        self.check_root(root)?;
        if self.rank() != root {
            return self.gather(buf, &mut [], root).await;
        }
        self.check_split("gather_in_place", "the root's buf", buf.len())?;
        let block = buf.len() / self.size();
        let own = self.process.scratch.copy_of(&buf[root * block..][..block], block);
        self.gather(&own, buf, root).await
    }

    pub(crate) async fn gatherv_in_place<T: Pod>(
        &self,
        buf: &mut [T],
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Result<()> {
        self.check_root(root)?;
        if self.rank() != root {
            return self.gatherv(buf, &mut [], counts, displs, root).await;
        }
        // Validated first, so the root's block lies inside `buf`.
        Layout::new::<T>(self, "gatherv_in_place", counts, displs, buf.len())?;
        let own = self.process.scratch.copy_of(&buf[displs[root]..][..counts[root]], counts[root]);
        self.gatherv(&own, buf, counts, displs, root).await
    }

    pub(crate) async fn scatter_in_place<T: Pod>(&self, buf: &mut [T], root: usize) -> Result<()> {
        self.check_root(root)?;
        if self.rank() != root {
            return self.scatter(&[], buf, root).await;
        }
        self.check_split("scatter_in_place", "the root's buf", buf.len())?;
        let mut own = self.process.scratch.take(buf.len() / self.size());
        self.scatter(buf, &mut own, root).await
    }

    pub(crate) async fn scatterv_in_place<T: Pod>(
        &self,
        buf: &mut [T],
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Result<()> {
        self.check_root(root)?;
        if self.rank() != root {
            return self.scatterv(&[], counts, displs, buf, root).await;
        }
        let mut own = self.process.scratch.take(counts.get(root).copied().unwrap_or(0));
        self.scatterv(buf, counts, displs, &mut own, root).await
    }

    pub(crate) async fn alltoall_in_place<T: Pod>(&self, buf: &mut [T]) -> Result<()> {
        self.check_live()?;
        self.check_split("alltoall_in_place", "buf", buf.len())?;
        let buf: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let block = buf.len() / self.size();
        match self.chose_for(Collective::Alltoall, block, true) {
            Algorithm::Native => native::alltoall(self, None, buf).await,
            _ => {
                let mut spare = self.process.scratch.take(block);
                let place = |p: usize| p * block..(p + 1) * block;
                alltoall::exchange_in_place(self, buf, place, &mut spare, Collective::Alltoall).await
            }
        }
    }

    pub(crate) async fn alltoallv_in_place<T: Pod>(
        &self,
        buf: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<()> {
        self.check_live()?;
        let layout = Layout::new::<T>(self, "alltoallv_in_place", counts, displs, buf.len())?;
        let buf: &mut [u8] = bytemuck::cast_slice_mut(buf);
        match self.chose_for(Collective::Alltoallv, 0, true) {
            Algorithm::Native => native::alltoallv(self, None, &layout, buf, &layout).await,
            _ => {
                let largest = (0..self.size()).map(|p| layout.block(p).len()).max().unwrap_or(0);
                let mut spare = self.process.scratch.take(largest);
                let place = |p: usize| layout.block(p);
                alltoall::exchange_in_place(self, buf, place, &mut spare, Collective::Alltoallv).await
            }
        }
    }

    pub(crate) async fn reduce_in_place<T: Pod>(&self, buf: &mut [T], op: &dyn Op<T>, root: usize) -> Result<()> {
        self.check_root(root)?;
        if self.rank() != root {
            return self.reduce(buf, &mut [], op, root).await;
        }
        self.check_live()?;
        match self.chose_for(Collective::Reduce, size_of_val(buf), op.is_commutative()) {
            Algorithm::Native => native::reduce(self, None, buf, op, root).await,
            algorithm => {
                let own = self.process.scratch.copy_of(buf, buf.len());
                match algorithm {
                    Algorithm::Hierarchical => Box::pin(hierarchical::reduce(self, &own, buf, op, root)).await,
                    algorithm => reduce::reduce(self, &own, buf, op, root, algorithm).await,
                }
            }
        }
    }

    pub(crate) async fn reduce_scatter_in_place<T: Pod>(
        &self,
        buf: &mut [T],
        counts: &[usize],
        op: &dyn Op<T>,
    ) -> Result<()> {
        let send = self.process.scratch.copy_of(buf, buf.len());
        // A wrong `counts` is reported by `reduce_scatter` (which checks it before anything else).
        let mine = counts.get(self.rank()).map_or(0, |&c| c.min(buf.len()));
        self.reduce_scatter(&send, &mut buf[..mine], counts, op).await
    }

    pub(crate) async fn reduce_scatter_block_in_place<T: Pod>(&self, buf: &mut [T], op: &dyn Op<T>) -> Result<()> {
        self.check_live()?;
        self.check_split("reduce_scatter_block_in_place", "buf", buf.len())?;
        let send = self.process.scratch.copy_of(buf, buf.len());
        let block = buf.len() / self.size();
        self.reduce_scatter_block(&send, &mut buf[..block], op).await
    }

    pub(crate) async fn scan_in_place<T: Pod>(&self, buf: &mut [T], op: &dyn Op<T>, exclusive: bool) -> Result<()> {
        self.check_live()?;
        let (me, np) = (self.rank(), self.size());
        match self.chose_for(Collective::Scan, size_of_val(buf), op.is_commutative()) {
            // Rank 0 and the last rank fold into their own buffer (see the native scan).
            Algorithm::Native if me == 0 || me + 1 == np => native::scan(self, None, buf, op, exclusive).await,
            algorithm => {
                let send = self.process.scratch.copy_of(buf, buf.len());
                match algorithm {
                    Algorithm::Native => native::scan(self, Some(&send), buf, op, exclusive).await,
                    Algorithm::Hierarchical => Box::pin(hierarchical::scan(self, &send, buf, op, exclusive)).await,
                    algorithm => scan::scan(self, &send, buf, op, exclusive, algorithm).await,
                }
            }
        }
    }
}

impl Comm {
    /// [`Comm::allreduce`] with MPI_IN_PLACE: `buf` holds this rank's vector and receives the
    /// result. No copy on the shm device's native algorithm, BDE or Rabenseifner.
    ///
    /// ```
    /// use fastmp::op::Sum;
    /// fastmp::run(3, |world| {
    ///     let mut v = [world.rank() as u64, 1];
    ///     world.allreduce_in_place(&mut v, Sum)?;
    ///     assert_eq!(v, [3, 3]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn allreduce_in_place<T: Pod, O: Op<T>>(&self, buf: &mut [T], op: O) -> Result<()> {
        if self.now_possible() {
            self.check_live()?;
            let (bytes, commutative) = (size_of_val(buf), op.is_commutative());
            let call = Call::Allreduce { send: None, recv: &mut *buf, op: &op };
            if let Some(done) = native::run_now(self, Collective::Allreduce, bytes, commutative, call) {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.allreduce_in_place(buf, &op))
    }

    /// [`Comm::reduce`] with MPI_IN_PLACE at the root: every rank contributes `buf`, and the
    /// root's `buf` receives the result (other ranks' are only read).
    pub fn reduce_in_place<T: Pod, O: Op<T>>(&self, buf: &mut [T], op: O, root: usize) -> Result<()> {
        if self.now_possible() {
            self.check_root(root)?;
            let (bytes, commutative) = (size_of_val(buf), op.is_commutative());
            // Only the root's buffer is in place; elsewhere it is what the rank sends.
            let call = if self.rank() == root {
                Call::Reduce { send: None, recv: &mut *buf, op: &op, root }
            } else {
                Call::Reduce { send: Some(&*buf), recv: &mut [], op: &op, root }
            };
            if let Some(done) = native::run_now(self, Collective::Reduce, bytes, commutative, call) {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.reduce_in_place(buf, &op, root))
    }

    /// [`Comm::gather`] with MPI_IN_PLACE at the root: there `buf` is the receive buffer
    /// (`size()` blocks) with the root's own block already in place; elsewhere `buf` is the
    /// block the rank sends.
    ///
    /// ```
    /// fastmp::run(3, |world| {
    ///     let me = world.rank() as u32;
    ///     let mut buf = if me == 1 { vec![0, 1, 0] } else { vec![me] };
    ///     world.gather_in_place(&mut buf, 1)?;
    ///     if me == 1 {
    ///         assert_eq!(buf, [0, 1, 2]);
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn gather_in_place<T: Pod>(&self, buf: &mut [T], root: usize) -> Result<()> {
        let run = Run::new(self, true)?;
        run.finish(run.gather_in_place(buf, root))
    }

    /// [`Comm::gatherv`] with MPI_IN_PLACE at the root (`buf` as for
    /// [`Comm::gather_in_place`]; `counts` and `displs` are only read at the root).
    pub fn gatherv_in_place<T: Pod>(
        &self,
        buf: &mut [T],
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Result<()> {
        let run = Run::new(self, true)?;
        run.finish(run.gatherv_in_place(buf, counts, displs, root))
    }

    /// [`Comm::scatter`] with MPI_IN_PLACE at the root: there `buf` is the send buffer and the
    /// root's own block stays in it; elsewhere `buf` receives the rank's block.
    pub fn scatter_in_place<T: Pod>(&self, buf: &mut [T], root: usize) -> Result<()> {
        let run = Run::new(self, true)?;
        run.finish(run.scatter_in_place(buf, root))
    }

    /// [`Comm::scatterv`] with MPI_IN_PLACE at the root (`buf` as for
    /// [`Comm::scatter_in_place`]; `counts` and `displs` are only read at the root).
    pub fn scatterv_in_place<T: Pod>(
        &self,
        buf: &mut [T],
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Result<()> {
        let run = Run::new(self, true)?;
        run.finish(run.scatterv_in_place(buf, counts, displs, root))
    }

    /// [`Comm::allgather`] with MPI_IN_PLACE: `buf` holds `size()` blocks, this rank's own
    /// already in place. No copy on any algorithm except gather_bcast (one block).
    ///
    /// ```
    /// fastmp::run(3, |world| {
    ///     let mut all = [0u32; 3];
    ///     all[world.rank()] = world.rank() as u32 + 10;
    ///     world.allgather_in_place(&mut all)?;
    ///     assert_eq!(all, [10, 11, 12]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn allgather_in_place<T: Pod>(&self, buf: &mut [T]) -> Result<()> {
        if self.now_possible() {
            self.check_live()?;
            self.check_split("allgather_in_place", "buf", buf.len())?;
            let block = size_of_val(buf) / self.size();
            let call = ByteCall::Allgather { send: None, recv: bytemuck::cast_slice_mut(buf) };
            if let Some(done) = native::run_now(self, Collective::Allgather, block, true, call) {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.allgather_in_place(buf))
    }

    /// [`Comm::allgatherv`] with MPI_IN_PLACE: this rank's block (`counts[rank]` elements at
    /// `displs[rank]`) is already in `buf`.
    pub fn allgatherv_in_place<T: Pod>(&self, buf: &mut [T], counts: &[usize], displs: &[usize]) -> Result<()> {
        if self.now_possible() {
            self.check_live()?;
            let layout = self.checked::<T>()("allgatherv_in_place", counts, displs, buf.len(), true)?;
            let block = counts.iter().sum::<usize>() * size_of::<T>() / self.size();
            let call = ByteCall::Allgatherv { send: None, recv: bytemuck::cast_slice_mut(buf), layout };
            if let Some(done) = native::run_now(self, Collective::Allgatherv, block, true, call) {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.allgatherv_in_place(buf, counts, displs))
    }

    /// [`Comm::alltoall`] with MPI_IN_PLACE: block `j` of `buf` goes to rank `j` and is replaced
    /// by rank `j`'s block for this rank.
    pub fn alltoall_in_place<T: Pod>(&self, buf: &mut [T]) -> Result<()> {
        if self.now_possible() {
            self.check_live()?;
            self.check_split("alltoall_in_place", "buf", buf.len())?;
            let block = size_of_val(buf) / self.size();
            let call = ByteCall::Alltoall { send: None, recv: bytemuck::cast_slice_mut(buf) };
            if let Some(done) = native::run_now(self, Collective::Alltoall, block, true, call) {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.alltoall_in_place(buf))
    }

    /// [`Comm::alltoallv`] with MPI_IN_PLACE: one layout (`counts`, `displs`) for what goes to
    /// and comes from each rank, so `counts[j]` must equal rank `j`'s `counts[rank]`.
    pub fn alltoallv_in_place<T: Pod>(&self, buf: &mut [T], counts: &[usize], displs: &[usize]) -> Result<()> {
        if self.now_possible() {
            self.check_live()?;
            let layout = self.checked::<T>()("alltoallv_in_place", counts, displs, buf.len(), true)?;
            let call = ByteCall::Alltoallv {
                send: None,
                send_layout: layout,
                recv: bytemuck::cast_slice_mut(buf),
                recv_layout: layout,
            };
            if let Some(done) = native::run_now(self, Collective::Alltoallv, 0, true, call) {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.alltoallv_in_place(buf, counts, displs))
    }

    /// [`Comm::reduce_scatter`] with MPI_IN_PLACE: `buf` holds the whole vector
    /// (`sum(counts)` elements) and this rank's reduced block ends up in `buf[..counts[rank]]`.
    pub fn reduce_scatter_in_place<T: Pod, O: Op<T>>(&self, buf: &mut [T], counts: &[usize], op: O) -> Result<()> {
        let run = Run::new(self, true)?;
        run.finish(run.reduce_scatter_in_place(buf, counts, &op))
    }

    /// [`Comm::reduce_scatter_block`] with MPI_IN_PLACE: `buf` holds `size()` blocks and this
    /// rank's reduced block ends up in the first.
    pub fn reduce_scatter_block_in_place<T: Pod, O: Op<T>>(&self, buf: &mut [T], op: O) -> Result<()> {
        let run = Run::new(self, true)?;
        run.finish(run.reduce_scatter_block_in_place(buf, &op))
    }

    /// [`Comm::scan`] with MPI_IN_PLACE.
    pub fn scan_in_place<T: Pod, O: Op<T>>(&self, buf: &mut [T], op: O) -> Result<()> {
        if self.now_possible()
            && let Some(done) = self.scan_in_place_now(buf, &op, false)
        {
            return done;
        }
        let run = Run::new(self, true)?;
        run.finish(run.scan_in_place(buf, &op, false))
    }

    /// [`Comm::exscan`] with MPI_IN_PLACE; rank 0's `buf` is left unchanged.
    pub fn exscan_in_place<T: Pod, O: Op<T>>(&self, buf: &mut [T], op: O) -> Result<()> {
        if self.now_possible()
            && let Some(done) = self.scan_in_place_now(buf, &op, true)
        {
            return done;
        }
        let run = Run::new(self, true)?;
        run.finish(run.scan_in_place(buf, &op, true))
    }

    /// Scan and exscan in place as [`native::run_now`] calls (`Err` from a failed check).
    fn scan_in_place_now<T: Pod>(&self, buf: &mut [T], op: &dyn Op<T>, exclusive: bool) -> Option<Result<()>> {
        if let Err(e) = self.check_live() {
            return Some(Err(e));
        }
        let (bytes, commutative) = (size_of_val(buf), op.is_commutative());
        native::run_now(self, Collective::Scan, bytes, commutative, Call::Scan { send: None, recv: buf, op, exclusive })
    }
}

impl<'scope> Scope<'scope, '_> {
    /// Nonblocking [`Comm::allreduce_in_place`] (MPI_Iallreduce with MPI_IN_PLACE).
    pub fn iallreduce_in_place<T: Pod, O: Op<T> + 'scope>(
        &'scope self,
        buf: &'scope mut [T],
        op: O,
    ) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().allreduce_in_place(buf, &op).await })
    }

    /// Nonblocking [`Comm::reduce_in_place`] (MPI_Ireduce with MPI_IN_PLACE).
    pub fn ireduce_in_place<T: Pod, O: Op<T> + 'scope>(
        &'scope self,
        buf: &'scope mut [T],
        op: O,
        root: usize,
    ) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().reduce_in_place(buf, &op, root).await })
    }

    /// Nonblocking [`Comm::gather_in_place`] (MPI_Igather with MPI_IN_PLACE).
    pub fn igather_in_place<T: Pod>(&'scope self, buf: &'scope mut [T], root: usize) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().gather_in_place(buf, root).await })
    }

    /// Nonblocking [`Comm::gatherv_in_place`] (MPI_Igatherv with MPI_IN_PLACE); `counts` and
    /// `displs` are copied.
    pub fn igatherv_in_place<T: Pod>(
        &'scope self,
        buf: &'scope mut [T],
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        let (counts, displs) = (counts.to_vec(), displs.to_vec());
        self.start_collective(move || async move { run.start().gatherv_in_place(buf, &counts, &displs, root).await })
    }

    /// Nonblocking [`Comm::scatter_in_place`] (MPI_Iscatter with MPI_IN_PLACE).
    pub fn iscatter_in_place<T: Pod>(&'scope self, buf: &'scope mut [T], root: usize) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().scatter_in_place(buf, root).await })
    }

    /// Nonblocking [`Comm::scatterv_in_place`] (MPI_Iscatterv with MPI_IN_PLACE); `counts` and
    /// `displs` are copied.
    pub fn iscatterv_in_place<T: Pod>(
        &'scope self,
        buf: &'scope mut [T],
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        let (counts, displs) = (counts.to_vec(), displs.to_vec());
        self.start_collective(move || async move { run.start().scatterv_in_place(buf, &counts, &displs, root).await })
    }

    /// Nonblocking [`Comm::allgather_in_place`] (MPI_Iallgather with MPI_IN_PLACE).
    pub fn iallgather_in_place<T: Pod>(&'scope self, buf: &'scope mut [T]) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().allgather_in_place(buf).await })
    }

    /// Nonblocking [`Comm::allgatherv_in_place`] (MPI_Iallgatherv with MPI_IN_PLACE); `counts`
    /// and `displs` are copied.
    pub fn iallgatherv_in_place<T: Pod>(
        &'scope self,
        buf: &'scope mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        let (counts, displs) = (counts.to_vec(), displs.to_vec());
        self.start_collective(move || async move { run.start().allgatherv_in_place(buf, &counts, &displs).await })
    }

    /// Nonblocking [`Comm::alltoall_in_place`] (MPI_Ialltoall with MPI_IN_PLACE).
    pub fn ialltoall_in_place<T: Pod>(&'scope self, buf: &'scope mut [T]) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().alltoall_in_place(buf).await })
    }

    /// Nonblocking [`Comm::alltoallv_in_place`] (MPI_Ialltoallv with MPI_IN_PLACE); `counts`
    /// and `displs` are copied.
    pub fn ialltoallv_in_place<T: Pod>(
        &'scope self,
        buf: &'scope mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        let (counts, displs) = (counts.to_vec(), displs.to_vec());
        self.start_collective(move || async move { run.start().alltoallv_in_place(buf, &counts, &displs).await })
    }

    /// Nonblocking [`Comm::reduce_scatter_in_place`] (MPI_Ireduce_scatter with MPI_IN_PLACE);
    /// `counts` is copied.
    pub fn ireduce_scatter_in_place<T: Pod, O: Op<T> + 'scope>(
        &'scope self,
        buf: &'scope mut [T],
        counts: &[usize],
        op: O,
    ) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        let counts = counts.to_vec();
        self.start_collective(move || async move { run.start().reduce_scatter_in_place(buf, &counts, &op).await })
    }

    /// Nonblocking [`Comm::reduce_scatter_block_in_place`] (MPI_Ireduce_scatter_block with
    /// MPI_IN_PLACE).
    pub fn ireduce_scatter_block_in_place<T: Pod, O: Op<T> + 'scope>(
        &'scope self,
        buf: &'scope mut [T],
        op: O,
    ) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().reduce_scatter_block_in_place(buf, &op).await })
    }

    /// Nonblocking [`Comm::scan_in_place`] (MPI_Iscan with MPI_IN_PLACE).
    pub fn iscan_in_place<T: Pod, O: Op<T> + 'scope>(
        &'scope self,
        buf: &'scope mut [T],
        op: O,
    ) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().scan_in_place(buf, &op, false).await })
    }

    /// Nonblocking [`Comm::exscan_in_place`] (MPI_Iexscan with MPI_IN_PLACE).
    pub fn iexscan_in_place<T: Pod, O: Op<T> + 'scope>(
        &'scope self,
        buf: &'scope mut [T],
        op: O,
    ) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().scan_in_place(buf, &op, true).await })
    }
}
