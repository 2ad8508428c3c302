//! The `tcp` device (the seeds' iodev): ranks are processes, or threads, joined by a full mesh of
//! TCP connections.
//!
//! Protocols (see [`frame`]): messages up to the eager limit are written at once with their
//! header; longer and synchronous ones go by rendezvous (ready-to-send, ready-to-receive, then
//! the payload straight from the sender's buffer into the receiver's). Messages to itself never
//! touch a socket.
//!
//! Progress has two engines. A rank waiting in the device polls its sockets itself and receives
//! directly; when nobody waits (the rank computes, or its waiter has parked), an input-handler
//! thread blocks in `poll(2)` and does the same work. The two never fight over a connection: each
//! connection's receive and send sides have their own locks, taken with `try_lock` by whoever
//! progresses.
//!
//! Lock order: a connection's rx lock, then its tx lock, then the matching state. The state lock
//! is never held across I/O.

pub(crate) mod bootstrap;
pub(crate) mod frame;
#[cfg(test)]
mod frame_props;
pub(crate) mod fuzzing;
pub(crate) mod handshake;
mod rx;
mod state;
#[cfg(test)]
mod tests;
mod tx;

use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::wait::{Backoff, Pause, WaitPolicy};
use super::{
    ContextId, Device, MatchSpec, RawStatus, ReqId, SendMode, Source, Started, TAG_UB, lock_ignoring_poison as lock,
    receive_result,
};
use crate::error::{Error, Result};
use frame::{Frame, Limits};
use rx::{Delivery, Pumped, Rx, RxError, RxHandler, Sink};
use state::{Body, PeerState, RecvPhase, RecvReq, Req, SendPhase, SendReq, State, Unexpected};
use tx::Tx;

/// How long the input thread rests while a user thread polls, before looking again.
const IDLE_CHECK: Duration = Duration::from_millis(1);
/// Upper bound of one `poll(2)` of the input thread (it is woken explicitly when it matters).
const POLL_TIMEOUT_MS: i32 = 100;
/// Upper bound of a parked waiter's sleep (wake-ups are explicit; this bounds a missed one).
const PARK_TIMEOUT: Duration = Duration::from_millis(20);
/// How long an aborting rank tries to get its abort notice out.
const ABORT_FLUSH: Duration = Duration::from_secs(1);

/// One connection to a peer.
struct Peer {
    stream: TcpStream,
    rx: Mutex<Rx>,
    tx: Mutex<Tx>,
    /// The tx queue is not empty (lets progress skip the lock when there is nothing to write).
    tx_busy: AtomicBool,
    /// Both directions are finished (or the connection broke): no longer polled.
    closed: AtomicBool,
    /// Our write side is shut down (after `Bye` and a flushed queue).
    write_shut: AtomicBool,
}

/// Device settings of the tcp device.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TcpOptions {
    pub eager_limit: usize,
    /// Make the input-handler thread a progress thread: it moves data as soon as it arrives,
    /// also while user threads progress by themselves (overlap for nonblocking operations
    /// during long computations, at the cost of a busier core). Off by default.
    pub progress_thread: bool,
}

/// State shared by a rank's user threads and its input-handler thread.
struct Shared {
    rank: usize,
    size: usize,
    eager_limit: usize,
    peers: Vec<Option<Peer>>,
    state: Mutex<State>,
    policy: WaitPolicy,
    /// Bumped (under its lock) when something completed; parked waiters sleep on it.
    epoch: Mutex<u64>,
    woken: Condvar,
    parked: AtomicUsize,
    /// User threads currently polling inside a wait (the input thread stays out of their way).
    active: AtomicUsize,
    /// Counts user-thread progress calls: the input thread takes over only after a quiet spell.
    user_polls: AtomicU64,
    /// The input thread rests here while `active > 0`.
    idle: Mutex<()>,
    idle_cv: Condvar,
    /// Interrupts the input thread's `poll(2)`.
    wake_fd: OwnedFd,
    stop: AtomicBool,
    /// See [`TcpOptions::progress_thread`].
    progress_thread: bool,
    finalized: AtomicBool,
    /// Process and node of every rank. FIXME(v2-tcp): until the bootstrap exchanges process and
    /// node keys, each rank counts as its own process on one node.
    placement: super::Placement,
}

/// The tcp [`Device`] of one rank. Thread-safe: user threads and the input thread share it.
pub(crate) struct TcpEndpoint {
    shared: Arc<Shared>,
    input: Mutex<Option<JoinHandle<()>>>,
}

impl TcpEndpoint {
    /// Wraps the connected mesh (`streams[p]` to rank `p`, `None` for this rank) and starts the
    /// input-handler thread.
    pub(crate) fn new(rank: usize, streams: Vec<Option<TcpStream>>, options: TcpOptions) -> Result<Self> {
        let size = streams.len();
        let limits = Limits { max_eager: options.eager_limit as u64 };
        let mut peers = Vec::with_capacity(size);
        for s in streams {
            peers.push(match s {
                None => None,
                Some(stream) => {
                    stream.set_nonblocking(true).map_err(|e| io_error("could not make a socket non-blocking", e))?;
                    Some(Peer {
                        stream,
                        rx: Mutex::new(Rx::new(limits)),
                        tx: Mutex::new(Tx::default()),
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
            policy: WaitPolicy::for_ranks(size),
            epoch: Mutex::new(0),
            woken: Condvar::new(),
            parked: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            user_polls: AtomicU64::new(0),
            idle: Mutex::new(()),
            idle_cv: Condvar::new(),
            wake_fd,
            stop: AtomicBool::new(false),
            progress_thread: options.progress_thread,
            finalized: AtomicBool::new(false),
            placement: super::Placement::from_keys(&(0..size).collect::<Vec<_>>(), &vec![(); size]),
        });
        let input_shared = shared.clone();
        let input = std::thread::Builder::new()
            .name(format!("fastmp-tcp-input-{rank}"))
            .spawn(move || input_loop(&input_shared))
            .map_err(|e| io_error("could not start the input-handler thread", e))?;
        Ok(TcpEndpoint { shared, input: Mutex::new(Some(input)) })
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

    /// Ends a rank whose program failed: tells every peer why (best effort, bounded time), so
    /// their pending and future operations fail instead of waiting.
    pub(crate) fn abort(&self, cause: &str) {
        let sh = &*self.shared;
        lock(&sh.state).abort(sh.rank, cause.to_string());
        let text = &cause.as_bytes()[..cause.len().min(frame::MAX_ABORT_LEN as usize)];
        for p in sh.peer_ranks() {
            sh.send_frame(p, Frame::Abort { len: text.len() as u64 }, text);
        }
        let deadline = Instant::now() + ABORT_FLUSH;
        while Instant::now() < deadline && sh.peer_ranks().any(|p| sh.peer(p).tx_busy.load(Ordering::Acquire)) {
            sh.progress_once();
            std::thread::sleep(Duration::from_millis(1));
        }
        for p in sh.peer_ranks() {
            let _ = sh.peer(p).stream.shutdown(Shutdown::Both);
        }
        self.stop_input();
    }

    fn stop_input(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.kick_input();
        if let Some(handle) = lock(&self.input).take() {
            let _ = handle.join();
        }
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
                RecvPhase::Posted => st.unreachable(sh.rank, r.spec, blocked),
                RecvPhase::Matched { .. } => st.abort_error(),
            },
            Req::Send(s) => match &s.phase {
                SendPhase::Done(status) => {
                    let status = *status;
                    st.reqs.remove(id);
                    return Ok(Some(status));
                }
                SendPhase::SelfQueued if blocked => {
                    // Withdrawn, not left behind: the message never happened.
                    st.unexpected.retain(|u| !matches!(u.body, Body::SelfSync(x) if x == id));
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
                SendPhase::Transferring => st.abort_error(),
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
        if self.shared.finalized.load(Ordering::Acquire) { Err(Error::Finalized("device")) } else { Ok(()) }
    }

    /// A message to this rank itself: matched in memory, never through a socket. Eager-sized
    /// standard sends are copied and complete at once; the others wait for their receive.
    fn send_to_self(&self, buf: *const u8, len: usize, tag: i32, context: ContextId, mode: SendMode) -> Started {
        let sh = &*self.shared;
        let me = sh.rank;
        let status = RawStatus { source: me, tag, bytes: len, cancelled: false };
        let mut st = lock(&sh.state);
        if let Some(rid) = st.take_posted(context, me, tag) {
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
            st.unexpected.push_back(Unexpected { source: me, context, tag, len, body: Body::SelfSync(id) });
            return Started::Pending(id);
        }
        let mut copy = st.buffer(len);
        // SAFETY: the send buffer is readable for `len` bytes (caller contract).
        copy.extend_from_slice(unsafe { std::slice::from_raw_parts(buf, len) });
        st.unexpected.push_back(Unexpected { source: me, context, tag, len, body: Body::Eager(copy) });
        Started::Complete(Ok(status))
    }

    /// Receives a queued message into `buf` (or, for a rendezvous, starts its transfer).
    fn take_queued(&self, mut st: MutexGuard<'_, State>, msg: Unexpected, buf: *mut u8, capacity: usize) -> Started {
        let sh = &*self.shared;
        let result = receive_result(msg.source, msg.tag, msg.len, capacity);
        match msg.body {
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
                let phase = RecvPhase::Matched { source: msg.source, tag: msg.tag };
                let id = st.reqs.insert(Req::Recv(RecvReq { spec, buf, capacity, phase }));
                drop(st);
                sh.send_frame(msg.source, Frame::Cts { send_id, recv_id: state::wire_id(id) }, &[]);
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

impl Shared {
    fn peer_ranks(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.size).filter(move |&p| p != self.rank)
    }

    fn peer(&self, p: usize) -> &Peer {
        self.peers[p].as_ref().expect("every other rank has a connection")
    }

    fn kick_input(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        let _ = unsafe { libc::write(self.wake_fd.as_raw_fd(), (&raw const one).cast(), 8) };
        self.idle_cv.notify_one();
    }

    /// Lets parked waiters re-check their requests.
    fn wake_waiters(&self) {
        if self.parked.load(Ordering::SeqCst) > 0 {
            *lock(&self.epoch) += 1;
            self.woken.notify_all();
        }
    }

    /// Writes a frame with a payload the caller keeps (copied if the socket is full); `false` if
    /// the connection broke (the job is then aborted).
    fn send_frame(&self, p: usize, frame: Frame, payload: &[u8]) -> bool {
        let peer = self.peer(p);
        if peer.write_shut.load(Ordering::Acquire) {
            return true;
        }
        let mut tx = lock(&peer.tx);
        let result = tx.send_copied(&peer.stream, frame, payload, &mut |id| self.sent(id));
        peer.tx_busy.store(!tx.is_empty(), Ordering::Release);
        drop(tx);
        match result {
            Ok(()) => true,
            Err(e) => {
                self.connection_lost(p, &format!("sending to it failed: {e}"));
                false
            }
        }
    }

    /// Completes send requests whose last byte was written.
    fn sent(&self, id: ReqId) {
        let mut st = lock(&self.state);
        if let Some(Req::Send(s)) = st.reqs.get(id) {
            let status = RawStatus { source: self.rank, tag: s.tag, bytes: s.len, cancelled: false };
            st.finish_send(id, status);
        }
    }

    /// The connection to `p` is gone without a goodbye: the job is aborted.
    fn connection_lost(&self, p: usize, why: &str) {
        let peer = self.peer(p);
        peer.closed.store(true, Ordering::Release);
        peer.tx_busy.store(false, Ordering::Release);
        let mut st = lock(&self.state);
        if st.peers[p] == PeerState::Exited && self.stop.load(Ordering::Acquire) {
            return;
        }
        st.abort(p, format!("connection to rank {p} lost: {why}"));
        drop(st);
        self.wake_waiters_always();
    }

    fn wake_waiters_always(&self) {
        *lock(&self.epoch) += 1;
        self.woken.notify_all();
    }

    /// Whether the connection to `p` is finished: `p` said `Bye`, everything we owe it is
    /// written, and it closed its side. Shuts our write side once the first two hold.
    fn try_close(&self, p: usize) -> bool {
        let peer = self.peer(p);
        // Shut our side even if the peer's EOF is already here: it waits for ours.
        let exited = lock(&self.state).peers[p] == PeerState::Exited;
        if exited && !peer.tx_busy.load(Ordering::Acquire) && !peer.write_shut.swap(true, Ordering::AcqRel) {
            let _ = peer.stream.shutdown(Shutdown::Write);
        }
        peer.closed.load(Ordering::Acquire)
    }

    /// Progress made by a user thread (counted, see `user_polls`).
    fn user_progress(&self) -> bool {
        self.user_polls.fetch_add(1, Ordering::Relaxed);
        self.progress_once()
    }

    /// One round of progress on every connection this thread can get at; `true` if bytes moved.
    fn progress_once(&self) -> bool {
        let mut moved = false;
        for p in self.peer_ranks() {
            let peer = self.peer(p);
            // A peer whose EOF is here may still be owed queued bytes (its reading side is open
            // until our EOF), so writing continues after reading has stopped.
            if peer.tx_busy.load(Ordering::Acquire)
                && let Ok(mut tx) = peer.tx.try_lock()
            {
                let result = tx.flush(&peer.stream, &mut |id| self.sent(id));
                peer.tx_busy.store(!tx.is_empty(), Ordering::Release);
                drop(tx);
                if let Err(e) = result {
                    self.connection_lost(p, &format!("sending to it failed: {e}"));
                    continue;
                }
            }
            if peer.closed.load(Ordering::Acquire) {
                continue;
            }
            let Ok(mut rx) = peer.rx.try_lock() else { continue };
            let mut handler = PeerHandler { sh: self, peer: p };
            match rx.pump(&peer.stream, &mut handler) {
                Ok(Pumped::Drained(m)) => moved |= m,
                Ok(Pumped::Closed) => {
                    moved = true;
                    drop(rx);
                    let exited = lock(&self.state).peers[p] == PeerState::Exited;
                    if exited {
                        peer.closed.store(true, Ordering::Release);
                        self.wake_waiters_always();
                    } else {
                        self.connection_lost(p, "it closed the connection without finalizing (exited or was killed)");
                    }
                }
                Err(e) => {
                    moved = true;
                    drop(rx);
                    let why = match e {
                        RxError::Io(e) => format!("receive failed: {e}"),
                        RxError::Protocol(e) => format!("protocol error: {e}"),
                        RxError::Truncated => "the connection ended in the middle of a frame".to_string(),
                    };
                    self.connection_lost(p, &why);
                }
            }
        }
        if moved {
            self.wake_waiters();
        }
        moved
    }
}

/// Protocol actions for frames arriving from one peer (runs under that peer's rx lock).
struct PeerHandler<'a> {
    sh: &'a Shared,
    peer: usize,
}

impl RxHandler for PeerHandler<'_> {
    fn on_header(&mut self, frame: Frame) -> Sink {
        let (sh, p) = (self.sh, self.peer);
        match frame {
            Frame::Eager { context, tag, len } => {
                let mut st = lock(&sh.state);
                match st.take_posted(context, p, tag) {
                    Some(id) => match st.reqs.get(id) {
                        Some(Req::Recv(r)) => Sink::User { id, ptr: r.buf, capacity: r.capacity },
                        _ => Sink::Discard,
                    },
                    None => Sink::Owned(st.buffer(len as usize)),
                }
            }
            Frame::Rts { context, tag, len, send_id, .. } => {
                let mut st = lock(&sh.state);
                match st.take_posted(context, p, tag) {
                    Some(id) => {
                        drop(st);
                        sh.send_frame(p, Frame::Cts { send_id, recv_id: state::wire_id(id) }, &[]);
                    }
                    None => {
                        let len = usize::try_from(len).unwrap_or(usize::MAX);
                        st.unexpected.push_back(Unexpected {
                            source: p,
                            context,
                            tag,
                            len,
                            body: Body::Rts { send_id },
                        });
                    }
                }
                Sink::Discard
            }
            Frame::Cts { send_id, recv_id } => {
                self.start_transfer(state::from_wire(send_id), recv_id);
                Sink::Discard
            }
            Frame::Data { recv_id, .. } => {
                let id = state::from_wire(recv_id);
                match lock(&sh.state).reqs.get(id) {
                    Some(Req::Recv(r)) if matches!(r.phase, RecvPhase::Matched { .. }) => {
                        Sink::User { id, ptr: r.buf, capacity: r.capacity }
                    }
                    _ => Sink::Discard,
                }
            }
            Frame::Bye => {
                lock(&sh.state).peers[p] = PeerState::Exited;
                sh.wake_waiters_always();
                Sink::Discard
            }
            Frame::Abort { len } => Sink::Owned(Vec::with_capacity(len as usize)),
            Frame::Cancel { send_id } => {
                let mut st = lock(&sh.state);
                let pos = st
                    .unexpected
                    .iter()
                    .position(|u| u.source == p && matches!(u.body, Body::Rts { send_id: s } if s == send_id));
                let cancelled = pos.and_then(|i| st.unexpected.remove(i)).is_some();
                drop(st);
                sh.send_frame(p, Frame::CancelAck { send_id, cancelled }, &[]);
                Sink::Discard
            }
            Frame::CancelAck { send_id, cancelled } => {
                let id = state::from_wire(send_id);
                let mut st = lock(&sh.state);
                if let Ok(Req::Send(s)) = st.reqs.get_mut(id)
                    && matches!(s.phase, SendPhase::CancelRequested)
                {
                    if cancelled {
                        let status = RawStatus { source: sh.rank, tag: s.tag, bytes: 0, cancelled: true };
                        st.finish_send(id, status);
                    } else {
                        s.phase = SendPhase::AwaitCts;
                    }
                }
                Sink::Discard
            }
        }
    }

    fn on_complete(&mut self, d: Delivery) {
        let (sh, p) = (self.sh, self.peer);
        match (d.frame, d.sink) {
            (Frame::Eager { tag, .. }, Sink::User { id, capacity, .. }) => {
                lock(&sh.state).finish_recv(id, receive_result(p, tag, d.len, capacity));
            }
            (Frame::Eager { context, tag, .. }, Sink::Owned(data)) => self.eager_arrived(context, tag, data),
            (Frame::Data { .. }, Sink::User { id, capacity, .. }) => {
                let mut st = lock(&sh.state);
                if let Some(Req::Recv(RecvReq { phase: RecvPhase::Matched { source, tag }, .. })) = st.reqs.get(id) {
                    let result = receive_result(*source, *tag, d.len, capacity);
                    st.finish_recv(id, result);
                }
            }
            (Frame::Abort { .. }, Sink::Owned(text)) => {
                let cause = String::from_utf8_lossy(&text).into_owned();
                lock(&sh.state).abort(p, cause);
                sh.wake_waiters_always();
            }
            _ => {}
        }
    }
}

impl PeerHandler<'_> {
    /// An eager message that found no receive when its header arrived: a receive posted since
    /// then gets it now, otherwise it joins the unexpected queue.
    fn eager_arrived(&self, context: ContextId, tag: i32, data: Vec<u8>) {
        let (sh, p) = (self.sh, self.peer);
        let len = data.len();
        let mut st = lock(&sh.state);
        let Some(id) = st.take_posted(context, p, tag) else {
            st.unexpected.push_back(Unexpected { source: p, context, tag, len, body: Body::Eager(data) });
            return;
        };
        let Some(Req::Recv(r)) = st.reqs.get(id) else { return };
        let (buf, capacity) = (r.buf, r.capacity);
        drop(st);
        // SAFETY: the receive is matched (so release waits for the rx lock we hold) and its
        // buffer is writable for `capacity` bytes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf, len.min(capacity)) };
        let mut st = lock(&sh.state);
        st.finish_recv(id, receive_result(p, tag, len, capacity));
        st.recycle(data);
    }

    /// The receiver is ready for rendezvous send `id`: queue its payload.
    fn start_transfer(&self, id: ReqId, recv_id: u64) {
        let (sh, p) = (self.sh, self.peer);
        let peer = sh.peer(p);
        let mut tx = lock(&peer.tx);
        let mut st = lock(&sh.state);
        let Ok(Req::Send(s)) = st.reqs.get_mut(id) else { return };
        if !matches!(s.phase, SendPhase::AwaitCts | SendPhase::CancelRequested) {
            return;
        }
        s.phase = SendPhase::Transferring;
        let data_frame = Frame::Data { recv_id, len: s.len as u64 };
        let result = match s.detached.as_mut() {
            Some(data) => {
                let data = std::mem::take(data);
                drop(st);
                tx.send_owned(&peer.stream, data_frame, data, id, &mut |done| sh.sent(done))
            }
            None => {
                let (ptr, len) = (s.buf, s.len);
                drop(st);
                // SAFETY: the send request is live and not detached, so its buffer stays valid
                // until `sent` completes it or release detaches it under this tx lock.
                unsafe { tx.send_borrowed(&peer.stream, data_frame, ptr, len, id, &mut |done| sh.sent(done)) }
            }
        };
        peer.tx_busy.store(!tx.is_empty(), Ordering::Release);
        drop(tx);
        if let Err(e) = result {
            sh.connection_lost(p, &format!("sending to it failed: {e}"));
        }
    }
}

/// The input-handler thread: progresses the connections while no user thread does (always,
/// when it is the progress thread).
fn input_loop(sh: &Shared) {
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(sh.size + 1);
    let mut last_polls = u64::MAX;
    while !sh.stop.load(Ordering::Acquire) {
        // Rest while a user thread progresses by itself (spinning in a wait, or calling in
        // often): sharing its core would cost it a context switch per message. A parked waiter
        // hands over at once.
        let polls = sh.user_polls.load(Ordering::Relaxed);
        let user_busy = sh.active.load(Ordering::Acquire) > 0 || polls != last_polls;
        last_polls = polls;
        if user_busy && sh.parked.load(Ordering::Acquire) == 0 && !sh.progress_thread {
            let guard = lock(&sh.idle);
            let _ = sh.idle_cv.wait_timeout(guard, IDLE_CHECK);
            continue;
        }
        fds.clear();
        fds.push(libc::pollfd { fd: sh.wake_fd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        for p in sh.peer_ranks() {
            let peer = sh.peer(p);
            let input = if peer.closed.load(Ordering::Acquire) { 0 } else { libc::POLLIN };
            let output = if peer.tx_busy.load(Ordering::Acquire) { libc::POLLOUT } else { 0 };
            if input | output != 0 {
                fds.push(libc::pollfd { fd: peer.stream.as_raw_fd(), events: input | output, revents: 0 });
            }
        }
        // SAFETY: `fds` is a live array of `fds.len()` pollfd structs.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, POLL_TIMEOUT_MS) };
        if ready > 0 && fds[0].revents != 0 {
            let mut sink = 0u64;
            // SAFETY: reads 8 bytes into a live u64 from our eventfd (drains the wake-ups).
            let _ = unsafe { libc::read(sh.wake_fd.as_raw_fd(), (&raw mut sink).cast(), 8) };
        }
        if ready > 0 && !sh.progress_once() && sh.active.load(Ordering::Acquire) == 0 {
            // Readable but a user thread holds the connection: let it finish.
            std::thread::yield_now();
        }
    }
}

fn io_error(what: &str, e: std::io::Error) -> Error {
    Error::other(format!("tcp device: {what}: {e}"))
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
        if mode == SendMode::Standard && len <= sh.eager_limit {
            // SAFETY: `buf` is readable for `len` bytes for the duration of this call (caller
            // contract); `send_frame` copies whatever it cannot write now.
            let payload = unsafe { std::slice::from_raw_parts(buf, len) };
            if !sh.send_frame(dest, Frame::Eager { context, tag, len: len as u64 }, payload) {
                let lost = Error::PeerFailed { rank: dest, cause: "the connection broke while sending".into() };
                return Err(lock(&sh.state).abort_error().unwrap_or(lost));
            }
            return Ok(Started::Complete(Ok(RawStatus { source: sh.rank, tag, bytes: len, cancelled: false })));
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
        if let Some(msg) = st.take_unexpected(spec) {
            return Ok(self.take_queued(st, msg, buf, capacity));
        }
        let id = st.reqs.insert(Req::Recv(RecvReq { spec, buf, capacity, phase: RecvPhase::Posted }));
        st.posted.push_back(id);
        Ok(Started::Pending(id))
    }

    fn iprobe(&self, spec: MatchSpec) -> Result<Option<RawStatus>> {
        self.check_live()?;
        let sh = &*self.shared;
        sh.user_progress();
        let st = lock(&sh.state);
        if let Some(found) = st.peek_unexpected(spec) {
            return Ok(Some(found));
        }
        // A non-blocking probe answers "no message" even if none can come any more, unless the
        // job is aborted; a blocked one (`probe`) fails instead of waiting forever.
        let blocked = sh.active.load(Ordering::Acquire) > 0;
        let hopeless = st.abort_error().or_else(|| blocked.then(|| st.unreachable(sh.rank, spec, true)).flatten());
        match hopeless {
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
                st.posted.retain(|&x| x != id);
            }
            Req::Send(s) if matches!(s.phase, SendPhase::AwaitCts) => {
                s.phase = SendPhase::CancelRequested;
                let dest = s.dest;
                drop(st);
                sh.send_frame(dest, Frame::Cancel { send_id: state::wire_id(id) }, &[]);
            }
            Req::Send(s) if matches!(s.phase, SendPhase::SelfQueued) => {
                s.phase = SendPhase::Done(cancelled);
                st.unexpected.retain(|u| !matches!(u.body, Body::SelfSync(x) if x == id));
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
                    st.posted.retain(|&x| x != id);
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
                SendPhase::SelfQueued => {
                    // SAFETY: the pending send's buffer is valid for `len` bytes until released.
                    let data = unsafe { std::slice::from_raw_parts(s.buf, s.len) }.to_vec();
                    if let Some(u) = st.unexpected.iter_mut().find(|u| matches!(u.body, Body::SelfSync(x) if x == id)) {
                        u.body = Body::Eager(data);
                    }
                    st.reqs.remove(id);
                }
                SendPhase::AwaitCts | SendPhase::CancelRequested => {
                    let Ok(Req::Send(s)) = st.reqs.get_mut(id) else { return };
                    // SAFETY: as above; after this the device only uses the copy.
                    s.detached = Some(unsafe { std::slice::from_raw_parts(s.buf, s.len) }.to_vec());
                    s.buf = std::ptr::null();
                }
            },
        }
    }

    fn wait_until(&self, poll: &mut dyn FnMut() -> Result<bool>) -> Result<()> {
        let sh = &*self.shared;
        struct Active<'a>(&'a AtomicUsize);
        impl Drop for Active<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        sh.active.fetch_add(1, Ordering::AcqRel);
        let _active = Active(&sh.active);
        let mut backoff = Backoff::new(sh.policy);
        loop {
            sh.user_progress();
            if poll()? {
                return Ok(());
            }
            if let Some(e) = lock(&sh.state).abort_error() {
                return Err(e);
            }
            match backoff.next() {
                Pause::Spin => std::hint::spin_loop(),
                Pause::Yield => std::thread::yield_now(),
                Pause::Park => {
                    // Hand progress to the input thread and sleep until it reports something.
                    let seen = *lock(&sh.epoch);
                    sh.active.fetch_sub(1, Ordering::AcqRel);
                    sh.parked.fetch_add(1, Ordering::SeqCst);
                    sh.kick_input();
                    let done = poll();
                    if matches!(done, Ok(false)) {
                        let guard = lock(&sh.epoch);
                        if *guard == seen {
                            let _ = sh.woken.wait_timeout(guard, PARK_TIMEOUT);
                        }
                    }
                    sh.parked.fetch_sub(1, Ordering::SeqCst);
                    sh.active.fetch_add(1, Ordering::AcqRel);
                    if !matches!(done, Ok(false)) {
                        return done.map(|_| ());
                    }
                }
            }
        }
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

    fn placement(&self) -> &super::Placement {
        &self.shared.placement
    }

    fn name(&self) -> &'static str {
        "tcp"
    }
}

impl Drop for TcpEndpoint {
    fn drop(&mut self) {
        self.stop_input();
    }
}
