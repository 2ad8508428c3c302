//! One-sided communication over tcp: active messages served by whoever receives them — the
//! rank's own thread while it waits in the device, otherwise the input-handler thread — so a
//! target busy in user code still serves puts, gets, atomics and locks (true passive-target
//! progress).
//!
//! # Target side
//! Every rank keeps a table of its exposed window parts ([`Windows`], window id → [`Part`]). A
//! request frame ([`Frame::RmaPut`] ... [`Frame::RmaFlush`]) is checked against the part (window
//! open, sender a member, range inside the part: so no allocation is larger than the part) and
//! then applied through the part's [`Segment`], the only way window memory is touched. A put that
//! can be applied at once is written through the segment as its bytes arrive (no buffer in
//! between); accumulates, compare-and-swap and held-off puts collect their payload first.
//! Frames of one connection are handled in arrival order, which is the origin's issue order.
//!
//! While the owner has local access ([`RmaWindow::begin_local_access`]), arriving requests are
//! queued on the part, in arrival order, and applied by `end_local_access`; the receiving side
//! never waits for the owner (the owner may be the one receiving). Lock requests bypass that
//! queue (they touch no memory); unlocks and flushes join it, so their answers still mean
//! "everything before was applied".
//!
//! Answers (get data, previous values, lock grants, flush and unlock acknowledgements, refusals)
//! are [`Frame::RmaReply`]s: device messages on the window's context with the request's reply
//! tag (below -1, so no user receive with a specific tag can match them), delivered only into the
//! receive the origin posted before sending the request. A get is therefore an ordinary device
//! receive request straight into the user's buffer, completed, failed (the job aborted, the
//! target exited) and released by the endpoint's existing machinery.
//!
//! # Origin side
//! [`TcpWindow`] checks ranges against the part lengths `connect` learned (a flush with `query`
//! to every member), sends puts and accumulates without waiting (payloads above the eager limit go
//! straight from the user's buffer, completing a send request when written) and remembers which
//! targets have operations outstanding; `flush` sends one flush per such target, pipelined, and
//! waits for the acknowledgements. Operations on the rank's own part apply directly.
//!
//! # Closing
//! `close` marks the part closed under its lock (later requests get a refusal, queued ones and
//! waiting lock requests are refused), takes it out of the table, then waits until no thread is
//! inside the segment (`gate`: only bounded copies run inside, never I/O), so the memory may go.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::Shared;
use super::endpoint::TcpEndpoint;
use super::frame::{Frame, MAX_FAILURE_LEN, MAX_REPLY_TAG};
use super::rx::Sink;
use super::state::{PeerState, Req, SendPhase, SendReq};
use crate::device::one_sided::{AccumulateOp, Element, LockKind, OneSided, RmaWindow};
use crate::device::rma_memory::Segment;
use crate::device::{ContextId, Device, MatchSpec, ReqId, Source, Started, lock_ignoring_poison as lock};
use crate::error::{Error, Result};

/// A rank's exposed window parts, by window id.
pub(super) type Windows = Mutex<HashMap<ContextId, Arc<Part>>>;

/// Get and get-accumulate answers up to this size are staged on the stack.
const STACK_REPLY: usize = 1024;

/// This rank's part of one window, shared by the window handle and whoever serves requests.
pub(super) struct Part {
    window: ContextId,
    seg: Segment,
    /// World ranks of the window's members, in window order.
    members: Vec<usize>,
    /// `is_member[world rank]`.
    is_member: Vec<bool>,
    /// Threads currently inside the segment (each for one bounded copy or atomic step).
    gate: AtomicUsize,
    /// Set (under `state`) by `close`; read without the lock by `touch`.
    closed: AtomicBool,
    state: Mutex<PartState>,
}

#[derive(Default)]
struct PartState {
    /// The owner has local access: requests are queued.
    held: bool,
    /// `end_local_access` is applying the queue: new requests still join it (issue order).
    draining: bool,
    /// Requests admitted for immediate application and not finished (a put may span many reads).
    applying: usize,
    queue: VecDeque<Deferred>,
    locks: Locks,
    /// Why a request that carries no reply (put, accumulate) was refused, by origin (the first
    /// one each): the origin's next flush or unlock reports it.
    failures: Vec<(usize, String)>,
}

/// A request held off by local access.
struct Deferred {
    origin: usize,
    frame: Frame,
    data: Vec<u8>,
}

/// Passive-target lock state of a part: holders and a FIFO of waiting requests.
#[derive(Default)]
struct Locks {
    shared: usize,
    exclusive: Option<usize>,
    /// (origin, kind, reply tag) in arrival order.
    waiting: VecDeque<(usize, LockKind, i32)>,
    /// The owner's own waiting request was granted.
    self_granted: bool,
}

impl Locks {
    fn compatible(&self, kind: LockKind) -> bool {
        self.exclusive.is_none() && (kind == LockKind::Shared || self.shared == 0)
    }

    fn take(&mut self, origin: usize, kind: LockKind) {
        match kind {
            LockKind::Shared => self.shared += 1,
            LockKind::Exclusive => self.exclusive = Some(origin),
        }
    }

    /// Grants at once if nobody waits and nothing conflicts, else queues; whether granted.
    fn request(&mut self, origin: usize, kind: LockKind, reply: i32) -> bool {
        if self.waiting.is_empty() && self.compatible(kind) {
            self.take(origin, kind);
            true
        } else {
            self.waiting.push_back((origin, kind, reply));
            false
        }
    }

    fn release(&mut self, origin: usize) -> std::result::Result<(), String> {
        if self.exclusive == Some(origin) {
            self.exclusive = None;
        } else if self.shared > 0 {
            self.shared -= 1;
        } else {
            return Err(format!("rank {origin} unlocked a window part it holds no lock on"));
        }
        Ok(())
    }

    /// Grants waiting requests in order while they fit; remote grantees go to `out`.
    fn grant_waiting(&mut self, me: usize, out: &mut Vec<(usize, i32)>) {
        while let Some(&(origin, kind, reply)) = self.waiting.front() {
            if !self.compatible(kind) {
                break;
            }
            self.waiting.pop_front();
            self.take(origin, kind);
            if origin == me {
                self.self_granted = true;
            } else {
                out.push((origin, reply));
            }
        }
    }
}

impl Frame {
    /// The window a one-sided request addresses (`None` for every other frame).
    fn rma_window(&self) -> Option<ContextId> {
        match *self {
            Frame::RmaPut { window, .. }
            | Frame::RmaGet { window, .. }
            | Frame::RmaAcc { window, .. }
            | Frame::RmaGetAcc { window, .. }
            | Frame::RmaFetchOp { window, .. }
            | Frame::RmaCas { window, .. }
            | Frame::RmaLock { window, .. }
            | Frame::RmaUnlock { window, .. }
            | Frame::RmaFlush { window, .. } => Some(window),
            _ => None,
        }
    }

    pub(super) fn is_rma_request(&self) -> bool {
        self.rma_window().is_some()
    }

    /// The reply tag of a request that is answered.
    fn rma_reply(&self) -> Option<i32> {
        match *self {
            Frame::RmaGet { reply, .. }
            | Frame::RmaGetAcc { reply, .. }
            | Frame::RmaFetchOp { reply, .. }
            | Frame::RmaCas { reply, .. }
            | Frame::RmaLock { reply, .. }
            | Frame::RmaUnlock { reply, .. }
            | Frame::RmaFlush { reply, .. } => Some(reply),
            _ => None,
        }
    }
}

fn closed_error(window: ContextId, rank: usize) -> Error {
    Error::RmaSync(format!("window {window} is not open at rank {rank} (freed, or never created there)"))
}

/// A target's refusal of a request for a window it has not open. Once the job failed, a part
/// is withdrawn because its rank's program ended with the failure: then the refusal names the
/// rank that failed first, as the origin's other errors do, not only the closed window.
fn closed_refusal(sh: &Shared, window: ContextId) -> String {
    let closed = closed_error(window, sh.rank);
    match &lock(&sh.state).aborted {
        Some(failure) => format!("{closed}: the job failed, rank {} first ({})", failure.rank, failure.cause),
        None => closed.to_string(),
    }
}

fn outside(what: &str, offset: u64, len: u64, part: usize, rank: usize) -> String {
    format!(
        "{what}: bytes {offset}..{} lie outside rank {rank}'s window part of {part} bytes",
        offset.saturating_add(len)
    )
}

impl Part {
    /// Runs `f` on the segment unless the part is closed; `close` waits for it to leave.
    fn touch<R>(&self, rank: usize, f: impl FnOnce(&Segment) -> Result<R>) -> Result<R> {
        /// Leaves the gate also when `f` unwinds, or `close` would wait for it forever.
        struct Leave<'a>(&'a AtomicUsize);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Release);
            }
        }
        self.gate.fetch_add(1, Ordering::SeqCst);
        let _leave = Leave(&self.gate);
        if self.closed.load(Ordering::SeqCst) { Err(closed_error(self.window, rank)) } else { f(&self.seg) }
    }

    /// Payload bytes of a put applied as they arrive (`Sink::Part`); the range was checked when
    /// the header arrived, and a closed part takes nothing.
    pub(super) fn write_arriving(&self, offset: usize, bytes: &[u8]) {
        let _ = self.touch(0, |s| s.write(offset, bytes));
    }

    /// Checks a request's range against the part, before any payload is accepted for it.
    fn check(&self, frame: Frame, rank: usize) -> std::result::Result<(), String> {
        let part = self.seg.len();
        let (what, offset, len) = match frame {
            Frame::RmaPut { offset, len, .. } => ("put", offset, len),
            Frame::RmaGet { offset, len, .. } => ("get", offset, len),
            Frame::RmaAcc { offset, len, .. } => ("accumulate", offset, len),
            Frame::RmaGetAcc { offset, len, .. } => ("get_accumulate", offset, len),
            Frame::RmaFetchOp { offset, element, .. } => ("fetch_and_op", offset, element.size() as u64),
            Frame::RmaCas { offset, element, .. } => ("compare_and_swap", offset, element.size() as u64),
            _ => return Ok(()),
        };
        match offset.checked_add(len) {
            Some(end) if end <= part as u64 => Ok(()),
            _ => Err(outside(what, offset, len, part, rank)),
        }
    }

    /// Admits a request for immediate application (counted in `applying`) if nothing holds it off.
    fn admit(&self) -> bool {
        let mut st = lock(&self.state);
        let free = !st.held && !st.draining && st.queue.is_empty() && !self.closed.load(Ordering::Relaxed);
        if free {
            st.applying += 1;
        }
        free
    }

    fn finish_applying(&self) {
        lock(&self.state).applying -= 1;
    }

    fn record_failure(&self, origin: usize, why: String) {
        let mut st = lock(&self.state);
        if !st.failures.iter().any(|(o, _)| *o == origin) {
            st.failures.push((origin, why));
        }
    }

    fn take_failure(&self, origin: usize) -> Option<String> {
        let mut st = lock(&self.state);
        let at = st.failures.iter().position(|(o, _)| *o == origin)?;
        Some(st.failures.swap_remove(at).1)
    }

    /// Applies a request now, or queues it behind what local access holds off.
    fn dispatch(&self, sh: &Shared, origin: usize, frame: Frame, data: Vec<u8>) {
        let mut st = lock(&self.state);
        if self.closed.load(Ordering::Relaxed) {
            drop(st);
            refuse(sh, origin, frame, None, closed_refusal(sh, self.window));
            return;
        }
        if st.held || st.draining || !st.queue.is_empty() {
            st.queue.push_back(Deferred { origin, frame, data });
            return;
        }
        st.applying += 1;
        drop(st);
        self.apply(sh, origin, frame, &data);
        self.finish_applying();
        if data.capacity() > 0 {
            lock(&sh.state).recycle(data);
        }
    }

    /// Applies one request (its range already checked) and answers it.
    fn apply(&self, sh: &Shared, origin: usize, frame: Frame, data: &[u8]) {
        let me = sh.rank;
        let answer = |tag: i32, result: Result<&[u8]>| answer(sh, origin, self.window, tag, result);
        match frame {
            Frame::RmaPut { offset, .. } => {
                if let Err(e) = self.touch(me, |s| s.write(offset as usize, data)) {
                    self.record_failure(origin, e.to_string());
                }
            }
            Frame::RmaAcc { offset, len, element, op, .. } => {
                let result = self.touch(me, |s| s.accumulate(offset as usize, len as usize, data, None, element, op));
                if let Err(e) = result {
                    self.record_failure(origin, e.to_string());
                }
            }
            Frame::RmaGet { offset, len, reply, .. } => {
                self.answer_with(sh, origin, reply, len as usize, |s, buf| s.read(offset as usize, buf));
            }
            Frame::RmaGetAcc { offset, len, element, op, reply, .. } => {
                let len = len as usize;
                self.answer_with(sh, origin, reply, len, |s, buf| {
                    s.accumulate(offset as usize, len, data, Some(buf), element, op)
                });
            }
            Frame::RmaFetchOp { offset, element, op, operand, reply, .. } => {
                let old = self.touch(me, |s| s.fetch_and_op(offset as usize, element, op, operand));
                let bytes = old.map(u64::to_le_bytes);
                answer(reply, bytes.as_ref().map(|b| &b[..]).map_err(clone_error));
            }
            Frame::RmaCas { offset, element, compare, reply, .. } => {
                let new = data.try_into().map(u64::from_le_bytes).unwrap_or(0);
                let old = self.touch(me, |s| s.compare_and_swap(offset as usize, element, compare, new));
                let bytes = old.map(u64::to_le_bytes);
                answer(reply, bytes.as_ref().map(|b| &b[..]).map_err(clone_error));
            }
            Frame::RmaUnlock { reply, .. } => {
                let released = self.unlock(sh, origin);
                let result = released.and_then(|()| self.take_failure(origin).map_or(Ok(()), Err));
                answer(reply, result.map(|()| &[][..]).map_err(Error::RmaSync));
            }
            Frame::RmaFlush { reply, query, .. } => {
                let len = (self.seg.len() as u64).to_le_bytes();
                let result = match self.take_failure(origin) {
                    Some(why) => Err(Error::RmaSync(why)),
                    None => Ok(if query { &len[..] } else { &[][..] }),
                };
                answer(reply, result);
            }
            _ => {}
        }
    }

    /// Answers `reply` with `len` bytes that `fill` writes from the segment.
    fn answer_with(
        &self,
        sh: &Shared,
        origin: usize,
        reply: i32,
        len: usize,
        fill: impl FnOnce(&Segment, &mut [u8]) -> Result<()>,
    ) {
        if len <= STACK_REPLY {
            let mut buf = [0u8; STACK_REPLY];
            let result = self.touch(sh.rank, |s| fill(s, &mut buf[..len]));
            answer(sh, origin, self.window, reply, result.map(|()| &buf[..len]));
        } else {
            let mut buf = vec![0u8; len];
            match self.touch(sh.rank, |s| fill(s, &mut buf)) {
                Ok(()) => {
                    let frame = Frame::RmaReply { context: self.window, tag: reply, len: len as u64, failed: false };
                    sh.send_owned_frame(origin, frame, buf);
                }
                Err(e) => answer(sh, origin, self.window, reply, Err(e)),
            }
        }
    }

    /// Releases `origin`'s lock and sends the grants that frees.
    fn unlock(&self, sh: &Shared, origin: usize) -> std::result::Result<(), String> {
        let mut grants = Vec::new();
        let released = {
            let mut st = lock(&self.state);
            let released = st.locks.release(origin);
            st.locks.grant_waiting(sh.rank, &mut grants);
            released
        };
        for (o, reply) in grants {
            answer(sh, o, self.window, reply, Ok(&[]));
        }
        released
    }

    /// A lock request from another rank: granted now or when the conflicting locks go.
    fn lock_remote(&self, sh: &Shared, origin: usize, kind: LockKind, reply: i32) {
        let granted = {
            let mut st = lock(&self.state);
            if self.closed.load(Ordering::Relaxed) {
                drop(st);
                answer(sh, origin, self.window, reply, Err(Error::RmaSync(closed_refusal(sh, self.window))));
                return;
            }
            st.locks.request(origin, kind, reply)
        };
        if granted {
            answer(sh, origin, self.window, reply, Ok(&[]));
        }
    }
}

fn clone_error(e: &Error) -> Error {
    Error::RmaSync(e.to_string())
}

/// Sends the answer to request `tag` of `origin`: the bytes, or why it was refused.
fn answer(sh: &Shared, origin: usize, window: ContextId, tag: i32, result: Result<&[u8]>) {
    match result {
        Ok(bytes) => {
            let frame = Frame::RmaReply { context: window, tag, len: bytes.len() as u64, failed: false };
            sh.send_frame(origin, frame, bytes);
        }
        Err(e) => {
            let text = e.to_string();
            let mut end = text.len().min(MAX_FAILURE_LEN as usize);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            let frame = Frame::RmaReply { context: window, tag, len: end as u64, failed: true };
            sh.send_frame(origin, frame, &text.as_bytes()[..end]);
        }
    }
}

/// A request that cannot be served: answered with `why`, or, for one without a reply, recorded
/// on the part for the origin's next flush (without a part, that flush fails on its own).
fn refuse(sh: &Shared, origin: usize, frame: Frame, part: Option<&Part>, why: String) {
    match (frame.rma_reply(), part) {
        (Some(tag), _) => {
            let window = frame.rma_window().unwrap_or(0);
            answer(sh, origin, window, tag, Err(Error::RmaSync(why)));
        }
        (None, Some(part)) => part.record_failure(origin, why),
        (None, None) => {}
    }
}

/// The open part a request from `origin` addresses.
fn find(sh: &Shared, origin: usize, frame: Frame) -> std::result::Result<Arc<Part>, String> {
    let window = frame.rma_window().unwrap_or(0);
    let part = lock(&sh.windows).get(&window).cloned();
    match part {
        Some(part) if part.is_member[origin] => Ok(part),
        Some(_) => Err(format!("rank {origin} is not a member of window {window}")),
        None => Err(closed_refusal(sh, window)),
    }
}

/// The header of a one-sided request from `origin` arrived: where its payload goes. Requests
/// without a payload are handled here.
pub(super) fn on_request(sh: &Shared, origin: usize, frame: Frame) -> Sink {
    sh.rma_served.fetch_add(1, Ordering::Relaxed);
    let part = match find(sh, origin, frame) {
        Ok(part) => part,
        Err(why) => {
            refuse(sh, origin, frame, None, why);
            return Sink::Discard;
        }
    };
    if let Frame::RmaLock { kind, reply, .. } = frame {
        part.lock_remote(sh, origin, kind, reply);
        return Sink::Discard;
    }
    if let Err(why) = part.check(frame, sh.rank) {
        refuse(sh, origin, frame, Some(&part), why);
        return Sink::Discard;
    }
    // Bounded by the part's length (checked above).
    let len = frame.payload_len() as usize;
    if len == 0 {
        part.dispatch(sh, origin, frame, Vec::new());
        return Sink::Discard;
    }
    if let Frame::RmaPut { offset, .. } = frame
        && part.admit()
    {
        return Sink::Part { part, offset: offset as usize };
    }
    Sink::Owned(lock(&sh.state).buffer(len))
}

/// The payload of a one-sided request from `origin` is complete.
pub(super) fn on_request_complete(sh: &Shared, origin: usize, frame: Frame, sink: Sink) {
    match sink {
        Sink::Part { part, .. } => part.finish_applying(),
        Sink::Owned(data) => match find(sh, origin, frame) {
            Ok(part) => part.dispatch(sh, origin, frame, data),
            Err(why) => refuse(sh, origin, frame, None, why),
        },
        Sink::User { .. } | Sink::Discard => {}
    }
}

impl Shared {
    /// Writes a frame whose payload is handed over (no copy when the socket is full).
    fn send_owned_frame(&self, p: usize, frame: Frame, payload: Vec<u8>) {
        let peer = self.peer(p);
        if peer.write_shut.load(Ordering::Acquire) {
            return;
        }
        let mut tx = lock(&peer.tx);
        let result = tx.send_owned(&peer.link, self.header_to(p, frame), payload, None, &mut |id| self.sent(id));
        peer.tx_busy.store(!tx.is_empty(), Ordering::Release);
        drop(tx);
        if let Err(e) = result {
            self.connection_lost(p, &format!("sending to it failed: {e}"));
        }
    }
}

impl OneSided for TcpEndpoint {
    unsafe fn expose(
        &self,
        window: ContextId,
        members: &[usize],
        base: *mut u8,
        len: usize,
    ) -> Result<Box<dyn RmaWindow>> {
        let sh = self.shared();
        sh.check_live()?;
        let mut is_member = vec![false; sh.size];
        for &w in members {
            match is_member.get_mut(w) {
                None => return Err(Error::RankOutOfRange { rank: w, size: sh.size }),
                Some(true) => return Err(Error::InvalidArgument(format!("expose: rank {w} is listed twice"))),
                Some(m) => *m = true,
            }
        }
        let Some(own_index) = members.iter().position(|&w| w == sh.rank) else {
            return Err(Error::InvalidArgument(format!("expose: rank {} is not among the members", sh.rank)));
        };
        // SAFETY: the caller guarantees `base..base + len` stays valid and is accessed only
        // through this window's rules until `close` returned; the part stops touching it then.
        let seg = unsafe { Segment::new(base, len) };
        let part = Arc::new(Part {
            window,
            seg,
            members: members.to_vec(),
            is_member,
            gate: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            state: Mutex::new(PartState::default()),
        });
        {
            let mut table = lock(&sh.windows);
            if table.contains_key(&window) {
                return Err(Error::InvalidArgument(format!("expose: window id {window} is already in use")));
            }
            table.insert(window, part.clone());
        }
        Ok(Box::new(TcpWindow {
            ep: self.handle(),
            part,
            own_index,
            lengths: OnceCell::new(),
            dirty: (0..members.len()).map(|_| Cell::new(false)).collect(),
            last_get: (0..members.len()).map(|_| Cell::new(None)).collect(),
            next_tag: Cell::new(MAX_REPLY_TAG),
            pending: RefCell::new(Vec::with_capacity(members.len())),
        }))
    }

    fn direct_access(&self, _members: &[usize]) -> bool {
        false
    }
}

/// This rank's handle of one window on the tcp device.
pub(super) struct TcpWindow {
    ep: TcpEndpoint,
    part: Arc<Part>,
    own_index: usize,
    lengths: OnceCell<Vec<usize>>,
    /// Targets with puts or accumulates issued since their last flush.
    dirty: Vec<Cell<bool>>,
    /// The latest get (or get-accumulate) per target since its last flush: replies come in
    /// order, so once it has its answer every earlier one has too, and a flush with no writes
    /// outstanding needs no round trip.
    last_get: Vec<Cell<Option<ReqId>>>,
    next_tag: Cell<i32>,
    /// Flush-all's acknowledgement receives (kept to allocate nothing per flush).
    pending: RefCell<Vec<Started>>,
}

impl TcpWindow {
    fn sh(&self) -> &Shared {
        self.ep.shared()
    }

    fn me(&self) -> usize {
        self.sh().rank
    }

    fn tag(&self) -> i32 {
        let tag = self.next_tag.get();
        self.next_tag.set(if tag == i32::MIN { MAX_REPLY_TAG } else { tag - 1 });
        tag
    }

    /// Checks `target` and the byte range against its part; returns its world rank.
    fn check(&self, what: &str, target: usize, offset: usize, len: usize) -> Result<usize> {
        let Some(lengths) = self.lengths.get() else {
            return Err(Error::RmaSync(format!("{what}: the window is not connected yet")));
        };
        let Some(&part) = lengths.get(target) else {
            return Err(Error::InvalidArgument(format!(
                "{what}: target {target} is not a member of the window of {} ranks",
                lengths.len()
            )));
        };
        match offset.checked_add(len) {
            Some(end) if end <= part => Ok(self.part.members[target]),
            _ => Err(Error::InvalidArgument(outside(what, offset as u64, len as u64, part, target))),
        }
    }

    fn check_elements(what: &str, offset: usize, len: usize, element: Element, op: AccumulateOp) -> Result<()> {
        if !element.supports(op) {
            return Err(Error::InvalidArgument(format!("{what}: {op:?} is not defined on {element:?}")));
        }
        let size = element.size();
        if !offset.is_multiple_of(size) || !len.is_multiple_of(size) {
            return Err(Error::InvalidArgument(format!(
                "{what}: {len} bytes at offset {offset} are not whole {element:?} elements"
            )));
        }
        Ok(())
    }

    /// Fails if the job aborted, this rank ended, or `w` has exited.
    fn live(&self, w: usize) -> Result<()> {
        let sh = self.sh();
        sh.check_live()?;
        let st = lock(&sh.state);
        if let Some(e) = st.abort_error() {
            return Err(e);
        }
        if st.peers[w] == PeerState::Exited {
            return Err(Error::PeerExited { rank: w });
        }
        Ok(())
    }

    fn send(&self, w: usize, frame: Frame, payload: &[u8]) -> Result<()> {
        self.send_held_back(w, frame, payload, false)
    }

    /// Sends a frame to `w`, at once or held back until the next one (`Tx::send_corked`).
    fn send_held_back(&self, w: usize, frame: Frame, payload: &[u8], held_back: bool) -> Result<()> {
        self.live(w)?;
        let sh = self.sh();
        let sent = if held_back { sh.send_frame_corked(w, frame, payload) } else { sh.send_frame(w, frame, payload) };
        if sent {
            Ok(())
        } else {
            let lost = Error::PeerFailed { rank: w, cause: "the connection broke while sending".into() };
            Err(lock(&self.sh().state).abort_error().unwrap_or(lost))
        }
    }

    /// Posts the receive for a reply into `into` (`cap` bytes), then sends the request.
    ///
    /// # Safety
    /// `into..into + cap` stays writable until the returned operation completes or is released.
    unsafe fn request(
        &self,
        w: usize,
        frame: impl FnOnce(i32) -> Frame,
        payload: &[u8],
        into: *mut u8,
        cap: usize,
    ) -> Result<Started> {
        let tag = self.tag();
        let spec = MatchSpec { context: self.part.window, source: Source::Rank(w), tag };
        // SAFETY: forwarded from the caller.
        let started = unsafe { self.ep.irecv(into, cap, spec) }?;
        if let Err(e) = self.send(w, frame(tag), payload) {
            if let Started::Pending(id) = started {
                self.ep.release(id);
            }
            return Err(e);
        }
        Ok(started)
    }

    /// A request answered with nothing (lock grant, unlock and flush acknowledgements).
    fn request_ack(&self, w: usize, frame: impl FnOnce(i32) -> Frame) -> Result<Started> {
        let sink = std::ptr::NonNull::<u8>::dangling().as_ptr();
        // SAFETY: a zero-byte receive never writes.
        unsafe { self.request(w, frame, &[], sink, 0) }
    }

    /// Runs `f` on this rank's own part (a self-targeted operation).
    fn on_own_part<R>(&self, what: &str, f: impl FnOnce(&Segment) -> Result<R>) -> Result<R> {
        if lock(&self.part.state).held {
            return Err(Error::RmaSync(format!(
                "{what} on this rank's own window part while its local access is held (it would wait for itself)"
            )));
        }
        self.part.touch(self.me(), f)
    }

    /// A payload above the eager limit goes straight from the caller's buffer, completing a send
    /// request once written (the rendezvous path's mechanics without the handshake).
    ///
    /// # Safety
    /// `data..data + len` stays readable and unmodified until the request completes or is released.
    unsafe fn send_borrowed(&self, w: usize, frame: Frame, data: *const u8, len: usize) -> Result<Started> {
        self.live(w)?;
        let sh = self.sh();
        let peer = sh.peer(w);
        let mut tx = lock(&peer.tx);
        let id = lock(&sh.state).reqs.insert(Req::Send(SendReq {
            dest: w,
            tag: 0,
            buf: data,
            len,
            phase: SendPhase::Transferring,
            detached: None,
        }));
        // SAFETY: forwarded from the caller; the request lives until written or released (release
        // detaches the bytes under the tx lock).
        let result =
            unsafe { tx.send_borrowed(&peer.link, sh.header_to(w, frame), data, len, id, &mut |d| sh.sent(d)) };
        peer.tx_busy.store(!tx.is_empty(), Ordering::Release);
        drop(tx);
        if let Err(e) = result {
            sh.connection_lost(w, &format!("sending to it failed: {e}"));
            self.ep.release(id);
            return Err(lock(&sh.state).abort_error().unwrap_or(Error::PeerFailed { rank: w, cause: e.to_string() }));
        }
        Ok(Started::Pending(id))
    }

    /// Sends a request with a payload from the caller: copied if small, borrowed if large.
    ///
    /// # Safety
    /// As for [`TcpWindow::send_borrowed`].
    unsafe fn send_payload(&self, w: usize, frame: Frame, data: *const u8, len: usize) -> Result<Started> {
        if len > self.sh().eager_limit {
            // SAFETY: forwarded.
            return unsafe { self.send_borrowed(w, frame, data, len) };
        }
        // SAFETY: readable for `len` bytes during the call (caller contract); copied if queued.
        let bytes = if len == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(data, len) } };
        // Held back until the next frame to `w`: a put or accumulate needs to arrive only by the
        // next synchronisation, and every synchronisation sends `w` a frame.
        self.send_held_back(w, frame, bytes, true)?;
        Ok(self.done(len))
    }

    fn note_get(&self, target: usize, started: &Started) {
        if let Started::Pending(id) = *started {
            self.last_get[target].set(Some(id));
        }
    }

    fn done(&self, len: usize) -> Started {
        Started::Complete(Ok(crate::device::RawStatus { source: self.me(), tag: 0, bytes: len, cancelled: false }))
    }

    /// Blocking flush of the targets in `targets` that have operations outstanding, pipelined.
    fn flush_dirty(&self, targets: impl Iterator<Item = usize>) -> Result<()> {
        let mut pending = self.pending.borrow_mut();
        pending.clear();
        let mut first_error = None;
        let window = self.part.window;
        for t in targets {
            let last_get = self.last_get[t].take();
            if !self.dirty[t].replace(false) {
                if let Some(id) = last_get
                    && let Err(e) = self.ep.wait_until(&mut || Ok(self.ep.settled(id)))
                {
                    first_error.get_or_insert(e);
                }
                continue;
            }
            let w = self.part.members[t];
            match self.request_ack(w, |reply| Frame::RmaFlush { window, reply, query: false }) {
                Ok(started) => pending.push(started),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        for started in pending.drain(..) {
            if let Err(e) = self.ep.complete(started) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl RmaWindow for TcpWindow {
    fn connect(&self) -> Result<()> {
        let n = self.part.members.len();
        let mut lengths = vec![0u64; n];
        let window = self.part.window;
        let mut started = Vec::with_capacity(n);
        let mut first_error = None;
        for (t, slot) in lengths.iter_mut().enumerate() {
            if t == self.own_index {
                *slot = self.part.seg.len() as u64;
                continue;
            }
            let w = self.part.members[t];
            // SAFETY: `lengths` is neither moved nor read until every receive has completed or
            // been released below (`complete` releases a failed one).
            let into = std::ptr::from_mut(slot).cast::<u8>();
            match unsafe { self.request(w, |reply| Frame::RmaFlush { window, reply, query: true }, &[], into, 8) } {
                Ok(s) => started.push(s),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        for s in started {
            if let Err(e) = self.ep.complete(s) {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        let lengths = lengths.into_iter().map(|l| u64::from_le(l) as usize).collect();
        let _ = self.lengths.set(lengths);
        Ok(())
    }

    fn part_lengths(&self) -> &[usize] {
        self.lengths.get().map_or(&[], Vec::as_slice)
    }

    unsafe fn put(&self, target: usize, offset: usize, data: *const u8, len: usize) -> Result<Started> {
        let w = self.check("put", target, offset, len)?;
        if len == 0 {
            return Ok(self.done(0));
        }
        if w == self.me() {
            // SAFETY: readable for `len` bytes (caller contract).
            let bytes = unsafe { std::slice::from_raw_parts(data, len) };
            self.on_own_part("put", |s| s.write(offset, bytes))?;
            return Ok(self.done(len));
        }
        let frame = Frame::RmaPut { window: self.part.window, offset: offset as u64, len: len as u64 };
        self.dirty[target].set(true);
        // SAFETY: forwarded from the caller.
        unsafe { self.send_payload(w, frame, data, len) }
    }

    fn with_part(&self, target: usize, f: &mut dyn FnMut(&Segment) -> Result<()>) -> Result<bool> {
        if target != self.me() {
            return Ok(false);
        }
        self.on_own_part("direct access", |segment| f(segment))?;
        Ok(true)
    }

    unsafe fn get(&self, target: usize, offset: usize, into: *mut u8, len: usize) -> Result<Started> {
        let w = self.check("get", target, offset, len)?;
        if len == 0 {
            return Ok(self.done(0));
        }
        if w == self.me() {
            // SAFETY: writable for `len` bytes and untouched by others (caller contract).
            let buf = unsafe { std::slice::from_raw_parts_mut(into, len) };
            self.on_own_part("get", |s| s.read(offset, buf))?;
            return Ok(self.done(len));
        }
        let window = self.part.window;
        let frame = |reply| Frame::RmaGet { window, offset: offset as u64, len: len as u64, reply };
        // SAFETY: forwarded from the caller.
        let started = unsafe { self.request(w, frame, &[], into, len) }?;
        self.note_get(target, &started);
        Ok(started)
    }

    unsafe fn accumulate(
        &self,
        target: usize,
        offset: usize,
        data: *const u8,
        len: usize,
        element: Element,
        op: AccumulateOp,
    ) -> Result<Started> {
        let w = self.check("accumulate", target, offset, len)?;
        Self::check_elements("accumulate", offset, len, element, op)?;
        if len == 0 || op == AccumulateOp::NoOp {
            return Ok(self.done(len));
        }
        if w == self.me() {
            // SAFETY: readable for `len` bytes (caller contract).
            let bytes = unsafe { std::slice::from_raw_parts(data, len) };
            self.on_own_part("accumulate", |s| s.accumulate(offset, len, bytes, None, element, op))?;
            return Ok(self.done(len));
        }
        let frame = Frame::RmaAcc { window: self.part.window, offset: offset as u64, len: len as u64, element, op };
        self.dirty[target].set(true);
        // SAFETY: forwarded from the caller.
        unsafe { self.send_payload(w, frame, data, len) }
    }

    unsafe fn get_accumulate(
        &self,
        target: usize,
        offset: usize,
        data: *const u8,
        result: *mut u8,
        len: usize,
        element: Element,
        op: AccumulateOp,
    ) -> Result<Started> {
        let w = self.check("get_accumulate", target, offset, len)?;
        Self::check_elements("get_accumulate", offset, len, element, op)?;
        if len == 0 {
            return Ok(self.done(0));
        }
        let noop = op == AccumulateOp::NoOp;
        // SAFETY: readable for `len` bytes unless the operator is NoOp (caller contract).
        let bytes = if noop { &[][..] } else { unsafe { std::slice::from_raw_parts(data, len) } };
        if w == self.me() {
            // SAFETY: writable for `len` bytes and untouched by others (caller contract).
            let out = unsafe { std::slice::from_raw_parts_mut(result, len) };
            self.on_own_part("get_accumulate", |s| s.accumulate(offset, len, bytes, Some(out), element, op))?;
            return Ok(self.done(len));
        }
        // Its answer is sent once it is applied: it needs no flush round trip.
        let window = self.part.window;
        let frame = |reply| Frame::RmaGetAcc { window, offset: offset as u64, len: len as u64, element, op, reply };
        // The payload is copied by `send_frame` if the socket cannot take it at once.
        // SAFETY: forwarded from the caller.
        let started = unsafe { self.request(w, frame, bytes, result, len) }?;
        self.note_get(target, &started);
        Ok(started)
    }

    fn fetch_and_op(
        &self,
        target: usize,
        offset: usize,
        element: Element,
        op: AccumulateOp,
        operand: u64,
    ) -> Result<u64> {
        let w = self.check("fetch_and_op", target, offset, element.size())?;
        Self::check_elements("fetch_and_op", offset, element.size(), element, op)?;
        if w == self.me() {
            return self.on_own_part("fetch_and_op", |s| s.fetch_and_op(offset, element, op, operand));
        }
        let window = self.part.window;
        let offset = offset as u64;
        let mut old = [0u8; 8];
        let frame = |reply| Frame::RmaFetchOp { window, offset, element, op, operand, reply };
        // SAFETY: `old` outlives the request, which completes (or is released) in `complete`.
        let started = unsafe { self.request(w, frame, &[], old.as_mut_ptr(), 8) }?;
        self.ep.complete(started)?;
        Ok(u64::from_le_bytes(old))
    }

    fn compare_and_swap(&self, target: usize, offset: usize, element: Element, expected: u64, new: u64) -> Result<u64> {
        let w = self.check("compare_and_swap", target, offset, element.size())?;
        Self::check_elements("compare_and_swap", offset, element.size(), element, AccumulateOp::Replace)?;
        if w == self.me() {
            return self.on_own_part("compare_and_swap", |s| s.compare_and_swap(offset, element, expected, new));
        }
        let window = self.part.window;
        let offset = offset as u64;
        let mut old = [0u8; 8];
        let frame = |reply| Frame::RmaCas { window, offset, element, compare: expected, reply };
        // SAFETY: `old` outlives the request, which completes (or is released) in `complete`.
        let started = unsafe { self.request(w, frame, &new.to_le_bytes(), old.as_mut_ptr(), 8) }?;
        self.ep.complete(started)?;
        Ok(u64::from_le_bytes(old))
    }

    fn lock(&self, target: usize, kind: LockKind) -> Result<()> {
        let w = self.check("lock", target, 0, 0)?;
        let part = &*self.part;
        if w == self.me() {
            {
                let mut st = lock(&part.state);
                if part.closed.load(Ordering::Relaxed) {
                    return Err(closed_error(part.window, w));
                }
                if st.locks.request(w, kind, 0) {
                    return Ok(());
                }
            }
            return self.ep.wait_until(&mut || Ok(std::mem::take(&mut lock(&part.state).locks.self_granted)));
        }
        let window = part.window;
        let started = self.request_ack(w, |reply| Frame::RmaLock { window, kind, reply })?;
        self.ep.complete(started).map(drop)
    }

    fn unlock(&self, target: usize) -> Result<()> {
        let w = self.check("unlock", target, 0, 0)?;
        if w == self.me() {
            return self.part.unlock(self.sh(), w).map_err(Error::RmaSync);
        }
        self.dirty[target].set(false);
        self.last_get[target].set(None);
        let window = self.part.window;
        let started = self.request_ack(w, |reply| Frame::RmaUnlock { window, reply })?;
        self.ep.complete(started).map(drop)
    }

    fn flush(&self, target: Option<usize>) -> Result<()> {
        match target {
            Some(t) => {
                self.check("flush", t, 0, 0)?;
                self.flush_dirty(std::iter::once(t))
            }
            None => self.flush_dirty(0..self.part.members.len()),
        }
    }

    fn begin_local_access(&self) -> Result<()> {
        let part = &*self.part;
        {
            let mut st = lock(&part.state);
            if part.closed.load(Ordering::Relaxed) {
                return Err(closed_error(part.window, self.me()));
            }
            if st.held {
                return Ok(());
            }
            st.held = true;
        }
        let waited = self.ep.wait_until(&mut || Ok(lock(&part.state).applying == 0));
        if waited.is_err() {
            self.end_local_access();
        }
        waited
    }

    fn end_local_access(&self) {
        let part = &*self.part;
        let sh = self.sh();
        let mut st = lock(&part.state);
        if !st.held {
            return;
        }
        st.held = false;
        st.draining = true;
        while let Some(Deferred { origin, frame, data }) = st.queue.pop_front() {
            st.applying += 1;
            drop(st);
            part.apply(sh, origin, frame, &data);
            if data.capacity() > 0 {
                lock(&sh.state).recycle(data);
            }
            st = lock(&part.state);
            st.applying -= 1;
        }
        st.draining = false;
    }

    fn close(&self) -> Result<()> {
        let part = &*self.part;
        let sh = self.sh();
        let (queue, waiting) = {
            let mut st = lock(&part.state);
            if part.closed.swap(true, Ordering::SeqCst) {
                return Ok(());
            }
            st.held = false;
            (std::mem::take(&mut st.queue), std::mem::take(&mut st.locks.waiting))
        };
        {
            let mut table = lock(&sh.windows);
            if table.get(&part.window).is_some_and(|p| Arc::ptr_eq(p, &self.part)) {
                table.remove(&part.window);
            }
        }
        let why = || {
            Error::RmaSync(format!(
                "window {} was freed at rank {} before this request was served",
                part.window, sh.rank
            ))
        };
        for d in queue {
            if let Some(tag) = d.frame.rma_reply() {
                answer(sh, d.origin, part.window, tag, Err(why()));
            }
        }
        for (origin, _, reply) in waiting {
            if origin != sh.rank {
                answer(sh, origin, part.window, reply, Err(why()));
            }
        }
        // Only bounded copies run inside the gate; once it is empty nothing touches the memory.
        while part.gate.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
        Ok(())
    }
}

impl Drop for TcpWindow {
    fn drop(&mut self) {
        let _ = self.close();
    }
}
