//! Eager messages from 1 KiB up to the eager limit that a sender copies straight into a posted
//! receive (receiver-first) instead of through the ring: mixed with ring messages (inline and
//! spilled) they keep per-sender order, reach wildcard receives in posting order, report
//! truncation, complete synchronous sends, and never land in a cancelled receive.

use fastmp::{ANY_SOURCE, ANY_TAG, Comm, Config, DEFAULT_EAGER_LIMIT, DeviceKind, Error, Result};

/// Lengths cycled through: ring-only ones (inline, spilled) and ones around the receiver-first
/// threshold (1 KiB) and the eager limit.
const LENGTHS: [usize; 10] = [0, 8, 40, 41, 1000, 1023, 1024, 1025, DEFAULT_EAGER_LIMIT, 4000];

#[path = "common/indexed_messages.rs"]
mod indexed_messages;

fn shm(np: usize) -> Config {
    Config::new().device(DeviceKind::Shm).np(np)
}

fn length(i: usize) -> usize {
    LENGTHS[i % LENGTHS.len()]
}

fn payload(i: usize) -> Vec<u8> {
    indexed_messages::payload(i, length(i))
}

fn check(i: usize, buf: &[u8], bytes: usize) {
    indexed_messages::check(i, length(i), buf, bytes);
}

fn send_burst(world: &Comm, dest: usize, from: usize, to: usize) -> Result<()> {
    indexed_messages::send_burst(world, dest, from, to, length)
}

/// Rounds of preposted receives (wildcards alternating with exact ones) and a burst of every
/// length: each receive gets the message of its posting position, intact; some rounds post
/// fewer receives than messages, so later ones arrive through the ring, behind direct ones.
#[test]
fn preposted_receives_take_every_length_in_order() {
    shm(2)
        .run(|world| {
            let mut next = 0;
            for round in 0..12usize {
                let count = 3 * LENGTHS.len() + round;
                let posted = if round.is_multiple_of(3) { count / 2 } else { count };
                if world.rank() == 0 {
                    // Wait until the receiver has posted.
                    world.recv(&mut [0u8; 0], 1, ANY_TAG)?;
                    send_burst(&world, 1, next, next + count)?;
                } else {
                    let mut bufs: Vec<Vec<u8>> = (0..count).map(|_| vec![0u8; DEFAULT_EAGER_LIMIT]).collect();
                    let (early, late) = bufs.split_at_mut(posted);
                    world.scope(|s| {
                        let mut reqs = Vec::with_capacity(posted);
                        for (k, b) in early.iter_mut().enumerate() {
                            let tag = (next + k) as i32;
                            reqs.push(match k % 3 {
                                0 => s.irecv(&mut b[..], ANY_SOURCE, ANY_TAG)?,
                                1 => s.irecv(&mut b[..], 0, ANY_TAG)?,
                                _ => s.irecv(&mut b[..], ANY_SOURCE, tag)?,
                            });
                        }
                        world.send(&[0u8; 0], 0, 0)?;
                        for (k, st) in fastmp::waitall(&mut reqs)?.iter().enumerate() {
                            assert_eq!((st.source, st.tag), (0, (next + k) as i32), "round {round}: order");
                            assert_eq!(st.bytes, length(next + k));
                        }
                        Ok(())
                    })?;
                    for (k, b) in late.iter_mut().enumerate() {
                        let i = next + posted + k;
                        let st = world.recv(b, 0, ANY_TAG)?;
                        assert_eq!(st.tag, i as i32, "round {round}: order after the posted ones");
                        check(i, b, st.bytes);
                    }
                    for (k, b) in early.iter().enumerate() {
                        check(next + k, b, length(next + k));
                    }
                }
                next += count;
                world.barrier()?;
            }
            Ok(())
        })
        .unwrap();
}

/// A receive too small for a directly copied message reports truncation (and gets the bytes
/// that fit); a synchronous send copied directly completes; a cancelled receive is skipped.
#[test]
fn truncation_synchronous_and_cancelled_receives() {
    shm(2)
        .run(|world| {
            let big: Vec<u8> = (0..2048).map(|j| j as u8).collect();
            if world.rank() == 0 {
                world.recv(&mut [0u8; 0], 1, 0)?;
                world.send(&big, 1, 1)?; // into a 1 KiB receive: truncated
                world.ssend(&big, 1, 2)?; // synchronous, into a posted receive
                world.send(&big, 1, 3)?; // the cancelled receive must not take it
                world.barrier()?;
            } else {
                let mut small = vec![0u8; 1024];
                let mut sync = vec![0u8; 2048];
                let mut cancelled = vec![0u8; 2048];
                let mut after = vec![0u8; 2048];
                world.scope(|s| {
                    let truncated = s.irecv(&mut small[..], 0, 1)?;
                    let synchronous = s.irecv(&mut sync[..], 0, 2)?;
                    let withdrawn = s.irecv(&mut cancelled[..], 0, ANY_TAG)?;
                    withdrawn.cancel()?;
                    assert!(withdrawn.wait()?.cancelled, "nothing was sent yet: the cancel wins");
                    world.send(&[0u8; 0], 0, 0)?;
                    assert!(matches!(truncated.wait(), Err(Error::Truncated { .. })), "1 KiB receive of 2 KiB");
                    assert_eq!(synchronous.wait()?.bytes, 2048);
                    Ok(())
                })?;
                assert_eq!(&small[..], &big[..1024], "the bytes that fit arrive");
                assert_eq!(sync, big);
                assert!(cancelled.iter().all(|&b| b == 0), "a cancelled receive gets nothing");
                let st = world.recv(&mut after, 0, ANY_TAG)?;
                assert_eq!((st.tag, st.bytes), (3, 2048));
                assert_eq!(after, big);
                world.barrier()?;
            }
            Ok(())
        })
        .unwrap();
}

/// Messages to itself through a posted receive, and several senders streaming every length to
/// one ANY_SOURCE receiver: each sender's messages stay in order.
#[test]
fn self_sends_and_many_senders_keep_order() {
    const NP: usize = 3;
    shm(NP)
        .run(|world| {
            let me = world.rank();
            let mut mine = vec![0u8; 4000];
            world.scope(|s| {
                let r = s.irecv(&mut mine[..], me, 7)?;
                world.send(&payload(9), me, 7)?;
                assert_eq!(r.wait()?.bytes, 4000);
                Ok(())
            })?;
            check(9, &mine, 4000);
            let n = 4 * LENGTHS.len();
            if me != 0 {
                send_burst(&world, 0, 0, n)?;
            } else {
                let mut next = [0usize; NP];
                let mut buf = vec![0u8; DEFAULT_EAGER_LIMIT];
                for _ in 0..(NP - 1) * n {
                    let st = world.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
                    let i = next[st.source];
                    assert_eq!(st.tag, i as i32, "sender {}: order", st.source);
                    check(i, &buf, st.bytes);
                    next[st.source] += 1;
                }
            }
            Ok(())
        })
        .unwrap();
}
