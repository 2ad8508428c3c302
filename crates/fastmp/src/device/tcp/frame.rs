//! Wire format of the tcp device: fixed 40-byte headers, some followed by a payload.
//!
//! Every field is validated on decode (magic, kind, reserved bits, payload bounds, and the ranks
//! a frame travels between), so a corrupt or hostile byte stream becomes a [`FrameError`] for
//! that connection, never a panic or an unbounded allocation.
//!
//! Header layout (little-endian):
//!
//! | bytes | field |
//! |---|---|
//! | 0 | kind |
//! | 1 | flags (per kind) |
//! | 2..4 | reserved, zero |
//! | 4..8 | magic |
//! | 8..12 | source rank (world rank of the sender) |
//! | 12..16 | destination rank (world rank of the receiver) |
//! | 16..20 | context |
//! | 20..24 | tag |
//! | 24..32 | first 64-bit field (length or request id, per kind) |
//! | 32..40 | second 64-bit field (request id, per kind) |
//!
//! Every frame names both ranks, so one connection can serve several ranks of a process (thread
//! ranks of a hybrid job): the receiver knows which of its ranks a frame is for and which of the
//! peer's ranks sent it. The header grew from 32 to 40 bytes for them rather than packing them
//! into existing fields: the two reserved bytes hold only 16 bits, and the 64-bit fields carry
//! full lengths and request ids (slab index and generation). An eager message is still one
//! `writev` of header and payload. A decoder accepts only the ranks its connection may carry
//! ([`Accept`]): today exactly the authenticated peer as source and this endpoint's rank as
//! destination.

use std::fmt;

use crate::device::one_sided::{AccumulateOp, Element, LockKind};

/// Bytes in every frame header.
pub(crate) const HEADER_LEN: usize = 40;

/// Marks every header, so a stream that lost frame alignment is caught at the next header.
const MAGIC: u32 = 0xF457_4D50;

/// Longest failure message an `Abort` frame may carry.
pub(crate) const MAX_ABORT_LEN: u64 = 64 * 1024;

const KIND_EAGER: u8 = 1;
const KIND_RTS: u8 = 2;
const KIND_CTS: u8 = 3;
const KIND_DATA: u8 = 4;
const KIND_BYE: u8 = 5;
const KIND_ABORT: u8 = 6;
const KIND_CANCEL: u8 = 7;
const KIND_CANCEL_ACK: u8 = 8;
const KIND_RMA_PUT: u8 = 9;
const KIND_RMA_GET: u8 = 10;
const KIND_RMA_ACC: u8 = 11;
const KIND_RMA_GET_ACC: u8 = 12;
const KIND_RMA_FETCH_OP: u8 = 13;
const KIND_RMA_CAS: u8 = 14;
const KIND_RMA_LOCK: u8 = 15;
const KIND_READABLE: u8 = 19;
const KIND_READ_DONE: u8 = 20;
const KIND_RMA_UNLOCK: u8 = 16;
const KIND_RMA_FLUSH: u8 = 17;
const KIND_RMA_REPLY: u8 = 18;

const FLAG_SYNC: u8 = 1;
const FLAG_CANCELLED: u8 = 1;
const FLAG_ABORT_CODE: u8 = 1;
const FLAG_EXCLUSIVE: u8 = 1;
const FLAG_QUERY: u8 = 1;
const FLAG_FAILED: u8 = 1;
const FLAG_READS: u8 = 1;

/// Largest tag a one-sided reply may carry: replies use tags below -1 (`ANY_TAG`), which no user
/// message can have, so they never match a user's receive with a specific tag.
pub(crate) const MAX_REPLY_TAG: i32 = -2;
/// Longest failure message a one-sided reply may carry.
pub(crate) const MAX_FAILURE_LEN: u64 = 4096;
/// Payload of a compare-and-swap request: the new value (a little-endian `u64`).
const CAS_PAYLOAD: u64 = 8;

/// One frame header. Ids name requests on the side that allocated them (`send_id` on the
/// sender, `recv_id` on the receiver), so neither side has to look anything up by envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A message sent eagerly; its `len` bytes follow.
    Eager { context: u32, tag: i32, len: u64 },
    /// Ready-to-send: a `len`-byte message waits in the sender's request `send_id`. `sync` marks
    /// a synchronous send (which always goes this way, so matching is acknowledged by `Cts`).
    Rts { context: u32, tag: i32, len: u64, send_id: u64, sync: bool },
    /// Ready-to-receive: the receiver matched `send_id` and takes its bytes into `recv_id`;
    /// `reads`: it can read the sender's memory (see `peer_memory`), so the sender may answer
    /// with `Readable` instead of the payload.
    Cts { send_id: u64, recv_id: u64, reads: bool },
    /// The payload of rendezvous send `send_id` for receive `recv_id` lies at `addr` in the
    /// sender's memory until `ReadDone` comes back. `send_id` travels in the context (low half)
    /// and tag (high half) fields.
    Readable { recv_id: u64, send_id: u64, addr: u64 },
    /// Answer to `Readable`: the receiver has copied the payload (or, `failed`, could not: the
    /// sender then sends it as `Data`).
    ReadDone { send_id: u64, recv_id: u64, failed: bool },
    /// Rendezvous payload for the receiver's request `recv_id`; `len` bytes follow.
    Data { recv_id: u64, len: u64 },
    /// The sender finalized: it sends nothing more (and reads until the peer's `Bye`).
    Bye,
    /// The job failed: rank `origin` failed first (the sender itself, or a rank whose failure
    /// the sender passes on, so that peers always name the rank that failed first), with the
    /// abort `code` if it called `Comm::abort`; `len` bytes of UTF-8 cause follow. `origin` travels
    /// in the context field, `code` in the tag field (flag bit 0 says there is one).
    Abort { len: u64, origin: u32, code: Option<i32> },
    /// The sender withdraws its unmatched rendezvous send `send_id`.
    Cancel { send_id: u64 },
    /// Answer to `Cancel`: whether the message was withdrawn before it matched.
    CancelAck { send_id: u64, cancelled: bool },
    // One-sided requests (origin → target, see `one_sided`): `window` in the context field,
    // `reply` (a tag <= MAX_REPLY_TAG the origin posted a receive for) in the tag field, element
    // and operator codes in the flags.
    /// Writes the `len` payload bytes at `offset` of the target's part.
    RmaPut { window: u32, offset: u64, len: u64 },
    /// Reads `len` bytes at `offset`; the reply carries them.
    RmaGet { window: u32, offset: u64, len: u64, reply: i32 },
    /// Accumulates the `len` payload bytes (none for `NoOp`) at `offset`.
    RmaAcc { window: u32, offset: u64, len: u64, element: Element, op: AccumulateOp },
    /// As `RmaAcc`; the reply carries the previous values.
    RmaGetAcc { window: u32, offset: u64, len: u64, element: Element, op: AccumulateOp, reply: i32 },
    /// Fetch-and-op on one element; the reply carries the previous value (8 bytes).
    RmaFetchOp { window: u32, offset: u64, element: Element, op: AccumulateOp, operand: u64, reply: i32 },
    /// Compare-and-swap on one element; the new value follows (8 bytes), the reply carries the
    /// previous value.
    RmaCas { window: u32, offset: u64, element: Element, compare: u64, reply: i32 },
    /// Asks for a passive-target lock; the (empty) reply is the grant.
    RmaLock { window: u32, kind: LockKind, reply: i32 },
    /// Releases the sender's lock once its earlier requests are applied; the reply acknowledges.
    RmaUnlock { window: u32, reply: i32 },
    /// Answered once the sender's earlier requests are applied; with `query`, the reply carries
    /// the target's part length (8 bytes: how `connect` learns the lengths).
    RmaFlush { window: u32, reply: i32, query: bool },
    /// Answer to a one-sided request: a device message on the window's context with the
    /// request's reply tag, delivered only to a posted receive (never queued, so its length needs
    /// no bound). `failed`: the payload is why the target refused (at most `MAX_FAILURE_LEN`).
    RmaReply { context: u32, tag: i32, len: u64, failed: bool },
}

/// Why a header was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FrameError {
    BadMagic(u32),
    UnknownKind(u8),
    ReservedBits {
        kind: u8,
    },
    NegativeTag(i32),
    PayloadTooLong {
        kind: &'static str,
        len: u64,
        max: u64,
    },
    /// The header names a sender other than the rank the connection was authenticated as.
    WrongSource {
        claimed: u32,
        connection: u32,
    },
    /// The header is addressed to a rank this endpoint does not serve.
    WrongDestination {
        addressed: u32,
        served: u32,
    },
    /// A one-sided frame whose reply tag is not below -1.
    BadReplyTag(i32),
    /// A one-sided frame naming an unknown element type or operator, or an operator the element
    /// type does not support.
    BadOperation {
        kind: u8,
        flags: u8,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::BadMagic(m) => write!(f, "bad frame magic {m:#010x} (stream out of sync or not a fastmp peer)"),
            FrameError::UnknownKind(k) => write!(f, "unknown frame kind {k}"),
            FrameError::ReservedBits { kind } => write!(f, "reserved header bits set in a frame of kind {kind}"),
            FrameError::NegativeTag(t) => write!(f, "message tag {t} is negative"),
            FrameError::PayloadTooLong { kind, len, max } => {
                write!(f, "{kind} frame announces {len} bytes, more than the {max} allowed")
            }
            FrameError::WrongSource { claimed, connection } => {
                write!(f, "frame claims to come from rank {claimed}, but the connection belongs to rank {connection}")
            }
            FrameError::WrongDestination { addressed, served } => {
                write!(f, "frame is addressed to rank {addressed}, but this endpoint serves rank {served}")
            }
            FrameError::BadReplyTag(t) => write!(f, "one-sided reply tag {t} is not below -1"),
            FrameError::BadOperation { kind, flags } => {
                write!(f, "frame of kind {kind} names no valid element type and operator (flags {flags:#04x})")
            }
        }
    }
}

/// What one connection's decoder accepts: bounds on announced lengths, and the ranks its frames
/// may travel between.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Accept {
    /// Largest eager payload (the sender's eager limit; both sides use the same value).
    pub max_eager: u64,
    /// The rank the connection was authenticated as: the only sender its frames may name.
    pub source: u32,
    /// The rank this endpoint serves: the only destination its frames may name.
    pub dest: u32,
}

/// One frame header: the ranks it travels between and the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// World rank of the sender.
    pub source: u32,
    /// World rank of the receiver.
    pub dest: u32,
    pub frame: Frame,
}

impl Frame {
    /// Payload bytes that follow this header on the wire.
    pub(crate) fn payload_len(&self) -> u64 {
        match *self {
            Frame::Eager { len, .. }
            | Frame::Data { len, .. }
            | Frame::Abort { len, .. }
            | Frame::RmaPut { len, .. }
            | Frame::RmaReply { len, .. } => len,
            Frame::RmaAcc { len, op, .. } | Frame::RmaGetAcc { len, op, .. } => {
                if op == AccumulateOp::NoOp {
                    0
                } else {
                    len
                }
            }
            Frame::RmaCas { .. } => CAS_PAYLOAD,
            _ => 0,
        }
    }
}

impl Header {
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let (kind, flags, context, tag, a, b) = match self.frame {
            Frame::Eager { context, tag, len } => (KIND_EAGER, 0, context, tag, len, 0),
            Frame::Rts { context, tag, len, send_id, sync } => {
                (KIND_RTS, if sync { FLAG_SYNC } else { 0 }, context, tag, len, send_id)
            }
            Frame::Cts { send_id, recv_id, reads } => {
                (KIND_CTS, if reads { FLAG_READS } else { 0 }, 0, 0, recv_id, send_id)
            }
            Frame::Readable { recv_id, send_id, addr } => {
                (KIND_READABLE, 0, send_id as u32, (send_id >> 32) as u32 as i32, addr, recv_id)
            }
            Frame::ReadDone { send_id, recv_id, failed } => {
                (KIND_READ_DONE, if failed { FLAG_FAILED } else { 0 }, 0, 0, recv_id, send_id)
            }
            Frame::Data { recv_id, len } => (KIND_DATA, 0, 0, 0, len, recv_id),
            Frame::Bye => (KIND_BYE, 0, 0, 0, 0, 0),
            Frame::Abort { len, origin, code } => {
                (KIND_ABORT, if code.is_some() { FLAG_ABORT_CODE } else { 0 }, origin, code.unwrap_or(0), len, 0)
            }
            Frame::Cancel { send_id } => (KIND_CANCEL, 0, 0, 0, 0, send_id),
            Frame::CancelAck { send_id, cancelled } => {
                (KIND_CANCEL_ACK, if cancelled { FLAG_CANCELLED } else { 0 }, 0, 0, 0, send_id)
            }
            Frame::RmaPut { window, offset, len } => (KIND_RMA_PUT, 0, window, 0, offset, len),
            Frame::RmaGet { window, offset, len, reply } => (KIND_RMA_GET, 0, window, reply, offset, len),
            Frame::RmaAcc { window, offset, len, element, op } => {
                (KIND_RMA_ACC, operation_flags(element, op), window, 0, offset, len)
            }
            Frame::RmaGetAcc { window, offset, len, element, op, reply } => {
                (KIND_RMA_GET_ACC, operation_flags(element, op), window, reply, offset, len)
            }
            Frame::RmaFetchOp { window, offset, element, op, operand, reply } => {
                (KIND_RMA_FETCH_OP, operation_flags(element, op), window, reply, offset, operand)
            }
            Frame::RmaCas { window, offset, element, compare, reply } => {
                (KIND_RMA_CAS, operation_flags(element, AccumulateOp::Replace), window, reply, offset, compare)
            }
            Frame::RmaLock { window, kind, reply } => {
                let flags = if kind == LockKind::Exclusive { FLAG_EXCLUSIVE } else { 0 };
                (KIND_RMA_LOCK, flags, window, reply, 0, 0)
            }
            Frame::RmaUnlock { window, reply } => (KIND_RMA_UNLOCK, 0, window, reply, 0, 0),
            Frame::RmaFlush { window, reply, query } => {
                (KIND_RMA_FLUSH, if query { FLAG_QUERY } else { 0 }, window, reply, 0, 0)
            }
            Frame::RmaReply { context, tag, len, failed } => {
                (KIND_RMA_REPLY, if failed { FLAG_FAILED } else { 0 }, context, tag, len, 0)
            }
        };
        let mut h = [0u8; HEADER_LEN];
        h[0] = kind;
        h[1] = flags;
        h[4..8].copy_from_slice(&MAGIC.to_le_bytes());
        h[8..12].copy_from_slice(&self.source.to_le_bytes());
        h[12..16].copy_from_slice(&self.dest.to_le_bytes());
        h[16..20].copy_from_slice(&context.to_le_bytes());
        h[20..24].copy_from_slice(&tag.to_le_bytes());
        h[24..32].copy_from_slice(&a.to_le_bytes());
        h[32..40].copy_from_slice(&b.to_le_bytes());
        h
    }

    pub(crate) fn decode(h: &[u8; HEADER_LEN], accept: Accept) -> Result<Header, FrameError> {
        let word = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        let long = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&h[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let magic = word(4);
        if magic != MAGIC {
            return Err(FrameError::BadMagic(magic));
        }
        let (kind, flags) = (h[0], h[1]);
        if h[2] != 0 || h[3] != 0 {
            return Err(FrameError::ReservedBits { kind });
        }
        let (source, dest) = (word(8), word(12));
        if source != accept.source {
            return Err(FrameError::WrongSource { claimed: source, connection: accept.source });
        }
        if dest != accept.dest {
            return Err(FrameError::WrongDestination { addressed: dest, served: accept.dest });
        }
        let (context, tag, a, b) = (word(16), word(20) as i32, long(24), long(32));
        // Fields a kind does not use must be zero, so every header has one valid reading.
        let unused_zero = |ok: bool| if ok { Ok(()) } else { Err(FrameError::ReservedBits { kind }) };
        let frame = match kind {
            KIND_EAGER => {
                unused_zero(flags == 0 && b == 0)?;
                if a > accept.max_eager {
                    return Err(FrameError::PayloadTooLong { kind: "eager", len: a, max: accept.max_eager });
                }
                Frame::Eager { context, tag, len: a }
            }
            KIND_RTS => {
                unused_zero(flags & !FLAG_SYNC == 0)?;
                Frame::Rts { context, tag, len: a, send_id: b, sync: flags & FLAG_SYNC != 0 }
            }
            KIND_CTS => {
                unused_zero(flags & !FLAG_READS == 0 && context == 0 && tag == 0)?;
                Frame::Cts { send_id: b, recv_id: a, reads: flags & FLAG_READS != 0 }
            }
            KIND_READABLE => {
                unused_zero(flags == 0)?;
                Frame::Readable { recv_id: b, send_id: u64::from(context) | (u64::from(tag as u32) << 32), addr: a }
            }
            KIND_READ_DONE => {
                unused_zero(flags & !FLAG_FAILED == 0 && context == 0 && tag == 0)?;
                Frame::ReadDone { send_id: b, recv_id: a, failed: flags & FLAG_FAILED != 0 }
            }
            KIND_DATA => {
                unused_zero(flags == 0 && context == 0 && tag == 0)?;
                Frame::Data { recv_id: b, len: a }
            }
            KIND_BYE => {
                unused_zero(flags == 0 && context == 0 && tag == 0 && a == 0 && b == 0)?;
                Frame::Bye
            }
            KIND_ABORT => {
                let has_code = flags & FLAG_ABORT_CODE != 0;
                unused_zero(flags & !FLAG_ABORT_CODE == 0 && (has_code || tag == 0) && b == 0)?;
                if a > MAX_ABORT_LEN {
                    return Err(FrameError::PayloadTooLong { kind: "abort", len: a, max: MAX_ABORT_LEN });
                }
                Frame::Abort { len: a, origin: context, code: has_code.then_some(tag) }
            }
            KIND_CANCEL => {
                unused_zero(flags == 0 && context == 0 && tag == 0 && a == 0)?;
                Frame::Cancel { send_id: b }
            }
            KIND_CANCEL_ACK => {
                unused_zero(flags & !FLAG_CANCELLED == 0 && context == 0 && tag == 0 && a == 0)?;
                Frame::CancelAck { send_id: b, cancelled: flags & FLAG_CANCELLED != 0 }
            }
            KIND_RMA_PUT => {
                unused_zero(flags == 0 && tag == 0)?;
                Frame::RmaPut { window: context, offset: a, len: b }
            }
            KIND_RMA_GET => {
                unused_zero(flags == 0)?;
                Frame::RmaGet { window: context, offset: a, len: b, reply: reply_tag(tag)? }
            }
            KIND_RMA_ACC => {
                unused_zero(tag == 0)?;
                let (element, op) = operation(kind, flags)?;
                Frame::RmaAcc { window: context, offset: a, len: b, element, op }
            }
            KIND_RMA_GET_ACC => {
                let (element, op) = operation(kind, flags)?;
                Frame::RmaGetAcc { window: context, offset: a, len: b, element, op, reply: reply_tag(tag)? }
            }
            KIND_RMA_FETCH_OP => {
                let (element, op) = operation(kind, flags)?;
                Frame::RmaFetchOp { window: context, offset: a, element, op, operand: b, reply: reply_tag(tag)? }
            }
            KIND_RMA_CAS => {
                let (element, op) = operation(kind, flags)?;
                unused_zero(op == AccumulateOp::Replace)?;
                Frame::RmaCas { window: context, offset: a, element, compare: b, reply: reply_tag(tag)? }
            }
            KIND_RMA_LOCK => {
                unused_zero(flags & !FLAG_EXCLUSIVE == 0 && a == 0 && b == 0)?;
                let kind = if flags & FLAG_EXCLUSIVE != 0 { LockKind::Exclusive } else { LockKind::Shared };
                Frame::RmaLock { window: context, kind, reply: reply_tag(tag)? }
            }
            KIND_RMA_UNLOCK => {
                unused_zero(flags == 0 && a == 0 && b == 0)?;
                Frame::RmaUnlock { window: context, reply: reply_tag(tag)? }
            }
            KIND_RMA_FLUSH => {
                unused_zero(flags & !FLAG_QUERY == 0 && a == 0 && b == 0)?;
                Frame::RmaFlush { window: context, reply: reply_tag(tag)?, query: flags & FLAG_QUERY != 0 }
            }
            KIND_RMA_REPLY => {
                unused_zero(flags & !FLAG_FAILED == 0 && b == 0)?;
                let failed = flags & FLAG_FAILED != 0;
                if failed && a > MAX_FAILURE_LEN {
                    return Err(FrameError::PayloadTooLong { kind: "one-sided failure", len: a, max: MAX_FAILURE_LEN });
                }
                Frame::RmaReply { context, tag: reply_tag(tag)?, len: a, failed }
            }
            other => return Err(FrameError::UnknownKind(other)),
        };
        if let Frame::Eager { tag, .. } | Frame::Rts { tag, .. } = frame
            && tag < 0
        {
            return Err(FrameError::NegativeTag(tag));
        }
        Ok(Header { source, dest, frame })
    }
}

const ELEMENTS: [Element; 10] = [
    Element::I8,
    Element::I16,
    Element::I32,
    Element::I64,
    Element::U8,
    Element::U16,
    Element::U32,
    Element::U64,
    Element::F32,
    Element::F64,
];

const OPERATORS: [AccumulateOp; 12] = [
    AccumulateOp::Replace,
    AccumulateOp::NoOp,
    AccumulateOp::Sum,
    AccumulateOp::Prod,
    AccumulateOp::Min,
    AccumulateOp::Max,
    AccumulateOp::Band,
    AccumulateOp::Bor,
    AccumulateOp::Bxor,
    AccumulateOp::Land,
    AccumulateOp::Lor,
    AccumulateOp::Lxor,
];

/// Element type in the low 4 bits, operator in the high 4.
fn operation_flags(element: Element, op: AccumulateOp) -> u8 {
    let e = ELEMENTS.iter().position(|&x| x == element).expect("every element has a code");
    let o = OPERATORS.iter().position(|&x| x == op).expect("every operator has a code");
    (e as u8) | (o as u8) << 4
}

fn operation(kind: u8, flags: u8) -> Result<(Element, AccumulateOp), FrameError> {
    let element = ELEMENTS.get(usize::from(flags & 0xf));
    let op = OPERATORS.get(usize::from(flags >> 4));
    match (element, op) {
        (Some(&e), Some(&o)) if e.supports(o) => Ok((e, o)),
        _ => Err(FrameError::BadOperation { kind, flags }),
    }
}

fn reply_tag(tag: i32) -> Result<i32, FrameError> {
    if tag <= MAX_REPLY_TAG { Ok(tag) } else { Err(FrameError::BadReplyTag(tag)) }
}

/// Accumulates one header from a byte stream that arrives in arbitrary pieces.
#[derive(Debug)]
pub(crate) struct HeaderReader {
    bytes: [u8; HEADER_LEN],
    filled: usize,
}

impl Default for HeaderReader {
    fn default() -> Self {
        HeaderReader { bytes: [0; HEADER_LEN], filled: 0 }
    }
}

impl HeaderReader {
    /// Copies what it can from `input`; returns the bytes consumed.
    pub(crate) fn feed(&mut self, input: &[u8]) -> usize {
        let n = input.len().min(HEADER_LEN - self.filled);
        self.bytes[self.filled..self.filled + n].copy_from_slice(&input[..n]);
        self.filled += n;
        n
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.filled == 0
    }

    /// The decoded header once all of it is here (and resets for the next one).
    pub(crate) fn take(&mut self, accept: Accept) -> Option<Result<Header, FrameError>> {
        if self.filled < HEADER_LEN {
            return None;
        }
        self.filled = 0;
        Some(Header::decode(&self.bytes, accept))
    }
}

/// Decodes a whole byte stream, skipping payloads; stops at the first error. Used by the fuzz
/// target and property tests to exercise exactly the header path the device runs.
pub(crate) fn decode_stream(mut input: &[u8], accept: Accept) -> Result<Vec<Header>, FrameError> {
    let mut headers = Vec::new();
    let mut reader = HeaderReader::default();
    while !input.is_empty() {
        input = &input[reader.feed(input)..];
        match reader.take(accept) {
            None => break,
            Some(header) => {
                let header = header?;
                let skip = usize::try_from(header.frame.payload_len()).unwrap_or(usize::MAX).min(input.len());
                input = &input[skip..];
                headers.push(header);
            }
        }
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection from rank 3 to rank 1.
    const ACCEPT: Accept = Accept { max_eager: 8192, source: 3, dest: 1 };

    /// `frame` as sent on the connection `ACCEPT` reads.
    fn sent(frame: Frame) -> Header {
        Header { source: ACCEPT.source, dest: ACCEPT.dest, frame }
    }

    fn all_kinds() -> Vec<Frame> {
        vec![
            Frame::Eager { context: 4, tag: 7, len: 8192 },
            Frame::Rts { context: 5, tag: i32::MAX, len: u64::MAX, send_id: 3, sync: true },
            Frame::Rts { context: 0, tag: 0, len: 9000, send_id: u64::MAX, sync: false },
            Frame::Cts { send_id: 9, recv_id: 11, reads: false },
            Frame::Cts { send_id: 9, recv_id: 11, reads: true },
            Frame::Readable { recv_id: 11, send_id: u64::MAX - 5, addr: 0x7f00_1234_5000 },
            Frame::ReadDone { send_id: 9, recv_id: 11, failed: false },
            Frame::ReadDone { send_id: 9, recv_id: 11, failed: true },
            Frame::Data { recv_id: 11, len: 1 << 40 },
            Frame::Bye,
            Frame::Abort { len: 12, origin: 3, code: None },
            Frame::Abort { len: 0, origin: 0, code: Some(-7) },
            Frame::Cancel { send_id: 2 },
            Frame::CancelAck { send_id: 2, cancelled: true },
            Frame::CancelAck { send_id: 2, cancelled: false },
            Frame::RmaPut { window: 3, offset: 8, len: 1 << 33 },
            Frame::RmaGet { window: 3, offset: u64::MAX, len: 0, reply: -2 },
            Frame::RmaAcc { window: 1, offset: 4, len: 16, element: Element::I32, op: AccumulateOp::Sum },
            Frame::RmaAcc { window: 1, offset: 0, len: 16, element: Element::F64, op: AccumulateOp::NoOp },
            Frame::RmaGetAcc {
                window: 1,
                offset: 0,
                len: 8,
                element: Element::U8,
                op: AccumulateOp::Lxor,
                reply: i32::MIN,
            },
            Frame::RmaFetchOp {
                window: 2,
                offset: 8,
                element: Element::F32,
                op: AccumulateOp::Max,
                operand: 7,
                reply: -9,
            },
            Frame::RmaCas { window: 2, offset: 16, element: Element::U64, compare: u64::MAX, reply: -3 },
            Frame::RmaLock { window: 5, kind: LockKind::Exclusive, reply: -4 },
            Frame::RmaLock { window: 5, kind: LockKind::Shared, reply: -4 },
            Frame::RmaUnlock { window: 5, reply: -5 },
            Frame::RmaFlush { window: 5, reply: -6, query: true },
            Frame::RmaFlush { window: 5, reply: -6, query: false },
            Frame::RmaReply { context: 5, tag: -6, len: 1 << 20, failed: false },
            Frame::RmaReply { context: 5, tag: -6, len: 100, failed: true },
        ]
    }

    #[test]
    fn every_kind_round_trips() {
        for f in all_kinds() {
            assert_eq!(Header::decode(&sent(f).encode(), ACCEPT), Ok(sent(f)));
        }
    }

    #[test]
    fn corrupt_headers_are_rejected() {
        let decode = |h: &[u8; HEADER_LEN]| Header::decode(h, ACCEPT);
        let mut h = sent(Frame::Bye).encode();
        h[4] ^= 1;
        assert!(matches!(decode(&h), Err(FrameError::BadMagic(_))));
        let mut h = sent(Frame::Bye).encode();
        h[0] = 99;
        assert_eq!(decode(&h), Err(FrameError::UnknownKind(99)));
        let mut h = sent(Frame::Bye).encode();
        h[28] = 1;
        assert!(matches!(decode(&h), Err(FrameError::ReservedBits { .. })));
        let h = sent(Frame::Eager { context: 0, tag: 0, len: 8193 }).encode();
        assert!(matches!(decode(&h), Err(FrameError::PayloadTooLong { .. })));
        let h = sent(Frame::Eager { context: 0, tag: -1, len: 0 }).encode();
        assert_eq!(decode(&h), Err(FrameError::NegativeTag(-1)));
        let h = sent(Frame::RmaGet { window: 0, offset: 0, len: 0, reply: -1 }).encode();
        assert_eq!(decode(&h), Err(FrameError::BadReplyTag(-1)));
        // A float element with a bitwise operator, and element/operator codes past the tables.
        let float_band = (8u8) | (6u8 << 4);
        for flags in [float_band, 0x0a, 0xc0] {
            let mut h =
                sent(Frame::RmaAcc { window: 0, offset: 0, len: 8, element: Element::I8, op: AccumulateOp::Sum })
                    .encode();
            h[1] = flags;
            assert_eq!(decode(&h), Err(FrameError::BadOperation { kind: KIND_RMA_ACC, flags }));
        }
        let h = sent(Frame::RmaReply { context: 0, tag: -2, len: MAX_FAILURE_LEN + 1, failed: true }).encode();
        assert!(matches!(decode(&h), Err(FrameError::PayloadTooLong { .. })));
    }

    #[test]
    fn frames_between_other_ranks_are_rejected() {
        let h = Header { source: 2, ..sent(Frame::Bye) }.encode();
        assert_eq!(Header::decode(&h, ACCEPT), Err(FrameError::WrongSource { claimed: 2, connection: 3 }));
        let h = Header { dest: 3, ..sent(Frame::Cts { send_id: 1, recv_id: 2, reads: false }) }.encode();
        assert_eq!(Header::decode(&h, ACCEPT), Err(FrameError::WrongDestination { addressed: 3, served: 1 }));
        // The causes name both ranks, as the abort they lead to reports them.
        let cause = FrameError::WrongDestination { addressed: 3, served: 1 }.to_string();
        assert!(cause.contains("rank 3") && cause.contains("rank 1"), "{cause}");
    }

    #[test]
    fn stream_decoding_skips_payloads() {
        let eager = sent(Frame::Eager { context: 1, tag: 2, len: 3 });
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&eager.encode());
        bytes.extend_from_slice(b"abc");
        bytes.extend_from_slice(&sent(Frame::Bye).encode());
        assert_eq!(decode_stream(&bytes, ACCEPT), Ok(vec![eager, sent(Frame::Bye)]));
    }
}
