//! Test-only: one rank whose [`Matcher`] is fed by two in-memory transports with different
//! delivery mechanics, standing in for the `hybrid` device (a thread peer over shm, a remote peer
//! over tcp) until it exists.
//!
//! - [`Route::Mailbox`] (eager, like shm's ring): a send copies its bytes into the sender's FIFO;
//!   on delivery the receiver gets envelope and bytes together.
//! - [`Route::Rendezvous`] (like tcp's ready-to-send): the FIFO carries only the envelope and a
//!   send id, the bytes stay in the sender's outbox until a receive matches and pulls them. A
//!   sender may cancel a send nobody has pulled: a receive that matched it then stays posted
//!   (the delivery is declined), and the unexpected queue drops it.
//!
//! Every peer is reached through exactly one transport, and each transport delivers one
//! sender's messages in sending order. The test decides which sender's next message arrives
//! ([`Rank::deliver`]): that is the arrival order the engine must follow.

use std::collections::{HashMap, VecDeque};

use super::matching::{self, Envelope, Matcher, PeerView};
use super::slab::Slab;
use super::{ANY_TAG, ContextId, MatchSpec, ReqId, Source};
use crate::error::Error;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Mailbox,
    Rendezvous,
}

/// Where an unexpected message's bytes are.
enum Payload {
    /// Arrived with the envelope.
    Bytes(Vec<u8>),
    /// Still in the sender's outbox.
    Remote { send_id: u64 },
}

/// A completed receive.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Received {
    source: usize,
    tag: i32,
    data: Vec<u8>,
}

enum RecvState {
    Posted,
    Done(Received),
    Cancelled,
}

/// What one transport has in flight from one sender.
enum InFlight {
    Eager(Envelope, Vec<u8>),
    Rts(Envelope, u64),
}

/// The receiving rank: its engine, its requests, and the two transports' queues towards it.
struct Rank {
    me: usize,
    routes: Vec<Route>,
    /// Per sender, in sending order (whichever transport it uses).
    wires: Vec<VecDeque<InFlight>>,
    /// Rendezvous payloads not yet pulled, by send id.
    outbox: HashMap<u64, Vec<u8>>,
    next_send: u64,
    matcher: Matcher<Payload>,
    recvs: Slab<RecvState>,
    exited: Vec<bool>,
    blocked: bool,
}

impl Rank {
    /// Rank 0 of a job; `routes[p]` is how peer `p` reaches it (`routes[0]` is unused).
    fn new(routes: &[Route]) -> Self {
        let n = routes.len();
        Rank {
            me: 0,
            routes: routes.to_vec(),
            wires: (0..n).map(|_| VecDeque::new()).collect(),
            outbox: HashMap::new(),
            next_send: 0,
            matcher: Matcher::with_capacity(4, 4),
            recvs: Slab::with_capacity(4),
            exited: vec![false; n],
            blocked: false,
        }
    }

    /// Peer `from` sends `data`; it arrives only when [`Rank::deliver`] says so. Returns the
    /// rendezvous send id (for [`Rank::cancel_send`]), if the route has one.
    fn send(&mut self, from: usize, tag: i32, context: ContextId, data: &[u8]) -> Option<u64> {
        let env = Envelope { source: from, context, tag, len: data.len() };
        match self.routes[from] {
            Route::Mailbox => {
                self.wires[from].push_back(InFlight::Eager(env, data.to_vec()));
                None
            }
            Route::Rendezvous => {
                let id = self.next_send;
                self.next_send += 1;
                self.outbox.insert(id, data.to_vec());
                self.wires[from].push_back(InFlight::Rts(env, id));
                Some(id)
            }
        }
    }

    /// The sender withdraws a rendezvous send; `false` once a receive pulled it.
    fn cancel_send(&mut self, send_id: u64) -> bool {
        self.outbox.remove(&send_id).is_some()
    }

    /// The next message of `from` reaches this rank (its transport's mechanics apply).
    fn deliver(&mut self, from: usize) {
        match self.wires[from].pop_front().expect("a message in flight") {
            InFlight::Eager(env, data) => match self.matcher.take_posted(&env) {
                Some(id) => self.complete(id, env, data),
                None => self.matcher.push_unexpected(env, Payload::Bytes(data)),
            },
            InFlight::Rts(env, send_id) => match self.matcher.find_posted(&env) {
                Some(found) => {
                    // Pulled only now; a cancelled send vanishes and the receive stays posted.
                    if let Some(data) = self.outbox.remove(&send_id) {
                        let id = self.matcher.take_found(found);
                        self.complete(id, env, data);
                    }
                }
                None => self.matcher.push_unexpected(env, Payload::Remote { send_id }),
            },
        }
    }

    fn complete(&mut self, id: ReqId, env: Envelope, data: Vec<u8>) {
        let r = self.recvs.get_mut(id).expect("posted receives are live");
        *r = RecvState::Done(Received { source: env.source, tag: env.tag, data });
    }

    /// Posts a receive: completed at once from the unexpected queue, or posted.
    fn irecv(&mut self, spec: MatchSpec) -> Result<Received, ReqId> {
        while let Some((env, payload)) = self.matcher.take_unexpected(&spec) {
            let data = match payload {
                Payload::Bytes(data) => data,
                Payload::Remote { send_id } => match self.outbox.remove(&send_id) {
                    Some(data) => data,
                    None => continue, // cancelled by its sender meanwhile
                },
            };
            return Ok(Received { source: env.source, tag: env.tag, data });
        }
        let id = self.recvs.insert(RecvState::Posted);
        self.matcher.push_posted(spec, id);
        Err(id)
    }

    fn test(&mut self, id: ReqId) -> Option<Received> {
        match self.recvs.get(id)? {
            RecvState::Posted => None,
            RecvState::Done(_) | RecvState::Cancelled => match self.recvs.remove(id) {
                Some(RecvState::Done(r)) => Some(r),
                _ => None,
            },
        }
    }

    fn cancel_recv(&mut self, id: ReqId) -> bool {
        let cancelled = self.matcher.cancel_posted(id);
        if cancelled {
            *self.recvs.get_mut(id).expect("live") = RecvState::Cancelled;
        }
        cancelled
    }

    fn iprobe(&mut self, spec: MatchSpec) -> Option<(usize, i32, usize)> {
        let outbox = &self.outbox;
        self.matcher.retain_unexpected(|_, p| match p {
            Payload::Bytes(_) => true,
            Payload::Remote { send_id } => outbox.contains_key(send_id),
        });
        self.matcher.peek(&spec).map(|e| (e.source, e.tag, e.len))
    }

    fn unreachable(&self, spec: MatchSpec) -> Option<Error> {
        matching::unreachable(&spec, self)
    }
}

impl PeerView for Rank {
    fn me(&self) -> usize {
        self.me
    }

    fn size(&self) -> usize {
        self.routes.len()
    }

    fn abort_error(&self) -> Option<Error> {
        None
    }

    fn gone(&self, rank: usize) -> Option<Error> {
        self.exited[rank].then_some(Error::PeerExited { rank })
    }

    fn self_silent(&self) -> bool {
        self.blocked
    }
}

const CTX: ContextId = 4;

fn spec(source: Source, tag: i32) -> MatchSpec {
    MatchSpec { context: CTX, source, tag }
}

fn any() -> MatchSpec {
    spec(Source::Any, ANY_TAG)
}

/// Peer 1 and 3 by mailbox, peer 2 by rendezvous.
fn hybrid() -> Rank {
    Rank::new(&[Route::Mailbox, Route::Mailbox, Route::Rendezvous, Route::Mailbox])
}

fn data(r: Result<Received, ReqId>) -> Vec<u8> {
    r.expect("matched at once").data
}

#[test]
fn queued_messages_reach_any_source_receives_in_arrival_order_across_transports() {
    let mut rank = hybrid();
    rank.send(1, 0, CTX, b"a1");
    rank.send(1, 0, CTX, b"a2");
    rank.send(2, 0, CTX, b"b1");
    rank.send(2, 0, CTX, b"b2");
    rank.send(3, 0, CTX, b"c1");
    for from in [2, 1, 3, 1, 2] {
        rank.deliver(from);
    }
    let got: Vec<Vec<u8>> = (0..5).map(|_| data(rank.irecv(any()))).collect();
    assert_eq!(got, [&b"b1"[..], b"a1", b"c1", b"a2", b"b2"]);
}

#[test]
fn posted_any_source_receives_take_arrivals_in_order_across_transports() {
    let mut rank = hybrid();
    let ids: Vec<ReqId> = (0..5).map(|_| rank.irecv(any()).expect_err("nothing arrived yet")).collect();
    rank.send(1, 7, CTX, b"a1");
    rank.send(2, 8, CTX, b"b1");
    rank.send(2, 9, CTX, b"b2");
    rank.send(3, 7, CTX, b"c1");
    rank.send(1, 9, CTX, b"a2");
    for from in [1, 2, 2, 3, 1] {
        rank.deliver(from);
    }
    let got: Vec<(usize, i32, Vec<u8>)> =
        ids.iter().map(|&id| rank.test(id).map(|r| (r.source, r.tag, r.data)).expect("completed")).collect();
    assert_eq!(
        got,
        [
            (1, 7, b"a1".to_vec()),
            (2, 8, b"b1".to_vec()),
            (2, 9, b"b2".to_vec()),
            (3, 7, b"c1".to_vec()),
            (1, 9, b"a2".to_vec())
        ]
    );
}

#[test]
fn one_senders_messages_never_overtake_each_other() {
    let mut rank = hybrid();
    // Peer 2 (rendezvous) sends tag 1, 2, 1; peer 1 (mailbox) sends tag 1.
    rank.send(2, 1, CTX, b"x");
    rank.send(2, 2, CTX, b"y");
    rank.send(2, 1, CTX, b"z");
    rank.send(1, 1, CTX, b"u");
    for from in [2, 1, 2, 2] {
        rank.deliver(from);
    }
    assert_eq!(data(rank.irecv(spec(Source::Rank(2), ANY_TAG))), b"x");
    // The earliest tag-1 message still queued is peer 1's (arrived second), not peer 2's `z`.
    assert_eq!(data(rank.irecv(spec(Source::Any, 1))), b"u");
    assert_eq!(data(rank.irecv(any())), b"y");
    assert_eq!(data(rank.irecv(any())), b"z");
    assert!(rank.irecv(any()).is_err(), "nothing left");
}

#[test]
fn an_arrival_goes_to_the_earliest_posted_receive_that_accepts_it() {
    let mut rank = hybrid();
    let from2 = rank.irecv(spec(Source::Rank(2), ANY_TAG)).unwrap_err();
    let tag5 = rank.irecv(spec(Source::Any, 5)).unwrap_err();
    let anything = rank.irecv(any()).unwrap_err();
    rank.send(1, 5, CTX, b"m1"); // skips the receive for peer 2
    rank.send(2, 5, CTX, b"r1"); // the receive for peer 2 was posted first
    rank.send(3, 6, CTX, b"m3");
    for from in [1, 2, 3] {
        rank.deliver(from);
    }
    assert_eq!(rank.test(tag5).map(|r| r.data), Some(b"m1".to_vec()));
    assert_eq!(rank.test(from2).map(|r| r.data), Some(b"r1".to_vec()));
    assert_eq!(rank.test(anything).map(|r| r.data), Some(b"m3".to_vec()));
}

#[test]
fn probe_reports_the_earliest_arrival_without_taking_it() {
    let mut rank = hybrid();
    assert_eq!(rank.iprobe(any()), None);
    let rts = rank.send(2, 3, CTX, b"rdv").expect("rendezvous route");
    rank.send(1, 4, CTX, b"eager!");
    rank.deliver(2);
    rank.deliver(1);
    assert_eq!(rank.iprobe(any()), Some((2, 3, 3)));
    assert_eq!(rank.iprobe(any()), Some((2, 3, 3)), "a probe takes nothing");
    assert_eq!(rank.iprobe(spec(Source::Any, 4)), Some((1, 4, 6)));
    // Its sender withdraws the rendezvous message: the probe now sees the eager one.
    assert!(rank.cancel_send(rts));
    assert_eq!(rank.iprobe(any()), Some((1, 4, 6)));
    assert_eq!(data(rank.irecv(any())), b"eager!");
    assert_eq!(rank.iprobe(any()), None);
}

#[test]
fn cancelled_receives_and_withdrawn_sends_leave_the_order_intact() {
    let mut rank = hybrid();
    let first = rank.irecv(any()).unwrap_err();
    let second = rank.irecv(any()).unwrap_err();
    assert!(rank.cancel_recv(first));
    assert!(!rank.cancel_recv(first), "already cancelled");
    // A rendezvous send withdrawn before its envelope arrives: the match is declined and the
    // receive stays posted for the next arrival, from the other transport.
    let rts = rank.send(2, 0, CTX, b"gone").expect("rendezvous route");
    rank.send(1, 0, CTX, b"kept");
    assert!(rank.cancel_send(rts));
    rank.deliver(2);
    assert_eq!(rank.test(second), None, "the withdrawn message must not complete it");
    rank.deliver(1);
    assert_eq!(rank.test(second).map(|r| r.data), Some(b"kept".to_vec()));
    assert_eq!(rank.test(first), None, "a cancelled receive gets nothing");
    // Withdrawn while queued: an ANY_SOURCE receive skips it.
    let rts = rank.send(2, 0, CTX, b"gone too").expect("rendezvous route");
    rank.send(3, 0, CTX, b"later");
    rank.deliver(2);
    rank.deliver(3);
    assert!(rank.cancel_send(rts));
    assert_eq!(data(rank.irecv(any())), b"later");
}

#[test]
fn any_source_is_hopeless_only_when_peers_of_both_transports_are_gone() {
    let mut rank = Rank::new(&[Route::Mailbox, Route::Mailbox, Route::Rendezvous]);
    rank.blocked = true;
    rank.exited[1] = true;
    assert!(rank.unreachable(any()).is_none(), "the rendezvous peer still runs");
    assert!(matches!(rank.unreachable(spec(Source::Rank(1), 0)), Some(Error::PeerExited { rank: 1 })));
    rank.exited[2] = true;
    assert!(matches!(rank.unreachable(any()), Some(Error::PeerExited { rank: 1 })));
    rank.blocked = false;
    assert!(rank.unreachable(any()).is_none(), "a rank that is not blocked may still send to itself");
}

mod props {
    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Step {
        /// Peer `p` (1..=3) sends its next message.
        Send(usize),
        /// The next in-flight message of peer `p` arrives (if any).
        Deliver(usize),
        /// A receive: from `Some(p)` or any source, any tag.
        Recv(Option<usize>),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => (1..4usize).prop_map(Step::Send),
            3 => (1..4usize).prop_map(Step::Deliver),
            2 => prop_oneof![Just(None), (1..4usize).prop_map(Some)].prop_map(Step::Recv),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// With `ANY_TAG` receives: every sender's messages are received in sending order, an
        /// `ANY_SOURCE` receive that finds messages queued takes the earliest arrival, and an
        /// arrival completes the earliest-posted receive that accepts it — across transports.
        #[test]
        fn arrival_order_and_non_overtaking_across_transports(steps in prop::collection::vec(step(), 1..60)) {
            let mut rank = hybrid();
            let mut sent = [0u8; 4];
            // Senders of the unexpected messages, in arrival order (which of a sender's messages
            // each is follows from the per-sender order, checked separately).
            let mut queued: Vec<usize> = Vec::new();
            // Posted receives in posting order: (id, accepted source).
            let mut posted: Vec<(ReqId, Option<usize>)> = Vec::new();
            let mut next_expected = [0u8; 4];
            let mut check_order = |m: (usize, u8)| -> Result<(), TestCaseError> {
                prop_assert_eq!(m.1, next_expected[m.0], "sender {} overtaken", m.0);
                next_expected[m.0] += 1;
                Ok(())
            };
            let msg_of = |r: &Received| (r.source, r.data[0]);
            for s in steps {
                match s {
                    Step::Send(p) => {
                        rank.send(p, i32::from(sent[p] % 3), CTX, &[sent[p]]);
                        sent[p] += 1;
                    }
                    Step::Deliver(p) => {
                        if rank.wires[p].is_empty() {
                            continue;
                        }
                        rank.deliver(p);
                        // Which posted receive (if any) completed: it must be the earliest that accepts p.
                        let done: Vec<usize> = posted.iter().enumerate()
                            .filter(|(_, (id, _))| matches!(rank.recvs.get(*id), Some(RecvState::Done(_))))
                            .map(|(i, _)| i).collect();
                        let expected = posted.iter().position(|(_, src)| src.is_none_or(|s| s == p));
                        prop_assert_eq!(done.first().copied(), expected);
                        prop_assert!(done.len() <= 1);
                        match expected {
                            Some(i) => {
                                let (id, _) = posted.remove(i);
                                let r = rank.test(id).expect("completed");
                                prop_assert_eq!(r.source, p);
                                check_order(msg_of(&r))?;
                            }
                            None => queued.push(p),
                        }
                    }
                    Step::Recv(src) => {
                        let source = src.map_or(Source::Any, Source::Rank);
                        match rank.irecv(spec(source, ANY_TAG)) {
                            Ok(r) => {
                                let m = msg_of(&r);
                                // The earliest queued arrival the receive accepts.
                                let pos = queued.iter().position(|&p| src.is_none_or(|s| s == p));
                                prop_assert_eq!(pos.map(|i| queued[i]), Some(m.0));
                                queued.remove(pos.expect("checked"));
                                check_order(m)?;
                            }
                            Err(id) => {
                                prop_assert!(!queued.iter().any(|&p| src.is_none_or(|s| s == p)),
                                    "a queued message was left behind");
                                posted.push((id, src));
                            }
                        }
                    }
                }
            }
        }
    }
}
