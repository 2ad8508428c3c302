//! Progress of one tcp endpoint: polling the connections, parking and waking waiters, and the
//! input-handler thread that takes over while no user thread polls.
//!
//! A thread waiting in the device polls its sockets itself and receives directly; when nobody
//! waits (the rank computes, or its waiter has parked), the input thread blocks in `poll(2)` and
//! does the same work. The two never fight over a connection: each connection's receive and send
//! sides have their own locks, taken with `try_lock` by whoever progresses.

use std::cell::Cell;
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::frame::{Frame, Header};
use super::protocol::PeerHandler;
use super::rx::{Pumped, RxError};
use super::state::{PeerState, Req};
use super::tx::Tx;
use super::{Peer, Shared};
use crate::device::wait::{Backoff, Pause};
use crate::device::{Failure, RawStatus, ReqId, lock_ignoring_poison as lock};
use crate::error::Result;

/// How a frame goes into a connection's `Tx` (at once, or held back).
type TxSend = fn(&mut Tx, &super::link::Link, Header, &[u8], &mut dyn FnMut(ReqId)) -> std::io::Result<()>;

/// How long the input thread rests while a user thread polls, before looking again.
const IDLE_CHECK: Duration = Duration::from_millis(1);
/// Upper bound of one `poll(2)` of the input thread (it is woken explicitly when it matters).
const POLL_TIMEOUT_MS: i32 = 100;
/// Upper bound of a parked waiter's sleep (wake-ups are explicit; this bounds a missed one).
const PARK_TIMEOUT: Duration = Duration::from_millis(20);

impl Shared {
    pub(super) fn peer_ranks(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.size).filter(move |&p| p != self.rank)
    }

    pub(super) fn peer(&self, p: usize) -> &Peer {
        self.peers[p].as_ref().expect("every other rank has a connection")
    }

    pub(super) fn kick_input(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        let _ = unsafe { libc::write(self.wake_fd.as_raw_fd(), (&raw const one).cast(), 8) };
        self.idle_cv.notify_one();
    }

    /// `frame` from this rank to rank `p`. Ranks fit the wire's 32 bits: the bootstrap admits
    /// only jobs whose size does.
    pub(super) fn header_to(&self, p: usize, frame: Frame) -> Header {
        Header { source: self.rank as u32, dest: p as u32, frame }
    }

    /// Lets parked waiters re-check their requests.
    pub(super) fn wake_waiters(&self) {
        if self.parked.load(Ordering::SeqCst) > 0 {
            *lock(&self.epoch) += 1;
            self.woken.notify_all();
            if let Some(waker) = self.waker.get() {
                waker(None);
            }
        }
    }

    /// Writes a frame with a payload the caller keeps (copied if the socket is full); `false` if
    /// the connection broke (the job is then aborted).
    pub(super) fn send_frame(&self, p: usize, frame: Frame, payload: &[u8]) -> bool {
        self.send_frame_with(p, frame, payload, Tx::send_copied)
    }

    /// As [`Shared::send_frame`], held back until the next frame to `p` (see `Tx::send_corked`).
    pub(super) fn send_frame_corked(&self, p: usize, frame: Frame, payload: &[u8]) -> bool {
        self.send_frame_with(p, frame, payload, Tx::send_corked)
    }

    fn send_frame_with(&self, p: usize, frame: Frame, payload: &[u8], send: TxSend) -> bool {
        let peer = self.peer(p);
        if peer.write_shut.load(Ordering::Acquire) {
            return true;
        }
        let mut tx = lock(&peer.tx);
        let result = send(&mut tx, &peer.link, self.header_to(p, frame), payload, &mut |id| self.sent(id));
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
    pub(super) fn sent(&self, id: ReqId) {
        let mut st = lock(&self.state);
        if let Some(Req::Send(s)) = st.reqs.get(id) {
            let status = RawStatus { source: self.rank, tag: s.tag, bytes: s.len, cancelled: false };
            st.finish_send(id, status);
        }
    }

    /// The connection to `p` is gone without a goodbye: the job is aborted.
    pub(super) fn connection_lost(&self, p: usize, why: &str) {
        let peer = self.peer(p);
        peer.closed.store(true, Ordering::Release);
        peer.tx_busy.store(false, Ordering::Release);
        {
            let st = lock(&self.state);
            if st.peers[p] == PeerState::Exited && self.stop.load(Ordering::Acquire) {
                return;
            }
        }
        // A peer usually stops talking because the job failed elsewhere, and the news of that
        // (an `Abort` naming the rank that failed first) may already wait unread on another
        // connection: read it first, so the job's record does not blame a mere relay.
        self.read_pending_input();
        let cause = format!("connection to rank {p} lost: {why}");
        lock(&self.state).abort(Failure { rank: p, cause, code: None });
        self.wake_waiters_always();
    }

    /// Handles whatever frames have already arrived on the open connections this thread can get
    /// at, without waiting for more (not re-entered from inside itself).
    fn read_pending_input(&self) {
        thread_local! {
            static READING: Cell<bool> = const { Cell::new(false) };
        }
        if READING.replace(true) {
            return;
        }
        for q in self.peer_ranks() {
            let peer = self.peer(q);
            if peer.closed.load(Ordering::Acquire) {
                continue;
            }
            if let Ok(mut rx) = peer.rx.try_lock() {
                // Errors and ends are found again (and reported) by the next regular round.
                let _ = rx.pump(&peer.link, &mut PeerHandler { sh: self, peer: q, notable: false });
            }
        }
        READING.set(false);
    }

    pub(super) fn wake_waiters_always(&self) {
        *lock(&self.epoch) += 1;
        self.woken.notify_all();
        if let Some(waker) = self.waker.get() {
            let failure = lock(&self.state).aborted.clone();
            waker(failure.as_ref());
        }
    }

    /// Whether the connection to `p` is finished: `p` said `Bye`, everything we owe it is
    /// written, and it closed its side. Shuts our write side once the first two hold.
    pub(super) fn try_close(&self, p: usize) -> bool {
        let peer = self.peer(p);
        // Shut our side even if the peer's EOF is already here: it waits for ours.
        let exited = lock(&self.state).peers[p] == PeerState::Exited;
        if exited && !peer.tx_busy.load(Ordering::Acquire) && !peer.write_shut.swap(true, Ordering::AcqRel) {
            peer.link.shutdown(Shutdown::Write);
        }
        peer.closed.load(Ordering::Acquire)
    }

    /// Progress made by a user thread (counted, see `user_polls`).
    pub(super) fn user_progress(&self) -> bool {
        self.user_polls.fetch_add(1, Ordering::Relaxed);
        self.progress_once()
    }

    /// One round of progress on every connection this thread can get at; `true` if bytes moved.
    pub(super) fn progress_once(&self) -> bool {
        let mut moved = false;
        let mut notable = false;
        for p in self.peer_ranks() {
            let peer = self.peer(p);
            // A peer whose EOF is here may still be owed queued bytes (its reading side is open
            // until our EOF), so writing continues after reading has stopped.
            if peer.tx_busy.load(Ordering::Acquire)
                && let Ok(mut tx) = peer.tx.try_lock()
            {
                let result = tx.flush(&peer.link, &mut |id| self.sent(id));
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
            let mut handler = PeerHandler { sh: self, peer: p, notable: false };
            let pumped = rx.pump(&peer.link, &mut handler);
            notable |= handler.notable;
            match pumped {
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
        if notable {
            self.wake_waiters();
        }
        moved
    }

    /// Waits until `poll` says done: spins and yields while polling the connections itself, then
    /// parks and lets the input thread progress (the device's blocking policy). `park`, if given,
    /// replaces the sleep on `woken` (see `TcpEndpoint::wait_until_parking`).
    pub(super) fn wait_until_with(
        &self,
        park: Option<super::Park<'_>>,
        poll: &mut dyn FnMut() -> Result<bool>,
    ) -> Result<()> {
        let sh = self;
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
            // A thread of the rank still waiting when the rank ended (its connections are gone).
            if sh.stop.load(Ordering::Acquire) {
                return Err(crate::Error::Finalized("tcp endpoint (its rank has ended)"));
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
                    let done = match park {
                        None => {
                            let done = poll();
                            if matches!(done, Ok(false)) {
                                let guard = lock(&sh.epoch);
                                if *guard == seen {
                                    let _ = sh.woken.wait_timeout(guard, PARK_TIMEOUT);
                                }
                            }
                            done
                        }
                        Some(park) => {
                            let mut done = Ok(false);
                            park(&mut || {
                                done = poll();
                                !matches!(done, Ok(false)) || lock(&sh.state).aborted.is_some()
                            });
                            done
                        }
                    };
                    sh.parked.fetch_sub(1, Ordering::SeqCst);
                    sh.active.fetch_add(1, Ordering::AcqRel);
                    if !matches!(done, Ok(false)) {
                        return done.map(|_| ());
                    }
                }
            }
        }
    }
}

/// The input-handler thread: progresses the connections while no user thread does (always,
/// when it is the progress thread).
pub(super) fn input_loop(sh: &Shared) {
    let mut fds: Vec<libc::pollfd> = Vec::with_capacity(sh.size + 1);
    // The peer of each `fds` entry after the first (the wake-up eventfd).
    let mut polled: Vec<usize> = Vec::with_capacity(sh.size);
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
        polled.clear();
        fds.push(libc::pollfd { fd: sh.wake_fd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        // Shared-memory links with bytes (or space) already waiting make this poll a quick look.
        let mut waiting = false;
        for p in sh.peer_ranks() {
            let peer = sh.peer(p);
            let plan = peer.link.plan_poll(!peer.closed.load(Ordering::Acquire), peer.tx_busy.load(Ordering::Acquire));
            waiting |= plan.ready;
            if plan.events != 0 {
                fds.push(libc::pollfd { fd: peer.link.socket().as_raw_fd(), events: plan.events, revents: 0 });
                polled.push(p);
            }
        }
        let timeout = if waiting { 0 } else { POLL_TIMEOUT_MS };
        // SAFETY: `fds` is a live array of `fds.len()` pollfd structs.
        let mut ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if sh.shm_links {
            for p in sh.peer_ranks() {
                sh.peer(p).link.disarm();
            }
            for (fd, &p) in fds[1..].iter().zip(&polled) {
                if fd.revents != 0 {
                    sh.peer(p).link.take_doorbells();
                }
            }
            ready += i32::from(waiting);
        }
        if ready > 0 && fds[0].revents != 0 {
            let mut sink = 0u64;
            // SAFETY: reads 8 bytes into a live u64 from our eventfd (drains the wake-ups).
            let _ = unsafe { libc::read(sh.wake_fd.as_raw_fd(), (&raw mut sink).cast(), 8) };
        }
        let served = sh.rma_served.load(Ordering::Relaxed);
        if ready > 0 && !sh.progress_once() && sh.active.load(Ordering::Acquire) == 0 {
            // Readable but a user thread holds the connection: let it finish.
            std::thread::yield_now();
        }
        if sh.rma_served.load(Ordering::Relaxed) != served {
            poll_while_rma_requests_come(sh);
        }
    }
}

/// How long the input thread keeps polling without blocking after a one-sided request: an origin
/// usually sends the next one (its flush, the next operation) within a round trip, and a wake-up
/// from `poll(2)` costs about as much as the whole round trip.
const RMA_SPIN: Duration = Duration::from_micros(50);

/// Serves one-sided requests by busy polling until none came for [`RMA_SPIN`] (or a user thread
/// takes progress over, or the endpoint stops).
fn poll_while_rma_requests_come(sh: &Shared) {
    let mut served = sh.rma_served.load(Ordering::Relaxed);
    let mut since = Instant::now();
    while since.elapsed() < RMA_SPIN && !sh.stop.load(Ordering::Acquire) {
        if sh.active.load(Ordering::Acquire) > 0 && sh.parked.load(Ordering::Acquire) == 0 {
            return;
        }
        sh.progress_once();
        let now = sh.rma_served.load(Ordering::Relaxed);
        if now != served {
            served = now;
            since = Instant::now();
        }
        std::hint::spin_loop();
    }
}
