//! Matching state of one tcp endpoint: requests, the rank's [`Matcher`] (posted receives,
//! unexpected messages), and what is known about each peer. Pure bookkeeping under one lock; no
//! I/O happens here.

use crate::device::matching::{self, Envelope, Matcher, PeerView};
use crate::device::slab::Slab;
use crate::device::{Failure, MatchSpec, RawStatus, ReqId};
use crate::error::{Error, Result};

/// Buffers kept for unexpected eager messages; beyond this, freed.
const POOL_KEEP: usize = 64;
/// Buffers allocated up front, so a steady stream never allocates its first few.
const POOL_START: usize = 4;

pub(super) enum SendPhase {
    /// Ready-to-send is out; waiting for the receiver's ready-to-receive.
    AwaitCts,
    /// A cancel is out; the answer (or a ready-to-receive that won the race) decides.
    CancelRequested,
    /// Payload queued on the connection.
    Transferring,
    /// The receiver reads the payload from our buffer (`Readable` is out); its `ReadDone`
    /// finishes the send. The buffer must stay valid until then, release included.
    RemoteReading,
    /// A synchronous or rendezvous-sized send to this rank itself, waiting in the unexpected queue.
    SelfQueued,
    Done(RawStatus),
}

pub(super) struct SendReq {
    pub dest: usize,
    pub tag: i32,
    pub buf: *const u8,
    pub len: usize,
    pub phase: SendPhase,
    /// Set when the request was released before it finished: the data was copied here and the
    /// entry is freed by whoever completes it.
    pub detached: Option<Vec<u8>>,
}

pub(super) enum RecvPhase {
    Posted,
    /// Matched a `len`-byte message from `source` with `tag`; the payload is on its way into
    /// the buffer.
    Matched {
        source: usize,
        tag: i32,
        len: usize,
    },
    Done(Result<RawStatus>),
}

pub(super) struct RecvReq {
    pub spec: MatchSpec,
    pub buf: *mut u8,
    pub capacity: usize,
    pub phase: RecvPhase,
}

pub(super) enum Req {
    Send(SendReq),
    Recv(RecvReq),
}

/// The payload descriptor of an unexpected message: what a receive that takes it does.
pub(super) enum Body {
    Eager(Vec<u8>),
    /// A remote rendezvous message; taking it sends a ready-to-receive.
    Rts {
        send_id: u64,
    },
    /// A synchronous or rendezvous-sized send to this rank itself; taking it copies from the sender's request.
    SelfSync(ReqId),
}

/// How a peer stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PeerState {
    Live,
    /// It said `Bye`: it sends no new messages.
    Exited,
}

pub(super) struct State {
    pub reqs: Slab<Req>,
    /// Posted receives and arrived messages nobody has received yet.
    pub matcher: Matcher<Body>,
    pub peers: Vec<PeerState>,
    /// Messages taken off matching by a matched probe, until received or discarded.
    pub messages: Slab<(Envelope, Body)>,
    /// The first failure this rank heard of: the job is aborted.
    pub aborted: Option<Failure>,
    /// Whether this rank has sent its peers the job's failure (`Device::abort_job`).
    pub abort_relayed: bool,
    pool: Vec<Vec<u8>>,
    /// Smallest capacity of a pooled buffer: any eager message fits any pooled buffer.
    buffer_floor: usize,
}

// SAFETY: the raw buffer pointers in requests are only dereferenced by the endpoint under the
// device contract (valid until completion or release); the state itself is only reached through
// its mutex.
unsafe impl Send for State {}

impl State {
    pub fn new(size: usize, eager_limit: usize) -> Self {
        let mut pool = Vec::with_capacity(POOL_KEEP);
        pool.extend((0..POOL_START).map(|_| Vec::with_capacity(eager_limit)));
        State {
            reqs: Slab::with_capacity(64),
            matcher: Matcher::with_capacity(64, 64),
            peers: vec![PeerState::Live; size],
            messages: Slab::default(),
            aborted: None,
            abort_relayed: false,
            pool,
            buffer_floor: eager_limit,
        }
    }

    pub fn abort_error(&self) -> Option<Error> {
        self.aborted.as_ref().map(Failure::peer_error)
    }

    /// Records the first failure; later ones are consequences.
    pub fn abort(&mut self, failure: Failure) -> &Failure {
        self.aborted.get_or_insert(failure)
    }

    /// The posted receive an arriving envelope matches, taken off the posted list and marked
    /// matched (its payload is on its way).
    pub fn take_posted(&mut self, env: &Envelope) -> Option<ReqId> {
        let id = self.matcher.take_posted(env)?;
        if let Ok(Req::Recv(r)) = self.reqs.get_mut(id) {
            r.phase = RecvPhase::Matched { source: env.source, tag: env.tag, len: env.len };
        }
        Some(id)
    }

    /// Takes the queued self-send of request `id` off the unexpected queue (cancel, withdrawal).
    pub fn withdraw_self_send(&mut self, id: ReqId) {
        self.matcher.remove_unexpected(|_, body| matches!(body, Body::SelfSync(x) if *x == id));
    }

    /// Completes a matched receive (ignored if it was released meanwhile).
    pub fn finish_recv(&mut self, id: ReqId, result: Result<RawStatus>) {
        if let Ok(Req::Recv(r)) = self.reqs.get_mut(id) {
            r.phase = RecvPhase::Done(result);
        }
    }

    /// Completes a send; a detached one is freed right away.
    pub fn finish_send(&mut self, id: ReqId, status: RawStatus) {
        if let Ok(Req::Send(s)) = self.reqs.get_mut(id) {
            if s.detached.is_some() {
                self.reqs.remove(id);
            } else {
                s.phase = SendPhase::Done(status);
            }
        }
    }

    /// A buffer for an unexpected eager payload (reused, so steady traffic does not allocate).
    pub fn buffer(&mut self, len: usize) -> Vec<u8> {
        match self.pool.pop() {
            Some(mut v) => {
                v.clear();
                v.reserve(len);
                v
            }
            None => Vec::with_capacity(len.max(self.buffer_floor)),
        }
    }

    pub fn recycle(&mut self, v: Vec<u8>) {
        if self.pool.len() < POOL_KEEP {
            self.pool.push(v);
        }
    }

    /// Why no message matching `spec` can arrive any more, if that is certain (`blocked`: the
    /// caller is this rank's only thread and waits, so it cannot send to itself meanwhile).
    pub fn unreachable(&self, me: usize, spec: MatchSpec, blocked: bool) -> Option<Error> {
        matching::unreachable(&spec, &Peers { st: self, me, blocked })
    }
}

/// The matcher's view of the peers: what their goodbyes and the abort record say.
struct Peers<'a> {
    st: &'a State,
    me: usize,
    blocked: bool,
}

impl PeerView for Peers<'_> {
    fn me(&self) -> usize {
        self.me
    }

    fn size(&self) -> usize {
        self.st.peers.len()
    }

    fn abort_error(&self) -> Option<Error> {
        self.st.abort_error()
    }

    fn gone(&self, rank: usize) -> Option<Error> {
        (self.st.peers[rank] == PeerState::Exited).then_some(Error::PeerExited { rank })
    }

    /// A synchronous or rendezvous-sized self-send still queued counts as one on the way.
    fn self_silent(&self) -> bool {
        let me = self.me;
        self.blocked
            && !self.st.matcher.unexpected().any(|(env, body)| env.source == me && matches!(body, Body::SelfSync(_)))
    }
}

/// The wire form of a request handle (index and generation), so stale ids are recognized.
pub(super) fn wire_id(id: ReqId) -> u64 {
    (u64::from(id.generation) << 32) | u64::from(id.index)
}

pub(super) fn from_wire(id: u64) -> ReqId {
    ReqId { index: id as u32, generation: (id >> 32) as u32 }
}
