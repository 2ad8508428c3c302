//! Send side of one connection: an ordered queue of frames written without blocking.
//!
//! The common case never queues: a frame that fits the socket buffer is written at once with one
//! `writev` (header + payload). Only what the socket cannot take yet waits here, and an eager
//! payload that has to wait is copied (eager sends complete at once, like MPI's buffered
//! standard mode). Rendezvous payloads wait in place, borrowed from the user's buffer, until
//! written or until their request is released.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Write};
use std::net::TcpStream;

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
}

// SAFETY: see `Body::bytes`: borrowed pointers are only read under the tx lock while their request
// is live.
unsafe impl Send for Tx {}

impl Tx {
    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Sends a frame whose payload the caller owns only for the duration of the call: written now
    /// if possible, otherwise what is left is copied and queued. Frames queued before it may be
    /// completed on the way; `done` hears of their requests.
    pub(super) fn send_copied(
        &mut self,
        stream: &TcpStream,
        header: Header,
        payload: &[u8],
        done: &mut dyn FnMut(ReqId),
    ) -> io::Result<()> {
        let header = header.encode();
        let mut written = 0;
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
        stream: &TcpStream,
        header: Header,
        ptr: *const u8,
        len: usize,
        id: ReqId,
        done: &mut dyn FnMut(ReqId),
    ) -> io::Result<()> {
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
        stream: &TcpStream,
        header: Header,
        data: Vec<u8>,
        completes: Option<ReqId>,
        done: &mut dyn FnMut(ReqId),
    ) -> io::Result<()> {
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
    pub(super) fn flush(&mut self, stream: &TcpStream, done: &mut dyn FnMut(ReqId)) -> io::Result<()> {
        while let Some(q) = self.queue.front_mut() {
            let body = q.body.bytes();
            let total = HEADER_LEN + body.len();
            q.written += write_parts(stream, &q.header, body, q.written)?;
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

/// Writes `header ++ body` from offset `from` without blocking; returns the bytes written
/// (0 if the socket is full).
fn write_parts(mut stream: &TcpStream, header: &[u8; HEADER_LEN], body: &[u8], from: usize) -> io::Result<usize> {
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
