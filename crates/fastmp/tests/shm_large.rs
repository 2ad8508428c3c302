//! Large messages on the shm device: rendezvous copies shared by sender and receiver (pieces of
//! 64 KiB from 256 KiB on) and non-temporal copies (from 2 MiB on), at odd lengths and
//! destination offsets, in both arrival orders, truncated, through matched probes, with sends
//! dropped or forgotten while the receiver copies, in both directions at once, and with more
//! ranks than cores.

mod common;

use common::{assert_bytes_eq, check_pattern, mix, pattern};
use fastmp::{Config, DeviceKind, Error, waitall};

const KIB: usize = 1024;
const SENTINEL: u8 = 0xA5;

/// Lengths around the piece size (64 KiB), the sharing threshold (256 KiB) and the streaming
/// threshold (2 MiB), most of them odd.
const SIZES: [usize; 8] = [
    64 * KIB + 1,
    256 * KIB - 1,
    256 * KIB,
    256 * KIB + 1,
    5 * 64 * KIB + 17,
    2048 * KIB - 1,
    2048 * KIB + 33,
    4096 * KIB + 5,
];

fn shm(np: usize) -> Config {
    Config::new().device(DeviceKind::Shm).np(np)
}

/// Receives message `i` of `len` bytes from `src` at byte offset `off` of a sentinel-filled
/// buffer with 3 spare bytes after it; checks the data and that nothing around it was written.
fn recv_checked(world: &fastmp::Comm, src: usize, i: usize, len: usize, off: usize) -> fastmp::Result<()> {
    let mut buf = vec![SENTINEL; off + len + 3];
    let st = world.recv(&mut buf[off..], src, i as i32)?;
    assert_eq!((st.source, st.tag, st.bytes), (src, i as i32, len));
    check_pattern(&buf[off..off + len], mix(&[src as u64, i as u64]), "large message");
    assert!(buf[..off].iter().chain(&buf[off + len..]).all(|&b| b == SENTINEL), "message {i}: wrote outside");
    Ok(())
}

/// Every size at several destination offsets, with the receive posted before the send (even
/// rounds: the sender finds it published) and after it (odd rounds: the receiver finds the
/// ready-to-send); the sender waits on its isend, so it can take pieces of the copy.
#[test]
fn every_size_both_orders_odd_offsets() {
    shm(2)
        .run(|world| {
            for (i, &len) in SIZES.iter().enumerate() {
                for round in 0..2 {
                    let tag = i * 2 + round;
                    if world.rank() == 1 {
                        let data = pattern(mix(&[1, tag as u64]), len);
                        if round == 1 {
                            world.send(&[0u8; 0], 0, 999)?; // the receiver waits for the send first
                        }
                        world.scope(|s| s.isend(&data, 0, tag as i32)?.wait().map(drop))?;
                        world.recv(&mut [0u8; 0], 0, 998)?;
                    } else {
                        if round == 1 {
                            world.recv(&mut [0u8; 0], 1, 999)?;
                            while world.iprobe(1, tag as i32)?.is_none() {}
                        }
                        recv_checked(&world, 1, tag, len, (tag * 7) % 64)?;
                        world.send(&[0u8; 0], 1, 998)?;
                    }
                }
            }
            Ok(())
        })
        .unwrap();
}

/// A receive shorter than the message gets the first bytes and a truncation error; the send
/// completes, and the next message arrives whole.
#[test]
fn truncated_large_receive() {
    let len = 600 * KIB + 3;
    shm(2)
        .run(|world| {
            if world.rank() == 1 {
                let data = pattern(mix(&[1, 0]), len);
                world.send(&data, 0, 0)?;
                world.send(&pattern(mix(&[1, 1]), len), 0, 1)?;
                return Ok(());
            }
            let capacity = 300 * KIB + 1;
            let mut buf = vec![SENTINEL; capacity + 5];
            match world.recv(&mut buf[..capacity], 1, 0) {
                Err(Error::Truncated { message_bytes, capacity: c, .. }) => {
                    assert_eq!((message_bytes, c), (len, capacity))
                }
                other => panic!("expected truncation, got {other:?}"),
            }
            assert_bytes_eq(&buf[..capacity], &pattern(mix(&[1, 0]), len)[..capacity], "truncated prefix");
            assert!(buf[capacity..].iter().all(|&b| b == SENTINEL));
            recv_checked(&world, 1, 1, len, 0)
        })
        .unwrap();
}

/// Matched probe, then mrecv: the sender's record is claimed at probe time and the copy
/// (shared) happens at mrecv.
#[test]
fn matched_probe_then_shared_copy() {
    let len = 1024 * KIB + 9;
    shm(2)
        .run(|world| {
            if world.rank() == 1 {
                let data = pattern(mix(&[1, 0]), len);
                return world.scope(|s| s.isend(&data, 0, 0)?.wait().map(drop));
            }
            let (message, status) = world.mprobe(1, 0)?;
            assert_eq!(status.bytes, len);
            let mut buf = vec![0u8; len];
            world.mrecv(&mut buf, message)?;
            check_pattern(&buf, mix(&[1, 0]), "mrecv");
            Ok(())
        })
        .unwrap();
}

/// Windows of large isends whose requests are dropped or forgotten at once (the sender then
/// detaches them, or helps and waits if the receiver is already copying) and whose buffers are
/// overwritten right after the scope: every receive still gets the original bytes.
#[test]
fn dropped_and_forgotten_sends_while_the_receiver_copies() {
    const WINDOW: usize = 8;
    let len = 320 * KIB + 11;
    shm(2)
        .run(|world| {
            for round in 0..6usize {
                let seed = |k: usize| mix(&[round as u64, k as u64]);
                if world.rank() == 1 {
                    let mut bufs: Vec<Vec<u8>> = (0..WINDOW).map(|k| pattern(seed(k), len)).collect();
                    world.scope(|s| {
                        for (k, b) in bufs.iter().enumerate() {
                            let req = s.isend(b, 0, k as i32)?;
                            if (k + round) % 2 == 0 { drop(req) } else { std::mem::forget(req) }
                        }
                        Ok::<_, Error>(())
                    })?;
                    bufs.iter_mut().for_each(|b| b.fill(0xEE));
                } else {
                    let mut bufs: Vec<Vec<u8>> = vec![vec![0u8; len]; WINDOW];
                    world.scope(|s| {
                        let mut reqs = Vec::new();
                        for (k, b) in bufs.iter_mut().enumerate() {
                            reqs.push(s.irecv(b, 1, k as i32)?);
                        }
                        waitall(&mut reqs).map(drop)
                    })?;
                    for (k, b) in bufs.iter().enumerate() {
                        check_pattern(b, seed(k), "released send");
                    }
                }
                world.barrier()?;
            }
            Ok(())
        })
        .unwrap();
}

/// Both ranks send windows of large messages to each other at once (each is sender and receiver
/// of shared copies at the same time), over 4 ranks on however few cores.
#[test]
fn both_directions_with_more_ranks_than_cores() {
    const WINDOW: usize = 4;
    let len = 300 * KIB + 7;
    shm(4)
        .run(|world| {
            let (me, np) = (world.rank(), world.size());
            let peer = me ^ 1;
            for round in 0..3usize {
                let out: Vec<Vec<u8>> =
                    (0..WINDOW).map(|k| pattern(mix(&[me as u64, round as u64, k as u64]), len)).collect();
                let mut inc = vec![vec![0u8; len]; WINDOW];
                world.scope(|s| {
                    let mut reqs = Vec::new();
                    for (k, b) in inc.iter_mut().enumerate() {
                        reqs.push(s.irecv(b, peer, k as i32)?);
                    }
                    for (k, b) in out.iter().enumerate() {
                        reqs.push(s.isend(b, peer, k as i32)?);
                    }
                    waitall(&mut reqs).map(drop)
                })?;
                for (k, b) in inc.iter().enumerate() {
                    check_pattern(b, mix(&[peer as u64, round as u64, k as u64]), "exchanged");
                }
                // And a ring step, so pairs other than the fixed ones share copies too.
                let data = pattern(mix(&[me as u64, 99, round as u64]), len);
                let mut got = vec![0u8; len];
                world.sendrecv(&data, (me + 1) % np, 50, &mut got, (me + np - 1) % np, 50)?;
                check_pattern(&got, mix(&[((me + np - 1) % np) as u64, 99, round as u64]), "ring step");
            }
            Ok(())
        })
        .unwrap();
}
