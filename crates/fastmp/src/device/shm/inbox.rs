//! Rings created on first use: memory and start-up grow with the pairs that talk, not with np².
//!
//! A sender makes the ring to a receiver when it first sends there, keeps it in its own
//! [`OutgoingRings`] map, and publishes it in the receiver's [`Inbox`]. The receiver's [`IncomingRings`]
//! copies newly published rings with one atomic load per progress round, so neither side ever
//! scans all np peers, and steady-state sends and polls take no lock and allocate nothing (the
//! first contact of a pair locks the inbox and allocates the ring).

use std::cell::{Ref, RefCell};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::ShmWorld;
use super::ring::Ring;
use crate::device::lock_ignoring_poison;

/// Hashes a rank with one multiplication (Fibonacci hashing): lookups on the send and receive
/// paths cost a few nanoseconds, where SipHash would cost tens.
#[derive(Default, Clone, Copy)]
pub(crate) struct RankHasher(u64);

impl Hasher for RankHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_usize(&mut self, rank: usize) {
        self.0 = (rank as u64 ^ self.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A map keyed by rank.
pub(crate) type RankMap<V> = HashMap<usize, V, BuildHasherDefault<RankHasher>>;

/// The rings addressed to one rank, in the order their senders first used them.
#[derive(Default)]
pub(crate) struct Inbox {
    /// Senders append under the lock, once per pair; the receiver copies new entries out.
    rings: Mutex<Vec<(usize, Arc<Ring>)>>,
    /// `rings.len()`, stored (Release) under the lock after each append: the receiver's cheap
    /// "anything new?" check.
    published: AtomicUsize,
}

impl Inbox {
    /// Publishes `ring`, the new ring from `source`.
    fn publish(&self, source: usize, ring: Arc<Ring>) {
        let mut rings = lock_ignoring_poison(&self.rings);
        rings.push((source, ring));
        self.published.store(rings.len(), Ordering::Release);
    }
}

/// A sender's rings, by destination.
#[derive(Default)]
pub(crate) struct OutgoingRings(RefCell<RankMap<Arc<Ring>>>);

impl OutgoingRings {
    /// The ring from `me` to `dest`, created and published in `dest`'s inbox on first use.
    pub fn ring_to(&self, world: &ShmWorld, me: usize, dest: usize) -> Ref<'_, Ring> {
        let known = Ref::filter_map(self.0.borrow(), |rings| rings.get(&dest).map(|r| &**r));
        match known {
            Ok(ring) => ring,
            Err(rings) => {
                drop(rings);
                let ring = Arc::new(Ring::with_slots(world.ring_slots));
                world.ranks[dest].inbox.publish(me, Arc::clone(&ring));
                world.rings_created.fetch_add(1, Ordering::Relaxed);
                self.0.borrow_mut().insert(dest, ring);
                Ref::map(self.0.borrow(), |rings| &*rings[&dest])
            }
        }
    }
}

/// A receiver's copy of its inbox: the rings it drains, and where each sender's is.
#[derive(Default)]
pub(crate) struct IncomingRings {
    rings: Vec<(usize, Arc<Ring>)>,
    by_source: RankMap<usize>,
}

impl IncomingRings {
    /// Copies the rings published in `inbox` since the last call; `true` if there were any.
    pub fn refresh(&mut self, inbox: &Inbox) -> bool {
        if inbox.published.load(Ordering::Acquire) == self.rings.len() {
            return false;
        }
        let published = lock_ignoring_poison(&inbox.rings);
        for (source, ring) in &published[self.rings.len()..] {
            self.by_source.insert(*source, self.rings.len());
            self.rings.push((*source, Arc::clone(ring)));
        }
        true
    }

    /// The ring from `source`, if it has sent here (as of the last refresh).
    #[inline]
    pub fn from(&self, source: usize) -> Option<&Ring> {
        self.by_source.get(&source).map(|&i| &*self.rings[i].1)
    }

    /// Every known incoming ring with its source, in first-use order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Ring)> {
        self.rings.iter().map(|(source, ring)| (*source, &**ring))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Many senders make their first send to one receiver at once while it refreshes: every
    /// ring is published exactly once, found under its sender, and carries that sender's
    /// message.
    #[test]
    fn racing_first_sends_are_each_published_once() {
        const SENDERS: usize = 32;
        let world = ShmWorld::new(SENDERS + 1, 64);
        let inbox = &world.ranks[SENDERS].inbox;
        let mut incoming = IncomingRings::default();
        std::thread::scope(|s| {
            for me in 0..SENDERS {
                let world = &world;
                s.spawn(move || {
                    let outgoing = OutgoingRings::default();
                    let header = |tag| super::super::ring::Header {
                        len: 0,
                        tag,
                        context: 0,
                        kind: super::super::ring::Kind::Eager,
                        sync: false,
                        record: None,
                    };
                    for k in 0..3 {
                        let ring = outgoing.ring_to(world, me, SENDERS);
                        // SAFETY: this thread is the only producer of the ring it created.
                        assert!(unsafe { ring.push(header((me * 10 + k) as i32), &[], 0) });
                    }
                });
            }
            // The receiver refreshes while the senders publish.
            while incoming.rings.len() < SENDERS {
                incoming.refresh(inbox);
                std::thread::yield_now();
            }
        });
        assert!(!incoming.refresh(inbox), "nothing published twice");
        assert_eq!(world.rings_created(), SENDERS);
        for me in 0..SENDERS {
            let ring = incoming.from(me).expect("every sender's ring is found");
            for k in 0..3 {
                // SAFETY: this thread is the only consumer.
                let view = unsafe { ring.peek() }.expect("message in order");
                assert_eq!(view.header.tag, (me * 10 + k) as i32, "sender {me}'s ring carries its messages");
                // SAFETY: as above.
                unsafe { ring.pop() };
            }
        }
        assert!(incoming.from(SENDERS).is_none());
    }
}
