//! Send side of one connection: an ordered queue of frames written without blocking.
//!
//! The common case never queues: a frame that fits the socket buffer is written at once with one
//! `writev` (header + payload). Only what the socket cannot take yet waits here, and an eager
//! payload that has to wait is copied (eager sends complete at once, like MPI's buffered
//! standard mode). Rendezvous payloads wait in place, borrowed from the user's buffer, until
//! written or until their request is released.
//!
//! Pacing (`FASTMP_TCP_PACE`, off by default: the default 256 KiB send buffer, see
//! `bootstrap::DEFAULT_SEND_BUFFER`, does the same without polling): a long payload is handed to the
//! kernel one fragment at a time, the next only once the socket's send queue (unacknowledged plus unsent bytes) is below
//! one fragment. The bytes on the wire are the same; what changes is that the kernel never holds
//! more than the congestion window can send at once. On loopback, bytes it must hold back are
//! sent later from the receiver's CPU as acknowledgements arrive, interleave with the sender's
//! own transmissions and reach the receiver out of order, and each reordering costs a spurious
//! fast retransmit that halves the window; paced, there were none (`nstat`).

use super::link::Link;
use std::collections::VecDeque;
use std::io::{self, IoSlice, Write};

use super::frame::{HEADER_LEN, Header};
use crate::device::ReqId;

/// Payload bytes of a queued frame.
enum Body {
    /// The user's send buffer (a rendezvous send that is still a live request).
    Borrowed {
        ptr: *const u8,
        len: usize,
    },
    Owned(Vec<u8>),
}

impl Body {
    fn bytes(&self) -> &[u8] {
        match self {
            // SAFETY: a borrowed body belongs to a live send request whose buffer stays valid and
            // unmodified until the request completes (through `flush`'s callback) or is released
            // (which first converts the body to `Owned` under the tx lock, see `detach`).
            Body::Borrowed { ptr, len } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
            Body::Owned(v) => v,
        }
    }
}

struct Queued {
    header: [u8; HEADER_LEN],
    body: Body,
    /// Bytes of header + body already written.
    written: usize,
    /// The send request this frame completes once written.
    completes: Option<ReqId>,
}

/// Per-connection send state, guarded by the connection's tx lock.
#[derive(Default)]
pub(super) struct Tx {
    queue: VecDeque<Queued>,
    /// Small frames held back (`send_corked`): header and payload bytes, in order. They go out
    /// ahead of the next frame sent or flushed on this connection, in one write.
    corked: Vec<u8>,
    /// Pacing fragment in bytes (0: off): see the module doc.
    pace: usize,
}

/// Held-back bytes beyond which `send_corked` writes at once.
const CORK_LIMIT: usize = 32 * 1024;

// SAFETY: see `Body::bytes`: borrowed pointers are only read under the tx lock while their request
// is live.
unsafe impl Send for Tx {}

impl Tx {
    /// A send side that paces payloads longer than `fragment` bytes (0: no pacing).
    pub(super) fn paced(fragment: usize) -> Self {
        Tx { pace: fragment, ..Tx::default() }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Holds a small frame back until something else is sent or flushed on this connection
    /// (one-sided puts and accumulates, which need not arrive before the next synchronisation,
    /// and every synchronisation sends a frame): many small operations then cost one write.
    pub(super) fn send_corked(
        &mut self,
        stream: &Link,
        header: Header,
        payload: &[u8],
        done: &mut dyn FnMut(ReqId),
    ) -> io::Result<()> {
        self.cork(&header.encode(), payload);
        if self.corked.len() >= CORK_LIMIT { self.flush(stream, done) } else { Ok(()) }
    }

    fn cork(&mut self, header: &[u8; HEADER_LEN], payload: &[u8]) {
        self.corked.extend_from_slice(header);
        self.corked.extend_from_slice(payload);
    }

    /// Moves held-back frames into the queue, ahead of anything sent after them.
    fn uncork(&mut self) {
        if !self.corked.is_empty() {
            let bytes = std::mem::take(&mut self.corked);
            // The batch carries its own headers: mark the queue entry's header as written.
            self.queue.push_back(Queued {
                header: [0; HEADER_LEN],
                body: Body::Owned(bytes),
                written: HEADER_LEN,
                completes: None,
            });
        }
    }

    /// Sends a frame whose payload the caller owns only for the duration of the call: written now
    /// if possible, otherwise what is left is copied and queued. Frames queued before it may be
    /// completed on the way; `done` hears of their requests.
    pub(super) fn send_copied(
        &mut self,
        stream: &Link,
        header: Header,
        payload: &[u8],
        done: &mut dyn FnMut(ReqId),
    ) -> io::Result<()> {
        let header = header.encode();
        let mut written = 0;
        if !self.corked.is_empty() && self.queue.is_empty() {
            // Held-back frames and this one leave in a single write.
            self.cork(&header, payload);
            return self.flush(stream, done);
        }
        self.uncork();
        if self.queue.is_empty() {
            written = write_parts(stream, &header, payload, 0)?;
            if written == HEADER_LEN + payload.len() {
                return Ok(());
            }
        }
        let body_from = written.saturating_sub(HEADER_LEN);
        let owned = payload[body_from..].to_vec();
        // The copy starts where writing stopped; header bytes written so far stay counted.
        self.queue.push_back(Queued {
            header,
            body: Body::Owned(owned),
            written: written.min(HEADER_LEN),
            completes: None,
        });
        self.flush(stream, done)
    }

    /// Queues a frame whose payload is a live send request's buffer; the request completes when
    /// the last byte is written (`flush`'s callback), or is detached first (`detach`).
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid and unmodified until `flush` reports `id` or `detach(id)`
    /// returns.
    pub(super) unsafe fn send_borrowed(
        &mut self,
        stream: &Link,
        header: Header,
        ptr: *const u8,
        len: usize,
        id: ReqId,
        done: &mut dyn FnMut(ReqId),
    ) -> io::Result<()> {
        self.uncork();
        self.queue.push_back(Queued {
            header: header.encode(),
            body: Body::Borrowed { ptr, len },
            written: 0,
            completes: Some(id),
        });
        self.flush(stream, done)
    }

    /// Queues an owned payload (a detached send's data, or a one-sided reply) completing `id`
    /// if given.
    pub(super) fn send_owned(
        &mut self,
        stream: &Link,
        header: Header,
        data: Vec<u8>,
        completes: Option<ReqId>,
        done: &mut dyn FnMut(ReqId),
    ) -> io::Result<()> {
        self.uncork();
        self.queue.push_back(Queued { header: header.encode(), body: Body::Owned(data), written: 0, completes });
        self.flush(stream, done)
    }

    /// Stops borrowing request `id`'s buffer: its unwritten bytes are copied into the queue.
    pub(super) fn detach(&mut self, id: ReqId) {
        for q in self.queue.iter_mut().filter(|q| q.completes == Some(id)) {
            if let Body::Borrowed { .. } = q.body {
                let owned = q.body.bytes().to_vec();
                q.body = Body::Owned(owned);
            }
            q.completes = None;
        }
    }

    /// Writes queued frames until the socket is full; `done` hears of each completed request.
    pub(super) fn flush(&mut self, stream: &Link, done: &mut dyn FnMut(ReqId)) -> io::Result<()> {
        self.uncork();
        while let Some(q) = self.queue.front_mut() {
            let body = q.body.bytes();
            let total = HEADER_LEN + body.len();
            let end = paced_end(stream, self.pace, q.written, total);
            if end == q.written {
                return Ok(());
            }
            q.written += write_parts(stream, &q.header, &body[..end - HEADER_LEN], q.written)?;
            if q.written < total {
                return Ok(());
            }
            if let Some(id) = q.completes {
                done(id);
            }
            self.queue.pop_front();
        }
        Ok(())
    }
}

/// How far into a frame of `total` bytes, `written` of them written, may be written now with
/// pacing fragment `pace`: everything when pacing is off or at most one fragment is left, one
/// more fragment when the send queue holds less than one, else nothing yet. Never ends inside
/// the header.
fn paced_end(stream: &Link, pace: usize, written: usize, total: usize) -> usize {
    if pace == 0 || total - written <= pace {
        return total;
    }
    match stream.send_queue_len() {
        Some(queued) if queued >= pace => written,
        _ => (written + pace).clamp(HEADER_LEN, total),
    }
}

/// Writes `header ++ body` from offset `from` without blocking; returns the bytes written
/// (0 if the socket is full).
fn write_parts(mut stream: &Link, header: &[u8; HEADER_LEN], body: &[u8], from: usize) -> io::Result<usize> {
    let total = HEADER_LEN + body.len();
    let mut at = from;
    while at < total {
        let result = if at < HEADER_LEN {
            stream.write_vectored(&[IoSlice::new(&header[at..]), IoSlice::new(body)])
        } else {
            stream.write(&body[at - HEADER_LEN..])
        };
        match result {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "connection accepts no more data")),
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(at - from)
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};

    use super::*;
    use crate::device::tcp::frame::{Accept, Frame, decode_stream};

    fn eager(tag: i32, len: u64) -> Header {
        Header { source: 3, dest: 1, frame: Frame::Eager { context: 0, tag, len } }
    }

    /// Held-back frames go out before the next frame, in order, and only then.
    #[test]
    fn corked_frames_precede_the_next_frame() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let writer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut reader, _) = listener.accept().unwrap();
        writer.set_nonblocking(true).unwrap();
        let writer = Link::new(writer, None);
        let mut tx = Tx::default();
        let mut done = |_| {};
        tx.send_corked(&writer, eager(1, 2), &[1, 1], &mut done).unwrap();
        tx.send_corked(&writer, eager(2, 1), &[2], &mut done).unwrap();
        assert!(tx.is_empty(), "held-back frames are not queued for writing");
        reader.set_nonblocking(true).unwrap();
        assert!(reader.read(&mut [0u8; 1]).is_err(), "nothing written yet");
        tx.send_copied(&writer, eager(3, 0), &[], &mut done).unwrap();
        assert!(tx.is_empty());
        reader.set_nonblocking(false).unwrap();
        let mut wire = vec![0u8; 3 * HEADER_LEN + 3];
        reader.read_exact(&mut wire).unwrap();
        let accept = Accept { max_eager: 8192, source: 3, dest: 1 };
        let tags: Vec<i32> = decode_stream(&wire, accept)
            .unwrap()
            .into_iter()
            .map(|h| match h.frame {
                Frame::Eager { tag, .. } => tag,
                other => panic!("unexpected frame {other:?}"),
            })
            .collect();
        assert_eq!(tags, [1, 2, 3]);
        assert_eq!(&wire[HEADER_LEN..HEADER_LEN + 2], &[1, 1]);
    }
}
