//! Runs the tcp device's receive path over arbitrary bytes, for the fuzz target (`fuzz/`,
//! `scripts/fuzz.sh`) and the property tests (`frame_props.rs`).
//!
//! After the handshake a peer still controls every byte this rank reads, and a bug there could
//! also come from a plain bug on the sending side. So the receive path must turn *any* byte
//! stream into frames or an error: no panic, no hang, no write through its raw user-buffer
//! pointers past a buffer, no allocation the stream did not pay for. This harness drives the
//! real [`Rx::pump`] (not a copy of it) with scripted reads, and panics only when one of its
//! invariants breaks — that is what a fuzzer reports.

use std::io::{self, Read};

use super::frame::{self, Accept, Frame, FrameError, HEADER_LEN, Header};
use super::rx::{Delivery, Pumped, Rx, RxError, RxHandler, Sink};
use crate::device::ReqId;

/// What the harness's connection accepts: a small eager limit, so the fuzzer reaches the
/// "payload too long" edge cheaply, on a connection from rank 1 to rank 0.
pub(crate) const FUZZ_ACCEPT: Accept = Accept { max_eager: 4096, source: 1, dest: 0 };

/// Largest receive buffer the harness hands out: a longer announced payload is truncated into
/// it as into a real short receive buffer, and a hostile `len` costs no memory.
const MAX_USER_BUFFER: usize = 64 * 1024;

/// Fuzz entry point: decodes `data` every way the device can and checks the ways agree.
///
/// The first byte steers how the rest is read (piece size, `WouldBlock`s, buffer sizes), so the
/// fuzzer explores splits of a stream as well as its content. Panics only on a broken invariant.
#[doc(hidden)]
pub fn fuzz_decode_frames(data: &[u8]) {
    let Some((&control, stream)) = data.split_first() else { return };
    check_canonical_headers(stream);
    let sinks = SinkPolicy::from_control(control);
    let pieces = receive(stream, Reading::from_control(control), sinks);
    let whole = receive(stream, Reading::WHOLE, sinks);
    assert!(
        pieces == whole,
        "the outcome depends on how the stream was split into reads: {} vs {}",
        pieces.summary(),
        whole.summary()
    );
    check_against_decode_stream(stream, &whole);
}

/// Every header that decodes has exactly one encoding (the header decoder's own promise): a
/// header that decodes must re-encode to the very same bytes.
fn check_canonical_headers(stream: &[u8]) {
    for chunk in stream.chunks_exact(HEADER_LEN) {
        let mut header = [0u8; HEADER_LEN];
        header.copy_from_slice(chunk);
        if let Ok(decoded) = Header::decode(&header, FUZZ_ACCEPT) {
            assert_eq!(decoded.encode(), header, "{decoded:?} has a second encoding");
        }
    }
}

/// `frame::decode_stream` (headers only) and the receive path must see the same headers and the
/// same first protocol error.
fn check_against_decode_stream(stream: &[u8], received: &Received) {
    match frame::decode_stream(stream, FUZZ_ACCEPT) {
        Ok(frames) => {
            assert_eq!(frames, received.headers, "decode_stream and Rx disagree on the headers");
            assert!(!matches!(received.end, End::Protocol(_)), "only Rx found a protocol error: {received:?}");
        }
        Err(error) => assert_eq!(received.end, End::Protocol(error), "decode_stream and Rx disagree on the error"),
    }
}

/// What the receive path made of a stream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Received {
    /// Every header, in order, as the handler saw it.
    pub headers: Vec<Header>,
    /// Every completed frame with the payload bytes that landed in its sink.
    pub completed: Vec<(Header, Vec<u8>)>,
    pub end: End,
}

impl Received {
    /// A failure message's view: payloads as lengths and checksums (they can be 64 KiB long).
    fn summary(&self) -> String {
        let completed: Vec<_> = self
            .completed
            .iter()
            .map(|(header, payload)| {
                let checksum = payload.iter().fold(0u32, |sum, &b| sum.rotate_left(5) ^ u32::from(b));
                format!("{header:?} with {} bytes (checksum {checksum:#x})", payload.len())
            })
            .collect();
        format!("headers {:?}, completed [{}], end {:?}", self.headers, completed.join(", "), self.end)
    }
}

/// How the stream ended for the receive path.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// Clean end of stream at a frame boundary.
    Closed,
    /// The stream ended inside a frame.
    Truncated,
    Protocol(FrameError),
}

/// How a scripted peer hands its bytes to `read`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reading {
    /// Most bytes one `read` returns (at least 1).
    pub max_piece: usize,
    /// Answer every other `read` with `WouldBlock`, as a non-blocking socket between packets.
    pub would_block_between: bool,
}

impl Reading {
    /// Everything in as few reads as the receiver's buffers allow.
    pub(crate) const WHOLE: Reading = Reading { max_piece: usize::MAX, would_block_between: false };

    fn from_control(control: u8) -> Reading {
        // Piece sizes 1..=64 cover every split inside a header; 0x40 makes them large.
        let small = usize::from(control & 0x3f) + 1;
        Reading {
            max_piece: if control & 0x40 != 0 { small * 1024 } else { small },
            would_block_between: control & 0x80 != 0,
        }
    }
}

/// Which sinks the harness's handler hands out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SinkPolicy {
    /// Eager and rendezvous payloads into receive buffers of the announced size (capped).
    FullBuffers,
    /// Receive buffers of half the announced size: the truncation path.
    HalfBuffers,
    /// Payloads into owned vectors, as for unexpected messages.
    Owned,
}

impl SinkPolicy {
    fn from_control(control: u8) -> SinkPolicy {
        // Uses the bits `Reading::from_control` ignores least, mixed so all three occur.
        match (control >> 2) % 3 {
            0 => SinkPolicy::FullBuffers,
            1 => SinkPolicy::HalfBuffers,
            _ => SinkPolicy::Owned,
        }
    }
}

/// Runs `stream` through a fresh [`Rx`] as a peer reading it per `reading` would deliver it.
pub(crate) fn receive(stream: &[u8], reading: Reading, sinks: SinkPolicy) -> Received {
    let mut rx = Rx::new(FUZZ_ACCEPT);
    let mut peer = ScriptedPeer { rest: stream, reading, blocked_last: false };
    let mut handler =
        RecordingHandler { sinks, user_buffer: None, next_id: 0, headers: Vec::new(), completed: Vec::new() };
    // Every pump round but a `WouldBlock` one consumes input or completes a frame, so this bound
    // is only reached if the receive path stops making progress (a hang in the device).
    let max_rounds = 4 * (stream.len() + 2);
    for _ in 0..max_rounds {
        let end = match rx.pump(&mut peer, &mut handler) {
            Ok(Pumped::Drained(_)) => continue,
            Ok(Pumped::Closed) => End::Closed,
            Err(RxError::Truncated) => End::Truncated,
            Err(RxError::Protocol(error)) => End::Protocol(error),
            Err(RxError::Io(error)) => panic!("the scripted peer never fails a read, yet: {error}"),
        };
        return Received { headers: handler.headers, completed: handler.completed, end };
    }
    panic!("the receive path made no progress in {max_rounds} rounds over {} bytes", stream.len());
}

/// A `Read` that hands out a fixed byte string in scripted pieces, then end of stream.
struct ScriptedPeer<'a> {
    rest: &'a [u8],
    reading: Reading,
    blocked_last: bool,
}

impl Read for ScriptedPeer<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.reading.would_block_between && !self.blocked_last && !self.rest.is_empty() {
            self.blocked_last = true;
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.blocked_last = false;
        let n = buf.len().min(self.rest.len()).min(self.reading.max_piece.max(1));
        buf[..n].copy_from_slice(&self.rest[..n]);
        self.rest = &self.rest[n..];
        Ok(n)
    }
}

/// Hands out sinks per its policy and records what arrives.
struct RecordingHandler {
    sinks: SinkPolicy,
    /// The receive buffer of the payload in flight (the receive path has one at a time).
    user_buffer: Option<(ReqId, Vec<u8>)>,
    next_id: u32,
    headers: Vec<Header>,
    completed: Vec<(Header, Vec<u8>)>,
}

impl RxHandler for RecordingHandler {
    fn on_header(&mut self, header: Header) -> Sink {
        self.headers.push(header);
        let frame = header.frame;
        let announced = usize::try_from(frame.payload_len()).unwrap_or(usize::MAX);
        let capacity = match self.sinks {
            _ if !matches!(frame, Frame::Eager { .. } | Frame::Data { .. } | Frame::RmaReply { failed: false, .. }) => {
                return Sink::Owned(Vec::new());
            }
            SinkPolicy::Owned => return Sink::Owned(Vec::new()),
            SinkPolicy::FullBuffers => announced.min(MAX_USER_BUFFER),
            SinkPolicy::HalfBuffers => (announced / 2).min(MAX_USER_BUFFER),
        };
        assert!(self.user_buffer.is_none(), "a new header arrived while a payload was still in flight");
        let id = ReqId { index: self.next_id, generation: 0 };
        self.next_id += 1;
        let mut buffer = vec![0u8; capacity];
        // The heap block does not move when the vector is moved into `user_buffer`, so the pointer
        // stays valid until `on_complete` takes the vector back: the device's buffer contract.
        let ptr = buffer.as_mut_ptr();
        self.user_buffer = Some((id, buffer));
        Sink::User { id, ptr, capacity }
    }

    fn on_complete(&mut self, delivery: Delivery) {
        assert_eq!(delivery.done, delivery.len, "{:?} completed with a partial payload", delivery.header);
        let payload = match delivery.sink {
            Sink::User { id, capacity, .. } => {
                let Some((expected, buffer)) = self.user_buffer.take() else {
                    panic!("{:?} completed into a receive buffer that was never handed out", delivery.header)
                };
                assert_eq!(id, expected, "completed into the wrong receive buffer");
                assert_eq!(buffer.len(), capacity);
                buffer
            }
            Sink::Owned(bytes) => {
                assert_eq!(bytes.len(), delivery.len, "an owned sink got the wrong number of bytes");
                bytes
            }
            Sink::Discard | Sink::Part { .. } => panic!("the harness never hands out Discard or Part"),
        };
        self.completed.push((delivery.header, payload));
    }
}
