//! Point-to-point errors: ranks and tags out of range, truncation on every path, element-size
//! mismatches, use after finalize, exited peers (with wildcard and self receives, and the
//! deadlock of a receive only the rank itself could satisfy), failing and panicking ranks, and
//! invalid configurations: each ends in a precise `Err`, never in a hang. Conventions and
//! helpers: `p2p_common`.

mod common;
mod p2p_common;

use std::sync::{Barrier, Mutex};
use std::time::Duration;

use common::{assert_bytes_eq, device_suite, mix, pattern};
use fastmp::{ANY_SOURCE, ANY_TAG, Config, DeviceKind, Error, Result, TAG_UB, waitall};
use p2p_common::{BIG, MIB, SENTINEL, assert_status, assert_untouched, cfg, go, pause, run, wait_go};

// ------------------------------------------------------------------------------------- errors

fn rank_out_of_range(dev: DeviceKind) {
    run(dev, 2, |world| {
        let out_of_range = |r: Result<_>, rank: usize| {
            assert!(matches!(r, Err(Error::RankOutOfRange { rank: got, size: 2 }) if got == rank), "{r:?}");
        };
        let mut buf = [0u8; 4];
        out_of_range(world.send(&[1u8], 2, 0).map(drop), 2);
        // (usize::MAX is PROC_NULL, a valid no-op peer.)
        out_of_range(world.ssend(&[1u8], usize::MAX - 1, 0).map(drop), usize::MAX - 1);
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

// ---------------------------------------------------------------------- exited and failed peers

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

// ------------------------------------------------------------------------------ test wrappers

device_suite! {
    both: [
        polling_with_test_notices_an_aborted_job,
        any_source_receive_from_self_after_others_exited,
        any_source_receive_of_queued_self_send_after_others_exited,
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
        probe_of_an_exited_rank,
        blocking_receive_from_self_without_a_send_is_a_deadlock_error,
        dead_peer_is_reported_not_waited_for,
    ],
    // Tests the tcp device cannot run (yet) would be listed here, grouped by reason.
    tcp_ignored: [],
}
