//! Requests that own their buffers, so they are not tied to a [`Comm::scope`]: they can be kept
//! across loop iterations, stored in structs and returned from functions. Two kinds share one
//! core ([`OwnedOp`]):
//! - [`OwnedRequest`] (`Comm::isend_owned`/`irecv_owned`): one operation; completing it hands the
//!   buffer back;
//! - [`PersistentRequest`] (`Comm::send_init`/`recv_init`, MPI's persistent requests): the
//!   arguments are bound once and the operation started any number of times.
//!
//! Soundness: the device may touch the buffer's heap memory while the operation is in flight.
//! Nothing hands out access to the buffer then (every accessor checks), moving the request
//! moves only the `Vec`'s header, and:
//! - a request dropped in flight gives its device request and buffer to the rank's [`Orphans`],
//!   which keep the buffer alive until the device is done with it (MPI_Request_free: the
//!   operation still completes), checked on every later owned-buffer call and finished when the
//!   rank's last communicator goes away;
//! - a request leaked with `mem::forget` leaks its buffer: the device may write into memory that
//!   nobody frees, never into freed memory.

use std::any::Any;
use std::cell::RefCell;
use std::rc::Rc;

use bytemuck::Pod;

use crate::comm::{Comm, Status};
use crate::completion::sealed::Completion;
use crate::completion::wait_one;
use crate::device::{Device, MatchSpec, ReqId, SendMode, Source, Started};
use crate::error::{Error, Result};
use crate::p2p::NULL_RAW;
use crate::scope::EMPTY_STATUS;

/// Where an owned-buffer operation goes; `None` peers are [`crate::PROC_NULL`].
#[derive(Clone, Copy)]
enum Target {
    Send { dest: Option<usize>, tag: i32, mode: SendMode },
    Recv(Option<MatchSpec>),
}

enum OpState {
    /// Not started, or its result was taken.
    Idle,
    InFlight(ReqId),
    Done(Result<Status>),
}

/// The core of both owned-buffer request kinds: a buffer, a target and where the operation is.
struct OwnedOp<T: Pod> {
    comm: Comm,
    target: Target,
    /// Not accessed while the state is `InFlight` (the device may be using its memory).
    buf: Vec<T>,
    state: OpState,
}

impl<T: Pod> OwnedOp<T> {
    fn new(comm: &Comm, target: Target, buf: Vec<T>) -> Self {
        comm.process.orphans.sweep();
        OwnedOp { comm: comm.clone(), target, buf, state: OpState::Idle }
    }

    /// Starts the operation on the buffer; the state must not be `InFlight`.
    fn start(&mut self) -> Result<()> {
        debug_assert!(matches!(self.state, OpState::Idle));
        let dev = &self.comm.dev;
        let bytes = size_of_val(self.buf.as_slice());
        let started = match self.target {
            Target::Send { dest: None, .. } | Target::Recv(None) => Started::Complete(Ok(NULL_RAW)),
            // SAFETY: the buffer's memory stays allocated and untouched while the request is in
            // flight: accessors refuse `InFlight`, `Drop` hands the buffer to the orphans until
            // the device is done, and a leaked request leaks the buffer (module comment).
            Target::Send { dest: Some(dest), tag, mode } => unsafe {
                dev.isend(self.buf.as_ptr().cast::<u8>(), bytes, dest, tag, self.comm.context, mode)?
            },
            // SAFETY: as above, for the device's writes.
            Target::Recv(Some(spec)) => unsafe { dev.irecv(self.buf.as_mut_ptr().cast::<u8>(), bytes, spec)? },
        };
        self.state = match started {
            Started::Complete(result) => OpState::Done(self.status(result)),
            Started::Pending(id) => OpState::InFlight(id),
        };
        Ok(())
    }

    fn status(&self, result: Result<crate::device::RawStatus>) -> Result<Status> {
        result.and_then(|raw| self.comm.status(raw, size_of::<T>()))
    }

    fn poll(&mut self) -> bool {
        match self.state {
            OpState::InFlight(id) => {
                let result = match self.comm.dev.test(id) {
                    Ok(None) => return false,
                    Ok(Some(raw)) => Ok(raw),
                    Err(e) => Err(e),
                };
                self.state = OpState::Done(self.status(result));
                true
            }
            OpState::Done(_) => true,
            OpState::Idle => false,
        }
    }

    fn take_status(&mut self) -> Result<Status> {
        match std::mem::replace(&mut self.state, OpState::Idle) {
            OpState::Done(result) => result,
            OpState::Idle => Ok(EMPTY_STATUS),
            OpState::InFlight(id) => {
                self.state = OpState::InFlight(id);
                unreachable!("take on an operation in flight")
            }
        }
    }

    fn cancel(&self) -> Result<()> {
        match self.state {
            OpState::InFlight(id) => self.comm.dev.cancel(id),
            _ => Ok(()),
        }
    }
}

impl<T: Pod> Drop for OwnedOp<T> {
    fn drop(&mut self) {
        if let OpState::InFlight(id) = self.state
            && !self.poll()
        {
            let buf: Box<dyn Any> = Box::new(std::mem::take(&mut self.buf));
            self.comm.process.orphans.adopt(Orphan { dev: self.comm.dev.clone(), id, _buf: buf });
        }
    }
}

/// Owned-buffer operations of a rank that were dropped while in flight.
#[derive(Default)]
pub(crate) struct Orphans(RefCell<Vec<Orphan>>);

struct Orphan {
    dev: Rc<dyn Device>,
    id: ReqId,
    /// Kept alive, untouched, until the device is done with the request.
    _buf: Box<dyn Any>,
}

impl Orphans {
    fn adopt(&self, orphan: Orphan) {
        self.0.borrow_mut().push(orphan);
    }

    /// Frees the buffers of orphans whose operations finished (their results are dropped).
    pub(crate) fn sweep(&self) {
        let mut orphans = self.0.borrow_mut();
        if !orphans.is_empty() {
            orphans.retain(|o| matches!(o.dev.test(o.id), Ok(None)));
        }
    }
}

impl Drop for Orphan {
    /// The rank is ending (its last communicator is gone): a send still goes out (the device
    /// detaches it, copying the data), a receive that matched is finished, an unmatched one is
    /// cancelled, as nobody on this rank can use it any more. Never blocks on a peer.
    fn drop(&mut self) {
        self.dev.release(self.id);
    }
}

/// An operation on a buffer it owns (MPI_Isend/MPI_Irecv whose request may outlive any scope).
///
/// Completing it ([`OwnedRequest::wait`], [`crate::waitall`], [`crate::wait_some`], ...) hands
/// the buffer back with the status. Dropped unwaited, the operation still completes (the rank
/// keeps the buffer until it has); leaked with `mem::forget`, the buffer is leaked.
///
/// ```
/// fastmp::run(2, |world| {
///     let peer = 1 - world.rank();
///     // Pipelined: the next round's receive is posted before this round's data is used.
///     let mut pending = world.irecv_owned(vec![0u64; 4], peer, 0)?;
///     for round in 0..3u64 {
///         world.send(&[round; 4], peer, 0)?;
///         let next = world.irecv_owned(vec![0u64; 4], peer, 0)?;
///         let (got, _status) = std::mem::replace(&mut pending, next).wait()?;
///         assert_eq!(got, [round; 4]);
///     }
///     pending.cancel()?;
///     assert!(pending.wait()?.1.cancelled);
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
#[must_use = "a request does nothing unless waited for or tested"]
pub struct OwnedRequest<T: Pod> {
    op: OwnedOp<T>,
}

impl<T: Pod> OwnedRequest<T> {
    /// Blocks until the operation completes (MPI_Wait) and returns the buffer and the status.
    pub fn wait(mut self) -> Result<(Vec<T>, Status)> {
        wait_one(&mut self)
    }

    /// Completes the operation if it has finished (MPI_Test).
    pub fn test(&mut self) -> Result<Option<(Vec<T>, Status)>> {
        if !self.is_active() {
            return Err(Error::InvalidArgument("OwnedRequest::test: the request was completed already".into()));
        }
        if self.op.poll() { self.take().map(Some) } else { Ok(None) }
    }

    /// Requests cancellation (MPI_Cancel); the request must still be completed, and its status
    /// tells whether the cancel succeeded.
    pub fn cancel(&self) -> Result<()> {
        self.op.cancel()
    }

    /// Whether the buffer has not been handed back yet.
    pub fn is_active(&self) -> bool {
        !matches!(self.op.state, OpState::Idle)
    }
}

impl<T: Pod> Completion for OwnedRequest<T> {
    type Output = (Vec<T>, Status);

    fn device(&self) -> Option<Rc<dyn Device>> {
        Some(self.op.comm.dev.clone())
    }

    fn is_active(&self) -> bool {
        OwnedRequest::is_active(self)
    }

    fn poll(&mut self) -> bool {
        self.op.poll()
    }

    fn failed(&self) -> bool {
        matches!(self.op.state, OpState::Done(Err(_)))
    }

    fn take(&mut self) -> Result<(Vec<T>, Status)> {
        if !self.is_active() {
            return Err(Error::InvalidArgument("wait on an OwnedRequest whose buffer was handed back already".into()));
        }
        let status = self.op.take_status()?;
        Ok((std::mem::take(&mut self.op.buf), status))
    }
}

/// A persistent request (MPI_Send_init / MPI_Recv_init): its buffer, peer and tag are bound
/// once; [`PersistentRequest::start`] runs the operation again each time, and completing it
/// (`wait`, `test`, the set operations) leaves the request inactive, ready to be started again.
///
/// It owns its buffer: [`PersistentRequest::buf`] and [`PersistentRequest::buf_mut`] give access
/// while it is inactive. Dropped while active, the operation still completes; leaked, the
/// buffer is leaked.
///
/// ```
/// fastmp::run(2, |world| {
///     let peer = 1 - world.rank();
///     let mut send = world.send_init(vec![0.0f64; 8], peer, 0)?;
///     let mut recv = world.recv_init(vec![0.0f64; 8], peer, 0)?;
///     for step in 0..10 {
///         send.buf_mut()?.fill(step as f64);
///         fastmp::startall(&mut [&mut recv, &mut send])?;
///         recv.wait()?;
///         send.wait()?;
///         assert_eq!(recv.buf()?, [step as f64; 8]);
///     }
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
#[must_use = "a persistent request does nothing unless started"]
pub struct PersistentRequest<T: Pod> {
    op: OwnedOp<T>,
}

impl<T: Pod> PersistentRequest<T> {
    /// Starts the operation (MPI_Start). Fails if it is active (started and not completed).
    pub fn start(&mut self) -> Result<()> {
        if self.is_active() {
            return Err(Error::InvalidArgument(
                "PersistentRequest::start: the request is active; complete it (wait/test) before starting it again"
                    .into(),
            ));
        }
        self.op.start()
    }

    /// Blocks until the started operation completes (MPI_Wait); an inactive request returns an
    /// empty status at once.
    pub fn wait(&mut self) -> Result<Status> {
        wait_one(self)
    }

    /// Completes the operation if it has finished (MPI_Test); an inactive request reports an
    /// empty status.
    pub fn test(&mut self) -> Result<Option<Status>> {
        if !self.is_active() {
            return Ok(Some(EMPTY_STATUS));
        }
        if self.op.poll() { self.op.take_status().map(Some) } else { Ok(None) }
    }

    /// Requests cancellation of the started operation (MPI_Cancel).
    pub fn cancel(&self) -> Result<()> {
        self.op.cancel()
    }

    /// Whether the request was started and not completed yet.
    pub fn is_active(&self) -> bool {
        !matches!(self.op.state, OpState::Idle)
    }

    /// The buffer, while the request is inactive.
    pub fn buf(&self) -> Result<&[T]> {
        self.check_inactive("buf")?;
        Ok(&self.op.buf)
    }

    /// The buffer for writing (the next send's data), while the request is inactive.
    pub fn buf_mut(&mut self) -> Result<&mut [T]> {
        self.check_inactive("buf_mut")?;
        Ok(&mut self.op.buf)
    }

    /// The buffer back, ending the persistent request (MPI_Request_free); it must be inactive.
    pub fn into_buf(mut self) -> Result<Vec<T>> {
        self.check_inactive("into_buf")?;
        Ok(std::mem::take(&mut self.op.buf))
    }

    fn check_inactive(&self, call: &str) -> Result<()> {
        if self.is_active() {
            return Err(Error::InvalidArgument(format!(
                "PersistentRequest::{call}: the request is active; complete it (wait/test) first"
            )));
        }
        Ok(())
    }
}

impl<T: Pod> Completion for PersistentRequest<T> {
    type Output = Status;

    fn device(&self) -> Option<Rc<dyn Device>> {
        Some(self.op.comm.dev.clone())
    }

    fn is_active(&self) -> bool {
        PersistentRequest::is_active(self)
    }

    fn poll(&mut self) -> bool {
        self.op.poll()
    }

    fn failed(&self) -> bool {
        matches!(self.op.state, OpState::Done(Err(_)))
    }

    fn take(&mut self) -> Result<Status> {
        self.op.take_status()
    }
}

/// Starts every request (MPI_Startall). Fails, starting none, if one of them is active.
pub fn startall<T: Pod, P: std::borrow::BorrowMut<PersistentRequest<T>>>(reqs: &mut [P]) -> Result<()> {
    if let Some(index) = reqs.iter().position(|r| r.borrow().is_active()) {
        return Err(Error::InvalidArgument(format!(
            "startall: request {index} is active; complete it (wait/test) before starting it again"
        )));
    }
    reqs.iter_mut().try_for_each(|r| r.borrow_mut().op.start())
}

impl Comm {
    /// Starts sending `buf`, which the request owns until it completes (MPI_Isend without a
    /// scope: see [`OwnedRequest`]).
    pub fn isend_owned<T: Pod>(&self, buf: Vec<T>, dest: usize, tag: i32) -> Result<OwnedRequest<T>> {
        self.start_owned(self.send_target(dest, tag, SendMode::Standard)?, buf)
    }

    /// Synchronous-mode [`Comm::isend_owned`] (MPI_Issend): completes once the receiver matched.
    pub fn issend_owned<T: Pod>(&self, buf: Vec<T>, dest: usize, tag: i32) -> Result<OwnedRequest<T>> {
        self.start_owned(self.send_target(dest, tag, SendMode::Synchronous)?, buf)
    }

    /// Starts receiving into `buf` (its length is the capacity), which the request owns until it
    /// completes (MPI_Irecv without a scope: see [`OwnedRequest`]).
    pub fn irecv_owned<T: Pod>(&self, buf: Vec<T>, source: impl Into<Source>, tag: i32) -> Result<OwnedRequest<T>> {
        self.start_owned(Target::Recv(self.spec_or_null(source.into(), tag)?), buf)
    }

    /// A persistent standard-mode send of `buf` to `dest` (MPI_Send_init); inactive until
    /// started. See [`PersistentRequest`].
    pub fn send_init<T: Pod>(&self, buf: Vec<T>, dest: usize, tag: i32) -> Result<PersistentRequest<T>> {
        Ok(PersistentRequest { op: OwnedOp::new(self, self.send_target(dest, tag, SendMode::Standard)?, buf) })
    }

    /// A persistent synchronous-mode send (MPI_Ssend_init).
    pub fn ssend_init<T: Pod>(&self, buf: Vec<T>, dest: usize, tag: i32) -> Result<PersistentRequest<T>> {
        Ok(PersistentRequest { op: OwnedOp::new(self, self.send_target(dest, tag, SendMode::Synchronous)?, buf) })
    }

    /// A persistent receive into `buf` (MPI_Recv_init); inactive until started.
    pub fn recv_init<T: Pod>(&self, buf: Vec<T>, source: impl Into<Source>, tag: i32) -> Result<PersistentRequest<T>> {
        let target = Target::Recv(self.spec_or_null(source.into(), tag)?);
        Ok(PersistentRequest { op: OwnedOp::new(self, target, buf) })
    }

    fn send_target(&self, dest: usize, tag: i32, mode: SendMode) -> Result<Target> {
        Ok(Target::Send { dest: self.dest_or_null(dest, tag)?, tag, mode })
    }

    fn start_owned<T: Pod>(&self, target: Target, buf: Vec<T>) -> Result<OwnedRequest<T>> {
        let mut op = OwnedOp::new(self, target, buf);
        op.start()?;
        Ok(OwnedRequest { op })
    }
}
