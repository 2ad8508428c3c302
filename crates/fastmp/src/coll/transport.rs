//! Point-to-point on a communicator's collective context, for the algorithms: peers are
//! communicator ranks (already validated), tags name the collective, and every receive must get
//! exactly the bytes it expects — a different length means the ranks disagree on the arguments.

use crate::coll::select::Collective;
use crate::comm::Comm;
use crate::device::{MatchSpec, RawStatus, ReqId, SendMode, Source, Started};
use crate::error::{Error, Result};

/// Tag of a collective's messages. Blocking collectives are issued in the same order on every
/// rank and messages between two ranks do not overtake, so one tag per collective suffices.
pub(crate) fn tag(coll: Collective) -> i32 {
    coll as i32 + 1
}

fn check_length(raw: RawStatus, expected: usize, peer: usize) -> Result<()> {
    if raw.bytes == expected {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "collective arguments differ between ranks: expected {expected} bytes from rank {peer}, got {}",
            raw.bytes
        )))
    }
}

/// Outstanding collective requests on buffers borrowed for `'a`, released on drop so an early
/// error return never leaves the device pointing at a caller's buffer. Crate-internal and never
/// leaked: the borrows plus `Drop` are what keep the device within the buffers' lifetimes.
pub(crate) struct Pending<'a> {
    comm: &'a Comm,
    /// (request, peer, expected bytes or `usize::MAX` for sends).
    reqs: Vec<(ReqId, usize, usize)>,
    /// First error of an operation that finished when it was started.
    failed: Option<Error>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        for &(id, _, _) in &self.reqs {
            self.comm.dev.release(id);
        }
    }
}

impl<'a> Pending<'a> {
    fn track(&mut self, started: Started, peer: usize, expected: usize) {
        match started {
            Started::Pending(id) => self.reqs.push((id, peer, expected)),
            Started::Complete(Ok(raw)) if expected != usize::MAX => {
                if let Err(e) = check_length(raw, expected, peer) {
                    self.failed.get_or_insert(e);
                }
            }
            Started::Complete(Ok(_)) => {}
            Started::Complete(Err(e)) => {
                self.failed.get_or_insert(e);
            }
        }
    }

    /// Starts sending `bytes` to `peer`.
    pub(crate) fn isend(&mut self, bytes: &'a [u8], peer: usize, coll: Collective) -> Result<()> {
        let comm = self.comm;
        let dest = comm.group.world_rank(peer);
        // SAFETY: `bytes` is borrowed for 'a, as long as this `Pending`, which completes or
        // releases the request before it goes away.
        let started = unsafe {
            comm.dev.isend(bytes.as_ptr(), bytes.len(), dest, tag(coll), comm.coll_context(), SendMode::Standard)?
        };
        self.track(started, peer, usize::MAX);
        Ok(())
    }

    /// Starts receiving exactly `bytes.len()` bytes from `peer`.
    pub(crate) fn irecv(&mut self, bytes: &'a mut [u8], peer: usize, coll: Collective) -> Result<()> {
        let comm = self.comm;
        let spec = MatchSpec {
            context: comm.coll_context(),
            source: Source::Rank(comm.group.world_rank(peer)),
            tag: tag(coll),
        };
        // SAFETY: `bytes` is exclusively borrowed for 'a, as long as this `Pending`, which
        // completes or releases the request before it goes away.
        let started = unsafe { comm.dev.irecv(bytes.as_mut_ptr(), bytes.len(), spec)? };
        self.track(started, peer, bytes.len());
        Ok(())
    }

    /// Waits for every request; the first error wins, and all requests are finished or released
    /// when this returns.
    pub(crate) fn wait_all(mut self) -> Result<()> {
        let mut first = self.failed.take();
        while let Some((id, peer, expected)) = self.reqs.pop() {
            let outcome = self.comm.dev.complete(Started::Pending(id));
            let outcome =
                outcome.and_then(|raw| if expected == usize::MAX { Ok(()) } else { check_length(raw, expected, peer) });
            if let Err(e) = outcome {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Comm {
    /// A batch of nonblocking collective operations.
    pub(crate) fn pending<'a>(&'a self) -> Pending<'a> {
        Pending { comm: self, reqs: Vec::new(), failed: None }
    }

    /// Blocking send of `bytes` to communicator rank `peer` on the collective context.
    pub(crate) fn coll_send(&self, bytes: &[u8], peer: usize, coll: Collective) -> Result<()> {
        let dest = self.group.world_rank(peer);
        // SAFETY: `bytes` is borrowed until `complete` returns, which releases the request on
        // every error path.
        let started = unsafe {
            self.dev.isend(bytes.as_ptr(), bytes.len(), dest, tag(coll), self.coll_context(), SendMode::Standard)?
        };
        self.dev.complete(started).map(drop)
    }

    /// Blocking receive of exactly `bytes.len()` bytes from communicator rank `peer`.
    pub(crate) fn coll_recv(&self, bytes: &mut [u8], peer: usize, coll: Collective) -> Result<()> {
        let spec = MatchSpec {
            context: self.coll_context(),
            source: Source::Rank(self.group.world_rank(peer)),
            tag: tag(coll),
        };
        // SAFETY: `bytes` is exclusively borrowed until the blocking receive returns, which
        // releases its request on every error path.
        let raw = unsafe { self.dev.recv(bytes.as_mut_ptr(), bytes.len(), spec)? };
        check_length(raw, bytes.len(), peer)
    }

    /// Sends `send` to `dest` while receiving exactly `recv.len()` bytes from `source`.
    ///
    /// The send is started first (small ones finish at once) and the receive then uses the
    /// device's blocking fast path, which skips posting a request; a pending (rendezvous) send
    /// cannot deadlock this, because its receiver copies the data itself.
    pub(crate) fn coll_sendrecv(
        &self,
        send: &[u8],
        dest: usize,
        recv: &mut [u8],
        source: usize,
        coll: Collective,
    ) -> Result<()> {
        let world_dest = self.group.world_rank(dest);
        // SAFETY: `send` stays borrowed until the request is completed or released below, on
        // every path.
        let started = unsafe {
            self.dev.isend(send.as_ptr(), send.len(), world_dest, tag(coll), self.coll_context(), SendMode::Standard)?
        };
        let received = self.coll_recv(recv, source, coll);
        if received.is_err() {
            // The peer may never take a pending send now: detach it instead of waiting.
            if let Started::Pending(id) = started {
                self.dev.release(id);
            }
            return received;
        }
        self.dev.complete(started).map(drop)
    }
}
