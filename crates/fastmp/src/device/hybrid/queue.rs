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

use super::handles::{Via, tag, untag_message};
use super::{HybridEndpoint, Remote};
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
        !self.order.is_empty() && self.holds_waiting(context)
    }

    /// Whether an unmatched held receive is of `context` (out of line: the common answer is
    /// that nothing is held at all).
    #[inline(never)]
    fn holds_waiting(&self, context: u32) -> bool {
        self.order.iter().any(|&id| self.held.get(id).is_some_and(|h| h.spec.context == context))
    }

    pub fn unlink(&mut self, id: ReqId) {
        if let Some(pos) = self.order.iter().position(|&x| x == id) {
            self.order.remove(pos);
        }
    }
}

impl<R: Remote> HybridEndpoint<R> {
    /// Holds a receive at the hybrid level (see the module documentation).
    pub(super) fn hold(&self, spec: MatchSpec, buf: *mut u8, capacity: usize) -> Result<Started> {
        let mut q = self.queue.borrow_mut();
        let id = q.held.insert(Held { spec, buf, capacity, stage: Stage::Waiting });
        q.order.push_back(id);
        Ok(Started::Pending(tag(Via::Queued, id)?))
    }

    /// Takes the first message matching `spec` off whichever transport has one.
    pub(super) fn take_message(&self, spec: MatchSpec) -> Result<Option<(MessageId, RawStatus)>> {
        match spec.source {
            Source::Rank(r) => self.improbe_on(self.via(r), spec),
            Source::Any => self.probe_both(|via| self.improbe_on(via, spec)),
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
                _ => self.remote.mrecv(inner, buf, capacity),
            }
        };
        self.routed(via, started)
    }

    /// Matches the waiting receives in posting order, as far as messages have arrived.
    ///
    /// A message found for one receive may have arrived after an earlier receive looked, and
    /// then it, or an even earlier message of its source, is that earlier receive's: so the
    /// owner is followed down to the earliest waiting receive, which takes the first message of
    /// that source it matches (sources deliver in order, so nothing overtakes).
    pub(super) fn advance_queue(&self) -> Result<()> {
        let mut i = 0;
        while let Some((id, spec)) = self.waiting(i) {
            let found = match spec.source {
                Source::Rank(r) => self.iprobe_on(self.via(r), spec),
                Source::Any => self.probe_both(|via| self.iprobe_on(via, spec)),
            };
            let mut status = match found {
                Ok(Some(status)) => status,
                Ok(None) => {
                    i += 1;
                    continue;
                }
                Err(e) => {
                    self.finish_held(id, Stage::Done(Err(e)));
                    continue;
                }
            };
            let (mut owner, mut owner_spec, mut before) = (id, spec, i);
            while let Some((k, earlier, earlier_spec)) = self.earliest_owed(before, spec.context, &status) {
                let from_source = MatchSpec { source: Source::Rank(status.source), ..earlier_spec };
                let Some(first) = self.iprobe_on(self.via(status.source), from_source)? else { break };
                (owner, owner_spec, before, status) = (earlier, earlier_spec, k, first);
            }
            let from_source = MatchSpec { source: Source::Rank(status.source), ..owner_spec };
            let Some((msg, _)) = self.improbe_on(self.via(status.source), from_source)? else {
                i += 1;
                continue;
            };
            let (buf, capacity) = {
                let q = self.queue.borrow();
                let held = q.held.get(owner).expect("queued receives are live");
                (held.buf, held.capacity)
            };
            let stage = match self.receive_taken(msg, buf, capacity) {
                Ok(Started::Complete(result)) => Stage::Done(result),
                Ok(Started::Pending(routed)) => Stage::Routed(routed),
                Err(e) => Stage::Done(Err(e)),
            };
            self.finish_held(owner, stage);
            // Look again from the start (the queue is short).
            i = 0;
        }
        Ok(())
    }

    /// The first message matching `spec` that no held receive is owed, after the held
    /// receives took what has arrived.
    ///
    /// A message that arrives between `advance_queue` and the probe may be owed to a held
    /// receive; reporting "nothing" then would miss a later message behind it (the next probe
    /// would find that one). So the owed message is handed over and the probe repeated: each
    /// round retires at least one held receive, so there are at most as many rounds as
    /// waiting receives.
    pub(super) fn probe_unowed(&self, spec: MatchSpec) -> Result<Option<RawStatus>> {
        let rounds = self.queue.borrow().order.len() + 1;
        for _ in 0..rounds {
            self.advance_queue()?;
            let found = match spec.source {
                Source::Rank(r) => self.iprobe_on(self.via(r), spec)?,
                Source::Any => self.probe_both(|via| self.iprobe_on(via, spec))?,
            };
            match found {
                Some(status) if self.owed(spec.context, &status) => {}
                found => return Ok(found),
            }
        }
        Ok(None)
    }

    /// The `i`-th waiting receive.
    fn waiting(&self, i: usize) -> Option<(ReqId, MatchSpec)> {
        let q = self.queue.borrow();
        let id = *q.order.get(i)?;
        Some((id, q.held.get(id).expect("queued receives are live").spec))
    }

    /// The earliest of the first `before` waiting receives that matches `status`: its position,
    /// handle and spec.
    fn earliest_owed(&self, before: usize, context: u32, status: &RawStatus) -> Option<(usize, ReqId, MatchSpec)> {
        let q = self.queue.borrow();
        q.order.iter().take(before).enumerate().find_map(|(k, &id)| {
            let spec = q.held.get(id)?.spec;
            spec.matches(context, status.source, status.tag).then_some((k, id, spec))
        })
    }

    /// A held receive leaves the waiting order with `stage`.
    fn finish_held(&self, id: ReqId, stage: Stage) {
        let mut q = self.queue.borrow_mut();
        q.unlink(id);
        if let Ok(h) = q.held.get_mut(id) {
            h.stage = stage;
        }
    }
}
