//! Request completion (issue 12): requests nobody waited for still complete (scope, owned and
//! persistent ones; dropped or leaked with `mem::forget`), `cancel` abandons one, a scope
//! receive's buffer can be read after its own wait, owned buffers cross loop iterations,
//! persistent requests restart, `wait_some`/`test_some` on every request kind, and a failed peer
//! ends a scope's wait for a receive it will never match. Conventions: `p2p_common`.

mod common;
mod p2p_common;

use common::{check_pattern, device_suite, pattern};
use fastmp::{
    ANY_TAG, DeviceKind, Error, OwnedRequest, PROC_NULL, PersistentRequest, Status, startall, test_some, wait_some,
    waitall, waitany,
};
use p2p_common::{SENTINEL, assert_status, assert_untouched, cfg, go, run, wait_go};

/// Above the eager limit of `cfg(.., 1000)`: these stay pending until matched.
const LARGE: usize = 5000;

fn assert_empty(st: &Status) {
    assert_eq!((st.source, st.tag, st.bytes, st.cancelled), (PROC_NULL, ANY_TAG, 0, false), "{st:?}");
}

/// Scope requests of every kind dropped or leaked unwaited: the receives still receive (the
/// scope's end waits for them), the sends are still delivered after their buffers were reused.
fn unwaited_scope_requests_of_every_kind_complete(dev: DeviceKind) {
    cfg(dev, 2, 1000)
        .run(|world| {
            if world.rank() == 1 {
                wait_go(&world, 0)?;
                world.send(&pattern(1, LARGE), 0, 1)?;
                world.send(&pattern(2, 100), 0, 2)?;
                wait_go(&world, 0)?; // rank 0's scope ended and its send buffers were reused
                for (tag, seed, len) in [(3, 3, LARGE), (4, 4, LARGE), (5, 5, 100)] {
                    let mut buf = vec![SENTINEL; len + 1];
                    let st = world.recv(&mut buf, 0, tag)?;
                    assert_status(&st, 0, tag, len);
                    check_pattern(&buf[..len], seed, "an unwaited send");
                }
                return Ok(());
            }
            let (mut large, mut small) = (vec![SENTINEL; LARGE + 1], vec![SENTINEL; 101]);
            let (mut a, mut b, mut c) = (pattern(3, LARGE), pattern(4, LARGE), pattern(5, 100));
            world.scope(|s| {
                drop(s.irecv(&mut large, 1, 1)?);
                std::mem::forget(s.irecv(&mut small, 1, 2)?);
                drop(s.isend(&a, 1, 3)?);
                std::mem::forget(s.issend(&b, 1, 4)?);
                let _ = s.isend(&c, 1, 5)?;
                go(&world, 1)
            })?;
            check_pattern(&large[..LARGE], 1, "a dropped receive");
            check_pattern(&small[..100], 2, "a forgotten receive");
            assert_untouched(&large[LARGE..], "a dropped receive");
            for buf in [&mut a, &mut b, &mut c] {
                buf.fill(0xEE);
            }
            drop((a, b, c));
            go(&world, 1)
        })
        .unwrap();
}

/// `cancel` is how a receive that will never match is abandoned: the scope then ends at once
/// and the buffer is untouched; the message sent later goes to a later receive.
fn cancel_abandons_a_receive(dev: DeviceKind) {
    run(dev, 2, |world| {
        if world.rank() == 1 {
            wait_go(&world, 0)?;
            return world.send(&[9u8; 4], 0, 9);
        }
        let mut buf = [SENTINEL; 4];
        world.scope(|s| {
            let req = s.irecv(&mut buf, 1, 9)?;
            req.cancel()?;
            drop(req);
            Ok::<_, Error>(())
        })?;
        assert_eq!(buf, [SENTINEL; 4], "a cancelled receive wrote its buffer");
        go(&world, 1)?;
        let mut fresh = [0u8; 4];
        assert_status(&world.recv(&mut fresh, 1, 9)?, 1, 9, 4);
        assert_eq!(fresh, [9; 4]);
        Ok(())
    })
    .unwrap();
}

/// `irecv_buf` hands the buffer back from its wait, test or a set operation, so the data is read
/// (and sent on) inside the scope that received it.
fn received_buffer_is_read_after_its_own_wait(dev: DeviceKind) {
    cfg(dev, 2, 1000)
        .run(|world| {
            let peer = 1 - world.rank();
            let out = pattern(world.rank() as u64, LARGE);
            let mut first = vec![0u8; LARGE];
            let mut more = [[0u32; 3]; 3];
            let mut last = [0u16; 2];
            world.scope(|s| {
                let send = s.isend(&out, peer, 0)?;
                let (got, st) = s.irecv_buf(&mut first, peer, 0)?.wait()?;
                assert_status(&st, peer, 0, LARGE);
                check_pattern(got, peer as u64, "read after wait");
                got[0] ^= 1; // the caller's again
                send.wait()?;
                let [m0, m1, m2] = &mut more;
                let mut reqs = vec![s.irecv_buf(m0, peer, 1)?, s.irecv_buf(m1, peer, 2)?, s.irecv_buf(m2, peer, 3)?];
                for tag in 1..=3u32 {
                    world.send(&[tag; 3], peer, tag as i32)?;
                }
                for (i, (buf, st)) in waitall(&mut reqs)?.into_iter().enumerate() {
                    assert_eq!((st.tag, &*buf), (i as i32 + 1, &[i as u32 + 1; 3][..]));
                    buf[0] = 0;
                }
                assert!(matches!(waitall(&mut reqs), Err(Error::InvalidArgument(_))), "buffers handed back twice");
                let mut req = s.irecv_buf(&mut last, peer, 4)?;
                world.send(&[4u16, 4], peer, 4)?;
                let (buf, st) = loop {
                    if let Some(done) = req.test()? {
                        break done;
                    }
                };
                assert_eq!((buf, st.bytes), (&mut [4u16, 4][..], 4));
                Ok::<_, Error>(())
            })?;
            assert_eq!(first[0], pattern(peer as u64, 1)[0] ^ 1);
            Ok(())
        })
        .unwrap();
}

/// A ring of 3 where every rank keeps the next round's receive posted while it works on this
/// round's data: owned buffers cross loop iterations, sends are waited for one round later or
/// dropped (then still delivered).
fn pipelined_ring_with_owned_buffers(dev: DeviceKind) {
    const ROUNDS: u64 = 12;
    cfg(dev, 3, 1000)
        .run(|world| {
            let (rank, size) = (world.rank(), world.size());
            let (left, right) = ((rank + size - 1) % size, (rank + 1) % size);
            let len = |round: u64| if round.is_multiple_of(3) { LARGE / 8 } else { 5 };
            let mut recv = world.irecv_owned(vec![0u64; len(0)], left, 0)?;
            let mut sends: Vec<OwnedRequest<u64>> = Vec::new();
            for round in 0..ROUNDS {
                let send = world.isend_owned(vec![round * 100 + rank as u64; len(round)], right, round as i32 % 2)?;
                if round % 2 == 0 {
                    drop(send)
                } else {
                    sends.push(send)
                }
                let next = world.irecv_owned(vec![0u64; len(round + 1)], left, (round as i32 + 1) % 2)?;
                let (got, st) = std::mem::replace(&mut recv, next).wait()?;
                assert_eq!((st.source, st.bytes), (left, len(round) * 8));
                assert!(got.iter().all(|&v| v == round * 100 + left as u64), "round {round}: {got:?}");
                if sends.len() > 2 {
                    let (buf, _) = sends.remove(0).wait()?;
                    assert_eq!(buf.len(), len(buf[0] / 100));
                }
            }
            // The last posted receive gets nothing: cancel it.
            recv.cancel()?;
            assert!(recv.wait()?.1.cancelled);
            for (buf, st) in waitall(&mut sends)? {
                assert_eq!((st.cancelled, buf[0] % 100), (false, rank as u64));
            }
            Ok(())
        })
        .unwrap();
}

/// Owned requests dropped before their messages arrived still receive (the next receive with
/// the same envelope gets the next message); dropped and leaked sends are still delivered.
fn unwaited_owned_requests_complete(dev: DeviceKind) {
    cfg(dev, 2, 1000)
        .run(|world| {
            if world.rank() == 1 {
                wait_go(&world, 0)?;
                for (tag, seed) in [(1, 11), (1, 12), (2, 21), (2, 22)] {
                    world.send(&pattern(seed, LARGE), 0, tag)?;
                }
                for (tag, seed) in [(3, 31), (4, 41)] {
                    let mut buf = vec![0u8; LARGE];
                    assert_status(&world.recv(&mut buf, 0, tag)?, 0, tag, LARGE);
                    check_pattern(&buf, seed, "an unwaited owned send");
                }
                return Ok(());
            }
            drop(world.irecv_owned(vec![0u8; LARGE], 1, 1)?);
            std::mem::forget(world.irecv_owned(vec![0u8; LARGE], 1, 2)?);
            drop(world.isend_owned(pattern(31, LARGE), 1, 3)?);
            std::mem::forget(world.issend_owned(pattern(41, LARGE), 1, 4)?);
            go(&world, 1)?;
            for (tag, seed) in [(1, 12), (2, 22)] {
                let mut buf = vec![0u8; LARGE];
                assert_status(&world.recv(&mut buf, 1, tag)?, 1, tag, LARGE);
                check_pattern(&buf, seed, "the message after the one an unwaited receive took");
            }
            Ok(())
        })
        .unwrap();
}

/// Persistent halo exchange, started and completed many times with small and rendezvous sizes;
/// MPI's inactive-after-completion rules and the errors for misuse.
fn persistent_requests_restart(dev: DeviceKind) {
    cfg(dev, 2, 1000)
        .run(|world| {
            let peer = 1 - world.rank();
            for len in [3usize, LARGE] {
                let mut send = world.send_init(vec![0u32; len], peer, 7)?;
                let mut recv = world.recv_init(vec![0u32; len], peer, 7)?;
                assert!(!send.is_active() && !recv.is_active());
                assert_empty(&recv.wait()?); // inactive: an empty status at once
                for step in 0..20u32 {
                    send.buf_mut()?.fill(step * 10 + world.rank() as u32);
                    if step % 2 == 0 {
                        startall(&mut [&mut recv, &mut send])?;
                    } else {
                        recv.start()?;
                        send.start()?;
                    }
                    let start_again = recv.start();
                    assert!(
                        matches!(&start_again, Err(Error::InvalidArgument(m)) if m.contains("active")),
                        "{start_again:?}"
                    );
                    assert!(recv.buf().is_err() || !recv.is_active());
                    if step % 3 == 0 {
                        let mut both = [&mut recv, &mut send];
                        let statuses = waitall(&mut both)?;
                        assert_status(&statuses[0], peer, 7, len * 4);
                    } else {
                        while recv.test()?.is_none() {}
                        send.wait()?;
                    }
                    assert!(!recv.is_active());
                    assert!(recv.buf()?.iter().all(|&v| v == step * 10 + peer as u32), "step {step}");
                }
                assert_eq!(recv.into_buf()?.len(), len);
                drop(send);
            }
            // Started and dropped, or leaked, while active: the operations still complete.
            let mut send = world.send_init(pattern(world.rank() as u64, LARGE), peer, 8)?;
            send.start()?;
            let mut leaked = world.recv_init(vec![0u8; LARGE], peer, 9)?;
            leaked.start()?;
            std::mem::forget(leaked);
            world.send(&pattern(90, LARGE), peer, 9)?;
            drop(send);
            let mut buf = vec![0u8; LARGE];
            assert_status(&world.recv(&mut buf, peer, 8)?, peer, 8, LARGE);
            check_pattern(&buf, peer as u64, "a dropped active persistent send");
            // startall refuses, starting none, if one is active.
            let mut reqs: Vec<PersistentRequest<u8>> =
                vec![world.recv_init(vec![0u8; 1], peer, 10)?, world.recv_init(vec![0u8; 1], peer, 11)?];
            reqs[1].start()?;
            let refused = startall(&mut reqs);
            assert!(matches!(&refused, Err(Error::InvalidArgument(m)) if m.contains("request 1")), "{refused:?}");
            assert!(!reqs[0].is_active());
            reqs[1].cancel()?;
            assert!(reqs[1].wait()?.cancelled);
            Ok(())
        })
        .unwrap();
}

/// `wait_some`/`test_some` on scope, owned and persistent requests: nothing before the sender
/// starts, every index exactly once with its data, a failed request reported alone without
/// losing the others' results.
fn wait_some_and_test_some(dev: DeviceKind) {
    const N: usize = 5;
    cfg(dev, 2, 1000)
        .run(|world| {
            if world.rank() == 1 {
                for round in 0..3 {
                    wait_go(&world, 0)?;
                    for tag in (0..N as i32).rev() {
                        world.send(&pattern(tag as u64 + round * 10, 100 * tag as usize + 1), 0, tag)?;
                    }
                }
                wait_go(&world, 0)?;
                world.send(&[1u8; 8], 0, 0)?;
                world.send(&[2u8; 8], 0, 1)?;
                return Ok(());
            }
            let len = |tag: usize| 100 * tag + 1;
            let check = |seen: &mut Vec<usize>, index: usize, data: &[u8], round: u64| {
                check_pattern(data, index as u64 + round * 10, "wait_some");
                seen.push(index);
            };
            // Scope requests, plus test_some on nothing sent yet.
            let mut bufs: Vec<Vec<u8>> = (0..N).map(|t| vec![0u8; len(t)]).collect();
            world.scope(|s| {
                let mut reqs = Vec::new();
                for (tag, b) in bufs.iter_mut().enumerate() {
                    reqs.push(s.irecv_buf(b, 1, tag as i32)?);
                }
                assert!(test_some(&mut reqs)?.is_empty());
                go(&world, 1)?;
                let mut seen = Vec::new();
                while seen.len() < N {
                    let done = wait_some(&mut reqs)?;
                    assert!(!done.is_empty());
                    for (index, (data, st)) in done {
                        assert_eq!(st.tag, index as i32);
                        check(&mut seen, index, data, 0);
                    }
                }
                seen.sort();
                assert_eq!(seen, (0..N).collect::<Vec<_>>());
                assert!(wait_some(&mut reqs)?.is_empty(), "no active request left");
                Ok::<_, Error>(())
            })?;
            // Owned requests through test_some.
            let mut reqs: Vec<OwnedRequest<u8>> =
                (0..N).map(|t| world.irecv_owned(vec![0u8; len(t)], 1, t as i32)).collect::<Result<_, _>>()?;
            go(&world, 1)?;
            let mut seen = Vec::new();
            while seen.len() < N {
                for (index, (data, _)) in test_some(&mut reqs)? {
                    check(&mut seen, index, &data, 1);
                }
            }
            // Persistent requests: results stay with the requests.
            let mut reqs: Vec<PersistentRequest<u8>> =
                (0..N).map(|t| world.recv_init(vec![0u8; len(t)], 1, t as i32)).collect::<Result<_, _>>()?;
            startall(&mut reqs)?;
            go(&world, 1)?;
            let mut seen = Vec::new();
            while seen.len() < N {
                for (index, st) in wait_some(&mut reqs)? {
                    assert_eq!(st.bytes, len(index));
                    check(&mut seen, index, reqs[index].buf()?, 2);
                }
            }
            // A truncated receive fails alone; the other finished one is kept for the next call.
            go(&world, 1)?;
            world.probe(1, 1)?; // both messages are here: both receives finish when posted
            let mut reqs = vec![world.irecv_owned(vec![0u8; 4], 1, 0)?, world.irecv_owned(vec![0u8; 8], 1, 1)?];
            let failed = wait_some(&mut reqs);
            assert!(matches!(failed, Err(Error::Truncated { message_bytes: 8, capacity: 4, .. })), "{failed:?}");
            let rest = wait_some(&mut reqs)?;
            assert_eq!(rest.len(), 1);
            assert_eq!((rest[0].0, &rest[0].1.0), (1, &vec![2u8; 8]));
            assert!(!reqs[0].is_active());
            Ok(())
        })
        .unwrap();
}

/// A dropped receive whose sender fails instead of sending: the scope's end stops waiting when
/// the job aborts, and the job reports the failed rank.
fn scope_end_stops_waiting_when_the_sender_fails(dev: DeviceKind) {
    let result = run(dev, 2, |world| {
        if world.rank() == 1 {
            wait_go(&world, 0)?;
            return Err(Error::other("rank 1 gives up"));
        }
        let mut buf = [SENTINEL; 4];
        world.scope(|s| {
            let _ = s.irecv(&mut buf, 1, 0)?;
            go(&world, 1)
        })?;
        assert_eq!(buf, [SENTINEL; 4]);
        Ok(())
    });
    assert!(matches!(&result, Err(Error::RankFailed { rank: 1, .. })), "{result:?}");
}

/// waitany over owned requests hands each buffer back once.
fn waitany_over_owned_requests(dev: DeviceKind) {
    run(dev, 2, |world| {
        let peer = 1 - world.rank();
        let mut reqs: Vec<OwnedRequest<i64>> =
            (0..3).map(|t| world.irecv_owned(vec![0i64; 2], peer, t)).collect::<Result<_, _>>()?;
        for t in 0..3 {
            world.send(&[t as i64, -t as i64], peer, t)?;
        }
        let mut seen = [false; 3];
        while let Some((index, (buf, st))) = waitany(&mut reqs)? {
            assert!(!seen[index]);
            seen[index] = true;
            assert_eq!((buf, st.tag), (vec![index as i64, -(index as i64)], index as i32));
        }
        assert_eq!(seen, [true; 3]);
        Ok(())
    })
    .unwrap();
}

device_suite! {
    both: [
        unwaited_scope_requests_of_every_kind_complete,
        cancel_abandons_a_receive,
        received_buffer_is_read_after_its_own_wait,
        pipelined_ring_with_owned_buffers,
        unwaited_owned_requests_complete,
        persistent_requests_restart,
        wait_some_and_test_some,
        scope_end_stops_waiting_when_the_sender_fails,
        waitany_over_owned_requests,
    ],
    tcp_ignored: [],
}
