//! Point-to-point on a communicator's collective context, for the algorithms: peers are
//! communicator ranks (already validated), tags name the operation, and every receive must get
//! exactly the bytes it expects — a different length means the ranks disagree on the arguments.
//!
//! Every algorithm is an `async fn` over a [`Run`], so one piece of code serves both twins. A
//! blocking run finishes each step before it returns (its futures are always ready, and a
//! receive still takes the device's blocking fast path); a nonblocking run starts each step and
//! yields until the device completes it, so the rank's progress engine can interleave it with
//! computation and other operations.

use std::cell::Cell;
use std::future::{Future, poll_fn};
use std::ops::Deref;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::coll::select::{Algorithm, Collective};
use crate::comm::Comm;
use crate::device::collectives::{CollectiveProvider, Collectives, EVERY_DISPATCH, Operation};
use crate::device::requests::{self, InFlight, Outcome};
use crate::device::{ContextId, MatchSpec, RawStatus, SendMode, Source};
use crate::error::{Error, Result};
use crate::trace;

/// Bits of a tag that name the collective (tags are `seq << COLL_BITS | coll + 1`).
const COLL_BITS: u32 = 5;
const _: () = assert!((Collective::Scan as u32) < (1 << COLL_BITS) - 1);
/// Operation numbers wrap here in tags; more outstanding operations than this cannot exist.
const SEQ_MASK: u32 = (1 << (31 - COLL_BITS)) - 1;

/// Tag of operation `seq`'s messages of `coll`.
fn tag_of(seq: u64, coll: Collective) -> i32 {
    ((seq as u32 & SEQ_MASK) << COLL_BITS) as i32 | (coll as i32 + 1)
}

/// How long an operation that can straddle processes waits before it looks for [`Evidence`]
/// (a correct program never pays more than a clock read per fruitless poll), and how often it
/// looks again.
const STRADDLE_PATIENCE: Duration = Duration::from_millis(100);
const STRADDLE_LOOK_EVERY: Duration = Duration::from_millis(10);

/// Where a message proving that whole processes chose another algorithm for this operation
/// would arrive. Ranks of one process that choose differently fail on the device's native
/// operations they share (`Run::chose`); between processes nothing is shared, so a waiting
/// rank looks for the other choice's messages instead: each choice sends its network messages
/// on its own context, under operation numbers both choices agree on.
#[derive(Clone, Copy)]
enum Evidence<'c> {
    /// A step of a `hierarchical` operation on a network level: a message of the parent
    /// operation `seq` on `parent`'s collective context from a rank of another process (ranks
    /// of this process hand results over there too) ran it flat.
    FlatPeers { parent: &'c Comm, seq: u64 },
    /// A flat choice on a communicator whose levels cross processes: a message of the network
    /// level operation `seq` that the choice passed by, on that level's collective `context`,
    /// came from a `hierarchical` peer.
    HierarchicalPeers { context: ContextId, seq: u64 },
}

/// What a run waiting across processes knows about a possible straddle: the
/// [`Evidence::HierarchicalPeers`] its flat choices found (a level step's
/// [`Evidence::FlatPeers`] is fixed when it starts, see `Run::flat_peers`), and when it waited.
#[derive(Clone, Copy, Default)]
struct Straddle {
    /// (context, seq) of the network level operations passed by (leaders, peers).
    passed_by: [Option<(ContextId, u64)>; 2],
    /// When the run first found a request unfinished, and when it last looked for evidence.
    waiting_since: Option<Instant>,
    looked: Option<Instant>,
}

/// Receives of nonblocking runs up to this many bytes are not posted (`Run::recv_unposted`):
/// the handshake of a posted receive cost an 8-byte `ibcast` at np 2 on shm ~20 ns on each
/// side. Larger ones are posted, so the sender's copy can land while the rank computes.
const UNPOSTED_RECV_LIMIT: usize = 16 * 1024;

/// A collective's number on its communicator, taken by [`Run::number`]; its run is built by
/// [`Numbered::start`]. Dropped unstarted, it passes its turn on as a finished run would.
pub(crate) struct Numbered<'c> {
    comm: &'c Comm,
    seq: u64,
}

impl<'c> Numbered<'c> {
    /// The nonblocking run of this number (inlined for the reason [`Numbered::begin`] is).
    #[inline(always)]
    pub(crate) fn start(self) -> Run<'c> {
        self.begin(false)
    }

    /// Always inlined: returned from a call, the run would be stored and copied again.
    #[inline(always)]
    fn begin(self, blocking: bool) -> Run<'c> {
        let (comm, seq) = (self.comm, self.seq);
        std::mem::forget(self);
        let mut run = Run::numbered(comm, seq, blocking, false);
        run.traced = trace::start().map(|started| {
            let event = Cell::new(trace::Event::of(trace::Kind::Collective("collective")));
            Box::new(Traced { started, event })
        });
        run
    }
}

impl Drop for Numbered<'_> {
    fn drop(&mut self) {
        if let Some(collectives) = self.comm.collectives.as_deref() {
            collectives.provider().finished(self.seq);
        }
    }
}

/// One collective operation of this rank on a communicator.
pub(crate) struct Run<'c> {
    comm: &'c Comm,
    /// The device's collectives for the communicator (`Comm::collectives`), looked up once.
    collectives: Option<&'c Collectives>,
    /// Number of the operation on the communicator (the same on every rank).
    seq: u64,
    /// Sequence number of the operation on the communicator (the same on every rank, since all
    /// ranks issue collectives in the same order), shifted into tag position.
    tag_base: i32,
    blocking: bool,
    /// Algorithm choices made so far in this operation (see `Operation::dispatch`).
    dispatches: Cell<u64>,
    /// A level of a hierarchical operation (`Levels`): where no rule applies, the device's
    /// own collectives run if it has them.
    level: bool,
    /// A traced operation's start and event, recorded when the run ends: boxed, so that an
    /// untraced run does not initialise and move the event.
    traced: Option<Box<Traced>>,
    /// Where this run, when it waits long, looks for proof of peers that chose differently.
    straddle: Cell<Straddle>,
    /// On a network level step of a `hierarchical` operation: its parent ([`Evidence::FlatPeers`]).
    flat_peers: Option<Evidence<'c>>,
}

/// What a traced run is (name, bytes, root, algorithm: filled in by the dispatch) and when it
/// started.
struct Traced {
    started: trace::Stamp,
    event: Cell<trace::Event>,
}

/// The operation is over however it ends (finished, failed, or its future dropped): a device
/// provider that orders operations by number (the shm lanes) passes the turn on.
impl Drop for Run<'_> {
    fn drop(&mut self) {
        if let Some(collectives) = self.collectives {
            if self.process.engine.is_abandoning() {
                collectives.provider().abandoned(self.seq);
            }
            collectives.provider().finished(self.seq);
        }
        if let Some(traced) = &self.traced {
            trace::record(Some(traced.started), || (self.comm.dev.rank(), traced.event.get()));
        }
    }
}

impl Deref for Run<'_> {
    type Target = Comm;

    fn deref(&self) -> &Comm {
        self.comm
    }
}

/// The arguments whose disagreement between ranks makes a message of `coll` the wrong length.
fn disagreeing_arguments(coll: Collective) -> &'static str {
    match coll {
        Collective::Bcast => "the buffer lengths",
        Collective::Scatter => "the root's send buffer or a receive buffer length",
        Collective::Gather => "a send buffer or the root's receive buffer length",
        Collective::Scatterv => "the root's sendcounts or a receive buffer length",
        Collective::Gatherv => "a send buffer length or the root's recvcounts",
        Collective::Allgather => "the send buffer lengths",
        Collective::Allgatherv => "the recvcounts or a send buffer length",
        Collective::Alltoall => "the buffer lengths",
        Collective::Alltoallv => "a rank's send_counts and its peer's recv_counts",
        Collective::Barrier => "nothing (a barrier message has no data)",
        Collective::Reduce | Collective::Allreduce | Collective::ReduceScatter | Collective::Scan => {
            "the vector lengths or counts"
        }
    }
}

/// A message of `coll` from `peer` that is not the `expected` length: the ranks disagree on
/// arguments. Names the call and the arguments, never the internal tag.
fn mismatch(coll: Collective, peer: usize, expected: usize, got: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!(
        "{coll}: rank {peer} sent {got} bytes where this rank expected {expected} (arguments differ between ranks: {})",
        disagreeing_arguments(coll)
    ))
}

fn check_length(raw: RawStatus, expected: usize, peer: usize, coll: Collective) -> Result<()> {
    if raw.bytes == expected { Ok(()) } else { Err(mismatch(coll, peer, expected, raw.bytes)) }
}

/// The outcome of a started operation: `expected` bytes for receives, `None` for sends. A
/// message too long for its buffer (the device's `Truncated`, which names the tag) is a mismatch.
fn outcome(result: Result<RawStatus>, peer: usize, expected: Option<usize>, coll: Collective) -> Result<()> {
    let raw = result.map_err(|e| failure(e, peer, expected, coll))?;
    expected.map_or(Ok(()), |bytes| check_length(raw, bytes, peer, coll))
}

/// A device error of a collective's message, with truncation reported as a mismatch.
fn failure(e: Error, peer: usize, expected: Option<usize>, coll: Collective) -> Error {
    match e {
        Error::Truncated { message_bytes, capacity, .. } => {
            mismatch(coll, peer, expected.unwrap_or(capacity), message_bytes)
        }
        e => e,
    }
}

impl<'c> Run<'c> {
    /// Starts the next collective on `comm`. Fails, without taking a number, when the device's
    /// provider refuses (called from inside a native collective's synchronous work on `comm`: a
    /// user op calling a collective).
    #[inline]
    pub(crate) fn new(comm: &'c Comm, blocking: bool) -> Result<Self> {
        Ok(Self::number(comm)?.begin(blocking))
    }

    /// Takes the next number on `comm` for a run built later ([`Numbered::start`]): where a
    /// nonblocking operation starts, its errors are reported, but its run is best built inside
    /// the operation's future, where it lives, rather than built and then moved there (the moves
    /// of a run just stored field by field stalled store forwarding).
    #[inline]
    pub(crate) fn number(comm: &'c Comm) -> Result<Numbered<'c>> {
        comm.check_live()?;
        if let Some(collectives) = comm.collectives.as_deref() {
            collectives.provider().may_start()?;
        }
        let seq = comm.coll_seq.get();
        comm.coll_seq.set(seq + 1);
        Ok(Numbered { comm, seq })
    }

    #[inline]
    fn numbered(comm: &'c Comm, seq: u64, blocking: bool, level: bool) -> Self {
        let tag_base = ((seq as u32 & SEQ_MASK) << COLL_BITS) as i32;
        let collectives = comm.collectives.as_deref();
        Run {
            comm,
            collectives,
            seq,
            tag_base,
            blocking,
            dispatches: Cell::new(0),
            level,
            traced: None,
            straddle: Cell::default(),
            flat_peers: None,
        }
    }

    /// The next `count` operations of `level`, a level of this operation's communicator that
    /// crosses processes (leaders, peers): waits in them look for peers that ran this
    /// operation flat ([`Evidence::FlatPeers`]).
    pub(crate) fn network_level_runs<'l>(&'l self, level: &'l Comm, count: u64, blocking: bool) -> LevelRuns<'l> {
        let mut runs = LevelRuns::take(level, count, blocking);
        runs.evidence = Some(Evidence::FlatPeers { parent: self.comm, seq: self.seq });
        runs
    }

    /// Ends the operation with an error if it has waited long and finds [`Evidence`] that
    /// peers in other processes chose another algorithm for it. Called by waits that found a
    /// request unfinished; costs a clock read where the run can straddle, nothing elsewhere.
    fn check_straddle(&self, coll: Collective) -> Result<()> {
        if !self.watched() {
            return Ok(());
        }
        let mut straddle = self.straddle.get();
        let now = Instant::now();
        let since = *straddle.waiting_since.get_or_insert(now);
        let due = straddle.looked.is_none_or(|at| now - at >= STRADDLE_LOOK_EVERY);
        let found = if now - since >= STRADDLE_PATIENCE && due {
            straddle.looked = Some(now);
            let passed_by = straddle.passed_by.into_iter().flatten();
            let hierarchical = passed_by.map(|(context, seq)| Evidence::HierarchicalPeers { context, seq });
            let mut evidence = self.flat_peers.into_iter().chain(hierarchical);
            evidence.find_map(|e| self.find(&e).transpose()).transpose()?
        } else {
            None
        };
        self.straddle.set(straddle);
        match found {
            Some(other) => Err(Error::InvalidArgument(format!(
                "{coll}: ranks of different processes chose different algorithms for the same call (this rank {}, \
                 a rank of another process {other}): the call's arguments, or the ranks' tunings, differ between ranks",
                if other == "hierarchical" { "a flat one" } else { "hierarchical" }
            ))),
            None => Ok(()),
        }
    }

    /// Whether waits of this run look for peers that chose differently.
    fn watched(&self) -> bool {
        self.flat_peers.is_some() || self.straddle.get().passed_by[0].is_some()
    }

    /// Blocks until `op` finished, looking for a straddle between its tests (the device's wait
    /// polls at least every park timeout).
    fn wait_watched(&self, mut op: InFlight<'_>, coll: Collective) -> Result<RawStatus> {
        let mut done = None;
        self.dev.wait_until(&mut || {
            done = op.test()?;
            if done.is_none() {
                self.check_straddle(coll)?;
            }
            Ok(done.is_some())
        })?;
        Ok(done.expect("the wait ends once the request finished"))
    }

    /// Whether a blocking receive from `peer` takes the watched path: only one from another
    /// process. A rank of a straddling process that waits forever on a peer of its own process
    /// waits on one that waits (with the same algorithm) on another process, which finds the
    /// evidence and fails the job.
    fn watches(&self, peer: usize) -> bool {
        self.watched() && {
            let placement = self.placement();
            placement.process_of(self.group.world_rank(peer)) != placement.process_of(self.dev.rank())
        }
    }

    /// Looks once for `evidence`; names the other choice if found.
    fn find(&self, evidence: &Evidence<'_>) -> Result<Option<&'static str>> {
        // A peer that has exited, or a wildcard no rank can still match, is no evidence: the
        // device fails such probes inside a wait, but the operation may still complete.
        let probe = |context, source, seq| {
            Collective::ALL.into_iter().try_fold(false, |found, coll| {
                Ok::<_, Error>(
                    found
                        || match self.dev.iprobe(MatchSpec { context, source, tag: tag_of(seq, coll) }) {
                            Ok(status) => status.is_some(),
                            Err(Error::PeerExited { .. } | Error::Deadlock { .. }) => false,
                            Err(e) => return Err(e),
                        },
                )
            })
        };
        match *evidence {
            Evidence::FlatPeers { parent, seq } => {
                let placement = parent.placement();
                let mine = placement.process_of(self.dev.rank());
                for &world in parent.group.members() {
                    if placement.process_of(world) != mine && probe(parent.coll_context(), Source::Rank(world), seq)? {
                        return Ok(Some("a flat one"));
                    }
                }
                Ok(None)
            }
            Evidence::HierarchicalPeers { context, seq } => {
                Ok(probe(context, Source::Any, seq)?.then_some("hierarchical"))
            }
        }
    }

    /// Notes what a traced run is, at its first algorithm choice.
    #[inline]
    pub(crate) fn trace_choice(&self, coll: Collective, bytes: usize, algorithm: Algorithm) {
        if let Some(traced) = &self.traced
            && self.dispatches.get() == 1
        {
            let event = traced.event.get();
            let kind = trace::Kind::Collective(coll.name());
            traced.event.set(trace::Event { kind, bytes: Some(bytes), algorithm: Some(algorithm.name()), ..event });
        }
    }

    /// Notes the root of a traced run.
    pub(crate) fn trace_root(&self, root: usize) {
        if let Some(traced) = &self.traced {
            traced.event.set(trace::Event { root: Some(root), ..traced.event.get() });
        }
    }

    /// The communicator of the operation, for as long as it lives.
    pub(crate) fn comm(&self) -> &'c Comm {
        self.comm
    }

    /// Whether this operation finishes each step in place (a blocking call).
    pub(crate) fn is_blocking(&self) -> bool {
        self.blocking
    }

    /// Whether this operation is a level of a hierarchical one.
    pub(crate) fn is_level(&self) -> bool {
        self.level
    }

    /// The device's collectives for the communicator, if it has its own.
    pub(crate) fn collectives(&self) -> Option<&'c Collectives> {
        self.collectives
    }

    /// The device-level description of this run, for the device's collectives.
    #[inline]
    pub(crate) fn operation(&self) -> Operation<'c> {
        Operation {
            seq: self.seq,
            dispatch: self.dispatches.get().saturating_sub(1),
            blocking: self.blocking,
            engine_polling: self.process.engine.is_polling(),
            dev: &*self.comm.dev,
        }
    }

    /// Counts an algorithm choice of this operation; one that does not use the device's own
    /// collectives is reported to them, so peers that chose them fail instead of waiting.
    ///
    /// Likewise one that is not `hierarchical`, on a communicator with levels, passes by one
    /// operation of each of this rank's level communicators ([`LevelRuns::pass_by`]): process
    /// peers that chose `hierarchical` wait first on one of those (their operation numbers taken
    /// from the same counters), find it bypassed and fail, and the job's failure propagation
    /// then fails the ranks waiting for them. In a correct program every rank makes the same
    /// choices, so the level counters stay aligned. The cost: a counter and an atomic mark per
    /// level communicator (one to four) per flat choice; nothing where there are no levels.
    #[inline]
    pub(crate) fn chose(&self, algorithm: Algorithm) -> Algorithm {
        let dispatch = self.dispatches.get();
        self.dispatches.set(dispatch + 1);
        if algorithm != Algorithm::Native
            && let Some(collectives) = self.collectives
        {
            collectives.provider().bypassed(self.seq, dispatch);
        }
        if algorithm != Algorithm::Hierarchical
            && let Some(levels) = self.comm.levels()
        {
            levels.each_level(|level| {
                let seq = LevelRuns::pass_by(level);
                // Levels without the device's own collectives cross processes.
                let mut straddle = self.straddle.get();
                if level.collectives.is_none()
                    && let Some(slot) = straddle.passed_by.iter_mut().find(|slot| slot.is_none())
                {
                    *slot = Some((level.coll_context(), seq));
                    self.straddle.set(straddle);
                }
            });
        }
        algorithm
    }

    /// Tag of this operation's messages of `coll` (composites run several collectives).
    fn tag(&self, coll: Collective) -> i32 {
        self.tag_base | (coll as i32 + 1)
    }

    /// Runs a blocking operation's future to its end.
    pub(crate) fn finish<F: Future<Output = Result<()>>>(&self, operation: F) -> Result<()> {
        let mut operation = pin!(operation);
        let mut cx = Context::from_waker(Waker::noop());
        // Blocking runs never yield, unless a step waits for an earlier nonblocking operation
        // of this rank (a shared-memory slot still in use): then the device wait drives both.
        let mut outcome = None;
        let mut poll = || match operation.as_mut().poll(&mut cx) {
            Poll::Ready(result) => {
                outcome = Some(result);
                Ok(true)
            }
            Poll::Pending => Ok(false),
        };
        if !poll()? {
            self.dev.wait_until(&mut poll)?;
        }
        outcome.expect("the operation finished")
    }

    /// Finishes a started device operation: waits in place for blocking runs, yields until the
    /// device completes it for nonblocking ones (releasing the request if the run is dropped).
    async fn complete(
        &self,
        started: Outcome<'_>,
        peer: usize,
        expected: Option<usize>,
        coll: Collective,
    ) -> Result<()> {
        match started {
            Outcome::Complete(result) => outcome(result, peer, expected, coll),
            Outcome::InFlight(op) if self.blocking => outcome(op.wait(), peer, expected, coll),
            Outcome::InFlight(op) => {
                let mut batch = Batch { run: self, reqs: vec![(op, peer, expected, coll)], failed: None };
                poll_fn(|_| batch.poll_or_wait()).await
            }
        }
    }

    /// Sends `bytes` to `peer`.
    pub(crate) async fn coll_send(&self, bytes: &[u8], peer: usize, coll: Collective) -> Result<()> {
        let dest = self.group.world_rank(peer);
        // SAFETY: the request lives in this future, which is never leaked: a blocking run
        // finishes it in place, and the engine finishes or drops a nonblocking one before its
        // scope ends (`Engine::finish_scope`).
        let started = unsafe {
            InFlight::send(&*self.dev, bytes, dest, self.tag(coll), self.coll_context(), SendMode::Standard)?
        };
        self.complete(started, peer, None, coll).await
    }

    fn spec(&self, peer: usize, coll: Collective) -> MatchSpec {
        MatchSpec {
            context: self.coll_context(),
            source: Source::Rank(self.group.world_rank(peer)),
            tag: self.tag(coll),
        }
    }

    /// Receives exactly `bytes.len()` bytes from `peer`.
    pub(crate) async fn coll_recv(&self, bytes: &mut [u8], peer: usize, coll: Collective) -> Result<()> {
        let spec = self.spec(peer, coll);
        let expected = bytes.len();
        if self.blocking && !self.watches(peer) {
            return outcome(requests::recv(&*self.dev, bytes, spec), peer, Some(expected), coll);
        }
        if self.blocking {
            // SAFETY: as in `coll_send`.
            let result = match unsafe { InFlight::recv(&*self.dev, bytes, spec)? } {
                Outcome::Complete(result) => result,
                Outcome::InFlight(op) => self.wait_watched(op, coll),
            };
            return outcome(result, peer, Some(expected), coll);
        }
        if expected <= UNPOSTED_RECV_LIMIT && !self.watched() && self.dev.receives_unposted() {
            return self.recv_unposted(bytes, spec, peer, coll).await;
        }
        // SAFETY: as in `coll_send`.
        let started = unsafe { InFlight::recv(&*self.dev, bytes, spec)? };
        self.complete(started, peer, Some(expected), coll).await
    }

    /// A nonblocking run's small receive, never posted: taken once it has arrived, or, when the
    /// rank waits for this operation alone, received by the device's blocking path as in the
    /// blocking twin. A posted receive costs both sides a handshake, and a small message gains
    /// nothing by landing in the buffer while the rank computes. Sound only because a run
    /// awaits each `coll_recv` before it posts another receive with the same peer and tag.
    async fn recv_unposted(&self, bytes: &mut [u8], spec: MatchSpec, peer: usize, coll: Collective) -> Result<()> {
        let expected = bytes.len();
        poll_fn(|_| {
            let received = if self.process.engine.is_waited_alone() {
                requests::recv(&*self.dev, bytes, spec)
            } else {
                match requests::try_recv(&*self.dev, bytes, spec) {
                    Some(received) => received,
                    None => return Poll::Pending,
                }
            };
            Poll::Ready(outcome(received, peer, Some(expected), coll))
        })
        .await
    }

    /// Sends `send` to `dest` while receiving exactly `recv.len()` bytes from `source`.
    ///
    /// The send is started first (small ones finish at once), then the receive goes as in
    /// [`Run::coll_recv`]: a blocking run's through the device's blocking receive, a nonblocking
    /// run's small one unposted, neither of which posts a request. A pending (rendezvous) send
    /// cannot deadlock this, because its receiver copies the data itself.
    pub(crate) async fn coll_sendrecv(
        &self,
        send: &[u8],
        dest: usize,
        recv: &mut [u8],
        source: usize,
        coll: Collective,
    ) -> Result<()> {
        let mut both = self.batch();
        both.isend(send, dest, coll)?;
        // The peer may never take a pending send after a failed receive: `both` releases it.
        self.coll_recv(recv, source, coll).await?;
        both.wait_all().await
    }

    /// A batch of operations started together and finished together (a non-dependent stage).
    pub(crate) fn batch<'a>(&'a self) -> Batch<'a> {
        Batch { run: self, reqs: Vec::new(), failed: None }
    }
}

/// `count` operation numbers of a level communicator, taken together when a hierarchical
/// operation starts, so that every member numbers the level's operations alike however the
/// parent's nonblocking operations interleave. Each becomes a [`Run`] when its step starts;
/// numbers never used are reported abandoned and finished on drop (a failed or abandoned
/// operation), so the device's collectives, and peers waiting in them, never wait for them.
pub(crate) struct LevelRuns<'c> {
    comm: &'c Comm,
    blocking: bool,
    next: Cell<u64>,
    end: u64,
    /// Where the runs look for peers that chose differently (network levels).
    evidence: Option<Evidence<'c>>,
}

impl<'c> LevelRuns<'c> {
    /// The next `count` operations on `comm`, finishing steps in place when `blocking`.
    pub(crate) fn take(comm: &'c Comm, count: u64, blocking: bool) -> Self {
        let next = comm.coll_seq.get();
        comm.coll_seq.set(next + count);
        LevelRuns { comm, blocking, next: Cell::new(next), end: next + count, evidence: None }
    }

    /// The next of these operations, started.
    pub(crate) fn next(&self) -> Result<Run<'c>> {
        let seq = self.next.get();
        if seq == self.end {
            return Err(Error::InvalidArgument("a hierarchical collective ran more level steps than it took".into()));
        }
        if let Some(collectives) = self.comm.collectives.as_deref() {
            collectives.provider().may_start()?;
        }
        self.next.set(seq + 1);
        let mut run = Run::numbered(self.comm, seq, self.blocking, true);
        run.flat_peers = self.evidence;
        Ok(run)
    }
}

impl LevelRuns<'_> {
    /// Takes the next operation of level communicator `comm` and never runs it: peers waiting
    /// in any part of it on the device's collectives fail instead of waiting for this rank
    /// (see [`Run::chose`]). Allocation-free. Returns the operation's number.
    pub(crate) fn pass_by(comm: &Comm) -> u64 {
        let seq = comm.coll_seq.get();
        comm.coll_seq.set(seq + 1);
        if let Some(collectives) = comm.collectives.as_deref() {
            collectives.provider().bypassed(seq, EVERY_DISPATCH);
            collectives.provider().finished(seq);
        }
        seq
    }
}

impl Drop for LevelRuns<'_> {
    fn drop(&mut self) {
        if let Some(collectives) = self.comm.collectives.as_deref() {
            // Never started: the operation failed or was dropped before reaching them.
            (self.next.get()..self.end).for_each(|seq| {
                collectives.provider().abandoned(seq);
                collectives.provider().finished(seq);
            });
        }
    }
}

/// Requests of one stage on buffers borrowed for `'a`, released on drop (each is an
/// [`InFlight`]) so an early error or an abandoned nonblocking run never leaves the device
/// pointing at a caller's buffer. Crate-internal and never leaked.
pub(crate) struct Batch<'a> {
    run: &'a Run<'a>,
    /// (request, peer, expected bytes for receives, collective).
    reqs: Vec<(InFlight<'a>, usize, Option<usize>, Collective)>,
    /// First error of an operation that finished when it was started.
    failed: Option<Error>,
}

impl<'a> Batch<'a> {
    fn track(&mut self, started: Outcome<'a>, peer: usize, expected: Option<usize>, coll: Collective) {
        match started {
            Outcome::InFlight(op) => self.reqs.push((op, peer, expected, coll)),
            Outcome::Complete(result) => {
                if let Err(e) = outcome(result, peer, expected, coll) {
                    self.failed.get_or_insert(e);
                }
            }
        }
    }

    /// Starts sending `bytes` to `peer`.
    pub(crate) fn isend(&mut self, bytes: &'a [u8], peer: usize, coll: Collective) -> Result<()> {
        let run = self.run;
        let dest = run.group.world_rank(peer);
        // SAFETY: the request lives in this batch, which is never leaked (see `Run::coll_send`).
        let started =
            unsafe { InFlight::send(&*run.dev, bytes, dest, run.tag(coll), run.coll_context(), SendMode::Standard) };
        // A send done at once is only looked at, not moved (see `InFlight::send`).
        match started {
            Ok(Outcome::Complete(Ok(_))) => {}
            Ok(started) => self.track(started, peer, None, coll),
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Starts receiving exactly `bytes.len()` bytes from `peer`.
    pub(crate) fn irecv(&mut self, bytes: &'a mut [u8], peer: usize, coll: Collective) -> Result<()> {
        let spec = self.run.spec(peer, coll);
        let expected = bytes.len();
        // SAFETY: the request lives in this batch, which is never leaked (see `Run::coll_send`).
        let started = unsafe { InFlight::recv(&*self.run.dev, bytes, spec)? };
        self.track(started, peer, Some(expected), coll);
        Ok(())
    }

    /// Tests every outstanding request once; ready when all have finished, with the first
    /// error. Finished requests leave the batch, so `Drop` only releases the rest.
    fn poll_all(&mut self) -> Poll<Result<()>> {
        let failed = &mut self.failed;
        self.reqs.retain_mut(|(op, peer, expected, coll)| match op.test() {
            Ok(None) => true,
            Ok(Some(raw)) => {
                if let Err(e) = outcome(Ok(raw), *peer, *expected, *coll) {
                    failed.get_or_insert(e);
                }
                false
            }
            Err(e) => {
                failed.get_or_insert(failure(e, *peer, *expected, *coll));
                false
            }
        });
        let Some(&(_, _, _, coll)) = self.reqs.first() else {
            return Poll::Ready(self.failed.take().map_or(Ok(()), Err));
        };
        match self.run.check_straddle(coll) {
            Ok(()) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// Finishes every request; the first error wins, and all requests are finished or
    /// released when this returns.
    pub(crate) async fn wait_all(mut self) -> Result<()> {
        if self.reqs.is_empty() {
            return self.failed.take().map_or(Ok(()), Err);
        }
        poll_fn(|_| self.poll_or_wait()).await
    }

    /// [`Batch::poll_all`], except that a rank waiting for this operation alone waits here
    /// until the batch is done, as the blocking twin would (see `Engine::progress_waited`):
    /// the device's wait loop tests the requests directly instead of going back through the
    /// engine and every enclosing future after each test.
    fn poll_or_wait(&mut self) -> Poll<Result<()>> {
        let polled = self.poll_all();
        if polled.is_ready() || !self.run.process.engine.is_waited_alone() {
            return polled;
        }
        let mut outcome = None;
        let waited = self.run.dev.wait_until(&mut || match self.poll_all() {
            Poll::Ready(result) => {
                outcome = Some(result);
                Ok(true)
            }
            Poll::Pending => Ok(false),
        });
        // A failed wait (the job aborted) leaves the requests to the batch's drop.
        Poll::Ready(outcome.unwrap_or(waited))
    }
}
