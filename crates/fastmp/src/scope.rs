//! Nonblocking point-to-point: requests live in a scope, as threads do in `std::thread::scope`.
//!
//! A request borrows its buffer for the whole scope, and the scope's end finishes every request
//! it started that nobody completed, as `thread::scope` joins the threads nobody joined: a
//! receive is waited for (so `let _ = s.irecv(&mut buf, ..)?` still fills `buf`), a send is
//! detached (its data copied if it has not left yet) and still delivered. Only when the scope
//! unwinds or a wait fails (a peer failed, the job aborted) are the rest released (unmatched
//! receives cancelled) instead, so the end never hangs on a job that cannot finish them.
//! [`Request::cancel`] abandons a request explicitly. So leaking a request with `mem::forget`
//! cannot leave the device pointing at a freed buffer. The bookkeeping that makes this sound is
//! the device layer's `Ledger` (`device/requests.rs`); this module is the typed API. Requests
//! that must outlive a scope own their buffers instead (`owned.rs`).

use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use bytemuck::Pod;

use std::rc::Rc;

use crate::comm::{Comm, Status};
use crate::completion::sealed::Completion;
use crate::completion::wait_one;
use crate::device::requests::{self, Begun, Handles, Ledger, LedgerOwner};
use crate::device::{ANY_TAG, Device, PROC_NULL, RawStatus, ReqId, SendMode, Source, Started};
use crate::error::{Error, Result};
use crate::progress::OpId;
use crate::trace::{self, Event, Kind};

/// Nonblocking operations whose buffers must live until the scope ends. See [`Comm::scope`].
///
/// # Borrow rules
/// A request borrows its buffer for the whole scope, not just until it completes (a leaked
/// request is finished only when the scope ends): a receive buffer exclusively, a send buffer
/// shared. The request itself cannot outlive the scope. So the compiler rejects every access
/// that could race with the device; each example below fails to compile for the reason in its
/// comment.
///
/// Through its own name a receive buffer cannot be read inside the scope, even after `wait`
/// (use [`Scope::irecv_buf`], whose wait hands the buffer back, to read it there):
/// ```compile_fail,E0502
/// # fn f(world: &fastmp::Comm) -> fastmp::Result<()> {
/// let mut inc = [0u8; 4];
/// world.scope(|s| {
///     s.irecv(&mut inc, 1, 0)?.wait()?;
///     println!("{}", inc[0]); // error: `inc` is lent to the receive until the scope ends
///     Ok::<_, fastmp::Error>(())
/// })?;
/// # Ok(()) }
/// ```
/// After the scope it can:
/// ```
/// # fn f(world: &fastmp::Comm) -> fastmp::Result<()> {
/// let mut inc = [0u8; 4];
/// world.scope(|s| s.irecv(&mut inc, 1, 0)?.wait())?;
/// println!("{}", inc[0]);
/// # Ok(()) }
/// ```
/// and inside it, through the slice `irecv_buf`'s wait returns, but only after that wait:
/// ```compile_fail,E0382
/// # fn f(world: &fastmp::Comm) -> fastmp::Result<()> {
/// let mut inc = [0u8; 4];
/// world.scope(|s| {
///     let req = s.irecv_buf(&mut inc, 1, 0)?;
///     let (got, _) = req.wait()?;
///     let again = req.wait(); // error: the request (and with it the buffer) was handed back
///     Ok::<_, fastmp::Error>(())
/// })?;
/// # Ok(()) }
/// ```
/// Nor written, while the receive may be writing it:
/// ```compile_fail,E0506
/// # fn f(world: &fastmp::Comm) -> fastmp::Result<()> {
/// let mut inc = [0u8; 4];
/// world.scope(|s| {
///     let req = s.irecv(&mut inc, 1, 0)?;
///     inc[0] = 7; // error: the receive may be writing `inc`
///     req.wait()
/// })?;
/// # Ok(()) }
/// ```
/// A send buffer cannot be changed while its send is in flight:
/// ```compile_fail,E0506
/// # fn f(world: &fastmp::Comm) -> fastmp::Result<()> {
/// let mut out = [1u8; 4];
/// world.scope(|s| {
///     let req = s.isend(&out, 1, 0)?;
///     out[0] = 9; // error: the send may still be reading `out`
///     req.wait()
/// })?;
/// # Ok(()) }
/// ```
/// Reading it, or sending it again, is fine:
/// ```
/// # fn f(world: &fastmp::Comm) -> fastmp::Result<()> {
/// let out = [1u8; 4];
/// world.scope(|s| {
///     let mut reqs = vec![s.isend(&out, 1, 0)?, s.isend(&out, 2, 0)?];
///     println!("{}", out[0]);
///     fastmp::waitall(&mut reqs)
/// })?;
/// # Ok(()) }
/// ```
/// A request cannot leave its scope, neither returned from the closure:
/// ```compile_fail
/// # fn f(world: &fastmp::Comm) -> fastmp::Result<()> {
/// let out = [1u8; 4];
/// let req = world.scope(|s| s.isend(&out, 1, 0))?; // error: the request would outlive the scope
/// req.wait()?;
/// # Ok(()) }
/// ```
/// nor stored outside it:
/// ```compile_fail,E0521
/// # fn f(world: &fastmp::Comm) -> fastmp::Result<()> {
/// let out = [1u8; 4];
/// let mut pending = Vec::new();
/// world.scope(|s| {
///     pending.push(s.isend(&out, 1, 0)?); // error: the request would outlive the scope
///     Ok::<_, fastmp::Error>(())
/// })?;
/// # Ok(()) }
/// ```
/// Its outcome can leave, and requests can be collected inside the scope:
/// ```
/// # fn f(world: &fastmp::Comm) -> fastmp::Result<()> {
/// let out = [1u8; 4];
/// let status = world.scope(|s| s.isend(&out, 1, 0)?.wait())?;
/// let statuses = world.scope(|s| {
///     let mut pending = Vec::new();
///     pending.push(s.isend(&out, 1, 0)?);
///     fastmp::waitall(&mut pending)
/// })?;
/// # Ok(()) }
/// ```
/// A lent buffer cannot be moved away or freed inside the scope:
/// ```compile_fail,E0499
/// # fn f(world: &fastmp::Comm) -> fastmp::Result<()> {
/// let mut inc = vec![0u8; 4];
/// world.scope(|s| {
///     let req = s.irecv(&mut inc, 1, 0)?;
///     drop(std::mem::take(&mut inc)); // error: would free the memory the receive writes into
///     req.wait()
/// })?;
/// # Ok(()) }
/// ```
/// and a buffer declared inside the scope cannot be lent, since it would be freed first:
/// ```compile_fail,E0597
/// # fn f(world: &fastmp::Comm) -> fastmp::Result<()> {
/// world.scope(|s| {
///     let mut inc = vec![0u8; 4];
///     s.irecv(&mut inc, 1, 0)?.wait() // error: `inc` does not live as long as the scope
/// })?;
/// # Ok(()) }
/// ```
/// A scope stays on its rank's thread (`Comm` holds `Rc`s: it is neither `Send` nor `Sync`), so
/// another thread cannot start requests on it:
/// ```compile_fail,E0277
/// # fn f(world: &fastmp::Comm) -> fastmp::Result<()> {
/// let out = [1u8; 4];
/// world.scope(|s| {
///     std::thread::scope(|t| {
///         t.spawn(|| s.isend(&out, 1, 0).map(drop)); // error: `Scope` is not `Sync`
///     });
/// });
/// # Ok(()) }
/// ```
/// nor wait for a request started on it:
/// ```compile_fail,E0277
/// # fn f(world: &fastmp::Comm) -> fastmp::Result<()> {
/// let out = [1u8; 4];
/// world.scope(|s| {
///     let req = s.isend(&out, 1, 0)?;
///     std::thread::scope(|t| {
///         t.spawn(move || req.wait()); // error: `Request` is not `Send`
///     });
///     Ok::<_, fastmp::Error>(())
/// })?;
/// # Ok(()) }
/// ```
pub struct Scope<'scope, 'env> {
    pub(crate) comm: &'env Comm,
    /// Progress-engine token owning the nonblocking collectives started through this scope.
    pub(crate) token: u64,
    /// The point-to-point requests started through this scope (invariant in `'scope`).
    ledger: Ledger<'scope>,
    env: PhantomData<&'env mut &'env ()>,
}

/// [`Scope`] as a family over its `'scope`, for `requests::scoped`.
struct ScopeOf<'env>(PhantomData<&'env ()>);

impl<'env> LedgerOwner for ScopeOf<'env> {
    type At<'scope> = Scope<'scope, 'env>;
}

/// A nonblocking operation in flight (MPI_Request). Dropping or leaking it is safe and, as
/// `MPI_Request_free`, does not abandon it: a send is still delivered, a receive still receives
/// (the scope's end waits for it). [`Request::cancel`] is the way to abandon one.
#[must_use = "a request does nothing unless waited for or tested"]
pub struct Request<'scope> {
    comm: &'scope Comm,
    /// The scope's list of outstanding requests (kept current as this one finishes).
    handles: Handles<'scope>,
    state: ReqState,
    elem_size: usize,
}

enum ReqState {
    Active(ReqId),
    /// A nonblocking collective in the rank's progress engine.
    Collective(OpId),
    Complete(Result<Status>),
    /// Complete with MPI's empty status (collectives, `PROC_NULL`): taken as the constant, so
    /// no status is stored into the request and loaded back moments later (a copy of one just
    /// stored field by field stalls store forwarding: 4–5 % of a small `ibcast`'s start + wait).
    Empty,
    Inactive,
}

/// Outstanding requests a fresh scope has room for before its list grows (lists are reused).
const REQUESTS_PER_SCOPE: usize = 16;

/// MPI's empty status: reported for requests that were already inactive, for completed
/// collectives, and for every operation with [`crate::PROC_NULL`] (source `PROC_NULL`, tag
/// `ANY_TAG`, no data).
pub(crate) const EMPTY_STATUS: Status = Status { source: PROC_NULL, tag: ANY_TAG, bytes: 0, cancelled: false };

impl Comm {
    /// Runs `f` with a [`Scope`] in which nonblocking operations can be started; returns once all
    /// of them are finished: receives nobody waited for are waited for here, sends nobody
    /// waited for are still delivered (as `std::thread::scope` joins the threads nobody joined).
    ///
    /// ```
    /// fastmp::run(2, |world| {
    ///     let peer = 1 - world.rank();
    ///     let out = [world.rank() as i32; 4];
    ///     let mut inc = [0i32; 4];
    ///     world.scope(|s| {
    ///         let mut reqs = vec![s.irecv(&mut inc, peer, 0)?, s.isend(&out, peer, 0)?];
    ///         fastmp::waitall(&mut reqs)?;
    ///         Ok::<_, fastmp::Error>(())
    ///     })?;
    ///     assert_eq!(inc, [peer as i32; 4]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    ///
    /// A receive that is never waited for still receives by the scope's end:
    /// ```
    /// fastmp::run(2, |world| {
    ///     let peer = 1 - world.rank();
    ///     let mut inc = [0u8; 3];
    ///     world.scope(|s| {
    ///         let _ = s.irecv(&mut inc, peer, 0)?;
    ///         world.send(&[7u8; 3], peer, 0)
    ///     })?;
    ///     assert_eq!(inc, [7; 3]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    /// If `f` panics, or waiting fails (a peer failed, the job aborted), the remaining requests
    /// are released instead (unmatched receives cancelled), so the scope's end never hangs on a
    /// job that cannot finish them; a receive whose sender simply never sends is waited for, as
    /// in MPI. Errors of requests nobody waited for are not reported.
    pub fn scope<'env, F, T>(&'env self, f: F) -> T
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
    {
        let process = &self.process;
        let token = process.new_scope_token();
        let list = process.request_lists.borrow_mut().pop();
        let (value, list) = requests::scoped::<ScopeOf<'env>, _>(
            &*self.dev,
            list.unwrap_or_else(|| Vec::with_capacity(REQUESTS_PER_SCOPE)),
            |ledger| Scope { comm: self, token, ledger, env: PhantomData },
            |scope| {
                let result = catch_unwind(AssertUnwindSafe(|| f(scope)));
                // Collectives first: dropping an abandoned one releases its device requests
                // itself; the point-to-point requests are finished after this returns.
                process.engine.finish_scope(&*self.dev, token, result.is_err());
                match result {
                    Ok(value) => value,
                    Err(payload) => resume_unwind(payload),
                }
            },
        );
        process.request_lists.borrow_mut().push(list);
        value
    }
}

impl<'scope> Scope<'scope, '_> {
    pub(crate) fn ledger(&self) -> &Ledger<'scope> {
        &self.ledger
    }

    /// The communicator this scope posts on.
    pub fn comm(&self) -> &Comm {
        self.comm
    }

    /// The request of an operation another part of the library started on buffers borrowed for
    /// `'scope` (the one-sided `Scope::r*` calls): the ledger keeps it, so the scope's end waits
    /// for it (`wait_at_end`, for operations that write their buffer) or releases it.
    ///
    /// # Safety
    /// Every buffer the device may touch for `started` is borrowed for `'scope` (exclusively if
    /// the device writes it), and `started` has not been handed to anything else.
    pub(crate) unsafe fn adopt_request(&'scope self, started: Started, wait_at_end: bool) -> Request<'scope> {
        // SAFETY: forwarded caller contract.
        let started = unsafe { self.ledger.adopt(started, wait_at_end) };
        Request::new(self, started, 0)
    }

    /// Starts a standard-mode send (MPI_Isend). To [`crate::PROC_NULL`] it completes at once.
    pub fn isend<T: bytemuck::NoUninit>(
        &'scope self,
        buf: &'scope [T],
        dest: usize,
        tag: i32,
    ) -> Result<Request<'scope>> {
        self.start_send(buf, dest, tag, SendMode::Standard)
    }

    /// Starts a synchronous send (MPI_Issend): completes once the receiver has matched it.
    pub fn issend<T: bytemuck::NoUninit>(
        &'scope self,
        buf: &'scope [T],
        dest: usize,
        tag: i32,
    ) -> Result<Request<'scope>> {
        self.start_send(buf, dest, tag, SendMode::Synchronous)
    }

    /// Starts a ready-mode send (MPI_Irsend). fastmp needs no posted receive for it: it is a
    /// standard send, so a program that is correct in MPI's ready mode behaves the same.
    pub fn irsend<T: bytemuck::NoUninit>(
        &'scope self,
        buf: &'scope [T],
        dest: usize,
        tag: i32,
    ) -> Result<Request<'scope>> {
        self.isend(buf, dest, tag)
    }

    /// Buffered send (MPI_Ibsend): the returned request is already complete and `buf` is free;
    /// the data is copied if the message cannot leave at once (see [`Comm::bsend`]).
    pub fn ibsend<T: bytemuck::NoUninit>(&'scope self, buf: &[T], dest: usize, tag: i32) -> Result<Request<'scope>> {
        self.comm.bsend(buf, dest, tag)?;
        Ok(Request::empty(self))
    }

    fn start_send<T: bytemuck::NoUninit>(
        &'scope self,
        buf: &'scope [T],
        dest: usize,
        tag: i32,
        mode: SendMode,
    ) -> Result<Request<'scope>> {
        let Some(dest) = self.comm.dest_or_null(dest, tag)? else {
            return Ok(Request::empty(self));
        };
        let traced = trace::start();
        // Matched in place and the status rebuilt, never the device's result copied whole (see
        // `RawStatus::sent`); only a failure goes the general way.
        let state = match self.ledger.isend(bytemuck::cast_slice(buf), dest, tag, self.comm.context, mode) {
            Begun::Done(()) => ReqState::Complete(Ok(Status {
                source: self.comm.rank(),
                tag,
                bytes: size_of_val(buf),
                cancelled: false,
            })),
            Begun::Pending(id) => ReqState::Active(id),
            Begun::Failed(started) => return Request::failed(self, *started),
        };
        trace::record(traced, || (self.comm.dev.rank(), Event::p2p(Kind::Isend, dest, tag, size_of_val(buf))));
        Ok(Request::with_state(self, state, size_of::<T>()))
    }

    /// Starts a receive (MPI_Irecv) from `source` (rank, [`crate::ANY_SOURCE`] or
    /// [`crate::PROC_NULL`]) with `tag` (or [`crate::ANY_TAG`]). `buf` stays lent until the scope
    /// ends; [`Scope::irecv_buf`] hands it back from the wait instead.
    pub fn irecv<T: Pod>(
        &'scope self,
        buf: &'scope mut [T],
        source: impl Into<Source>,
        tag: i32,
    ) -> Result<Request<'scope>> {
        self.irecv_buf(buf, source, tag).map(RecvRequest::into_request)
    }

    /// Starts a receive like [`Scope::irecv`] whose wait gives the buffer back, so the message
    /// can be read before the scope ends.
    ///
    /// ```
    /// # fn f(world: &fastmp::Comm) -> fastmp::Result<()> {
    /// let mut inc = [0u8; 4];
    /// world.scope(|s| {
    ///     let (got, status) = s.irecv_buf(&mut inc, 1, 0)?.wait()?;
    ///     println!("{} from {}", got[0], status.source);
    ///     got[0] = 0; // the buffer is the caller's again
    ///     Ok::<_, fastmp::Error>(())
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn irecv_buf<T: Pod>(
        &'scope self,
        buf: &'scope mut [T],
        source: impl Into<Source>,
        tag: i32,
    ) -> Result<RecvRequest<'scope, T>> {
        let raw: *mut [T] = buf;
        let Some(spec) = self.comm.spec_or_null(source.into(), tag)? else {
            let req = Request::empty(self);
            return Ok(RecvRequest { req, buf: Some(raw), lent: PhantomData });
        };
        // SAFETY: `buf` is exclusively borrowed for 'scope and consumed here: its only other use
        // is the slice rebuilt by `RecvRequest::take`, once the device has finished with it (a
        // started receive that is not completed is finished by the scope's end).
        let traced = trace::start();
        let started = unsafe { self.ledger.irecv_raw(raw.cast::<u8>(), raw.len() * size_of::<T>(), spec) };
        let req = Request::started(self, started, size_of::<T>())?;
        trace::record(traced, || {
            let peer = match spec.source {
                Source::Rank(rank) => Some(rank),
                Source::Any => None,
            };
            let bytes = Some(raw.len() * size_of::<T>());
            (self.comm.dev.rank(), Event { peer, tag: Some(tag), bytes, ..Event::of(Kind::Irecv) })
        });
        Ok(RecvRequest { req, buf: Some(raw), lent: PhantomData })
    }
}

/// A receive started by [`Scope::irecv_buf`]: completing it hands the buffer back.
///
/// Works with the set operations ([`crate::waitall`], [`crate::wait_some`], ...), whose outputs
/// are then the buffers and statuses; [`RecvRequest::into_request`] turns it into a plain
/// [`Request`] to wait for it together with other kinds.
#[must_use = "a request does nothing unless waited for or tested"]
pub struct RecvRequest<'scope, T> {
    req: Request<'scope>,
    /// The buffer lent to the receive, until handed back.
    buf: Option<*mut [T]>,
    lent: PhantomData<&'scope mut [T]>,
}

impl<'scope, T: Pod> RecvRequest<'scope, T> {
    /// Blocks until the message arrived (MPI_Wait); returns the buffer and the status.
    pub fn wait(mut self) -> Result<(&'scope mut [T], Status)> {
        wait_one(&mut self)
    }

    /// Completes the receive if the message arrived (MPI_Test).
    pub fn test(&mut self) -> Result<Option<(&'scope mut [T], Status)>> {
        if !self.req.is_active() {
            return Err(Error::InvalidArgument("RecvRequest::test: the request was completed already".into()));
        }
        if self.req.poll() { self.take().map(Some) } else { Ok(None) }
    }

    /// Requests cancellation (MPI_Cancel), as [`Request::cancel`].
    pub fn cancel(&self) -> Result<()> {
        self.req.cancel()
    }

    /// The plain request; the buffer stays lent until the scope ends.
    pub fn into_request(self) -> Request<'scope> {
        self.req
    }
}

impl<'scope, T: Pod> Completion for RecvRequest<'scope, T> {
    type Output = (&'scope mut [T], Status);

    #[inline]
    fn device(&self) -> Option<Rc<dyn Device>> {
        self.req.device()
    }

    fn is_active(&self) -> bool {
        self.req.is_active()
    }

    fn poll(&mut self) -> bool {
        self.req.poll()
    }

    fn failed(&self) -> bool {
        self.req.failed()
    }

    fn waits_on(&self) -> Option<crate::trace::Event> {
        self.req.waits_on()
    }

    fn take(&mut self) -> Result<Self::Output> {
        if !self.req.is_active() {
            return Err(Error::InvalidArgument("wait on a RecvRequest whose buffer was handed back already".into()));
        }
        let status = self.req.take();
        let raw = self.buf.take().expect("an active receive holds its buffer");
        // SAFETY: the receive finished (or failed, which released it): the device no longer
        // touches `raw`, which came from a `&'scope mut [T]` that nothing else uses.
        let buf = unsafe { &mut *raw };
        status.map(|status| (buf, status))
    }
}

impl<'scope> Request<'scope> {
    #[inline]
    fn with_state(scope: &'scope Scope<'scope, '_>, state: ReqState, elem_size: usize) -> Self {
        Request { comm: scope.comm, handles: scope.ledger.handles(), state, elem_size }
    }

    /// A request complete with MPI's empty status ([`EMPTY_STATUS`]).
    pub(crate) fn empty(scope: &'scope Scope<'scope, '_>) -> Self {
        Self::with_state(scope, ReqState::Empty, 0)
    }

    /// A request for a nonblocking collective registered with the engine as `id`.
    pub(crate) fn collective(scope: &'scope Scope<'scope, '_>, id: OpId) -> Self {
        Self::with_state(scope, ReqState::Collective(id), 0)
    }

    #[inline]
    pub(crate) fn new(scope: &'scope Scope<'scope, '_>, started: Started, elem_size: usize) -> Self {
        let state = match started {
            Started::Complete(result) => ReqState::Complete(result.and_then(|raw| scope.comm.status(raw, elem_size))),
            Started::Pending(id) => ReqState::Active(id),
        };
        Self::with_state(scope, state, elem_size)
    }

    /// The request of a receive this scope started.
    #[inline]
    pub(crate) fn started(scope: &'scope Scope<'scope, '_>, begun: Begun<RawStatus>, elem_size: usize) -> Result<Self> {
        let state = match begun {
            Begun::Done(raw) => ReqState::Complete(scope.comm.status(raw, elem_size)),
            Begun::Pending(id) => ReqState::Active(id),
            Begun::Failed(started) => return Self::failed(scope, *started),
        };
        Ok(Self::with_state(scope, state, elem_size))
    }

    /// A start that failed, or finished with an error.
    #[cold]
    fn failed(scope: &'scope Scope<'scope, '_>, started: Result<Started>) -> Result<Self> {
        Ok(Self::new(scope, started?, 0))
    }

    /// Whether the request still has a result to deliver.
    pub fn is_active(&self) -> bool {
        !matches!(self.state, ReqState::Inactive)
    }

    /// Blocks until the operation completes (MPI_Wait).
    pub fn wait(mut self) -> Result<Status> {
        wait_one(&mut self)
    }

    /// Completes the operation if it has finished (MPI_Test).
    pub fn test(&mut self) -> Result<Option<Status>> {
        if !self.is_active() {
            return Err(Error::InvalidArgument("test on an inactive request".into()));
        }
        if self.poll() { self.take().map(Some) } else { Ok(None) }
    }

    /// Requests cancellation (MPI_Cancel); the request must still be completed, and its status
    /// tells whether the cancel succeeded ([`Status::cancelled`]). The way to abandon a receive
    /// that may never be matched: a dropped one is still waited for by the scope's end.
    pub fn cancel(&self) -> Result<()> {
        match self.state {
            ReqState::Active(id) => self.comm.dev.cancel(id),
            ReqState::Collective(_) => {
                Err(Error::InvalidArgument("a nonblocking collective cannot be cancelled (as in MPI)".into()))
            }
            _ => Ok(()),
        }
    }
}

impl Request<'_> {
    /// Takes collective `id`'s outcome once the engine has it. `true` once complete.
    fn collect(&mut self, id: OpId) -> bool {
        let Some(outcome) = self.comm.process.engine.take_outcome(id) else { return false };
        self.state = match outcome {
            Ok(()) => ReqState::Empty,
            Err(e) => ReqState::Complete(Err(e)),
        };
        true
    }
}

impl Completion for Request<'_> {
    type Output = Status;

    fn device(&self) -> Option<Rc<dyn Device>> {
        Some(self.comm.dev.clone())
    }

    fn is_active(&self) -> bool {
        Request::is_active(self)
    }

    /// Moves an active request to `Complete` if the device finished it. `true` once complete.
    #[inline]
    fn poll(&mut self) -> bool {
        match self.state {
            ReqState::Active(id) => {
                let outcome = match self.comm.dev.test(id) {
                    Ok(None) => return false,
                    Ok(Some(raw)) => self.comm.status(raw, self.elem_size),
                    Err(e) => Err(e),
                };
                // Finished (a failed test released it): the scope's end has nothing to do.
                self.handles.retire(id);
                self.state = ReqState::Complete(outcome);
                true
            }
            ReqState::Collective(id) => {
                self.comm.process.engine.progress();
                self.collect(id)
            }
            ReqState::Complete(_) | ReqState::Empty => true,
            ReqState::Inactive => false,
        }
    }

    fn poll_waited(&mut self) -> bool {
        match self.state {
            ReqState::Collective(id) => {
                self.comm.process.engine.progress_waited(id);
                self.collect(id)
            }
            _ => self.poll(),
        }
    }

    fn failed(&self) -> bool {
        matches!(self.state, ReqState::Complete(Err(_)))
    }

    fn waits_on(&self) -> Option<Event> {
        match &self.state {
            ReqState::Collective(_) => Some(Event { on: Some("collective"), ..Event::of(Kind::Wait) }),
            ReqState::Complete(Ok(status)) if status.source != PROC_NULL => {
                let peer = self.comm.group.world_rank(status.source);
                Some(Event { on: Some("recv"), ..Event::p2p(Kind::Wait, peer, status.tag, status.bytes) })
            }
            _ => None,
        }
    }

    #[inline]
    fn take(&mut self) -> Result<Status> {
        match std::mem::replace(&mut self.state, ReqState::Inactive) {
            ReqState::Complete(result) => result,
            ReqState::Empty | ReqState::Inactive => Ok(EMPTY_STATUS),
            state @ (ReqState::Active(_) | ReqState::Collective(_)) => {
                self.state = state;
                unreachable!("take() on an active request")
            }
        }
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        match self.state {
            // A send is detached, a receive stays with the scope, which waits for it.
            ReqState::Active(id) => self.handles.drop_request(id),
            // Peers rely on this rank's part: it runs on, finished by the scope's end at the latest.
            ReqState::Collective(id) => self.comm.process.engine.detach(id),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    /// A long scope does not accumulate the handles of requests that completed or were dropped.
    #[test]
    fn finished_requests_leave_the_scope_s_list() {
        crate::run(2, |world| {
            let peer = 1 - world.rank();
            // Above the eager limit: the requests stay pending until matched.
            let out = vec![world.rank() as u8; 64 * 1024];
            let mut incs = vec![vec![0u8; 64 * 1024]; 100];
            world.scope(|s| {
                for (round, inc) in (0..).zip(incs.iter_mut()) {
                    let (r, w) = (s.irecv(&mut inc[..], peer, round)?, s.isend(&out, peer, round)?);
                    if round % 2 == 0 {
                        crate::waitall(&mut [r, w])?;
                    } else {
                        w.wait()?;
                        r.wait()?;
                    }
                }
                assert_eq!(s.ledger().handles().outstanding(), 0);
                let dropped = s.isend(&out, peer, 1000)?;
                drop(dropped);
                assert_eq!(s.ledger().handles().outstanding(), 0);
                Ok::<_, crate::Error>(())
            })?;
            world.recv(&mut incs[0][..], peer, 1000)?;
            assert!(incs.iter().flatten().all(|&b| b == peer as u8));
            Ok(())
        })
        .unwrap();
    }
}
