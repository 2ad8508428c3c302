//! Nonblocking point-to-point: requests live in a scope, as threads do in `std::thread::scope`.
//!
//! A request borrows its buffer for the whole scope, and the scope's end releases every request it
//! started that is still outstanding (an unmatched receive is cancelled, a pending send is
//! detached by copying its data, an in-progress copy is waited for). So leaking a request with
//! `mem::forget` cannot leave the device pointing at a freed buffer.

use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use bytemuck::Pod;

use crate::comm::{Comm, Status};
use crate::device::{ANY_TAG, ReqId, SendMode, Source, Started};
use crate::error::{Error, Result};
use crate::progress::OpId;

/// Nonblocking operations whose buffers must live until the scope ends. See [`Comm::scope`].
///
/// # Borrow rules
/// A request borrows its buffer for the whole scope, not just until it completes (a leaked
/// request is released only when the scope ends): a receive buffer exclusively, a send buffer
/// shared. The request itself cannot outlive the scope. So the compiler rejects every access
/// that could race with the device; each example below fails to compile for the reason in its
/// comment.
///
/// A receive buffer cannot be read inside the scope, even after `wait`:
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
pub struct Scope<'scope, 'env: 'scope> {
    pub(crate) comm: &'env Comm,
    /// Device (and progress engine) token owning the requests started through this scope.
    pub(crate) token: u64,
    scope: PhantomData<&'scope mut &'scope ()>,
    env: PhantomData<&'env mut &'env ()>,
}

/// A nonblocking operation in flight (MPI_Request). Dropping or leaking it is safe: the device is
/// done with the buffer by the end of the scope at the latest.
#[must_use = "a request does nothing unless waited for or tested"]
pub struct Request<'scope> {
    comm: &'scope Comm,
    state: ReqState,
    elem_size: usize,
}

enum ReqState {
    Active(ReqId),
    /// A nonblocking collective in the rank's progress engine.
    Collective(OpId),
    Complete(Result<Status>),
    Inactive,
}

/// Status reported for requests that were already inactive (MPI's empty status), and for
/// completed collectives.
pub(crate) const EMPTY_STATUS: Status =
    Status { source: usize::MAX, tag: ANY_TAG, count: 0, bytes: 0, cancelled: false };

impl Comm {
    /// Runs `f` with a [`Scope`] in which nonblocking operations can be started; returns once all
    /// of them are finished or released.
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
    pub fn scope<'env, F, T>(&'env self, f: F) -> T
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> T,
    {
        let token = self.dev.new_scope();
        let scope = Scope { comm: self, token, scope: PhantomData, env: PhantomData };
        let result = catch_unwind(AssertUnwindSafe(|| f(&scope)));
        // Collectives first: dropping an abandoned one releases its device requests itself.
        self.process.engine.finish_scope(&*self.dev, token, result.is_err());
        self.dev.release_scope(token);
        match result {
            Ok(value) => value,
            Err(payload) => resume_unwind(payload),
        }
    }
}

impl<'scope> Scope<'scope, '_> {
    /// The communicator this scope posts on.
    pub fn comm(&self) -> &Comm {
        self.comm
    }

    /// Wraps a started operation, registering it with this scope if it is still in flight.
    fn request(&'scope self, started: Started, elem_size: usize) -> Request<'scope> {
        if let Started::Pending(id) = started {
            self.comm.dev.adopt(id, self.token);
        }
        Request::new(self.comm, started, elem_size)
    }

    /// Starts a standard-mode send (MPI_Isend).
    pub fn isend<T: Pod>(&'scope self, buf: &'scope [T], dest: usize, tag: i32) -> Result<Request<'scope>> {
        self.start_send(buf, dest, tag, SendMode::Standard)
    }

    /// Starts a synchronous send (MPI_Issend): completes once the receiver has matched it.
    pub fn issend<T: Pod>(&'scope self, buf: &'scope [T], dest: usize, tag: i32) -> Result<Request<'scope>> {
        self.start_send(buf, dest, tag, SendMode::Synchronous)
    }

    fn start_send<T: Pod>(
        &'scope self,
        buf: &'scope [T],
        dest: usize,
        tag: i32,
        mode: SendMode,
    ) -> Result<Request<'scope>> {
        let dest = self.comm.check_dest(dest, tag)?;
        let bytes: &[u8] = bytemuck::cast_slice(buf);
        // SAFETY: `buf` is borrowed for 'scope, and `Comm::scope` releases this request before
        // 'scope ends, even if the handle is leaked.
        let started = unsafe { self.comm.dev.isend(bytes.as_ptr(), bytes.len(), dest, tag, self.comm.context, mode)? };
        Ok(self.request(started, size_of::<T>()))
    }

    /// Starts a receive (MPI_Irecv) from `source` (rank or [`crate::ANY_SOURCE`]) with `tag` (or
    /// [`crate::ANY_TAG`]).
    pub fn irecv<T: Pod>(
        &'scope self,
        buf: &'scope mut [T],
        source: impl Into<Source>,
        tag: i32,
    ) -> Result<Request<'scope>> {
        let source = source.into();
        let spec = self.comm.recv_spec(source, tag)?;
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        // SAFETY: `buf` is exclusively borrowed for 'scope, and `Comm::scope` releases this
        // request before 'scope ends, even if the handle is leaked.
        let started = unsafe { self.comm.dev.irecv(bytes.as_mut_ptr(), bytes.len(), spec)? };
        Ok(self.request(started, size_of::<T>()))
    }

    /// Starts a receive into raw memory, for callers that need what safe borrows forbid — chiefly
    /// OSU-style benchmarks that post a whole window of receives into one buffer.
    ///
    /// # Safety
    /// `buf` must be valid for writes of `len` elements until this scope ends, and must not be
    /// read or written by anything else meanwhile. Several receives into overlapping memory race
    /// with each other exactly as they would in C (the final contents are unspecified).
    pub unsafe fn irecv_raw<T: Pod>(
        &'scope self,
        buf: *mut T,
        len: usize,
        source: impl Into<Source>,
        tag: i32,
    ) -> Result<Request<'scope>> {
        let source = source.into();
        let spec = self.comm.recv_spec(source, tag)?;
        // SAFETY: forwarded caller contract; the scope releases the request before it ends.
        let started = unsafe { self.comm.dev.irecv(buf.cast::<u8>(), len * size_of::<T>(), spec)? };
        Ok(self.request(started, size_of::<T>()))
    }
}

impl<'scope> Request<'scope> {
    /// A request that already finished with `result`.
    pub(crate) fn completed(comm: &'scope Comm, result: Result<Status>) -> Self {
        Request { comm, state: ReqState::Complete(result), elem_size: 0 }
    }

    /// A request for a nonblocking collective registered with the engine as `id`.
    pub(crate) fn collective(comm: &'scope Comm, id: OpId) -> Self {
        Request { comm, state: ReqState::Collective(id), elem_size: 0 }
    }

    fn new(comm: &'scope Comm, started: Started, elem_size: usize) -> Self {
        let state = match started {
            Started::Complete(result) => ReqState::Complete(result.and_then(|raw| comm.status(raw, elem_size))),
            Started::Pending(id) => ReqState::Active(id),
        };
        Request { comm, state, elem_size }
    }

    /// Whether the request still has a result to deliver.
    pub fn is_active(&self) -> bool {
        !matches!(self.state, ReqState::Inactive)
    }

    /// Moves an active request to `Complete` if the device finished it. `true` once complete.
    fn poll(&mut self) -> bool {
        match self.state {
            ReqState::Active(id) => match self.comm.dev.test(id) {
                Ok(None) => false,
                Ok(Some(raw)) => {
                    self.state = ReqState::Complete(self.comm.status(raw, self.elem_size));
                    true
                }
                Err(e) => {
                    self.state = ReqState::Complete(Err(e));
                    true
                }
            },
            ReqState::Collective(id) => {
                let engine = &self.comm.process.engine;
                engine.progress();
                let Some(outcome) = engine.take_outcome(id) else { return false };
                self.state = ReqState::Complete(outcome.map(|()| EMPTY_STATUS));
                true
            }
            ReqState::Complete(_) => true,
            ReqState::Inactive => false,
        }
    }

    fn take(&mut self) -> Result<Status> {
        match std::mem::replace(&mut self.state, ReqState::Inactive) {
            ReqState::Complete(result) => result,
            ReqState::Inactive => Ok(EMPTY_STATUS),
            state @ (ReqState::Active(_) | ReqState::Collective(_)) => {
                self.state = state;
                unreachable!("take() on an active request")
            }
        }
    }

    /// Blocks until the operation completes (MPI_Wait).
    pub fn wait(mut self) -> Result<Status> {
        self.wait_in_place()
    }

    fn wait_in_place(&mut self) -> Result<Status> {
        // Completed at start (eager sends, receives matched on posting) or inactive: no waiting.
        if matches!(self.state, ReqState::Active(_) | ReqState::Collective(_)) && !self.poll() {
            let comm = self.comm;
            comm.dev.wait_until(&mut || Ok(self.poll()))?;
        }
        self.take()
    }

    /// Completes the operation if it has finished (MPI_Test).
    pub fn test(&mut self) -> Result<Option<Status>> {
        if !self.is_active() {
            return Err(Error::InvalidArgument("test on an inactive request".into()));
        }
        if self.poll() { self.take().map(Some) } else { Ok(None) }
    }

    /// Requests cancellation (MPI_Cancel); the request must still be completed, and its status
    /// tells whether the cancel succeeded ([`Status::cancelled`]).
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

impl Drop for Request<'_> {
    fn drop(&mut self) {
        match self.state {
            ReqState::Active(id) => self.comm.dev.release(id),
            // Peers rely on this rank's part: it runs on, finished by the scope's end at the latest.
            ReqState::Collective(id) => self.comm.process.engine.detach(id),
            _ => {}
        }
    }
}

fn any_comm<'a>(reqs: &[Request<'a>]) -> Option<&'a Comm> {
    reqs.iter().find(|r| r.is_active()).map(|r| r.comm)
}

/// Waits for every request (MPI_Waitall). All are completed even if one fails; the first error
/// is returned. Inactive requests report an empty status.
pub fn waitall(reqs: &mut [Request<'_>]) -> Result<Vec<Status>> {
    let mut first_error = None;
    let mut statuses = Vec::with_capacity(reqs.len());
    for req in reqs.iter_mut() {
        match req.wait_in_place() {
            Ok(status) => statuses.push(status),
            Err(e) => {
                statuses.push(EMPTY_STATUS);
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        None => Ok(statuses),
        Some(e) => Err(e),
    }
}

/// Waits until one request completes and returns its index and status (MPI_Waitany); `None` if
/// no request is active.
pub fn waitany(reqs: &mut [Request<'_>]) -> Result<Option<(usize, Status)>> {
    let Some(comm) = any_comm(reqs) else { return Ok(None) };
    let mut done = None;
    comm.dev.wait_until(&mut || {
        done = reqs.iter_mut().position(|r| r.poll());
        Ok(done.is_some())
    })?;
    let index = done.expect("waitany completed");
    reqs[index].take().map(|status| Some((index, status)))
}

/// Completes one finished request if there is one (MPI_Testany). `Ok(None)` if none finished yet.
pub fn testany(reqs: &mut [Request<'_>]) -> Result<Option<(usize, Status)>> {
    match reqs.iter_mut().position(|r| r.poll()) {
        Some(index) => reqs[index].take().map(|status| Some((index, status))),
        None => Ok(None),
    }
}

/// Completes all requests if all have finished (MPI_Testall); otherwise completes none of them
/// from the caller's point of view and returns `Ok(None)`.
pub fn testall(reqs: &mut [Request<'_>]) -> Result<Option<Vec<Status>>> {
    let mut all = true;
    for req in reqs.iter_mut() {
        all &= req.poll() || !req.is_active();
    }
    if !all {
        return Ok(None);
    }
    waitall(reqs).map(Some)
}
