//! The byte stream of one connection: its TCP socket, or, between ranks of one node that agreed
//! on it at start-up, a pair of shared-memory rings ([`ShmRings`]) beside the socket.
//!
//! Over rings the socket carries no data, only
//! - doorbells: one byte, written only when the other side's progress thread said it is about to
//!   sleep in `poll(2)` (a side that polls by itself never pays a system call per message);
//! - the end of the connection: its EOF (a goodbye, or the kernel closing a dead process's
//!   socket) ends the stream once the inbound ring is drained, as a socket's EOF would.
//!
//! `rx` and `tx` see one `Read`/`Write` either way, so frames, protocols and failure handling
//! are the same over both.

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;

use super::shm_ring::ShmRings;

pub(super) struct Link {
    socket: TcpStream,
    rings: Option<ShmRings>,
}

/// What the input thread should do with a connection before sleeping in `poll(2)`.
pub(super) struct PollPlan {
    /// `poll(2)` events to wait for on the socket (0: leave it out).
    pub events: libc::c_short,
    /// Work is already waiting: do not sleep.
    pub ready: bool,
}

impl Link {
    pub(super) fn new(socket: TcpStream, rings: Option<ShmRings>) -> Self {
        Link { socket, rings }
    }

    pub(super) fn socket(&self) -> &TcpStream {
        &self.socket
    }

    pub(super) fn shutdown(&self, how: Shutdown) {
        let _ = self.socket.shutdown(how);
    }

    /// Bytes in the socket's send queue, for pacing (`None`: unknown, or no socket data).
    pub(super) fn send_queue_len(&self) -> Option<usize> {
        if self.rings.is_some() {
            return None;
        }
        let mut queued: libc::c_int = 0;
        // SAFETY: `TIOCOUTQ` (`SIOCOUTQ`) writes one int through the pointer, which is live.
        let rc = unsafe { libc::ioctl(self.socket.as_raw_fd(), libc::TIOCOUTQ, &raw mut queued) };
        (rc == 0).then(|| usize::try_from(queued).unwrap_or(0))
    }

    /// Prepares the connection for the input thread's sleep: which socket events wake it, with
    /// rings asking the peer for doorbells (`reading`: inbound bytes are wanted; `writing`:
    /// bytes wait for space).
    pub(super) fn plan_poll(&self, reading: bool, writing: bool) -> PollPlan {
        let Some(rings) = &self.rings else {
            let events = if reading { libc::POLLIN } else { 0 } | if writing { libc::POLLOUT } else { 0 };
            return PollPlan { events, ready: false };
        };
        let ready = (reading && rings.arm_reader()) | (writing && rings.arm_writer());
        // Doorbells and the EOF arrive as input, until the EOF is known.
        let events = if rings.eof() { 0 } else { libc::POLLIN };
        PollPlan { events, ready }
    }

    /// After the sleep: no more doorbells wanted.
    pub(super) fn disarm(&self) {
        if let Some(rings) = &self.rings {
            rings.disarm();
        }
    }

    /// Reads the doorbells that woke the sleeper (and notes the socket's EOF).
    pub(super) fn take_doorbells(&self) {
        let Some(rings) = &self.rings else { return };
        if rings.eof() {
            return;
        }
        let mut bells = [0u8; 64];
        loop {
            match (&self.socket).read(&mut bells) {
                Ok(0) => return rings.set_eof(),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                // A reset socket ends the stream as an EOF does (the peer is gone).
                Err(_) => return rings.set_eof(),
            }
        }
    }

    fn ring_doorbell(&self, doorbell: bool) {
        if doorbell {
            // Best effort: a full socket buffer already holds doorbells, and a broken one is
            // found by the peer's reader.
            let _ = (&self.socket).write(&[1]);
        }
    }
}

impl Read for &Link {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(rings) = &self.rings else { return (&self.socket).read(buf) };
        if buf.is_empty() {
            return Ok(0);
        }
        let eof = rings.eof();
        let moved = rings.read(buf)?;
        self.ring_doorbell(moved.doorbell);
        match moved.bytes {
            // The peer wrote its last bytes before its socket ended, so empty after the EOF
            // was seen is the end.
            0 if eof => Ok(0),
            0 => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }
}

impl Write for &Link {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let Some(rings) = &self.rings else { return (&self.socket).write_vectored(bufs) };
        let parts: [&[u8]; 2] = match bufs {
            [] => return Ok(0),
            [one] => [one, &[]],
            [first, second] => [first, second],
            _ => return Err(io::Error::other("a ring write takes at most two parts")),
        };
        let moved = rings.write(&parts)?;
        self.ring_doorbell(moved.doorbell);
        match moved.bytes {
            0 if parts.iter().any(|p| !p.is_empty()) => Err(io::ErrorKind::WouldBlock.into()),
            n => Ok(n),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
