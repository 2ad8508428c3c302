//! Small messages on the shm ring at every length around the slot's inline capacity (0 up to
//! past the spill boundary), mixed with rendezvous messages and synchronous sends, through
//! wildcard receives and probes, across ring wrap-around at every offset and a full ring.
//! Every message carries bytes derived from its index, so any misplaced, torn or reordered
//! payload fails the check.

use fastmp::{ANY_SOURCE, ANY_TAG, Comm, Config, DEFAULT_EAGER_LIMIT, DeviceKind, Result};

/// Past the largest inline length (40 B) and well into spilled eager payloads.
const SMALL_MAX: usize = 96;
/// Larger than the eager limit: a rendezvous message.
const LARGE: usize = DEFAULT_EAGER_LIMIT + 123;
/// Messages a sender puts in flight at once: more than the ring's 64 slots, so it fills.
const BURST: usize = 150;

#[path = "common/indexed_messages.rs"]
mod indexed_messages;

fn shm(np: usize) -> Config {
    Config::new().device(DeviceKind::Shm).np(np)
}

/// Message `i`'s length: every small length in turn, and every seventh message a rendezvous.
fn length(i: usize) -> usize {
    if i % 7 == 6 { LARGE } else { i % (SMALL_MAX + 1) }
}

/// The tag encodes the index, so the receiver can check order as well as content.
fn tag(i: usize) -> i32 {
    i as i32
}

fn check(i: usize, buf: &[u8], bytes: usize) {
    indexed_messages::check(i, length(i), buf, bytes);
}

fn send_burst(world: &Comm, dest: usize, from: usize, to: usize) -> Result<()> {
    indexed_messages::send_burst(world, dest, from, to, length)
}

/// Every length 0..=SMALL_MAX (and rendezvous ones) in bursts that overfill the ring, received
/// with wildcards after the sender is done (all unexpected) and then into preposted receives.
#[test]
fn every_length_in_order_through_wildcards_unexpected_and_preposted() {
    shm(2)
        .run(|world| {
            let n = 2 * (SMALL_MAX + 1);
            let mut buf = vec![0u8; LARGE];
            if world.rank() == 0 {
                send_burst(&world, 1, 0, n)?;
                world.barrier()?;
                // Preposted round: wait until the receiver has posted its receives.
                world.recv(&mut [0u8; 0], 1, ANY_TAG)?;
                send_burst(&world, 1, n, 2 * n)?;
            } else {
                // Unexpected round: the first burst arrives (partly queued behind a full ring)
                // while nothing is posted.
                for i in 0..n {
                    let st = world.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
                    assert_eq!((st.source, st.tag), (0, tag(i)), "message {i}: arrival order");
                    check(i, &buf, st.bytes);
                }
                world.barrier()?;
                let mut bufs: Vec<Vec<u8>> = (n..2 * n).map(|_| vec![0u8; LARGE]).collect();
                world.scope(|s| {
                    let mut reqs = Vec::with_capacity(n);
                    for (k, b) in bufs.iter_mut().enumerate() {
                        // Alternate wildcards: order must hold for each.
                        reqs.push(match k % 3 {
                            0 => s.irecv(&mut b[..], ANY_SOURCE, ANY_TAG)?,
                            1 => s.irecv(&mut b[..], 0, ANY_TAG)?,
                            _ => s.irecv(&mut b[..], ANY_SOURCE, tag(n + k))?,
                        });
                    }
                    world.send(&[0u8; 0], 0, 0)?;
                    let statuses = fastmp::waitall(&mut reqs)?;
                    for (k, st) in statuses.iter().enumerate() {
                        assert_eq!(st.tag, tag(n + k), "preposted receive {k}: took its message in order");
                    }
                    Ok(())
                })?;
                for (k, b) in bufs.iter().enumerate() {
                    check(n + k, b, length(n + k));
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Probes see each message's exact length before it is received, at every small length.
#[test]
fn probes_report_every_length() {
    shm(2)
        .run(|world| {
            let n = SMALL_MAX + 1 + 14;
            if world.rank() == 0 {
                send_burst(&world, 1, 0, n)?;
            } else {
                for i in 0..n {
                    let st = world.probe(ANY_SOURCE, ANY_TAG)?;
                    assert_eq!((st.source, st.tag, st.bytes), (0, tag(i), length(i)), "probe {i}");
                    // A probe for a later tag must not skip ahead of the first message.
                    if i + 1 < n {
                        let later = world.iprobe(0, tag(i + 1))?;
                        assert!(later.is_none_or(|st| st.bytes == length(i + 1)));
                    }
                    let mut buf = vec![0u8; st.bytes];
                    let got = world.recv(&mut buf, 0, tag(i))?;
                    check(i, &buf, got.bytes);
                }
            }
            Ok(())
        })
        .unwrap();
}

/// The ring wraps around at every offset: each round starts where the last one left the ring
/// (rounds of 1, 2, ... messages), and some rounds overfill it.
#[test]
fn wraparound_at_every_offset_and_full_ring() {
    shm(2)
        .run(|world| {
            let mut next = 0;
            let mut buf = vec![0u8; LARGE];
            for round in 1..=70usize {
                let count = if round.is_multiple_of(10) { BURST } else { round };
                if world.rank() == 0 {
                    send_burst(&world, 1, next, next + count)?;
                } else {
                    for i in next..next + count {
                        let st = world.recv(&mut buf, 0, ANY_TAG)?;
                        assert_eq!(st.tag, tag(i), "round {round}: order");
                        check(i, &buf, st.bytes);
                    }
                }
                next += count;
                world.barrier()?;
            }
            Ok(())
        })
        .unwrap();
}

/// Several senders with bursts to one receiver taking ANY_SOURCE: each sender's messages stay in
/// order and intact.
#[test]
fn many_senders_keep_their_order() {
    const NP: usize = 4;
    shm(NP)
        .run(|world| {
            let n = SMALL_MAX + 1 + 30;
            if world.rank() != 0 {
                send_burst(&world, 0, 0, n)?;
            } else {
                let mut next = [0usize; NP];
                let mut buf = vec![0u8; LARGE];
                for _ in 0..(NP - 1) * n {
                    let st = world.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
                    let i = next[st.source];
                    assert_eq!(st.tag, tag(i), "sender {}: order", st.source);
                    check(i, &buf, st.bytes);
                    next[st.source] += 1;
                }
                assert!(next[1..].iter().all(|&k| k == n));
            }
            Ok(())
        })
        .unwrap();
}
