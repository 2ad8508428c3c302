//! Receive side of one connection: turns the byte stream into frames and payload deliveries.
//!
//! Small reads go through a staging buffer (one `read` often brings a header and its eager
//! payload); a long payload whose destination is a user buffer is read straight into it, so
//! rendezvous data is never buffered on the way. What a frame *means* is the handler's business
//! ([`RxHandler`]); this module only moves bytes.

use std::io::{self, Read};
use std::sync::Arc;

use super::frame::{Accept, FrameError, Header, HeaderReader};
use super::one_sided::Part;
use crate::device::ReqId;

/// Staging buffer size: several small frames per `read` system call.
const STAGING_LEN: usize = 64 * 1024;
/// Payload remainders at least this long bypass the staging buffer.
const DIRECT_MIN: usize = 16 * 1024;

/// Where the payload of the current frame goes.
pub(super) enum Sink {
    /// A receive request's buffer: the first `capacity` bytes land there, the rest is dropped.
    User { id: ReqId, ptr: *mut u8, capacity: usize },
    /// An owned buffer (unexpected eager message, abort cause).
    Owned(Vec<u8>),
    /// A window part: a one-sided put applied as it arrives (through the part's `Segment`).
    Part { part: Arc<Part>, offset: usize },
    /// Nobody wants it (released receive, truncated tail).
    Discard,
}

/// The payload being received and what to do once it is complete.
pub(super) struct Delivery {
    pub header: Header,
    pub sink: Sink,
    /// Total payload bytes announced by the header.
    pub len: usize,
    pub done: usize,
}

/// Protocol decisions for the frames of one connection.
pub(super) trait RxHandler {
    /// A header arrived; returns where its payload (if any) goes.
    fn on_header(&mut self, header: Header) -> Sink;
    /// The whole payload of `delivery` has arrived (called for payload-free frames too).
    fn on_complete(&mut self, delivery: Delivery);
}

/// How a pump round ended.
#[derive(Debug)]
pub(super) enum Pumped {
    /// The socket has nothing more right now; `bool`: whether any bytes moved.
    Drained(bool),
    /// The peer closed the connection cleanly (at a frame boundary).
    Closed,
}

/// Why a connection became unusable.
#[derive(Debug)]
pub(super) enum RxError {
    Io(io::Error),
    Protocol(FrameError),
    /// The stream ended in the middle of a frame.
    Truncated,
}

/// Per-connection receive state, guarded by the connection's rx lock.
pub(super) struct Rx {
    header: HeaderReader,
    staging: Box<[u8]>,
    start: usize,
    end: usize,
    current: Option<Delivery>,
    accept: Accept,
    /// Frames completed so far (lets `pump` notice progress).
    frames: u64,
}

// SAFETY: the raw user pointer in `Sink::User` is only written through while the rx lock is held,
// under the device contract that the buffer stays valid until its request completes or is
// released; release takes the same lock before retargeting the sink (see `retarget`).
unsafe impl Send for Rx {}

impl Rx {
    pub(super) fn new(accept: Accept) -> Self {
        Rx {
            header: HeaderReader::default(),
            staging: vec![0u8; STAGING_LEN].into_boxed_slice(),
            start: 0,
            end: 0,
            current: None,
            accept,
            frames: 0,
        }
    }

    /// If the payload in flight targets request `id`, drops the rest of it instead (the request
    /// is being released and its buffer must not be touched any more).
    pub(super) fn retarget(&mut self, id: ReqId) {
        if let Some(d) = &mut self.current
            && matches!(d.sink, Sink::User { id: target, .. } if target == id)
        {
            d.sink = Sink::Discard;
        }
    }

    /// Reads everything the socket has now, handing complete frames to `handler`.
    ///
    /// Generic over the reader (the device passes `&TcpStream`) so the fuzz target and property
    /// tests drive exactly this code with scripted byte pieces and `WouldBlock`s.
    pub(super) fn pump(&mut self, mut stream: impl Read, handler: &mut dyn RxHandler) -> Result<Pumped, RxError> {
        let mut moved = false;
        let frames_before = self.frames;
        loop {
            self.consume_staged(handler)?;
            // Frames completed and nothing half-read: return now rather than spend a system call
            // (the usual answer: nothing more yet) on the path of the message just delivered.
            if self.frames != frames_before && self.current.is_none() && self.header.is_empty() {
                return Ok(Pumped::Drained(true));
            }
            // Staging is empty here: read more, directly into the user buffer when worthwhile.
            let n = match self.direct_target() {
                Some(dst) => read_some(&mut stream, dst),
                None => read_some(&mut stream, &mut self.staging),
            };
            match n {
                Ok(0) => {
                    return if self.current.is_none() && self.header.is_empty() {
                        Ok(Pumped::Closed)
                    } else {
                        Err(RxError::Truncated)
                    };
                }
                Ok(n) => {
                    moved = true;
                    if self.direct_target().is_some() {
                        self.advance_direct(n, handler);
                    } else {
                        self.start = 0;
                        self.end = n;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Pumped::Drained(moved)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(RxError::Io(e)),
            }
        }
    }

    /// The unread rest of a user-bound payload, if it is long enough to skip staging.
    fn direct_target(&mut self) -> Option<&mut [u8]> {
        let d = self.current.as_mut()?;
        let Sink::User { ptr, capacity, .. } = d.sink else { return None };
        let want = capacity.min(d.len);
        if want.saturating_sub(d.done) < DIRECT_MIN {
            return None;
        }
        // SAFETY: `ptr..ptr+capacity` is the live receive buffer of request `id` (device contract:
        // valid and exclusively ours until the request completes or is released, and release
        // retargets under the rx lock we hold); `done < want <= capacity`.
        Some(unsafe { std::slice::from_raw_parts_mut(ptr.add(d.done), want - d.done) })
    }

    fn advance_direct(&mut self, n: usize, handler: &mut dyn RxHandler) {
        if let Some(d) = self.current.as_mut() {
            d.done += n;
        }
        self.finish_if_complete(handler);
    }

    /// Processes staged bytes: header pieces, payload pieces, complete frames.
    fn consume_staged(&mut self, handler: &mut dyn RxHandler) -> Result<(), RxError> {
        loop {
            if self.current.is_none() {
                if self.start == self.end {
                    return Ok(());
                }
                let used = self.header.feed(&self.staging[self.start..self.end]);
                self.start += used;
                match self.header.take(self.accept) {
                    None => return Ok(()),
                    Some(Err(e)) => return Err(RxError::Protocol(e)),
                    Some(Ok(header)) => {
                        let len = usize::try_from(header.frame.payload_len())
                            .map_err(|_| RxError::Protocol(FrameError::UnknownKind(0)))?;
                        let sink = handler.on_header(header);
                        self.current = Some(Delivery { header, sink, len, done: 0 });
                        self.finish_if_complete(handler);
                    }
                }
            } else {
                if self.start == self.end {
                    return Ok(());
                }
                let d = self.current.as_mut().expect("checked above");
                let n = (d.len - d.done).min(self.end - self.start);
                let src = &self.staging[self.start..self.start + n];
                match &mut d.sink {
                    Sink::User { ptr, capacity, .. } => {
                        let fit = (*capacity).saturating_sub(d.done).min(n);
                        // Past the buffer's end (a truncated receive) nothing is copied, and even
                        // forming `ptr.add(d.done)` there would be undefined behaviour (Miri).
                        if fit > 0 {
                            // SAFETY: as in `direct_target`; `d.done < d.done + fit <= capacity`.
                            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), ptr.add(d.done), fit) };
                        }
                    }
                    Sink::Owned(buf) => buf.extend_from_slice(src),
                    Sink::Part { part, offset } => part.write_arriving(*offset + d.done, src),
                    Sink::Discard => {}
                }
                d.done += n;
                self.start += n;
                self.finish_if_complete(handler);
            }
        }
    }

    fn finish_if_complete(&mut self, handler: &mut dyn RxHandler) {
        if self.current.as_ref().is_some_and(|d| d.done >= d.len) {
            let d = self.current.take().expect("checked above");
            self.frames += 1;
            handler.on_complete(d);
        }
    }
}

fn read_some(stream: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    stream.read(buf)
}
