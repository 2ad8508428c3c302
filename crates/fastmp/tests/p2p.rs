//! Point-to-point integration tests: matching rules, every protocol path with exact byte checks,
//! nonblocking requests, combined operations, probes, objects and errors.
//!
//! One suite for every device: each test body takes the device, and `device_suite!` (bottom of
//! the file) generates `shm::<name>` and `tcp::<name>`. On tcp the ranks are threads of this
//! process joined by loopback TCP connections, so the whole tcp protocol stack is exercised.
//!
//! Tests never depend on timing for their verdict: where an ordering matters (a send posted before
//! its receive, a receive posted before its send) it is enforced with messages, probes or shared
//! flags; sleeps only make the interesting interleaving likely, never required.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Duration;

use common::{assert_bytes_eq, check_pattern, device_suite, mix, pattern};
use fastmp::{
    ANY_SOURCE, ANY_TAG, Comm, Config, DEFAULT_EAGER_LIMIT, DeviceKind, Error, Request, Result, Status, TAG_UB,
    testall, testany, waitall, waitany,
};
use serde::{Deserialize, Serialize};

/// Tag of the control messages that sequence the interesting traffic.
const GO: i32 = 999_999;
/// Fill byte of receive-buffer space that must not be written.
const SENTINEL: u8 = 0xC3;
const MIB: usize = 1 << 20;
/// The largest message of the suite.
const BIG: usize = 3 * MIB + 5;

/// A job of `np` ranks on `dev` with the given eager limit.
fn cfg(dev: DeviceKind, np: usize, eager_limit: usize) -> Config {
    Config::new().device(dev).np(np).eager_limit(eager_limit)
}

/// `fastmp::run` on `dev`: `np` ranks, default settings.
fn run<F, R>(dev: DeviceKind, np: usize, f: F) -> Result<Vec<R>>
where
    F: Fn(Comm) -> Result<R> + Sync,
    R: Send,
{
    cfg(dev, np, DEFAULT_EAGER_LIMIT).run(f)
}

fn pause() {
    std::thread::sleep(Duration::from_millis(20));
}

/// Sends an empty control message.
fn go(world: &fastmp::Comm, dest: usize) -> Result<()> {
    world.send::<u8>(&[], dest, GO)
}

/// Waits for an empty control message.
fn wait_go(world: &fastmp::Comm, source: usize) -> Result<()> {
    let st = world.recv::<u8>(&mut [], source, GO)?;
    assert_eq!((st.source, st.tag, st.bytes), (source, GO, 0));
    Ok(())
}

fn assert_untouched(tail: &[u8], what: &str) {
    if let Some(i) = tail.iter().position(|&b| b != SENTINEL) {
        panic!("{what}: byte {i} past the message was overwritten ({:#04x})", tail[i]);
    }
}

fn assert_status(st: &Status, source: usize, tag: i32, bytes: usize) {
    assert_eq!((st.source, st.tag, st.bytes, st.cancelled), (source, tag, bytes, false), "status {st:?}");
}

// ------------------------------------------------------------------------------------- matching

fn match_specific_source_and_tag(dev: DeviceKind) {
    run(dev, 3, |world| {
        if world.rank() == 0 {
            for (src, tag) in [(2, 20), (1, 10), (2, 10), (1, 20)] {
                let mut buf = [0i32; 2];
                let st = world.recv(&mut buf, src, tag)?;
                assert_eq!(buf, [src as i32, tag]);
                assert_status(&st, src, tag, 8);
                assert_eq!(st.count, 2);
            }
        } else {
            for tag in [10, 20] {
                world.send(&[world.rank() as i32, tag], 0, tag)?;
            }
        }
        Ok(())
    })
    .unwrap();
}

fn match_any_source(dev: DeviceKind) {
    run(dev, 4, |world| {
        let rank = world.rank();
        if rank == 0 {
            let mut sources = Vec::new();
            for _ in 0..3 {
                let mut buf = [0u32];
                let st = world.recv(&mut buf, ANY_SOURCE, 5)?;
                assert_eq!(st.tag, 5);
                assert_eq!(buf[0], st.source as u32 * 7, "payload belongs to the reported source");
                sources.push(st.source);
            }
            sources.sort();
            assert_eq!(sources, [1, 2, 3]);
            // The tag-6 messages (sent first) were not taken by the tag-5 receives.
            let mut sources = Vec::new();
            for _ in 0..3 {
                let mut buf = [0u32];
                let st = world.recv(&mut buf, ANY_SOURCE, 6)?;
                assert_eq!(buf[0], 1000 + st.source as u32);
                sources.push(st.source);
            }
            sources.sort();
            assert_eq!(sources, [1, 2, 3]);
        } else {
            world.send(&[1000 + rank as u32], 0, 6)?;
            world.send(&[rank as u32 * 7], 0, 5)?;
        }
        Ok(())
    })
    .unwrap();
}

fn match_any_tag_follows_send_order(dev: DeviceKind) {
    run(dev, 3, |world| {
        match world.rank() {
            0 => {
                // Rank 2's message must never satisfy a receive from rank 1.
                let mut tags = Vec::new();
                for _ in 0..4 {
                    let mut buf = [0i32];
                    let st = world.recv(&mut buf, 1, ANY_TAG)?;
                    assert_eq!(st.source, 1);
                    assert_eq!(buf[0], st.tag * 11);
                    tags.push(st.tag);
                }
                assert_eq!(tags, [3, 1, 2, 0], "ANY_TAG receives from one source follow its send order");
                let mut buf = [0i32];
                let st = world.recv(&mut buf, 2, ANY_TAG)?;
                assert_eq!((st.source, st.tag, buf[0]), (2, 1, -1));
            }
            1 => {
                for tag in [3, 1, 2, 0] {
                    world.send(&[tag * 11], 0, tag)?;
                }
            }
            _ => world.send(&[-1i32], 0, 1)?,
        }
        Ok(())
    })
    .unwrap();
}

fn match_both_wildcards(dev: DeviceKind) {
    run(dev, 4, |world| {
        let rank = world.rank();
        if rank == 0 {
            let mut next = [0u32; 4];
            for _ in 0..9 {
                let mut buf = [0u32; 2];
                let st = world.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
                let (src, i) = (st.source, next[st.source]);
                assert_eq!(buf, [src as u32, i], "per-source order is kept under wildcards");
                assert_eq!(st.tag, src as i32 * 10 + i as i32);
                assert_eq!(st.count, 2);
                next[src] += 1;
            }
            assert_eq!(next, [0, 3, 3, 3]);
        } else {
            for i in 0..3u32 {
                world.send(&[rank as u32, i], 0, rank as i32 * 10 + i as i32)?;
            }
        }
        Ok(())
    })
    .unwrap();
}

/// Messages with different tags are received in the opposite order of sending.
fn tags_out_of_send_order(dev: DeviceKind, limit: usize, base: usize) {
    const N: usize = 6;
    let seed = |t: usize| mix(&[0x7A65, base as u64, t as u64]);
    cfg(dev, 2, limit)
        .run(|world| {
            if world.rank() == 1 {
                let bufs: Vec<Vec<u8>> = (0..N).map(|t| pattern(seed(t), base + t)).collect();
                world.scope(|s| {
                    let mut reqs = Vec::new();
                    for (t, b) in bufs.iter().enumerate() {
                        reqs.push(s.isend(b, 0, t as i32)?);
                    }
                    waitall(&mut reqs).map(drop)
                })?;
            } else {
                for t in (0..N).rev() {
                    let mut buf = vec![SENTINEL; base + N];
                    let st = world.recv(&mut buf, 1, t as i32)?;
                    assert_status(&st, 1, t as i32, base + t);
                    check_pattern(&buf[..base + t], seed(t), "out-of-order tag");
                    assert_untouched(&buf[base + t..], "out-of-order tag");
                }
            }
            Ok(())
        })
        .unwrap();
}

fn tags_received_out_of_send_order_eager_inline(dev: DeviceKind) {
    tags_out_of_send_order(dev, 1000, 3);
}

fn tags_received_out_of_send_order_eager_spilled(dev: DeviceKind) {
    tags_out_of_send_order(dev, 1000, 300);
}

fn tags_received_out_of_send_order_rendezvous(dev: DeviceKind) {
    tags_out_of_send_order(dev, 1000, 5000);
}

/// Size of message `seq` in the ordering tests: cycles through every protocol for limit 1000.
fn seq_size(seq: usize) -> usize {
    [0, 5, 24, 25, 200, 999, 1000, 1001, 5000, 40_000][seq % 10]
}

fn seq_seed(seq: usize) -> u64 {
    mix(&[0x5E9, seq as u64])
}

fn non_overtaking_same_source_same_tag(dev: DeviceKind) {
    const N: usize = 300;
    cfg(dev, 2, 1000)
        .run(|world| {
            if world.rank() == 1 {
                for seq in 0..N {
                    world.send(&pattern(seq_seed(seq), seq_size(seq)), 0, 7)?;
                }
            } else {
                let mut buf = vec![0u8; 40_000];
                for seq in 0..N {
                    // Every form of receive that matches the stream must take its next message.
                    let st = match seq % 4 {
                        0 => world.recv(&mut buf, 1, 7)?,
                        1 => world.recv(&mut buf, ANY_SOURCE, 7)?,
                        2 => world.recv(&mut buf, 1, ANY_TAG)?,
                        _ => world.recv(&mut buf, ANY_SOURCE, ANY_TAG)?,
                    };
                    assert_status(&st, 1, 7, seq_size(seq));
                    check_pattern(&buf[..st.bytes], seq_seed(seq), &format!("message {seq}"));
                }
            }
            Ok(())
        })
        .unwrap();
}

fn non_overtaking_into_preposted_receives(dev: DeviceKind) {
    // More receives than the posted-receive board holds, so later ones go private.
    const N: usize = 150;
    cfg(dev, 2, 1000)
        .run(|world| {
            if world.rank() == 1 {
                wait_go(&world, 0)?;
                for seq in 0..N {
                    world.send(&pattern(seq_seed(seq), seq_size(seq)), 0, 7)?;
                }
            } else {
                let mut bufs: Vec<Vec<u8>> = (0..N).map(|_| vec![SENTINEL; 40_016]).collect();
                let statuses = world.scope(|s| {
                    let mut reqs = Vec::new();
                    for (seq, b) in bufs.iter_mut().enumerate() {
                        let tag = if seq % 3 == 0 { ANY_TAG } else { 7 };
                        let src = if seq % 5 == 0 { ANY_SOURCE } else { 1.into() };
                        reqs.push(s.irecv(b, src, tag)?);
                    }
                    go(&world, 1)?;
                    waitall(&mut reqs)
                })?;
                for (seq, (st, b)) in statuses.iter().zip(&bufs).enumerate() {
                    let n = seq_size(seq);
                    assert_status(st, 1, 7, n);
                    check_pattern(&b[..n], seq_seed(seq), &format!("preposted receive {seq}"));
                    assert_untouched(&b[n..], "preposted receive");
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Message `seq` of `src` in the many-senders test: `[src, seq, filler...]`, some above the
/// eager limit.
fn numbered(src: usize, seq: usize) -> Vec<u64> {
    let words = if seq % 17 == 5 { 300 } else { 2 + seq % 3 };
    (0..words)
        .map(|k| match k {
            0 => src as u64,
            1 => seq as u64,
            _ => mix(&[src as u64, seq as u64, k as u64]),
        })
        .collect()
}

fn ordering_with_many_senders(dev: DeviceKind) {
    const NP: usize = 8;
    const PER: usize = 200;
    cfg(dev, NP, 1024)
        .run(|world| {
            let rank = world.rank();
            if rank != 0 {
                for seq in 0..PER {
                    world.send(&numbered(rank, seq), 0, 0)?;
                }
                return Ok(());
            }
            // Rank 0 sends to itself too (nonblocking, or it could not receive its own rendezvous).
            let own: Vec<Vec<u64>> = (0..PER).map(|seq| numbered(0, seq)).collect();
            world.scope(|s| {
                let mut sends = Vec::new();
                for m in &own {
                    sends.push(s.isend(m, 0, 0)?);
                }
                let mut next = [0usize; NP];
                let mut buf = vec![0u64; 300];
                for _ in 0..NP * PER {
                    let st = world.recv(&mut buf, ANY_SOURCE, 0)?;
                    let src = st.source;
                    let want = numbered(src, next[src]);
                    assert_eq!(st.count, want.len(), "message {} of rank {src}", next[src]);
                    assert_eq!(&buf[..st.count], &want[..], "rank {src}'s sequence is in order");
                    next[src] += 1;
                }
                assert_eq!(next, [PER; NP]);
                waitall(&mut sends).map(drop)
            })
        })
        .unwrap();
}

// ------------------------------------------------------------------------------ protocol paths

/// Sends every size in `sizes` from rank 1 to rank 0 twice: first with each message already
/// arrived when rank 0 posts its receive (eager unexpected / rendezvous; enforced by probing),
/// then into receives rank 0 posted before rank 1 started sending (posted / receiver-first).
/// Every byte is checked, and receive space past the message must stay untouched.
fn exchange_both_orders(dev: DeviceKind, limit: usize, sizes: &[usize]) {
    let seed = |phase: u64, i: usize| mix(&[limit as u64, phase, i as u64, sizes[i] as u64]);
    cfg(dev, 2, limit)
        .run(|world| {
            if world.rank() == 1 {
                for (i, &n) in sizes.iter().enumerate() {
                    world.send(&pattern(seed(1, i), n), 0, i as i32)?;
                }
                wait_go(&world, 0)?;
                for (i, &n) in sizes.iter().enumerate() {
                    world.send(&pattern(seed(2, i), n), 0, i as i32)?;
                }
                return Ok(());
            }
            for (i, &n) in sizes.iter().enumerate() {
                let what = format!("limit {limit}, {n} bytes, send first");
                let probed = world.probe(1, i as i32)?;
                assert_status(&probed, 1, i as i32, n);
                let mut buf = vec![SENTINEL; n + 16];
                let st = world.recv(&mut buf, 1, i as i32)?;
                assert_status(&st, 1, i as i32, n);
                assert_eq!(st.count, n);
                check_pattern(&buf[..n], seed(1, i), &what);
                assert_untouched(&buf[n..], &what);
            }
            let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![SENTINEL; n + 16]).collect();
            let statuses = world.scope(|s| {
                let mut reqs = Vec::new();
                for (i, b) in bufs.iter_mut().enumerate() {
                    reqs.push(s.irecv(b, 1, i as i32)?);
                }
                go(&world, 1)?;
                waitall(&mut reqs)
            })?;
            for (i, &n) in sizes.iter().enumerate() {
                let what = format!("limit {limit}, {n} bytes, receive first");
                assert_status(&statuses[i], 1, i as i32, n);
                check_pattern(&bufs[i][..n], seed(2, i), &what);
                assert_untouched(&bufs[i][n..], &what);
            }
            Ok(())
        })
        .unwrap();
}

fn eager_inline_and_spilled_sizes(dev: DeviceKind) {
    let sizes = [0, 1, 7, 8, 23, 24, 25, 31, 32, 63, 64, 100, 999, 1000];
    exchange_both_orders(dev, 1000, &sizes);
    let l = DEFAULT_EAGER_LIMIT;
    exchange_both_orders(dev, l, &[0, 1, 24, 25, 4096, l - 1, l]);
}

fn sizes_around_the_eager_limit(dev: DeviceKind) {
    for limit in [0, 1, 24, 25, 64, 1000, DEFAULT_EAGER_LIMIT] {
        let mut sizes = vec![limit.saturating_sub(1), limit, limit + 1, 0];
        sizes.dedup();
        exchange_both_orders(dev, limit, &sizes);
    }
}

fn rendezvous_and_receiver_first_large_sizes(dev: DeviceKind) {
    exchange_both_orders(dev, 1000, &[1001, 2003, 65_536, 200_000, BIG]);
    exchange_both_orders(dev, DEFAULT_EAGER_LIMIT, &[DEFAULT_EAGER_LIMIT + 1, 100_000, BIG]);
}

fn rendezvous_send_posted_before_receive(dev: DeviceKind) {
    for limit in [1000, DEFAULT_EAGER_LIMIT] {
        let sizes = [limit + 1, 2 * limit + 3, 65_536, BIG];
        let seed = |i: usize| mix(&[0x4E2, limit as u64, i as u64]);
        cfg(dev, 2, limit)
            .run(|world| {
                if world.rank() == 1 {
                    for (i, &n) in sizes.iter().enumerate() {
                        let data = pattern(seed(i), n);
                        world.send(&data, 0, i as i32)?;
                        // The receiver copied straight out of our buffer; it is unchanged.
                        check_pattern(&data, seed(i), "sender buffer after rendezvous");
                    }
                } else {
                    for (i, &n) in sizes.iter().enumerate() {
                        pause(); // the sender is (almost surely) blocked in its send by now
                        let mut buf = vec![SENTINEL; n + 8];
                        let st = world.recv(&mut buf, 1, i as i32)?;
                        assert_status(&st, 1, i as i32, n);
                        check_pattern(&buf[..n], seed(i), "rendezvous");
                        assert_untouched(&buf[n..], "rendezvous");
                    }
                }
                Ok(())
            })
            .unwrap();
    }
}

fn receiver_first_direct_copy(dev: DeviceKind) {
    for limit in [1000, DEFAULT_EAGER_LIMIT] {
        let sizes = [limit + 1, 100_000, BIG];
        let seed = |i: usize| mix(&[0x4F1, limit as u64, i as u64]);
        cfg(dev, 2, limit)
            .run(|world| {
                for (i, &n) in sizes.iter().enumerate() {
                    let tag = i as i32 + 3;
                    if world.rank() == 1 {
                        wait_go(&world, 0)?;
                        world.send(&pattern(seed(i), n), 0, tag)?;
                        continue;
                    }
                    let mut buf = vec![SENTINEL; n + 8];
                    let st = world.scope(|s| {
                        // Posted (and published) before the sender even starts.
                        let req = match i % 3 {
                            0 => s.irecv(&mut buf, 1, tag)?,
                            1 => s.irecv(&mut buf, ANY_SOURCE, tag)?,
                            _ => s.irecv(&mut buf, ANY_SOURCE, ANY_TAG)?,
                        };
                        go(&world, 1)?;
                        req.wait()
                    })?;
                    assert_status(&st, 1, tag, n);
                    check_pattern(&buf[..n], seed(i), "receiver-first");
                    assert_untouched(&buf[n..], "receiver-first");
                }
                Ok(())
            })
            .unwrap();
    }
}

fn issend_incomplete_until_receiver_matches(dev: DeviceKind) {
    let limit = 1000;
    let sizes = [0, 10, 24, 500, limit, limit + 1, 100_000];
    let seed = |i: usize| mix(&[0x155, i as u64]);
    cfg(dev, 2, limit)
        .run(|world| {
            for (i, &n) in sizes.iter().enumerate() {
                let tag = i as i32;
                if world.rank() == 0 {
                    let data = pattern(seed(i), n);
                    world.scope(|s| {
                        let mut req = s.issend(&data, 1, tag)?;
                        // The receiver has not posted its receive (it waits for our go), so a
                        // synchronous send cannot have completed, whatever the protocol.
                        for _ in 0..3 {
                            assert!(req.test()?.is_none(), "issend of {n} bytes completed before the match");
                        }
                        go(&world, 1)?;
                        let st = req.wait()?;
                        assert_eq!((st.tag, st.bytes, st.cancelled), (tag, n, false));
                        Ok::<_, Error>(())
                    })?;
                } else {
                    wait_go(&world, 0)?;
                    let mut buf = vec![SENTINEL; n + 4];
                    let st = world.recv(&mut buf, 0, tag)?;
                    assert_status(&st, 0, tag, n);
                    check_pattern(&buf[..n], seed(i), "issend");
                    assert_untouched(&buf[n..], "issend");
                }
            }
            Ok(())
        })
        .unwrap();
}

fn ssend_returns_only_after_receive_is_posted(dev: DeviceKind) {
    let limit = 1000;
    let sizes = [0, 16, 700, limit + 1, 50_000];
    for (i, &n) in sizes.iter().enumerate() {
        let posting = AtomicBool::new(false);
        cfg(dev, 2, limit)
            .run(|world| {
                let data = pattern(mix(&[0x55E, i as u64]), n);
                if world.rank() == 0 {
                    world.ssend(&data, 1, 4)?;
                    assert!(posting.load(Ordering::SeqCst), "ssend of {n} bytes returned before the receive existed");
                } else {
                    pause();
                    posting.store(true, Ordering::SeqCst);
                    let mut buf = vec![0u8; n];
                    let st = world.recv(&mut buf, 0, 4)?;
                    assert_status(&st, 0, 4, n);
                    assert_bytes_eq(&buf, &data, "ssend");
                }
                Ok(())
            })
            .unwrap();
    }
}

fn ssend_into_preposted_receive(dev: DeviceKind) {
    cfg(dev, 2, 1000)
        .run(|world| {
            let sizes = [3usize, 800, 1001, 30_000];
            if world.rank() == 0 {
                wait_go(&world, 1)?;
                for (i, &n) in sizes.iter().enumerate() {
                    world.ssend(&pattern(i as u64, n), 1, i as i32)?;
                }
            } else {
                let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0; n]).collect();
                world.scope(|s| {
                    let mut reqs = Vec::new();
                    for (i, b) in bufs.iter_mut().enumerate() {
                        reqs.push(s.irecv(b, 0, i as i32)?);
                    }
                    go(&world, 0)?;
                    waitall(&mut reqs).map(drop)
                })?;
                for (i, b) in bufs.iter().enumerate() {
                    check_pattern(b, i as u64, "ssend into preposted");
                }
            }
            Ok(())
        })
        .unwrap();
}

fn zero_byte_messages(dev: DeviceKind) {
    cfg(dev, 2, 0)
        .run(|world| {
            if world.rank() == 1 {
                world.send::<u8>(&[], 0, 1)?;
                world.send::<f64>(&[], 0, 2)?;
                world.ssend::<u32>(&[], 0, 3)?;
                world.send::<u8>(&[], 0, 4)?;
                world.scope(|s| s.isend::<u64>(&[], 0, 5)?.wait())?;
                return Ok(());
            }
            let mut buf = [7.5f64; 4];
            let st = world.recv(&mut buf, 1, 1)?;
            assert_status(&st, 1, 1, 0);
            assert_eq!((st.count, buf), (0, [7.5; 4]));
            let st = world.recv::<f64>(&mut [], 1, 2)?;
            assert_eq!((st.count, st.bytes), (0, 0));
            let st = world.recv::<u8>(&mut [], ANY_SOURCE, ANY_TAG)?;
            assert_status(&st, 1, 3, 0);
            let probed = world.probe(1, 4)?;
            assert_eq!((probed.bytes, probed.count), (0, 0));
            let mut empty: [u16; 0] = [];
            let st = world.recv(&mut empty, 1, 4)?;
            assert_eq!(st.count, 0);
            let mut buf = [9u64; 2];
            let st = world.scope(|s| s.irecv(&mut buf, 1, 5)?.wait())?;
            assert_eq!((st.count, buf), (0, [9; 2]));
            Ok(())
        })
        .unwrap();
}

fn status_counts_for_element_types(dev: DeviceKind) {
    run(dev, 2, |world| {
        if world.rank() == 1 {
            world.send(&[1.5f64, -2.0, 3.25, 0.0, 1e300], 0, 0)?;
            world.send(&[1u16, 2, 3], 0, 1)?;
            world.send(&[[1u8, 2, 3]; 4], 0, 2)?;
            return Ok(());
        }
        let mut f = [0.0f64; 8];
        let st = world.recv(&mut f, 1, 0)?;
        assert_eq!((st.count, st.bytes), (5, 40));
        assert_eq!(&f[..5], &[1.5, -2.0, 3.25, 0.0, 1e300]);
        assert_eq!(f[5..], [0.0; 3]);
        assert_eq!(st.count_of::<u8>(), Some(40));
        assert_eq!(st.count_of::<u32>(), Some(10));
        assert_eq!(st.count_of::<f64>(), Some(5));
        assert_eq!(st.count_of::<[u8; 3]>(), None);
        assert_eq!(st.count_of::<[u8; 16]>(), None);
        assert_eq!(st.count_of::<()>(), None);

        let mut h = [0u16; 10];
        let st = world.recv(&mut h, 1, 1)?;
        assert_eq!((st.count, st.bytes, &h[..3]), (3, 6, &[1u16, 2, 3][..]));
        assert_eq!(st.count_of::<u32>(), None);

        // Probes count bytes; received as another element type the count follows the type.
        let probed = world.probe(1, 2)?;
        assert_eq!((probed.count, probed.bytes), (12, 12));
        assert_eq!(probed.count_of::<[u8; 3]>(), Some(4));
        let mut raw = [0u8; 12];
        let st = world.recv(&mut raw, 1, 2)?;
        assert_eq!(st.count, 12);
        assert_eq!(raw, [1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3]);
        Ok(())
    })
    .unwrap();
}

// ---------------------------------------------------------------------------------- nonblocking

fn waitall_many_mixed_sizes(dev: DeviceKind) {
    const N: usize = 60;
    let size = |i: usize| [0, 9, 24, 600, 1024, 1025, 9000, 70_000][i % 8];
    cfg(dev, 2, 1024)
        .run(|world| {
            let rank = world.rank();
            let peer = 1 - rank;
            let out: Vec<Vec<u8>> = (0..N).map(|i| pattern(mix(&[rank as u64, i as u64]), size(i))).collect();
            let mut inc: Vec<Vec<u8>> = (0..N).map(|i| vec![SENTINEL; size(i) + 3]).collect();
            let statuses = world.scope(|s| {
                let mut reqs = Vec::new();
                // Interleave receives and sends, half of the receives posted before the sends.
                for (i, b) in inc.iter_mut().enumerate() {
                    reqs.push(s.irecv(b, peer, i as i32)?);
                    if i % 2 == 0 {
                        reqs.push(s.isend(&out[i], peer, i as i32)?);
                    }
                }
                for (i, o) in out.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
                    reqs.push(s.isend(o, peer, i as i32)?);
                }
                waitall(&mut reqs)
            })?;
            assert_eq!(statuses.len(), N + N);
            for (i, b) in inc.iter().enumerate() {
                check_pattern(&b[..size(i)], mix(&[peer as u64, i as u64]), "waitall");
                assert_untouched(&b[size(i)..], "waitall");
            }
            let recvs: Vec<&Status> = statuses.iter().filter(|st| st.source == peer).collect();
            assert_eq!(recvs.len(), N);
            Ok(())
        })
        .unwrap();
}

/// Both ranks keep windows of rendezvous messages in flight towards each other (OSU bibw's
/// pattern) for several rounds; every message arrives intact and every request completes.
/// (On tcp, payloads written on the way while a later control frame was sent used to leave
/// their send requests unfinished.)
fn windows_of_rendezvous_messages_in_both_directions(dev: DeviceKind) {
    const WINDOW: usize = 16;
    const SIZE: usize = 200_000;
    // Small socket buffers (tcp) keep payloads queued while control frames go out. (Not below
    // the 64 KiB loopback MSS: a receive window that cannot reopen to one MSS stalls the link.)
    cfg(dev, 2, 1024)
        .tcp_send_buffer(128 * 1024)
        .tcp_recv_buffer(128 * 1024)
        .run(|world| {
            let rank = world.rank();
            let peer = 1 - rank;
            for round in 0..12u64 {
                let out: Vec<Vec<u8>> =
                    (0..WINDOW).map(|i| pattern(mix(&[rank as u64, round, i as u64]), SIZE)).collect();
                let mut inc = vec![vec![0u8; SIZE]; WINDOW];
                world.scope(|s| {
                    let mut reqs = Vec::new();
                    for b in inc.iter_mut() {
                        reqs.push(s.irecv(b, peer, 4)?);
                    }
                    for o in &out {
                        reqs.push(s.isend(o, peer, 4)?);
                    }
                    waitall(&mut reqs).map(drop)
                })?;
                for (i, b) in inc.iter().enumerate() {
                    check_pattern(b, mix(&[peer as u64, round, i as u64]), "window");
                }
            }
            Ok(())
        })
        .unwrap();
}

fn waitany_returns_each_index_once(dev: DeviceKind) {
    const N: usize = 20;
    let size = |i: usize| if i % 4 == 1 { 20_000 } else { 8 * i };
    cfg(dev, 2, 4096)
        .run(|world| {
            if world.rank() == 1 {
                wait_go(&world, 0)?;
                // A fixed scrambled order, so completions arrive out of posting order.
                let order: Vec<usize> = (0..N).map(|k| (k * 7 + 3) % N).collect();
                let bufs: Vec<Vec<u8>> = order.iter().map(|&i| pattern(i as u64, size(i))).collect();
                return world.scope(|s| {
                    let mut reqs = Vec::new();
                    for (b, &i) in bufs.iter().zip(&order) {
                        reqs.push(s.isend(b, 0, i as i32)?);
                    }
                    waitall(&mut reqs).map(drop)
                });
            }
            let mut bufs: Vec<Vec<u8>> = (0..N).map(|i| vec![0; size(i)]).collect();
            let seen = world.scope(|s| {
                let mut reqs = Vec::new();
                for (i, b) in bufs.iter_mut().enumerate() {
                    reqs.push(s.irecv(b, 1, i as i32)?);
                }
                go(&world, 1)?;
                let mut seen = Vec::new();
                while let Some((index, st)) = waitany(&mut reqs)? {
                    assert!(!reqs[index].is_active(), "a completed request becomes inactive");
                    assert_status(&st, 1, index as i32, size(index));
                    seen.push(index);
                }
                assert!(reqs.iter().all(|r| !r.is_active()));
                assert!(waitany(&mut reqs)?.is_none());
                // Inactive requests report the empty status.
                let empty = waitall(&mut reqs)?;
                assert!(empty.iter().all(|st| st.bytes == 0 && !st.cancelled));
                Ok::<_, Error>(seen)
            })?;
            let mut sorted = seen.clone();
            sorted.sort();
            assert_eq!(sorted, (0..N).collect::<Vec<_>>(), "each index exactly once: {seen:?}");
            for (i, b) in bufs.iter().enumerate() {
                check_pattern(b, i as u64, "waitany");
            }
            Ok(())
        })
        .unwrap();
}

fn testany_and_testall(dev: DeviceKind) {
    const N: usize = 5;
    cfg(dev, 2, 1000)
        .run(|world| {
            if world.rank() == 1 {
                wait_go(&world, 0)?;
                for i in (0..N).rev() {
                    world.send(&pattern(i as u64, 100 + 700 * i), 0, i as i32)?;
                }
                wait_go(&world, 0)?;
                for i in 0..N {
                    world.send(&[i as u32; 3], 0, 10 + i as i32)?;
                }
                return Ok(());
            }
            let mut bufs: Vec<Vec<u8>> = (0..N).map(|i| vec![0; 100 + 700 * i]).collect();
            world.scope(|s| {
                let mut reqs = Vec::new();
                for (i, b) in bufs.iter_mut().enumerate() {
                    reqs.push(s.irecv(b, 1, i as i32)?);
                }
                // Nothing was sent yet: nothing can have completed.
                assert!(testany(&mut reqs)?.is_none());
                assert!(testall(&mut reqs)?.is_none());
                assert!(reqs.iter().all(Request::is_active));
                go(&world, 1)?;
                let mut seen = [false; N];
                let mut left = N;
                while left > 0 {
                    match testany(&mut reqs)? {
                        Some((i, st)) => {
                            assert!(!seen[i], "index {i} reported twice");
                            seen[i] = true;
                            assert_status(&st, 1, i as i32, 100 + 700 * i);
                            left -= 1;
                        }
                        None => std::thread::yield_now(),
                    }
                }
                assert!(testany(&mut reqs)?.is_none(), "no active request left");
                Ok::<_, Error>(())
            })?;
            for (i, b) in bufs.iter().enumerate() {
                check_pattern(b, i as u64, "testany");
            }

            let mut small = [[0u32; 3]; N];
            let statuses = world.scope(|s| {
                let mut reqs = Vec::new();
                for (i, b) in small.iter_mut().enumerate() {
                    reqs.push(s.irecv(b, 1, 10 + i as i32)?);
                }
                assert!(testall(&mut reqs)?.is_none());
                go(&world, 1)?;
                loop {
                    if let Some(statuses) = testall(&mut reqs)? {
                        break Ok::<_, Error>(statuses);
                    }
                    std::thread::yield_now();
                }
            })?;
            for (i, st) in statuses.iter().enumerate() {
                assert_eq!((st.source, st.tag, st.count), (1, 10 + i as i32, 3));
                assert_eq!(small[i], [i as u32; 3]);
            }
            Ok(())
        })
        .unwrap();
}

fn test_on_an_inactive_request_is_an_error(dev: DeviceKind) {
    run(dev, 1, |world| {
        let mut buf = [0u8; 2];
        let sent = [4u8, 2];
        world.scope(|s| {
            let mut send = s.isend(&sent, 0, 0)?;
            let mut recv = s.irecv(&mut buf, 0, 0)?;
            for req in [&mut send, &mut recv] {
                while req.test()?.is_none() {
                    std::thread::yield_now();
                }
                assert!(!req.is_active());
                assert!(matches!(req.test(), Err(Error::InvalidArgument(_))));
            }
            Ok::<_, Error>(())
        })?;
        assert_eq!(buf, [4, 2]);
        Ok(())
    })
    .unwrap();
}

fn cancel_unmatched_irecv(dev: DeviceKind) {
    run(dev, 2, |world| {
        if world.rank() == 1 {
            wait_go(&world, 0)?;
            world.send(&[1u8, 2, 3, 4], 0, 42)?;
            return Ok(());
        }
        let mut buf = [0xABu8; 16];
        let st = world.scope(|s| {
            let req = s.irecv(&mut buf, 1, 42)?;
            req.cancel()?;
            req.cancel()?; // cancelling twice is harmless
            req.wait()
        })?;
        assert!(st.cancelled, "{st:?}");
        assert_eq!(buf, [0xAB; 16]);
        let st = world.scope(|s| {
            let req = s.irecv(&mut buf, ANY_SOURCE, ANY_TAG)?;
            req.cancel()?;
            req.wait()
        })?;
        assert!(st.cancelled, "{st:?}");
        assert_eq!(buf, [0xAB; 16]);
        // The cancelled receives did not swallow the message sent afterwards.
        go(&world, 1)?;
        let mut got = [0u8; 4];
        let st = world.recv(&mut got, 1, 42)?;
        assert_status(&st, 1, 42, 4);
        assert_eq!(got, [1, 2, 3, 4]);
        Ok(())
    })
    .unwrap();
}

fn cancel_after_match_has_no_effect(dev: DeviceKind) {
    run(dev, 2, |world| {
        if world.rank() == 1 {
            wait_go(&world, 0)?;
            world.send(&[9u8, 9, 9], 0, 42)?;
            world.send(&[1u8], 0, 43)?;
            return Ok(());
        }
        let mut buf = [0u8; 3];
        let st = world.scope(|s| {
            let req = s.irecv(&mut buf, 1, 42)?;
            go(&world, 1)?;
            // Tag 43 was sent after tag 42 on the same channel: once it is here, 42 has matched.
            let mut one = [0u8];
            world.recv(&mut one, 1, 43)?;
            req.cancel()?;
            req.wait()
        })?;
        assert!(!st.cancelled);
        assert_status(&st, 1, 42, 3);
        assert_eq!(buf, [9, 9, 9]);
        Ok(())
    })
    .unwrap();
}

fn dropped_and_forgotten_irecv_are_released_at_scope_end(dev: DeviceKind) {
    let sizes = [10usize, 3000, 24, 0, 5000];
    cfg(dev, 2, 1000)
        .run(|world| {
            if world.rank() == 1 {
                wait_go(&world, 0)?;
                for (i, &n) in sizes.iter().enumerate() {
                    world.send(&pattern(i as u64, n), 0, 7)?;
                }
                return Ok(());
            }
            let mut stale_a = vec![0x5Au8; 8192];
            let mut stale_b = vec![0x5Au8; 8192];
            let mut stale_c = vec![0x5Au8; 8192];
            world.scope(|s| {
                std::mem::forget(s.irecv(&mut stale_a, 1, 7)?);
                std::mem::forget(s.irecv(&mut stale_b, ANY_SOURCE, ANY_TAG)?);
                drop(s.irecv(&mut stale_c, 1, 7)?);
                Ok::<_, Error>(())
            })?; // must not hang
            go(&world, 1)?;
            for (i, &n) in sizes.iter().enumerate() {
                let mut buf = vec![SENTINEL; 8192];
                let st = world.recv(&mut buf, 1, 7)?;
                assert_status(&st, 1, 7, n);
                check_pattern(&buf[..n], i as u64, "traffic after leaked receives");
                assert_untouched(&buf[n..], "traffic after leaked receives");
            }
            for stale in [&stale_a, &stale_b, &stale_c] {
                assert!(stale.iter().all(|&b| b == 0x5A), "a released receive buffer was written");
            }
            Ok(())
        })
        .unwrap();
}

/// A forgotten rendezvous isend (and a forgotten eager issend) still deliver the right data after
/// the sender's scope ended and its buffer was overwritten and freed; with `sender_exits` the
/// sending rank has even finished its program before the receiver asks.
fn forgotten_sends(dev: DeviceKind, sender_exits: bool) {
    let big_seed = 0xF0F0;
    cfg(dev, 2, 1000)
        .run(|world| {
            if world.rank() == 0 {
                let mut data = pattern(big_seed, BIG);
                world.scope(|s| {
                    std::mem::forget(s.isend(&data, 1, 3)?);
                    Ok::<_, Error>(())
                })?;
                data.fill(0xFF);
                drop(data);
                let mut mid = pattern(big_seed + 1, 5000);
                let small = pattern(big_seed + 2, 100);
                world.scope(|s| {
                    std::mem::forget(s.issend(&mid, 1, 4)?);
                    std::mem::forget(s.issend(&small, 1, 5)?);
                    Ok::<_, Error>(())
                })?;
                mid.fill(0);
                drop(mid);
                go(&world, 1)?;
                if !sender_exits {
                    wait_go(&world, 1)?;
                }
            } else {
                wait_go(&world, 0)?;
                if sender_exits {
                    pause();
                }
                let mut buf = vec![SENTINEL; BIG + 1];
                let st = world.recv(&mut buf, 0, 3)?;
                assert_status(&st, 0, 3, BIG);
                check_pattern(&buf[..BIG], big_seed, "forgotten rendezvous isend");
                assert_untouched(&buf[BIG..], "forgotten rendezvous isend");
                let mut buf = vec![0u8; 5000];
                world.recv(&mut buf, 0, 4)?;
                check_pattern(&buf, big_seed + 1, "forgotten rendezvous issend");
                let mut buf = vec![0u8; 100];
                world.recv(&mut buf, 0, 5)?;
                check_pattern(&buf, big_seed + 2, "forgotten eager issend");
                if !sender_exits {
                    go(&world, 0)?;
                }
            }
            Ok(())
        })
        .unwrap();
}

fn forgotten_large_isend_still_delivers(dev: DeviceKind) {
    forgotten_sends(dev, false);
}

fn forgotten_large_isend_delivers_after_sender_exited(dev: DeviceKind) {
    forgotten_sends(dev, true);
}

/// A request started on an outer scope while an inner scope is open belongs to the outer scope
/// (its type says so: `Request<'outer>` can leave the inner closure), so the inner scope's end
/// must not release it.
fn outer_scope_request_started_inside_inner_scope(dev: DeviceKind) {
    run(dev, 2, |world| {
        if world.rank() == 1 {
            wait_go(&world, 0)?;
            world.send(&[5u8, 6, 7], 0, 3)?;
            return Ok(());
        }
        let mut buf = [0u8; 3];
        let got = world.scope(|outer| {
            let req = world.scope(|_inner| outer.irecv(&mut buf, 1, 3))?;
            go(&world, 1)?;
            req.wait()
        });
        let st = got.expect("receive started on the outer scope");
        assert_status(&st, 1, 3, 3);
        assert_eq!(buf, [5, 6, 7]);
        Ok(())
    })
    .unwrap();
}

/// Same for a rendezvous send started on the outer scope inside an inner one.
fn outer_scope_send_started_inside_inner_scope(dev: DeviceKind) {
    cfg(dev, 2, 1000)
        .run(|world| {
            if world.rank() == 1 {
                let mut buf = vec![0u8; 5000];
                world.recv(&mut buf, 0, 3)?;
                check_pattern(&buf, 77, "outer-scope send");
                return Ok(());
            }
            let data = pattern(77, 5000);
            world.scope(|outer| {
                let req = world.scope(|_inner| outer.isend(&data, 1, 3))?;
                let st = req.wait().expect("send started on the outer scope");
                assert_eq!((st.tag, st.bytes), (3, 5000));
                Ok(())
            })
        })
        .unwrap();
}

/// A rank that polls a request with `test` (instead of blocking in `wait`) must also learn that
/// the job was aborted, or it spins forever: here rank 0 polls a receive from ANY_SOURCE while
/// rank 1 panics and rank 2 stays alive (so the receive is not impossible by liveness alone).
fn polling_with_test_notices_an_aborted_job(dev: DeviceKind) {
    let done = Barrier::new(2);
    let polled = Mutex::new(None);
    let err = run(dev, 3, |world| {
        let mut buf = [0u8; 1];
        match world.rank() {
            1 => panic!("gone"),
            0 => {
                let got = world.scope(|s| {
                    let mut req = s.irecv(&mut buf, ANY_SOURCE, 0)?;
                    // A guard against hanging the suite, not a timing assertion.
                    let deadline = std::time::Instant::now() + Duration::from_secs(3);
                    loop {
                        match req.test() {
                            Ok(None) if std::time::Instant::now() < deadline => std::thread::yield_now(),
                            other => break Ok::<_, Error>(other),
                        }
                    }
                })?;
                *polled.lock().unwrap() = Some(outcome(got));
                done.wait();
            }
            _ => {
                // Stays alive (blocked, then at the barrier) until rank 0 is done polling.
                let _ = world.recv(&mut buf, 0, 0);
                done.wait();
            }
        }
        Ok(())
    })
    .unwrap_err();
    assert!(matches!(&err, Error::RankFailed { rank: 1, .. }), "{err:?}");
    let polled = polled.into_inner().unwrap();
    assert!(matches!(&polled, Some(Outcome::PeerFailed { rank: 1, .. })), "rank 0's test() returned {polled:?}");
}

fn cancel_unmatched_sends(dev: DeviceKind) {
    cfg(dev, 2, 1000)
        .run(|world| {
            if world.rank() == 1 {
                wait_go(&world, 0)?;
                // The cancelled messages vanished: the next tag-5 message is the small one.
                let mut buf = [0u8; 8];
                let st = world.recv(&mut buf, 0, 5)?;
                assert_status(&st, 0, 5, 1);
                assert_eq!(buf[0], 42);
                assert_eq!(world.iprobe(0, ANY_TAG)?, None);
                return Ok(());
            }
            let big = pattern(9, 5000);
            let small = [7u8; 10];
            let (a, b) = world.scope(|s| {
                // Rendezvous send and synchronous eager send: both wait for the receiver, which
                // does not post its receive before our go.
                let rendezvous = s.isend(&big, 1, 5)?;
                let synchronous = s.issend(&small, 1, 5)?;
                rendezvous.cancel()?;
                synchronous.cancel()?;
                Ok::<_, Error>((rendezvous.wait()?, synchronous.wait()?))
            })?;
            assert!(a.cancelled && b.cancelled, "{a:?} {b:?}");
            world.send(&[42u8], 1, 5)?;
            go(&world, 1)?;
            Ok(())
        })
        .unwrap();
}

/// With every other rank gone, a rank can still receive from itself: an ANY_SOURCE receive must
/// not be declared impossible.
fn any_source_receive_from_self_after_others_exited(dev: DeviceKind) {
    run(dev, 2, |world| {
        if world.rank() == 1 {
            return Ok(());
        }
        // Rank 1 has exited once this fails.
        assert!(matches!(world.recv(&mut [0u8; 1], 1, 0), Err(Error::PeerExited { rank: 1 })));
        let mut buf = [0u8; 1];
        let st = world.scope(|s| {
            let mut recv = s.irecv(&mut buf, ANY_SOURCE, 5)?;
            let early = recv.test();
            assert!(matches!(early, Ok(None)), "{early:?}");
            s.isend(&[42u8], 0, 5)?.wait()?;
            recv.wait()
        })?;
        assert_status(&st, 0, 5, 1);
        assert_eq!(buf, [42]);
        Ok(())
    })
    .unwrap();
}

/// Same, with the matching self-message still waiting in the sender queue (more self-sends than
/// the ring holds) when the blocking ANY_SOURCE receive starts.
fn any_source_receive_of_queued_self_send_after_others_exited(dev: DeviceKind) {
    run(dev, 2, |world| {
        if world.rank() == 1 {
            return Ok(());
        }
        assert!(matches!(world.recv(&mut [0u8; 1], 1, 0), Err(Error::PeerExited { rank: 1 })));
        let filler: Vec<[u8; 1]> = (0..300).map(|i| [i as u8]).collect();
        let last = [99u8];
        let got = world.scope(|s| {
            let mut sends = Vec::new();
            for f in &filler {
                sends.push(s.isend(f, 0, 1)?);
            }
            sends.push(s.isend(&last, 0, 2)?);
            let mut buf = [0u8; 1];
            let got = world.recv(&mut buf, ANY_SOURCE, 2).map(|st| (st, buf));
            waitall(&mut sends)?;
            for i in 0..300 {
                let mut one = [0u8];
                world.recv(&mut one, 0, 1)?;
                assert_eq!(one[0], i as u8);
            }
            Ok::<_, Error>(got)
        })?;
        let (st, buf) = got.expect("the queued self-message matches");
        assert_status(&st, 0, 2, 1);
        assert_eq!(buf, [99]);
        Ok(())
    })
    .unwrap();
}

fn waitall_reports_first_error_and_completes_the_rest(dev: DeviceKind) {
    run(dev, 2, |world| {
        if world.rank() == 1 {
            for tag in 0..3 {
                world.send(&[tag as u8 + 1; 8], 0, tag)?;
            }
            return Ok(());
        }
        let (mut a, mut b, mut c) = ([0u8; 8], [SENTINEL; 6], [0u8; 8]);
        let result = world.scope(|s| {
            let mut reqs = vec![s.irecv(&mut a, 1, 0)?, s.irecv(&mut b[..4], 1, 1)?, s.irecv(&mut c, 1, 2)?];
            Ok::<_, Error>(waitall(&mut reqs))
        })?;
        assert!(
            matches!(result, Err(Error::Truncated { message_bytes: 8, capacity: 4, source_rank: 1, tag: 1 })),
            "{result:?}"
        );
        assert_eq!((a, c), ([1; 8], [3; 8]));
        assert_eq!(b, [2, 2, 2, 2, SENTINEL, SENTINEL]);
        Ok(())
    })
    .unwrap();
}

// -------------------------------------------------------------------- sendrecv and friends

fn sendrecv_and_replace_in_a_ring(dev: DeviceKind) {
    for np in [2, 3, 5] {
        for len in [3usize, 3000] {
            run(dev, np, |world| {
                let (rank, n) = (world.rank(), world.size());
                let (right, left) = ((rank + 1) % n, (rank + n - 1) % n);
                let block = |r: usize| -> Vec<u64> { (0..len).map(|k| (r * 1_000_000 + k) as u64).collect() };
                let out = block(rank);

                let mut inc = vec![0u64; len];
                let st = world.sendrecv(&out, right, 11, &mut inc, left, 11)?;
                assert_eq!((st.source, st.tag, st.count), (left, 11, len));
                assert_eq!(inc, block(left));

                let mut inc = vec![0u64; len + 1];
                let st = world.sendrecv(&out, right, 12, &mut inc, ANY_SOURCE, ANY_TAG)?;
                assert_eq!((st.source, st.tag, st.count), (left, 12, len));
                assert_eq!(&inc[..len], &block(left)[..]);

                // Shift a block all the way around: n replace steps bring our own back.
                let mut buf = out.clone();
                for step in 1..=n {
                    let st = world.sendrecv_replace(&mut buf, right, 13, left, 13)?;
                    assert_eq!((st.source, st.count), (left, len));
                    assert_eq!(buf, block((rank + n * step - step) % n), "after {step} steps");
                }
                assert_eq!(buf, out);
                Ok(())
            })
            .unwrap();
        }
    }
}

fn sendrecv_with_itself(dev: DeviceKind) {
    run(dev, 1, |world| {
        let mut got = [0u32; 3];
        let st = world.sendrecv(&[1u32, 2, 3], 0, 1, &mut got, 0, 1)?;
        assert_eq!((st.source, st.count, got), (0, 3, [1, 2, 3]));
        let mut big: Vec<u8> = pattern(1, 50_000);
        world.sendrecv_replace(&mut big, 0, 2, 0, 2)?;
        check_pattern(&big, 1, "self sendrecv_replace");
        Ok(())
    })
    .unwrap();
}

// ------------------------------------------------------------------------------------- probes

fn probe_and_iprobe_report_envelope_and_size(dev: DeviceKind) {
    cfg(dev, 2, 8192)
        .run(|world| {
            if world.rank() == 1 {
                wait_go(&world, 0)?;
                world.send(&[7u32; 37], 0, 9)?;
                world.send(&pattern(3, 20_000), 0, 10)?; // rendezvous
                return Ok(());
            }
            assert_eq!(world.iprobe(1, 9)?, None, "nothing was sent yet");
            assert_eq!(world.iprobe(ANY_SOURCE, ANY_TAG)?, None);
            go(&world, 1)?;
            let st = world.probe(1, 9)?;
            assert_status(&st, 1, 9, 148);
            assert_eq!((st.count, st.count_of::<u32>()), (148, Some(37)));
            // Probing does not consume: the same message is reported again.
            let st = world.probe(ANY_SOURCE, ANY_TAG)?;
            assert_eq!((st.source, st.tag, st.bytes), (1, 9, 148));
            assert_eq!(world.iprobe(1, 9)?.map(|s| s.bytes), Some(148));
            let mut buf = [0u32; 37];
            world.recv(&mut buf, 1, 9)?;
            assert_eq!(buf, [7; 37]);

            let st = loop {
                if let Some(st) = world.iprobe(ANY_SOURCE, 10)? {
                    break st;
                }
                std::thread::yield_now();
            };
            assert_status(&st, 1, 10, 20_000);
            assert_eq!(world.iprobe(1, 11)?, None);
            assert_eq!(world.iprobe(1, ANY_TAG)?.map(|s| s.tag), Some(10));
            let mut buf = vec![0u8; st.bytes];
            world.recv(&mut buf, st.source, st.tag)?;
            check_pattern(&buf, 3, "probed rendezvous");
            assert_eq!(world.iprobe(ANY_SOURCE, ANY_TAG)?, None);
            Ok(())
        })
        .unwrap();
}

// ------------------------------------------------------------------------------------ objects

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
enum Shape {
    Circle { radius: f64 },
    Polygon(Vec<(i32, i32)>),
    Empty,
    Labeled(String, Box<Shape>),
}

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
struct Record {
    name: String,
    values: Vec<f64>,
    maybe: Option<u32>,
    nothing: Option<String>,
    shape: Shape,
    shapes: Vec<Shape>,
}

fn record(rank: usize, n: usize) -> Record {
    Record {
        name: format!("rank {rank} says héllo ✓"),
        values: (0..n).map(|i| i as f64 * 0.5 - rank as f64).collect(),
        maybe: Some(rank as u32 * 3),
        nothing: None,
        shape: Shape::Labeled("outer".into(), Box::new(Shape::Polygon(vec![(1, 2), (-3, 4)]))),
        shapes: vec![
            Shape::Circle { radius: 2.5 },
            Shape::Empty,
            Shape::Labeled(String::new(), Box::new(Shape::Empty)),
        ],
    }
}

fn objects_roundtrip(dev: DeviceKind) {
    cfg(dev, 3, 1000)
        .run(|world| {
            let rank = world.rank();
            if rank != 0 {
                world.send_obj(&record(rank, 10), 0, 1)?;
                world.send_obj(&record(rank, 20_000), 0, 2)?; // well above the eager limit
                let map: HashMap<String, Vec<i32>> =
                    (0..50).map(|i| (format!("key{i}"), vec![i, -i, rank as i32])).collect();
                world.send_obj(&map, 0, 3)?;
                world.send_obj("not a record", 0, 4)?;
                return Ok(());
            }
            for src in [2, 1] {
                let (got, st): (Record, _) = world.recv_obj(src, 1)?;
                assert_eq!(got, record(src, 10));
                assert_eq!((st.source, st.tag), (src, 1));
                assert_eq!(st.count, st.bytes);
            }
            for _ in 0..2 {
                let (got, st): (Record, _) = world.recv_obj(ANY_SOURCE, 2)?;
                assert_eq!(got, record(st.source, 20_000));
                assert!(st.bytes > 1000);
            }
            for src in [1, 2] {
                // Per-source order: the map (tag 3) comes before that source's tag-4 message.
                let (map, st): (HashMap<String, Vec<i32>>, _) = world.recv_obj(src, ANY_TAG)?;
                assert_eq!((st.source, st.tag), (src, 3));
                assert_eq!(map.len(), 50);
                for i in 0..50 {
                    assert_eq!(map[&format!("key{i}")], [i, -i, st.source as i32]);
                }
            }
            for src in [1, 2] {
                let got = world.recv_obj::<Record>(src, 4);
                assert!(matches!(got, Err(Error::Serialization(_))), "{got:?}");
            }
            Ok(())
        })
        .unwrap();
}

// ------------------------------------------------------------------------------------- errors

fn rank_out_of_range(dev: DeviceKind) {
    run(dev, 2, |world| {
        let out_of_range = |r: Result<_>, rank: usize| {
            assert!(matches!(r, Err(Error::RankOutOfRange { rank: got, size: 2 }) if got == rank), "{r:?}");
        };
        let mut buf = [0u8; 4];
        out_of_range(world.send(&[1u8], 2, 0).map(drop), 2);
        out_of_range(world.ssend(&[1u8], usize::MAX, 0).map(drop), usize::MAX);
        out_of_range(world.recv(&mut buf, 5, 0).map(drop), 5);
        out_of_range(world.recv(&mut buf, 2, ANY_TAG).map(drop), 2);
        out_of_range(world.probe(3, 0).map(drop), 3);
        out_of_range(world.iprobe(3, 0).map(drop), 3);
        out_of_range(world.sendrecv(&[1u8], 7, 0, &mut buf, 0, 0).map(drop), 7);
        out_of_range(world.sendrecv(&[1u8], 0, 0, &mut buf, 9, 0).map(drop), 9);
        out_of_range(world.send_obj(&1u32, 2, 0), 2);
        world.scope(|s| {
            out_of_range(s.isend(&[1u8], 2, 0).map(drop), 2);
            out_of_range(s.issend(&[1u8], 4, 0).map(drop), 4);
            out_of_range(s.irecv(&mut buf, 2, 0).map(drop), 2);
        });
        Ok(())
    })
    .unwrap();
}

fn tag_out_of_range(dev: DeviceKind) {
    run(dev, 2, |world| {
        let bad_tag = |r: Result<_>, tag: i32| {
            assert!(matches!(r, Err(Error::TagOutOfRange { tag: got, max: TAG_UB }) if got == tag), "{r:?}");
        };
        let peer = 1 - world.rank();
        let mut buf = [0u8; 4];
        bad_tag(world.send(&[1u8], peer, -3).map(drop), -3);
        bad_tag(world.send(&[1u8], peer, ANY_TAG).map(drop), ANY_TAG);
        bad_tag(world.ssend(&[1u8], peer, i32::MIN).map(drop), i32::MIN);
        bad_tag(world.recv(&mut buf, peer, -5).map(drop), -5);
        bad_tag(world.probe(peer, -2).map(drop), -2);
        bad_tag(world.iprobe(ANY_SOURCE, -9).map(drop), -9);
        bad_tag(world.sendrecv(&[1u8], peer, ANY_TAG, &mut buf, peer, 0).map(drop), ANY_TAG);
        bad_tag(world.send_obj(&1u8, peer, -1), -1);
        world.scope(|s| {
            bad_tag(s.isend(&[1u8], peer, ANY_TAG).map(drop), ANY_TAG);
            bad_tag(s.irecv(&mut buf, peer, -5).map(drop), -5);
        });
        // The extremes of the valid range work.
        world.send(&[1u8, 2], peer, TAG_UB)?;
        world.send(&[3u8], peer, 0)?;
        let st = world.recv(&mut buf, peer, TAG_UB)?;
        assert_eq!((st.tag, st.bytes, &buf[..2]), (TAG_UB, 2, &[1u8, 2][..]));
        let st = world.recv(&mut buf, peer, 0)?;
        assert_eq!((st.tag, buf[0]), (0, 3));
        Ok(())
    })
    .unwrap();
}

/// Rank 1 sends `len` bytes that rank 0 receives into the first `cap` bytes of a larger buffer,
/// either after the message arrived (`recv_first == false`) or with the receive posted first.
fn truncation_case(dev: DeviceKind, limit: usize, len: usize, cap: usize, recv_first: bool) {
    let what = format!("limit {limit}, {len} bytes into {cap}, receive first: {recv_first}");
    cfg(dev, 2, limit)
        .run(|world| {
            let data = pattern(mix(&[len as u64, cap as u64]), len);
            if world.rank() == 1 {
                if recv_first {
                    wait_go(&world, 0)?;
                }
                world.send(&data, 0, 6)?; // succeeds: truncation is the receiver's error
                world.send(&data, 0, 7)?;
                return Ok(());
            }
            let mut big = vec![SENTINEL; cap + 64];
            let got = if recv_first {
                world.scope(|s| {
                    let req = s.irecv(&mut big[..cap], 1, 6)?;
                    go(&world, 1)?;
                    req.wait()
                })
            } else {
                world.probe(1, 6)?;
                world.recv(&mut big[..cap], 1, 6)
            };
            assert!(
                matches!(got, Err(Error::Truncated { message_bytes, capacity, source_rank: 1, tag: 6 })
                    if message_bytes == len && capacity == cap),
                "{what}: {got:?}"
            );
            assert_bytes_eq(&big[..cap], &data[..cap], &what);
            assert_untouched(&big[cap..], &what);
            // The channel is healthy afterwards.
            let mut buf = vec![0u8; len];
            let st = world.recv(&mut buf, 1, 7)?;
            assert_status(&st, 1, 7, len);
            assert_bytes_eq(&buf, &data, &what);
            Ok(())
        })
        .unwrap();
}

fn truncation_on_every_path(dev: DeviceKind) {
    for recv_first in [false, true] {
        truncation_case(dev, 1000, 20, 10, recv_first); // inline eager
        truncation_case(dev, 1000, 24, 0, recv_first);
        truncation_case(dev, 1000, 500, 300, recv_first); // spilled eager
        truncation_case(dev, 1000, 1000, 999, recv_first); // eager at the limit
        truncation_case(dev, 1000, 5000, 3000, recv_first); // rendezvous / receiver-first
        truncation_case(dev, 1000, 5000, 999, recv_first); // buffer below the eager limit
        truncation_case(dev, 1000, BIG, MIB, recv_first);
    }
}

fn truncation_of_typed_receive(dev: DeviceKind) {
    run(dev, 2, |world| {
        if world.rank() == 1 {
            world.send(&[1u32, 2, 3, 4, 5], 0, 0)?;
            return Ok(());
        }
        let mut buf = [0u32; 5];
        let got = world.recv(&mut buf[..3], 1, 0);
        assert!(
            matches!(got, Err(Error::Truncated { message_bytes: 20, capacity: 12, source_rank: 1, tag: 0 })),
            "{got:?}"
        );
        assert_eq!(buf, [1, 2, 3, 0, 0]);
        Ok(())
    })
    .unwrap();
}

fn element_size_mismatch(dev: DeviceKind) {
    run(dev, 2, |world| {
        if world.rank() == 1 {
            world.send(&[1u8, 2, 3, 4, 5, 6], 0, 0)?;
            world.send(&[1u8, 2, 3, 4, 5, 6], 0, 1)?;
            return Ok(());
        }
        let mut buf = [0u32; 4];
        let got = world.recv(&mut buf, 1, 0);
        assert!(matches!(got, Err(Error::ElementSize { bytes: 6, elem_size: 4 })), "{got:?}");
        let got = world.scope(|s| s.irecv(&mut buf, 1, 1)?.wait());
        assert!(matches!(got, Err(Error::ElementSize { bytes: 6, elem_size: 4 })), "{got:?}");
        Ok(())
    })
    .unwrap();
}

fn use_after_finalize(dev: DeviceKind) {
    run(dev, 2, |world| {
        let peer = 1 - world.rank();
        let clone = world.clone();
        world.finalize()?;
        let finalized = |r: Result<()>| assert!(matches!(r, Err(Error::Finalized(_))), "{r:?}");
        let mut buf = [0u8; 4];
        finalized(world.send(&[1u8], peer, 0));
        finalized(world.ssend(&[1u8], peer, 0));
        finalized(world.recv(&mut buf, peer, 0).map(drop));
        finalized(world.probe(ANY_SOURCE, ANY_TAG).map(drop));
        finalized(world.iprobe(peer, 0).map(drop));
        finalized(world.sendrecv(&[1u8], peer, 0, &mut buf, peer, 0).map(drop));
        finalized(world.send_obj(&"x", peer, 0));
        finalized(world.recv_obj::<String>(peer, 0).map(drop));
        finalized(world.finalize());
        finalized(clone.send(&[1u8], peer, 0)); // clones share the rank's state
        world.scope(|s| {
            finalized(s.isend(&[1u8], peer, 0).map(drop));
            finalized(s.irecv(&mut buf, peer, 0).map(drop));
        });
        Ok(())
    })
    .unwrap();
}

fn dead_peer_is_reported_not_waited_for(dev: DeviceKind) {
    cfg(dev, 3, 1000)
        .run(|world| {
            match world.rank() {
                0 => {
                    // Messages sent before the peer exited are still delivered...
                    let mut buf = [0u8; 8];
                    let st = world.recv(&mut buf, 1, 0)?;
                    assert_eq!((st.bytes, &buf[..3]), (3, &[1u8, 2, 3][..]));
                    // ...then receives that can never match fail instead of hanging.
                    let got = world.recv(&mut buf, 1, 0);
                    assert!(matches!(got, Err(Error::PeerExited { rank: 1 })), "{got:?}");
                    let got = world.scope(|s| s.irecv(&mut buf, 1, ANY_TAG)?.wait());
                    assert!(matches!(got, Err(Error::PeerExited { rank: 1 })), "{got:?}");
                    let got = world.send(&pattern(1, 5000), 1, 0); // rendezvous: needs the receiver
                    assert!(matches!(got, Err(Error::PeerExited { rank: 1 })), "{got:?}");
                    let got = world.ssend(&[1u8], 1, 0);
                    assert!(matches!(got, Err(Error::PeerExited { rank: 1 })), "{got:?}");
                    go(&world, 2)?;
                    wait_go(&world, 2)?;
                }
                1 => world.send(&[1u8, 2, 3], 0, 0)?, // and exit
                _ => {
                    wait_go(&world, 0)?;
                    go(&world, 0)?;
                    // Everyone else is gone (rank 0 exits right after our go): ANY_SOURCE fails.
                    let got = world.recv(&mut [0u8; 1], ANY_SOURCE, ANY_TAG);
                    assert!(matches!(got, Err(Error::PeerExited { .. })), "{got:?}");
                }
            }
            Ok(())
        })
        .unwrap();
}

fn dead_peer_simple(dev: DeviceKind) {
    // Rank 1 returns at once; rank 0's receive from it fails (Ok is returned either way).
    let results = run(dev, 2, |world| {
        if world.rank() == 1 {
            return Ok(None);
        }
        let got = world.recv(&mut [0u8; 1], 1, 0);
        Ok(Some(matches!(got, Err(Error::PeerExited { rank: 1 }))))
    })
    .unwrap();
    assert_eq!(results, [Some(true), None]);
}

/// What a surviving rank's blocked operation returned.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    PeerFailed { rank: usize, cause: String },
    Other(String),
}

fn outcome<T: std::fmt::Debug>(r: Result<T>) -> Outcome {
    match r {
        Err(Error::PeerFailed { rank, cause }) => Outcome::PeerFailed { rank, cause },
        other => Outcome::Other(format!("{other:?}")),
    }
}

/// Rank 1 fails (panics or returns an error) while ranks 0, 2 and 3 are blocked; the survivors
/// record what their blocked operation returned and wait for each other before returning, so no
/// survivor sees another one exit.
fn failing_rank(dev: DeviceKind, panics: bool, blocked_on_failed_rank: bool) -> (Error, Vec<(usize, Outcome)>) {
    let outcomes = Mutex::new(Vec::new());
    let survivors = Barrier::new(3);
    let err = run(dev, 4, |world| {
        let mut buf = [0u8; 4];
        let got = match world.rank() {
            1 => {
                pause(); // let the others block first (not required for the verdict)
                if panics {
                    panic!("kaboom from rank {}", world.rank());
                }
                return Err(Error::other("boom"));
            }
            0 if blocked_on_failed_rank => outcome(world.recv(&mut buf, 1, 0)),
            0 => outcome(world.recv(&mut buf, 2, 0)),
            2 => outcome(world.scope(|s| s.irecv(&mut buf, 3, 0)?.wait())),
            _ => outcome(world.recv(&mut buf, ANY_SOURCE, ANY_TAG)),
        };
        outcomes.lock().unwrap().push((world.rank(), got));
        survivors.wait();
        Ok(())
    })
    .unwrap_err();
    let mut outcomes = outcomes.into_inner().unwrap();
    outcomes.sort_by_key(|(rank, _)| *rank);
    (err, outcomes)
}

fn assert_survivors_got_peer_failed(outcomes: &[(usize, Outcome)], cause: &str) {
    assert_eq!(outcomes.iter().map(|(r, _)| *r).collect::<Vec<_>>(), [0, 2, 3]);
    for (rank, got) in outcomes {
        assert!(
            matches!(got, Outcome::PeerFailed { rank: 1, cause: c } if c.contains(cause)),
            "rank {rank} got {got:?}"
        );
    }
}

fn panicking_rank_fails_the_run_and_unblocks_others(dev: DeviceKind) {
    let (err, outcomes) = failing_rank(dev, true, false);
    assert!(matches!(&err, Error::RankFailed { rank: 1, cause } if cause.contains("kaboom from rank 1")), "{err:?}");
    assert_survivors_got_peer_failed(&outcomes, "kaboom from rank 1");
}

fn failing_rank_error_is_reported_with_its_message(dev: DeviceKind) {
    let (err, outcomes) = failing_rank(dev, false, false);
    assert!(matches!(&err, Error::RankFailed { rank: 1, cause } if cause.contains("boom")), "{err:?}");
    assert_survivors_got_peer_failed(&outcomes, "boom");
}

/// A rank blocked in a receive from the rank that panicked must get `PeerFailed` like every other
/// blocked rank (docs of `run` and `Error::PeerFailed`).
fn receive_from_the_panicking_rank_gets_peer_failed(dev: DeviceKind) {
    let (err, outcomes) = failing_rank(dev, true, true);
    assert!(matches!(&err, Error::RankFailed { rank: 1, .. }), "{err:?}");
    assert_survivors_got_peer_failed(&outcomes, "kaboom from rank 1");
}

fn run_returns_the_first_failure_when_others_fail_after_it(dev: DeviceKind) {
    // Survivors propagate their PeerFailed errors with `?`; the run still names rank 2's panic.
    let err = run(dev, 3, |world| {
        let mut buf = [0u8; 1];
        match world.rank() {
            2 => panic!("first failure"),
            0 => world.recv(&mut buf, 1, 0).map(drop),
            _ => world.recv(&mut buf, 0, 0).map(drop),
        }
    })
    .unwrap_err();
    assert!(matches!(&err, Error::RankFailed { rank: 2, cause } if cause.contains("first failure")), "{err:?}");
}

fn invalid_configuration(dev: DeviceKind) {
    let got = Config::new().device(dev).np(0).run(|_| Ok(()));
    assert!(matches!(got, Err(Error::InvalidArgument(_))), "{got:?}");
}

// -------------------------------------------------------------------------------- rank counts

fn sixteen_ranks_ring_and_all_to_all(dev: DeviceKind) {
    const NP: usize = 16;
    let size = |src: usize, dst: usize| (src * NP + dst) * 37 % 3000;
    let seed = |src: usize, dst: usize| mix(&[0xA2A, src as u64, dst as u64]);
    let sums = cfg(dev, NP, 1024)
        .run(|world| {
            let (rank, n) = (world.rank(), world.size());
            assert_eq!(n, NP);
            let (right, left) = ((rank + 1) % n, (rank + n - 1) % n);

            // Ring: pass a growing token all the way around, with isend/irecv per hop.
            let mut token = [0u64; 2];
            for round in 0..3u64 {
                let mut inc = [0u64; 2];
                let out = [token[0] + rank as u64, round];
                world.scope(|s| {
                    let mut reqs = vec![s.irecv(&mut inc, left, round as i32)?, s.isend(&out, right, round as i32)?];
                    waitall(&mut reqs).map(drop)
                })?;
                assert_eq!(inc[1], round);
                token = inc;
            }

            // All-to-all, ourselves included, mixing eager and rendezvous sizes.
            let out: Vec<Vec<u8>> = (0..n).map(|dst| pattern(seed(rank, dst), size(rank, dst))).collect();
            let mut inc: Vec<Vec<u8>> = (0..n).map(|src| vec![SENTINEL; size(src, rank) + 1]).collect();
            let statuses = world.scope(|s| {
                let mut reqs = Vec::new();
                for (src, b) in inc.iter_mut().enumerate() {
                    reqs.push(s.irecv(b, src, 77)?);
                }
                for k in 0..n {
                    let dst = (rank + k) % n;
                    reqs.push(s.isend(&out[dst], dst, 77)?);
                }
                waitall(&mut reqs)
            })?;
            for (src, b) in inc.iter().enumerate() {
                let len = size(src, rank);
                assert_status(&statuses[src], src, 77, len);
                check_pattern(&b[..len], seed(src, rank), "all-to-all");
                assert_untouched(&b[len..], "all-to-all");
            }
            Ok(token[0])
        })
        .unwrap();
    // After r rounds every rank holds the sum of a window of rank numbers.
    let ranks_sum = |from: usize, count: usize| (0..count).map(|k| ((from + NP - k) % NP) as u64).sum::<u64>();
    for (rank, &got) in sums.iter().enumerate() {
        assert_eq!(got, ranks_sum((rank + NP - 1) % NP, 3), "rank {rank}");
    }
}

fn single_rank_sends_to_itself(dev: DeviceKind) {
    cfg(dev, 1, 1000)
        .run(|world| {
            let name = match dev {
                DeviceKind::Shm => "shm",
                DeviceKind::Tcp => "tcp",
            };
            assert_eq!((world.rank(), world.size(), world.device_name()), (0, 1, name));
            for (i, n) in [0usize, 5, 500, 1001, 100_000].into_iter().enumerate() {
                let data = pattern(i as u64, n);
                // Send first (eager or rendezvous), then receive.
                let st = world.scope(|s| {
                    let send = s.isend(&data, 0, i as i32)?;
                    let mut buf = vec![0u8; n];
                    let st = world.recv(&mut buf, 0, i as i32)?;
                    assert_bytes_eq(&buf, &data, "self send then receive");
                    send.wait()?;
                    Ok::<_, Error>(st)
                })?;
                assert_status(&st, 0, i as i32, n);
                // Receive first: a large send copies straight into the posted receive.
                let mut buf = vec![0u8; n];
                world.scope(|s| {
                    let recv = s.irecv(&mut buf, ANY_SOURCE, ANY_TAG)?;
                    let send = s.isend(&data, 0, 50)?;
                    assert_status(&recv.wait()?, 0, 50, n);
                    send.wait().map(drop)
                })?;
                assert_bytes_eq(&buf, &data, "self receive then send");
            }
            // Small blocking sends to oneself are buffered.
            for k in 0..100u32 {
                world.send(&[k], 0, 1)?;
            }
            for k in 0..100u32 {
                let mut v = [0u32];
                world.recv(&mut v, 0, 1)?;
                assert_eq!(v[0], k);
            }
            Ok(())
        })
        .unwrap();
}

/// A blocking receive only the rank itself could satisfy fails instead of hanging.
fn blocking_receive_from_self_without_a_send_is_a_deadlock_error(dev: DeviceKind) {
    let out = run(dev, 1, |world| {
        let mut buf = [0u8; 4];
        let specific = world.recv(&mut buf, 0, 1).unwrap_err();
        let any = world.recv(&mut buf, ANY_SOURCE, ANY_TAG).unwrap_err();
        let probe = world.probe(ANY_SOURCE, 3).unwrap_err();
        // A large self-send with no receive posted can never complete either.
        let big = vec![1u8; 100_000];
        let send = world.send(&big, 0, 2).unwrap_err();
        // ...and it was withdrawn, not left behind: nothing is queued for tag 2.
        let leftover = world.iprobe(0, 2)?;
        // The rank still works afterwards.
        world.scope(|s| {
            let r = s.irecv(&mut buf, 0, 9)?;
            world.send(&[1u8, 2, 3, 4], 0, 9)?;
            r.wait()
        })?;
        Ok((specific, any, probe, send, leftover, buf))
    })
    .unwrap();
    let (specific, any, probe, send, leftover, buf) = out.into_iter().next().unwrap();
    for e in [&specific, &any, &probe, &send] {
        assert!(matches!(e, Error::Deadlock { rank: 0, .. }), "{e:?}");
    }
    assert_eq!(leftover, None);
    assert_eq!(buf, [1, 2, 3, 4]);
}

/// A blocking probe on a rank that has exited reports it; a non-blocking one just finds nothing.
fn probe_of_an_exited_rank(dev: DeviceKind) {
    let out = run(dev, 2, |world| {
        if world.rank() == 1 {
            return Ok(None);
        }
        let blocking = world.probe(1, ANY_TAG).unwrap_err();
        assert_eq!(world.iprobe(1, ANY_TAG)?, None);
        Ok(Some(blocking))
    })
    .unwrap();
    assert!(matches!(out[0], Some(Error::PeerExited { rank: 1 })), "{:?}", out[0]);
}

/// Non-overtaking across the receiver-first path while receives are being posted: two receives
/// posted in order, two large messages sent in order; the first message lands in the first
/// receive (regression: a sender could claim the just-posted second receive first).
fn receiver_first_respects_posting_order_under_concurrent_posts(dev: DeviceKind) {
    // The race guarded here is shm's receiver-first claim; on tcp every iteration is several
    // loopback round trips with thread wake-ups (seconds per thousand on a loaded 2-core
    // machine), so fewer iterations keep the suite fast while still checking the ordering.
    let iters = match dev {
        DeviceKind::Shm => 20_000,
        DeviceKind::Tcp => 2_000,
    };
    const WORDS: usize = 32; // 256 bytes > the eager limit below
    let go = AtomicUsize::new(0);
    let bad = cfg(dev, 2, 64)
        .run(|world| {
            let mut bad = 0usize;
            if world.rank() == 0 {
                let (mut a, mut b) = ([0u64; WORDS], [0u64; WORDS]);
                for it in 0..iters {
                    go.store(it + 1, Ordering::Release);
                    world.scope(|s| {
                        let ra = s.irecv(&mut a, 1, 0)?;
                        let rb = s.irecv(&mut b, 1, 0)?;
                        ra.wait()?;
                        rb.wait().map(drop)
                    })?;
                    bad += usize::from(a[0] != 2 * it as u64 || b[0] != 2 * it as u64 + 1);
                }
            } else {
                let (mut m1, mut m2) = ([0u64; WORDS], [0u64; WORDS]);
                for it in 0..iters {
                    while go.load(Ordering::Acquire) <= it {
                        std::thread::yield_now();
                    }
                    m1[0] = 2 * it as u64;
                    m2[0] = 2 * it as u64 + 1;
                    world.send(&m1, 0, 0)?;
                    world.send(&m2, 0, 0)?;
                }
            }
            Ok(bad)
        })
        .unwrap();
    assert_eq!(bad[0], 0, "{} of {iters} iterations delivered out of order", bad[0]);
}

// ------------------------------------------------------------------------------ test wrappers

device_suite! {
    // Every multi-rank tcp job can hang at exit until this device defect is fixed; delete the
    // line then.
    both: [
        match_specific_source_and_tag,
        match_any_source,
        match_any_tag_follows_send_order,
        match_both_wildcards,
        tags_received_out_of_send_order_eager_inline,
        tags_received_out_of_send_order_eager_spilled,
        tags_received_out_of_send_order_rendezvous,
        non_overtaking_same_source_same_tag,
        non_overtaking_into_preposted_receives,
        eager_inline_and_spilled_sizes,
        sizes_around_the_eager_limit,
        rendezvous_and_receiver_first_large_sizes,
        rendezvous_send_posted_before_receive,
        receiver_first_direct_copy,
        issend_incomplete_until_receiver_matches,
        ssend_returns_only_after_receive_is_posted,
        ssend_into_preposted_receive,
        zero_byte_messages,
        status_counts_for_element_types,
        waitall_many_mixed_sizes,
        windows_of_rendezvous_messages_in_both_directions,
        waitany_returns_each_index_once,
        testany_and_testall,
        test_on_an_inactive_request_is_an_error,
        cancel_unmatched_irecv,
        cancel_after_match_has_no_effect,
        dropped_and_forgotten_irecv_are_released_at_scope_end,
        forgotten_large_isend_still_delivers,
        forgotten_large_isend_delivers_after_sender_exited,
        outer_scope_request_started_inside_inner_scope,
        outer_scope_send_started_inside_inner_scope,
        polling_with_test_notices_an_aborted_job,
        cancel_unmatched_sends,
        any_source_receive_from_self_after_others_exited,
        any_source_receive_of_queued_self_send_after_others_exited,
        waitall_reports_first_error_and_completes_the_rest,
        sendrecv_with_itself,
        probe_and_iprobe_report_envelope_and_size,
        objects_roundtrip,
        rank_out_of_range,
        tag_out_of_range,
        truncation_on_every_path,
        truncation_of_typed_receive,
        element_size_mismatch,
        use_after_finalize,
        dead_peer_simple,
        panicking_rank_fails_the_run_and_unblocks_others,
        failing_rank_error_is_reported_with_its_message,
        receive_from_the_panicking_rank_gets_peer_failed,
        run_returns_the_first_failure_when_others_fail_after_it,
        invalid_configuration,
        single_rank_sends_to_itself,
        probe_of_an_exited_rank,
        receiver_first_respects_posting_order_under_concurrent_posts,
        blocking_receive_from_self_without_a_send_is_a_deadlock_error,
        ordering_with_many_senders,
        sixteen_ranks_ring_and_all_to_all,
        sendrecv_and_replace_in_a_ring,
        dead_peer_is_reported_not_waited_for,
    ],
    // Tests the tcp device cannot run (yet) would be listed here, grouped by reason.
    tcp_ignored: [],
}
