//! Hybrid request and message handles: the transport's own handle with the route in its top
//! bits, so a routed request needs no table of its own (the transport checks the generation).

use crate::device::{MessageId, ReqId};
use crate::error::{Error, Result};

/// Where a hybrid request or message lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Via {
    /// The process's shm world (a thread peer, or this rank itself).
    Local,
    /// The tcp mesh (a rank of another process).
    Remote,
    /// The hybrid level's queue of receives waiting behind a wildcard one (see `queue`).
    Queued,
}

const SHIFT: u32 = 30;
const INDEX_MASK: u32 = (1 << SHIFT) - 1;

impl Via {
    fn bits(self) -> u32 {
        match self {
            Via::Local => 0,
            Via::Remote => 1,
            Via::Queued => 2,
        }
    }
}

/// `id` of a transport (or of the queue) as a hybrid handle.
#[inline]
pub(super) fn tag(via: Via, id: ReqId) -> Result<ReqId> {
    if id.index > INDEX_MASK {
        return Err(too_many_requests());
    }
    Ok(ReqId { index: id.index | (via.bits() << SHIFT), generation: id.generation })
}

#[cold]
fn too_many_requests() -> Error {
    Error::InvalidArgument(format!("hybrid device: more than {INDEX_MASK} requests outstanding on one transport"))
}

/// Whether a shm handle is already its own hybrid handle (the local route's bits are zero), so
/// the thread peers' path passes it on untouched.
#[inline]
pub(super) fn local_as_is(id: ReqId) -> bool {
    id.index <= INDEX_MASK
}

/// The route and transport handle of a hybrid handle; `None` for a forged one.
#[inline]
pub(super) fn untag(id: ReqId) -> Option<(Via, ReqId)> {
    let via = match id.index >> SHIFT {
        0 => Via::Local,
        1 => Via::Remote,
        2 => Via::Queued,
        _ => return None,
    };
    Some((via, ReqId { index: id.index & INDEX_MASK, generation: id.generation }))
}

pub(super) fn tag_message(via: Via, msg: MessageId) -> Result<MessageId> {
    tag(via, msg.0).map(MessageId)
}

pub(super) fn untag_message(msg: MessageId) -> Option<(Via, MessageId)> {
    untag(msg.0).map(|(via, id)| (via, MessageId(id)))
}

/// An error of the shm side (local rank numbering, first rank `base`) in world numbering.
pub(super) fn local_error_to_world(base: usize, e: Error) -> Error {
    match e {
        Error::Truncated { message_bytes, capacity, source_rank, tag } => {
            Error::Truncated { message_bytes, capacity, source_rank: source_rank + base, tag }
        }
        Error::PeerExited { rank } => Error::PeerExited { rank: rank + base },
        Error::Deadlock { rank, reason } => Error::Deadlock { rank: rank + base, reason },
        other => other,
    }
}

pub(super) fn stale() -> Error {
    Error::InvalidArgument("request handle is stale (already completed or released)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_forged_ones_are_refused() {
        for via in [Via::Local, Via::Remote, Via::Queued] {
            let id = ReqId { index: 12345, generation: 7 };
            assert_eq!(untag(tag(via, id).unwrap()), Some((via, id)));
        }
        assert!(tag(Via::Local, ReqId { index: 1 << 30, generation: 0 }).is_err());
        assert_eq!(untag(ReqId { index: 3 << 30, generation: 0 }), None);
    }
}
