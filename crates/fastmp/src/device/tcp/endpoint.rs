//! The tcp endpoint of one rank: the [`Device`] implementation, requests (completion, cancel,
//! release) and messages to the rank itself, over the connections and progress of [`Shared`].

use std::net::Shutdown;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::bootstrap::Mesh;
use super::frame::{self, Accept, Frame};
use super::link::Link;
use super::progress::input_loop;
use super::rx::Rx;
use super::state::{self, Body, PeerState, RecvPhase, RecvReq, Req, SendPhase, SendReq, State};
use super::tx::Tx;
use super::{Peer, Shared, TcpOptions, io_error};
use crate::device::matching::Envelope;
#[cfg(test)]
use crate::device::wait::WaitPolicy;
use crate::device::{
    ContextId, Device, Failure, MatchSpec, MessageId, Placement, RawStatus, ReqId, SendMode, SharedDevice, Source,
    Started, TAG_UB, lock_ignoring_poison as lock, receive_result,
};
use crate::error::{Error, Result};

/// How long an aborting rank tries to get its abort notice out.
const ABORT_FLUSH: Duration = Duration::from_secs(1);

/// The tcp [`Device`] of one rank. Thread-safe: user threads and the input thread share it.
/// The rank's `Comm` holds the first one; `Comm::threaded` hands out handles (more values over
/// the same state) for the rank's other threads.
pub(crate) struct TcpEndpoint {
    shared: Arc<Shared>,
    input: Arc<InputThread>,
    /// A handle for other threads of the rank (counted in `Shared::helpers` while it lives).
    helper: bool,
}

/// The input-handler thread, stopped when its last endpoint value goes (or at shutdown).
struct InputThread {
    shared: Arc<Shared>,
    handle: Mutex<Option<JoinHandle<()>>>,
}

impl InputThread {
    fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.kick_input();
        if let Some(handle) = lock(&self.handle).take() {
            let _ = handle.join();
        }
    }
}

impl Drop for InputThread {
    fn drop(&mut self) {
        self.stop();
    }
}

impl TcpEndpoint {
    /// Wraps the connected mesh of rank `rank` and starts the input-handler thread.
    pub(crate) fn new(rank: usize, mesh: Mesh, options: TcpOptions) -> Result<Self> {
        let Mesh { streams, mut rings, placement } = mesh;
        let size = streams.len();
        let shm_links = rings.iter().any(Option::is_some);
        let mut peers = Vec::with_capacity(size);
        for (p, s) in streams.into_iter().enumerate() {
            peers.push(match s {
                None => None,
                Some(stream) => {
                    stream.set_nonblocking(true).map_err(|e| io_error("could not make a socket non-blocking", e))?;
                    // The bootstrap authenticated this connection as rank `p`'s; ranks fit 32 bits.
                    let accept = Accept { max_eager: options.eager_limit as u64, source: p as u32, dest: rank as u32 };
                    let ring = rings[p].take();
                    // Pacing is about the kernel's send queue; rings have none.
                    let pace = if ring.is_some() { 0 } else { options.pace };
                    let reads = ring.as_ref().filter(|_| options.peer_reads).and_then(|ring| ring.peer_process());
                    Some(Peer {
                        reads,
                        link: Link::new(stream, ring),
                        rx: Mutex::new(Rx::new(accept)),
                        tx: Mutex::new(Tx::paced(pace)),
                        tx_busy: AtomicBool::new(false),
                        closed: AtomicBool::new(false),
                        write_shut: AtomicBool::new(false),
                    })
                }
            });
        }
        // SAFETY: eventfd takes two integers and returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io_error("could not create an eventfd", std::io::Error::last_os_error()));
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let wake_fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let shared = Arc::new(Shared {
            rank,
            size,
            eager_limit: options.eager_limit,
            peers,
            state: Mutex::new(State::new(size, options.eager_limit)),
            policy: options.policy,
            epoch: Mutex::new(0),
            woken: Condvar::new(),
            parked: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            user_polls: AtomicU64::new(0),
            idle: Mutex::new(()),
            idle_cv: Condvar::new(),
            wake_fd,
            stop: AtomicBool::new(false),
            helpers: AtomicUsize::new(0),
            progress_thread: options.progress_thread,
            finalized: AtomicBool::new(false),
            placement,
            windows: Default::default(),
            rma_served: AtomicU64::new(0),
            waker: std::sync::OnceLock::new(),
            shm_links,
        });
        let input_shared = shared.clone();
        let input = std::thread::Builder::new()
            .name(format!("fastmp-tcp-input-{rank}"))
            .spawn(move || input_loop(&input_shared))
            .map_err(|e| io_error("could not start the input-handler thread", e))?;
        let input = Arc::new(InputThread { shared: shared.clone(), handle: Mutex::new(Some(input)) });
        Ok(TcpEndpoint { shared, input, helper: false })
    }

    /// Ends a rank that finished its program: says `Bye` to every peer, keeps serving them
    /// (their receives of our released sends) until each has said `Bye` too, then closes.
    /// Like `MPI_Finalize` this waits for every peer to finish; a failed peer ends the wait.
    pub(crate) fn shutdown(&self) -> Result<()> {
        let sh = &*self.shared;
        for p in sh.peer_ranks() {
            sh.send_frame(p, Frame::Bye, &[]);
        }
        // Every peer is visited each round (no short-circuit): each needs its write side shut.
        let result = self.wait_until(&mut || Ok(sh.peer_ranks().filter(|&p| !sh.try_close(p)).count() == 0));
        self.stop_input();
        result
    }

    /// Ends a rank whose program failed: tells every peer about the job's failure (best effort,
    /// bounded time), so their pending and future operations fail instead of waiting, and closes
    /// the connections. Returns the failure the job ends with (see [`Device::abort_job`]).
    pub(crate) fn abort(&self, failure: Failure) -> Failure {
        let sh = &*self.shared;
        let job = self.abort_job(failure);
        let deadline = Instant::now() + ABORT_FLUSH;
        while Instant::now() < deadline && sh.peer_ranks().any(|p| sh.peer(p).tx_busy.load(Ordering::Acquire)) {
            sh.progress_once();
            std::thread::sleep(Duration::from_millis(1));
        }
        for p in sh.peer_ranks() {
            sh.peer(p).link.shutdown(Shutdown::Both);
        }
        self.stop_input();
        job
    }

    fn stop_input(&self) {
        self.input.stop();
    }

    /// Whether request `id` has finished (or is gone): its completion no longer depends on the
    /// network. Leaves it in place for its owner.
    pub(super) fn settled(&self, id: ReqId) -> bool {
        match lock(&self.shared.state).reqs.get(id) {
            None => true,
            Some(Req::Recv(r)) => matches!(r.phase, RecvPhase::Done(_)),
            Some(Req::Send(s)) => matches!(s.phase, SendPhase::Done(_)),
        }
    }

    /// Registers the hybrid rank's [`super::Waker`] (once; later calls are ignored).
    pub(crate) fn set_waker(&self, waker: super::Waker) {
        let _ = self.shared.waker.set(waker);
    }

    /// `Device::test` as a blocked waiter sees it: a request that can no longer complete (its
    /// peer exited) fails instead of staying in flight. For a hybrid rank waiting in
    /// [`TcpEndpoint::wait_until_parking`].
    pub(crate) fn test_blocked(&self, id: ReqId) -> Result<Option<RawStatus>> {
        self.check_live()?;
        self.shared.user_progress();
        self.try_complete(id, true)
    }

    /// `Device::wait_until` that parks with `park` instead of this endpoint's condition
    /// variable (the hybrid device parks on its shm parker, woken by thread peers and by the
    /// [`super::Waker`]). `park` gets the readiness check to re-run after announcing itself.
    pub(crate) fn wait_until_parking(
        &self,
        park: super::Park<'_>,
        poll: &mut dyn FnMut() -> Result<bool>,
    ) -> Result<()> {
        self.shared.wait_until_with(Some(park), poll)
    }

    /// How this endpoint's waits spin, yield and park (for the launcher's tests).
    #[cfg(test)]
    pub(crate) fn policy(&self) -> WaitPolicy {
        self.shared.policy
    }

    pub(super) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Another value over the same endpoint for the rank's own thread (a window handle's), not
    /// counted as a helper thread.
    pub(super) fn handle(&self) -> TcpEndpoint {
        TcpEndpoint { shared: self.shared.clone(), input: self.input.clone(), helper: false }
    }

    /// Completes `id` if it is done, or fails it if it can never be; `Ok(None)` while in flight.
    fn try_complete(&self, id: ReqId, blocked: bool) -> Result<Option<RawStatus>> {
        let sh = &*self.shared;
        let mut st = lock(&sh.state);
        st.reqs.get_mut(id)?; // a stale handle is an error
        let Some(req) = st.reqs.get(id) else { unreachable!("checked above") };
        let failure = match req {
            Req::Recv(r) => match &r.phase {
                RecvPhase::Done(_) => {
                    let Some(Req::Recv(r)) = st.reqs.remove(id) else { unreachable!("checked above") };
                    let RecvPhase::Done(result) = r.phase else { unreachable!("checked above") };
                    return result.map(Some);
                }
                RecvPhase::Posted => st.unreachable(sh.rank, r.spec, blocked && sh.single_threaded()),
                RecvPhase::Matched { .. } => st.abort_error(),
            },
            Req::Send(s) => match &s.phase {
                SendPhase::Done(status) => {
                    let status = *status;
                    st.reqs.remove(id);
                    return Ok(Some(status));
                }
                SendPhase::SelfQueued if blocked && sh.single_threaded() => {
                    // Withdrawn, not left behind: the message never happened.
                    st.withdraw_self_send(id);
                    st.reqs.remove(id);
                    return Err(Error::Deadlock {
                        rank: sh.rank,
                        reason: "a send to itself that no posted receive matches",
                    });
                }
                SendPhase::SelfQueued => None,
                // A receiver that said `Bye` before answering our ready-to-send never will.
                SendPhase::AwaitCts | SendPhase::CancelRequested => st
                    .abort_error()
                    .or_else(|| (st.peers[s.dest] == PeerState::Exited).then_some(Error::PeerExited { rank: s.dest })),
                SendPhase::Transferring | SendPhase::RemoteReading => st.abort_error(),
            },
        };
        drop(st);
        match failure {
            None => Ok(None),
            Some(e) => {
                self.release(id);
                Err(e)
            }
        }
    }

    fn check_live(&self) -> Result<()> {
        self.shared.check_live()
    }

    /// A message to this rank itself: matched in memory, never through a socket. Eager-sized
    /// standard sends are copied and complete at once; the others wait for their receive.
    fn send_to_self(&self, buf: *const u8, len: usize, tag: i32, context: ContextId, mode: SendMode) -> Started {
        let sh = &*self.shared;
        let me = sh.rank;
        let status = RawStatus { source: me, tag, bytes: len, cancelled: false };
        let env = Envelope { source: me, context, tag, len };
        let mut st = lock(&sh.state);
        if let Some(rid) = st.take_posted(&env) {
            let Ok(Req::Recv(r)) = st.reqs.get_mut(rid) else { unreachable!("posted receives are live") };
            let fit = len.min(r.capacity);
            // SAFETY: the send buffer is readable for `len` bytes (caller contract) and the posted
            // receive's buffer writable for `capacity` (its request is live); distinct requests
            // own non-overlapping buffers.
            unsafe { std::ptr::copy_nonoverlapping(buf, r.buf, fit) };
            let result = receive_result(me, tag, len, r.capacity);
            st.finish_recv(rid, result);
            drop(st);
            sh.wake_waiters();
            return Started::Complete(Ok(status));
        }
        // Like a rendezvous: the receive copies straight from the sender's buffer.
        if mode == SendMode::Synchronous || len > sh.eager_limit {
            let id = st.reqs.insert(Req::Send(SendReq {
                dest: me,
                tag,
                buf,
                len,
                phase: SendPhase::SelfQueued,
                detached: None,
            }));
            st.matcher.push_unexpected(env, Body::SelfSync(id));
            return Started::Pending(id);
        }
        let mut copy = st.buffer(len);
        // SAFETY: the send buffer is readable for `len` bytes (caller contract).
        copy.extend_from_slice(unsafe { std::slice::from_raw_parts(buf, len) });
        st.matcher.push_unexpected(env, Body::Eager(copy));
        Started::Complete(Ok(status))
    }

    /// Receives a queued message into `buf` (or, for a rendezvous, starts its transfer).
    fn take_queued(
        &self,
        mut st: MutexGuard<'_, State>,
        (msg, body): (Envelope, Body),
        buf: *mut u8,
        capacity: usize,
    ) -> Started {
        let sh = &*self.shared;
        let result = receive_result(msg.source, msg.tag, msg.len, capacity);
        match body {
            Body::Eager(data) => {
                drop(st);
                // SAFETY: `buf` is writable for `capacity` bytes (caller contract).
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf, data.len().min(capacity)) };
                lock(&sh.state).recycle(data);
                Started::Complete(result)
            }
            Body::SelfSync(sid) => {
                if let Ok(Req::Send(s)) = st.reqs.get_mut(sid) {
                    // SAFETY: the pending synchronous send keeps its buffer valid for `len` bytes;
                    // `buf` is writable for `capacity` (caller contract).
                    unsafe { std::ptr::copy_nonoverlapping(s.buf, buf, s.len.min(capacity)) };
                    let status = RawStatus { source: sh.rank, tag: msg.tag, bytes: msg.len, cancelled: false };
                    st.finish_send(sid, status);
                }
                drop(st);
                sh.wake_waiters();
                Started::Complete(result)
            }
            Body::Rts { send_id } => {
                let spec = MatchSpec { context: msg.context, source: Source::Rank(msg.source), tag: msg.tag };
                let phase = RecvPhase::Matched { source: msg.source, tag: msg.tag, len: msg.len };
                let id = st.reqs.insert(Req::Recv(RecvReq { spec, buf, capacity, phase }));
                drop(st);
                sh.ready_to_receive(msg.source, send_id, id);
                Started::Pending(id)
            }
        }
    }

    fn release_recv_in_flight(&self, id: ReqId, source: usize) {
        let sh = &*self.shared;
        let peer = sh.peer(source);
        let mut rx = lock(&peer.rx);
        let mut st = lock(&sh.state);
        if let Some(Req::Recv(_)) = st.reqs.get(id) {
            st.reqs.remove(id);
            rx.retarget(id);
        }
    }

    /// Release of a send whose receiver is reading its buffer: the caller may reuse the buffer
    /// once release returns, so wait for the reader's answer (or the job's failure), then
    /// release what the send has become (done, or streaming after a failed read).
    fn await_remote_read(&self, id: ReqId) {
        let sh = &*self.shared;
        let phase_reading =
            |st: &State| matches!(st.reqs.get(id), Some(Req::Send(s)) if matches!(s.phase, SendPhase::RemoteReading));
        // Ends early (an error) once the job fails: the reader is gone or will not answer.
        let _ = sh.wait_until_with(None, &mut || Ok(!phase_reading(&lock(&sh.state))));
        let mut st = lock(&sh.state);
        if phase_reading(&st) {
            // The job failed: nothing reads the buffer on our behalf any more.
            st.reqs.remove(id);
            return;
        }
        drop(st);
        self.release(id);
    }

    fn release_send_in_flight(&self, id: ReqId, dest: usize) {
        let sh = &*self.shared;
        let peer = sh.peer(dest);
        let mut tx = lock(&peer.tx);
        let mut st = lock(&sh.state);
        if let Some(Req::Send(_)) = st.reqs.get(id) {
            tx.detach(id);
            st.reqs.remove(id);
        }
    }
}

impl Device for TcpEndpoint {
    fn rank(&self) -> usize {
        self.shared.rank
    }

    fn size(&self) -> usize {
        self.shared.size
    }

    unsafe fn isend(
        &self,
        buf: *const u8,
        len: usize,
        dest: usize,
        tag: i32,
        context: ContextId,
        mode: SendMode,
    ) -> Result<Started> {
        self.check_live()?;
        let sh = &*self.shared;
        if dest >= sh.size {
            return Err(Error::RankOutOfRange { rank: dest, size: sh.size });
        }
        if tag < 0 {
            return Err(Error::TagOutOfRange { tag, max: TAG_UB });
        }
        if dest == sh.rank {
            return Ok(self.send_to_self(buf, len, tag, context, mode));
        }
        {
            let st = lock(&sh.state);
            if let Some(e) = st.abort_error() {
                return Err(e);
            }
            if st.peers[dest] == PeerState::Exited {
                return Err(Error::PeerExited { rank: dest });
            }
        }
        if mode == SendMode::Standard && sh.sends_eagerly(dest, len) {
            // SAFETY: `buf` is readable for `len` bytes for the duration of this call (caller
            // contract); `send_frame` copies whatever it cannot write now.
            let payload = unsafe { std::slice::from_raw_parts(buf, len) };
            if !sh.send_frame(dest, Frame::Eager { context, tag, len: len as u64 }, payload) {
                let lost = Error::PeerFailed { rank: dest, cause: "the connection broke while sending".into() };
                return Err(lock(&sh.state).abort_error().unwrap_or(lost));
            }
            return Ok(Started::Complete(Ok(RawStatus::sent(sh.rank, tag, len))));
        }
        let id = lock(&sh.state).reqs.insert(Req::Send(SendReq {
            dest,
            tag,
            buf,
            len,
            phase: SendPhase::AwaitCts,
            detached: None,
        }));
        let rts = Frame::Rts {
            context,
            tag,
            len: len as u64,
            send_id: state::wire_id(id),
            sync: mode == SendMode::Synchronous,
        };
        sh.send_frame(dest, rts, &[]);
        Ok(Started::Pending(id))
    }

    unsafe fn irecv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Result<Started> {
        self.check_live()?;
        let sh = &*self.shared;
        if let Source::Rank(r) = spec.source
            && r >= sh.size
        {
            return Err(Error::RankOutOfRange { rank: r, size: sh.size });
        }
        let mut st = lock(&sh.state);
        if let Some(msg) = st.matcher.take_unexpected(&spec) {
            return Ok(self.take_queued(st, msg, buf, capacity));
        }
        let id = st.reqs.insert(Req::Recv(RecvReq { spec, buf, capacity, phase: RecvPhase::Posted }));
        st.matcher.push_posted(spec, id);
        Ok(Started::Pending(id))
    }

    fn iprobe(&self, spec: MatchSpec) -> Result<Option<RawStatus>> {
        self.check_live()?;
        let sh = &*self.shared;
        sh.user_progress();
        let st = lock(&sh.state);
        if let Some(found) = st.matcher.peek(&spec) {
            return Ok(Some(found.status()));
        }
        // A non-blocking probe answers "no message" even if none can come any more, unless the
        // job is aborted; a blocked one (`probe`) fails instead of waiting forever.
        match sh.hopeless(&st, spec) {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    fn test(&self, id: ReqId) -> Result<Option<RawStatus>> {
        self.check_live()?;
        self.shared.user_progress();
        self.try_complete(id, false)
    }

    fn wait(&self, id: ReqId) -> Result<RawStatus> {
        self.check_live()?;
        let mut done = None;
        self.wait_until(&mut || {
            done = self.try_complete(id, true)?;
            Ok(done.is_some())
        })?;
        Ok(done.expect("wait_until returns after completion"))
    }

    fn cancel(&self, id: ReqId) -> Result<()> {
        self.check_live()?;
        let sh = &*self.shared;
        let cancelled = RawStatus { source: sh.rank, tag: 0, bytes: 0, cancelled: true };
        let mut st = lock(&sh.state);
        match st.reqs.get_mut(id)? {
            Req::Recv(r) if matches!(r.phase, RecvPhase::Posted) => {
                r.phase = RecvPhase::Done(Ok(cancelled));
                st.matcher.cancel_posted(id);
            }
            Req::Send(s) if matches!(s.phase, SendPhase::AwaitCts) => {
                s.phase = SendPhase::CancelRequested;
                let dest = s.dest;
                drop(st);
                sh.send_frame(dest, Frame::Cancel { send_id: state::wire_id(id) }, &[]);
            }
            Req::Send(s) if matches!(s.phase, SendPhase::SelfQueued) => {
                s.phase = SendPhase::Done(cancelled);
                st.withdraw_self_send(id);
            }
            _ => {}
        }
        Ok(())
    }

    fn release(&self, id: ReqId) {
        let sh = &*self.shared;
        let mut st = lock(&sh.state);
        let Some(req) = st.reqs.get(id) else { return };
        match req {
            Req::Recv(r) => match r.phase {
                RecvPhase::Matched { source, .. } => {
                    drop(st);
                    self.release_recv_in_flight(id, source);
                }
                _ => {
                    st.matcher.cancel_posted(id);
                    st.reqs.remove(id);
                }
            },
            Req::Send(s) => match s.phase {
                SendPhase::Done(_) => {
                    st.reqs.remove(id);
                }
                SendPhase::Transferring => {
                    let dest = s.dest;
                    drop(st);
                    self.release_send_in_flight(id, dest);
                }
                SendPhase::RemoteReading => {
                    drop(st);
                    self.await_remote_read(id);
                }
                SendPhase::SelfQueued => {
                    // SAFETY: the pending send's buffer is valid for `len` bytes until released.
                    let data = unsafe { std::slice::from_raw_parts(s.buf, s.len) }.to_vec();
                    let queued =
                        st.matcher.unexpected_mut().find(|(_, body)| matches!(body, Body::SelfSync(x) if *x == id));
                    if let Some((_, body)) = queued {
                        *body = Body::Eager(data);
                    }
                    st.reqs.remove(id);
                }
                SendPhase::AwaitCts | SendPhase::CancelRequested => {
                    let Ok(Req::Send(s)) = st.reqs.get_mut(id) else { return };
                    if s.detached.is_some() {
                        return; // released before: the device already uses its copy
                    }
                    // SAFETY: as above; after this the device only uses the copy.
                    s.detached = Some(unsafe { std::slice::from_raw_parts(s.buf, s.len) }.to_vec());
                    s.buf = std::ptr::null();
                }
            },
        }
    }

    fn wait_until(&self, poll: &mut dyn FnMut() -> Result<bool>) -> Result<()> {
        self.shared.wait_until_with(None, poll)
    }

    fn progress(&self) {
        self.shared.user_progress();
    }

    fn finalize(&self) {
        self.shared.finalized.store(true, Ordering::Release);
    }

    fn is_finalized(&self) -> bool {
        self.shared.finalized.load(Ordering::Acquire)
    }

    fn placement(&self) -> &Placement {
        &self.shared.placement
    }

    fn name(&self) -> &'static str {
        "tcp"
    }

    /// Records the failure (an earlier one this rank heard of wins) and passes the job's failure
    /// on to every peer, once: a rank that only ran into another's failure relays that rank's
    /// record, so nobody blames the relay.
    fn job_failure(&self) -> Option<Failure> {
        lock(&self.shared.state).aborted.clone()
    }

    fn abort_job(&self, failure: Failure) -> Failure {
        let sh = &*self.shared;
        let (job, first_time) = {
            let mut st = lock(&sh.state);
            let job = st.abort(failure).clone();
            (job, !std::mem::replace(&mut st.abort_relayed, true))
        };
        if first_time {
            let text = &job.cause.as_bytes()[..job.cause.len().min(frame::MAX_ABORT_LEN as usize)];
            // Ranks fit 32 bits (checked at start-up).
            let frame = Frame::Abort { len: text.len() as u64, origin: job.rank as u32, code: job.code };
            for p in sh.peer_ranks() {
                sh.send_frame(p, frame, text);
            }
            sh.wake_waiters_always();
        }
        job
    }

    fn thread_level(&self) -> crate::ThreadLevel {
        crate::ThreadLevel::Multiple
    }

    fn thread_shared(&self) -> Result<SharedDevice> {
        self.check_live()?;
        self.shared.helpers.fetch_add(1, Ordering::AcqRel);
        Ok(Arc::new(TcpEndpoint { shared: self.shared.clone(), input: self.input.clone(), helper: true }))
    }

    fn improbe(&self, spec: MatchSpec) -> Result<Option<(MessageId, RawStatus)>> {
        self.check_live()?;
        let sh = &*self.shared;
        sh.user_progress();
        let mut st = lock(&sh.state);
        if let Some((env, body)) = st.matcher.take_unexpected(&spec) {
            let body = match body {
                // Matched now, so the synchronous send completes now: its bytes are copied out
                // and the sender's buffer is free again.
                Body::SelfSync(sid) => {
                    let mut copy = st.buffer(env.len);
                    if let Some(Req::Send(s)) = st.reqs.get(sid) {
                        // SAFETY: the queued self-send keeps its buffer valid for `len` bytes.
                        copy.extend_from_slice(unsafe { std::slice::from_raw_parts(s.buf, s.len) });
                    }
                    st.finish_send(sid, env.status());
                    drop(st);
                    sh.wake_waiters();
                    st = lock(&sh.state);
                    Body::Eager(copy)
                }
                body => body,
            };
            let id = st.messages.insert((env, body));
            return Ok(Some((MessageId(id), env.status())));
        }
        match sh.hopeless(&st, spec) {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    fn one_sided(&self) -> Option<&dyn crate::device::one_sided::OneSided> {
        Some(self)
    }

    unsafe fn mrecv(&self, msg: MessageId, buf: *mut u8, capacity: usize) -> Result<Started> {
        let mut st = lock(&self.shared.state);
        let Some(taken) = st.messages.remove(msg.0) else {
            return Err(Error::InvalidArgument("mrecv: the message was already received".into()));
        };
        Ok(self.take_queued(st, taken, buf, capacity))
    }
}

impl Drop for TcpEndpoint {
    fn drop(&mut self) {
        if self.helper {
            self.shared.helpers.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
