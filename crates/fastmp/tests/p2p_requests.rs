//! Nonblocking point-to-point requests: completion by waitall, waitany, testany and testall,
//! `test` on an inactive request, cancelling receives and sends, requests dropped or leaked with
//! `mem::forget` (still delivered and received, by the scope's end), and requests of an outer
//! scope started inside an inner one. Conventions and helpers: `p2p_common`.

mod common;
mod p2p_common;

use common::{check_pattern, device_suite, mix, pattern};
use fastmp::{ANY_SOURCE, ANY_TAG, DeviceKind, Error, Request, Status, testall, testany, waitall, waitany};
use p2p_common::{BIG, SENTINEL, assert_status, assert_untouched, cfg, go, pause, run, wait_go};

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
                assert_eq!((st.source, st.tag, st.count::<u32>()), (1, 10 + i as i32, 3));
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

/// Receives dropped or leaked unwaited still receive: the scope's end waits for them (as MPI's
/// freed requests complete), so the messages land in their buffers, not in later receives.
fn dropped_and_forgotten_irecv_complete_at_scope_end(dev: DeviceKind) {
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
            let mut stale_a = vec![SENTINEL; 8192];
            let mut stale_b = vec![SENTINEL; 8192];
            let mut stale_c = vec![SENTINEL; 8192];
            world.scope(|s| {
                std::mem::forget(s.irecv(&mut stale_a, 1, 7)?);
                std::mem::forget(s.irecv(&mut stale_b, ANY_SOURCE, ANY_TAG)?);
                drop(s.irecv(&mut stale_c, 1, 7)?);
                go(&world, 1)
            })?;
            for (i, stale) in [&stale_a, &stale_b, &stale_c].into_iter().enumerate() {
                check_pattern(&stale[..sizes[i]], i as u64, "a dropped receive");
                assert_untouched(&stale[sizes[i]..], "a dropped receive");
            }
            for (i, &n) in sizes.iter().enumerate().skip(3) {
                let mut buf = vec![SENTINEL; 8192];
                let st = world.recv(&mut buf, 1, 7)?;
                assert_status(&st, 1, 7, n);
                check_pattern(&buf[..n], i as u64, "traffic after dropped receives");
                assert_untouched(&buf[n..], "traffic after dropped receives");
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

/// A send request's status is the sender's own rank, the tag and the length, whether the send
/// finished inside `isend` (eager: the scope rebuilds the status) or later (rendezvous: the
/// device reports it), so the two paths agree. On a communicator whose ranks are the world's
/// reversed, so that a world rank reported as the source would show.
fn send_status_is_own_rank_tag_and_length(dev: DeviceKind) {
    run(dev, 4, |world| {
        let comm = world.split(Some(0), -(world.rank() as i32))?.expect("every rank has color 0");
        let (me, n) = (comm.rank(), comm.size());
        assert_eq!(me, n - 1 - world.rank());
        let (to, from) = ((me + 1) % n, (me + n - 1) % n);
        let small = vec![me as u8; 8];
        let big = vec![me as u8; BIG];
        let (mut small_in, mut big_in) = (vec![0u8; 8], vec![0u8; BIG]);
        let statuses = comm.scope(|s| {
            let mut reqs = vec![
                s.irecv(&mut small_in, from, 1)?,
                s.irecv(&mut big_in, from, 2)?,
                s.isend(&small, to, 1)?,
                s.isend(&big, to, 2)?,
            ];
            waitall(&mut reqs)
        })?;
        assert_status(&statuses[2], me, 1, 8);
        assert_status(&statuses[3], me, 2, BIG);
        assert_status(&statuses[0], from, 1, 8);
        assert_status(&statuses[1], from, 2, BIG);
        assert!(small_in.iter().chain(&big_in).all(|&b| b == from as u8));
        Ok(())
    })
    .unwrap();
}

// ------------------------------------------------------------------------------ test wrappers

device_suite! {
    both: [
        waitall_many_mixed_sizes,
        windows_of_rendezvous_messages_in_both_directions,
        waitany_returns_each_index_once,
        testany_and_testall,
        test_on_an_inactive_request_is_an_error,
        cancel_unmatched_irecv,
        cancel_after_match_has_no_effect,
        dropped_and_forgotten_irecv_complete_at_scope_end,
        forgotten_large_isend_still_delivers,
        forgotten_large_isend_delivers_after_sender_exited,
        outer_scope_request_started_inside_inner_scope,
        outer_scope_send_started_inside_inner_scope,
        cancel_unmatched_sends,
        waitall_reports_first_error_and_completes_the_rest,
        send_status_is_own_rank_tag_and_length,
    ],
    // Tests the tcp device cannot run (yet) would be listed here, grouped by reason.
    tcp_ignored: [],
}
