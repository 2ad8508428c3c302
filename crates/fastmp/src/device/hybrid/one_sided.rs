//! One-sided windows on the hybrid device: each window is served whole by one transport.
//!
//! - A window whose members are all thread ranks of this process is an shm window (direct
//!   access: every origin copies into the target's part itself, hardware atomics, one lock word
//!   per part). No rank of another process can reach it, so nothing else touches its parts, and
//!   `direct_access` (`win_allocate_shared`) is true exactly for these.
//! - Any other window is a tcp window for *every* target, thread peers and the rank itself
//!   included (a thread rank's tcp endpoint has connections to its thread peers too): each part
//!   has one lock authority (its tcp part's lock table), and every accumulate or atomic, whoever
//!   issues it, is applied by one `Segment` read-modify-write per element at the target (the
//!   owner's own operations go straight to that same segment, under the same gate and lock
//!   table). Mixing the two paths inside one window would give a part two lock authorities
//!   (shm's lock word and tcp's table), so it is not done.
//!
//! Both transports number their requests in their own slabs: a handle the window returns is
//! routed like any other hybrid request (`handles`), so `Device::test`/`release` of the hybrid
//! device find it. Targets are window member indices, the same on every path.

use super::HybridEndpoint;
use super::Remote;
use super::handles::{Via, local_error_to_world, tag};
use crate::device::one_sided::{AccumulateOp, Element, LockKind, OneSided, RmaWindow};
use crate::device::rma_memory::Segment;
use crate::device::{ContextId, Started};
use crate::error::{Error, Result};

impl<R: Remote> HybridEndpoint<R> {
    /// `members` in the shm world's numbering, if every one of them is a thread rank of this
    /// process.
    fn local_members(&self, members: &[usize]) -> Option<Vec<usize>> {
        members.iter().map(|&m| self.is_local(m).then(|| m - self.base)).collect()
    }
}

impl<R: Remote> OneSided for HybridEndpoint<R> {
    unsafe fn expose(
        &self,
        window: ContextId,
        members: &[usize],
        base: *mut u8,
        len: usize,
    ) -> Result<Box<dyn RmaWindow>> {
        self.check_live()?;
        let (via, inner) = match self.local_members(members) {
            // SAFETY: forwarded caller contract.
            Some(local) => (Via::Local, unsafe { self.shm.expose(window, &local, base, len) }),
            None => match self.remote.windows() {
                // SAFETY: forwarded caller contract.
                Some(remote) => (Via::Remote, unsafe { remote.expose(window, members, base, len) }),
                None => {
                    return Err(Error::InvalidArgument(
                        "one-sided windows spanning processes need FASTMP_INTERPROCESS=tcp on the hybrid device \
                         (over MPI only windows of one process's ranks are supported)"
                            .into(),
                    ));
                }
            },
        };
        let inner = inner.map_err(|e| world_error(via, self.base, e))?;
        Ok(Box::new(Routed { via, base: self.base, inner }))
    }

    fn direct_access(&self, members: &[usize]) -> bool {
        self.local_members(members).is_some_and(|local| self.shm.direct_access(&local))
    }
}

/// A transport's window, its handles and errors in the hybrid device's terms.
struct Routed {
    via: Via,
    /// World rank of the process's local rank 0 (shm errors name local ranks).
    base: usize,
    inner: Box<dyn RmaWindow>,
}

/// An error of the transport `via` in world numbering.
fn world_error(via: Via, base: usize, e: Error) -> Error {
    if via == Via::Local { local_error_to_world(base, e) } else { e }
}

impl Routed {
    fn error(&self, e: Error) -> Error {
        world_error(self.via, self.base, e)
    }

    fn result<T>(&self, r: Result<T>) -> Result<T> {
        r.map_err(|e| self.error(e))
    }

    fn started(&self, started: Result<Started>) -> Result<Started> {
        match started {
            Ok(Started::Complete(r)) => Ok(Started::Complete(self.result(r))),
            Ok(Started::Pending(id)) => Ok(Started::Pending(tag(self.via, id)?)),
            Err(e) => Err(self.error(e)),
        }
    }
}

impl RmaWindow for Routed {
    fn connect(&self) -> Result<()> {
        self.result(self.inner.connect())
    }

    fn part_lengths(&self) -> &[usize] {
        self.inner.part_lengths()
    }

    fn with_part(&self, target: usize, f: &mut dyn FnMut(&Segment) -> Result<()>) -> Result<bool> {
        self.result(self.inner.with_part(target, f))
    }

    unsafe fn put(&self, target: usize, offset: usize, data: *const u8, len: usize) -> Result<Started> {
        // SAFETY: forwarded caller contract.
        self.started(unsafe { self.inner.put(target, offset, data, len) })
    }

    unsafe fn get(&self, target: usize, offset: usize, into: *mut u8, len: usize) -> Result<Started> {
        // SAFETY: forwarded caller contract.
        self.started(unsafe { self.inner.get(target, offset, into, len) })
    }

    unsafe fn accumulate(
        &self,
        target: usize,
        offset: usize,
        data: *const u8,
        len: usize,
        element: Element,
        op: AccumulateOp,
    ) -> Result<Started> {
        // SAFETY: forwarded caller contract.
        self.started(unsafe { self.inner.accumulate(target, offset, data, len, element, op) })
    }

    unsafe fn get_accumulate(
        &self,
        target: usize,
        offset: usize,
        data: *const u8,
        result: *mut u8,
        len: usize,
        element: Element,
        op: AccumulateOp,
    ) -> Result<Started> {
        // SAFETY: forwarded caller contract.
        self.started(unsafe { self.inner.get_accumulate(target, offset, data, result, len, element, op) })
    }

    fn fetch_and_op(
        &self,
        target: usize,
        offset: usize,
        element: Element,
        op: AccumulateOp,
        operand: u64,
    ) -> Result<u64> {
        self.result(self.inner.fetch_and_op(target, offset, element, op, operand))
    }

    fn compare_and_swap(&self, target: usize, offset: usize, element: Element, expected: u64, new: u64) -> Result<u64> {
        self.result(self.inner.compare_and_swap(target, offset, element, expected, new))
    }

    fn lock(&self, target: usize, kind: LockKind) -> Result<()> {
        self.result(self.inner.lock(target, kind))
    }

    fn unlock(&self, target: usize) -> Result<()> {
        self.result(self.inner.unlock(target))
    }

    fn flush(&self, target: Option<usize>) -> Result<()> {
        self.result(self.inner.flush(target))
    }

    fn begin_local_access(&self) -> Result<()> {
        self.result(self.inner.begin_local_access())
    }

    fn end_local_access(&self) {
        self.inner.end_local_access();
    }

    fn close(&self) -> Result<()> {
        self.result(self.inner.close())
    }

    fn free(&self) -> Result<()> {
        self.result(self.inner.free())
    }
}
