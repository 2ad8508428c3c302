//! One rank's side of the shm device: request table, matching (the board's lock-free fast path,
//! then the rank's own [`Matcher`]), progress.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::Arc;

use super::ShmWorld;
use super::board::{self, Claim, Completion};
use super::copy;
use super::inbox::{IncomingRings, OutgoingRings, RankMap};
use super::record::{self, SendRecord};
use super::ring::{Header, INLINE_BYTES, Kind, Ring, SlotView, SpillBuf};
use crate::device::matching::{self, Envelope, Matcher, PeerView};
use crate::device::slab::Slab;
use crate::device::wait::{Backoff, Pause};
use crate::device::{
    ContextId, Device, MatchSpec, MessageId, RawStatus, ReqId, SendMode, Source, Started, TAG_UB, receive_result,
};
use crate::error::{Error, Result};

/// Records kept for reuse; beyond this, finished records are freed.
const RECORD_POOL: usize = 256;
/// Pooled records a send looks at for one it can reuse (the newest first).
const RECORD_SCAN: usize = 4;
/// Records in the pool from the start, so that a receiver still holding the record of the
/// previous send does not make the next one allocate.
const PRIMED_RECORDS: usize = 2;
/// Room reserved for spare spill buffers, so the pool's vector does not grow on the hot path.
/// The buffers themselves come from traffic (a spill taken by an unexpected message is
/// returned when it is received): pre-filling 8 × the eager limit per rank cost 32 MB at 512
/// ranks.
const SPARE_CAPACITY: usize = 8;
/// Spares allocated when the rank first receives a spilled message, so the first unexpected
/// one later (its timing is the scheduler's) finds a replacement instead of making the
/// sender allocate in the steady state.
const PRIMED_SPARES: usize = 2;
/// Smallest message a sender copies straight into a posted receive (receiver-first) instead
/// of sending it through the ring: from here the spill buffer's second copy costs more than
/// the sender's look at the receiver's board (a cache line it does not own).
const DIRECT_MIN: usize = 1024;
/// Polls a blocking receive makes before posting itself (about a microsecond).
const UNPOSTED_POLLS: u32 = 64;

/// What to send, as given to `isend`.
#[derive(Clone, Copy)]
struct OutMsg {
    dest: usize,
    tag: i32,
    context: ContextId,
    buf: *const u8,
    len: usize,
    mode: SendMode,
}

struct SendReq {
    msg: OutMsg,
    phase: SendPhase,
}

enum SendPhase {
    /// Waiting for ring space (in `pending[dest]`).
    Queued,
    /// Buffer reusable; nothing more to wait for.
    Done,
    /// Completion depends on the receiver (rendezvous or synchronous).
    Remote(Arc<SendRecord>),
    Cancelled,
}

struct RecvReq {
    spec: MatchSpec,
    buf: *mut u8,
    capacity: usize,
    phase: RecvPhase,
}

enum RecvPhase {
    /// Published on this rank's board.
    Board {
        index: usize,
        generation: u64,
    },
    /// Posted in the rank's matcher only (board overflow).
    Private,
    Done(Result<RawStatus>),
}

enum Req {
    Send(SendReq),
    Recv(RecvReq),
}

/// The payload descriptor of a message waiting in the matcher's unexpected queue.
struct Payload {
    body: Body,
    /// The sender's record, for rendezvous and synchronous messages.
    record: Option<Arc<SendRecord>>,
}

impl Payload {
    /// The sender cancelled the message: it no longer exists.
    fn withdrawn(&self) -> bool {
        self.record.as_ref().is_some_and(|r| r.state() == record::CANCELLED)
    }
}

enum Body {
    Inline([u8; INLINE_BYTES]),
    Spilled(SpillBuf),
    Rts,
}

/// A message taken off matching by a matched probe, until it is received or discarded. The
/// sender's side is settled at probe time (matched: a cancel can no longer win), so the data is
/// either here or at a claimed sender buffer.
enum Held {
    /// Eager bytes (inline or in a spill buffer).
    Bytes(Body),
    /// A rendezvous from this rank itself, copied at probe time.
    Copied(Box<[u8]>),
    /// A claimed rendezvous: the sender waits (its record CLAIMED) until the copy is done.
    Claimed { src: *const u8, record: Arc<SendRecord> },
}

/// A message about to be matched: where its bytes are, and the sender's record if the receiver
/// has to complete one.
struct Incoming<'a> {
    env: Envelope,
    /// Eager bytes (`None` for a rendezvous).
    bytes: Option<&'a [u8]>,
    record: Option<&'a Arc<SendRecord>>,
}

/// Where a fill went.
enum Filled {
    /// Delivered; the message length (may exceed what fit).
    Delivered(usize),
    /// The sender cancelled it; the message no longer exists.
    Vanished,
}

struct State {
    reqs: Slab<Req>,
    /// Receives posted while the board overflowed (all younger than the board's) and messages
    /// that arrived before their receive.
    matcher: Matcher<Payload>,
    /// Sends waiting for ring space, per destination (only those ever queued for), in order.
    pending: RankMap<VecDeque<ReqId>>,
    pending_count: usize,
    spare_spills: Vec<SpillBuf>,
    /// Whether `PRIMED_SPARES` were added (once, at the first spilled message received).
    spares_primed: bool,
    records: Vec<Arc<SendRecord>>,
    /// Released rendezvous sends still owed to a receiver.
    detached: Vec<Arc<SendRecord>>,
    /// Messages taken by a matched probe.
    messages: Slab<(Envelope, Held)>,
    /// The request posted in each board entry, so that a message this rank matches to its own
    /// entry completes the request at once, without the entry's DONE round trip.
    board_reqs: [Option<ReqId>; board::ENTRIES],
}

/// The shm [`Device`] of one rank. Not `Sync`: it belongs to its rank's thread.
pub(crate) struct ShmEndpoint {
    world: Arc<ShmWorld>,
    rank: usize,
    finalized: Cell<bool>,
    /// Set while the rank is inside `wait_until`: it cannot start new sends meanwhile, which
    /// makes some waits provably hopeless (see `doomed`).
    blocked: Cell<bool>,
    st: RefCell<State>,
    /// The rings this rank sends on, by destination (apart from `st`: a send holds its ring
    /// while it updates the state).
    outgoing: OutgoingRings,
    /// The rings this rank receives on.
    incoming: RefCell<IncomingRings>,
}

impl State {
    /// Takes the queued send `id` to `dest` off its queue.
    fn unqueue(&mut self, dest: usize, id: ReqId) {
        let Some(q) = self.pending.get_mut(&dest) else { return };
        if let Some(pos) = q.iter().position(|&x| x == id) {
            q.remove(pos);
            self.pending_count -= 1;
        }
    }
}

fn copy_into(dst: *mut u8, capacity: usize, src: &[u8]) {
    let n = src.len().min(capacity);
    if n > 0 {
        // SAFETY: the receive buffer contract (Device::irecv / board entry) makes `dst` valid for
        // `capacity` bytes and exclusively ours while the receive is claimed; `src` is a distinct
        // live slice (sender buffer, ring slot or pooled buffer).
        unsafe { copy::copy(dst, src.as_ptr(), n, n) };
    }
}

impl ShmEndpoint {
    /// Receiver: copies a claimed rendezvous payload (`len` bytes at `src`) into a receive
    /// buffer, sharing the copy with the sender when it is large, then completes the record.
    fn copy_rendezvous(
        &self,
        source: usize,
        rec: &SendRecord,
        src: *const u8,
        len: usize,
        dst: *mut u8,
        capacity: usize,
    ) {
        let n = len.min(capacity);
        if n > 0 {
            let sender = &self.world.ranks[source].parker;
            // SAFETY: a CLAIMED record points at `len` readable bytes (the sender's buffer, kept
            // alive until DONE by the send contract, or the record's own copy); `dst` as in
            // `copy_into`.
            unsafe { rec.copy_claimed(src, dst, n, || sender.notify()) };
        }
        rec.complete();
        self.world.ranks[source].parker.notify();
    }
}

impl ShmEndpoint {
    pub(super) fn new(world: Arc<ShmWorld>, rank: usize) -> Self {
        // Pre-sized so typical traffic never grows them on the hot path.
        let st = State {
            reqs: Slab::with_capacity(128),
            matcher: Matcher::with_capacity(16, 128),
            pending: RankMap::default(),
            // Spares replace spill buffers taken by unexpected messages.
            spare_spills: Vec::with_capacity(SPARE_CAPACITY),
            spares_primed: false,
            records: {
                let mut pool = Vec::with_capacity(RECORD_POOL);
                pool.extend((0..PRIMED_RECORDS).map(|_| SendRecord::new()));
                pool
            },
            detached: Vec::new(),
            messages: Slab::default(),
            pending_count: 0,
            board_reqs: [None; board::ENTRIES],
        };
        ShmEndpoint {
            world,
            rank,
            finalized: Cell::new(false),
            blocked: Cell::new(false),
            st: RefCell::new(st),
            outgoing: OutgoingRings::default(),
            incoming: RefCell::default(),
        }
    }

    /// Marks the rank as inside a wait made elsewhere (a hybrid rank's), so requests that can
    /// no longer complete fail as in this endpoint's own waits; returns the previous value.
    pub(crate) fn set_blocked(&self, blocked: bool) -> bool {
        self.blocked.replace(blocked)
    }

    /// Whether the rank has sends waiting for ring space (nobody signals space: don't park).
    pub(crate) fn has_queued_sends(&self) -> bool {
        self.st.try_borrow().is_ok_and(|st| st.pending_count > 0)
    }

    /// The job's shared state (the one-sided windows reach peers' parts through it).
    pub(crate) fn world(&self) -> &Arc<ShmWorld> {
        &self.world
    }

    /// Releases every outstanding request and discards every probed message still held (the
    /// endpoint goes away), so no peer waits for this rank or points at its memory.
    fn release_all(&self) {
        let st = &mut *self.st.borrow_mut();
        let mut cursor = 0;
        while let Some(id) = st.reqs.next_live(&mut cursor) {
            self.release_in(st, id);
        }
        let mut cursor = 0;
        while let Some(id) = st.messages.next_live(&mut cursor) {
            let sink = std::ptr::NonNull::<u8>::dangling().as_ptr();
            let _ = self.receive_held(st, MessageId(id), sink, 0);
        }
    }

    /// Takes the first queued message matching `spec` for a matched probe: its sender's record
    /// is acknowledged (synchronous eager) or claimed (rendezvous) now, as a receive matching it
    /// would, so the message can no longer be cancelled or seen by another receive.
    fn take_message(&self, st: &mut State, spec: MatchSpec) -> Option<(MessageId, RawStatus)> {
        while let Some((env, payload)) = st.matcher.take_unexpected(&spec) {
            let held = match (payload.body, payload.record) {
                (body, None) => Held::Bytes(body),
                (Body::Rts, Some(record)) => match record.claim() {
                    // From this rank itself: copied now, because only this thread could end the
                    // claim, and it may first release the send (which waits for the claim).
                    Some(src) if env.source == self.rank => {
                        // SAFETY: a CLAIMED record's data pointer is valid for `len` bytes.
                        let copy = unsafe { std::slice::from_raw_parts(src, env.len) }.into();
                        record.complete();
                        Held::Copied(copy)
                    }
                    Some(src) => Held::Claimed { src, record },
                    None => continue, // cancelled by its sender: it no longer exists
                },
                (body, Some(record)) => {
                    if !record.acknowledge() {
                        if let Body::Spilled(b) = body {
                            st.spare_spills.push(b);
                        }
                        continue;
                    }
                    self.world.ranks[env.source].parker.notify();
                    Held::Bytes(body)
                }
            };
            return Some((MessageId(st.messages.insert((env, held))), env.status()));
        }
        None
    }

    /// Receives a held message into `dst` (or, with `capacity` 0, drops it).
    fn receive_held(&self, st: &mut State, msg: MessageId, dst: *mut u8, capacity: usize) -> Result<RawStatus> {
        let Some((env, held)) = st.messages.remove(msg.0) else {
            return Err(Error::InvalidArgument("mrecv: the message was already received".into()));
        };
        match held {
            Held::Bytes(Body::Inline(b)) => copy_into(dst, capacity, &b[..env.len]),
            Held::Bytes(Body::Spilled(b)) => {
                copy_into(dst, capacity, &b[..env.len]);
                st.spare_spills.push(b);
            }
            Held::Copied(b) => copy_into(dst, capacity, &b),
            Held::Bytes(Body::Rts) => unreachable!("a rendezvous message is held claimed or copied"),
            Held::Claimed { src, record } => self.copy_rendezvous(env.source, &record, src, env.len, dst, capacity),
        }
        receive_result(env.source, env.tag, env.len, capacity)
    }

    fn check_live(&self) -> Result<()> {
        if self.finalized.get() { Err(Error::Finalized("shm endpoint")) } else { Ok(()) }
    }

    // ---------------------------------------------------------------- receiving side

    /// Copies a message into a receive buffer, completing the sender's record if it has one.
    fn fill(&self, msg: &Incoming<'_>, dst: *mut u8, capacity: usize) -> Filled {
        match (msg.bytes, msg.record) {
            (Some(bytes), None) => copy_into(dst, capacity, bytes),
            (Some(bytes), Some(rec)) => {
                if !rec.acknowledge() {
                    return Filled::Vanished;
                }
                copy_into(dst, capacity, bytes);
                self.world.ranks[msg.env.source].parker.notify();
            }
            (None, Some(rec)) => {
                let Some(src) = rec.claim() else { return Filled::Vanished };
                self.copy_rendezvous(msg.env.source, rec, src, msg.env.len, dst, capacity);
            }
            (None, None) => unreachable!("rendezvous without a record"),
        }
        Filled::Delivered(msg.env.len)
    }

    /// Matches an arriving message against posted receives (board, then the matcher's, then the
    /// `candidate` being posted right now). `true` if it was consumed by a receive; `Some(result)`
    /// in the second field if the candidate got it.
    fn deliver_posted(
        &self,
        st: &mut State,
        msg: &Incoming<'_>,
        candidate: Option<(MatchSpec, *mut u8, usize)>,
    ) -> (bool, Option<Result<RawStatus>>) {
        let Envelope { source, context, tag, .. } = msg.env;
        let board = &self.world.ranks[self.rank].board;
        if let Some(claim) = board.claim_own(context, source, tag) {
            return match self.fill(msg, claim.buf, claim.capacity) {
                Filled::Delivered(len) => {
                    // Our own entry: the request completes here and the entry is free at once
                    // (claimers skip past an owner's claim only once it is no longer POSTED).
                    board.free(claim.index, claim.generation);
                    let id = st.board_reqs[claim.index].take().expect("a posted board entry has its request");
                    let Ok(Req::Recv(r)) = st.reqs.get_mut(id) else { unreachable!("board receives are live") };
                    debug_assert!(
                        matches!(r.phase, RecvPhase::Board { index, generation } if index == claim.index && generation == claim.generation)
                    );
                    r.phase = RecvPhase::Done(receive_result(source, tag, len, r.capacity));
                    (true, None)
                }
                Filled::Vanished => {
                    board.unclaim(&claim);
                    (true, None)
                }
            };
        }
        if let Some(found) = st.matcher.find_posted(&msg.env) {
            let Ok(Req::Recv(r)) = st.reqs.get_mut(found.id) else { unreachable!("posted receives are live") };
            // A message its sender cancelled meanwhile vanishes; the receive stays posted.
            if let Filled::Delivered(len) = self.fill(msg, r.buf, r.capacity) {
                r.phase = RecvPhase::Done(receive_result(source, tag, len, r.capacity));
                st.matcher.take_found(found);
                if !st.matcher.has_posted() {
                    board.end_overflow();
                }
            }
            return (true, None);
        }
        if let Some((spec, buf, capacity)) = candidate
            && spec.matches(context, source, tag)
        {
            return match self.fill(msg, buf, capacity) {
                Filled::Delivered(len) => (true, Some(receive_result(source, tag, len, capacity))),
                Filled::Vanished => (true, None),
            };
        }
        (false, None)
    }

    /// Takes one ring message: delivers it to a posted receive or queues it as unexpected.
    fn take_from_ring(
        &self,
        st: &mut State,
        source: usize,
        view: &mut SlotView<'_>,
        candidate: Option<(MatchSpec, *mut u8, usize)>,
    ) -> Option<Result<RawStatus>> {
        let h = view.header;
        let len = h.len as usize;
        // SAFETY: the message owns one `Arc` reference from `SendRecord::into_message`; we take
        // it back exactly once, here, before the slot is popped.
        let record = h.record.map(|r| unsafe { SendRecord::from_message(r) });
        if record.as_ref().is_some_and(|rec| rec.state() == record::CANCELLED) {
            return None;
        }
        if len > INLINE_BYTES && h.kind == Kind::Eager && !st.spares_primed {
            st.spares_primed = true;
            let limit = self.world.eager_limit;
            st.spare_spills.extend((0..PRIMED_SPARES).map(|_| SpillBuf::new(limit)));
        }
        let env = Envelope { source, context: h.context, tag: h.tag, len };
        let msg = Incoming { env, bytes: (h.kind == Kind::Eager).then(|| view.payload()), record: record.as_ref() };
        let (consumed, got) = self.deliver_posted(st, &msg, candidate);
        if consumed {
            return got;
        }
        let body = match h.kind {
            Kind::Rts => Body::Rts,
            Kind::Eager if len <= INLINE_BYTES => {
                let mut inline = [0; INLINE_BYTES];
                inline[..len].copy_from_slice(view.payload());
                Body::Inline(inline)
            }
            Kind::Eager if view.is_continued() => {
                // The ring's lines are reused at once: queue a copy in a spare spill buffer.
                let limit = self.world.eager_limit;
                let mut spill = st.spare_spills.pop().filter(|b| b.len() >= len);
                let buf = spill.get_or_insert_with(|| SpillBuf::new(limit.max(len)));
                buf[..len].copy_from_slice(view.payload());
                Body::Spilled(spill.expect("just filled"))
            }
            Kind::Eager => Body::Spilled(view.take_spill(st.spare_spills.pop()).expect("spilled payload")),
        };
        st.matcher.push_unexpected(env, Payload { body, record });
        None
    }

    /// Learns of rings opened to this rank since the last call (one atomic load if none).
    fn refresh_incoming(&self) -> bool {
        self.incoming.borrow_mut().refresh(&self.world.ranks[self.rank].inbox)
    }

    /// Drains the incoming ring from `source` (if it has one), stopping early if the candidate
    /// receive matched.
    fn drain_from(
        &self,
        st: &mut State,
        source: usize,
        candidate: Option<(MatchSpec, *mut u8, usize)>,
    ) -> Option<Result<RawStatus>> {
        if let Some(ring) = self.incoming.borrow().from(source) {
            return self.drain_ring(st, source, ring, candidate);
        }
        if self.refresh_incoming() {
            let incoming = self.incoming.borrow();
            return self.drain_ring(st, source, incoming.from(source)?, candidate);
        }
        None
    }

    /// Drains every incoming ring in turn, stopping early if the candidate receive matched.
    fn drain_all(&self, st: &mut State, candidate: Option<(MatchSpec, *mut u8, usize)>) -> Option<Result<RawStatus>> {
        self.refresh_incoming();
        self.incoming.borrow().iter().find_map(|(source, ring)| self.drain_ring(st, source, ring, candidate))
    }

    /// Drains `ring`, the incoming ring from `source`, stopping early if the candidate receive
    /// matched.
    fn drain_ring(
        &self,
        st: &mut State,
        source: usize,
        ring: &Ring,
        candidate: Option<(MatchSpec, *mut u8, usize)>,
    ) -> Option<Result<RawStatus>> {
        // SAFETY: this endpoint is the only consumer of rings addressed to its rank (one endpoint
        // per rank, !Sync), and the view is dropped before `pop`.
        while let Some(mut view) = unsafe { ring.peek() } {
            let got = self.take_from_ring(st, source, &mut view, candidate);
            // SAFETY: as above.
            unsafe { ring.pop() };
            if got.is_some() {
                return got;
            }
        }
        None
    }

    /// One progress round: start queued sends, drain every incoming ring, reap detached sends.
    fn progress(&self, st: &mut State) {
        if st.pending_count > 0 {
            self.flush_pending(st);
        }
        self.drain_all(st, None);
        if !st.detached.is_empty() {
            st.detached.retain(|r| matches!(r.state(), record::PENDING | record::CLAIMED));
        }
    }

    /// Completes a new receive from the unexpected queue if a match is there.
    fn match_unexpected(
        &self,
        st: &mut State,
        spec: MatchSpec,
        buf: *mut u8,
        capacity: usize,
    ) -> Option<Result<RawStatus>> {
        // A message its sender cancelled meanwhile vanishes; the next match is tried.
        while let Some((env, payload)) = st.matcher.take_unexpected(&spec) {
            let bytes = match &payload.body {
                Body::Inline(b) => Some(&b[..env.len]),
                Body::Spilled(b) => Some(&b[..env.len]),
                Body::Rts => None,
            };
            let filled = self.fill(&Incoming { env, bytes, record: payload.record.as_ref() }, buf, capacity);
            if let Body::Spilled(b) = payload.body {
                st.spare_spills.push(b);
            }
            if let Filled::Delivered(len) = filled {
                return Some(receive_result(env.source, env.tag, len, capacity));
            }
        }
        None
    }

    fn check_spec(&self, spec: MatchSpec) -> Result<()> {
        self.check_live()?;
        if let Source::Rank(r) = spec.source
            && r >= self.world.np
        {
            return Err(Error::RankOutOfRange { rank: r, size: self.world.np });
        }
        if spec.tag < crate::device::ANY_TAG {
            return Err(Error::TagOutOfRange { tag: spec.tag, max: TAG_UB });
        }
        Ok(())
    }

    /// Completes a receive at once if its message is already here (queued or in a ring).
    fn receive_now(&self, st: &mut State, spec: MatchSpec, buf: *mut u8, capacity: usize) -> Option<Result<RawStatus>> {
        self.match_unexpected(st, spec, buf, capacity).or_else(|| {
            let candidate = Some((spec, buf, capacity));
            match spec.source {
                Source::Rank(src) => self.drain_from(st, src, candidate),
                // MPI orders messages per sender only: taking the rings in first-use order
                // rather than rank order is one of the arrival orders it allows.
                Source::Any => self.drain_all(st, candidate),
            }
        })
    }

    /// The first queued message matching `spec`, dropping ones their senders cancelled.
    fn first_unexpected(st: &mut State, spec: MatchSpec) -> Option<RawStatus> {
        st.matcher.retain_unexpected(|_, payload| !payload.withdrawn());
        st.matcher.peek(&spec).map(Envelope::status)
    }

    // ---------------------------------------------------------------- sending side

    /// A pooled record, re-armed for `data`. A recycled record whose receiver has not yet dropped
    /// its reference stays pooled for a later send rather than being freed, so a receiver running
    /// late (an oversubscribed core) does not make the steady state allocate.
    fn get_record(&self, st: &mut State, data: *const u8) -> Arc<SendRecord> {
        let len = st.records.len();
        for i in (len.saturating_sub(RECORD_SCAN)..len).rev() {
            if SendRecord::reset(&mut st.records[i], data) {
                return st.records.swap_remove(i);
            }
        }
        let mut rec = SendRecord::new();
        SendRecord::reset(&mut rec, data);
        rec
    }

    fn recycle(&self, st: &mut State, rec: Arc<SendRecord>) {
        if st.records.len() < RECORD_POOL {
            st.records.push(rec);
        }
    }

    /// Hands a send to the transport: its phase afterwards, or `None` if the ring is full.
    fn start_send(&self, st: &mut State, m: &OutMsg) -> Option<SendPhase> {
        let OutMsg { dest, tag, context, buf, len, mode } = *m;
        let peer = &self.world.ranks[dest];
        let ring = self.outgoing.ring_to(&self.world, self.rank, dest);
        // Receiver-first: a posted receive takes the data in one copy, where the ring would copy
        // twice (into a spill buffer and out of it). Only when nothing of ours is still unmatched
        // in the ring, so an earlier message cannot be overtaken; only from `DIRECT_MIN` (below,
        // the look at the peer's board costs more than the copy it saves), and only below the
        // size whose rendezvous copy both ranks share (there the sender would copy alone while
        // the receiver waits).
        // SAFETY: this endpoint is the only producer of rings from its rank.
        if (DIRECT_MIN..record::SHARED_MIN).contains(&len)
            && unsafe { ring.producer_idle() }
            && let Some(claim) = peer.board.claim_remote(context, self.rank, tag)
        {
            self.copy_to_claim(&claim, buf, len);
            peer.board.complete(&claim, Completion { source: self.rank, tag, bytes: len });
            peer.parker.notify();
            return Some(SendPhase::Done);
        }
        let phase = if len > self.world.eager_limit {
            let rec = self.get_record(st, buf);
            let header = Header {
                len: len as u64,
                tag,
                context,
                kind: Kind::Rts,
                sync: false,
                record: Some(SendRecord::into_message(Arc::clone(&rec))),
            };
            // SAFETY: only producer of this ring (see above).
            if !unsafe { ring.push(header, &[], 0) } {
                // SAFETY: the reference was never published; take it back once.
                drop(header.record.map(|r| unsafe { SendRecord::from_message(r) }));
                self.recycle(st, rec);
                return None;
            }
            SendPhase::Remote(rec)
        } else {
            // SAFETY: the send contract makes `buf` readable for `len` bytes.
            let payload: &[u8] = if len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(buf, len) } };
            let rec = (mode == SendMode::Synchronous).then(|| self.get_record(st, std::ptr::null()));
            let header = Header {
                len: len as u64,
                tag,
                context,
                kind: Kind::Eager,
                sync: rec.is_some(),
                record: rec.as_ref().map(|r| SendRecord::into_message(Arc::clone(r))),
            };
            // SAFETY: only producer of this ring.
            if !unsafe { ring.push(header, payload, self.world.eager_limit) } {
                if let Some(rec) = rec {
                    // SAFETY: never published; take it back once.
                    drop(header.record.map(|r| unsafe { SendRecord::from_message(r) }));
                    self.recycle(st, rec);
                }
                return None;
            }
            rec.map_or(SendPhase::Done, SendPhase::Remote)
        };
        peer.parker.notify();
        Some(phase)
    }

    fn copy_to_claim(&self, claim: &Claim, buf: *const u8, len: usize) {
        if len > 0 {
            // SAFETY: send contract: `buf` readable for `len` bytes.
            let src = unsafe { std::slice::from_raw_parts(buf, len) };
            copy_into(claim.buf, claim.capacity, src);
        }
    }

    fn flush_pending(&self, st: &mut State) {
        // Taken out while sends start (they need the rest of the state); an empty map does not
        // allocate.
        let mut pending = std::mem::take(&mut st.pending);
        for queue in pending.values_mut() {
            while let Some(&id) = queue.front() {
                let Ok(Req::Send(s)) = st.reqs.get_mut(id) else { unreachable!("queued send is live") };
                let msg = s.msg;
                let Some(phase) = self.start_send(st, &msg) else { break };
                if let Ok(Req::Send(s)) = st.reqs.get_mut(id) {
                    s.phase = phase;
                }
                queue.pop_front();
                st.pending_count -= 1;
            }
        }
        st.pending = pending;
    }

    // ---------------------------------------------------------------- completion

    /// Completes `id` if possible; `Ok(None)` while it is still in flight.
    fn try_complete(&self, st: &mut State, id: ReqId) -> Result<Option<RawStatus>> {
        let rank = self.rank;
        let done = match st.reqs.get_mut(id)? {
            Req::Send(s) => {
                let status = |cancelled| RawStatus { source: rank, tag: s.msg.tag, bytes: s.msg.len, cancelled };
                match &s.phase {
                    SendPhase::Queued => None,
                    SendPhase::Done => Some(Ok(status(false))),
                    SendPhase::Cancelled => Some(Ok(status(true))),
                    SendPhase::Remote(rec) => match rec.state() {
                        record::DONE => Some(Ok(status(false))),
                        record::CANCELLED => Some(Ok(status(true))),
                        // The receiver is copying: take pieces of a shared copy (our buffer is
                        // valid while the send is live). Only a copy that large is shared, and
                        // smaller ones skip the look at the pieces (a second line of the record).
                        record::CLAIMED if s.msg.len >= record::SHARED_MIN => {
                            rec.help();
                            None
                        }
                        _ => None,
                    },
                }
            }
            Req::Recv(r) => match &mut r.phase {
                RecvPhase::Done(result) => {
                    Some(std::mem::replace(result, Ok(RawStatus { source: 0, tag: 0, bytes: 0, cancelled: true })))
                }
                RecvPhase::Private => None,
                RecvPhase::Board { index, generation } => {
                    let board = &self.world.ranks[rank].board;
                    board.poll(*index, *generation).map(|c| {
                        board.free(*index, *generation);
                        receive_result(c.source, c.tag, c.bytes, r.capacity)
                    })
                }
            },
        };
        match done {
            None => Ok(None),
            Some(result) => {
                if let Some(Req::Send(SendReq { phase: SendPhase::Remote(rec), .. })) = st.reqs.remove(id) {
                    self.recycle(st, rec);
                }
                result.map(Some)
            }
        }
    }

    /// Why `id` can never complete, if that is already certain: the job was aborted, the only
    /// rank that could complete it is gone, or (while this rank is blocked and so cannot start
    /// new sends) it depends on this rank itself.
    fn doomed(&self, st: &State, id: ReqId) -> Option<Error> {
        let send = match st.reqs.get(id) {
            // The matcher's verdict covers the abort too (checked once per poll of a wait).
            Some(Req::Recv(r)) => return self.unreachable_source(st, r.spec),
            Some(Req::Send(s)) => s,
            None => return self.world.abort_error(),
        };
        if let Some(e) = self.world.abort_error() {
            return Some(e);
        }
        let me = self.rank;
        if send.msg.dest == me {
            (self.blocked.get() && !matches!(send.phase, SendPhase::Queued))
                .then_some(Error::Deadlock { rank: me, reason: "a send to itself that no posted receive matches" })
        } else {
            self.world.gone(send.msg.dest)
        }
    }

    /// Why no message matching `spec` can arrive any more (receives and probes), if certain.
    fn unreachable_source(&self, st: &State, spec: MatchSpec) -> Option<Error> {
        // Blocked with no queued self-sends left: nothing from this rank can still arrive.
        let self_silent = self.blocked.get() && st.pending.get(&self.rank).is_none_or(VecDeque::is_empty);
        matching::unreachable(&spec, &Peers { world: &self.world, me: self.rank, self_silent })
    }

    /// Abandons a request (see `Device::release`).
    fn release_in(&self, st: &mut State, id: ReqId) {
        let Some(req) = st.reqs.remove(id) else { return };
        match req {
            Req::Send(s) => match s.phase {
                SendPhase::Queued => st.unqueue(s.msg.dest, id),
                SendPhase::Done | SendPhase::Cancelled => {}
                SendPhase::Remote(rec) => {
                    // SAFETY: the request was live, so its buffer is still valid for `len` bytes.
                    let need_wait = s.msg.len > self.world.eager_limit && !unsafe { rec.detach(s.msg.len) };
                    if need_wait {
                        // Claimed by the receiver, which is copying right now: help, then a bounded
                        // wait.
                        while rec.state() == record::CLAIMED {
                            rec.help();
                            std::thread::yield_now();
                        }
                    }
                    if matches!(rec.state(), record::PENDING | record::CLAIMED) {
                        st.detached.push(rec);
                    }
                }
            },
            Req::Recv(r) => match r.phase {
                RecvPhase::Done(_) => {}
                RecvPhase::Private => {
                    st.matcher.cancel_posted(id);
                    if !st.matcher.has_posted() {
                        self.world.ranks[self.rank].board.end_overflow();
                    }
                }
                RecvPhase::Board { index, generation } => {
                    let board = &self.world.ranks[self.rank].board;
                    if !board.cancel(index, generation) {
                        // A sender claimed it and is copying into our buffer: wait it out.
                        while board.poll(index, generation).is_none() {
                            std::thread::yield_now();
                        }
                        board.free(index, generation);
                    }
                }
            },
        }
    }
}

/// The matcher's view of the peers' liveness.
struct Peers<'a> {
    world: &'a ShmWorld,
    me: usize,
    self_silent: bool,
}

impl PeerView for Peers<'_> {
    fn me(&self) -> usize {
        self.me
    }

    fn size(&self) -> usize {
        self.world.np
    }

    fn abort_error(&self) -> Option<Error> {
        self.world.abort_error()
    }

    fn gone(&self, rank: usize) -> Option<Error> {
        self.world.gone(rank)
    }

    fn self_silent(&self) -> bool {
        self.self_silent
    }
}

impl Device for ShmEndpoint {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.world.np
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
        if dest >= self.world.np {
            return Err(Error::RankOutOfRange { rank: dest, size: self.world.np });
        }
        if tag < 0 {
            return Err(Error::TagOutOfRange { tag, max: TAG_UB });
        }
        let st = &mut *self.st.borrow_mut();
        let msg = OutMsg { dest, tag, context, buf, len, mode };
        let queue_empty = st.pending_count == 0 || st.pending.get(&dest).is_none_or(VecDeque::is_empty);
        let phase = if queue_empty { self.start_send(st, &msg) } else { None };
        let phase = match phase {
            Some(SendPhase::Done) => {
                return Ok(Started::Complete(Ok(RawStatus::sent(self.rank, tag, len))));
            }
            Some(phase) => phase,
            None => SendPhase::Queued,
        };
        let queued = matches!(phase, SendPhase::Queued);
        let id = st.reqs.insert(Req::Send(SendReq { msg, phase }));
        if queued {
            st.pending.entry(dest).or_default().push_back(id);
            st.pending_count += 1;
        }
        Ok(Started::Pending(id))
    }

    unsafe fn irecv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Result<Started> {
        self.check_spec(spec)?;
        let st = &mut *self.st.borrow_mut();
        if let Some(result) = self.receive_now(st, spec, buf, capacity) {
            return Ok(Started::Complete(result));
        }
        let phase = match self.world.ranks[self.rank].board.post(spec, buf, capacity) {
            Some((index, generation)) => RecvPhase::Board { index, generation },
            None => RecvPhase::Private,
        };
        let entry = match phase {
            RecvPhase::Board { index, .. } => Some(index),
            _ => None,
        };
        let id = st.reqs.insert(Req::Recv(RecvReq { spec, buf, capacity, phase }));
        match entry {
            Some(index) => st.board_reqs[index] = Some(id),
            None => st.matcher.push_posted(spec, id),
        }
        Ok(Started::Pending(id))
    }

    unsafe fn recv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Result<RawStatus> {
        self.check_spec(spec)?;
        // A blocking receive polls briefly before publishing itself: a message arriving within
        // that window skips the request entry and the board handshake (the ping-pong case).
        // Not being posted yet is the same as posting a moment later.
        for _ in 0..UNPOSTED_POLLS {
            if let Some(result) = self.receive_now(&mut self.st.borrow_mut(), spec, buf, capacity) {
                return result;
            }
            std::hint::spin_loop();
        }
        // SAFETY: forwarded caller contract (buffer valid and exclusive until we return).
        let started = unsafe { self.irecv(buf, capacity, spec)? };
        self.complete(started)
    }

    fn receives_unposted(&self) -> bool {
        true
    }

    unsafe fn try_recv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Option<Result<RawStatus>> {
        if let Err(e) = self.check_spec(spec) {
            return Some(Err(e));
        }
        let st = &mut *self.st.borrow_mut();
        if let Some(received) = self.receive_now(st, spec, buf, capacity) {
            return Some(received);
        }
        // As `test` does for a posted receive: start queued sends (a peer may be waiting for
        // them before it sends), and give up once the message can no longer come.
        self.progress(st);
        let hopeless = self.unreachable_source(st, spec);
        let received = self.receive_now(st, spec, buf, capacity);
        match hopeless {
            // The peer's messages sent before it exited are visible now (Acquire on its state).
            Some(err) => Some(received.unwrap_or(Err(err))),
            None => received,
        }
    }

    fn iprobe(&self, spec: MatchSpec) -> Result<Option<RawStatus>> {
        self.check_live()?;
        let st = &mut *self.st.borrow_mut();
        self.progress(st);
        let found = Self::first_unexpected(st, spec);
        if found.is_some() {
            return Ok(found);
        }
        // A non-blocking probe answers "no message" even if none can come any more; a blocked
        // one (`probe`) fails instead of waiting forever.
        let hopeless = || self.blocked.get().then(|| self.unreachable_source(st, spec)).flatten();
        if let Some(err) = self.world.abort_error().or_else(hopeless) {
            // Messages sent before the peer exited are visible after one more round.
            self.progress(st);
            return Self::first_unexpected(st, spec).map(Some).ok_or(err);
        }
        Ok(None)
    }

    fn test(&self, id: ReqId) -> Result<Option<RawStatus>> {
        self.check_live()?;
        let st = &mut *self.st.borrow_mut();
        if let Some(status) = self.try_complete(st, id)? {
            return Ok(Some(status));
        }
        self.progress(st);
        if let Some(status) = self.try_complete(st, id)? {
            return Ok(Some(status));
        }
        if let Some(err) = self.doomed(st, id) {
            // The peer's messages sent before it exited are visible now (Acquire on its state):
            // one last round, then give up on the request, withdrawing a send rather than
            // detaching it.
            self.progress(st);
            if let Some(status) = self.try_complete(st, id)? {
                return Ok(Some(status));
            }
            if let Ok(Req::Send(SendReq { phase: SendPhase::Remote(rec), .. })) = st.reqs.get_mut(id) {
                rec.cancel();
            }
            self.release_in(st, id);
            return Err(err);
        }
        Ok(None)
    }

    fn cancel(&self, id: ReqId) -> Result<()> {
        self.check_live()?;
        let st = &mut *self.st.borrow_mut();
        let board = &self.world.ranks[self.rank].board;
        let cancelled = RawStatus { source: self.rank, tag: 0, bytes: 0, cancelled: true };
        match st.reqs.get_mut(id)? {
            Req::Send(s) => match &s.phase {
                SendPhase::Queued => {
                    let dest = s.msg.dest;
                    s.phase = SendPhase::Cancelled;
                    st.unqueue(dest, id);
                }
                SendPhase::Remote(rec) => {
                    if rec.cancel() {
                        s.phase = SendPhase::Cancelled;
                    }
                }
                SendPhase::Done | SendPhase::Cancelled => {}
            },
            Req::Recv(r) => match r.phase {
                RecvPhase::Board { index, generation } => {
                    if board.cancel(index, generation) {
                        r.phase = RecvPhase::Done(Ok(RawStatus { source: self.rank, ..cancelled }));
                    }
                }
                RecvPhase::Private => {
                    r.phase = RecvPhase::Done(Ok(cancelled));
                    st.matcher.cancel_posted(id);
                    if !st.matcher.has_posted() {
                        board.end_overflow();
                    }
                }
                RecvPhase::Done(_) => {}
            },
        }
        Ok(())
    }

    fn release(&self, id: ReqId) {
        let st = &mut *self.st.borrow_mut();
        self.release_in(st, id);
    }

    fn progress(&self) {
        // Re-entrant calls (from inside a poll that already holds the state) skip this round.
        if let Ok(mut st) = self.st.try_borrow_mut() {
            ShmEndpoint::progress(self, &mut st);
        }
    }

    fn wait_until(&self, poll: &mut dyn FnMut() -> Result<bool>) -> Result<()> {
        struct Unblock<'a>(&'a Cell<bool>, bool);
        impl Drop for Unblock<'_> {
            fn drop(&mut self) {
                self.0.set(self.1);
            }
        }
        let _unblock = Unblock(&self.blocked, self.blocked.replace(true));
        let mut backoff = Backoff::new(self.world.policy);
        loop {
            if poll()? {
                return Ok(());
            }
            if let Some(err) = self.world.abort_error() {
                return Err(err);
            }
            match backoff.next() {
                Pause::Spin => std::hint::spin_loop(),
                Pause::Yield => std::thread::yield_now(),
                // A rank with queued sends waits for ring space, which nobody signals: keep yielding.
                Pause::Park if self.st.borrow().pending_count > 0 => std::thread::yield_now(),
                Pause::Park => {
                    let mut outcome = None;
                    let world = &self.world;
                    self.world.ranks[self.rank].parker.park(&mut || {
                        let r = poll();
                        let stop = !matches!(r, Ok(false));
                        if stop {
                            outcome = Some(r);
                        }
                        stop || world.abort_error().is_some()
                    });
                    if let Some(r) = outcome {
                        return r.map(|_| ());
                    }
                }
            }
        }
    }

    fn finalize(&self) {
        self.finalized.set(true);
    }

    fn is_finalized(&self) -> bool {
        self.finalized.get()
    }

    fn collectives(
        &self,
        context: crate::device::ContextId,
        members: &[usize],
    ) -> Option<crate::device::collectives::Collectives> {
        self.world.collectives(context, members, self.rank)
    }

    fn placement(&self) -> &crate::device::Placement {
        &self.world.placement
    }

    fn name(&self) -> &'static str {
        "shm"
    }

    fn abort_job(&self, failure: crate::device::Failure) -> crate::device::Failure {
        self.world.mark_failed(self.rank, failure.clone());
        self.world.first_failure().unwrap_or(failure)
    }

    fn improbe(&self, spec: MatchSpec) -> Result<Option<(MessageId, RawStatus)>> {
        self.check_spec(spec)?;
        let st = &mut *self.st.borrow_mut();
        self.progress(st);
        if let Some(found) = self.take_message(st, spec) {
            return Ok(Some(found));
        }
        // As in `iprobe`: only a blocked probe (`mprobe`) gives up on a message that cannot come.
        let hopeless = || self.blocked.get().then(|| self.unreachable_source(st, spec)).flatten();
        if let Some(err) = self.world.abort_error().or_else(hopeless) {
            self.progress(st);
            return self.take_message(st, spec).map(Some).ok_or(err);
        }
        Ok(None)
    }

    unsafe fn mrecv(&self, msg: MessageId, buf: *mut u8, capacity: usize) -> Result<Started> {
        let st = &mut *self.st.borrow_mut();
        Ok(Started::Complete(self.receive_held(st, msg, buf, capacity)))
    }

    fn one_sided(&self) -> Option<&dyn crate::device::one_sided::OneSided> {
        Some(self)
    }
}

impl Drop for ShmEndpoint {
    fn drop(&mut self) {
        // Anything still outstanding (leaked handles) is released so no peer is left pointing at
        // this rank's memory.
        self.release_all();
    }
}
