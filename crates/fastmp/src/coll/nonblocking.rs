//! Nonblocking collectives (MPI_Ibcast, ...): the blocking twins' operations, run as futures by
//! the rank's progress engine and completed through the same [`Request`]s as point-to-point.
//!
//! They live in a [`Scope`] for the same reason nonblocking point-to-point does: the buffers stay
//! borrowed until the scope ends, and the scope's end finishes every operation it started, so a
//! request that is dropped or leaked (`mem::forget`) still runs its part for the other ranks and
//! never touches a buffer after its borrow ended.

use std::future::Future;
use std::task::{Context, Poll, Waker};

use bytemuck::Pod;

use super::native;
use super::op::Op;
use super::select::Collective;
use super::transport::Run;
use crate::device::collectives::{ByteCall, Call};
use crate::error::Result;
use crate::scope::{Request, Scope};

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Builds the operation (by `make`, straight into its box), runs its first steps at once
    /// (older operations first, in issue order), then hands it to the engine if it has more:
    /// argument errors (and any other failure that early) are returned here, as by the blocking
    /// twin.
    pub(crate) fn start_collective<F: Future<Output = Result<()>> + 'scope>(
        &'scope self,
        make: impl FnOnce() -> F,
    ) -> Result<Request<'scope>> {
        let engine = &self.comm.process.engine;
        engine.progress();
        let mut operation = engine.pool.boxed(make);
        if let Poll::Ready(outcome) = operation.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            engine.pool.recycle(operation);
            return outcome.map(|()| Request::empty(self));
        }
        // SAFETY: the operation borrows only what lives for 'scope, and `Comm::scope` finishes or
        // drops every operation registered under `self.token` before 'scope ends.
        let id = unsafe { engine.start(self.token, operation) };
        Ok(Request::collective(self, id))
    }

    /// Starts a barrier (MPI_Ibarrier): completes once every rank has started it.
    ///
    /// ```
    /// fastmp::run(3, |world| {
    ///     world.scope(|s| {
    ///         let arrived = s.ibarrier()?;
    ///         // ... work that does not depend on the other ranks ...
    ///         arrived.wait().map(drop)
    ///     })
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn ibarrier(&'scope self) -> Result<Request<'scope>> {
        if self.comm.now_possible() {
            self.comm.check_live()?;
            if let Some(direct) = native::direct(self.comm, Collective::Barrier, 0, true) {
                return self.start_collective(move || async move { direct.run(ByteCall::Barrier).await });
            }
        }
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().barrier().await })
    }

    /// Starts a broadcast of `root`'s `buf` (MPI_Ibcast); `buf` is final once the request
    /// completes.
    ///
    /// ```
    /// fastmp::run(4, |world| {
    ///     let mut data = if world.rank() == 1 { [7u32; 1000] } else { [0; 1000] };
    ///     world.scope(|s| {
    ///         let bcast = s.ibcast(&mut data, 1)?;
    ///         let local: u64 = (0..1000u64).sum(); // overlaps with the transfer
    ///         bcast.wait()?;
    ///         Ok::<_, fastmp::Error>(local)
    ///     })?;
    ///     assert_eq!(data, [7; 1000]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn ibcast<T: Pod>(&'scope self, buf: &'scope mut [T], root: usize) -> Result<Request<'scope>> {
        if self.comm.now_possible() {
            self.comm.check_root(root)?;
            if let Some(direct) = native::direct(self.comm, Collective::Bcast, size_of_val(buf), true) {
                let call = ByteCall::Bcast { buf: bytemuck::cast_slice_mut(buf), root };
                return self.start_collective(move || async move { direct.run(call).await });
            }
        }
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().bcast(buf, root).await })
    }

    /// Nonblocking [`crate::Comm::scatter`] (MPI_Iscatter).
    pub fn iscatter<T: Pod>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        root: usize,
    ) -> Result<Request<'scope>> {
        if self.comm.now_possible() {
            self.comm.check_rooted_blocks(root, "scatter send buffer", send.len(), recv.len())?;
            if let Some(direct) = native::direct(self.comm, Collective::Scatter, size_of_val(recv), true) {
                let call =
                    ByteCall::Scatter { send: bytemuck::cast_slice(send), recv: bytemuck::cast_slice_mut(recv), root };
                return self.start_collective(move || async move { direct.run(call).await });
            }
        }
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().scatter(send, recv, root).await })
    }

    /// Nonblocking [`crate::Comm::scatterv`] (MPI_Iscatterv); `counts` and `displs` are copied.
    pub fn iscatterv<T: Pod>(
        &'scope self,
        send: &'scope [T],
        counts: &[usize],
        displs: &[usize],
        recv: &'scope mut [T],
        root: usize,
    ) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        let (counts, displs) = (counts.to_vec(), displs.to_vec());
        self.start_collective(move || async move { run.start().scatterv(send, &counts, &displs, recv, root).await })
    }

    /// Nonblocking [`crate::Comm::gather`] (MPI_Igather).
    pub fn igather<T: Pod>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        root: usize,
    ) -> Result<Request<'scope>> {
        if self.comm.now_possible() {
            self.comm.check_rooted_blocks(root, "gather receive buffer", recv.len(), send.len())?;
            if let Some(direct) = native::direct(self.comm, Collective::Gather, size_of_val(send), true) {
                let call =
                    ByteCall::Gather { send: bytemuck::cast_slice(send), recv: bytemuck::cast_slice_mut(recv), root };
                return self.start_collective(move || async move { direct.run(call).await });
            }
        }
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().gather(send, recv, root).await })
    }

    /// Nonblocking [`crate::Comm::gatherv`] (MPI_Igatherv); `counts` and `displs` are copied.
    pub fn igatherv<T: Pod>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        counts: &[usize],
        displs: &[usize],
        root: usize,
    ) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        let (counts, displs) = (counts.to_vec(), displs.to_vec());
        self.start_collective(move || async move { run.start().gatherv(send, recv, &counts, &displs, root).await })
    }

    /// Nonblocking [`crate::Comm::allgather`] (MPI_Iallgather).
    pub fn iallgather<T: Pod>(&'scope self, send: &'scope [T], recv: &'scope mut [T]) -> Result<Request<'scope>> {
        if self.comm.now_possible() {
            self.comm.check_live()?;
            self.comm.check_blocks("allgather receive buffer", recv.len(), send.len())?;
            if let Some(direct) = native::direct(self.comm, Collective::Allgather, size_of_val(send), true) {
                let call = ByteCall::Allgather {
                    send: Some(bytemuck::cast_slice(send)),
                    recv: bytemuck::cast_slice_mut(recv),
                };
                return self.start_collective(move || async move { direct.run(call).await });
            }
        }
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().allgather(send, recv).await })
    }

    /// Nonblocking [`crate::Comm::allgatherv`] (MPI_Iallgatherv); `counts` and `displs` are
    /// copied.
    pub fn iallgatherv<T: Pod>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        counts: &[usize],
        displs: &[usize],
    ) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        let (counts, displs) = (counts.to_vec(), displs.to_vec());
        self.start_collective(move || async move { run.start().allgatherv(send, recv, &counts, &displs).await })
    }

    /// Nonblocking [`crate::Comm::alltoall`] (MPI_Ialltoall).
    pub fn ialltoall<T: Pod>(&'scope self, send: &'scope [T], recv: &'scope mut [T]) -> Result<Request<'scope>> {
        if self.comm.now_possible() {
            self.comm.check_alltoall(send.len(), recv.len())?;
            let block = size_of_val(send) / self.comm.size();
            if let Some(direct) = native::direct(self.comm, Collective::Alltoall, block, true) {
                let call =
                    ByteCall::Alltoall { send: Some(bytemuck::cast_slice(send)), recv: bytemuck::cast_slice_mut(recv) };
                return self.start_collective(move || async move { direct.run(call).await });
            }
        }
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().alltoall(send, recv).await })
    }

    /// Nonblocking [`crate::Comm::alltoallv`] (MPI_Ialltoallv); counts and displacements are
    /// copied.
    #[allow(clippy::too_many_arguments)]
    pub fn ialltoallv<T: Pod>(
        &'scope self,
        send: &'scope [T],
        send_counts: &[usize],
        send_displs: &[usize],
        recv: &'scope mut [T],
        recv_counts: &[usize],
        recv_displs: &[usize],
    ) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        let send_layout = (send_counts.to_vec(), send_displs.to_vec());
        let recv_layout = (recv_counts.to_vec(), recv_displs.to_vec());
        self.start_collective(move || async move {
            run.start().alltoallv(send, &send_layout.0, &send_layout.1, recv, &recv_layout.0, &recv_layout.1).await
        })
    }

    /// Nonblocking [`crate::Comm::reduce`] (MPI_Ireduce).
    pub fn ireduce<T: Pod, O: Op<T> + 'scope>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        op: O,
        root: usize,
    ) -> Result<Request<'scope>> {
        if self.comm.now_possible() {
            self.comm.check_reduce(root, recv.len(), send.len())?;
            if let Some(direct) = native::direct(self.comm, Collective::Reduce, size_of_val(send), op.is_commutative())
            {
                return self.start_collective(move || async move {
                    direct.run(Call::Reduce { send: Some(send), recv, op: &op, root }).await
                });
            }
        }
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().reduce(send, recv, &op, root).await })
    }

    /// Nonblocking [`crate::Comm::allreduce`] (MPI_Iallreduce).
    ///
    /// ```
    /// use fastmp::op::Sum;
    /// fastmp::run(3, |world| {
    ///     let (mine, mut total) = ([1, world.rank() as u64], [0u64; 2]);
    ///     world.scope(|s| s.iallreduce(&mine, &mut total, Sum)?.wait().map(drop))?;
    ///     assert_eq!(total, [3, 3]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn iallreduce<T: Pod, O: Op<T> + 'scope>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        op: O,
    ) -> Result<Request<'scope>> {
        if self.comm.now_possible() {
            self.comm.check_same_len("allreduce receive buffer", recv.len(), send.len())?;
            let (bytes, commutative) = (size_of_val(send), op.is_commutative());
            if let Some(direct) = native::direct(self.comm, Collective::Allreduce, bytes, commutative) {
                return self.start_collective(move || async move {
                    direct.run(Call::Allreduce { send: Some(send), recv, op: &op }).await
                });
            }
        }
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().allreduce(send, recv, &op).await })
    }

    /// Nonblocking [`crate::Comm::reduce_scatter`] (MPI_Ireduce_scatter); `counts` is copied.
    pub fn ireduce_scatter<T: Pod, O: Op<T> + 'scope>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        counts: &[usize],
        op: O,
    ) -> Result<Request<'scope>> {
        if self.comm.now_possible() {
            self.comm.check_reduce_scatter(send.len(), recv.len(), counts)?;
            let (bytes, commutative) = (size_of_val(send), op.is_commutative());
            if let Some(direct) = native::direct(self.comm, Collective::ReduceScatter, bytes, commutative) {
                let counts = counts.to_vec();
                return self.start_collective(move || async move {
                    direct.run(Call::ReduceScatter { send, recv, counts: &counts, op: &op }).await
                });
            }
        }
        let run = Run::number(self.comm)?;
        let counts = counts.to_vec();
        self.start_collective(move || async move { run.start().reduce_scatter(send, recv, &counts, &op).await })
    }

    /// Nonblocking [`crate::Comm::reduce_scatter_block`] (MPI_Ireduce_scatter_block).
    pub fn ireduce_scatter_block<T: Pod, O: Op<T> + 'scope>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        op: O,
    ) -> Result<Request<'scope>> {
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().reduce_scatter_block(send, recv, &op).await })
    }

    /// Nonblocking [`crate::Comm::scan`] (MPI_Iscan).
    pub fn iscan<T: Pod, O: Op<T> + 'scope>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        op: O,
    ) -> Result<Request<'scope>> {
        if self.comm.now_possible() {
            self.comm.check_same_len("scan receive buffer", recv.len(), send.len())?;
            let (bytes, commutative) = (size_of_val(send), op.is_commutative());
            if let Some(direct) = native::direct(self.comm, Collective::Scan, bytes, commutative) {
                return self.start_collective(move || async move {
                    direct.run(Call::Scan { send: Some(send), recv, op: &op, exclusive: false }).await
                });
            }
        }
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().scan(send, recv, &op).await })
    }

    /// Nonblocking [`crate::Comm::exscan`] (MPI_Iexscan).
    pub fn iexscan<T: Pod, O: Op<T> + 'scope>(
        &'scope self,
        send: &'scope [T],
        recv: &'scope mut [T],
        op: O,
    ) -> Result<Request<'scope>> {
        if self.comm.now_possible() {
            self.comm.check_same_len("exscan receive buffer", recv.len(), send.len())?;
            let (bytes, commutative) = (size_of_val(send), op.is_commutative());
            if let Some(direct) = native::direct(self.comm, Collective::Scan, bytes, commutative) {
                return self.start_collective(move || async move {
                    direct.run(Call::Scan { send: Some(send), recv, op: &op, exclusive: true }).await
                });
            }
        }
        let run = Run::number(self.comm)?;
        self.start_collective(move || async move { run.start().exscan(send, recv, &op).await })
    }
}
