//! The device layer (the seeds' `xxdev`): raw byte messages with `(context, source, tag)` envelopes.
//!
//! Everything above this module (typed point-to-point, scopes, later collectives) talks to a
//! `dyn Device` only, so a new transport is one more implementation of [`Device`] plus a branch in
//! the launcher; nothing above changes.

pub(crate) mod collectives;
pub(crate) mod failure;
pub(crate) mod hybrid;
pub(crate) mod locality;
pub(crate) mod matching;
#[cfg(feature = "mpi")]
pub(crate) mod mpi;
pub(crate) mod one_sided;
pub(crate) mod requests;
pub(crate) mod rma_memory;
pub(crate) mod shm;
pub(crate) mod slab;
pub(crate) mod tcp;

#[cfg(test)]
mod test_transport;
pub(crate) mod wait;

/// Fuzzing entry point for the tcp receive path (`fuzz/`); not part of the supported API.
#[doc(hidden)]
pub use tcp::fuzzing::fuzz_decode_frames;

use crate::error::Result;
use collectives::Collectives;
pub use failure::Failure;
pub(crate) use hybrid::HybridEndpoint;
pub use locality::{Locality, Placement};
use one_sided::OneSided;
pub(crate) use shm::ShmWorld;

/// Status of a completed receive of `len` bytes into `capacity`, or its truncation error.
pub(crate) fn receive_result(source: usize, tag: i32, len: usize, capacity: usize) -> Result<RawStatus> {
    if len > capacity {
        Err(crate::Error::Truncated { message_bytes: len, capacity, source_rank: source, tag })
    } else {
        Ok(RawStatus { source, tag, bytes: len, cancelled: false })
    }
}

/// Locks a mutex whose data stays meaningful even if a holder panicked (every update under it
/// is a single step, and a panicking rank aborts the job anyway): no cascade of poison panics.
pub(crate) fn lock_ignoring_poison<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Identifies a communicator's traffic; messages only match receives of the same context.
pub type ContextId = u32;

/// Wildcard tag for receives and probes (MPI's `MPI_ANY_TAG`).
pub const ANY_TAG: i32 = -1;
/// Largest valid tag (MPI's `MPI_TAG_UB`).
pub const TAG_UB: i32 = i32::MAX;

/// Which sender a receive or probe accepts.
///
/// `usize` ranks convert into it, so calls read `comm.recv(&mut buf, 3, 0)` or
/// `comm.recv(&mut buf, ANY_SOURCE, ANY_TAG)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// Only this rank.
    Rank(usize),
    /// Any rank (MPI's `MPI_ANY_SOURCE`).
    Any,
}

/// Wildcard source for receives and probes (MPI's `MPI_ANY_SOURCE`).
pub const ANY_SOURCE: Source = Source::Any;

/// The null rank (MPI's `MPI_PROC_NULL`): a send to it or a receive from it completes at once and
/// moves no data; `CartComm::shift` returns it past a non-periodic edge, so its results go
/// straight into `sendrecv`.
pub const PROC_NULL: usize = usize::MAX;

impl From<usize> for Source {
    fn from(rank: usize) -> Self {
        Source::Rank(rank)
    }
}

/// What a receive or probe accepts: a context plus possibly-wildcard source and tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatchSpec {
    pub context: ContextId,
    pub source: Source,
    /// A tag, or [`ANY_TAG`].
    pub tag: i32,
}

impl MatchSpec {
    /// MPI matching rule for one incoming envelope.
    #[inline]
    pub fn matches(&self, context: ContextId, source: usize, tag: i32) -> bool {
        self.context == context
            && (self.tag == ANY_TAG || self.tag == tag)
            && match self.source {
                Source::Any => true,
                Source::Rank(r) => r == source,
            }
    }
}

/// Completion information of a raw request or probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawStatus {
    pub source: usize,
    pub tag: i32,
    /// Bytes in the message (for a receive: bytes delivered).
    pub bytes: usize,
    /// The request was cancelled before it matched.
    pub cancelled: bool,
}

impl RawStatus {
    /// The status of a send that completed: the sender's own rank, the tag and the length, on
    /// every device. The layers above rebuild it from their own arguments instead of copying the
    /// device's: reading back a value the callee has just stored field by field, with the wider
    /// loads of a struct copy, stalls store forwarding once per layer (stop 45: 10 % of the
    /// hybrid device's small-message rate went to one such copy).
    pub(crate) fn sent(source: usize, tag: i32, bytes: usize) -> RawStatus {
        RawStatus { source, tag, bytes, cancelled: false }
    }
}

/// Send modes of the device (buffered/ready are expressible with these two).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendMode {
    /// Completes when the buffer may be reused (eager copy, or rendezvous copy done).
    Standard,
    /// Completes only once the receiver has matched the message.
    Synchronous,
}

/// Handle of an outstanding device request; stale handles (already completed) are detected by a
/// generation count, so using one twice is an error, never a wrong completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReqId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

/// A message taken off matching by [`Device::improbe`] (MPI's `MPI_Message` at the device):
/// it belongs to whoever holds the handle, so no other receive or probe can see it again.
/// Receive it with [`Device::mrecv`] or drop it with [`Device::discard`]; stale handles are
/// detected like request handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageId(pub(crate) ReqId);

/// A device endpoint that every thread of its rank may use at once (MPI_THREAD_MULTIPLE).
pub type SharedDevice = std::sync::Arc<dyn Device + Send + Sync>;

/// How a started operation stands: most small sends and many receives finish inside
/// `isend`/`irecv`, and then no request needs to be tracked at all.
#[derive(Debug)]
pub enum Started {
    /// Finished already (a receive may carry its truncation error here).
    Complete(Result<RawStatus>),
    /// In flight; complete it with [`Device::test`] or release it with [`Device::release`].
    Pending(ReqId),
}

/// A message transport for one rank (one endpoint per rank).
///
/// Requests are completed by [`Device::test`] (which also drives progress) and by
/// [`Device::wait_until`], which blocks with the spin → yield → park policy of [`wait`].
///
/// # Buffer contract
/// `isend`/`irecv` take raw pointers: the device may read (send) or write (receive) the buffer
/// until the request has completed through `test`/`wait_until`, or until [`Device::release`]
/// returns. The safe layer above (`Comm`, `Scope`) upholds this even if a request handle is leaked.
pub trait Device {
    /// This endpoint's rank.
    fn rank(&self) -> usize;
    /// Number of ranks reachable through this device.
    fn size(&self) -> usize;

    /// Starts sending `len` bytes at `buf` to `dest`.
    ///
    /// # Safety
    /// `buf..buf+len` must be readable and unmodified until the request completes or is released.
    unsafe fn isend(
        &self,
        buf: *const u8,
        len: usize,
        dest: usize,
        tag: i32,
        context: ContextId,
        mode: SendMode,
    ) -> Result<Started>;

    /// Starts receiving into `capacity` bytes at `buf`.
    ///
    /// # Safety
    /// `buf..buf+capacity` must be writable and not otherwise accessed until the request
    /// completes or is released.
    unsafe fn irecv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Result<Started>;

    /// Blocking receive. The default posts `irecv` and waits; devices may do better.
    ///
    /// # Safety
    /// `buf..buf+capacity` must be writable and not otherwise accessed until this returns.
    unsafe fn recv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Result<RawStatus> {
        // SAFETY: forwarded caller contract.
        let started = unsafe { self.irecv(buf, capacity, spec)? };
        self.complete(started)
    }

    /// Whether [`Device::try_recv`] takes messages (the default does not).
    fn receives_unposted(&self) -> bool {
        false
    }

    /// Receives a message matching `spec` that has already arrived, into `capacity` bytes at
    /// `buf`, without posting a receive; `None` if none has (the device may have progressed
    /// communication meanwhile). Fails, like `test` on a posted receive, once no such message
    /// can come. Lets a small receive skip the handshake of a posted one, as blocking receives
    /// do; only devices that say [`Device::receives_unposted`] take anything.
    ///
    /// # Safety
    /// `buf..buf+capacity` must be writable and not otherwise accessed until this returns.
    unsafe fn try_recv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Option<Result<RawStatus>> {
        let _ = (buf, capacity, spec);
        None
    }

    /// Blocking send: returns once `buf` may be reused. The default starts `isend` and waits;
    /// a device whose small sends finish inside one library call skips the request.
    fn send(&self, buf: &[u8], dest: usize, tag: i32, context: ContextId, mode: SendMode) -> Result<()> {
        send_by_request(self, buf, dest, tag, context, mode)
    }

    /// Blocks until a started operation finishes. A failed wait leaves the request outstanding,
    /// so it is released (a no-op if `test` already retired it): the buffer is free on return.
    fn complete(&self, started: Started) -> Result<RawStatus> {
        match started {
            Started::Complete(result) => result,
            Started::Pending(id) => self.wait(id).inspect_err(|_| self.release(id)),
        }
    }

    /// Reports the first message matching `spec`, without receiving it.
    fn iprobe(&self, spec: MatchSpec) -> Result<Option<RawStatus>>;

    /// Progresses communication and reports whether `req` completed. A completed (or failed)
    /// request is retired: its handle becomes stale.
    fn test(&self, req: ReqId) -> Result<Option<RawStatus>>;

    /// Asks to cancel `req`; it still has to be completed with `test`, and reports
    /// `cancelled` if the cancel won the race with matching.
    fn cancel(&self, req: ReqId) -> Result<()>;

    /// Abandons `req`: an unmatched receive is cancelled, a pending send is detached (its data
    /// copied so the transfer finishes without the caller's buffer), an in-progress copy is waited
    /// for. After this returns the device no longer touches the request's buffer. Stale handles are
    /// ignored.
    fn release(&self, req: ReqId);

    /// Blocks until `poll` returns `Ok(true)` (or an error), progressing communication in between.
    /// Fails with [`crate::Error::PeerFailed`] if the job was aborted by a failing rank.
    fn wait_until(&self, poll: &mut dyn FnMut() -> Result<bool>) -> Result<()>;

    /// Blocks until `req` completes (retiring it).
    fn wait(&self, req: ReqId) -> Result<RawStatus> {
        let mut done = None;
        self.wait_until(&mut || {
            done = self.test(req)?;
            Ok(done.is_some())
        })?;
        Ok(done.expect("wait_until returns after completion"))
    }

    /// Drives pending communication once (starts queued sends, accepts arrived messages)
    /// without completing anything. Blocking operations that wait outside the device's request
    /// machinery (native collectives) call it so that peers' point-to-point traffic still moves.
    fn progress(&self) {}

    /// Whether a nonblocking operation polled now may wait in place, as a blocking one does:
    /// the rank waits for it and has nothing else in flight (the collectives layer's
    /// `Progressing` knows; a bare device never does).
    fn waits_in_place(&self) -> bool {
        false
    }

    /// Marks this endpoint finalized: every later call fails with [`crate::Error::Finalized`].
    fn finalize(&self);

    /// Whether [`Device::finalize`] was called.
    fn is_finalized(&self) -> bool;

    /// The process and node of every world rank (`Comm::split_type`, routing, hierarchical
    /// collectives).
    fn placement(&self) -> &Placement;

    /// Short name of the device, as reported by benchmarks ("shm", "tcp", ...).
    fn name(&self) -> &'static str;

    /// Aborts the job because this rank failed (MPI_Abort, or an error or panic it is about to
    /// end with): every peer's pending and later operations fail with `PeerFailed`. The job keeps
    /// the *first* failure, so this returns the one it ends with: `failure` itself, or an earlier
    /// one this rank had already heard of (whose consequence this rank's failure then is). The
    /// default, for devices without peers to tell, changes nothing.
    fn abort_job(&self, failure: Failure) -> Failure {
        failure
    }

    /// The failure the job already ended with, as far as this rank has heard (none for devices
    /// without peers): a process rank about to fail checks it to know whether the report is its
    /// own to print.
    fn job_failure(&self) -> Option<Failure> {
        None
    }

    /// The device's own implementation of the collectives of the communicator with `context` over
    /// `members` (world ranks, in communicator order), asked once when the communicator is
    /// created; `None` where the device accelerates none (the collectives layer's message-based
    /// algorithms serve it). See `device::collectives`.
    fn collectives(&self, context: ContextId, members: &[usize]) -> Option<Collectives> {
        let _ = (context, members);
        None
    }

    /// Announces a context pair (`context`, `context + 1`) that a communicator the collectives
    /// layer does not serve (an intercommunicator's) uses among `members` (world ranks, in the
    /// same order at each of them); collective over `members`. Devices that carry each context
    /// on a communicator of their own create it here; the others need nothing.
    fn open_context(&self, context: ContextId, members: &[usize]) -> Result<()> {
        let _ = (context, members);
        Ok(())
    }

    /// The highest thread support of this endpoint (MPI_Query_thread). The default is what
    /// a `Comm` gives by construction: it is not `Send`, so only its rank's thread calls it.
    fn thread_level(&self) -> crate::ThreadLevel {
        crate::ThreadLevel::Funneled
    }

    /// A handle of this endpoint for other threads of the rank (`Comm::threaded`), or why the
    /// device cannot give one.
    fn thread_shared(&self) -> Result<SharedDevice> {
        Err(crate::Error::InvalidArgument(format!(
            "Comm::threaded: the {} device serves only its rank's own thread (thread level {:?}); \
             use the tcp device (DeviceKind::Tcp) for MPI_THREAD_MULTIPLE, or pass data to the \
             rank's thread (e.g. over a channel) and communicate from there",
            self.name(),
            self.thread_level()
        )))
    }

    /// Takes the first message matching `spec` off matching, so that no other receive or
    /// probe can match it (MPI_Improbe); `None` if none has arrived. Like [`Device::iprobe`]
    /// inside a wait, it fails when no such message can ever come.
    fn improbe(&self, spec: MatchSpec) -> Result<Option<(MessageId, RawStatus)>> {
        let _ = spec;
        Err(crate::Error::InvalidArgument(format!("improbe: the {} device has no matched probe", self.name())))
    }

    /// Receives a message taken by [`Device::improbe`] into `capacity` bytes at `buf`
    /// (MPI_Imrecv); a longer message is truncated as by `irecv`. The handle is used up.
    ///
    /// # Safety
    /// As for [`Device::irecv`].
    unsafe fn mrecv(&self, msg: MessageId, buf: *mut u8, capacity: usize) -> Result<Started> {
        let _ = (msg, buf, capacity);
        Err(crate::Error::InvalidArgument(format!("mrecv: the {} device has no matched probe", self.name())))
    }

    /// Drops a message taken by [`Device::improbe`] without its data, completing whatever its
    /// sender waits for (a synchronous or rendezvous send), so a dropped message holds no
    /// sender up. Stale handles are ignored.
    fn discard(&self, msg: MessageId) {
        // A zero-byte receive: the device completes the sender's side and drops the bytes
        // (its truncation error is the expected outcome).
        let sink = std::ptr::NonNull::<u8>::dangling().as_ptr();
        // SAFETY: zero bytes at a dangling, well-aligned pointer are never accessed.
        if let Ok(Started::Pending(id)) = unsafe { self.mrecv(msg, sink, 0) } {
            self.release(id);
        }
    }

    /// One-sided operations (windows, put/get/atomics, flush), where the device supports them.
    /// Not implemented by any device yet (see `device::one_sided`).
    fn one_sided(&self) -> Option<&dyn OneSided> {
        None
    }
}

/// A blocking send as `isend` plus `complete`: [`Device::send`]'s default, and the way a wrapper
/// sends when it must drive its own engine during the wait.
pub(crate) fn send_by_request<D: Device + ?Sized>(
    dev: &D,
    buf: &[u8],
    dest: usize,
    tag: i32,
    context: ContextId,
    mode: SendMode,
) -> Result<()> {
    // SAFETY: `buf` stays borrowed until `complete` returns, which finishes the request or
    // releases it on every error.
    let started = unsafe { dev.isend(buf.as_ptr(), buf.len(), dest, tag, context, mode)? };
    dev.complete(started).map(drop)
}
