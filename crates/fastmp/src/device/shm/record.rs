//! Sender-side state of a send that the receiver completes: rendezvous (the receiver copies out of
//! the sender's buffer) and synchronous eager sends (the receiver acknowledges the match).
//!
//! The record is shared through an `Arc`: the message in flight holds one reference, so the
//! record outlives whichever side finishes first, including a sender rank that has exited.
//!
//! Large rendezvous copies are shared: the receiver, holding CLAIMED, publishes its destination
//! and cuts the copy into pieces that it and the sender (waiting on the send, see
//! [`SendRecord::help`]) claim through one counter, so both cores copy. The receiver completes
//! the record only once every piece is done, so the sender's helping never outlives either
//! buffer, and a sender that does not help (parked, busy elsewhere, or gone) costs nothing.

// `std`'s `Arc`, also under loom: the endpoint keeps records as `std::sync::Arc<SendRecord>`, and
// the reference count is no part of the protocol checked here (the loom tests share a record
// through loom's `Arc` instead).
use std::sync::Arc;

use super::copy;
use crate::sync::{AtomicPtr, AtomicU32, AtomicUsize, Ordering, UnsafeCell, yield_now};

/// Bytes per piece of a shared copy: small enough that two cores stay balanced, large enough
/// that claiming one (an atomic add on a shared line) is noise.
pub(crate) const PIECE: usize = 64 << 10;
/// Rendezvous copies of at least this many bytes are shared with the sender.
pub(crate) const SHARED_MIN: usize = 4 * PIECE;

/// The receiver may claim the data.
pub(crate) const PENDING: u32 = 0;
/// Someone (receiver copying, or sender detaching) holds the data exclusively.
pub(crate) const CLAIMED: u32 = 1;
/// Matched and (for rendezvous) copied; the sender's request is complete.
pub(crate) const DONE: u32 = 2;
/// Cancelled by the sender before it matched; the receiver drops the message.
pub(crate) const CANCELLED: u32 = 3;

/// Whole cache lines of its own (the `Arc`'s counts take the line before), so that nothing else on
/// the sender's heap shares a line with it: where the allocation's neighbours did, a 256 KiB
/// ping-pong varied by 8 % with the heap's layout. The piece counters, hit by both copiers, sit
/// apart from the state word the waiting sender polls.
#[repr(align(64))]
pub(crate) struct SendRecord {
    state: AtomicU32,
    /// Where the receiver copies from: the user's buffer, or `detached` after a detach.
    data: AtomicPtr<u8>,
    /// Owned copy of the data once the sender's buffer had to be given back (see `detach`).
    detached: UnsafeCell<Option<Box<[u8]>>>,
    /// Shared copy: the next piece to claim, and pieces finished.
    counters: Counters,
    /// Where a shared copy goes.
    dst: AtomicPtr<u8>,
    /// Bytes of the shared copy, which has `copy_len.div_ceil(PIECE)` pieces: 0 until the
    /// receiver shares one (Release-published after `dst`).
    copy_len: AtomicUsize,
}

#[repr(align(64))]
struct Counters {
    // Claimed (fetch_add) by both copiers while the sender's polls read `state`.
    next_piece: AtomicUsize,
    pieces_done: AtomicUsize,
}

// SAFETY: `detached` is written only by the sender while it holds the CLAIMED state (or has
// exclusive `&mut` access through `Arc::get_mut`), and read by the receiver only through `data`
// while holding CLAIMED; `state` transitions order those accesses (AcqRel CAS / Release stores).
// A shared copy's pieces are claimed once each through `next_piece`, and the receiver keeps
// CLAIMED (both buffers alive) until `pieces_done` counts all of them (Release/Acquire).
unsafe impl Sync for SendRecord {}
// SAFETY: plain owned data.
unsafe impl Send for SendRecord {}

impl SendRecord {
    pub fn new() -> Arc<Self> {
        Arc::new(SendRecord {
            state: AtomicU32::new(PENDING),
            data: AtomicPtr::new(std::ptr::null_mut()),
            detached: UnsafeCell::new(None),
            counters: Counters { next_piece: AtomicUsize::new(0), pieces_done: AtomicUsize::new(0) },
            dst: AtomicPtr::new(std::ptr::null_mut()),
            copy_len: AtomicUsize::new(0),
        })
    }

    /// Re-arms a record nobody else references for a new send of `data`.
    pub fn reset(this: &mut Arc<Self>, data: *const u8) -> bool {
        let Some(rec) = Arc::get_mut(this) else { return false };
        // Plain stores (loom's atomics have no `get_mut`): `Arc::get_mut` proved exclusive access,
        // and synchronized with the other owners' drops.
        rec.state.store(PENDING, Ordering::Relaxed);
        rec.data.store(data as *mut u8, Ordering::Relaxed);
        for counter in [&rec.copy_len, &rec.counters.next_piece, &rec.counters.pieces_done] {
            counter.store(0, Ordering::Relaxed);
        }
        // SAFETY: exclusive access, as above.
        rec.detached.with_mut(|detached| unsafe { *detached = None });
        true
    }

    pub fn state(&self) -> u32 {
        self.state.load(Ordering::Acquire)
    }

    /// Receiver: takes exclusive use of the data pointer; `None` if the sender cancelled.
    ///
    /// CLAIMED here can only mean the sender is detaching (copying its data into the record),
    /// which is short and ends in PENDING again, so we wait it out.
    pub fn claim(&self) -> Option<*const u8> {
        loop {
            match self.state.compare_exchange(PENDING, CLAIMED, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => return Some(self.data.load(Ordering::Relaxed)),
                Err(CLAIMED) => yield_now(),
                Err(_) => return None,
            }
        }
    }

    /// Receiver, holding CLAIMED from [`claim`](Self::claim): copies `len` bytes from `src` (the
    /// claimed pointer) to `dst`. From [`SHARED_MIN`] bytes on the copy is offered to the sender
    /// in pieces; `announce` runs once it is offered (to wake a parked sender). Returns when
    /// every byte is in place; the caller then calls [`complete`](Self::complete).
    ///
    /// # Safety
    /// `src` is the pointer `claim` returned (readable for `len` bytes), `dst` is writable for
    /// `len` bytes, not overlapping `src`, and untouched by anyone else until this returns.
    pub unsafe fn copy_claimed(&self, src: *const u8, dst: *mut u8, len: usize, announce: impl FnOnce()) {
        if len < SHARED_MIN {
            // SAFETY: forwarded caller contract.
            unsafe { copy::copy(dst, src, len, len) };
            return;
        }
        let pieces = len.div_ceil(PIECE);
        self.dst.store(dst, Ordering::Relaxed);
        self.copy_len.store(len, Ordering::Release);
        announce();
        self.copy_pieces(len);
        while self.counters.pieces_done.load(Ordering::Acquire) < pieces {
            // The sender is in the middle of a piece (it claims one only right before copying).
            yield_now();
        }
    }

    /// Sender, while its send is live (its buffer valid): copies pieces of a shared copy until
    /// none is left to claim. Does nothing if the receiver has not shared one.
    pub fn help(&self) {
        let len = self.copy_len.load(Ordering::Acquire);
        if len > 0 && self.counters.next_piece.load(Ordering::Relaxed) < len.div_ceil(PIECE) {
            self.copy_pieces(len);
        }
    }

    /// Claims and copies pieces of the shared copy until none is left.
    fn copy_pieces(&self, len: usize) {
        let (src, dst) = (self.data.load(Ordering::Relaxed), self.dst.load(Ordering::Relaxed));
        let pieces = len.div_ceil(PIECE);
        loop {
            let piece = self.counters.next_piece.fetch_add(1, Ordering::Relaxed);
            if piece >= pieces {
                return;
            }
            let start = piece * PIECE;
            // SAFETY: `copy_len` was published (Acquire, or our own store) after `dst`,
            // and `data` is the claimed source; the piece lies inside both `len`-byte ranges.
            // Each piece is claimed once, and the receiver keeps both buffers alive (it does
            // not complete) until every piece is counted done below.
            unsafe { copy::copy(dst.add(start), src.add(start), PIECE.min(len - start), len) };
            self.counters.pieces_done.fetch_add(1, Ordering::Release);
        }
    }

    /// Marks the transfer finished (from CLAIMED, or from PENDING for a synchronous ack).
    pub fn complete(&self) {
        self.state.store(DONE, Ordering::Release);
    }

    /// Synchronous eager ack: PENDING → DONE. `false` if the sender cancelled first.
    pub fn acknowledge(&self) -> bool {
        self.state.compare_exchange(PENDING, DONE, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Sender: withdraw an unmatched send. `true` if the cancel won.
    pub fn cancel(&self) -> bool {
        self.state.compare_exchange(PENDING, CANCELLED, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// Sender: copies the `len` pending bytes into the record so the user's buffer can be given
    /// back. Returns `false` if the transfer is past PENDING (claimed, done, or cancelled), in which
    /// case the caller waits for `DONE` instead.
    ///
    /// # Safety
    /// Sender thread only; the record's data pointer must still be valid for `len` bytes.
    pub unsafe fn detach(&self, len: usize) -> bool {
        if self.state.compare_exchange(PENDING, CLAIMED, Ordering::Acquire, Ordering::Acquire).is_err() {
            return false;
        }
        let src = self.data.load(Ordering::Relaxed);
        // SAFETY: caller guarantees `src` is valid for `len` bytes; CLAIMED gives us exclusive use
        // of `detached` (the receiver only reads through `data` while it holds CLAIMED).
        let copy: Box<[u8]> = unsafe { std::slice::from_raw_parts(src, len) }.into();
        // SAFETY: as above.
        let ptr = self.detached.with_mut(|slot| unsafe { (*slot).insert(copy).as_ptr() });
        self.data.store(ptr as *mut u8, Ordering::Relaxed);
        self.state.store(PENDING, Ordering::Release);
        true
    }

    /// Turns a clone into the reference carried by a ring message.
    pub fn into_message(this: Arc<Self>) -> RecordRef {
        RecordRef(Arc::into_raw(this))
    }

    /// Takes back the reference carried by a ring message.
    ///
    /// # Safety
    /// `raw` must come from `into_message` and be taken back exactly once.
    pub unsafe fn from_message(raw: RecordRef) -> Arc<Self> {
        // SAFETY: per the contract, `raw` is an `Arc::into_raw` pointer not yet taken back.
        unsafe { Arc::from_raw(raw.0) }
    }
}

/// An `Arc<SendRecord>` reference in transit through a ring slot: a raw pointer (not an integer),
/// so its provenance survives the trip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordRef(*const SendRecord);

// SAFETY: it stands for an owned `Arc<SendRecord>` reference, and `SendRecord` is Send + Sync.
unsafe impl Send for RecordRef {}

#[cfg(all(test, not(loom)))]
mod tests {
    //! The send record's state machine on the real code (also run under Miri, see
    //! `scripts/miri.sh`): single-thread transitions, and two-thread races of claim / complete /
    //! cancel / detach / acknowledge as the sender and receiver ranks run them.

    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;

    use super::super::test_support::{Gone, wait_for};
    use super::*;

    /// Yields until `ready()`; panics if the peer thread ended first.
    fn wait_until(peer_gone: &AtomicBool, mut ready: impl FnMut() -> bool) {
        wait_for(peer_gone, || ready().then_some(()))
    }

    fn pattern(round: usize, len: usize) -> Vec<u8> {
        (0..len).map(|j| (round * 13 + j * 7) as u8).collect()
    }

    #[test]
    fn transitions() {
        let data = [1u8, 2, 3, 4];
        let mut rec = SendRecord::new();
        assert!(SendRecord::reset(&mut rec, data.as_ptr()));
        assert_eq!(rec.state(), PENDING);
        // Receiver claims and copies, then completes.
        let src = rec.claim().expect("pending record can be claimed");
        assert_eq!(src, data.as_ptr());
        assert_eq!(rec.state(), CLAIMED);
        // SAFETY: `data` is alive and 4 bytes long.
        assert!(!unsafe { rec.detach(4) }, "the sender cannot detach a claimed record");
        rec.complete();
        assert_eq!(rec.state(), DONE);
        assert!(!rec.cancel());
        assert!(!rec.acknowledge());
        assert!(rec.claim().is_none());
        // SAFETY: as above.
        assert!(!unsafe { rec.detach(4) });

        // Cancel wins over later claims and acknowledgements.
        assert!(SendRecord::reset(&mut rec, data.as_ptr()));
        assert!(rec.cancel());
        assert_eq!(rec.state(), CANCELLED);
        assert!(!rec.cancel());
        assert!(rec.claim().is_none());
        assert!(!rec.acknowledge());

        // Synchronous eager acknowledgement.
        assert!(SendRecord::reset(&mut rec, std::ptr::null()));
        assert!(rec.acknowledge());
        assert_eq!(rec.state(), DONE);
        assert!(!rec.cancel());

        // Detach: the data moves into the record; the receiver then reads the copy.
        let mut user = pattern(1, 40);
        assert!(SendRecord::reset(&mut rec, user.as_ptr()));
        // SAFETY: `user` is alive for 40 bytes.
        assert!(unsafe { rec.detach(40) });
        assert_eq!(rec.state(), PENDING);
        user.fill(0xEE); // the user's buffer is free again
        let src = rec.claim().expect("claim after detach");
        assert_ne!(src, user.as_ptr());
        // SAFETY: a claimed record points at `len` readable bytes.
        assert_eq!(unsafe { std::slice::from_raw_parts(src, 40) }, &pattern(1, 40)[..]);
        rec.complete();
        // Reset drops the detached copy and re-arms the record.
        assert!(SendRecord::reset(&mut rec, data.as_ptr()));
        assert_eq!(rec.state(), PENDING);
    }

    #[test]
    fn reset_needs_the_only_reference_and_messages_carry_one() {
        let mut rec = SendRecord::new();
        let raw = SendRecord::into_message(Arc::clone(&rec));
        assert_eq!(Arc::strong_count(&rec), 2);
        assert!(!SendRecord::reset(&mut rec, std::ptr::null()), "the message still holds a reference");
        // SAFETY: `raw` came from `into_message` and is taken back once.
        let back = unsafe { SendRecord::from_message(raw) };
        assert!(Arc::ptr_eq(&back, &rec));
        drop(back);
        assert!(SendRecord::reset(&mut rec, std::ptr::null()));
    }

    /// Rendezvous with a sender that gives its buffer back (release) while the receiver claims:
    /// either the detach wins (the receiver copies from the record's own copy) or the claim wins
    /// (the sender waits until the receiver is done). Either way the receiver sees the original
    /// data and the sender's overwrite never races with the receiver's copy. The record is
    /// recycled across rounds as the endpoint's pool does.
    #[test]
    fn two_threads_claim_races_detach() {
        let rounds: usize = if cfg!(miri) { 12 } else { 5_000 };
        const LEN: usize = 48;
        let (to_receiver, messages) = mpsc::channel::<(usize, super::RecordRef)>();
        let receiver_gone = AtomicBool::new(false);
        std::thread::scope(|s| {
            let receiver_gone = &receiver_gone;
            s.spawn(move || {
                let _gone = Gone(receiver_gone);
                for (round, raw) in messages {
                    // SAFETY: the message's reference, taken back once.
                    let rec = unsafe { SendRecord::from_message(raw) };
                    let src = rec.claim().expect("never cancelled in this test");
                    // SAFETY: a claimed record points at LEN readable bytes until `complete`.
                    let got = unsafe { std::slice::from_raw_parts(src, LEN) }.to_vec();
                    rec.complete();
                    drop(rec);
                    assert_eq!(got, pattern(round, LEN), "round {round}: receiver read wrong data");
                }
            });
            let mut rec = SendRecord::new();
            for round in 0..rounds {
                let mut user = pattern(round, LEN);
                // Recycle the record once the receiver has dropped its reference.
                wait_until(receiver_gone, || SendRecord::reset(&mut rec, user.as_ptr()));
                to_receiver.send((round, SendRecord::into_message(Arc::clone(&rec)))).unwrap();
                for _ in 0..(round % 5) {
                    std::thread::yield_now();
                }
                // The endpoint's release path for a pending rendezvous send.
                // SAFETY: `user` is alive for LEN bytes.
                if !unsafe { rec.detach(LEN) } {
                    wait_until(receiver_gone, || rec.state() != CLAIMED);
                }
                // The buffer is the user's again.
                user.fill(0xEE);
                drop(user);
                // Every transfer completes.
                wait_until(receiver_gone, || rec.state() == DONE);
            }
            drop(to_receiver);
        });
    }

    /// Shared copies: first with the sender taking every piece (the receiver's `announce` waits
    /// until the sender's `help` returned, so the receiver finds none left), then racing, with
    /// the sender helping while it waits for DONE as the endpoint does; odd lengths, and a
    /// length below the sharing threshold (never offered).
    #[test]
    fn shared_copy_by_the_sender_and_by_both() {
        let lens: &[usize] = if cfg!(miri) {
            &[SHARED_MIN + 3]
        } else {
            &[SHARED_MIN - 1, SHARED_MIN, SHARED_MIN + PIECE / 2 + 3, 2 << 20]
        };
        let rounds = if cfg!(miri) { 2 } else { 30 };
        for &len in lens {
            for round in 0..rounds {
                let data = pattern(round, len);
                let mut dst = vec![0u8; len];
                let mut rec = SendRecord::new();
                assert!(SendRecord::reset(&mut rec, data.as_ptr()));
                let sender_first = round == 0;
                let (offered, helped) = (mpsc::channel::<()>(), mpsc::channel::<()>());
                let receiver_gone = AtomicBool::new(false);
                std::thread::scope(|s| {
                    let rec = &rec;
                    let receiver_gone = &receiver_gone;
                    let (wait_offer, tell_helped) = (offered.1, helped.0);
                    s.spawn(move || {
                        if sender_first {
                            if len >= SHARED_MIN {
                                wait_offer.recv().unwrap();
                            }
                            rec.help();
                            tell_helped.send(()).unwrap();
                        }
                        wait_until(receiver_gone, || {
                            rec.help();
                            rec.state() == DONE
                        });
                    });
                    let _gone = Gone(receiver_gone);
                    let src = rec.claim().expect("pending");
                    let (tell_offer, wait_helped) = (offered.0, helped.1);
                    // SAFETY: claimed: `src` is `data` (len bytes); `dst` is ours and len long.
                    unsafe {
                        rec.copy_claimed(src, dst.as_mut_ptr(), len, || {
                            if sender_first {
                                tell_offer.send(()).unwrap();
                                wait_helped.recv().unwrap();
                            }
                        })
                    };
                    if sender_first && len < SHARED_MIN {
                        wait_helped.recv().unwrap();
                    }
                    rec.complete();
                });
                assert!(dst == data, "len {len} round {round}: copied bytes differ");
                let pieces = if len >= SHARED_MIN { len.div_ceil(PIECE) } else { 0 };
                assert_eq!(rec.counters.pieces_done.load(Ordering::Relaxed), pieces, "len {len}: pieces done");
            }
        }
    }

    /// Sender cancel against receiver claim (rendezvous) or acknowledgement (synchronous eager):
    /// exactly one side wins, and the final state says which.
    #[test]
    fn two_threads_cancel_races_claim_and_acknowledge() {
        let rounds: usize = if cfg!(miri) { 16 } else { 10_000 };
        let data = pattern(0, 8);
        let (to_receiver, messages) = mpsc::channel::<(usize, super::RecordRef)>();
        let (to_sender, verdicts) = mpsc::channel::<bool>();
        std::thread::scope(|s| {
            s.spawn(move || {
                for (round, raw) in messages {
                    // SAFETY: the message's reference, taken back once.
                    let rec = unsafe { SendRecord::from_message(raw) };
                    let won = if round % 2 == 0 {
                        match rec.claim() {
                            Some(src) => {
                                // SAFETY: claimed: 8 readable bytes.
                                assert_eq!(unsafe { std::slice::from_raw_parts(src, 8) }, &pattern(0, 8)[..]);
                                rec.complete();
                                true
                            }
                            None => false,
                        }
                    } else {
                        rec.acknowledge()
                    };
                    to_sender.send(won).unwrap();
                }
            });
            for round in 0..rounds {
                let mut rec = SendRecord::new();
                assert!(SendRecord::reset(&mut rec, if round % 2 == 0 { data.as_ptr() } else { std::ptr::null() }));
                to_receiver.send((round, SendRecord::into_message(Arc::clone(&rec)))).unwrap();
                for _ in 0..(round % 3) {
                    std::thread::yield_now();
                }
                let cancelled = rec.cancel();
                let receiver_won = verdicts.recv().unwrap();
                assert_ne!(cancelled, receiver_won, "round {round}: exactly one side must win");
                assert_eq!(rec.state(), if cancelled { CANCELLED } else { DONE });
            }
            drop(to_receiver);
        });
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    //! Loom models of the real send record: the receiver's `claim` / `acknowledge` against the
    //! sender's `detach` / `cancel`, under every interleaving. The user's buffer and the detached
    //! copy are read through loom cells, so loom also checks that the sender never overwrites
    //! data the receiver may still be reading. Run with `scripts/loom.sh`.

    use loom::sync::Arc as LoomArc;

    use super::*;

    const LEN: usize = 4;
    const DATA: [u8; LEN] = [1, 2, 3, 4];

    /// A record armed for a send of `data`, shared through loom's `Arc` (the record's own API
    /// hands out `std`'s, whose reference count loom cannot see).
    fn armed(data: *const u8) -> LoomArc<SendRecord> {
        let mut rec = SendRecord::new();
        assert!(SendRecord::reset(&mut rec, data));
        LoomArc::new(Arc::try_unwrap(rec).ok().expect("only reference"))
    }

    /// Receiver of a rendezvous send: claims, copies `LEN` bytes, completes. The copy goes through
    /// the loom cell the pointer belongs to (the user's buffer or the record's detached copy).
    /// (`user_ptr`: the buffer's address, taken before the race: reading it through the cell would
    /// itself be an access to the buffer.)
    fn receive(rec: &SendRecord, user: &UnsafeCell<[u8; LEN]>, user_ptr: usize) -> Option<[u8; LEN]> {
        let src = rec.claim()?;
        let got = if src as usize == user_ptr {
            // SAFETY: claimed: the sender does not touch its buffer until we complete.
            user.with(|p| unsafe { *p })
        } else {
            rec.detached.with(|d| {
                // SAFETY: claimed after a detach: the sender is done writing `detached`.
                let copy = unsafe { (*d).as_deref() }.expect("data points at the detached copy");
                assert_eq!(copy.as_ptr(), src);
                copy[..LEN].try_into().unwrap()
            })
        };
        rec.complete();
        Some(got)
    }

    /// Sender releases its buffer (detach, or wait out a receiver's copy), overwrites it, then
    /// tries to cancel; the receiver claims concurrently. Exactly one of claim and cancel wins, a
    /// claiming receiver reads the original data, and the overwrite never races with its copy.
    #[test]
    fn claim_races_detach_and_cancel() {
        loom::model(|| {
            let user = LoomArc::new(UnsafeCell::new(DATA));
            let user_ptr = user.with(|p| p.cast::<u8>());
            let rec = armed(user_ptr);
            let receiver = {
                let (rec, user) = (LoomArc::clone(&rec), LoomArc::clone(&user));
                loom::thread::spawn(move || receive(&rec, &user, user_ptr as usize))
            };
            // SAFETY: sender thread; `user` holds LEN bytes and is only overwritten below.
            if !unsafe { rec.detach(LEN) } {
                // Claimed: the endpoint waits until the receiver has copied.
                while rec.state() == CLAIMED {
                    loom::thread::yield_now();
                }
            }
            // The buffer is the user's again.
            // SAFETY: detached, or the receiver completed (Acquire in `state`).
            user.with_mut(|p| unsafe { *p = [0xEE; LEN] });
            let cancelled = rec.cancel();
            let received = receiver.join().unwrap();
            assert_eq!(cancelled, received.is_none(), "exactly one of cancel and claim wins");
            if let Some(got) = received {
                assert_eq!(got, DATA, "the receiver read the data of the send");
            }
            assert_eq!(rec.state(), if cancelled { CANCELLED } else { DONE });
        });
    }

    /// Receiver claim against sender cancel of a record the sender keeps pointing at its buffer.
    #[test]
    fn claim_races_cancel() {
        loom::model(|| {
            let user = LoomArc::new(UnsafeCell::new(DATA));
            let user_ptr = user.with(|p| p.cast::<u8>());
            let rec = armed(user_ptr);
            let receiver = {
                let (rec, user) = (LoomArc::clone(&rec), LoomArc::clone(&user));
                loom::thread::spawn(move || receive(&rec, &user, user_ptr as usize))
            };
            let cancelled = rec.cancel();
            if !cancelled {
                // Matched: the send completes when the receiver is done.
                while rec.state() != DONE {
                    loom::thread::yield_now();
                }
            }
            // SAFETY: cancelled (never claimed), or the receiver completed (Acquire in `state`).
            user.with_mut(|p| unsafe { *p = [0xEE; LEN] });
            let received = receiver.join().unwrap();
            assert_eq!(cancelled, received.is_none(), "exactly one of cancel and claim wins");
            assert_eq!(received.unwrap_or(DATA), DATA);
            assert_eq!(rec.state(), if cancelled { CANCELLED } else { DONE });
        });
    }

    /// Synchronous eager send: receiver acknowledge against sender cancel; exactly one wins, and
    /// the final state says which, to both sides.
    #[test]
    fn acknowledge_races_cancel() {
        loom::model(|| {
            let rec = armed(std::ptr::null());
            let receiver = {
                let rec = LoomArc::clone(&rec);
                loom::thread::spawn(move || {
                    let acked = rec.acknowledge();
                    assert_eq!(rec.state(), if acked { DONE } else { CANCELLED });
                    acked
                })
            };
            let cancelled = rec.cancel();
            assert_eq!(rec.state(), if cancelled { CANCELLED } else { DONE });
            let acked = receiver.join().unwrap();
            assert_ne!(cancelled, acked, "exactly one of cancel and acknowledge wins");
        });
    }
}
