//! The one place where the layers above start device operations on borrowed buffers.
//!
//! [`Device::isend`]/[`Device::irecv`] take raw pointers: the device may touch the buffer until the
//! request completes or is released. Everything that upholds that rule lives here:
//! - [`InFlight`], a started request that releases itself when dropped (the collective
//!   transport's stages, and the blocking calls below);
//! - [`send`] and [`recv`], blocking and therefore safe for any borrow, and [`detached_send`]
//!   (bsend), which releases what it started before returning;
//! - [`Ledger`] and [`scoped`], the requests of a `Comm::scope`, which may be dropped or leaked
//!   by the user: the ledger keeps their handles and [`scoped`] finishes every one still
//!   outstanding before the scope's borrows end, as `std::thread::scope` joins its threads
//!   (receives are waited for, sends detached; when unwinding or after a failed wait, released).

use std::cell::RefCell;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};

use super::{ContextId, Device, MatchSpec, RawStatus, ReqId, SendMode, Started};
use crate::error::Result;

/// A started device operation on a buffer borrowed for `'a`, released (cancelled, detached or
/// waited out, see [`Device::release`]) when dropped unless it completed.
#[must_use = "dropping an in-flight request abandons it"]
pub(crate) struct InFlight<'a> {
    dev: &'a dyn Device,
    id: ReqId,
    /// Completed (or failed, which releases it): nothing left to release.
    finished: bool,
    /// The buffer the device may still touch.
    buffer: PhantomData<&'a mut [u8]>,
}

/// How a started operation stands: finished inside the call (the common, request-free case),
/// or in flight.
pub(crate) enum Outcome<'a> {
    Complete(Result<RawStatus>),
    InFlight(InFlight<'a>),
}

impl<'a> Outcome<'a> {
    pub(crate) fn of(dev: &'a dyn Device, started: Started) -> Self {
        match started {
            Started::Complete(result) => Outcome::Complete(result),
            Started::Pending(id) => Outcome::InFlight(InFlight { dev, id, finished: false, buffer: PhantomData }),
        }
    }

    /// Blocks until the operation finished (the buffer is free again on return, also on errors).
    pub(crate) fn wait(self) -> Result<RawStatus> {
        match self {
            Outcome::Complete(result) => result,
            Outcome::InFlight(op) => op.wait(),
        }
    }
}

impl<'a> InFlight<'a> {
    /// Starts sending `buf`.
    ///
    /// # Safety
    /// The returned request must not be leaked (`mem::forget`): its `Drop` is what ends the
    /// device's access to `buf` if it has not completed.
    pub(crate) unsafe fn send(
        dev: &'a dyn Device,
        buf: &'a [u8],
        dest: usize,
        tag: i32,
        context: ContextId,
        mode: SendMode,
    ) -> Result<Outcome<'a>> {
        // SAFETY: `buf` stays borrowed (and unmodified) for 'a, as long as the returned request,
        // which completes or releases the operation before it goes away (caller: never leaked).
        let started = unsafe { dev.isend(buf.as_ptr(), buf.len(), dest, tag, context, mode) };
        // Looked at in place and rebuilt, not moved on whole: the device has just stored it field
        // by field, and a whole-enum move reads its odd-sized gaps back with overlapping loads
        // that stall store forwarding (6 % of an np-2 32-byte shm allreduce; see RawStatus::sent).
        match &started {
            Ok(Started::Pending(id)) => Ok(Outcome::of(dev, Started::Pending(*id))),
            Ok(Started::Complete(Ok(status))) => {
                Ok(Outcome::Complete(Ok(RawStatus::sent(status.source, tag, buf.len()))))
            }
            _ => Self::refused(dev, started),
        }
    }

    /// A start that failed, out of the hot path.
    #[cold]
    #[inline(never)]
    fn refused(dev: &'a dyn Device, started: Result<Started>) -> Result<Outcome<'a>> {
        started.map(|started| Outcome::of(dev, started))
    }

    /// Starts receiving into `buf`.
    ///
    /// # Safety
    /// As for [`InFlight::send`].
    pub(crate) unsafe fn recv(dev: &'a dyn Device, buf: &'a mut [u8], spec: MatchSpec) -> Result<Outcome<'a>> {
        // SAFETY: `buf` is exclusively borrowed for 'a, as long as the returned request, which
        // completes or releases the operation before it goes away (caller: never leaked).
        let started = unsafe { dev.irecv(buf.as_mut_ptr(), buf.len(), spec)? };
        Ok(Outcome::of(dev, started))
    }

    /// Progresses communication; `Some` once the operation finished. A failed test has
    /// released the request already (the device's rule).
    pub(crate) fn test(&mut self) -> Result<Option<RawStatus>> {
        let result = self.dev.test(self.id);
        self.finished = !matches!(result, Ok(None));
        result
    }

    /// Blocks until the operation finished.
    pub(crate) fn wait(mut self) -> Result<RawStatus> {
        let result = self.dev.wait(self.id);
        // A failed wait leaves the request outstanding: `Drop` releases it.
        self.finished = result.is_ok();
        result
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.dev.release(self.id);
        }
    }
}

/// Buffered send (MPI_Bsend): returns at once; a send the device could not finish inside the
/// call is detached (its data copied, delivered without `buf`).
pub(crate) fn detached_send(dev: &dyn Device, buf: &[u8], dest: usize, tag: i32, context: ContextId) -> Result<()> {
    // SAFETY: a pending request is released below, before `buf`'s borrow ends, and release
    // detaches a send (the device's contract): the device no longer reads `buf` after it.
    let started = unsafe { dev.isend(buf.as_ptr(), buf.len(), dest, tag, context, SendMode::Standard)? };
    match started {
        Started::Complete(result) => result.map(drop),
        Started::Pending(id) => {
            dev.release(id);
            Ok(())
        }
    }
}

/// Receives a message that has arrived already, without posting a receive
/// ([`Device::try_recv`]); `None` if none has.
pub(crate) fn try_recv(dev: &dyn Device, buf: &mut [u8], spec: MatchSpec) -> Option<Result<RawStatus>> {
    // SAFETY: `buf` is exclusively borrowed until the call returns, and nothing is posted that
    // could touch it later.
    unsafe { dev.try_recv(buf.as_mut_ptr(), buf.len(), spec) }
}

/// Blocking receive through the device's blocking path (which may skip posting a request).
pub(crate) fn recv(dev: &dyn Device, buf: &mut [u8], spec: MatchSpec) -> Result<RawStatus> {
    // SAFETY: `buf` is exclusively borrowed until the blocking receive returns, and the device
    // releases its request on every error path before returning.
    unsafe { dev.recv(buf.as_mut_ptr(), buf.len(), spec) }
}

/// The requests a scope started on buffers borrowed for `'scope`. Requests may be dropped or
/// leaked by their users: whatever is still outstanding here is finished when [`scoped`] ends.
/// Invariant in `'scope` (as `std::thread::Scope`), so a buffer must outlive the whole scope.
pub(crate) struct Ledger<'scope> {
    handles: Handles<'scope>,
    scope: PhantomData<&'scope mut &'scope ()>,
}

/// A ledger's list of outstanding handles, as requests keep it (covariant, so requests of
/// nested scopes can share a collection).
#[derive(Clone, Copy)]
pub(crate) struct Handles<'a> {
    dev: &'a dyn Device,
    /// Requests that were pending when started and have not been retired since (owned by
    /// [`scoped`]'s frame, so a scope value owns nothing that needs dropping).
    pending: &'a RefCell<Vec<Pending>>,
}

/// A request a scope's end still has to finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pending {
    id: ReqId,
    /// A receive is waited for at the scope's end; a send is detached (delivered anyway).
    recv: bool,
}

/// A start of this scope's, as the layers above use it: built from the device's result where
/// the device returned it, so that the whole result (a `Result<Started>` of 64 bytes) is never
/// copied on the hot paths. Copying a value the callee has just stored field by field, with a
/// struct copy's wider loads, stalls store forwarding once per copy (see `RawStatus::sent`).
/// `T` is what a start that finished at once reports: nothing for a send (its status is
/// [`RawStatus::sent`]), the status for a receive.
pub(crate) enum Begun<T> {
    /// Finished at once.
    Done(T),
    /// In flight; the ledger holds it.
    Pending(ReqId),
    /// The start failed (`Err`) or finished with an error: rare, so kept whole, boxed.
    Failed(Box<Result<Started>>),
}

impl<T> Begun<T> {
    #[cold]
    fn failed(started: Result<Started>) -> Begun<T> {
        Begun::Failed(Box::new(started))
    }
}

impl Handles<'_> {
    /// `started` as a [`Begun`], recorded if it is pending; `done` picks what a finished start
    /// reports (a send's status is not even read).
    #[inline]
    fn begun<T>(self, started: Result<Started>, recv: bool, done: impl FnOnce(&RawStatus) -> T) -> Begun<T> {
        match &started {
            Ok(Started::Complete(Ok(status))) => Begun::Done(done(status)),
            Ok(Started::Pending(id)) => {
                self.keep(*id, recv);
                Begun::Pending(*id)
            }
            _ => Begun::failed(started),
        }
    }

    fn keep(self, id: ReqId, recv: bool) {
        self.pending.borrow_mut().push(Pending { id, recv });
    }

    fn position(self, id: ReqId) -> Option<usize> {
        self.pending.borrow().iter().rposition(|p| p.id == id)
    }

    /// Forgets `id`: it completed (or was released), so the scope's end has nothing to do.
    /// Keeps the list short in long scopes. Requests usually finish oldest first (a waitall)
    /// or newest first, so the list keeps posting order and is searched from both ends: either
    /// way a retire costs O(1) instead of a scan of the whole window.
    #[inline]
    pub(crate) fn retire(self, id: ReqId) {
        let mut list = self.pending.borrow_mut();
        if list.last().is_some_and(|p| p.id == id) {
            list.pop();
        } else if let Some(pos) = list.iter().position(|p| p.id == id) {
            list.remove(pos);
        }
    }

    /// A request handle was dropped unwaited. A send is detached now (its data is delivered
    /// without the caller's buffer, so it needs no further attention); a receive stays listed
    /// and still receives: the scope's end waits for it (MPI_Request_free's semantics).
    pub(crate) fn drop_request(self, id: ReqId) {
        if let Some(pos) = self.position(id) {
            let entry = self.pending.borrow()[pos];
            if !entry.recv {
                self.dev.release(id);
                self.pending.borrow_mut().remove(pos);
            }
        }
    }

    /// Requests outstanding in the list.
    #[cfg(test)]
    pub(crate) fn outstanding(self) -> usize {
        self.pending.borrow().len()
    }

    /// Finishes every listed request: sends first are detached (so no receive below can wait on
    /// one of them), then receives are waited for, in posting order. When `abandon` is set (the
    /// scope unwinds) or a wait fails (a peer failed, the job aborted, a truncation), the rest
    /// are released instead, so a scope's end never hangs on a job that cannot finish them.
    /// Errors of receives nobody waited for are dropped, like those of a freed MPI request.
    fn finish_all(self, mut abandon: bool) {
        // Taken out of the cell: the device's waits may run other code of this rank.
        let mut list = std::mem::take(&mut *self.pending.borrow_mut());
        for entry in list.iter().filter(|p| !p.recv) {
            self.dev.release(entry.id);
        }
        for entry in list.iter().filter(|p| p.recv) {
            if abandon {
                self.dev.release(entry.id);
            } else if self.dev.complete(Started::Pending(entry.id)).is_err() {
                // `complete` released it.
                abandon = true;
            }
        }
        list.clear();
        *self.pending.borrow_mut() = list;
    }
}

impl<'scope> Ledger<'scope> {
    /// The handle list, for the requests of this scope.
    pub(crate) fn handles(&self) -> Handles<'scope> {
        self.handles
    }

    /// Starts sending `buf`, which stays borrowed until the scope ends.
    #[inline]
    pub(crate) fn isend(
        &self,
        buf: &'scope [u8],
        dest: usize,
        tag: i32,
        context: ContextId,
        mode: SendMode,
    ) -> Begun<()> {
        // SAFETY: `buf` is borrowed for 'scope, and `scoped` finishes (waits for or releases) the
        // request before 'scope ends unless it was retired (completed or released) earlier.
        let started = unsafe { self.handles.dev.isend(buf.as_ptr(), buf.len(), dest, tag, context, mode) };
        self.handles.begun(started, false, |_| ())
    }

    /// Keeps an operation started elsewhere (one-sided requests) like the ledger's own: the scope's
    /// end waits for it (`wait_at_end`) or releases it.
    ///
    /// # Safety
    /// Its buffers are borrowed for `'scope` (exclusively where the device writes them).
    pub(crate) unsafe fn adopt(&self, started: Started, wait_at_end: bool) -> Started {
        if let Started::Pending(id) = started {
            self.handles.keep(id, wait_at_end);
        }
        started
    }

    /// Starts receiving into raw memory.
    ///
    /// # Safety
    /// `buf` must be valid for writes of `len` bytes until the scope ends, and not accessed by
    /// anything else meanwhile.
    #[inline]
    pub(crate) unsafe fn irecv_raw(&self, buf: *mut u8, len: usize, spec: MatchSpec) -> Begun<RawStatus> {
        // SAFETY: forwarded caller contract; `scoped` finishes the request before the scope ends.
        let started = unsafe { self.handles.dev.irecv(buf, len, spec) };
        self.handles.begun(started, true, |status| *status)
    }
}

/// A family of scope types over their `'scope` lifetime (each built around a [`Ledger`]).
pub(crate) trait LedgerOwner {
    type At<'scope>;
}

/// Runs `body` with a scope built by `build` around a fresh ledger whose handle list is `list`
/// (empty; reused so that a scope allocates nothing once warm). Before returning every request
/// still in the ledger is finished (`Handles::finish_all`; released when `body` unwinds).
/// Returns `body`'s value and the list for reuse.
///
/// The scope value must own nothing that needs dropping (checked at compile time): it is
/// borrowed for its whole `'scope`, which leaves no point at which it could be dropped.
pub(crate) fn scoped<S: LedgerOwner, R>(
    dev: &dyn Device,
    list: Vec<Pending>,
    build: impl for<'scope> FnOnce(Ledger<'scope>) -> S::At<'scope>,
    body: impl for<'scope> FnOnce(&'scope S::At<'scope>) -> R,
) -> (R, Vec<Pending>) {
    const { assert!(!std::mem::needs_drop::<S::At<'static>>(), "a scope must not need dropping") };
    let pending = RefCell::new(list);
    let handles = Handles { dev, pending: &pending };
    let scope = ManuallyDrop::new(build(Ledger { handles, scope: PhantomData }));
    let result = catch_unwind(AssertUnwindSafe(|| body(&scope)));
    handles.finish_all(result.is_err());
    match result {
        Ok(value) => (value, pending.into_inner()),
        Err(payload) => resume_unwind(payload),
    }
}
