//! Creating and freeing windows: the untyped state every `Window<T>` wraps ([`Core`]), the
//! collective creation (dup, expose, agree, connect, agree) and the two ways a part ends: the
//! collective free (flush, barrier, close) and the local abandon (close only) of a rank that
//! unwinds or leaves a window mid-epoch.

use std::cell::Cell;

use super::epoch::{Epochs, Held};
use super::memory::Part;
use crate::coll::op::Max;
use crate::comm::Comm;
use crate::device::one_sided::RmaWindow;
use crate::error::{Error, Result};

/// A window's state on this rank, independent of the element type.
pub(crate) struct Core {
    /// The window's communicator (a dup: its point-to-point context is the window id and carries
    /// the PSCW messages; its collective context the fences and the free's barrier).
    pub(crate) comm: Comm,
    pub(crate) dev: Box<dyn RmaWindow>,
    /// This rank's memory; taken when released (never, if the window is leaked).
    part: Cell<Option<Part>>,
    /// Base and byte length of this rank's part (for the local guard).
    pub(crate) base: *mut u8,
    pub(crate) bytes: usize,
    /// Size of one element (displacements and lengths are in elements).
    pub(crate) elem: usize,
    pub(crate) epochs: Epochs,
    /// A `LocalGuard` is alive (or was leaked): every other call is refused.
    pub(crate) local: Cell<bool>,
    /// Created by `win_allocate_shared` (`shared_query` allowed).
    pub(crate) shared: bool,
    /// Freed or abandoned: the part is closed.
    done: Cell<bool>,
}

/// How a window is being created.
pub(crate) struct Creation {
    pub(crate) call: &'static str,
    pub(crate) shared: bool,
    pub(crate) elem: usize,
}

impl Core {
    /// Collective creation over `comm` of a window whose part on this rank is `part` (or the
    /// error that kept it from existing: every rank then fails together).
    pub(crate) fn create(comm: &Comm, how: Creation, part: Result<Part>) -> Result<Core> {
        let call = how.call;
        comm.check_live()?;
        let Some(one_sided) = comm.dev.one_sided() else {
            if let Ok(part) = part {
                part.release();
            }
            return Err(Error::InvalidArgument(format!(
                "{call}: the {} device has no one-sided communication",
                comm.device_name()
            )));
        };
        if how.shared && !one_sided.direct_access(comm.group.members()) {
            if let Ok(part) = part {
                part.release();
            }
            return Err(Error::InvalidArgument(format!(
                "{call}: the ranks of this communicator do not share an address space on the {} device \
                 (all must be thread ranks of one process); use win_allocate, or a communicator from \
                 split_type(SplitType::SharedProcess)",
                comm.device_name()
            )));
        }
        let wcomm = match comm.dup() {
            Ok(c) => c,
            Err(e) => {
                if let Ok(part) = part {
                    part.release();
                }
                return Err(e);
            }
        };
        let exposed = part.and_then(|part| {
            // SAFETY: the part's memory is valid for reads and writes (owned, or borrowed by
            // `win_create` for longer than the window lives), 8-aligned when owned, and from here
            // on accessed only through the window's rules: the device's operations, or the local
            // guard between begin/end_local_access. It is released only after `close` returned
            // (or leaked, with the handle).
            match unsafe { one_sided.expose(wcomm.context, wcomm.group.members(), part.base(), part.bytes()) } {
                Ok(dev) => Ok((dev, part)),
                Err(e) => {
                    part.release();
                    Err(e)
                }
            }
        });
        let agreed = agree(&wcomm, call, "create its part", exposed.is_ok());
        let (dev, part) = exposed?;
        if let Err(e) = agreed {
            if dev.close().is_ok() {
                part.release();
            }
            return Err(e);
        }
        let core = Core {
            base: part.base(),
            bytes: part.bytes(),
            part: Cell::new(Some(part)),
            comm: wcomm,
            epochs: Epochs::new(comm.size()),
            local: Cell::new(false),
            shared: how.shared,
            elem: how.elem,
            dev,
            done: Cell::new(false),
        };
        // Connected everywhere before any operation can start (the second agreement is also the
        // barrier the device contract asks for).
        let connected = core.dev.connect();
        let agreed = agree(&core.comm, call, "connect its part", connected.is_ok());
        if let Err(e) = connected.and(agreed) {
            core.abandon();
            return Err(e);
        }
        Ok(core)
    }

    /// `Err` for any call while a local guard lives (the part is the owner's plain memory then).
    #[inline]
    pub(crate) fn usable(&self, call: &str) -> Result<()> {
        if self.local.get() {
            return Err(Error::RmaSync(format!(
                "{call} while this rank's Window::local() guard is alive (drop it first; a leaked guard \
                 leaves the window unusable)"
            )));
        }
        self.comm.check_live()
    }

    /// Ends a leaked local guard's access (its slice borrowed the guard, so no reference to the
    /// part survives a `mem::forget` of it).
    fn end_leaked_local(&self) {
        if self.local.replace(false) {
            self.dev.end_local_access();
        }
    }

    /// The collective free (MPI_Win_free). With an epoch open it still frees, so peers do not
    /// hang, after closing what it can (complete, unlock), and reports the epoch error.
    pub(crate) fn free(&self, call: &str) -> Result<()> {
        debug_assert!(!self.done.get());
        self.comm.check_live()?;
        self.end_leaked_local();
        let epoch = self.epochs.idle(call);
        if epoch.is_err() {
            self.close_epochs();
        }
        let flushed = self.dev.flush(None);
        let synced = self.comm.barrier();
        let closed = self.close(synced.is_ok());
        epoch.and(flushed).and(synced).and(closed)
    }

    /// Local end of a window (no peer involved): releases locks this rank holds, then closes the
    /// part; peers' later operations on it fail.
    pub(crate) fn abandon(&self) {
        if self.done.get() {
            return;
        }
        self.end_leaked_local();
        self.release_locks();
        let _ = self.close(false);
    }

    /// What `free` does about epochs left open: completes a `start` (so its targets' `wait`
    /// ends) and releases locks.
    fn close_epochs(&self) {
        if self.epochs.access_group().is_ok() {
            let _ = self.complete();
        }
        self.release_locks();
    }

    fn release_locks(&self) {
        let held: Vec<(usize, Held)> = self.epochs.locked_targets().collect();
        for (target, how) in held {
            if how == Held::Device {
                let _ = self.dev.unlock(target);
            }
            self.epochs.unlocked(target);
        }
        if let Ok(how) = self.epochs.lock_all_held() {
            if how == Held::Device {
                for target in 0..self.comm.size() {
                    let _ = self.dev.unlock(target);
                }
            }
            self.epochs.unlocked_all();
        }
    }

    /// Withdraws the part at the device (`collective`: every member does so now, after the
    /// free's barrier) and, once nothing can reach it, releases the memory. If the device could
    /// not confirm that, owned memory is leaked (borrowed memory is the caller's: the device
    /// contract makes `close` revoke the part even when it reports an error).
    fn close(&self, collective: bool) -> Result<()> {
        self.done.set(true);
        let closed = if collective { self.dev.free() } else { self.dev.close() };
        // Not releasing is leaking (`Part` has no `Drop`).
        if let Some(part) = self.part.take()
            && closed.is_ok()
        {
            part.release();
        }
        closed
    }
}

impl Drop for Core {
    /// Dropping without `free` ends the window on this rank alone (the local abandon): no wait
    /// for peers, so a rank that leaves on an error path (`?` past a live window) never blocks on
    /// ranks that are themselves waiting for it. Peers' later operations on the part fail.
    fn drop(&mut self) {
        self.abandon();
    }
}

/// Every rank learns whether every rank's step succeeded (one allreduce, which also synchronises):
/// `Err` naming a rank that failed if any did (a rank that failed itself reports its own error).
fn agree(comm: &Comm, call: &str, step: &str, ok: bool) -> Result<()> {
    let flag = [if ok { 0 } else { comm.rank() as u64 + 1 }];
    let mut any = [0u64];
    comm.allreduce(&flag, &mut any, Max)?;
    match any[0] {
        0 => Ok(()),
        // Max names the highest failed rank; any one will do for the message.
        r => Err(Error::InvalidArgument(format!("{call}: rank {} could not {step} (see its error)", r - 1))),
    }
}
