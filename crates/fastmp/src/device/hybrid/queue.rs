//! Receives held at the hybrid level, in posting order: wildcard (`ANY_SOURCE`) receives, which
//! neither transport can match alone, and the later receives of their context.
//!
//! MPI matches receives in posting order. A wildcard receive is resolved by a matched probe on
//! each transport, then received on the one that had the message; until it is, a later receive
//! of its context posted straight to a transport could take a message the wildcard is owed, so
//! those wait in the queue too and are resolved the same way, in order. Receives posted before
//! the wildcard keep their precedence by themselves: a transport matches posted receives before
//! a message becomes visible to a probe.

use std::collections::VecDeque;

use super::HybridEndpoint;
use super::handles::{Via, tag, untag_message};
use crate::device::slab::Slab;
use crate::device::{Device, MatchSpec, MessageId, RawStatus, ReqId, Source, Started};
use crate::error::{Error, Result};

/// How far a held receive got.
pub(super) enum Stage {
    /// Not matched yet.
    Waiting,
    /// Matched: now the transport's request (a tagged handle).
    Routed(ReqId),
    /// Finished (matched and completed at once, or cancelled).
    Done(Result<RawStatus>),
}

pub(super) struct Held {
    pub spec: MatchSpec,
    pub buf: *mut u8,
    pub capacity: usize,
    pub stage: Stage,
}

#[derive(Default)]
pub(super) struct Queue {
    pub held: Slab<Held>,
    /// Handles of the `Waiting` receives, oldest first.
    pub order: VecDeque<ReqId>,
}

impl Queue {
    /// Whether a receive of `context` posted now must wait behind an unmatched one.
    #[inline]
    pub fn blocks(&self, context: u32) -> bool {
        !self.order.is_empty()
            && self.order.iter().any(|&id| self.held.get(id).is_some_and(|h| h.spec.context == context))
    }

    pub fn unlink(&mut self, id: ReqId) {
        if let Some(pos) = self.order.iter().position(|&x| x == id) {
            self.order.remove(pos);
        }
    }
}

impl HybridEndpoint {
    /// Holds a receive at the hybrid level (see the module documentation).
    pub(super) fn hold(&self, spec: MatchSpec, buf: *mut u8, capacity: usize) -> Result<Started> {
        let mut q = self.queue.borrow_mut();
        let id = q.held.insert(Held { spec, buf, capacity, stage: Stage::Waiting });
        q.order.push_back(id);
        Ok(Started::Pending(tag(Via::Queued, id)?))
    }

    /// Takes the first message matching `spec` off whichever transport has one (a wildcard
    /// alternates which goes first, so neither side starves the other).
    pub(super) fn take_message(&self, spec: MatchSpec) -> Result<Option<(Via, MessageId, RawStatus)>> {
        match spec.source {
            Source::Rank(r) => {
                let via = self.via(r);
                Ok(self.improbe_on(via, spec)?.map(|(m, s)| (via, m, s)))
            }
            Source::Any => {
                let local_first = !self.remote_first.replace(!self.remote_first.get());
                let order = if local_first { [Via::Local, Via::Remote] } else { [Via::Remote, Via::Local] };
                let mut hopeless = None;
                for via in order {
                    match self.improbe_on(via, spec) {
                        Ok(Some((m, s))) => return Ok(Some((via, m, s))),
                        Ok(None) => {}
                        Err(e) if self.any_source_verdict(via) => hopeless = Some(e),
                        Err(_) => {}
                    }
                }
                hopeless.map_or(Ok(None), Err)
            }
        }
    }

    /// Receives a message taken by [`HybridEndpoint::take_message`] (its hybrid handle).
    pub(super) fn receive_taken(&self, msg: MessageId, buf: *mut u8, capacity: usize) -> Result<Started> {
        let (via, inner) = untag_message(msg)
            .filter(|(via, _)| *via != Via::Queued)
            .ok_or_else(|| Error::InvalidArgument("mrecv: the message was already received".into()))?;
        // SAFETY: forwarded caller contract (the receive buffer of a live request or call).
        let started = unsafe {
            match via {
                Via::Local => self.shm.mrecv(inner, buf, capacity),
                _ => self.tcp.mrecv(inner, buf, capacity),
            }
        };
        self.routed(via, started)
    }

    /// Matches the waiting receives in posting order, as far as messages have arrived; a receive
    /// that finds none stops the later ones of its context.
    pub(super) fn advance_queue(&self) -> Result<()> {
        if self.queue.borrow().order.is_empty() {
            return Ok(());
        }
        let mut i = 0;
        loop {
            let (id, spec, buf, capacity, stalled) = {
                let q = self.queue.borrow();
                let Some(&id) = q.order.get(i) else { return Ok(()) };
                let held = q.held.get(id).expect("queued receives are live");
                let stalled =
                    q.order.iter().take(i).any(|&e| q.held.get(e).is_some_and(|h| h.spec.context == held.spec.context));
                (id, held.spec, held.buf, held.capacity, stalled)
            };
            if stalled {
                i += 1;
                continue;
            }
            let found = match self.take_message(spec) {
                Ok(found) => found,
                Err(e) => {
                    self.finish_held(id, Stage::Done(Err(e)));
                    continue;
                }
            };
            let Some((_, msg, _)) = found else {
                i += 1;
                continue;
            };
            let stage = match self.receive_taken(msg, buf, capacity) {
                Ok(Started::Complete(result)) => Stage::Done(result),
                Ok(Started::Pending(routed)) => Stage::Routed(routed),
                Err(e) => Stage::Done(Err(e)),
            };
            self.finish_held(id, stage);
        }
    }

    /// A held receive leaves the waiting order with `stage`.
    fn finish_held(&self, id: ReqId, stage: Stage) {
        let mut q = self.queue.borrow_mut();
        q.unlink(id);
        if let Some(h) = q.held.get_mut(id).ok() {
            h.stage = stage;
        }
    }
}
