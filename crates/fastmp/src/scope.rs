//! Nonblocking point-to-point: requests live in a scope, as threads do in `std::thread::scope`.
//!
//! A request borrows its buffer for the whole scope, and the scope's end releases every request it
//! started that is still outstanding (an unmatched receive is cancelled, a pending send is
//! detached by copying its data, an in-progress copy is waited for). So leaking a request with
//! `mem::forget` cannot leave the device pointing at a freed buffer. The bookkeeping that makes
//! this sound is the device layer's `Ledger` (`device/requests.rs`); this module is the typed API.

use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use bytemuck::Pod;

use crate::comm::{Comm, Status};
use crate::device::requests::{self, Handles, Ledger, LedgerOwner};
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

/// A nonblocking operation in flight (MPI_Request). Dropping or leaking it is safe: the device is
/// done with the buffer by the end of the scope at the latest.
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
    Inactive,
}

/// Outstanding requests a fresh scope has room for before its list grows (lists are reused).
const REQUESTS_PER_SCOPE: usize = 16;

/// Status reported for requests that were already inactive (MPI's empty status), and for
/// completed collectives.
pub(crate) const EMPTY_STATUS: Status = Status { source: usize::MAX, tag: ANY_TAG, bytes: 0, cancelled: false };

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
                // itself; the point-to-point requests are released after this returns.
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

    /// Wraps a started operation (the ledger already holds it if it is still in flight).
    fn request(&'scope self, started: Started, elem_size: usize) -> Request<'scope> {
        Request::new(self, started, elem_size)
    }

    /// Starts a standard-mode send (MPI_Isend).
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

    fn start_send<T: bytemuck::NoUninit>(
        &'scope self,
        buf: &'scope [T],
        dest: usize,
        tag: i32,
        mode: SendMode,
    ) -> Result<Request<'scope>> {
        let dest = self.comm.check_dest(dest, tag)?;
        let started = self.ledger.isend(bytemuck::cast_slice(buf), dest, tag, self.comm.context, mode)?;
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
        let started = self.ledger.irecv(bytemuck::cast_slice_mut(buf), spec)?;
        Ok(self.request(started, size_of::<T>()))
    }
}

impl<'scope> Request<'scope> {
    fn with_state(scope: &'scope Scope<'scope, '_>, state: ReqState, elem_size: usize) -> Self {
        Request { comm: scope.comm, handles: scope.ledger.handles(), state, elem_size }
    }

    /// A request that already finished with `result`.
    pub(crate) fn completed(scope: &'scope Scope<'scope, '_>, result: Result<Status>) -> Self {
        Self::with_state(scope, ReqState::Complete(result), 0)
    }

    /// A request for a nonblocking collective registered with the engine as `id`.
    pub(crate) fn collective(scope: &'scope Scope<'scope, '_>, id: OpId) -> Self {
        Self::with_state(scope, ReqState::Collective(id), 0)
    }

    pub(crate) fn new(scope: &'scope Scope<'scope, '_>, started: Started, elem_size: usize) -> Self {
        let state = match started {
            Started::Complete(result) => ReqState::Complete(result.and_then(|raw| scope.comm.status(raw, elem_size))),
            Started::Pending(id) => ReqState::Active(id),
        };
        Self::with_state(scope, state, elem_size)
    }

    /// Whether the request still has a result to deliver.
    pub fn is_active(&self) -> bool {
        !matches!(self.state, ReqState::Inactive)
    }

    /// Moves an active request to `Complete` if the device finished it. `true` once complete.
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
            ReqState::Active(id) => self.handles.release(id),
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
