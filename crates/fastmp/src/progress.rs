//! The progress engine of one rank: its outstanding nonblocking collectives, driven by every
//! fastmp call on the rank (MPI's progress rule), not by a thread of their own.
//!
//! A nonblocking collective is a future built from the same algorithm code as its blocking twin
//! (see `coll::transport::Run`): each `.await` is a *dependent* stage, requests started together
//! and awaited as a batch are *non-dependent* stages (the seed's terms). The engine polls the
//! futures in issue order whenever the rank calls into fastmp; [`Progressing`] wraps the rank's
//! device so that every blocking wait inside the device also drives them.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use crate::device::{ContextId, Device, MatchSpec, RawStatus, ReqId, SendMode, Started};
use crate::error::Result;
use crate::future_pool::{Boxed, FuturePool};

/// A collective's remaining stages, with the borrow of its buffers erased (see [`Engine::start`]).
type Schedule = Boxed<'static>;

/// Identifies an operation in the engine (never reused within a rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpId(u64);

struct Entry {
    id: OpId,
    /// The `Comm::scope` that owns the operation (finishes it before its buffers go away).
    scope: u64,
    /// `None` while being polled or once finished.
    schedule: Option<Schedule>,
    outcome: Option<Result<()>>,
    /// Its request was dropped or leaked: nobody will collect the outcome.
    detached: bool,
}

/// Outstanding nonblocking collectives of one rank, in issue order.
#[derive(Default)]
pub(crate) struct Engine {
    entries: RefCell<Vec<Entry>>,
    /// Operations not finished yet (read on every device wait, so kept apart from the list).
    unfinished: Cell<usize>,
    next_id: Cell<u64>,
    /// Set while polling: calls made from inside a stage (device waits, user reduction ops)
    /// must not poll the futures again.
    polling: Cell<bool>,
    /// Set while the rank waits for its only unfinished operation (`Engine::progress_waited`):
    /// that operation's steps may then wait in place, as its blocking twin's do, instead of
    /// returning to the engine between tests.
    waited_alone: Cell<bool>,
    /// Set while `finish_scope` drops unfinished operations: their runs tell the device's
    /// collectives that they are abandoned, not over.
    abandoning: Cell<bool>,
    /// Memory of finished operations' futures, for the next ones (`Scope::start_collective`
    /// boxes each operation in it, and drops one that finished at its first poll there).
    pub(crate) pool: FuturePool,
}

impl Engine {
    /// Whether no nonblocking collective is in flight (the device's fast paths stay in use).
    pub(crate) fn is_idle(&self) -> bool {
        self.unfinished.get() == 0
    }

    /// Whether the caller runs inside a stage of a nonblocking collective.
    pub(crate) fn is_polling(&self) -> bool {
        self.polling.get()
    }

    /// Whether the operation being polled is the only unfinished one and the rank waits for
    /// it: nothing else needs this rank's progress, so its steps may wait in place.
    pub(crate) fn is_waited_alone(&self) -> bool {
        self.waited_alone.get()
    }

    /// As [`Engine::progress`], for a wait on operation `id`: when it is the only unfinished
    /// operation, its steps wait in place (a shorter loop than the engine's, with the same
    /// device progress), so a waited operation runs as fast as its blocking twin. With others
    /// in flight every step yields as usual: they may need this rank's progress.
    pub(crate) fn progress_waited(&self, id: OpId) {
        let alone = self.unfinished.get() == 1
            && !self.polling.get()
            && self.entries.borrow().iter().any(|e| e.id == id && e.outcome.is_none());
        self.waited_alone.set(alone);
        self.progress();
        self.waited_alone.set(false);
    }

    /// Runs `poll`, which starts a part of an operation without waiting for it, or polls parts
    /// that run side by side, with in-place waits off: a part that waited in place there would
    /// hold up the parts (or the caller's next steps) that its peers wait for.
    pub(crate) fn polling_parts<R>(&self, poll: impl FnOnce() -> R) -> R {
        let alone = self.waited_alone.replace(false);
        let result = poll();
        self.waited_alone.set(alone);
        result
    }

    /// Whether the operations being dropped now are abandoned unfinished (see
    /// [`Engine::finish_scope`]).
    pub(crate) fn is_abandoning(&self) -> bool {
        self.abandoning.get()
    }

    /// Registers `schedule` (already polled once, by the caller) for `scope`.
    ///
    /// # Safety
    /// `schedule` may borrow data that lives as long as `scope`'s closure: the caller
    /// (`Comm::scope`) must call [`Engine::finish_scope`] for `scope` before those borrows end.
    pub(crate) unsafe fn start<'a>(&self, scope: u64, schedule: Boxed<'a>) -> OpId {
        // SAFETY: only the lifetime bound changes. The entry is polled only on this rank's thread
        // (the engine is not `Send`) and is dropped or finished by `finish_scope(scope)`, which
        // the caller runs before `'a` ends.
        let schedule: Schedule = unsafe { std::mem::transmute(schedule) };
        let id = OpId(self.next_id.get());
        self.next_id.set(id.0 + 1);
        let entry = Entry { id, scope, schedule: Some(schedule), outcome: None, detached: false };
        self.entries.borrow_mut().push(entry);
        self.unfinished.set(self.unfinished.get() + 1);
        id
    }

    /// Polls every unfinished operation once, in issue order. Does nothing when called from
    /// inside a stage.
    pub(crate) fn progress(&self) {
        if self.is_idle() || self.polling.replace(true) {
            return;
        }
        // Operations finishing here were not abandoned, even while an abandoned one's drop
        // waits for its peers and so drives the others.
        let abandoning = self.abandoning.replace(false);
        let mut cx = Context::from_waker(Waker::noop());
        let mut index = 0;
        loop {
            // Take the future out so no borrow of the list is held while it runs.
            let taken = {
                let mut entries = self.entries.borrow_mut();
                let Some(entry) = entries.get_mut(index) else { break };
                entry.schedule.take().map(|schedule| (entry.id, schedule))
            };
            index += 1;
            let Some((id, mut schedule)) = taken else { continue };
            let poll = schedule.as_mut().poll(&mut cx);
            let mut entries = self.entries.borrow_mut();
            let Some(entry) = entries.iter_mut().find(|e| e.id == id) else { continue };
            match poll {
                Poll::Pending => entry.schedule = Some(schedule),
                Poll::Ready(outcome) => {
                    self.pool.recycle(schedule);
                    entry.outcome = Some(outcome);
                    self.unfinished.set(self.unfinished.get() - 1);
                }
            }
        }
        self.entries.borrow_mut().retain(|e| !(e.detached && e.outcome.is_some()));
        self.abandoning.set(abandoning);
        self.polling.set(false);
    }

    /// The outcome of `id` once it finished (taken: a second call reports it as missing).
    pub(crate) fn take_outcome(&self, id: OpId) -> Option<Result<()>> {
        let mut entries = self.entries.borrow_mut();
        let index = entries.iter().position(|e| e.id == id)?;
        entries[index].outcome.as_ref()?;
        entries.remove(index).outcome
    }

    /// Nobody will collect `id`'s outcome: it keeps running and is forgotten once finished.
    pub(crate) fn detach(&self, id: OpId) {
        let mut entries = self.entries.borrow_mut();
        if let Some(index) = entries.iter().position(|e| e.id == id) {
            if entries[index].outcome.is_some() {
                entries.remove(index);
            } else {
                entries[index].detached = true;
            }
        }
    }

    /// Ends `scope`'s operations before its buffers go away: runs them to completion (as
    /// `std::thread::scope` joins its threads), or, when `abandon` is set (the scope is
    /// unwinding) or the job failed, drops their remaining stages, which releases every device
    /// request they hold. Outcomes nobody collected are lost, like those of a freed MPI request.
    pub(crate) fn finish_scope(&self, dev: &dyn Device, scope: u64, abandon: bool) {
        let owned = |entries: &Vec<Entry>| entries.iter().any(|e| e.scope == scope && e.outcome.is_none());
        if !abandon && owned(&self.entries.borrow()) {
            let _ = dev.wait_until(&mut || {
                self.progress();
                Ok(!owned(&self.entries.borrow()))
            });
        }
        // Extracted in place, so the list keeps its capacity for the next scope's operations.
        let dropped: Vec<Entry> = self.entries.borrow_mut().extract_if(.., |e| e.scope == scope).collect();
        let abandoned = dropped.iter().filter(|e| e.outcome.is_none()).count();
        self.unfinished.set(self.unfinished.get() - abandoned);
        // Dropping the futures here, outside the list's borrow, releases their requests; the
        // unfinished ones' peers are told not to wait for the parts this rank never entered
        // (a process peer may be waiting in one while this rank waits for it in another).
        self.abandoning.set(abandoned > 0);
        drop(dropped);
        self.abandoning.set(false);
    }
}

/// A rank's device with its [`Engine`]: every wait inside the device also polls the rank's
/// nonblocking collectives. With none in flight every call goes straight to the device.
pub(crate) struct Progressing<D: ?Sized> {
    engine: Rc<Engine>,
    inner: Rc<D>,
}

impl<D: Device + ?Sized> Progressing<D> {
    pub(crate) fn new(inner: Rc<D>, engine: Rc<Engine>) -> Self {
        Progressing { engine, inner }
    }
}

impl<D: Device + ?Sized> Device for Progressing<D> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn size(&self) -> usize {
        self.inner.size()
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
        // SAFETY: forwarded caller contract.
        unsafe { self.inner.isend(buf, len, dest, tag, context, mode) }
    }

    unsafe fn irecv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Result<Started> {
        // SAFETY: forwarded caller contract.
        unsafe { self.inner.irecv(buf, capacity, spec) }
    }

    fn send(&self, buf: &[u8], dest: usize, tag: i32, context: ContextId, mode: SendMode) -> Result<()> {
        if self.engine.is_idle() {
            return self.inner.send(buf, dest, tag, context, mode);
        }
        crate::device::send_by_request(self, buf, dest, tag, context, mode)
    }

    unsafe fn recv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Result<RawStatus> {
        // A receive of the operation the rank waits for alone needs no polls of the engine in
        // between either (see `Engine::progress_waited`).
        if self.engine.is_idle() || self.engine.is_waited_alone() {
            // SAFETY: forwarded caller contract.
            return unsafe { self.inner.recv(buf, capacity, spec) };
        }
        // SAFETY: forwarded caller contract; `complete` releases the request on every error.
        let started = unsafe { self.inner.irecv(buf, capacity, spec)? };
        self.complete(started)
    }

    fn receives_unposted(&self) -> bool {
        self.inner.receives_unposted()
    }

    unsafe fn try_recv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Option<Result<RawStatus>> {
        // SAFETY: forwarded caller contract.
        unsafe { self.inner.try_recv(buf, capacity, spec) }
    }

    fn iprobe(&self, spec: MatchSpec) -> Result<Option<RawStatus>> {
        self.engine.progress();
        self.inner.iprobe(spec)
    }

    fn test(&self, req: ReqId) -> Result<Option<RawStatus>> {
        self.engine.progress();
        self.inner.test(req)
    }

    fn cancel(&self, req: ReqId) -> Result<()> {
        self.inner.cancel(req)
    }

    fn release(&self, req: ReqId) {
        self.inner.release(req)
    }

    fn wait_until(&self, poll: &mut dyn FnMut() -> Result<bool>) -> Result<()> {
        if self.engine.is_idle() || self.engine.is_polling() {
            return self.inner.wait_until(poll);
        }
        self.inner.wait_until(&mut || {
            self.engine.progress();
            poll()
        })
    }

    fn wait(&self, req: ReqId) -> Result<RawStatus> {
        if self.engine.is_idle() {
            return self.inner.wait(req);
        }
        let mut done = None;
        self.wait_until(&mut || {
            done = self.inner.test(req)?;
            Ok(done.is_some())
        })?;
        Ok(done.expect("wait_until returns after completion"))
    }

    fn progress(&self) {
        self.inner.progress();
        self.engine.progress();
    }

    fn waits_in_place(&self) -> bool {
        self.engine.is_waited_alone()
    }

    fn finalize(&self) {
        self.inner.finalize()
    }

    fn is_finalized(&self) -> bool {
        self.inner.is_finalized()
    }

    fn placement(&self) -> &crate::device::Placement {
        self.inner.placement()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn abort_job(&self, failure: crate::device::Failure) -> crate::device::Failure {
        self.inner.abort_job(failure)
    }

    fn job_failure(&self) -> Option<crate::device::Failure> {
        self.inner.job_failure()
    }

    fn collectives(&self, context: ContextId, members: &[usize]) -> Option<crate::device::collectives::Collectives> {
        self.inner.collectives(context, members)
    }

    fn open_context(&self, context: ContextId, members: &[usize]) -> Result<()> {
        self.inner.open_context(context, members)
    }

    fn one_sided(&self) -> Option<&dyn crate::device::one_sided::OneSided> {
        self.inner.one_sided()
    }

    fn thread_level(&self) -> crate::ThreadLevel {
        self.inner.thread_level()
    }

    fn thread_shared(&self) -> Result<crate::device::SharedDevice> {
        self.inner.thread_shared()
    }

    fn improbe(&self, spec: MatchSpec) -> Result<Option<(crate::device::MessageId, RawStatus)>> {
        self.engine.progress();
        self.inner.improbe(spec)
    }

    unsafe fn mrecv(&self, msg: crate::device::MessageId, buf: *mut u8, capacity: usize) -> Result<Started> {
        // SAFETY: forwarded caller contract.
        unsafe { self.inner.mrecv(msg, buf, capacity) }
    }

    fn discard(&self, msg: crate::device::MessageId) {
        self.inner.discard(msg)
    }
}
