//! The matching engine of one rank, shared by every transport (Open MPI's ob1 model).
//!
//! A transport hands the engine each arriving message as an [`Envelope`] plus a payload
//! descriptor `P` of its own (where the bytes are: inline, in a pooled buffer, still at the
//! sender for a rendezvous, ...); the engine decides which receive it belongs to. Posted
//! receives, unexpected messages, MPI's matching order, wildcards, probe, cancel and the "no
//! live peer can satisfy this receive" reasoning live here, once, so one rank's engine can be
//! fed by several transports (a thread peer over shm, a remote peer over tcp).
//!
//! Order: posted receives are kept in posting order, unexpected messages in arrival order
//! (the order of the transports' `push_unexpected` calls, whichever transport made
//! them). An arriving message goes to the earliest-posted receive that matches it; a new
//! receive takes the earliest-arrived message that matches it. As long as each transport hands
//! over one sender's messages in the order they were sent, MPI's non-overtaking rule holds per
//! (sender, context), and an `ANY_SOURCE` receive sees messages of different transports in
//! arrival order.
//!
//! The engine does no I/O, takes no lock and allocates nothing in steady state (queues are
//! pre-sized `VecDeque`s): shm's receiving thread owns it outright, tcp keeps it under its state
//! mutex.

use std::collections::VecDeque;

use super::{ContextId, MatchSpec, RawStatus, ReqId, Source};
use crate::error::Error;

/// What a message says about itself: enough to match it and to report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Envelope {
    pub source: usize,
    pub context: ContextId,
    pub tag: i32,
    /// Payload length in bytes.
    pub len: usize,
}

impl Envelope {
    /// The status a probe reports for this message.
    pub fn status(&self) -> RawStatus {
        RawStatus { source: self.source, tag: self.tag, bytes: self.len, cancelled: false }
    }

    #[inline]
    fn accepted_by(&self, spec: &MatchSpec) -> bool {
        spec.matches(self.context, self.source, self.tag)
    }
}

struct Posted {
    spec: MatchSpec,
    id: ReqId,
}

/// A posted receive found by [`Matcher::find_posted`], still in its place; take it with
/// [`Matcher::take_found`] once the message is delivered (before any other change to the engine).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Found {
    pos: usize,
    pub id: ReqId,
}

/// Posted receives and unexpected messages of one rank. `P` is the transport's payload
/// descriptor of an unexpected message.
pub(crate) struct Matcher<P> {
    /// In posting order.
    posted: VecDeque<Posted>,
    /// In arrival order.
    unexpected: VecDeque<(Envelope, P)>,
}

impl<P> Matcher<P> {
    /// An engine whose queues hold `posted` receives and `unexpected` messages before growing.
    pub fn with_capacity(posted: usize, unexpected: usize) -> Self {
        Matcher { posted: VecDeque::with_capacity(posted), unexpected: VecDeque::with_capacity(unexpected) }
    }

    // ------------------------------------------------------------ arriving messages

    /// A message arrives: the earliest-posted receive matching it, taken off the posted list.
    /// `None`: the transport queues the message with [`Matcher::push_unexpected`]; if it lets go
    /// of the engine in between (to read the payload), it asks again first, since a receive
    /// posted meanwhile must not miss the message.
    #[inline]
    pub fn take_posted(&mut self, env: &Envelope) -> Option<ReqId> {
        let found = self.find_posted(env)?;
        Some(self.take_found(found))
    }

    /// The earliest-posted receive matching `env`, left in place: for transports whose sender
    /// may still withdraw the message while it is being delivered (then the receive stays
    /// posted, where it was).
    #[inline]
    pub fn find_posted(&self, env: &Envelope) -> Option<Found> {
        let pos = self.posted.iter().position(|p| env.accepted_by(&p.spec))?;
        Some(Found { pos, id: self.posted[pos].id })
    }

    /// Takes a receive found by [`Matcher::find_posted`] off the posted list.
    pub fn take_found(&mut self, found: Found) -> ReqId {
        debug_assert!(self.posted.get(found.pos).is_some_and(|p| p.id == found.id), "stale Found");
        take_at(&mut self.posted, found.pos).expect("found receive is still posted").id
    }

    /// Queues a message no posted receive wanted (callers have checked with `take_posted`
    /// or `find_posted`).
    #[inline]
    pub fn push_unexpected(&mut self, env: Envelope, payload: P) {
        self.unexpected.push_back((env, payload));
    }

    // ------------------------------------------------------------ receives and probes

    /// The earliest-arrived message matching a new receive, taken off the unexpected queue.
    #[inline]
    pub fn take_unexpected(&mut self, spec: &MatchSpec) -> Option<(Envelope, P)> {
        let pos = self.unexpected.iter().position(|(env, _)| env.accepted_by(spec))?;
        take_at(&mut self.unexpected, pos)
    }

    /// Posts a receive that found no unexpected message (`take_unexpected` returned `None`):
    /// it joins the end of the posted list.
    pub fn push_posted(&mut self, spec: MatchSpec, id: ReqId) {
        self.posted.push_back(Posted { spec, id });
    }

    /// The message a receive with `spec` would take now (a probe), left in the queue.
    pub fn peek(&self, spec: &MatchSpec) -> Option<&Envelope> {
        self.unexpected.iter().map(|(env, _)| env).find(|env| env.accepted_by(spec))
    }

    /// Withdraws a posted receive; `false` if it was not posted (already matched, or never).
    pub fn cancel_posted(&mut self, id: ReqId) -> bool {
        match self.posted.iter().position(|p| p.id == id) {
            Some(pos) => {
                self.posted.remove(pos);
                true
            }
            None => false,
        }
    }

    /// Whether any receive is posted.
    pub fn has_posted(&self) -> bool {
        !self.posted.is_empty()
    }

    // ------------------------------------------------------------ transport bookkeeping

    /// Keeps the unexpected messages for which `keep` is true (drops those their senders
    /// cancelled), in order.
    pub fn retain_unexpected(&mut self, mut keep: impl FnMut(&Envelope, &P) -> bool) {
        self.unexpected.retain(|(env, payload)| keep(env, payload));
    }

    /// Takes the earliest unexpected message for which `which` is true (a sender's cancel).
    pub fn remove_unexpected(&mut self, mut which: impl FnMut(&Envelope, &P) -> bool) -> Option<(Envelope, P)> {
        let pos = self.unexpected.iter().position(|(env, payload)| which(env, payload))?;
        take_at(&mut self.unexpected, pos)
    }

    /// The unexpected messages in arrival order.
    pub fn unexpected(&self) -> impl Iterator<Item = (&Envelope, &P)> {
        self.unexpected.iter().map(|(env, payload)| (env, payload))
    }

    /// The unexpected messages in arrival order, payloads mutable (a transport may change how a
    /// queued message's bytes are held, never its envelope or place).
    pub fn unexpected_mut(&mut self) -> impl Iterator<Item = (&Envelope, &mut P)> {
        self.unexpected.iter_mut().map(|(env, payload)| (&*env, payload))
    }
}

/// `VecDeque::remove`, with the common case (the oldest entry matched) as a plain `pop_front`.
#[inline]
fn take_at<T>(queue: &mut VecDeque<T>, pos: usize) -> Option<T> {
    if pos == 0 { queue.pop_front() } else { queue.remove(pos) }
}

// ---------------------------------------------------------------- hopeless receives

/// What a transport knows about the ranks that could send to this one: enough to decide that a
/// receive or probe can never be satisfied.
pub(crate) trait PeerView {
    /// This rank.
    fn me(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// The job-wide failure, if the job was aborted.
    fn abort_error(&self) -> Option<Error>;
    /// Why `rank` (another rank) sends nothing new any more (`PeerExited` / `PeerFailed`), or
    /// `None` while it still may.
    fn gone(&self, rank: usize) -> Option<Error>;
    /// Whether this rank can send nothing more to itself: it is blocked in a wait (so it starts
    /// no sends) and none of its self-sends is still on the way.
    fn self_silent(&self) -> bool;
}

/// Why no message matching `spec` can arrive any more, if that is certain (callers check the
/// unexpected queue first: a queued message can still be received).
pub(crate) fn unreachable(spec: &MatchSpec, peers: &impl PeerView) -> Option<Error> {
    if let Some(e) = peers.abort_error() {
        return Some(e);
    }
    let me = peers.me();
    let deadlock = |reason| Error::Deadlock { rank: me, reason };
    match spec.source {
        Source::Rank(src) if src == me => {
            peers.self_silent().then(|| deadlock("a receive from itself with no matching send started"))
        }
        Source::Rank(src) => peers.gone(src),
        Source::Any if peers.self_silent() => {
            let mut first = None;
            for peer in (0..peers.size()).filter(|&p| p != me) {
                let why = peers.gone(peer)?;
                first.get_or_insert(why);
            }
            Some(first.unwrap_or_else(|| deadlock("an ANY_SOURCE receive no rank can still match")))
        }
        Source::Any => None,
    }
}

#[cfg(test)]
mod tests {
    //! The engine against a deliberately naive reference model of MPI matching (the model of
    //! `tests/matching_model.rs`): every posted receive and queued message carries a global
    //! sequence number, and a match is the minimum sequence number among the candidates.

    use proptest::prelude::*;

    use super::*;
    use crate::device::ANY_TAG;

    const SOURCES: usize = 3;
    const CONTEXTS: u32 = 2;
    const TAGS: i32 = 3;

    fn id(n: u32) -> ReqId {
        ReqId { index: n, generation: 7 }
    }

    fn env(source: usize, context: ContextId, tag: i32) -> Envelope {
        Envelope { source, context, tag, len: 8 }
    }

    /// The model's own matching rule, written independently of `MatchSpec::matches`.
    fn model_accepts(spec: &MatchSpec, e: &Envelope) -> bool {
        let source_ok = match spec.source {
            Source::Any => true,
            Source::Rank(r) => r == e.source,
        };
        let tag_ok = spec.tag == ANY_TAG || spec.tag == e.tag;
        spec.context == e.context && source_ok && tag_ok
    }

    /// Naive MPI matching: unordered lists, order kept only by sequence numbers.
    #[derive(Default)]
    struct Model {
        seq: u64,
        /// (posted at, spec, receive id)
        posted: Vec<(u64, MatchSpec, u32)>,
        /// (arrived at, envelope, message id)
        unexpected: Vec<(u64, Envelope, u32)>,
    }

    impl Model {
        fn tick(&mut self) -> u64 {
            self.seq += 1;
            self.seq
        }

        fn arrive(&mut self, e: Envelope, msg: u32) -> Option<u32> {
            let at = self.tick();
            let best = self.posted.iter().filter(|(_, s, _)| model_accepts(s, &e)).min_by_key(|(t, _, _)| *t).copied();
            match best {
                Some((t, _, rid)) => {
                    self.posted.retain(|(u, _, _)| *u != t);
                    Some(rid)
                }
                None => {
                    self.unexpected.push((at, e, msg));
                    None
                }
            }
        }

        fn first_unexpected(&self, spec: &MatchSpec) -> Option<(u64, Envelope, u32)> {
            self.unexpected.iter().filter(|(_, e, _)| model_accepts(spec, e)).min_by_key(|(t, _, _)| *t).copied()
        }

        fn post(&mut self, spec: MatchSpec, rid: u32) -> Option<u32> {
            let at = self.tick();
            match self.first_unexpected(&spec) {
                Some((t, _, msg)) => {
                    self.unexpected.retain(|(u, _, _)| *u != t);
                    Some(msg)
                }
                None => {
                    self.posted.push((at, spec, rid));
                    None
                }
            }
        }

        fn probe(&self, spec: &MatchSpec) -> Option<(Envelope, u32)> {
            self.first_unexpected(spec).map(|(_, e, m)| (e, m))
        }

        fn cancel(&mut self, rid: u32) -> bool {
            let before = self.posted.len();
            self.posted.retain(|(_, _, r)| *r != rid);
            self.posted.len() != before
        }

        fn withdraw(&mut self, msg: u32) {
            self.unexpected.retain(|(_, _, m)| *m != msg);
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Arrive {
            source: usize,
            context: ContextId,
            tag: i32,
        },
        /// Posts a receive (through `take_unexpected` + `push_posted`, as the transports do).
        Post(MatchSpec),
        Probe(MatchSpec),
        /// Cancels the receive posted `n` receives ago (possibly already matched).
        Cancel(u32),
        /// The sender withdraws the message that arrived `n` messages ago (if still queued).
        Withdraw(u32),
        /// A message whose sender withdraws it while it is being delivered: the receive it
        /// found stays posted.
        ArriveWithdrawn {
            source: usize,
            context: ContextId,
            tag: i32,
        },
    }

    fn spec_strategy() -> impl Strategy<Value = MatchSpec> {
        let source = prop_oneof![1 => Just(Source::Any), 3 => (0..SOURCES).prop_map(Source::Rank)];
        let tag = prop_oneof![1 => Just(ANY_TAG), 3 => 0..TAGS];
        (source, 0..CONTEXTS, tag).prop_map(|(source, context, tag)| MatchSpec { context, source, tag })
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0..SOURCES, 0..CONTEXTS, 0..TAGS).prop_map(|(source, context, tag)| Op::Arrive { source, context, tag }),
            5 => spec_strategy().prop_map(Op::Post),
            2 => spec_strategy().prop_map(Op::Probe),
            1 => (0..4u32).prop_map(Op::Cancel),
            1 => (0..4u32).prop_map(Op::Withdraw),
            1 => (0..SOURCES, 0..CONTEXTS, 0..TAGS)
                .prop_map(|(source, context, tag)| Op::ArriveWithdrawn { source, context, tag }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn engine_agrees_with_the_reference_model(ops in prop::collection::vec(op_strategy(), 1..80)) {
            // Tiny capacities: the queues also have to grow correctly.
            let mut engine: Matcher<u32> = Matcher::with_capacity(1, 1);
            let mut model = Model::default();
            let (mut next_msg, mut next_rid) = (0u32, 0u32);
            for op in ops {
                match op {
                    Op::Arrive { source, context, tag } => {
                        let e = env(source, context, tag);
                        let msg = next_msg;
                        next_msg += 1;
                        let got = engine.take_posted(&e).map(|rid| rid.index);
                        if got.is_none() {
                            engine.push_unexpected(e, msg);
                        }
                        prop_assert_eq!(got, model.arrive(e, msg));
                    }
                    Op::ArriveWithdrawn { source, context, tag } => {
                        // Found and then declined: nothing changes, in engine and model alike.
                        let e = env(source, context, tag);
                        let found = engine.find_posted(&e).map(|f| f.id.index);
                        let expected = model.posted.iter().filter(|(_, s, _)| model_accepts(s, &e))
                            .min_by_key(|(t, _, _)| *t).map(|(_, _, r)| *r);
                        prop_assert_eq!(found, expected);
                    }
                    Op::Post(spec) => {
                        let rid = next_rid;
                        next_rid += 1;
                        let got = match engine.take_unexpected(&spec) {
                            Some((e, msg)) => {
                                prop_assert!(model_accepts(&spec, &e));
                                Some(msg)
                            }
                            None => {
                                engine.push_posted(spec, id(rid));
                                None
                            }
                        };
                        prop_assert_eq!(got, model.post(spec, rid));
                    }
                    Op::Probe(spec) => {
                        let got = engine.peek(&spec).copied();
                        let expected = model.probe(&spec);
                        prop_assert_eq!(got, expected.map(|(e, _)| e));
                    }
                    Op::Cancel(back) => {
                        let Some(rid) = next_rid.checked_sub(back + 1) else { continue };
                        prop_assert_eq!(engine.cancel_posted(id(rid)), model.cancel(rid));
                    }
                    Op::Withdraw(back) => {
                        let Some(msg) = next_msg.checked_sub(back + 1) else { continue };
                        engine.retain_unexpected(|_, &m| m != msg);
                        model.withdraw(msg);
                    }
                }
                prop_assert_eq!(engine.has_posted(), !model.posted.is_empty());
            }
            // Same queues at the end, in the same order.
            let mut model_unexpected = model.unexpected.clone();
            model_unexpected.sort_by_key(|(t, _, _)| *t);
            let queued: Vec<u32> = engine.unexpected().map(|(_, m)| *m).collect();
            prop_assert_eq!(queued, model_unexpected.iter().map(|(_, _, m)| *m).collect::<Vec<_>>());
        }
    }

    #[test]
    fn withdrawing_a_message_keeps_the_others_in_order() {
        let mut m: Matcher<u32> = Matcher::with_capacity(4, 4);
        for (msg, tag) in [(0, 1), (1, 2), (2, 1)] {
            m.push_unexpected(env(0, 0, tag), msg);
        }
        assert_eq!(m.remove_unexpected(|_, &p| p == 0).map(|(_, p)| p), Some(0));
        let any = MatchSpec { context: 0, source: Source::Any, tag: ANY_TAG };
        assert_eq!(m.peek(&any).map(|e| e.tag), Some(2));
        let tag1 = MatchSpec { tag: 1, ..any };
        assert_eq!(m.take_unexpected(&tag1).map(|(_, p)| p), Some(2));
        assert_eq!(m.take_unexpected(&any).map(|(_, p)| p), Some(1));
        assert!(m.take_unexpected(&any).is_none());
    }

    #[test]
    fn a_declined_delivery_leaves_the_receive_in_its_place() {
        let mut m: Matcher<()> = Matcher::with_capacity(4, 4);
        let any = MatchSpec { context: 0, source: Source::Any, tag: ANY_TAG };
        m.push_posted(MatchSpec { tag: 5, ..any }, id(0));
        m.push_posted(any, id(1));
        let found = m.find_posted(&env(1, 0, 3)).expect("the wildcard receive matches");
        assert_eq!(found.id, id(1));
        // Declined: not taken. The next message of tag 5 still goes to the older receive.
        assert_eq!(m.take_posted(&env(1, 0, 5)), Some(id(0)));
        assert_eq!(m.take_posted(&env(1, 0, 3)), Some(id(1)));
        assert!(!m.has_posted());
    }

    // ------------------------------------------------------------ unreachable

    struct View {
        me: usize,
        /// Per rank: whether it exited.
        exited: Vec<bool>,
        silent: bool,
        aborted: bool,
    }

    impl PeerView for View {
        fn me(&self) -> usize {
            self.me
        }
        fn size(&self) -> usize {
            self.exited.len()
        }
        fn abort_error(&self) -> Option<Error> {
            self.aborted.then(|| Error::PeerFailed { rank: 9, cause: "x".into() })
        }
        fn gone(&self, rank: usize) -> Option<Error> {
            self.exited[rank].then_some(Error::PeerExited { rank })
        }
        fn self_silent(&self) -> bool {
            self.silent
        }
    }

    fn spec(source: Source) -> MatchSpec {
        MatchSpec { context: 0, source, tag: ANY_TAG }
    }

    fn exited(rank: usize) -> Option<usize> {
        Some(rank)
    }

    /// The rank a `PeerExited` names, `None` for no error; other errors fail the test.
    fn exited_rank(e: Option<Error>) -> Option<usize> {
        e.map(|e| match e {
            Error::PeerExited { rank } => rank,
            other => panic!("expected PeerExited, got {other:?}"),
        })
    }

    #[test]
    fn unreachable_sources() {
        let view = |exited: [bool; 3], silent| View { me: 0, exited: exited.to_vec(), silent, aborted: false };
        // A named peer: only its own liveness counts, blocked or not.
        let v = view([false, true, false], false);
        assert_eq!(exited_rank(unreachable(&spec(Source::Rank(1)), &v)), exited(1));
        assert!(unreachable(&spec(Source::Rank(2)), &v).is_none());
        // Itself: hopeless only while silent.
        assert!(unreachable(&spec(Source::Rank(0)), &v).is_none());
        let silent = view([false, true, false], true);
        assert!(matches!(unreachable(&spec(Source::Rank(0)), &silent), Some(Error::Deadlock { rank: 0, .. })));
        // ANY_SOURCE: hopeless only when silent and every other rank is gone (first one named).
        assert!(unreachable(&spec(Source::Any), &silent).is_none());
        let all_gone = view([false, true, true], true);
        assert_eq!(exited_rank(unreachable(&spec(Source::Any), &all_gone)), exited(1));
        let not_blocked = view([false, true, true], false);
        assert!(unreachable(&spec(Source::Any), &not_blocked).is_none());
        let alone = View { me: 0, exited: vec![false], silent: true, aborted: false };
        assert!(matches!(unreachable(&spec(Source::Any), &alone), Some(Error::Deadlock { rank: 0, .. })));
        // An aborted job beats everything.
        let aborted = View { aborted: true, ..view([false, false, false], false) };
        assert!(matches!(unreachable(&spec(Source::Rank(1)), &aborted), Some(Error::PeerFailed { rank: 9, .. })));
    }
}
