//! The tcp protocol: what each frame arriving from a peer does (eager arrival, rendezvous
//! ready-to-send / ready-to-receive / data, cancel, abort, goodbye).
//!
//! Messages up to the eager limit are written at once with their header; longer and synchronous
//! ones go by rendezvous (ready-to-send, ready-to-receive, then the payload straight from the
//! sender's buffer into the receiver's; over a same-node link where the receiver can read the
//! sender's memory, the sender says where the payload lies and the receiver copies it itself,
//! see `peer_memory`). The handler runs under the arriving connection's rx lock.

use std::sync::atomic::Ordering;

use super::frame::{Frame, Header};
use super::peer_memory::PeerProcess;
use super::rx::{Delivery, RxHandler, Sink};
use super::state::{self, Body, PeerState, RecvPhase, RecvReq, Req, SendPhase};
use super::{Shared, one_sided};
use crate::device::matching::Envelope;
use crate::device::{ContextId, Failure, RawStatus, ReqId, lock_ignoring_poison as lock, receive_result};
use crate::error::Error;

/// Eager limit towards a peer that reads our memory, where ranks have cores of their own.
/// Measured on the 2-vCPU Intel VM, two processes of one rank each: ping-pong at 16 KiB
/// 2.7 µs read against 3.3 µs through the ring, 64 KiB 4.6 against 10.0; at 8 KiB 2.4 against
/// 2.0 (the round trip costs more than the second copy saves).
const READ_EAGER_LIMIT: usize = 8 * 1024;

/// Protocol actions for frames arriving from one peer (runs under that peer's rx lock). The
/// decoder has checked each header's ranks: its source is `peer`, its destination this rank.
pub(super) struct PeerHandler<'a> {
    pub(super) sh: &'a Shared,
    pub(super) peer: usize,
    /// A frame that may have completed something a waiter waits for was handled. One-sided
    /// requests served for others complete nothing here (except the ones that release a lock or
    /// end an application the owner may wait for), so they wake nobody.
    pub(super) notable: bool,
}

impl RxHandler for PeerHandler<'_> {
    fn on_header(&mut self, header: Header) -> Sink {
        let (sh, p) = (self.sh, self.peer);
        match header.frame {
            Frame::RmaReply { context, tag, len, failed } => {
                if failed {
                    // At most `MAX_FAILURE_LEN` (checked by the decoder).
                    return Sink::Owned(Vec::with_capacity(len as usize));
                }
                let env = Envelope { source: p, context, tag, len: usize::try_from(len).unwrap_or(usize::MAX) };
                let mut st = lock(&sh.state);
                match st.take_posted(&env) {
                    Some(id) => match st.reqs.get(id) {
                        Some(Req::Recv(r)) => Sink::User { id, ptr: r.buf, capacity: r.capacity },
                        _ => Sink::Discard,
                    },
                    // Its receive was released (the origin gave up): nobody wants the answer.
                    None => Sink::Discard,
                }
            }
            Frame::RmaPut { .. }
            | Frame::RmaGet { .. }
            | Frame::RmaAcc { .. }
            | Frame::RmaGetAcc { .. }
            | Frame::RmaFetchOp { .. }
            | Frame::RmaCas { .. }
            | Frame::RmaLock { .. }
            | Frame::RmaUnlock { .. }
            | Frame::RmaFlush { .. } => one_sided::on_request(sh, p, header.frame),
            Frame::Eager { context, tag, len } => {
                let env = Envelope { source: p, context, tag, len: len as usize };
                let mut st = lock(&sh.state);
                match st.take_posted(&env) {
                    Some(id) => match st.reqs.get(id) {
                        Some(Req::Recv(r)) => Sink::User { id, ptr: r.buf, capacity: r.capacity },
                        _ => Sink::Discard,
                    },
                    None => Sink::Owned(st.buffer(len as usize)),
                }
            }
            Frame::Rts { context, tag, len, send_id, .. } => {
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                let env = Envelope { source: p, context, tag, len };
                let mut st = lock(&sh.state);
                match st.take_posted(&env) {
                    Some(id) => {
                        drop(st);
                        sh.ready_to_receive(p, send_id, id);
                    }
                    None => st.matcher.push_unexpected(env, Body::Rts { send_id }),
                }
                Sink::Discard
            }
            Frame::Cts { send_id, recv_id, reads } => {
                self.start_transfer(state::from_wire(send_id), recv_id, reads);
                Sink::Discard
            }
            // Handled once complete (they carry no payload).
            Frame::Readable { .. } | Frame::ReadDone { .. } => Sink::Discard,
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
            Frame::Abort { len, .. } => Sink::Owned(Vec::with_capacity(len as usize)),
            Frame::Cancel { send_id } => {
                let mut st = lock(&sh.state);
                let cancelled = st
                    .matcher
                    .remove_unexpected(|env, body| {
                        env.source == p && matches!(body, Body::Rts { send_id: s } if *s == send_id)
                    })
                    .is_some();
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
        let frame = d.header.frame;
        self.notable |= !frame.is_rma_request()
            || matches!(frame, Frame::RmaUnlock { .. } | Frame::RmaPut { .. } | Frame::RmaAcc { .. });
        match (d.header.frame, d.sink) {
            (Frame::RmaReply { tag, failed: false, .. }, Sink::User { id, capacity, .. }) => {
                lock(&sh.state).finish_recv(id, receive_result(p, tag, d.len, capacity));
            }
            (Frame::RmaReply { context, tag, failed: true, .. }, Sink::Owned(text)) => {
                let env = Envelope { source: p, context, tag, len: 0 };
                let why = String::from_utf8_lossy(&text);
                let mut st = lock(&sh.state);
                if let Some(id) = st.take_posted(&env) {
                    st.finish_recv(id, Err(Error::RmaSync(format!("rank {p} refused the request: {why}"))));
                }
            }
            (frame, sink) if frame.is_rma_request() => one_sided::on_request_complete(sh, p, frame, sink),
            (Frame::Eager { tag, .. }, Sink::User { id, capacity, .. }) => {
                lock(&sh.state).finish_recv(id, receive_result(p, tag, d.len, capacity));
            }
            (Frame::Eager { context, tag, .. }, Sink::Owned(data)) => self.eager_arrived(context, tag, data),
            (Frame::Data { .. }, Sink::User { id, capacity, .. }) => {
                let mut st = lock(&sh.state);
                if let Some(Req::Recv(RecvReq { phase: RecvPhase::Matched { source, tag, .. }, .. })) = st.reqs.get(id)
                {
                    let result = receive_result(*source, *tag, d.len, capacity);
                    st.finish_recv(id, result);
                }
            }
            (Frame::Readable { recv_id, send_id, addr }, _) => self.read_payload(recv_id, send_id, addr),
            (Frame::ReadDone { send_id, recv_id, failed }, _) => {
                let id = state::from_wire(send_id);
                if failed {
                    self.start_transfer(id, recv_id, false);
                } else {
                    sh.sent(id);
                }
            }
            (Frame::Abort { origin, code, .. }, Sink::Owned(text)) => {
                let origin = origin as usize;
                if origin >= sh.size {
                    let why = format!("protocol error: its abort names rank {origin}, outside the job of {}", sh.size);
                    sh.connection_lost(p, &why);
                    return;
                }
                let cause = String::from_utf8_lossy(&text).into_owned();
                lock(&sh.state).abort(Failure { rank: origin, cause, code });
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
        let env = Envelope { source: p, context, tag, len };
        let mut st = lock(&sh.state);
        let Some(id) = st.take_posted(&env) else {
            st.matcher.push_unexpected(env, Body::Eager(data));
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

    /// The receiver is ready for rendezvous send `id`: tell it where to read the payload
    /// (`reads`, unless the request was released and holds a copy) or queue the payload. Also
    /// the fallback after a failed read (from `RemoteReading`).
    fn start_transfer(&self, id: ReqId, recv_id: u64, reads: bool) {
        let (sh, p) = (self.sh, self.peer);
        let peer = sh.peer(p);
        let mut tx = lock(&peer.tx);
        let mut st = lock(&sh.state);
        let Ok(Req::Send(s)) = st.reqs.get_mut(id) else { return };
        if !matches!(s.phase, SendPhase::AwaitCts | SendPhase::CancelRequested | SendPhase::RemoteReading) {
            return;
        }
        let result = if reads && s.detached.is_none() {
            s.phase = SendPhase::RemoteReading;
            let readable = Frame::Readable { recv_id, send_id: state::wire_id(id), addr: s.buf as u64 };
            drop(st);
            tx.send_copied(&peer.link, sh.header_to(p, readable), &[], &mut |done| sh.sent(done))
        } else {
            s.phase = SendPhase::Transferring;
            let data_frame = Frame::Data { recv_id, len: s.len as u64 };
            match s.detached.as_mut() {
                Some(data) => {
                    let data = std::mem::take(data);
                    drop(st);
                    tx.send_owned(&peer.link, sh.header_to(p, data_frame), data, Some(id), &mut |done| sh.sent(done))
                }
                None => {
                    let (ptr, len) = (s.buf, s.len);
                    drop(st);
                    // SAFETY: the send request is live and not detached, so its buffer stays
                    // valid until `sent` completes it or release detaches it under this tx lock.
                    unsafe {
                        tx.send_borrowed(&peer.link, sh.header_to(p, data_frame), ptr, len, id, &mut |done| {
                            sh.sent(done)
                        })
                    }
                }
            }
        };
        peer.tx_busy.store(!tx.is_empty(), Ordering::Release);
        drop(tx);
        if let Err(e) = result {
            sh.connection_lost(p, &format!("sending to it failed: {e}"));
        }
    }

    /// The sender of matched receive `recv_id` offers its payload at `addr`: copy it from the
    /// sender's memory, finish the receive, and tell the sender (which otherwise sends it).
    fn read_payload(&self, recv_id: u64, send_id: u64, addr: u64) {
        let (sh, p) = (self.sh, self.peer);
        let Some(reader) = sh.peer(p).reads.as_ref() else {
            sh.connection_lost(p, "protocol error: it offered a payload to read, which this rank never asked for");
            return;
        };
        let id = state::from_wire(recv_id);
        let target = match lock(&sh.state).reqs.get(id) {
            Some(Req::Recv(r)) => match r.phase {
                RecvPhase::Matched { source, tag, len } => Some((r.buf, r.capacity, source, tag, len)),
                _ => None,
            },
            _ => None,
        };
        // A receive released meanwhile wants nothing: done as far as the sender is concerned.
        let mut failed = false;
        if let Some((buf, capacity, source, tag, len)) = target {
            let fit = len.min(capacity);
            let copied = if fit == 0 {
                Ok(())
            } else {
                // SAFETY: the receive is matched (so release waits for the rx lock we hold) and
                // its buffer is writable for `capacity` bytes.
                reader.read(addr, unsafe { std::slice::from_raw_parts_mut(buf, fit) })
            };
            match copied {
                Ok(()) => lock(&sh.state).finish_recv(id, receive_result(source, tag, len, capacity)),
                Err(_) => {
                    reader.give_up();
                    failed = true;
                }
            }
        }
        sh.send_frame(p, Frame::ReadDone { send_id, recv_id, failed }, &[]);
    }
}

impl Shared {
    /// Whether a message of `len` bytes goes to `p` eagerly: up to the eager limit, but only up
    /// to [`READ_EAGER_LIMIT`] where `p` reads our memory (a payload it reads costs one copy and
    /// a round trip, one through the ring two copies), unless ranks time-share cores: there a
    /// round trip waits for the peer's turn on a core, and eager sends keep collectives going
    /// (2 × 2 ranks on 2 cores: allreduce and bcast at 16–32 KiB 1.4–1.6× slower with the
    /// lower limit).
    pub(super) fn sends_eagerly(&self, p: usize, len: usize) -> bool {
        len <= self.eager_limit
            && (len <= READ_EAGER_LIMIT || self.policy.time_shared() || self.usable_reader(p).is_none())
    }

    /// `p`'s process where we may (still) read its memory.
    fn usable_reader(&self, p: usize) -> Option<&PeerProcess> {
        self.peer(p).reads.as_ref().filter(|reader| reader.usable())
    }

    /// Answers rendezvous send `send_id` of peer `p`, matched by receive `id`: the peer sends
    /// the payload, or lets us read it where we can read its memory.
    pub(super) fn ready_to_receive(&self, p: usize, send_id: u64, id: ReqId) {
        let reads = self.usable_reader(p).is_some();
        self.send_frame(p, Frame::Cts { send_id, recv_id: state::wire_id(id), reads }, &[]);
    }
}
