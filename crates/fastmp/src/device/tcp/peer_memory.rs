//! Single-copy rendezvous between processes of one node: the receiver copies the payload
//! straight out of the sender's buffer with `process_vm_readv(2)` (Linux cross-memory attach,
//! what Open MPI's shared-memory transport uses for large messages), instead of the two copies
//! through a same-node link's ring.
//!
//! Only ever reads: a peer never writes into this process, so a receive released mid-transfer
//! or a sender that misbehaves cannot corrupt our memory. The kernel checks the peer's
//! addresses (a bad one is `EFAULT`, never a fault here) and whether we may read it at all
//! (same user, no ptrace restriction in the way; containers may forbid the call): a failed
//! read falls back to the ring for that message and stops reading from that peer.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// Another process of this node whose memory the kernel lets us read.
pub(super) struct PeerProcess {
    pid: libc::pid_t,
    /// Cleared after a failed read: later transfers go through the ring.
    usable: AtomicBool,
}

impl PeerProcess {
    /// `pid`, if reading the 8 bytes at its address `probe` gives `expected` (a value only that
    /// process holds there, so a pid that names another process in our namespace fails).
    pub(super) fn probe(pid: u64, probe: u64, expected: u64) -> Option<PeerProcess> {
        let pid = libc::pid_t::try_from(pid).ok().filter(|&pid| pid > 0)?;
        let peer = PeerProcess { pid, usable: AtomicBool::new(true) };
        let mut seen = [0u8; 8];
        peer.read(probe, &mut seen).ok()?;
        (u64::from_ne_bytes(seen) == expected).then_some(peer)
    }

    /// Whether transfers from this peer may still be read directly.
    pub(super) fn usable(&self) -> bool {
        self.usable.load(Ordering::Relaxed)
    }

    /// Stops direct reads from this peer (after one failed).
    pub(super) fn give_up(&self) {
        self.usable.store(false, Ordering::Relaxed);
    }

    /// Copies `dst.len()` bytes from address `from` of the peer into `dst`.
    pub(super) fn read(&self, from: u64, dst: &mut [u8]) -> io::Result<()> {
        let mut done = 0;
        while done < dst.len() {
            let rest = &mut dst[done..];
            let local = libc::iovec { iov_base: rest.as_mut_ptr().cast(), iov_len: rest.len() };
            let remote = libc::iovec { iov_base: (from as usize + done) as *mut libc::c_void, iov_len: rest.len() };
            // SAFETY: the kernel writes at most `rest.len()` bytes into `rest`, which we borrow
            // mutably; the remote range is the peer's and checked by the kernel (EFAULT).
            let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
            match n {
                n if n > 0 => done += n as usize,
                0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the peer's range ended early")),
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "process_vm_readv is a system call Miri does not run")]
    fn reads_our_own_memory_and_refuses_bad_addresses() {
        let me = u64::from(std::process::id());
        let word: u64 = 0x1234_5678_9abc_def0;
        let at = std::ptr::from_ref(&word) as u64;
        let peer = PeerProcess::probe(me, at, word).expect("this process may read itself");
        assert!(PeerProcess::probe(me, at, word ^ 1).is_none(), "a wrong value fails the probe");
        assert!(PeerProcess::probe(0, at, word).is_none(), "pid 0 is nobody");
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut got = vec![0u8; data.len()];
        peer.read(data.as_ptr() as u64, &mut got).unwrap();
        assert_eq!(got, data);
        assert!(peer.read(8, &mut [0u8; 16]).is_err(), "an unmapped address is an error, not a fault");
    }
}
