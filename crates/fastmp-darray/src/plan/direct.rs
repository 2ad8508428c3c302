//! Direct copies between thread ranks: a receiver in the same process as its source copies the
//! strided runs straight from the source's stored block into its own (one copy, no packing, no
//! message carrying data).
//!
//! Protocol, per execution and per pair (source `A`, receiver `B`, same process):
//! 1. `A` *announces*: it sends `B` the address and length of its block, a counted reference to
//!    its [`Lease`] and the lease's generation (tag `ANNOUNCE`).
//! 2. `B` *pulls*: it takes a read lease on `A`'s block (refused if `A` has closed this
//!    generation), copies its runs, drops the lease, and sends `A` an empty "done" (tag `DONE`).
//! 3. `A` *awaits* every "done", then closes the generation and waits until no lease is held,
//!    so its block is never read after `execute` returns — also when a peer failed or the job
//!    aborted: the "done" receive then fails, and closing still waits out any reader mid-copy
//!    (a copy takes bounded time) and turns later readers away.
//!
//! Addresses travel as integers with exposed provenance (`expose_provenance` /
//! `with_exposed_provenance`), the sanctioned way to pass a pointer through a message.
//!
//! Announcements are sent before anything waits and "done"s only depend on announcements, so the
//! steps cannot deadlock, whatever mix of direct and message transfers a plan has.

#![allow(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytemuck::Pod;
use fastmp::{Error, Result, waitall};

use super::exec::{Source, copy_blocks};
use super::{Buffers, Plan};

/// Tags of the announcement and the "done" (distinct from data messages' tag, so a pair's
/// messages of the two kinds never meet the wrong receive).
const ANNOUNCE: i32 = super::super::ops::TAG + 1;
const DONE: i32 = super::super::ops::TAG + 2;

/// Lease state bits: generation (high 32), closed flag, number of readers copying (low 31).
const CLOSED: u64 = 1 << 31;
const READERS: u64 = CLOSED - 1;

/// A source's read lease on its block, shared with the readers it announced itself to.
#[derive(Debug, Default)]
pub(crate) struct Lease(Arc<AtomicU64>);

impl Plan {
    /// Executes the plan: direct transfers to and from thread ranks of this process around the
    /// message transfers.
    pub(crate) fn execute<T: Pod>(
        &self,
        src: Source<'_, T>,
        dst: &mut [T],
        tag: i32,
        bufs: &mut Buffers,
    ) -> Result<()> {
        if self.direct_sends.is_empty() && self.direct_recvs.is_empty() {
            return self.execute_messages(src, dst, tag, bufs);
        }
        // Messages first, while this rank may still use `dst` as a slice; from the announcement
        // on, other threads read the lent block, so this rank touches its own block only through
        // `base` (raw writes to the positions it receives, which nobody reads).
        let moved = self.execute_messages(src, dst, tag, bufs);
        let size = size_of::<T>();
        let len = size_of_val(dst);
        let base: *mut u8 = dst.as_mut_ptr().cast();
        let lent: (usize, usize) = match src {
            Source::Other(s) => (s.as_ptr().expose_provenance(), size_of_val(s)),
            Source::InPlace => (base.expose_provenance(), len),
        };
        let lease = bufs.lease.0.clone();
        // Announce, pull and await even after a failed message step, so no peer waits for us.
        let lent_out = self.announce(&lease, lent).and_then(|()| {
            let pulled = self.pull(base, len, size);
            pulled.and(self.await_done())
        });
        // Whatever failed, no reader may be left in the block when this returns.
        close(&lease);
        moved.and(lent_out)
    }

    /// Step 1: opens a new generation of the lease and sends each direct reader the block.
    fn announce(&self, lease: &Arc<AtomicU64>, (addr, len): (usize, usize)) -> Result<()> {
        // The previous execution closed its generation with no reader left.
        let generation = (lease.load(Ordering::Acquire) >> 32).wrapping_add(1) & 0xffff_ffff;
        lease.store(generation << 32, Ordering::Release);
        for peer in self.direct_sends.iter().map(|t| t.peer) {
            let reference = Arc::into_raw(lease.clone()).expose_provenance();
            let note = [addr as u64, len as u64, reference as u64, generation];
            // On failure the reference leaks (a few bytes): the reader may or may not own it.
            self.comm.send(&note, peer, ANNOUNCE)?;
        }
        Ok(())
    }

    /// Step 2: copies from each announced source block into this rank's block (`base`, `len`
    /// bytes), then says done.
    fn pull(&self, base: *mut u8, len: usize, size: usize) -> Result<()> {
        let own_len = len;
        for t in &self.direct_recvs {
            let mut note = [0u64; 4];
            self.comm.recv(&mut note, t.peer, ANNOUNCE)?;
            let [addr, len, reference, generation] = note.map(|x| x as usize);
            // SAFETY: the source made `reference` with `Arc::into_raw` for this receiver alone
            // (one announcement per reader per execution), so this takes over that count.
            let lease = unsafe { Arc::from_raw(std::ptr::with_exposed_provenance::<AtomicU64>(reference)) };
            let copied = read_lease(&lease, generation as u64, t.peer).and_then(|()| {
                let mut inside = true;
                for (theirs, mine) in t.peer_blocks.iter().zip(&t.blocks) {
                    copy_blocks(theirs, mine, size, |from, to, n| {
                        inside &= from.checked_add(n).is_some_and(|end| end <= len)
                            && to.checked_add(n).is_some_and(|end| end <= own_len);
                        if inside {
                            let start = std::ptr::with_exposed_provenance::<u8>(addr).wrapping_add(from);
                            // SAFETY: reading: `from..from + n` lies inside the source's block
                            // (checked against the length it announced), which stays allocated
                            // and unwritten there while this lease is held — the source stays in
                            // `execute` until every lease of this generation is released, and the
                            // runs it lends are elements no one writes during an execution
                            // (destinations are ghost cells or another array). Writing:
                            // `to..to + n` lies inside this rank's block (checked), which it
                            // holds exclusively except for those lent source runs, and a
                            // destination position is never a lent one.
                            unsafe { std::ptr::copy_nonoverlapping(start, base.add(to), n) };
                        }
                    });
                }
                lease.fetch_sub(1, Ordering::Release);
                inside.then_some(()).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "distributed array operation: rank {}'s block is smaller than this rank's schedule expects; \
                         the ranks are executing different operations or schedules",
                        t.peer
                    ))
                })
            });
            drop(lease);
            self.comm.send::<u8>(&[], t.peer, DONE)?;
            copied?;
        }
        Ok(())
    }

    /// Step 3: waits for every reader's "done".
    fn await_done(&self) -> Result<()> {
        self.comm.scope(|s| {
            let mut reqs = Vec::with_capacity(self.direct_sends.len());
            for peer in self.direct_sends.iter().map(|t| t.peer) {
                reqs.push(s.irecv::<u8>(&mut [], peer, DONE)?);
            }
            waitall(&mut reqs).map(drop)
        })
    }
}

/// Closes the lease's generation (later readers are turned away) and waits out any reader still
/// copying, which takes bounded time.
fn close(lease: &AtomicU64) {
    lease.fetch_or(CLOSED, Ordering::AcqRel);
    let mut spins = 0u32;
    while lease.load(Ordering::Acquire) & READERS != 0 {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Takes a read lease of generation `generation`, unless the source closed it.
fn read_lease(lease: &AtomicU64, generation: u64, peer: usize) -> Result<()> {
    let mut state = lease.load(Ordering::Acquire);
    loop {
        if state >> 32 != generation || state & CLOSED != 0 {
            return Err(Error::InvalidArgument(format!(
                "distributed array operation: rank {peer} stopped lending its block before this rank could read it"
            )));
        }
        match lease.compare_exchange_weak(state, state + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(()),
            Err(now) => state = now,
        }
    }
}
