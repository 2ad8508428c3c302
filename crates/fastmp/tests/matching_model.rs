//! Property test of the matching engine against a model of MPI matching, through the public API.
//!
//! A job of 2 or 3 ranks runs a random sequence of phases. In each phase the senders (ranks ≥ 1)
//! send rank 0 a few messages (random tag in 0..4, random size across the inline / spilled-eager /
//! rendezvous boundaries, standard or synchronous mode), each carrying a unique id. Rank 0 first
//! pre-posts some nonblocking receives (before any of the phase's messages exists), then releases
//! the senders, waits until every sender has *started* all its sends and they have reached rank 0
//! (each sender then sends a marker on a duplicate communicator, which no `ANY_TAG` receive of the
//! world can steal, and a connection delivers in order), and then runs a
//! random sequence of `irecv`, blocking `recv` (only when an `iprobe` of the same pattern says a
//! message is there, so it cannot block forever) and `iprobe`. At the end of the phase one
//! `iprobe` forces every message to arrive; receives still incomplete are cancelled, and messages
//! nobody took are drained with `recv(ANY_SOURCE, ANY_TAG)`.
//!
//! The model: a message *arrives* at some point after the phase starts, per source in sending
//! order; on arrival it goes to the earliest-posted pending receive that matches it, else to the
//! end of the unexpected queue; a newly posted receive takes the first matching message of the
//! unexpected queue, else becomes pending; `iprobe` reports the first matching unexpected message,
//! and every message has arrived by the time of any `iprobe` after the senders started.
//!
//! - With a single active sender the result is fully determined (arrival timing does not change
//!   MPI matching for one source): the observed assignment of messages to receives and every
//!   probe result must equal the model's prediction exactly.
//! - With two senders the arrival interleaving is nondeterministic (MPI allows any): the observed
//!   run must be explained by *some* interleaving that respects each source's order — checked by
//!   a search over interleavings, pruned by the observations.
//!
//! Every received message is also checked for its payload, length, source and tag.
//!
//! Every device runs it (`shm::<name>`, `tcp::<name>`, `hybrid::<name>`). Two differences are
//! allowed:
//! - On tcp (and hybrid between processes) a receive matched by a rendezvous message may still
//!   wait for the payload's round trip when the phase ends, so cancelling it has no effect and it
//!   completes; shm completes it on arrival.
//! - On hybrid, senders in rank 0's process and senders in other processes reach it over
//!   different transports (*channels*), and unexpected messages are kept in arrival order per
//!   channel only. A wildcard-source probe or receive may take the first matching message of
//!   either channel. MPI orders messages per sender only, so this is allowed; Open MPI's ob1
//!   likewise scans its per-peer queues in peer order, not arrival order.
//!   Nor can the device tell which channel's message came first when it resolves its held
//!   (wildcard) receives, so with senders on both channels the model matches *lazily*: an
//!   arrival only queues, and at any later point a pending receive may take a queued message if
//!   MPI's two ordering rules allow it (the message is the first of its source that the receive
//!   matches; the receive is the earliest pending one that matches the message). A probe sees no
//!   message a pending receive could take. With one sender this is the strict model again.

mod common;

use std::collections::{HashMap, HashSet};

use common::device_suite;
use fastmp::{ANY_SOURCE, ANY_TAG, Comm, Config, DeviceKind, Error, Request, Source, Status};
use proptest::prelude::*;

/// Eager limit of the jobs: messages above it use rendezvous or receiver-first direct copy.
const EAGER_LIMIT: usize = 64;
/// Message sizes: inline (≤ 24), spilled eager (25..=64), rendezvous (> 64).
const SIZES: [usize; 7] = [8, 20, 24, 40, 64, 65, 150];
/// Receive buffer capacity (≥ every size, so nothing truncates).
const CAP: usize = 160;
const TAGS: i32 = 4;
/// Rank 0 → senders only ("start phase p" / "job over"); never seen by rank 0's receives.
const GO_TAG: i32 = 1000;
/// Message ids are `phase * ID_STRIDE + index in phase`.
const ID_STRIDE: u64 = 64;

// ---------------------------------------------------------------------------------------- plan

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Spec {
    /// `None`: ANY_SOURCE.
    source: Option<usize>,
    /// `None`: ANY_TAG.
    tag: Option<i32>,
}

impl Spec {
    fn any() -> Self {
        Spec { source: None, tag: None }
    }

    fn src(&self) -> Source {
        self.source.map_or(ANY_SOURCE, Source::Rank)
    }

    fn tag(&self) -> i32 {
        self.tag.unwrap_or(ANY_TAG)
    }

    fn matches(&self, m: &Msg) -> bool {
        self.source.is_none_or(|s| s == m.source) && self.tag.is_none_or(|t| t == m.tag)
    }
}

#[derive(Clone, Debug)]
struct MsgPlan {
    sender: usize,
    tag: i32,
    len: usize,
    sync: bool,
}

#[derive(Clone, Debug)]
enum Op {
    Irecv(Spec),
    /// Blocking receive if an `iprobe` with the same pattern finds a message, else an `irecv`.
    Recv(Spec),
    Iprobe(Spec),
}

#[derive(Clone, Debug)]
struct PhasePlan {
    msgs: Vec<MsgPlan>,
    /// Receives posted before the phase's messages are sent.
    pre: Vec<Spec>,
    ops: Vec<Op>,
    /// Run `ops` while the senders are still sending (off with `FASTMP_MODEL_CONCURRENT=0`).
    concurrent: bool,
}

#[derive(Clone, Debug)]
struct Plan {
    np: usize,
    phases: Vec<PhasePlan>,
}

fn spec_strategy(np: usize) -> impl Strategy<Value = Spec> {
    let source = prop_oneof![Just(None), (1..np).prop_map(Some)];
    let tag = prop_oneof![1 => Just(None), 2 => (0..TAGS).prop_map(Some)];
    (source, tag).prop_map(|(source, tag)| Spec { source, tag })
}

fn phase_strategy(np: usize) -> impl Strategy<Value = PhasePlan> {
    let msg = (1..np, 0..TAGS, proptest::sample::select(&SIZES[..]), proptest::bool::weighted(0.25))
        .prop_map(|(sender, tag, len, sync)| MsgPlan { sender, tag, len, sync });
    let op = prop_oneof![
        2 => spec_strategy(np).prop_map(Op::Irecv),
        2 => spec_strategy(np).prop_map(Op::Recv),
        1 => spec_strategy(np).prop_map(Op::Iprobe),
    ];
    let concurrent = if std::env::var_os("FASTMP_MODEL_CONCURRENT").is_some_and(|v| v == "0") {
        Just(false).boxed()
    } else {
        proptest::bool::ANY.boxed()
    };
    (
        proptest::collection::vec(msg, 0..=6),
        proptest::collection::vec(spec_strategy(np), 0..=4),
        proptest::collection::vec(op, 0..=6),
        concurrent,
    )
        .prop_map(|(msgs, pre, ops, concurrent)| PhasePlan { msgs, pre, ops, concurrent })
}

fn plan_strategy() -> impl Strategy<Value = Plan> {
    (2usize..=3).prop_flat_map(|np| {
        proptest::collection::vec(phase_strategy(np), 1..=4).prop_map(move |phases| Plan { np, phases })
    })
}

fn msg_id(phase: usize, index: usize) -> u64 {
    phase as u64 * ID_STRIDE + index as u64
}

fn payload(id: u64, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len).map(|i| (id as u8).wrapping_mul(37).wrapping_add(i as u8)).collect();
    p[..8].copy_from_slice(&id.to_le_bytes());
    p
}

// ---------------------------------------------------------------------------------------- trace

/// What rank 0 did and saw, in program order.
#[derive(Clone, Debug)]
enum Ev {
    /// Receive number `r` was posted (irecv, or a blocking recv that completed before the next
    /// event).
    Post { r: usize, spec: Spec, blocking: bool },
    /// An `iprobe` and its (source, tag, bytes).
    Probe { spec: Spec, got: Option<(usize, i32, usize)> },
    /// Receive `r` was still incomplete at the end of the phase and was cancelled.
    Cancel { r: usize, status: Status },
    /// Every sender has started all its sends: any later `iprobe` sees every message arrived.
    Synced,
}

#[derive(Clone, Debug, Default)]
struct PhaseTrace {
    /// Posts before the senders were released.
    pre: Vec<Ev>,
    /// Everything after the senders started.
    post: Vec<Ev>,
    /// Completed receives: status and the bytes delivered.
    got: HashMap<usize, (Status, Vec<u8>)>,
}

// ---------------------------------------------------------------------------------------- job

fn run_plan(dev: DeviceKind, plan: &Plan) -> Result<Vec<PhaseTrace>, Error> {
    let mut config = Config::new().device(dev).np(plan.np).eager_limit(EAGER_LIMIT);
    if dev == DeviceKind::Hybrid {
        config = config.threads_per_process(hybrid_threads_per_process(plan.np));
    }
    let mut results = config.run(|world| {
        // Carries the "sends started" markers, apart from the traffic under test.
        let markers = world.dup()?;
        if world.rank() == 0 {
            receiver(dev, &world, &markers, plan)
        } else {
            sender(&world, &markers, plan).map(|()| Vec::new())
        }
    })?;
    Ok(results.swap_remove(0))
}

/// Rank 0's process holds ranks `0..t`; the others are in other processes.
fn hybrid_threads_per_process(np: usize) -> usize {
    np.div_ceil(2)
}

/// Channel of each source: the transport its messages reach rank 0 over (see the top).
fn channels(dev: DeviceKind, np: usize) -> Vec<usize> {
    match dev {
        DeviceKind::Hybrid => (0..np).map(|s| usize::from(s >= hybrid_threads_per_process(np))).collect(),
        _ => vec![0; np],
    }
}

fn sender(world: &Comm, markers: &Comm, plan: &Plan) -> fastmp::Result<()> {
    let me = world.rank();
    for (p, phase) in plan.phases.iter().enumerate() {
        let mine: Vec<(u64, &MsgPlan)> =
            phase.msgs.iter().enumerate().filter(|(_, m)| m.sender == me).map(|(k, m)| (msg_id(p, k), m)).collect();
        let payloads: Vec<Vec<u8>> = mine.iter().map(|&(id, m)| payload(id, m.len)).collect();
        world.recv(&mut [0u8; 1], 0, GO_TAG)?;
        world.scope(|s| {
            let mut reqs = Vec::new();
            for (&(_, m), buf) in mine.iter().zip(&payloads) {
                reqs.push(if m.sync { s.issend(buf, 0, m.tag)? } else { s.isend(buf, 0, m.tag)? });
            }
            markers.send::<u8>(&[], 0, 0)?;
            for st in fastmp::waitall(&mut reqs)? {
                assert!(!st.cancelled);
            }
            Ok::<_, Error>(())
        })?;
    }
    // Stay alive until rank 0 is done: its pending receives from us must not fail with
    // PeerExited before it cancels them.
    world.recv(&mut [0u8; 1], 0, GO_TAG)?;
    Ok(())
}

fn receiver(dev: DeviceKind, world: &Comm, markers: &Comm, plan: &Plan) -> fastmp::Result<Vec<PhaseTrace>> {
    let np = plan.np;
    let mut traces = Vec::new();
    for (p, phase) in plan.phases.iter().enumerate() {
        let mut trace = PhaseTrace::default();
        let mut bufs = vec![[0u8; CAP]; phase.pre.len() + phase.ops.len()];
        let mut slots = bufs.iter_mut().enumerate();
        let completed: Vec<(usize, usize, Status)> = world.scope(|s| {
            let mut reqs: Vec<(usize, usize, Request<'_>)> = Vec::new();
            let mut next_r = 0;
            for spec in &phase.pre {
                let (slot, buf) = slots.next().expect("enough buffers");
                reqs.push((next_r, slot, s.irecv(&mut buf[..], spec.src(), spec.tag())?));
                trace.pre.push(Ev::Post { r: next_r, spec: *spec, blocking: false });
                next_r += 1;
            }
            for dest in 1..np {
                world.send(&[p as u8], dest, GO_TAG)?;
            }
            let wait_for_senders = |trace: &mut PhaseTrace| {
                for sender in 1..np {
                    markers.recv::<u8>(&mut [], sender, 0)?;
                }
                trace.post.push(Ev::Synced);
                Ok::<_, Error>(())
            };
            if !phase.concurrent {
                wait_for_senders(&mut trace)?;
            }
            for op in &phase.ops {
                let (spec, blocking) = match op {
                    Op::Iprobe(spec) => {
                        let got = world.iprobe(spec.src(), spec.tag())?;
                        trace.post.push(Ev::Probe { spec: *spec, got: got.map(|st| (st.source, st.tag, st.bytes)) });
                        continue;
                    }
                    Op::Irecv(spec) => (spec, false),
                    Op::Recv(spec) => {
                        let got = world.iprobe(spec.src(), spec.tag())?;
                        trace.post.push(Ev::Probe { spec: *spec, got: got.map(|st| (st.source, st.tag, st.bytes)) });
                        (spec, got.is_some())
                    }
                };
                trace.post.push(Ev::Post { r: next_r, spec: *spec, blocking });
                if blocking {
                    let mut buf = [0u8; CAP];
                    let st = world.recv(&mut buf, spec.src(), spec.tag())?;
                    trace.got.insert(next_r, (st, buf[..st.bytes.min(CAP)].to_vec()));
                } else {
                    let (slot, buf) = slots.next().expect("enough buffers");
                    reqs.push((next_r, slot, s.irecv(&mut buf[..], spec.src(), spec.tag())?));
                }
                next_r += 1;
            }
            if phase.concurrent {
                wait_for_senders(&mut trace)?;
            }
            // Every message has arrived once this returns.
            let got = world.iprobe(ANY_SOURCE, ANY_TAG)?;
            trace.post.push(Ev::Probe { spec: Spec::any(), got: got.map(|st| (st.source, st.tag, st.bytes)) });
            let mut completed = Vec::new();
            for (r, slot, mut req) in reqs {
                match req.test()? {
                    Some(st) => completed.push((r, slot, st)),
                    None => {
                        req.cancel()?;
                        let status = req.wait()?;
                        if dev != DeviceKind::Shm && !status.cancelled {
                            // Matched, its rendezvous payload was still on the way (see the top).
                            completed.push((r, slot, status));
                        } else {
                            trace.post.push(Ev::Cancel { r, status });
                        }
                    }
                }
            }
            // Messages nobody took.
            loop {
                let got = world.iprobe(ANY_SOURCE, ANY_TAG)?;
                trace.post.push(Ev::Probe { spec: Spec::any(), got: got.map(|st| (st.source, st.tag, st.bytes)) });
                if got.is_none() {
                    break;
                }
                trace.post.push(Ev::Post { r: next_r, spec: Spec::any(), blocking: true });
                let mut buf = [0u8; CAP];
                let st = world.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
                trace.got.insert(next_r, (st, buf[..st.bytes.min(CAP)].to_vec()));
                next_r += 1;
            }
            Ok::<_, Error>(completed)
        })?;
        for (r, slot, st) in completed {
            trace.got.insert(r, (st, bufs[slot][..st.bytes.min(CAP)].to_vec()));
        }
        traces.push(trace);
    }
    for dest in 1..np {
        world.send(&[0u8], dest, GO_TAG)?;
    }
    Ok(traces)
}

// ---------------------------------------------------------------------------------------- model

#[derive(Clone, Debug)]
struct Msg {
    id: u64,
    source: usize,
    tag: i32,
    len: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ModelState {
    /// Next event of `post` to run.
    ev: usize,
    /// Messages arrived, per source.
    arrived: Vec<usize>,
    /// Pending receives, in posting order.
    pending: Vec<usize>,
    /// Unexpected messages (indices into `msgs`), in arrival order. With lazy matching, every
    /// message arrived and not yet matched.
    unexpected: Vec<usize>,
}

struct Checker<'a> {
    msgs: Vec<Msg>,
    by_source: Vec<Vec<usize>>,
    trace: &'a PhaseTrace,
    spec_of: HashMap<usize, Spec>,
    /// Observed: receive → message index.
    recv_of: HashMap<usize, usize>,
    /// Index of `Ev::Synced` in the trace.
    synced: usize,
    /// Channel of each source.
    channel: Vec<usize>,
    /// Lazy matching (this phase's senders on several channels, see the top): arrivals only
    /// queue, and a separate step matches a pending receive with a queued message where MPI's
    /// ordering rules allow it.
    lazy: bool,
}

type Outcome = (Vec<(usize, Option<u64>)>, Vec<Option<(usize, i32, usize)>>);

impl<'a> Checker<'a> {
    /// Validates every delivered message and builds the observed assignment.
    fn new(dev: DeviceKind, np: usize, p: usize, plan: &PhasePlan, trace: &'a PhaseTrace) -> Result<Self, String> {
        let msgs: Vec<Msg> = plan
            .msgs
            .iter()
            .enumerate()
            .map(|(k, m)| Msg { id: msg_id(p, k), source: m.sender, tag: m.tag, len: m.len })
            .collect();
        let mut by_source = vec![Vec::new(); np];
        for (i, m) in msgs.iter().enumerate() {
            by_source[m.source].push(i);
        }
        let mut spec_of = HashMap::new();
        for ev in trace.pre.iter().chain(&trace.post) {
            if let Ev::Post { r, spec, .. } = ev {
                spec_of.insert(*r, *spec);
            }
        }
        let mut recv_of = HashMap::new();
        let mut receiver_of = HashMap::new();
        for (&r, (st, data)) in &trace.got {
            if data.len() < 8 {
                return Err(format!("receive {r}: {} bytes, too short for a message id ({st:?})", data.len()));
            }
            let id = u64::from_le_bytes(data[..8].try_into().unwrap());
            let Some(i) = msgs.iter().position(|m| m.id == id) else {
                return Err(format!("receive {r} got unknown message id {id} ({st:?})"));
            };
            let m = &msgs[i];
            if (st.source, st.tag, st.bytes, st.cancelled) != (m.source, m.tag, m.len, false) {
                return Err(format!("receive {r} got message {id} {m:?} but reports status {st:?}"));
            }
            if *data != payload(id, m.len) {
                return Err(format!("receive {r}: payload of message {id} corrupted"));
            }
            if let Some(other) = receiver_of.insert(i, r) {
                return Err(format!("message {id} received twice (receives {other} and {r})"));
            }
            recv_of.insert(r, i);
        }
        for (i, m) in msgs.iter().enumerate() {
            if !receiver_of.contains_key(&i) {
                return Err(format!("message {} {m:?} was never received", m.id));
            }
        }
        for ev in &trace.post {
            if let Ev::Cancel { r, status } = ev
                && !status.cancelled
            {
                return Err(format!(
                    "receive {r} was incomplete after all messages arrived, then completed: {status:?}"
                ));
            }
        }
        let synced = trace.post.iter().position(|e| matches!(e, Ev::Synced)).ok_or("no sync point in the trace")?;
        let channel = channels(dev, np);
        let lazy = msgs.iter().any(|m| channel[m.source] != channel[msgs[0].source]);
        Ok(Checker { msgs, by_source, trace, spec_of, recv_of, synced, channel, lazy })
    }

    fn all_arrived(&self, st: &ModelState) -> bool {
        st.arrived.iter().zip(&self.by_source).all(|(&a, list)| a == list.len())
    }

    /// Positions in `unexpected` of the first message matching `spec` on each channel, earliest
    /// first: the messages a probe or a receive may take.
    fn candidates(&self, st: &ModelState, spec: &Spec) -> Vec<usize> {
        let mut seen = Vec::new();
        let mut found = Vec::new();
        for (pos, &i) in st.unexpected.iter().enumerate() {
            let m = &self.msgs[i];
            let channel = self.channel[m.source];
            if spec.matches(m) && !seen.contains(&channel) {
                seen.push(channel);
                found.push(pos);
            }
        }
        found
    }

    /// The model's probe result where it is determined (one channel): the earliest match.
    fn probe(&self, st: &ModelState, spec: &Spec) -> Option<(usize, i32, usize)> {
        self.candidates(st, spec).first().map(|&pos| self.status_of(st.unexpected[pos]))
    }

    fn status_of(&self, i: usize) -> (usize, i32, usize) {
        let m = &self.msgs[i];
        (m.source, m.tag, m.len)
    }

    /// Message `by_source[s][arrived[s]]` arrives. With `check`, it must go where it was seen to go.
    fn arrive(&self, st: &ModelState, s: usize, check: bool) -> Option<(ModelState, Option<(usize, usize)>)> {
        let i = self.by_source[s][st.arrived[s]];
        let mut n = st.clone();
        n.arrived[s] += 1;
        if self.lazy {
            n.unexpected.push(i);
            return Some((n, None));
        }
        if let Some(pos) = n.pending.iter().position(|r| self.spec_of[r].matches(&self.msgs[i])) {
            let r = n.pending.remove(pos);
            if check && self.recv_of.get(&r) != Some(&i) {
                return None;
            }
            Some((n, Some((r, i))))
        } else {
            n.unexpected.push(i);
            Some((n, None))
        }
    }

    /// Lazy matching: the (pending position, unexpected position) pairs MPI's ordering rules let
    /// match now: the message is the first of its source that the receive matches, and the
    /// receive is the earliest pending one that matches the message. Empty exactly when no
    /// pending receive matches any queued message.
    fn matchable(&self, st: &ModelState) -> Vec<(usize, usize)> {
        let mut pairs = Vec::new();
        for (rp, r) in st.pending.iter().enumerate() {
            let spec = &self.spec_of[r];
            let mut sources = Vec::new();
            for (mp, &i) in st.unexpected.iter().enumerate() {
                let m = &self.msgs[i];
                if !spec.matches(m) || sources.contains(&m.source) {
                    continue;
                }
                sources.push(m.source);
                if st.pending.iter().position(|x| self.spec_of[x].matches(m)) == Some(rp) {
                    pairs.push((rp, mp));
                }
            }
        }
        pairs
    }

    /// Lazy matching: pending receive `rp` takes queued message `mp`; it must be what was seen.
    fn match_pair(&self, st: &ModelState, rp: usize, mp: usize) -> Option<ModelState> {
        let mut n = st.clone();
        let r = n.pending.remove(rp);
        let i = n.unexpected.remove(mp);
        (self.recv_of.get(&r) == Some(&i)).then_some(n)
    }

    /// Runs event `ev` of `events`. With `check`, its outcome must match the observation.
    fn step(&self, events: &[Ev], st: &ModelState, check: bool) -> Option<(ModelState, Option<(usize, usize)>)> {
        // A blocking receive completed before the program went on.
        if check
            && let Some(Ev::Post { r, blocking: true, .. }) = st.ev.checked_sub(1).map(|k| &events[k])
            && st.pending.contains(r)
        {
            return None;
        }
        let mut n = st.clone();
        n.ev += 1;
        let mut matched = None;
        match &events[st.ev] {
            Ev::Post { r, .. } if self.lazy => n.pending.push(*r),
            Ev::Post { r, spec, .. } => {
                let candidates = self.candidates(st, spec);
                // Checked: the observed message, if it is one the receive may take.
                let pick = match self.recv_of.get(r) {
                    Some(&i) if check => candidates.iter().copied().find(|&pos| n.unexpected[pos] == i),
                    _ => None,
                };
                if let Some(pos) = pick.or(candidates.first().copied()) {
                    let i = n.unexpected.remove(pos);
                    if check && self.recv_of.get(r) != Some(&i) {
                        return None;
                    }
                    matched = Some((*r, i));
                } else {
                    n.pending.push(*r);
                }
            }
            Ev::Probe { spec, got } => {
                // An iprobe after the senders started drains everything: all messages arrived.
                if check {
                    let may_report: Vec<_> = self
                        .candidates(st, spec)
                        .into_iter()
                        .map(|pos| Some(self.status_of(st.unexpected[pos])))
                        .collect();
                    let explained = if may_report.is_empty() { got.is_none() } else { may_report.contains(got) };
                    // Lazy: a probe sees no message a pending receive is owed.
                    let settled = !self.lazy || self.matchable(st).is_empty();
                    if (st.ev > self.synced && !self.all_arrived(st)) || !explained || !settled {
                        return None;
                    }
                }
            }
            Ev::Synced => {}
            Ev::Cancel { r, .. } => {
                let pos = n.pending.iter().position(|x| x == r);
                match pos {
                    Some(pos) => {
                        n.pending.remove(pos);
                    }
                    None if check => return None,
                    None => {}
                }
            }
        }
        Some((n, matched))
    }

    fn start(&self) -> Result<ModelState, String> {
        let np = self.by_source.len();
        let mut st = ModelState { ev: 0, arrived: vec![0; np], pending: Vec::new(), unexpected: Vec::new() };
        // Pre-posts: no message exists yet, each becomes pending.
        for ev in &self.trace.pre {
            let Ev::Post { r, .. } = ev else { return Err("pre-posts are posts".into()) };
            st.pending.push(*r);
        }
        Ok(st)
    }

    /// Is there an arrival interleaving (per-source order) that explains the whole trace?
    fn explained(&self) -> Result<bool, String> {
        let start = self.start()?;
        let mut visited = HashSet::new();
        Ok(self.search(start, &mut visited))
    }

    fn search(&self, st: ModelState, visited: &mut HashSet<ModelState>) -> bool {
        if !visited.insert(st.clone()) {
            return false;
        }
        let events = &self.trace.post;
        if st.ev == events.len() {
            return self.all_arrived(&st) && st.pending.is_empty() && st.unexpected.is_empty();
        }
        if let Some((n, _)) = self.step(events, &st, true)
            && self.search(n, visited)
        {
            return true;
        }
        for s in 0..self.by_source.len() {
            if st.arrived[s] < self.by_source[s].len()
                && let Some((n, _)) = self.arrive(&st, s, true)
                && self.search(n, visited)
            {
                return true;
            }
        }
        if self.lazy {
            for (rp, mp) in self.matchable(&st) {
                if let Some(n) = self.match_pair(&st, rp, mp)
                    && self.search(n, visited)
                {
                    return true;
                }
            }
        }
        false
    }

    /// The model's own prediction when all messages come from one sender and the receives after
    /// the pre-posts wait for the senders: every message arrives as soon as the phase starts;
    /// returns (receive → message id or None, probe results).
    fn predict(&self) -> Result<Outcome, String> {
        let mut st = self.start()?;
        let mut assignment: HashMap<usize, Option<u64>> = self.spec_of.keys().map(|&r| (r, None)).collect();
        for s in 0..self.by_source.len() {
            while st.arrived[s] < self.by_source[s].len() {
                let (n, matched) = self.arrive(&st, s, false).expect("unchecked arrival");
                if let Some((r, i)) = matched {
                    assignment.insert(r, Some(self.msgs[i].id));
                }
                st = n;
            }
        }
        let mut probes = Vec::new();
        let events = &self.trace.post;
        while st.ev < events.len() {
            if let Ev::Probe { spec, .. } = &events[st.ev] {
                probes.push(self.probe(&st, spec));
            }
            let (n, matched) = self.step(events, &st, false).expect("unchecked step");
            if let Some((r, i)) = matched {
                assignment.insert(r, Some(self.msgs[i].id));
            }
            st = n;
        }
        let mut assignment: Vec<_> = assignment.into_iter().collect();
        assignment.sort_unstable();
        Ok((assignment, probes))
    }

    fn observed(&self) -> Outcome {
        let mut assignment: Vec<(usize, Option<u64>)> =
            self.spec_of.keys().map(|r| (*r, self.recv_of.get(r).map(|&i| self.msgs[i].id))).collect();
        assignment.sort_unstable();
        let probes = self
            .trace
            .post
            .iter()
            .filter_map(|ev| match ev {
                Ev::Probe { got, .. } => Some(*got),
                _ => None,
            })
            .collect();
        (assignment, probes)
    }
}

/// The trace without payload bytes, for failure messages.
fn summary(trace: &PhaseTrace) -> String {
    let ev = |e: &Ev| match e {
        Ev::Post { r, spec, blocking } => format!("{} r{r} {spec:?}", if *blocking { "recv" } else { "post" }),
        Ev::Probe { spec, got } => format!("iprobe {spec:?} -> {got:?}"),
        Ev::Cancel { r, status } => format!("cancel r{r} (cancelled: {})", status.cancelled),
        Ev::Synced => "senders started".to_string(),
    };
    let mut got: Vec<_> = trace
        .got
        .iter()
        .map(|(r, (st, data))| {
            let id = data.get(..8).map(|b| u64::from_le_bytes(b.try_into().unwrap()));
            format!("r{r} <- id {id:?} (source {}, tag {}, {} B)", st.source, st.tag, st.bytes)
        })
        .collect();
    got.sort();
    format!(
        "pre-posted: [{}]\n  then: [{}]\n  received: [{}]",
        trace.pre.iter().map(ev).collect::<Vec<_>>().join("; "),
        trace.post.iter().map(ev).collect::<Vec<_>>().join("; "),
        got.join("; ")
    )
}

fn check(dev: DeviceKind, plan: &Plan, traces: &[PhaseTrace]) -> Result<(), TestCaseError> {
    prop_assert_eq!(traces.len(), plan.phases.len());
    for (p, (phase, trace)) in plan.phases.iter().zip(traces).enumerate() {
        let checker =
            Checker::new(dev, plan.np, p, phase, trace).map_err(|e| TestCaseError::fail(format!("phase {p}: {e}")))?;
        let senders: HashSet<usize> = phase.msgs.iter().map(|m| m.sender).collect();
        if senders.len() <= 1 && !phase.concurrent {
            let predicted = checker.predict().map_err(TestCaseError::fail)?;
            prop_assert_eq!(
                &checker.observed(),
                &predicted,
                "phase {}: observed (left) != model (right); trace {:#?}",
                p,
                trace
            );
        }
        let explained = checker.explained().map_err(TestCaseError::fail)?;
        prop_assert!(explained, "phase {}: no per-source arrival order explains the run\n  {}", p, summary(trace));
    }
    Ok(())
}

/// Random plans against the model; 256 cases take about a second on shm (each case is a job:
/// on tcp that means connecting the ranks). `PROPTEST_CASES` overrides (e.g. 20000 for a soak).
fn matching_follows_the_mpi_model(dev: DeviceKind) {
    let config = ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        source_file: Some(file!()),
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let result = runner.run(&plan_strategy(), |plan| {
        let traces = run_plan(dev, &plan).map_err(|e| TestCaseError::fail(format!("job failed: {e}")))?;
        check(dev, &plan, &traces)
    });
    if let Err(e) = result {
        panic!("{dev:?}: {e}");
    }
}

/// A fixed multi-phase case covering every path once, so a regression shows up even without the
/// random cases: pre-posted wildcard receives, receiver-first rendezvous, unexpected eager and
/// rendezvous messages, a synchronous send, probes, and a cancelled receive.
fn fixed_scenario(dev: DeviceKind) {
    let s = |source: Option<usize>, tag: Option<i32>| Spec { source, tag };
    let m = |tag, len, sync| MsgPlan { sender: 1, tag, len, sync };
    let plan = Plan {
        np: 2,
        phases: vec![
            PhasePlan {
                msgs: vec![m(1, 150, false), m(2, 8, true), m(1, 40, false), m(3, 65, false)],
                pre: vec![s(Some(1), Some(1)), s(None, None), s(Some(1), Some(0))],
                ops: vec![Op::Iprobe(s(None, Some(3))), Op::Recv(s(Some(1), None)), Op::Irecv(s(None, Some(2)))],
                concurrent: false,
            },
            PhasePlan {
                msgs: vec![m(0, 20, false), m(0, 150, true), m(1, 24, false)],
                pre: vec![],
                ops: vec![Op::Recv(s(None, Some(1))), Op::Recv(s(Some(1), Some(0))), Op::Irecv(s(None, None))],
                concurrent: false,
            },
        ],
    };
    let traces = run_plan(dev, &plan).expect("job");
    check(dev, &plan, &traces).expect("model");
}

/// The checker itself, on the hybrid run of CI's failure (stop 45): receives held on both
/// channels were resolved in an order no arrival order explains (r0 took a remote message while
/// an earlier one of the same source, owed to r3 on arrival, was still queued), yet every pair
/// of MPI's ordering rules holds. The lazy model accepts it, the strict one does not, and the
/// lazy one still rejects a receive overtaken within one source.
#[test]
fn lazy_model_accepts_cross_channel_resolution_but_not_overtaking() {
    let s = |source: Option<usize>, tag: Option<i32>| Spec { source, tag };
    let m = |sender, tag, len| MsgPlan { sender, tag, len, sync: false };
    let phase = PhasePlan {
        msgs: vec![m(2, 0, 20), m(1, 3, 20), m(2, 2, 24), m(2, 2, 8), m(1, 2, 64), m(2, 1, 64)],
        pre: vec![s(None, Some(2)), s(Some(2), Some(2)), s(None, Some(3)), s(None, None)],
        ops: vec![],
        concurrent: true,
    };
    let post = |r, spec, blocking| Ev::Post { r, spec, blocking };
    let probe = |spec, got| Ev::Probe { spec, got };
    let cancelled = Status { source: 0, tag: 0, bytes: 0, cancelled: true };
    let trace_with = |assignment: &[(usize, usize)]| PhaseTrace {
        pre: phase.pre.iter().enumerate().map(|(r, &spec)| post(r, spec, false)).collect(),
        post: vec![
            post(4, s(None, Some(0)), false),
            probe(Spec::any(), Some((2, 1, 64))),
            post(5, Spec::any(), true),
            post(6, s(Some(2), Some(3)), false),
            probe(s(Some(1), Some(0)), None),
            Ev::Synced,
            probe(Spec::any(), None),
            Ev::Cancel { r: 6, status: cancelled },
            probe(Spec::any(), None),
        ],
        got: assignment
            .iter()
            .map(|&(r, k)| {
                let (msg, id) = (&phase.msgs[k], msg_id(1, k));
                let status = Status { source: msg.sender, tag: msg.tag, bytes: msg.len, cancelled: false };
                (r, (status, payload(id, msg.len)))
            })
            .collect(),
    };
    let seen = trace_with(&[(0, 2), (1, 3), (2, 1), (3, 4), (4, 0), (5, 5)]);
    let mut checker = Checker::new(DeviceKind::Hybrid, 3, 1, &phase, &seen).expect("valid trace");
    assert!(checker.lazy, "senders 1 and 2 are on different channels");
    assert_eq!(checker.explained(), Ok(true));
    checker.lazy = false;
    assert_eq!(checker.explained(), Ok(false), "the strict model matches on arrival");
    // r1 (source 2, tag 2) takes source 2's first tag-2 message although r0 (any source, tag 2)
    // was posted earlier and matches it: overtaking, on any model.
    let overtaken = trace_with(&[(0, 3), (1, 2), (2, 1), (3, 4), (4, 0), (5, 5)]);
    let checker = Checker::new(DeviceKind::Hybrid, 3, 1, &phase, &overtaken).expect("valid trace");
    assert_eq!(checker.explained(), Ok(false));
}

device_suite! {
    // Every multi-rank tcp job can hang at exit until this device defect is fixed; delete the
    // line then.
    both: [
        fixed_scenario,
        matching_follows_the_mpi_model,
    ],
    tcp_ignored: [],
}
