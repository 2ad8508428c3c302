//! The shm device's collective provider: native collectives over a communicator's shared area.
//!
//! - `area`: the shared area (per lane, one published slot per rank) and the enter/leave protocol
//!   that keeps borrowed buffers valid while peers touch them.
//! - `algorithms`: the collectives, each one `async` body over that protocol.
//! - this module: the communicator's [`ShmCollectives`], which hands operations their lane and
//!   epoch, and the [`CollectiveProvider`] implementation.
//!
//! Lanes: operation `n` of the communicator uses lane `n % LANES`, with epochs derived from `n`
//! (a composite's native parts number within the operation), so every rank computes the same
//! (lane, epoch) however its nonblocking operations interleave. A rank enters a lane only when
//! every earlier operation of that lane is over on this rank, so every rank uses each lane in the
//! same order and at most `LANES` operations per communicator are in flight.

mod algorithms;
mod area;

use std::cell::{Cell, RefCell};
use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::task::Poll;

use bytemuck::Pod;

pub(crate) use area::Registry;
use area::{LANES, NativeArea, Waiting};

use super::ShmWorld;
use crate::coll::Layout;
use crate::coll::op::Op;
use crate::device::ContextId;
use crate::device::collectives::{Call, CalledNow, CollectiveProvider, Collectives, Operation};
use crate::error::{Error, Result};
use algorithms::Native;

/// Algorithm choices one collective may make (itself, then one per collective a composite runs:
/// at most 7 with the default composites); each has an epoch of its own.
const DISPATCHES: u64 = 16;

/// One rank's view of a communicator's native area, with its count of operations on it.
pub(crate) struct ShmCollectives {
    area: Arc<NativeArea>,
    /// This rank in the communicator.
    me: usize,
    /// Per lane, the number of the operation whose turn it is: operation `n` may use lane
    /// `n % LANES` once every earlier operation of the lane has finished, so every rank uses each
    /// lane in the same order, whatever order its nonblocking operations progress or complete in.
    lane_turn: [Cell<u64>; LANES],
    /// Operations that finished before their turn came (their lanes' turns skip them later).
    finished_early: RefCell<Vec<u64>>,
    /// Bypass marks (operation, epoch) made before their operation's turn came: applied when
    /// it comes, since marking earlier could fail a peer in an epoch this rank still runs.
    bypassed_early: RefCell<Vec<(u64, u64)>>,
    /// A native collective of this rank is in its synchronous work (copies, user ops) on the area.
    busy: Cell<bool>,
}

impl ShmWorld {
    /// World rank `rank`'s collective provider for the communicator with `context` over
    /// `members` (world ranks in communicator order); `None` if `rank` is not a member.
    pub(crate) fn collectives(
        self: &Arc<Self>,
        context: ContextId,
        members: &[usize],
        rank: usize,
    ) -> Option<Collectives> {
        let me = members.iter().position(|&w| w == rank)?;
        Some(Collectives::new(ShmCollectives::new(self.native_area(context, members), me)))
    }
}

impl ShmCollectives {
    /// Communicator rank `me`'s view of `area`.
    fn new(area: Arc<NativeArea>, me: usize) -> Self {
        ShmCollectives {
            area,
            me,
            lane_turn: std::array::from_fn(|lane| Cell::new(lane as u64)),
            finished_early: RefCell::default(),
            bypassed_early: RefCell::default(),
            busy: Cell::new(false),
        }
    }

    /// Whether operation `seq` may use its lane now.
    fn is_turn_of(&self, seq: u64) -> bool {
        self.lane_turn[seq as usize % LANES].get() == seq
    }

    /// Lane and epoch of `op`'s next native part, once it is the lane's turn: every earlier
    /// operation of the lane (nonblocking ones still running) must be over. Waiting for them
    /// yields; a blocking operation's caller then waits in the device, which drives them, except
    /// from inside an engine poll, where nothing would. `progress` drives the rank's
    /// point-to-point traffic during the part's waits.
    async fn open_lane<'a>(&self, op: &Operation<'a>) -> Result<(Waiting<'a>, u64)> {
        if !self.is_turn_of(op.seq) {
            if op.blocking && op.engine_polling {
                return Err(nested_call());
            }
            poll_fn(|_| if self.is_turn_of(op.seq) { Poll::Ready(()) } else { Poll::Pending }).await;
        }
        let lane = op.seq as usize % LANES;
        let epoch = epoch(op.seq, op.dispatch)?;
        Ok((Waiting { me: self.me, lane, dev: Some(op.dev), blocking: op.blocking }, epoch))
    }

    /// Marks the synchronous work of a native part (copies, user reduction ops) until dropped,
    /// also while unwinding: collectives started meanwhile fail ([`CollectiveProvider::may_start`]).
    fn hold_busy(&self) -> Busy<'_> {
        self.busy.set(true);
        Busy(&self.busy)
    }

    /// Operation `seq`'s turn came in `lane`: its bypass marks made early apply now.
    fn turn_of(&self, lane: usize, seq: u64) {
        self.lane_turn[lane].set(seq);
        let mut early = self.bypassed_early.borrow_mut();
        if early.is_empty() {
            return;
        }
        early.retain(|&(s, epoch)| {
            if s == seq {
                self.area.bypass(self.me, lane, epoch, true);
            }
            s != seq
        });
    }

    /// Marks `epoch` of operation `seq` passed by, waking the peers when `wake`. Only while it
    /// is the operation's turn in its lane: then this rank is done with every earlier epoch of
    /// the lane, so the mark cannot fail a part it still has to run. Out of turn (nonblocking
    /// operations overlapping) the mark waits for the turn, and then wakes the peers.
    fn mark_bypassed(&self, seq: u64, epoch: u64, wake: bool) {
        if self.is_turn_of(seq) {
            self.area.bypass(self.me, seq as usize % LANES, epoch, wake);
        } else {
            self.bypassed_early.borrow_mut().push((seq, epoch));
        }
    }

    fn native<'a>(&'a self, op: &'a Operation<'a>) -> Native<'a> {
        Native { provider: self, op }
    }
}

/// The epoch of choice `dispatch` of operation `seq` in its lane: every rank derives the same,
/// increasing along the lane's operations and their choices.
fn epoch(seq: u64, dispatch: u64) -> Result<u64> {
    if dispatch >= DISPATCHES {
        return Err(Error::InvalidArgument(format!(
            "a collective chose algorithms more than {DISPATCHES} times (a tuning loop between composites?)"
        )));
    }
    Ok((seq / LANES as u64) * DISPATCHES + dispatch + 1)
}

/// See [`ShmCollectives::hold_busy`].
struct Busy<'a>(&'a Cell<bool>);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// The error of a collective started from inside another one's synchronous work (a user op
/// calling a collective): it would run out of order with the other ranks.
fn nested_call() -> Error {
    Error::InvalidArgument(
        "a collective was called on a communicator from inside another collective on it (for example in a user op)"
            .into(),
    )
}

impl CollectiveProvider for ShmCollectives {
    /// Every operation waits for peers: none completes in one synchronous step.
    #[inline]
    fn calls_now(&self) -> bool {
        false
    }

    #[inline]
    fn call_now<T: Pod>(&self, _op: &Operation<'_>, _call: Call<'_, T>) -> Option<CalledNow> {
        None
    }

    #[inline]
    fn may_start(&self) -> Result<()> {
        if self.busy.get() { Err(nested_call()) } else { Ok(()) }
    }

    #[inline]
    fn finished(&self, seq: u64) {
        let lane = seq as usize % LANES;
        let turn = &self.lane_turn[lane];
        if turn.get() != seq {
            self.finished_early.borrow_mut().push(seq);
            return;
        }
        let mut early = self.finished_early.borrow_mut();
        self.turn_of(lane, seq + LANES as u64);
        while let Some(i) = early.iter().position(|&s| s == turn.get()) {
            early.swap_remove(i);
            self.turn_of(lane, turn.get() + LANES as u64);
        }
    }

    fn bypassed(&self, seq: u64, dispatch: u64) {
        // A choice past the last numbered one marks the last: this rank is past all of them.
        let epoch = epoch(seq, dispatch.min(DISPATCHES - 1)).expect("a dispatch below DISPATCHES has an epoch");
        // No wake-ups (see `NativeArea::bypass`): in a correct program every rank makes the same
        // choice, so nobody waits for this mark, and this runs on every message-based choice
        // (waking would read every peer's parker). A peer that chose `native` (arguments that
        // differ between ranks) sees the mark at once while it spins, within a park's timeout
        // once parked.
        self.mark_bypassed(seq, epoch, false);
    }

    fn abandoned(&self, seq: u64) {
        // Every part of the operation: the parts this rank entered it has left (`Session`'s
        // drop), so only peers waiting in the others see the mark.
        self.mark_bypassed(seq, epoch(seq, DISPATCHES - 1).expect("the last dispatch has an epoch"), true);
    }

    fn barrier<'a>(&'a self, op: &'a Operation<'a>) -> impl Future<Output = Result<()>> + 'a {
        algorithms::barrier(self.native(op))
    }

    fn bcast<'a>(
        &'a self,
        op: &'a Operation<'a>,
        buf: &'a mut [u8],
        root: usize,
    ) -> impl Future<Output = Result<()>> + 'a {
        algorithms::bcast(self.native(op), buf, root)
    }

    fn scatter<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        root: usize,
    ) -> impl Future<Output = Result<()>> + 'a {
        algorithms::scatter(self.native(op), send, recv, root)
    }

    fn scatterv<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [u8],
        layout: Option<&'a Layout>,
        recv: &'a mut [u8],
        root: usize,
    ) -> impl Future<Output = Result<()>> + 'a {
        algorithms::scatterv(self.native(op), send, layout, recv, root)
    }

    fn gather<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        root: usize,
    ) -> impl Future<Output = Result<()>> + 'a {
        algorithms::gather(self.native(op), send, recv, root)
    }

    fn gatherv<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        layout: Option<&'a Layout>,
        root: usize,
    ) -> impl Future<Output = Result<()>> + 'a {
        algorithms::gatherv(self.native(op), send, recv, layout, root)
    }

    fn allgather<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [u8]>,
        recv: &'a mut [u8],
    ) -> impl Future<Output = Result<()>> + 'a {
        algorithms::allgather(self.native(op), send, recv)
    }

    fn allgatherv<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [u8]>,
        recv: &'a mut [u8],
        layout: &'a Layout,
    ) -> impl Future<Output = Result<()>> + 'a {
        algorithms::allgatherv(self.native(op), send, recv, layout)
    }

    fn alltoall<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [u8]>,
        recv: &'a mut [u8],
    ) -> impl Future<Output = Result<()>> + 'a {
        algorithms::alltoall(self.native(op), send, recv)
    }

    fn alltoallv<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [u8]>,
        send_layout: &'a Layout,
        recv: &'a mut [u8],
        recv_layout: &'a Layout,
    ) -> impl Future<Output = Result<()>> + 'a {
        algorithms::alltoallv(self.native(op), send, send_layout, recv, recv_layout)
    }

    fn reduce<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [T]>,
        recv: &'a mut [T],
        reduction: &'a dyn Op<T>,
        root: usize,
    ) -> impl Future<Output = Result<()>> + 'a {
        algorithms::reduce(self.native(op), send, recv, reduction, root)
    }

    fn allreduce<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [T]>,
        recv: &'a mut [T],
        reduction: &'a dyn Op<T>,
    ) -> impl Future<Output = Result<()>> + 'a {
        algorithms::allreduce(self.native(op), send, recv, reduction)
    }

    fn reduce_scatter<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [T],
        recv: &'a mut [T],
        counts: &'a [usize],
        reduction: &'a dyn Op<T>,
    ) -> impl Future<Output = Result<()>> + 'a {
        algorithms::reduce_scatter(self.native(op), send, recv, counts, reduction)
    }

    fn scan<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [T]>,
        recv: &'a mut [T],
        reduction: &'a dyn Op<T>,
        exclusive: bool,
    ) -> impl Future<Output = Result<()>> + 'a {
        algorithms::scan(self.native(op), send, recv, reduction, exclusive)
    }
}

#[cfg(test)]
mod tests {
    use std::task::{Context, Waker};
    use std::time::Duration;

    use super::*;
    use crate::device::Placement;

    /// Rank 1 waits in the barrier of operation `seq` for rank 0, which never enters it and
    /// gives it up in `give_up` (on its provider, with a probe of whether rank 1 still waits):
    /// rank 1 must fail, not wait.
    fn peer_of_an_abandoned_operation_fails(seq: u64, give_up: impl FnOnce(&ShmCollectives, &dyn Fn() -> bool)) {
        let world = ShmWorld::with_placement(2, 4096, Placement::single_process(2), 2);
        let area = world.native_area(0, &[0, 1]);
        let epoch = epoch(seq, 0).expect("an epoch");
        std::thread::scope(|s| {
            let waiter = s.spawn(|| {
                world.ranks[1].parker.register_current();
                let how = Waiting { me: 1, lane: seq as usize % LANES, dev: None, blocking: true };
                let mut barrier = std::pin::pin!(area.barrier(how, epoch));
                match barrier.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                    Poll::Ready(outcome) => outcome,
                    Poll::Pending => panic!("a blocking wait returned pending"),
                }
            });
            world.ranks[0].parker.register_current();
            // Give rank 1 time to park in its wait, so the mark must wake it.
            std::thread::sleep(Duration::from_millis(50));
            give_up(&ShmCollectives::new(area.clone(), 0), &|| !waiter.is_finished());
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !waiter.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            let hung = !waiter.is_finished();
            if hung {
                // Ends the wait another way, so the failure is reported rather than a hang.
                area.fail_job(0);
            }
            let outcome = waiter.join().expect("the waiting rank");
            assert!(!hung, "rank 1 still waited 10 s after rank 0 gave the operation up");
            let err = outcome.expect_err("the peer of an abandoned operation must fail");
            assert!(err.to_string().contains("rank 0 abandoned"), "unexpected error: {err}");
        });
    }

    #[test]
    fn an_operation_given_up_fails_peers_waiting_in_it() {
        peer_of_an_abandoned_operation_fails(0, |rank0, _| {
            rank0.abandoned(0);
            rank0.finished(0);
        });
    }

    /// Given up out of its lane's turn (an earlier operation of the lane still running), the
    /// mark waits for the turn: it must not fail a part of the earlier operation.
    #[test]
    fn an_operation_given_up_out_of_turn_fails_its_peers_once_its_turn_comes() {
        let later = LANES as u64;
        peer_of_an_abandoned_operation_fails(later, |rank0, still_waiting| {
            rank0.abandoned(later);
            rank0.finished(later);
            std::thread::sleep(Duration::from_millis(50));
            assert!(still_waiting(), "marked before the lane's earlier operation finished");
            rank0.finished(0);
        });
    }
}
