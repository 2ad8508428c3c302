//! The `hybrid` device: a job of processes whose ranks are threads. Each rank routes over two
//! endpoints: its process's shm world (thread peers, single-copy protocols) and its own remote
//! endpoint reaching every rank of the other processes: tcp (a mesh of all world ranks, the
//! default) or the system MPI (`FASTMP_INTERPROCESS=mpi`, feature `mpi`: `device::mpi::lanes`).
//!
//! - Ranks are world ranks; the process's shm world numbers its ranks `0..T`, so `base` (the
//!   process's first world rank) translates both ways, statuses and errors included.
//! - Sends, and receives and probes from a named source, go to that rank's transport: one branch
//!   on the hot path, no table, no lock (request handles carry their route, see `handles`).
//! - `ANY_SOURCE` receives are held at this level and matched in posting order by matched probes
//!   on both transports (`queue`).
//! - The router is generic over the remote endpoint ([`Remote`]: the [`Device`] methods plus a
//!   wake-up hook). Waiting with tcp spins, yields and parks on the rank's shm parker, and the tcp
//!   endpoint's waker unparks it on arrivals and failures. MPI has no wake-up hook, so a rank
//!   over MPI never parks: it polls both sides with the spin/yield policy and short sleeps.
//!
//! v1 limits: over tcp every rank has connections to every other, also to its thread peers
//! (never used for messages, only for start-up, failure notices, shutdown and one-sided windows
//! that span processes, see `one_sided`); over MPI, windows that span processes are refused.

mod handles;
mod one_sided;
mod queue;

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use super::collectives::Collectives;
use super::shm::ShmEndpoint;
use super::tcp::TcpEndpoint;
use super::{
    ContextId, Device, Failure, MatchSpec, MessageId, Placement, RawStatus, ReqId, SendMode, ShmWorld, Source, Started,
};
use crate::error::{Error, Result};
use handles::{Via, local_as_is, local_error_to_world, stale, tag, tag_message, untag};
use queue::{Queue, Stage};

/// What the hybrid router needs from the endpoint that reaches the other processes.
pub(crate) trait Remote: Device {
    /// Hooks the rank's shm parker to arrivals and failures (a remote failure is passed on);
    /// `false` when this endpoint cannot wake anyone, so waits must not park.
    fn set_waker(&self, waker: super::tcp::Waker) -> bool;

    /// `Device::test` as a rank blocked in [`Remote::wait_until_parking`] sees it.
    fn test_blocked(&self, id: ReqId) -> Result<Option<RawStatus>> {
        self.test(id)
    }

    /// `Device::wait_until` that parks with `park` (where arrivals wake it).
    fn wait_until_parking(&self, park: super::tcp::Park<'_>, poll: &mut dyn FnMut() -> Result<bool>) -> Result<()>;

    /// Leaves the job after the rank's program succeeded.
    fn shutdown(&self) -> Result<()>;

    /// Tells the other processes about the job's failure (`abort_job` already put it on record).
    fn abort(&self, job: Failure);

    /// Serves one-sided windows that span processes, every member addressed by world rank
    /// (`None`: such windows are refused).
    fn windows(&self) -> Option<&dyn super::one_sided::OneSided> {
        None
    }
}

impl Remote for TcpEndpoint {
    fn windows(&self) -> Option<&dyn super::one_sided::OneSided> {
        Device::one_sided(self)
    }

    fn set_waker(&self, waker: super::tcp::Waker) -> bool {
        TcpEndpoint::set_waker(self, waker);
        true
    }

    fn test_blocked(&self, id: ReqId) -> Result<Option<RawStatus>> {
        TcpEndpoint::test_blocked(self, id)
    }

    fn wait_until_parking(&self, park: super::tcp::Park<'_>, poll: &mut dyn FnMut() -> Result<bool>) -> Result<()> {
        TcpEndpoint::wait_until_parking(self, park, poll)
    }

    fn shutdown(&self) -> Result<()> {
        TcpEndpoint::shutdown(self)
    }

    fn abort(&self, job: Failure) {
        TcpEndpoint::abort(self, job);
    }
}

/// Polls of the thread peers' side alone before a wait enters the remote endpoint's loop (see
/// `wait_until`).
const LOCAL_POLLS_FIRST: u32 = 128;

/// The hybrid [`Device`] of one rank (its rank's thread only, like shm's), over the remote
/// endpoint `R` that reaches the other processes.
pub(crate) struct HybridEndpoint<R: Remote = TcpEndpoint> {
    rank: usize,
    size: usize,
    /// World rank of the process's local rank 0.
    base: usize,
    /// Ranks of this process.
    local_size: usize,
    shm: ShmEndpoint,
    /// The other processes' ranks: tcp, or the system MPI (`FASTMP_INTERPROCESS`).
    remote: R,
    placement: Placement,
    queue: RefCell<Queue>,
    /// Inside `wait_until`: remote requests are tested as a blocked waiter's.
    waiting: Cell<bool>,
    finalized: Cell<bool>,
}

impl<R: Remote> HybridEndpoint<R> {
    /// World rank `rank` of `size`, over its process's shm endpoint (local rank `rank - base`)
    /// and its remote endpoint. Registers the remote waker, so call it on the rank's thread.
    pub(crate) fn new(rank: usize, base: usize, shm: ShmEndpoint, remote: R, placement: Placement) -> Self {
        let world: Arc<ShmWorld> = shm.world().clone();
        let local = rank - base;
        remote.set_waker(Box::new(move |failure| match failure {
            Some(failure) => world.mark_failed(local, failure.clone()),
            None => world.notify(local),
        }));
        HybridEndpoint {
            rank,
            size: remote.size(),
            base,
            local_size: shm.size(),
            shm,
            remote,
            placement,
            queue: RefCell::default(),
            waiting: Cell::new(false),
            finalized: Cell::new(false),
        }
    }

    /// The remote side, for the runner's shutdown and abort.
    pub(crate) fn remote(&self) -> &R {
        &self.remote
    }

    /// The process's shm world and this rank's place in it.
    pub(crate) fn local(&self) -> (&Arc<ShmWorld>, usize) {
        (self.shm.world(), self.rank - self.base)
    }

    #[inline]
    fn is_local(&self, rank: usize) -> bool {
        rank.wrapping_sub(self.base) < self.local_size
    }

    #[inline]
    fn via(&self, rank: usize) -> Via {
        if self.is_local(rank) { Via::Local } else { Via::Remote }
    }

    /// `spec` in the shm world's numbering.
    #[inline]
    fn local_spec(&self, spec: MatchSpec) -> MatchSpec {
        match spec.source {
            Source::Rank(r) => MatchSpec { source: Source::Rank(r - self.base), ..spec },
            Source::Any => spec,
        }
    }

    #[inline]
    fn world_status(&self, via: Via, mut status: RawStatus) -> RawStatus {
        if via == Via::Local {
            status.source += self.base;
        }
        status
    }

    /// An error of the shm side in world numbering (cold: kept out of the per-message paths).
    #[cold]
    #[inline(never)]
    fn world_error(&self, via: Via, e: Error) -> Error {
        if via == Via::Local { local_error_to_world(self.base, e) } else { e }
    }

    #[inline]
    fn world_result(&self, via: Via, r: Result<RawStatus>) -> Result<RawStatus> {
        match r {
            Ok(status) => Ok(self.world_status(via, status)),
            Err(e) => Err(self.world_error(via, e)),
        }
    }

    /// A transport's start as the hybrid device's. Small enough to inline into every start:
    /// the errors are mapped out of line.
    #[inline]
    fn routed(&self, via: Via, started: Result<Started>) -> Result<Started> {
        match started {
            Ok(Started::Pending(id)) => tag(via, id).map(Started::Pending),
            Ok(Started::Complete(Ok(status))) => Ok(Started::Complete(Ok(self.world_status(via, status)))),
            Ok(Started::Complete(Err(e))) => Ok(Started::Complete(Err(self.world_error(via, e)))),
            Err(e) => Err(self.world_error(via, e)),
        }
    }

    /// A thread peer's receive start as the hybrid device's. The status is rebuilt field by
    /// field: patching the transport's in place and passing the whole on made the next wide load
    /// of it wait for the narrow stores (a store-forwarding stall, most of this path's time).
    #[inline(always)]
    fn local_started(&self, started: Result<Started>) -> Result<Started> {
        match started {
            Ok(Started::Complete(Ok(status))) => Ok(Started::Complete(Ok(self.local_status(&status)))),
            Ok(Started::Pending(id)) if local_as_is(id) => Ok(Started::Pending(id)),
            started => self.routed(Via::Local, started),
        }
    }

    /// A thread peer's test result as the hybrid device's (see `local_started`).
    #[inline(always)]
    fn local_tested(&self, tested: Result<Option<RawStatus>>) -> Result<Option<RawStatus>> {
        match tested {
            Ok(Some(status)) => Ok(Some(self.local_status(&status))),
            Ok(None) => Ok(None),
            Err(e) => Err(self.world_error(Via::Local, e)),
        }
    }

    /// A status of the shm side in world numbering, read one field at a time (see
    /// `local_started`).
    #[inline(always)]
    fn local_status(&self, status: &RawStatus) -> RawStatus {
        RawStatus {
            source: status.source + self.base,
            tag: status.tag,
            bytes: status.bytes,
            cancelled: status.cancelled,
        }
    }

    /// A transport's send start as the hybrid device's: a send that completed at once gets the
    /// status rebuilt from our arguments ([`RawStatus::sent`]), not copied from the transport's.
    #[inline]
    fn routed_send(&self, via: Via, started: Result<Started>, tag: i32, len: usize) -> Result<Started> {
        match started {
            Ok(Started::Complete(Ok(_))) => Ok(Started::Complete(Ok(RawStatus::sent(self.rank, tag, len)))),
            started => self.routed(via, started),
        }
    }

    /// Whether a receive goes straight to the shm side: from a named thread peer, with no held
    /// receive of its context ahead of it (the intra-process path of `irecv` and `recv`).
    #[inline(always)]
    fn receives_locally(&self, spec: MatchSpec) -> bool {
        matches!(spec.source, Source::Rank(r) if self.is_local(r))
            && !self.finalized.get()
            && !self.queue.borrow().blocks(spec.context)
    }

    /// `isend` to a rank of another process (or refused), out of the thread peers' path.
    #[inline(never)]
    unsafe fn isend_remote(
        &self,
        buf: *const u8,
        len: usize,
        dest: usize,
        tag: i32,
        context: ContextId,
        mode: SendMode,
    ) -> Result<Started> {
        self.check_live()?;
        if dest >= self.size {
            return Err(Error::RankOutOfRange { rank: dest, size: self.size });
        }
        // SAFETY: forwarded caller contract.
        let started = unsafe { self.remote.isend(buf, len, dest, tag, context, mode) };
        self.routed_send(Via::Remote, started, tag, len)
    }

    /// `irecv` from a remote rank or `ANY_SOURCE`, or held behind an earlier wildcard receive.
    #[inline(never)]
    unsafe fn irecv_routed(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Result<Started> {
        self.check_live()?;
        self.check_source(spec)?;
        if self.queue.borrow().blocks(spec.context) {
            return self.hold(spec, buf, capacity);
        }
        match spec.source {
            Source::Rank(r) if self.is_local(r) => {
                // SAFETY: forwarded caller contract.
                self.routed(Via::Local, unsafe { self.shm.irecv(buf, capacity, self.local_spec(spec)) })
            }
            // SAFETY: forwarded caller contract.
            Source::Rank(_) => self.routed(Via::Remote, unsafe { self.remote.irecv(buf, capacity, spec) }),
            Source::Any => match self.take_message(spec)? {
                Some((msg, _)) => self.receive_taken(msg, buf, capacity),
                None => self.hold(spec, buf, capacity),
            },
        }
    }

    /// `test` of a remote or held request (or a refusal), out of the thread peers' path.
    #[inline(never)]
    fn test_other(&self, req: ReqId) -> Result<Option<RawStatus>> {
        self.check_live()?;
        match untag(req).ok_or_else(stale)? {
            (Via::Queued, id) => self.test_held(id),
            (via, id) => self.test_routed(via, id),
        }
    }

    fn check_live(&self) -> Result<()> {
        if self.finalized.get() { Err(Error::Finalized("device")) } else { Ok(()) }
    }

    fn check_source(&self, spec: MatchSpec) -> Result<()> {
        match spec.source {
            Source::Rank(r) if r >= self.size => Err(Error::RankOutOfRange { rank: r, size: self.size }),
            _ => Ok(()),
        }
    }

    fn improbe_on(&self, via: Via, spec: MatchSpec) -> Result<Option<(MessageId, RawStatus)>> {
        let found = match via {
            Via::Local => self.shm.improbe(self.local_spec(spec)),
            _ => self.remote.improbe(spec),
        };
        match found {
            Ok(Some((msg, status))) => Ok(Some((tag_message(via, msg)?, self.world_status(via, status)))),
            Ok(None) => Ok(None),
            Err(e) => Err(self.world_error(via, e)),
        }
    }

    fn iprobe_on(&self, via: Via, spec: MatchSpec) -> Result<Option<RawStatus>> {
        let found = match via {
            Via::Local => self.shm.iprobe(self.local_spec(spec)),
            _ => self.remote.iprobe(spec),
        };
        match found {
            Ok(status) => Ok(status.map(|s| self.world_status(via, s))),
            Err(e) => Err(self.world_error(via, e)),
        }
    }

    /// Asks both transports for an `ANY_SOURCE` message with `probe`, thread peers first: a
    /// fixed order, so repeated probes agree on which message is first (as one arrival order
    /// would). It can never come only when both say so (thread peers and remote ranks are all
    /// gone), or when the job is aborted.
    fn probe_both<T>(&self, probe: impl Fn(Via) -> Result<Option<T>>) -> Result<Option<T>> {
        let order = [Via::Local, Via::Remote];
        let mut hopeless = [None, None];
        for (i, via) in order.into_iter().enumerate() {
            match probe(via) {
                Ok(Some(found)) => return Ok(Some(found)),
                Ok(None) => {}
                Err(e @ Error::PeerFailed { .. }) => return Err(e),
                Err(e) => hopeless[i] = Some(e),
            }
        }
        match hopeless {
            // The remote reason names the job's ranks (every rank is its peer).
            [Some(_), Some(remote)] => Err(remote),
            _ => Ok(None),
        }
    }

    /// Whether a held receive still waiting (stalled behind an earlier one of its context) is
    /// owed the message `status` describes.
    fn owed(&self, context: ContextId, status: &RawStatus) -> bool {
        let q = self.queue.borrow();
        q.order.iter().any(|&id| q.held.get(id).is_some_and(|h| h.spec.matches(context, status.source, status.tag)))
    }

    /// Tests a routed (transport) request.
    #[inline]
    fn test_routed(&self, via: Via, id: ReqId) -> Result<Option<RawStatus>> {
        let r = match via {
            Via::Local => self.shm.test(id),
            _ if self.waiting.get() => self.remote.test_blocked(id),
            _ => self.remote.test(id),
        };
        match r {
            Ok(Some(status)) => Ok(Some(self.world_status(via, status))),
            Ok(None) => Ok(None),
            Err(e) => Err(self.world_error(via, e)),
        }
    }

    fn test_held(&self, id: ReqId) -> Result<Option<RawStatus>> {
        self.advance_queue()?;
        let stage = {
            let mut q = self.queue.borrow_mut();
            let held = q.held.get_mut(id)?;
            match &held.stage {
                Stage::Waiting => return Ok(None),
                Stage::Routed(routed) => Stage::Routed(*routed),
                Stage::Done(_) => std::mem::replace(&mut held.stage, Stage::Waiting),
            }
        };
        let result = match stage {
            Stage::Routed(routed) => {
                let (via, inner) = untag(routed).ok_or_else(stale)?;
                match self.test_routed(via, inner) {
                    Ok(None) => return Ok(None),
                    r => r,
                }
            }
            Stage::Done(r) => r.map(Some),
            Stage::Waiting => unreachable!("returned above"),
        };
        self.queue.borrow_mut().held.remove(id);
        result
    }
}

impl<R: Remote> Device for HybridEndpoint<R> {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    /// Thread peers take the intra-process path (as in `send` and `recv`): shm's own checks
    /// cover the arguments, and nothing else is on the way.
    unsafe fn isend(
        &self,
        buf: *const u8,
        len: usize,
        dest: usize,
        tag: i32,
        context: ContextId,
        mode: SendMode,
    ) -> Result<Started> {
        if self.is_local(dest) && !self.finalized.get() {
            // SAFETY: forwarded caller contract.
            let started = unsafe { self.shm.isend(buf, len, dest - self.base, tag, context, mode) };
            return self.routed_send(Via::Local, started, tag, len);
        }
        // SAFETY: forwarded caller contract.
        unsafe { self.isend_remote(buf, len, dest, tag, context, mode) }
    }

    fn send(&self, buf: &[u8], dest: usize, tag: i32, context: ContextId, mode: SendMode) -> Result<()> {
        // The intra-process ping-pong path, as `recv`'s: a rendezvous to a thread peer waits in
        // shm's own wait, not in the remote endpoint's loop (0.2 µs of an 8 KiB round trip).
        if self.is_local(dest) && !self.finalized.get() {
            return self
                .shm
                .send(buf, dest - self.base, tag, context, mode)
                .map_err(|e| self.world_error(Via::Local, e));
        }
        super::send_by_request(self, buf, dest, tag, context, mode)
    }

    unsafe fn irecv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Result<Started> {
        if self.receives_locally(spec) {
            // SAFETY: forwarded caller contract.
            return self.local_started(unsafe { self.shm.irecv(buf, capacity, self.local_spec(spec)) });
        }
        // SAFETY: forwarded caller contract.
        unsafe { self.irecv_routed(buf, capacity, spec) }
    }

    unsafe fn recv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Result<RawStatus> {
        // The intra-process ping-pong path: straight to shm's blocking receive (its wait hears
        // of remote failures through the remote waker; without one it polls).
        if self.receives_locally(spec) {
            // SAFETY: forwarded caller contract.
            let r = unsafe { self.shm.recv(buf, capacity, self.local_spec(spec)) };
            return self.world_result(Via::Local, r);
        }
        // SAFETY: forwarded caller contract.
        let started = unsafe { self.irecv(buf, capacity, spec)? };
        self.complete(started)
    }

    /// Held receives take what has arrived first, as they would have on arrival: a probe
    /// never reports a message an earlier receive is owed (`queue::probe_unowed`).
    fn iprobe(&self, spec: MatchSpec) -> Result<Option<RawStatus>> {
        self.check_live()?;
        self.check_source(spec)?;
        self.probe_unowed(spec)
    }

    fn test(&self, req: ReqId) -> Result<Option<RawStatus>> {
        match untag(req) {
            Some((Via::Local, id)) if !self.finalized.get() => self.local_tested(self.shm.test(id)),
            _ => self.test_other(req),
        }
    }

    fn cancel(&self, req: ReqId) -> Result<()> {
        self.check_live()?;
        match untag(req).ok_or_else(stale)? {
            (Via::Local, id) => self.shm.cancel(id),
            (Via::Remote, id) => self.remote.cancel(id),
            (Via::Queued, id) => {
                let routed = {
                    let mut q = self.queue.borrow_mut();
                    let held = q.held.get_mut(id)?;
                    match held.stage {
                        Stage::Waiting => {
                            let cancelled = RawStatus { source: self.rank, tag: 0, bytes: 0, cancelled: true };
                            held.stage = Stage::Done(Ok(cancelled));
                            q.unlink(id);
                            return Ok(());
                        }
                        Stage::Routed(routed) => routed,
                        Stage::Done(_) => return Ok(()),
                    }
                };
                self.cancel(routed)
            }
        }
    }

    fn release(&self, req: ReqId) {
        match untag(req) {
            Some((Via::Local, id)) => self.shm.release(id),
            Some((Via::Remote, id)) => self.remote.release(id),
            Some((Via::Queued, id)) => {
                let held = {
                    let mut q = self.queue.borrow_mut();
                    q.unlink(id);
                    q.held.remove(id)
                };
                if let Some(held) = held
                    && let Stage::Routed(routed) = held.stage
                {
                    self.release(routed);
                }
            }
            None => {}
        }
    }

    fn wait_until(&self, poll: &mut dyn FnMut() -> Result<bool>) -> Result<()> {
        struct Restore<'a, R: Remote>(&'a HybridEndpoint<R>, bool, bool);
        impl<R: Remote> Drop for Restore<'_, R> {
            fn drop(&mut self) {
                self.0.shm.set_blocked(self.1);
                self.0.waiting.set(self.2);
            }
        }
        let _restore = Restore(self, self.shm.set_blocked(true), self.waiting.replace(true));
        let (world, local) = self.local();
        let park = |ready: &mut dyn FnMut() -> bool| {
            if self.shm.has_queued_sends() {
                // Sends waiting for ring space: nobody signals space, so keep yielding.
                if !ready() {
                    std::thread::yield_now();
                }
            } else {
                world.park(local, ready);
            }
        };
        let mut poll_locally = || {
            self.shm.progress();
            self.advance_queue()?;
            if poll()? {
                return Ok(true);
            }
            match world.first_failure() {
                Some(failure) => Err(failure.peer_error()),
                None => Ok(false),
            }
        };
        // Thread peers answer within a cache-line hand-off, and a round of the remote endpoint
        // costs more (every connection, its state's lock, its wait bookkeeping): poll the local
        // side alone for a few microseconds first. Remote requests among those polled still
        // progress their transport when tested. Not where ranks time-share cores.
        if !world.time_shared() {
            for _ in 0..LOCAL_POLLS_FIRST {
                if poll_locally()? {
                    return Ok(());
                }
                std::hint::spin_loop();
            }
        }
        self.remote.wait_until_parking(&park, &mut poll_locally)
    }

    fn progress(&self) {
        self.shm.progress();
        self.remote.progress();
    }

    fn finalize(&self) {
        self.finalized.set(true);
        self.shm.finalize();
        self.remote.finalize();
    }

    fn is_finalized(&self) -> bool {
        self.finalized.get()
    }

    fn placement(&self) -> &Placement {
        &self.placement
    }

    fn name(&self) -> &'static str {
        "hybrid"
    }

    fn abort_job(&self, failure: Failure) -> Failure {
        let (world, local) = self.local();
        let job = self.job_failure().unwrap_or(failure);
        world.mark_failed(local, job.clone());
        self.remote.abort_job(job)
    }

    /// The shm world's record first: a thread peer's failure is there at once, and a remote one
    /// is copied there by the remote waker.
    fn job_failure(&self) -> Option<Failure> {
        self.shm.world().first_failure().or_else(|| self.remote.job_failure())
    }

    /// The shm native collectives for communicators inside this process (members translated to
    /// the shm world's numbering); message-based algorithms for the others.
    fn collectives(&self, context: ContextId, members: &[usize]) -> Option<Collectives> {
        if !members.iter().all(|&m| self.is_local(m)) {
            return None;
        }
        let local: Vec<usize> = members.iter().map(|&m| m - self.base).collect();
        self.shm.collectives(context, &local)
    }

    fn improbe(&self, spec: MatchSpec) -> Result<Option<(MessageId, RawStatus)>> {
        self.check_live()?;
        self.check_source(spec)?;
        // Only a message no held receive is owed (`iprobe` checks) may be taken.
        if self.iprobe(spec)?.is_none() {
            return Ok(None);
        }
        self.take_message(spec)
    }

    unsafe fn mrecv(&self, msg: MessageId, buf: *mut u8, capacity: usize) -> Result<Started> {
        self.receive_taken(msg, buf, capacity)
    }

    /// Each window is served by one transport (see `one_sided`).
    fn one_sided(&self) -> Option<&dyn super::one_sided::OneSided> {
        Some(self)
    }
}
