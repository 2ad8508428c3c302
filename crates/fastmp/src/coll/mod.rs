//! Collective operations on [`Comm`]: argument checks, algorithm selection, dispatch.
//!
//! Every collective checks what a rank can check locally (root in range, buffer lengths
//! consistent with the communicator size and counts) and returns `Err` before communicating.
//! Disagreements only visible across ranks (different lengths on different ranks) usually
//! surface as `Err` from the receive that sees the wrong length. Since each rank selects its
//! algorithm from its own size, ranks whose sizes straddle a rule boundary may run different
//! algorithms (an erroneous program, as in MPI); every choice is reported so that peers that
//! chose otherwise fail instead of waiting (`Run::chose`): a message-based choice marks the
//! device's native operation bypassed, a flat choice on a communicator with levels passes its
//! process's level operations by. What remains undetected is a whole process choosing flat
//! while the others choose `hierarchical` (its leader waits on the network). The algorithm is
//! chosen by the communicator's [`Tuning`]; correct programs make the same choice on every
//! rank, because selection only uses sizes every rank of a correct call agrees on.

// Dependency order (each module uses only those listed before it, plus the dispatcher in this
// file, which composite algorithms call back into through `Run`):
//   select, op, vector                      names, tables, operations, block layouts
//   transport, hierarchy                    point-to-point of a `Run` (and native bookkeeping);
//                                           the levels of hierarchical collectives
//   fold, tree, pattern                     reduction building blocks, trees, rings/hypercube
//   barrier, bcast, scatter_gather, allgather, alltoall, reduce, allreduce, reduce_scatter,
//   scan, native, hierarchical              the algorithms: none imports another
//   objects, nonblocking                    serde objects, the `Scope::i*` entry points
//   neighbor                                neighbourhood collectives (own entry points, both twins)
mod allgather;
mod allreduce;
mod alltoall;
mod barrier;
mod bcast;
mod fold;
mod hierarchical;
pub(crate) mod hierarchy;
mod in_place;
mod native;
mod neighbor;
mod nonblocking;
mod objects;
pub(crate) mod op;
mod pattern;
mod reduce;
mod reduce_scatter;
mod scan;
mod scatter_gather;
pub(crate) mod scratch;
pub(crate) mod select;
mod transport;
mod tree;
pub(crate) mod vector;

use std::sync::Arc;

use bytemuck::Pod;

pub use neighbor::NeighborTopology;
pub(crate) use neighbor::{Adjacency, Topology};
pub use select::{Algorithm, Collective, CommLocality, Cores, Rule, TUNING_FILE_VAR, Tuning};

use crate::comm::Comm;
use crate::device::collectives::{ByteCall, Call};
use crate::error::{Error, Result};
use op::Op;
use select::Pick;
use transport::Run;
pub(crate) use vector::{Blocks, Layout};

impl Comm {
    /// A communicator with the same ranks and context whose collectives select algorithms from
    /// `tuning` (for example to force one algorithm). All ranks must use the same tuning. A
    /// table that does not say whether the ranks have cores of their own
    /// ([`Tuning::with_cores`]) takes this communicator's fact.
    pub fn with_tuning(&self, tuning: Tuning) -> Comm {
        let tuning = match (tuning.cores(), self.tuning.cores()) {
            (None, Some(cores)) => tuning.with_cores(cores),
            _ => tuning,
        };
        Comm { tuning: Arc::new(tuning), ..self.clone() }
    }

    /// The algorithm-selection table of this communicator.
    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// The algorithm `coll` will use for `bytes` per rank on this communicator: the first rule
    /// that applies and names an algorithm this call can run (not `native` on a device without
    /// native support, not a commutative-only algorithm for a non-commutative operation), else
    /// the collective's fallback.
    pub fn algorithm_for(&self, coll: Collective, bytes: usize, commutative: bool) -> Algorithm {
        self.choose(coll, bytes, commutative, Pick::Tuned, false)
    }

    /// Where this communicator's members run, as selection rules' `locality` names it.
    ///
    /// ```
    /// use fastmp::coll::CommLocality;
    /// fastmp::run(2, |world| {
    ///     // Thread ranks of one process (the shm device).
    ///     assert_eq!(world.comm_locality(), CommLocality::Process);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn comm_locality(&self) -> CommLocality {
        self.spread_locality()
    }

    /// Whether a call of `coll` on this communicator can run `algorithm`: `native` needs the
    /// device's collectives, `hierarchical` levels (and, for a non-commutative operation or a
    /// scan, processes whose members are consecutive ranks).
    #[inline]
    fn can_run(&self, coll: Collective, algorithm: Algorithm, commutative: bool) -> bool {
        match algorithm {
            Algorithm::Native => self.collectives.is_some(),
            // A scan's prefixes follow rank order whatever the operation.
            Algorithm::Hierarchical => self
                .levels()
                .is_some_and(|levels| (commutative && coll != Collective::Scan) || levels.processes.is_contiguous()),
            _ => commutative || !coll.needs_commutative(algorithm),
        }
    }

    /// The algorithm of one dispatch (see [`Pick`]); on a `level` of a hierarchical operation,
    /// the device's own collectives where it has them (the local levels: a process peer's flat
    /// choice can fail them, see `Run::chose`, where a message-based step would wait for it
    /// forever), else the rules. Allocation-free.
    #[inline]
    fn choose(&self, coll: Collective, bytes: usize, commutative: bool, pick: Pick, level: bool) -> Algorithm {
        if pick == Pick::Tuned && !level {
            let choose = || self.choose_by_rules(coll, bytes, commutative, pick, level);
            return self.spread.choices.get_or(coll, &self.tuning, bytes, commutative, choose);
        }
        self.choose_by_rules(coll, bytes, commutative, pick, level)
    }

    /// [`Comm::choose`] from the rules, without the remembered choices.
    fn choose_by_rules(&self, coll: Collective, bytes: usize, commutative: bool, pick: Pick, level: bool) -> Algorithm {
        let (np, locality) = (self.size(), self.spread_locality());
        let usable = |a| self.can_run(coll, a, commutative);
        if level && pick == Pick::Tuned && usable(Algorithm::Native) {
            return Algorithm::Native;
        }
        let chosen = match pick {
            Pick::Tuned => self.tuning.select_rule(coll, np, bytes, locality, usable),
            Pick::Excluding(excluded) => {
                self.tuning.select_rule(coll, np, bytes, locality, |a| a != excluded && usable(a))
            }
            Pick::Fixed(algorithm) => return algorithm,
        };
        chosen.unwrap_or_else(|| {
            if level && self.can_run(coll, Algorithm::Native, commutative) {
                Algorithm::Native
            } else {
                coll.fallback()
            }
        })
    }

    fn check_root(&self, root: usize) -> Result<()> {
        self.check_live()?;
        if root >= self.size() {
            return Err(Error::InvalidArgument(format!(
                "root {root} out of range for a communicator of size {}",
                self.size()
            )));
        }
        Ok(())
    }

    fn check_len(&self, what: &str, actual: usize, expected: usize) -> Result<()> {
        if actual == expected {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!("{what} has {actual} elements, expected {expected}")))
        }
    }

    /// Checks that `what` holds `size()` blocks of `block` elements (without overflowing).
    fn check_blocks(&self, what: &str, actual: usize, block: usize) -> Result<()> {
        let expected = block.checked_mul(self.size()).ok_or_else(|| {
            Error::InvalidArgument(format!("{what}: {} blocks of {block} elements overflow usize", self.size()))
        })?;
        self.check_len(what, actual, expected)
    }

    /// Scatter and gather: the root's `blocks` buffer holds `size()` blocks of `block` elements.
    fn check_rooted_blocks(&self, root: usize, what: &str, blocks: usize, block: usize) -> Result<()> {
        self.check_root(root)?;
        if self.rank() == root {
            self.check_blocks(what, blocks, block)?;
        }
        Ok(())
    }

    /// Allreduce, scan, exscan: the receive buffer matches the send buffer.
    fn check_same_len(&self, what: &str, recv: usize, send: usize) -> Result<()> {
        self.check_live()?;
        self.check_len(what, recv, send)
    }

    fn check_reduce(&self, root: usize, recv: usize, send: usize) -> Result<()> {
        self.check_root(root)?;
        if self.rank() == root {
            self.check_len("reduce receive buffer", recv, send)?;
        }
        Ok(())
    }

    fn check_alltoall(&self, send: usize, recv: usize) -> Result<()> {
        self.check_live()?;
        self.check_len("alltoall receive buffer", recv, send)?;
        if !send.is_multiple_of(self.size()) {
            return Err(Error::InvalidArgument(format!(
                "alltoall buffers of {send} elements do not split into {} equal blocks",
                self.size()
            )));
        }
        Ok(())
    }

    fn check_reduce_scatter(&self, send: usize, recv: usize, counts: &[usize]) -> Result<()> {
        self.check_live()?;
        self.check_len("reduce_scatter counts", counts.len(), self.size())?;
        let total = counts.iter().try_fold(0usize, |sum, &c| sum.checked_add(c));
        let total = total.ok_or_else(|| Error::InvalidArgument("reduce_scatter counts overflow usize".into()))?;
        self.check_len("reduce_scatter send buffer", send, total)?;
        self.check_len("reduce_scatter receive buffer", recv, counts[self.rank()])
    }

    /// A maker of `v` layouts for the algorithms: [`Layout::build`].
    fn built<T>(&self) -> impl Fn(&str, &[usize], &[usize], usize, bool) -> Result<Layout> + '_ {
        move |what, counts, displs, len, disjoint| Layout::build::<T>(self, what, counts, displs, len, disjoint)
    }

    /// A maker of `v` layouts that only checks them ([`Layout::check`]): the blocking fast
    /// path hands the caller's counts and displacements to the provider as they are.
    fn checked<'a, T>(&'a self) -> impl Fn(&str, &'a [usize], &'a [usize], usize, bool) -> Result<Blocks<'a>> + 'a {
        move |what, counts, displs, len, disjoint| {
            Layout::check::<T>(self, what, counts, displs, len, disjoint)?;
            Ok(Blocks::Checked { counts, displs, elem: size_of::<T>() })
        }
    }

    /// Scatterv and gatherv: the root's layout over its `blocks` buffer (scatterv's send buffer,
    /// gatherv's receive buffer), from `make` (its arguments: what, counts, displacements,
    /// buffer length, disjoint); its `own` buffer (the other one) matches its own block.
    #[allow(clippy::too_many_arguments)]
    fn rooted_layout<'a, L>(
        &self,
        coll: Collective,
        root: usize,
        counts: &'a [usize],
        displs: &'a [usize],
        blocks: usize,
        own: usize,
        make: impl Fn(&str, &'a [usize], &'a [usize], usize, bool) -> Result<L>,
    ) -> Result<Option<L>> {
        self.check_root(root)?;
        if self.rank() != root {
            return Ok(None);
        }
        let scatter = coll == Collective::Scatterv;
        let layout = make(coll.name(), counts, displs, blocks, !scatter)?;
        if own != counts[root] {
            let (own_buffer, counts_name) = if scatter { ("receive", "sendcounts") } else { ("send", "recvcounts") };
            return Err(Error::InvalidArgument(format!(
                "{coll}: the root's {own_buffer} buffer has {own} elements but its {counts_name}[{root}] is {}",
                counts[root]
            )));
        }
        Ok(Some(layout))
    }

    /// Allgatherv: the receive layout, from `make`; this rank's block matches `send`.
    fn allgatherv_layout<'a, L>(
        &self,
        send: usize,
        recv: usize,
        counts: &'a [usize],
        displs: &'a [usize],
        make: impl Fn(&str, &'a [usize], &'a [usize], usize, bool) -> Result<L>,
    ) -> Result<L> {
        self.check_live()?;
        let layout = make("allgatherv", counts, displs, recv, true)?;
        let me = self.rank();
        if send != counts[me] {
            return Err(Error::InvalidArgument(format!(
                "allgatherv: rank {me}'s send buffer has {send} elements but recvcounts[{me}] is {}",
                counts[me]
            )));
        }
        Ok(layout)
    }

    /// Alltoallv: the send and receive layouts, from `make`.
    fn alltoallv_layouts<'a, L>(
        &self,
        send: (usize, &'a [usize], &'a [usize]),
        recv: (usize, &'a [usize], &'a [usize]),
        make: impl Fn(&str, &'a [usize], &'a [usize], usize, bool) -> Result<L>,
    ) -> Result<(L, L)> {
        self.check_live()?;
        let send_layout = make("alltoallv send", send.1, send.2, send.0, false)?;
        let recv_layout = make("alltoallv receive", recv.1, recv.2, recv.0, true)?;
        Ok((send_layout, recv_layout))
    }

    /// Blocks until every rank has called it (MPI_Barrier).
    ///
    /// ```
    /// fastmp::run(4, |world| world.barrier())?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn barrier(&self) -> Result<()> {
        if self.now_possible() {
            self.check_live()?;
            if let Some(done) = native::run_now(self, Collective::Barrier, 0, true, ByteCall::Barrier) {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.barrier())
    }

    /// Copies `root`'s `buf` into `buf` on every rank (MPI_Bcast).
    ///
    /// ```
    /// fastmp::run(3, |world| {
    ///     let mut data = if world.rank() == 0 { [1.0f64, 2.0] } else { [0.0; 2] };
    ///     world.bcast(&mut data, 0)?;
    ///     assert_eq!(data, [1.0, 2.0]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn bcast<T: Pod>(&self, buf: &mut [T], root: usize) -> Result<()> {
        if self.now_possible() {
            self.check_root(root)?;
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
            if let Some(done) =
                native::run_now(self, Collective::Bcast, bytes.len(), true, ByteCall::Bcast { buf: bytes, root })
            {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.bcast(buf, root))
    }

    /// Sends block `i` of `root`'s `send` (`size()` blocks of `recv.len()` elements) to rank `i`
    /// (MPI_Scatter). `send` is only read at the root; other ranks may pass `&[]`.
    pub fn scatter<T: Pod>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        if self.now_possible() {
            self.check_rooted_blocks(root, "scatter send buffer", send.len(), recv.len())?;
            let (bytes, into): (&[u8], &mut [u8]) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
            let block = into.len();
            let call = ByteCall::Scatter { send: bytes, recv: into, root };
            if let Some(done) = native::run_now(self, Collective::Scatter, block, true, call) {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.scatter(send, recv, root))
    }

    /// Like [`Comm::scatter`] with per-rank `counts` and `displs` (element offsets into `send`),
    /// which are only read at the root (MPI_Scatterv). Rank `i` receives `counts[i]` elements
    /// into `recv`, which must have exactly that length.
    pub fn scatterv<T: Pod>(
        &self,
        send: &[T],
        counts: &[usize],
        displs: &[usize],
        recv: &mut [T],
        root: usize,
    ) -> Result<()> {
        if self.now_possible() {
            let layout = self.rooted_layout(
                Collective::Scatterv,
                root,
                counts,
                displs,
                send.len(),
                recv.len(),
                self.checked::<T>(),
            )?;
            let (bytes, into): (&[u8], &mut [u8]) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
            let call = ByteCall::Scatterv { send: bytes, layout, recv: into, root };
            if let Some(done) = native::run_now(self, Collective::Scatterv, 0, true, call) {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.scatterv(send, counts, displs, recv, root))
    }

    /// Collects every rank's `send` at `root`, in rank order, into `recv` (`size()` blocks of
    /// `send.len()` elements) (MPI_Gather). `recv` is only written at the root; other ranks may
    /// pass `&mut []`.
    ///
    /// ```
    /// let gathered = fastmp::run(3, |world| {
    ///     let mut all = vec![0u32; if world.rank() == 2 { 3 } else { 0 }];
    ///     world.gather(&[world.rank() as u32 * 10], &mut all, 2)?;
    ///     Ok(all)
    /// })?;
    /// assert_eq!(gathered[2], [0, 10, 20]);
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn gather<T: Pod>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        if self.now_possible() {
            self.check_rooted_blocks(root, "gather receive buffer", recv.len(), send.len())?;
            let (bytes, into): (&[u8], &mut [u8]) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
            let call = ByteCall::Gather { send: bytes, recv: into, root };
            if let Some(done) = native::run_now(self, Collective::Gather, size_of_val(send), true, call) {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.gather(send, recv, root))
    }

    /// Like [`Comm::gather`] with per-rank `counts` and `displs` (element offsets into `recv`),
    /// only read at the root (MPI_Gatherv). Rank `i` sends `counts[i]` elements.
    pub fn gatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Result<()> {
        if self.now_possible() {
            let layout = self.rooted_layout(
                Collective::Gatherv,
                root,
                counts,
                displs,
                recv.len(),
                send.len(),
                self.checked::<T>(),
            )?;
            let (bytes, into): (&[u8], &mut [u8]) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
            let call = ByteCall::Gatherv { send: bytes, recv: into, layout, root };
            if let Some(done) = native::run_now(self, Collective::Gatherv, 0, true, call) {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.gatherv(send, recv, counts, displs, root))
    }

    /// Gathers every rank's `send` into `recv` on every rank (MPI_Allgather).
    pub fn allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        if self.now_possible() {
            self.check_live()?;
            self.check_blocks("allgather receive buffer", recv.len(), send.len())?;
            let (bytes, into): (&[u8], &mut [u8]) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
            let call = ByteCall::Allgather { send: Some(bytes), recv: into };
            if let Some(done) = native::run_now(self, Collective::Allgather, size_of_val(send), true, call) {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.allgather(send, recv))
    }

    /// Like [`Comm::allgather`] with per-rank `counts` and `displs` into `recv`, which every
    /// rank passes (MPI_Allgatherv).
    pub fn allgatherv<T: Pod>(&self, send: &[T], recv: &mut [T], counts: &[usize], displs: &[usize]) -> Result<()> {
        if self.now_possible() {
            let layout = self.allgatherv_layout(send.len(), recv.len(), counts, displs, self.checked::<T>())?;
            let (bytes, into): (&[u8], &mut [u8]) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
            let block = counts.iter().sum::<usize>() * size_of::<T>() / self.size();
            let call = ByteCall::Allgatherv { send: Some(bytes), recv: into, layout };
            if let Some(done) = native::run_now(self, Collective::Allgatherv, block, true, call) {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.allgatherv(send, recv, counts, displs))
    }

    /// Block `j` of `send` goes to rank `j`, which stores it as block `i` (this rank) of its
    /// `recv` (MPI_Alltoall). Both buffers hold `size()` equal blocks.
    pub fn alltoall<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        if self.now_possible() {
            self.check_alltoall(send.len(), recv.len())?;
            let (bytes, into): (&[u8], &mut [u8]) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
            let call = ByteCall::Alltoall { send: Some(bytes), recv: into };
            if let Some(done) = native::run_now(self, Collective::Alltoall, size_of_val(send) / self.size(), true, call)
            {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.alltoall(send, recv))
    }

    /// Like [`Comm::alltoall`] with per-peer counts and displacements on both sides
    /// (MPI_Alltoallv). `send_counts[j]` must equal rank `j`'s `recv_counts[i]`.
    #[allow(clippy::too_many_arguments)]
    pub fn alltoallv<T: Pod>(
        &self,
        send: &[T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        if self.now_possible() {
            let (send_layout, recv_layout) = self.alltoallv_layouts(
                (send.len(), send_counts, send_displs),
                (recv.len(), recv_counts, recv_displs),
                self.checked::<T>(),
            )?;
            let (bytes, into): (&[u8], &mut [u8]) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
            let call = ByteCall::Alltoallv { send: Some(bytes), send_layout, recv: into, recv_layout };
            if let Some(done) = native::run_now(self, Collective::Alltoallv, 0, true, call) {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.alltoallv(send, send_counts, send_displs, recv, recv_counts, recv_displs))
    }

    /// Combines every rank's `send` element-wise with `op` into `recv` at `root` (MPI_Reduce).
    /// `recv` is only written at the root; other ranks may pass `&mut []`.
    ///
    /// ```
    /// use fastmp::op::Sum;
    /// let totals = fastmp::run(4, |world| {
    ///     let mut total = [0u64; 2];
    ///     world.reduce(&[1, world.rank() as u64], &mut total, Sum, 0)?;
    ///     Ok(total)
    /// })?;
    /// assert_eq!(totals[0], [4, 6]);
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn reduce<T: Pod, O: Op<T>>(&self, send: &[T], recv: &mut [T], op: O, root: usize) -> Result<()> {
        if self.now_possible() {
            self.check_reduce(root, recv.len(), send.len())?;
            let call = Call::Reduce { send: Some(send), recv: &mut *recv, op: &op, root };
            if let Some(done) = native::run_now(self, Collective::Reduce, size_of_val(send), op.is_commutative(), call)
            {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.reduce(send, recv, &op, root))
    }

    /// Combines every rank's `send` element-wise with `op` into `recv` on every rank
    /// (MPI_Allreduce).
    ///
    /// ```
    /// use fastmp::op::Max;
    /// fastmp::run(3, |world| {
    ///     let mut top = [0i32];
    ///     world.allreduce(&[world.rank() as i32 * 7], &mut top, Max)?;
    ///     assert_eq!(top, [14]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn allreduce<T: Pod, O: Op<T>>(&self, send: &[T], recv: &mut [T], op: O) -> Result<()> {
        if self.now_possible() {
            self.check_same_len("allreduce receive buffer", recv.len(), send.len())?;
            let call = Call::Allreduce { send: Some(send), recv: &mut *recv, op: &op };
            if let Some(done) =
                native::run_now(self, Collective::Allreduce, size_of_val(send), op.is_commutative(), call)
            {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.allreduce(send, recv, &op))
    }

    /// Reduces `send` element-wise over all ranks and scatters the result: rank `i` receives
    /// `counts[i]` elements into `recv` (MPI_Reduce_scatter). `send` holds `sum(counts)`.
    pub fn reduce_scatter<T: Pod, O: Op<T>>(&self, send: &[T], recv: &mut [T], counts: &[usize], op: O) -> Result<()> {
        if self.now_possible() {
            self.check_reduce_scatter(send.len(), recv.len(), counts)?;
            let call = Call::ReduceScatter { send, recv: &mut *recv, counts, op: &op };
            if let Some(done) =
                native::run_now(self, Collective::ReduceScatter, size_of_val(send), op.is_commutative(), call)
            {
                return done;
            }
        }
        let run = Run::new(self, true)?;
        run.finish(run.reduce_scatter(send, recv, counts, &op))
    }

    /// [`Comm::reduce_scatter`] with `recv.len()` elements for every rank
    /// (MPI_Reduce_scatter_block).
    pub fn reduce_scatter_block<T: Pod, O: Op<T>>(&self, send: &[T], recv: &mut [T], op: O) -> Result<()> {
        let run = Run::new(self, true)?;
        run.finish(run.reduce_scatter_block(send, recv, &op))
    }

    /// Inclusive prefix reduction: rank `i` gets `send(0) ∘ … ∘ send(i)` (MPI_Scan).
    ///
    /// ```
    /// use fastmp::op::Sum;
    /// let prefixes = fastmp::run(4, |world| {
    ///     let mut prefix = [0u32];
    ///     world.scan(&[world.rank() as u32 + 1], &mut prefix, Sum)?;
    ///     Ok(prefix[0])
    /// })?;
    /// assert_eq!(prefixes, [1, 3, 6, 10]);
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn scan<T: Pod, O: Op<T>>(&self, send: &[T], recv: &mut [T], op: O) -> Result<()> {
        if self.now_possible()
            && let Some(done) = self.scan_now(send, recv, &op, false)
        {
            return done;
        }
        let run = Run::new(self, true)?;
        run.finish(run.scan(send, recv, &op))
    }

    /// Exclusive prefix reduction: rank `i > 0` gets `send(0) ∘ … ∘ send(i-1)`; rank 0's `recv`
    /// is left unchanged (MPI_Exscan).
    pub fn exscan<T: Pod, O: Op<T>>(&self, send: &[T], recv: &mut [T], op: O) -> Result<()> {
        if self.now_possible()
            && let Some(done) = self.scan_now(send, recv, &op, true)
        {
            return done;
        }
        let run = Run::new(self, true)?;
        run.finish(run.exscan(send, recv, &op))
    }

    /// Scan and exscan as [`native::run_now`] calls, after their checks (`Err` from a failed
    /// check).
    fn scan_now<T: Pod>(&self, send: &[T], recv: &mut [T], op: &dyn Op<T>, exclusive: bool) -> Option<Result<()>> {
        let what = if exclusive { "exscan receive buffer" } else { "scan receive buffer" };
        if let Err(e) = self.check_same_len(what, recv.len(), send.len()) {
            return Some(Err(e));
        }
        let call = Call::Scan { send: Some(send), recv, op, exclusive };
        native::run_now(self, Collective::Scan, size_of_val(send), op.is_commutative(), call)
    }
}

impl Run<'_> {
    /// [`Comm::algorithm_for`], counted as one of this operation's choices ([`Run::chose`]).
    #[inline]
    fn chose_for(&self, coll: Collective, bytes: usize, commutative: bool) -> Algorithm {
        self.chose_pick(coll, bytes, commutative, Pick::Tuned)
    }

    /// [`Comm::choose`], counted as one of this operation's choices.
    #[inline]
    fn chose_pick(&self, coll: Collective, bytes: usize, commutative: bool, pick: Pick) -> Algorithm {
        let algorithm = self.chose(self.choose(coll, bytes, commutative, pick, self.is_level()));
        self.trace_choice(coll, bytes, algorithm);
        algorithm
    }

    /// [`Comm::check_root`], noting the root in the operation's trace event.
    fn check_root(&self, root: usize) -> Result<()> {
        self.trace_root(root);
        self.comm().check_root(root)
    }
}

/// The collectives as operations of a [`Run`]: argument checks, algorithm choice, dispatch.
/// The blocking methods above and the nonblocking ones (`Scope::ibcast`, ...) both run these.
/// Each collective picks and dispatches in exactly one place; those that composite algorithms
/// run inside their own operation (`dispatch_*`, below) take a [`Pick`].
impl Run<'_> {
    pub(crate) async fn barrier(&self) -> Result<()> {
        self.check_live()?;
        match self.chose_for(Collective::Barrier, 0, true) {
            Algorithm::Native => native::barrier(self).await,
            Algorithm::Hierarchical => Box::pin(hierarchical::barrier(self)).await,
            algorithm => barrier::barrier(self, algorithm).await,
        }
    }

    pub(crate) async fn bcast<T: Pod>(&self, buf: &mut [T], root: usize) -> Result<()> {
        self.check_root(root)?;
        self.dispatch_bcast(bytemuck::cast_slice_mut(buf), root, Pick::Tuned).await
    }

    pub(crate) async fn scatter<T: Pod>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        self.trace_root(root);
        self.check_rooted_blocks(root, "scatter send buffer", send.len(), recv.len())?;
        let (send, recv): (&[u8], &mut [u8]) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        match self.chose_for(Collective::Scatter, recv.len(), true) {
            Algorithm::Native => native::scatter(self, send, recv, root).await,
            Algorithm::Hierarchical => Box::pin(hierarchical::scatter(self, send, recv, root)).await,
            algorithm => scatter_gather::scatter(self, send, recv, root, algorithm).await,
        }
    }

    pub(crate) async fn scatterv<T: Pod>(
        &self,
        send: &[T],
        counts: &[usize],
        displs: &[usize],
        recv: &mut [T],
        root: usize,
    ) -> Result<()> {
        self.trace_root(root);
        let layout =
            self.rooted_layout(Collective::Scatterv, root, counts, displs, send.len(), recv.len(), self.built::<T>())?;
        let (send, recv) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        self.dispatch_scatterv(send, layout.as_ref(), recv, root, Pick::Tuned).await
    }

    pub(crate) async fn gather<T: Pod>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        self.trace_root(root);
        self.check_rooted_blocks(root, "gather receive buffer", recv.len(), send.len())?;
        self.dispatch_gather(bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv), root, Pick::Tuned).await
    }

    pub(crate) async fn gatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Result<()> {
        self.trace_root(root);
        let layout =
            self.rooted_layout(Collective::Gatherv, root, counts, displs, recv.len(), send.len(), self.built::<T>())?;
        let (send, recv) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        self.dispatch_gatherv(send, recv, layout.as_ref(), root, Pick::Tuned).await
    }

    pub(crate) async fn allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.check_live()?;
        self.check_blocks("allgather receive buffer", recv.len(), send.len())?;
        self.dispatch_allgather(Some(bytemuck::cast_slice(send)), bytemuck::cast_slice_mut(recv)).await
    }

    pub(crate) async fn allgather_in_place<T: Pod>(&self, buf: &mut [T]) -> Result<()> {
        self.check_live()?;
        self.check_split("allgather_in_place", "buf", buf.len())?;
        self.dispatch_allgather(None, bytemuck::cast_slice_mut(buf)).await
    }

    /// `send` is `None` in place; arguments checked.
    async fn dispatch_allgather(&self, send: Option<&[u8]>, recv: &mut [u8]) -> Result<()> {
        match self.chose_for(Collective::Allgather, recv.len() / self.size(), true) {
            Algorithm::Native => native::allgather(self, send, recv).await,
            Algorithm::Hierarchical => Box::pin(hierarchical::allgather(self, send, recv)).await,
            algorithm => allgather::allgather(self, send, recv, algorithm).await,
        }
    }

    pub(crate) async fn allgatherv<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<()> {
        let layout = self.allgatherv_layout(send.len(), recv.len(), counts, displs, self.built::<T>())?;
        let (send, recv) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        self.dispatch_allgatherv(Some(send), recv, &layout, Pick::Tuned).await
    }

    pub(crate) async fn allgatherv_in_place<T: Pod>(
        &self,
        buf: &mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<()> {
        self.check_live()?;
        let layout = Layout::new::<T>(self, "allgatherv_in_place", counts, displs, buf.len())?;
        self.dispatch_allgatherv(None, bytemuck::cast_slice_mut(buf), &layout, Pick::Tuned).await
    }

    pub(crate) async fn alltoall<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.check_alltoall(send.len(), recv.len())?;
        let (send, recv): (&[u8], &mut [u8]) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        match self.chose_for(Collective::Alltoall, send.len() / self.size(), true) {
            Algorithm::Native => native::alltoall(self, Some(send), recv).await,
            Algorithm::Hierarchical => Box::pin(hierarchical::alltoall(self, send, recv)).await,
            algorithm => alltoall::alltoall(self, send, recv, algorithm).await,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn alltoallv<T: Pod>(
        &self,
        send: &[T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<()> {
        let (send_layout, recv_layout) = self.alltoallv_layouts(
            (send.len(), send_counts, send_displs),
            (recv.len(), recv_counts, recv_displs),
            self.built::<T>(),
        )?;
        let (send, recv): (&[u8], &mut [u8]) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        match self.chose_for(Collective::Alltoallv, 0, true) {
            Algorithm::Native => native::alltoallv(self, Some(send), &send_layout, recv, &recv_layout).await,
            Algorithm::Hierarchical => {
                Box::pin(hierarchical::alltoallv(self, send, &send_layout, recv, &recv_layout)).await
            }
            algorithm => alltoall::alltoallv(self, send, &send_layout, recv, &recv_layout, algorithm).await,
        }
    }

    pub(crate) async fn reduce<T: Pod>(&self, send: &[T], recv: &mut [T], op: &dyn Op<T>, root: usize) -> Result<()> {
        self.trace_root(root);
        self.check_reduce(root, recv.len(), send.len())?;
        self.dispatch_reduce(send, recv, op, root, Pick::Tuned).await
    }

    pub(crate) async fn allreduce<T: Pod>(&self, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
        self.check_same_len("allreduce receive buffer", recv.len(), send.len())?;
        self.dispatch_allreduce(Some(send), recv, op).await
    }

    pub(crate) async fn allreduce_in_place<T: Pod>(&self, buf: &mut [T], op: &dyn Op<T>) -> Result<()> {
        self.check_live()?;
        self.dispatch_allreduce(None, buf, op).await
    }

    /// `send` is `None` in place; arguments checked.
    pub(super) async fn dispatch_allreduce<T: Pod>(
        &self,
        send: Option<&[T]>,
        recv: &mut [T],
        op: &dyn Op<T>,
    ) -> Result<()> {
        match self.chose_for(Collective::Allreduce, size_of_val(recv), op.is_commutative()) {
            Algorithm::Native => native::allreduce(self, send, recv, op).await,
            // Boxed here and below: a level's collective comes back through this dispatch.
            Algorithm::Hierarchical => Box::pin(hierarchical::allreduce(self, send, recv, op)).await,
            algorithm => allreduce::allreduce(self, send, recv, op, algorithm).await,
        }
    }

    pub(crate) async fn reduce_scatter<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        op: &dyn Op<T>,
    ) -> Result<()> {
        self.check_reduce_scatter(send.len(), recv.len(), counts)?;
        match self.chose_for(Collective::ReduceScatter, size_of_val(send), op.is_commutative()) {
            Algorithm::Native => native::reduce_scatter(self, send, recv, counts, op).await,
            Algorithm::Hierarchical => Box::pin(hierarchical::reduce_scatter(self, send, recv, counts, op)).await,
            algorithm => reduce_scatter::reduce_scatter(self, send, recv, counts, op, algorithm).await,
        }
    }

    pub(crate) async fn reduce_scatter_block<T: Pod>(&self, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
        self.check_live()?;
        self.check_blocks("reduce_scatter_block send buffer", send.len(), recv.len())?;
        let counts = vec![recv.len(); self.size()];
        self.reduce_scatter(send, recv, &counts, op).await
    }

    pub(crate) async fn scan<T: Pod>(&self, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
        self.scan_impl(send, recv, op, false).await
    }

    pub(crate) async fn exscan<T: Pod>(&self, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
        self.scan_impl(send, recv, op, true).await
    }

    async fn scan_impl<T: Pod>(&self, send: &[T], recv: &mut [T], op: &dyn Op<T>, exclusive: bool) -> Result<()> {
        let what = if exclusive { "exscan receive buffer" } else { "scan receive buffer" };
        self.check_same_len(what, recv.len(), send.len())?;
        match self.chose_for(Collective::Scan, size_of_val(send), op.is_commutative()) {
            Algorithm::Native => native::scan(self, Some(send), recv, op, exclusive).await,
            Algorithm::Hierarchical => Box::pin(hierarchical::scan(self, send, recv, op, exclusive)).await,
            algorithm => scan::scan(self, send, recv, op, exclusive, algorithm).await,
        }
    }
}

/// The dispatch of the collectives that composite algorithms run inside their own operation
/// (checked arguments, bytes), shared with the public methods above: the one place each picks
/// its algorithm, so a composite never copies a dispatch and never selects itself.
impl Run<'_> {
    pub(super) async fn dispatch_bcast(&self, buf: &mut [u8], root: usize, pick: Pick) -> Result<()> {
        match self.chose_pick(Collective::Bcast, buf.len(), true, pick) {
            Algorithm::Native => native::bcast(self, buf, root).await,
            Algorithm::Hierarchical => Box::pin(hierarchical::bcast(self, buf, root)).await,
            algorithm => bcast::bcast(self, buf, root, algorithm).await,
        }
    }

    /// `layout` is only read at the root (`None` elsewhere).
    pub(super) async fn dispatch_scatterv(
        &self,
        send: &[u8],
        layout: Option<&Layout>,
        recv: &mut [u8],
        root: usize,
        pick: Pick,
    ) -> Result<()> {
        match self.chose_pick(Collective::Scatterv, 0, true, pick) {
            Algorithm::Native => native::scatterv(self, send, layout, recv, root).await,
            Algorithm::Hierarchical => Box::pin(hierarchical::scatterv(self, send, layout, recv, root)).await,
            algorithm => scatter_gather::scatterv(self, send, layout, recv, root, algorithm).await,
        }
    }

    pub(super) async fn dispatch_gather(&self, send: &[u8], recv: &mut [u8], root: usize, pick: Pick) -> Result<()> {
        match self.chose_pick(Collective::Gather, send.len(), true, pick) {
            Algorithm::Native => native::gather(self, send, recv, root).await,
            Algorithm::Hierarchical => Box::pin(hierarchical::gather(self, send, recv, root)).await,
            algorithm => scatter_gather::gather(self, send, recv, root, algorithm).await,
        }
    }

    /// `layout` is only read at the root (`None` elsewhere).
    pub(super) async fn dispatch_gatherv(
        &self,
        send: &[u8],
        recv: &mut [u8],
        layout: Option<&Layout>,
        root: usize,
        pick: Pick,
    ) -> Result<()> {
        match self.chose_pick(Collective::Gatherv, 0, true, pick) {
            Algorithm::Native => native::gatherv(self, send, recv, layout, root).await,
            Algorithm::Hierarchical => Box::pin(hierarchical::gatherv(self, send, recv, layout, root)).await,
            algorithm => scatter_gather::gatherv(self, send, recv, layout, root, algorithm).await,
        }
    }

    /// `send` is `None` in place.
    pub(super) async fn dispatch_allgatherv(
        &self,
        send: Option<&[u8]>,
        recv: &mut [u8],
        layout: &Layout,
        pick: Pick,
    ) -> Result<()> {
        match self.chose_pick(Collective::Allgatherv, layout.total_bytes() / self.size(), true, pick) {
            Algorithm::Native => native::allgatherv(self, send, recv, layout).await,
            Algorithm::Hierarchical => Box::pin(hierarchical::allgatherv(self, send, recv, layout)).await,
            algorithm => allgather::allgatherv(self, send, recv, layout, algorithm).await,
        }
    }

    pub(super) async fn dispatch_reduce<T: Pod>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: &dyn Op<T>,
        root: usize,
        pick: Pick,
    ) -> Result<()> {
        match self.chose_pick(Collective::Reduce, size_of_val(send), op.is_commutative(), pick) {
            Algorithm::Native => native::reduce(self, Some(send), recv, op, root).await,
            Algorithm::Hierarchical => Box::pin(hierarchical::reduce(self, send, recv, op, root)).await,
            algorithm => reduce::reduce(self, send, recv, op, root, algorithm).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The remembered choice is the rules' choice, whatever the order of the questions: repeated,
    /// alternating sizes (across the rules' size boundaries), commutativity and collectives, on
    /// a flat communicator and on one spanning simulated processes (hierarchical rules).
    #[test]
    fn remembered_choices_are_the_rules_choices() {
        let questions = |world: Comm| {
            let sizes = [0, 1, 8, 8, 4096, 8, 1 << 20, 1 << 20, 64, 1 << 16, 3];
            for round in 0..2 {
                for &bytes in &sizes {
                    for coll in Collective::ALL {
                        for commutative in [true, false, round == 0] {
                            let remembered = world.choose(coll, bytes, commutative, Pick::Tuned, false);
                            let by_rules = world.choose_by_rules(coll, bytes, commutative, Pick::Tuned, false);
                            assert_eq!(remembered, by_rules, "{coll} at {bytes} B, commutative {commutative}");
                        }
                    }
                }
            }
            Ok(())
        };
        crate::run(3, questions).unwrap();
        crate::Config::new().np(6).simulate_processes(2).run(questions).unwrap();
    }

    /// Clones with their own table (`with_tuning`) share the communicator's remembered
    /// choices: each must get its own table's choice, also when a dropped table's memory is
    /// reused by the next one.
    #[test]
    fn a_clone_with_another_table_chooses_from_it() {
        crate::run(2, |world| {
            for round in 0..3 {
                for coll in Collective::ALL {
                    for &algorithm in coll.algorithms() {
                        let forced = world.with_tuning(Tuning::defaults().force(coll, algorithm)?);
                        let chosen = forced.algorithm_for(coll, 64, true);
                        assert!(
                            chosen == algorithm || !forced.can_run(coll, algorithm, true),
                            "round {round}: {coll} forced to {algorithm} chose {chosen}"
                        );
                        drop(forced);
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    }
}
