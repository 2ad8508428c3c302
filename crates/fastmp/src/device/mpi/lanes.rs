//! The hybrid device's inter-process side over the system MPI (`FASTMP_INTERPROCESS=mpi`): one MPI
//! process per hybrid process, whose `T` thread ranks all call MPI.
//!
//! **Thread level.** MPI_THREAD_MULTIPLE (asked for whatever `FASTMP_MPI_THREADS` says; a clear
//! error where MPI does not grant it and `T > 1`). A funnelled mode (one thread driving MPI for
//! the others) was not chosen: every remote message would cost two thread hand-offs, and the
//! driving thread needs a core of its own, which a 2 × 2 job on 2 cores does not have. Open MPI
//! 4.1 grants MULTIPLE with its ob1/tcp/vader paths.
//!
//! **Addressing.** Fastmp rank `r` is thread `r % T` of MPI process `r / T`. MPI matches on
//! (communicator, source process, tag) only, and fastmp's (context, source rank, tag) does not fit
//! there (collective tags use all 31 bits, contexts grow), so a message travels as two MPI
//! messages on communicators made per destination thread `t` when the job starts (two duplicates
//! of `MPI_COMM_WORLD` each, [`Lanes`]):
//! - a 24-byte header on `headers[t]` (context, source thread, tag, payload tag, length), which
//!   thread `t` drains (`MPI_Improbe` from any source, then receives it) into fastmp's matching
//!   engine (`device::matching`); the engine gives the message to the earliest posted receive
//!   that matches, so MPI's matching order and per-sender non-overtaking hold;
//! - the payload on `payloads[t]`, under a tag unique per (sender rank, destination rank) among
//!   messages in flight (`sequence << 8 | source thread`), received by an exactly sized
//!   `MPI_Irecv` only once a receive has matched the header: straight into the receive's buffer,
//!   so a synchronous send (`MPI_Issend` of the payload) completes exactly when its receive
//!   matched. The payload of an unmatched standard send up to the eager limit is received at
//!   once into a buffer of its own, as tcp's eager messages are: MPI may hold a send above its
//!   transport's own eager size (4 KiB over shared memory in Open MPI) until a receive matches
//!   it, and a standard send that small must not wait for the receiver's program (two ranks
//!   that send to each other before receiving would hang). Larger unmatched payloads wait in
//!   MPI's own unexpected queue.
//!
//! **Waiting.** MPI cannot wake a parked thread, so waits poll (spin, yield, then short sleeps:
//! the policy of `device::wait`); with MULTIPLE any thread's MPI call progresses the process.
//!
//! **Failure.** A failing rank aborts the MPI job (`MPI_Abort`, after fastmp's report): its
//! process and every other end at once, so nobody is left waiting.

use std::cell::{Cell, RefCell};
use std::ffi::c_int;
use std::sync::Arc;

use super::ffi::{self, Slot};
use super::{Level, Route, check, improbe, init_mpi, test_slot, wait_slot, world_dup};
use crate::device::hybrid::Remote;
use crate::device::matching::{Envelope, Matcher};
use crate::device::slab::Slab;
use crate::device::tcp::{Park, Waker};
use crate::device::wait::{Backoff, WaitPolicy};
use crate::device::{
    ContextId, Device, Failure, MatchSpec, MessageId, Placement, RawStatus, ReqId, SendMode, Source, Started,
};
use crate::error::{Error, Result};

/// Bits of a payload tag that carry the source thread; the rest carry the sequence number.
const THREAD_BITS: u32 = 8;
/// Most thread ranks per process over MPI.
pub(crate) const MAX_THREADS: usize = 1 << THREAD_BITS;
/// Header words: context, source thread (with [`SYNCHRONOUS`]), tag, payload tag, length (low,
/// high).
const HEADER_WORDS: usize = 6;
const HEADER_BYTES: usize = HEADER_WORDS * 4;
/// Marks a synchronous send in the header's source-thread word.
const SYNCHRONOUS: u32 = 1 << 31;

/// The MPI communicators of one hybrid job on this process, made by its main thread before the
/// thread ranks start (duplicating is collective over the processes), freed after they end.
pub(crate) struct Lanes {
    /// Per destination thread: headers, payloads.
    headers: Vec<Route>,
    payloads: Vec<c_int>,
    process: usize,
    per_process: usize,
    np: usize,
    /// Unmatched standard payloads up to this size are received at once (module documentation).
    eager_limit: usize,
    /// Sequence numbers wrap at this mask (the tags MPI allows, less the thread bits).
    sequence_mask: u32,
    placement: Placement,
    policy: WaitPolicy,
}

impl Lanes {
    /// Joins the MPI job as one process of a hybrid job of `np` ranks at `per_process` threads
    /// each. Fails, clearly, when MPI's job does not have that many processes, grants too low a
    /// thread level, or allows too few tags.
    pub(crate) fn new(np: usize, per_process: usize, eager_limit: usize) -> Result<Lanes> {
        if per_process > MAX_THREADS {
            return Err(Error::InvalidArgument(format!(
                "hybrid device over mpi: at most {MAX_THREADS} threads per process (asked for {per_process})"
            )));
        }
        let multiple = init_mpi(if per_process > 1 { Level::Multiple } else { Level::Serialized })?;
        if per_process > 1 && !multiple {
            return Err(Error::InvalidArgument(
                "hybrid device over mpi: the MPI library did not grant MPI_THREAD_MULTIPLE (or an earlier mpi-device \
                 job in this process initialised it without), which several thread ranks per process need; use \
                 FASTMP_INTERPROCESS=tcp or one thread per process"
                    .into(),
            ));
        }
        let mut lanes = Lanes {
            headers: Vec::with_capacity(per_process),
            payloads: Vec::with_capacity(per_process),
            process: 0,
            per_process,
            np,
            eager_limit,
            sequence_mask: 0,
            placement: Placement::blocks(np, per_process),
            policy: WaitPolicy::for_ranks(1),
        };
        // Pushed one by one, so that `Drop` frees whatever was made before an error.
        for _ in 0..per_process {
            lanes.headers.push(Route { handle: world_dup()?, members: None });
            lanes.payloads.push(world_dup()?);
        }
        let (mut rank, mut size) = (0, 0);
        let handle = lanes.payloads[0];
        // SAFETY: the shim writes one int each.
        check(unsafe { ffi::fastmp_mpi_comm_rank(handle, &mut rank) }, "MPI_Comm_rank")?;
        // SAFETY: as above.
        check(unsafe { ffi::fastmp_mpi_comm_size(handle, &mut size) }, "MPI_Comm_size")?;
        let processes = np.div_ceil(per_process);
        if size as usize != processes {
            return Err(Error::InvalidArgument(format!(
                "hybrid device over mpi: {np} ranks at {per_process} threads per process need {processes} MPI \
                 processes, but this MPI job has {size}"
            )));
        }
        let mut tag_ub: c_int = 0;
        // SAFETY: the shim writes one int.
        check(unsafe { ffi::fastmp_mpi_tag_ub(&mut tag_ub) }, "MPI_Comm_get_attr(MPI_TAG_UB)")?;
        let sequence_bits = (32 - (tag_ub.max(0) as u32).leading_zeros()).saturating_sub(THREAD_BITS);
        if sequence_bits < 8 {
            return Err(Error::other(format!("hybrid device over mpi: MPI_TAG_UB {tag_ub} is too small")));
        }
        lanes.sequence_mask = ((1u64 << sequence_bits) - 1) as u32;
        lanes.process = rank as usize;
        let by_process = super::placement(handle, processes)?;
        let nodes: Vec<usize> = (0..np).map(|r| by_process.node_of(r / per_process)).collect();
        let process_of: Vec<usize> = (0..np).map(|r| r / per_process).collect();
        lanes.placement = Placement::from_keys(&process_of, &nodes);
        // The placement is by world (thread) rank: this process's first one is `rank * per_process`.
        let node = lanes.placement.node_of(rank as usize * per_process);
        let on_node = (0..np).filter(|&r| lanes.placement.node_of(r) == node).count();
        lanes.policy = WaitPolicy::for_ranks_on(on_node, super::online_cpus());
        Ok(lanes)
    }

    /// This process's number in the job (its MPI rank).
    pub(crate) fn process(&self) -> usize {
        self.process
    }

    /// The processes and nodes of every rank.
    pub(crate) fn placement(&self) -> &Placement {
        &self.placement
    }

    /// World rank `rank`'s endpoint (one of this process's thread ranks).
    pub(crate) fn endpoint(self: &Arc<Self>, rank: usize) -> MpiThreadEndpoint {
        MpiThreadEndpoint {
            lanes: self.clone(),
            rank,
            thread: rank % self.per_process,
            state: RefCell::new(State {
                matcher: Matcher::with_capacity(64, 64),
                requests: Slab::with_capacity(64),
                sent: vec![0; self.np],
            }),
            finalized: Cell::new(false),
        }
    }
}

impl Drop for Lanes {
    fn drop(&mut self) {
        for handle in self.headers.iter().map(|r| r.handle).chain(self.payloads.iter().copied()) {
            // SAFETY: each handle was made by the shim for this job and is freed once.
            unsafe { ffi::fastmp_mpi_comm_free(handle) };
        }
    }
}

/// Where an arrived message's payload is.
struct Arrival {
    process: c_int,
    payload_tag: c_int,
    /// An eager payload already being received into a buffer of its own (its request).
    early: Option<(Slot, Vec<u8>)>,
}

enum Request {
    /// A payload send MPI has not finished.
    Send { slot: Slot, tag: i32, bytes: usize },
    /// A receive in the matching engine, no message yet.
    Posted { buf: *mut u8, capacity: usize },
    /// A matched receive whose payload MPI is delivering; into `whole` for an eager payload
    /// received before its receive, or a message longer than `capacity` (truncation).
    Receiving { slot: Slot, status: RawStatus, buf: *mut u8, capacity: usize, whole: Option<Vec<u8>> },
    /// Finished at matching (an MPI error, or cancelled).
    Done(Result<RawStatus>),
    /// A message taken by `improbe`, its payload still in MPI.
    Message { env: Envelope, arrival: Arrival },
}

struct State {
    matcher: Matcher<Arrival>,
    requests: Slab<Request>,
    /// Messages sent to each world rank (payload tags' sequence numbers).
    sent: Vec<u32>,
}

/// One thread rank's endpoint to the other processes' ranks over MPI (its rank's thread only).
pub(crate) struct MpiThreadEndpoint {
    lanes: Arc<Lanes>,
    rank: usize,
    /// This rank's thread in its process (`rank % T`): its lanes.
    thread: usize,
    state: RefCell<State>,
    finalized: Cell<bool>,
}

fn stale() -> Error {
    Error::InvalidArgument("request handle is stale (already completed or released)".into())
}

impl MpiThreadEndpoint {
    fn check_live(&self) -> Result<()> {
        if self.finalized.get() { Err(Error::Finalized("mpi device")) } else { Ok(()) }
    }

    fn check_rank(&self, rank: usize) -> Result<()> {
        if rank >= self.lanes.np {
            return Err(Error::RankOutOfRange { rank, size: self.lanes.np });
        }
        if rank / self.lanes.per_process == self.lanes.process {
            return Err(Error::InvalidArgument(format!(
                "hybrid device over mpi: rank {rank} is a thread peer of rank {} (shared memory carries its messages)",
                self.rank
            )));
        }
        Ok(())
    }

    /// Receives every header that has arrived for this thread and matches it: to the earliest
    /// posted receive it fits, else into the unexpected messages.
    fn drain(&self) -> Result<()> {
        let lane = &self.lanes.headers[self.thread];
        while let Some((mut message, status)) = improbe(lane, -1, super::Tag::ANY)? {
            let mut header = [0u32; HEADER_WORDS];
            let mut slot: Slot = 0;
            // SAFETY: `header` has room for the header, which is received before it is read.
            let rc =
                unsafe { ffi::fastmp_mpi_imrecv(header.as_mut_ptr().cast(), HEADER_BYTES, &mut message, &mut slot) };
            check(rc, "MPI_Imrecv (header)")?;
            let (rc, _) = wait_slot(self.lanes.policy, &mut slot);
            check(rc, "MPI_Test (header)")?;
            let [context, thread_word, tag, payload_tag, low, high] = header;
            let (thread, sync) = (thread_word & !SYNCHRONOUS, thread_word & SYNCHRONOUS != 0);
            if status.bytes != HEADER_BYTES || thread as usize >= self.lanes.per_process {
                return Err(Error::other(format!(
                    "hybrid device over mpi: malformed header from process {} ({} bytes)",
                    status.source, status.bytes
                )));
            }
            let env = Envelope {
                source: status.source * self.lanes.per_process + thread as usize,
                context,
                tag: tag as i32,
                len: (u64::from(high) << 32 | u64::from(low)) as usize,
            };
            let mut arrival =
                Arrival { process: status.source as c_int, payload_tag: payload_tag as c_int, early: None };
            let mut state = self.state.borrow_mut();
            match state.matcher.take_posted(&env) {
                Some(id) => {
                    let Ok(request) = state.requests.get_mut(id) else { continue };
                    if let Request::Posted { buf, capacity } = *request {
                        *request = self.receive_payload(env, arrival, buf, capacity);
                    }
                }
                None => {
                    if !sync && env.len <= self.lanes.eager_limit {
                        let mut data = vec![0u8; env.len];
                        arrival.early = Some((self.post_payload(data.as_mut_ptr(), env.len, &arrival)?, data));
                    }
                    state.matcher.push_unexpected(env, arrival);
                }
            }
        }
        Ok(())
    }

    /// Posts the exactly sized receive of `arrival`'s payload into `target`.
    fn post_payload(&self, target: *mut u8, len: usize, arrival: &Arrival) -> Result<Slot> {
        let mut slot: Slot = 0;
        let handle = self.lanes.payloads[self.thread];
        // SAFETY: the caller gives `len` writable bytes at `target` that stay valid until the
        // request completes (a receive's buffer under the device's buffer contract, or a buffer
        // the request owns).
        let rc = unsafe {
            ffi::fastmp_mpi_irecv(target.cast(), len, arrival.process, arrival.payload_tag, handle, &mut slot)
        };
        check(rc, "MPI_Irecv (payload)").map(|()| slot)
    }

    /// Receives the payload of a matched message into `buf`: its early copy, or straight from
    /// MPI, or whole into a temporary buffer when it is longer than `capacity`.
    fn receive_payload(&self, env: Envelope, arrival: Arrival, buf: *mut u8, capacity: usize) -> Request {
        let status = env.status();
        if let Some((slot, data)) = arrival.early {
            return Request::Receiving { slot, status, buf, capacity, whole: Some(data) };
        }
        let mut whole = (env.len > capacity).then(|| vec![0u8; env.len]);
        let target = whole.as_mut().map_or(buf, |w| w.as_mut_ptr());
        match self.post_payload(target, env.len, &arrival) {
            Ok(slot) => Request::Receiving { slot, status, buf, capacity, whole },
            Err(e) => Request::Done(Err(e)),
        }
    }

    /// The outcome of a request MPI finished (`rc`, `cancelled`).
    fn finish(&self, request: Request, rc: c_int, cancelled: bool) -> Result<RawStatus> {
        match request {
            Request::Send { tag, bytes, .. } => {
                check(rc, "MPI_Test (send)")?;
                Ok(RawStatus { source: self.rank, tag, bytes, cancelled })
            }
            Request::Receiving { status, buf, capacity, whole, .. } => {
                check(rc, "MPI_Test (receive)")?;
                if let Some(whole) = whole {
                    // SAFETY: the receive's buffer holds `capacity` bytes (buffer contract).
                    unsafe { std::ptr::copy_nonoverlapping(whole.as_ptr(), buf, whole.len().min(capacity)) };
                }
                crate::device::receive_result(status.source, status.tag, status.bytes, capacity)
            }
            Request::Done(result) => result,
            Request::Posted { .. } | Request::Message { .. } => Err(stale()),
        }
    }

    /// Tracks `request`, or returns its outcome if MPI already finished it.
    fn started(&self, mut request: Request) -> Result<Started> {
        let done = match &mut request {
            Request::Send { slot, .. } | Request::Receiving { slot, .. } => test_slot(slot),
            Request::Done(_) => Some((0, false)),
            _ => None,
        };
        match done {
            Some((rc, cancelled)) => Ok(Started::Complete(self.finish(request, rc, cancelled))),
            None => Ok(Started::Pending(self.state.borrow_mut().requests.insert(request))),
        }
    }

    /// Waits until MPI has finished with `request`'s buffer (release).
    fn settle(&self, mut request: Request) {
        match &mut request {
            Request::Send { slot, .. } | Request::Receiving { slot, .. } => {
                wait_slot(self.lanes.policy, slot);
            }
            Request::Posted { .. } | Request::Done(_) | Request::Message { .. } => {}
        }
        if let Request::Message { env, arrival } = request {
            // Its payload must leave MPI: received into a scratch buffer.
            let request = self.receive_payload(env, arrival, std::ptr::NonNull::dangling().as_ptr(), 0);
            self.settle(request);
        }
    }
}

impl Device for MpiThreadEndpoint {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.lanes.np
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
        self.check_rank(dest)?;
        let (process, thread) = ((dest / self.lanes.per_process) as c_int, dest % self.lanes.per_process);
        let sequence = {
            let mut state = self.state.borrow_mut();
            let sent = &mut state.sent[dest];
            *sent = sent.wrapping_add(1);
            *sent & self.lanes.sequence_mask
        };
        let payload_tag = (sequence << THREAD_BITS | self.thread as u32) as c_int;
        let thread_word = self.thread as u32 | if mode == SendMode::Synchronous { SYNCHRONOUS } else { 0 };
        let header = [context, thread_word, tag as u32, payload_tag as u32, len as u32, (len as u64 >> 32) as u32];
        let (mut slot, mut done): (Slot, c_int) = (0, 0);
        // SAFETY: `header` stays alive and unchanged until the send completes below (a small
        // send MPI completes eagerly, without the receiver).
        let rc = unsafe {
            ffi::fastmp_mpi_isend(
                header.as_ptr().cast(),
                HEADER_BYTES,
                process,
                0,
                self.lanes.headers[thread].handle,
                0,
                &mut slot,
                &mut done,
            )
        };
        check(rc, "MPI_Isend (header)")?;
        if done == 0 {
            let (rc, _) = wait_slot(self.lanes.policy, &mut slot);
            check(rc, "MPI_Test (header)")?;
        }
        let sync = c_int::from(mode == SendMode::Synchronous);
        let (mut slot, mut done): (Slot, c_int) = (0, 0);
        // SAFETY: the caller keeps `buf..buf+len` readable until the request completes or is
        // released (the device's buffer contract).
        let rc = unsafe {
            ffi::fastmp_mpi_isend(
                buf.cast(),
                len,
                process,
                payload_tag,
                self.lanes.payloads[thread],
                sync,
                &mut slot,
                &mut done,
            )
        };
        check(rc, "MPI_Isend (payload)")?;
        if done != 0 {
            return Ok(Started::Complete(Ok(RawStatus::sent(self.rank, tag, len))));
        }
        self.started(Request::Send { slot, tag, bytes: len })
    }

    unsafe fn irecv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Result<Started> {
        self.check_live()?;
        if let Source::Rank(r) = spec.source {
            self.check_rank(r)?;
        }
        self.drain()?;
        let arrived = self.state.borrow_mut().matcher.take_unexpected(&spec);
        match arrived {
            Some((env, arrival)) => self.started(self.receive_payload(env, arrival, buf, capacity)),
            None => {
                let mut state = self.state.borrow_mut();
                let id = state.requests.insert(Request::Posted { buf, capacity });
                state.matcher.push_posted(spec, id);
                Ok(Started::Pending(id))
            }
        }
    }

    fn iprobe(&self, spec: MatchSpec) -> Result<Option<RawStatus>> {
        self.check_live()?;
        self.drain()?;
        Ok(self.state.borrow().matcher.peek(&spec).map(Envelope::status))
    }

    fn test(&self, req: ReqId) -> Result<Option<RawStatus>> {
        self.check_live()?;
        self.drain()?;
        let mut state = self.state.borrow_mut();
        let request = state.requests.get_mut(req).map_err(|_| stale())?;
        let done = match request {
            Request::Posted { .. } => return Ok(None),
            Request::Message { .. } => return Err(stale()),
            Request::Done(_) => (0, false),
            Request::Send { slot, .. } | Request::Receiving { slot, .. } => match test_slot(slot) {
                Some(done) => done,
                None => return Ok(None),
            },
        };
        let request = state.requests.remove(req).ok_or_else(stale)?;
        drop(state);
        self.finish(request, done.0, done.1).map(Some)
    }

    /// A receive still without a message is cancelled; a send cannot be (its header is out).
    fn cancel(&self, req: ReqId) -> Result<()> {
        self.check_live()?;
        let mut state = self.state.borrow_mut();
        let request = state.requests.get_mut(req).map_err(|_| stale())?;
        if let Request::Posted { .. } = request {
            *request = Request::Done(Ok(RawStatus { source: self.rank, tag: 0, bytes: 0, cancelled: true }));
            state.matcher.cancel_posted(req);
        }
        Ok(())
    }

    fn release(&self, req: ReqId) {
        let request = {
            let mut state = self.state.borrow_mut();
            let request = state.requests.remove(req);
            if let Some(Request::Posted { .. }) = request {
                state.matcher.cancel_posted(req);
            }
            request
        };
        if let Some(request) = request {
            self.settle(request);
        }
    }

    fn wait_until(&self, poll: &mut dyn FnMut() -> Result<bool>) -> Result<()> {
        let mut backoff = Backoff::new(self.lanes.policy);
        loop {
            if poll()? {
                return Ok(());
            }
            self.check_live()?;
            self.progress();
            super::pause(backoff.next());
        }
    }

    fn progress(&self) {
        // An error here shows again in the next call that can report it.
        let _ = self.drain();
    }

    fn finalize(&self) {
        self.finalized.set(true);
    }

    fn is_finalized(&self) -> bool {
        self.finalized.get()
    }

    fn placement(&self) -> &Placement {
        &self.lanes.placement
    }

    fn name(&self) -> &'static str {
        "mpi"
    }

    /// `MPI_Abort`: MPI ends every process of the job, this one included; does not return.
    fn abort_job(&self, failure: Failure) -> Failure {
        let code = failure.code.unwrap_or(1);
        // SAFETY: aborting takes no memory from Rust.
        unsafe { ffi::fastmp_mpi_abort(self.lanes.payloads[0], code) };
        std::process::exit(code)
    }

    fn improbe(&self, spec: MatchSpec) -> Result<Option<(MessageId, RawStatus)>> {
        self.check_live()?;
        self.drain()?;
        let mut state = self.state.borrow_mut();
        let Some((env, arrival)) = state.matcher.take_unexpected(&spec) else { return Ok(None) };
        let id = state.requests.insert(Request::Message { env, arrival });
        Ok(Some((MessageId(id), env.status())))
    }

    unsafe fn mrecv(&self, msg: MessageId, buf: *mut u8, capacity: usize) -> Result<Started> {
        self.check_live()?;
        let taken = {
            let mut state = self.state.borrow_mut();
            match state.requests.get(msg.0) {
                Some(Request::Message { .. }) => state.requests.remove(msg.0),
                _ => None,
            }
        };
        let Some(Request::Message { env, arrival }) = taken else {
            return Err(Error::InvalidArgument("message handle is stale (already received)".into()));
        };
        self.started(self.receive_payload(env, arrival, buf, capacity))
    }
}

impl Remote for MpiThreadEndpoint {
    /// Nothing in MPI can call back on an arrival.
    fn set_waker(&self, waker: Waker) -> bool {
        drop(waker);
        false
    }

    fn wait_until_parking(&self, _park: Park<'_>, poll: &mut dyn FnMut() -> Result<bool>) -> Result<()> {
        self.wait_until(poll)
    }

    fn shutdown(&self) -> Result<()> {
        Ok(())
    }

    /// `abort_job` already ended the MPI job.
    fn abort(&self, _job: Failure) {}
}
