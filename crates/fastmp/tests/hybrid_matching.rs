//! The hybrid device's routing and matching across its two transports: `ANY_SOURCE`/`ANY_TAG`
//! receives with thread-peer and remote senders interleaved, posting order of wildcard and
//! specific receives, probes, cancel of a held wildcard receive, truncation from either side,
//! and failures that must reach ranks blocked on the other process and on their own.

mod watchdog;

use fastmp::{ANY_SOURCE, ANY_TAG, Comm, Config, DeviceKind, Error, Locality};

/// `np` ranks as processes of `t` thread ranks each.
fn hybrid(np: usize, t: usize) -> Config {
    Config::new().device(DeviceKind::Hybrid).np(np).threads_per_process(t)
}

/// The layouts every test runs on: 2 × 3, and 3 + 2 (an odd count, a short last process).
const LAYOUTS: [(usize, usize); 2] = [(6, 3), (5, 3)];

fn run<R: Send>(np: usize, t: usize, f: impl Fn(Comm) -> fastmp::Result<R> + Sync) -> fastmp::Result<Vec<R>> {
    let _dog = watchdog::watchdog(format!("hybrid job of {np} ranks, {t} per process"));
    hybrid(np, t).run(f)
}

#[test]
fn ranks_are_numbered_block_wise_and_thread_peers_are_local() {
    for (np, t) in LAYOUTS {
        run(np, t, |world| {
            let me = world.rank();
            assert_eq!(world.size(), np);
            for peer in 0..np {
                let want = if peer / t == me / t { Locality::SameProcess } else { Locality::SameNode };
                assert_eq!(world.locality(peer)?, want, "rank {me} sees {peer}");
                assert_eq!(world.placement().process_of(peer), peer / t);
            }
            Ok(())
        })
        .unwrap();
    }
}

const MESSAGES: u64 = 30;

/// Every rank sends `MESSAGES` numbered messages (tags alternate) to rank 0, which receives them
/// all with `ANY_SOURCE`/`ANY_TAG`: each message arrives exactly once and each sender's in
/// order, local and remote senders mixed.
#[test]
fn any_source_receives_local_and_remote_senders_in_per_sender_order() {
    for (np, t) in LAYOUTS {
        run(np, t, |world| {
            let me = world.rank();
            if me == 0 {
                let mut next = vec![0u64; np];
                let mut seen_local = false;
                let mut seen_remote = false;
                for _ in 0..MESSAGES * (np as u64 - 1) {
                    let mut msg = [0u64; 2];
                    let status = world.recv(&mut msg, ANY_SOURCE, ANY_TAG)?;
                    let src = status.source;
                    assert_eq!(msg[0], src as u64, "the status names the sender");
                    assert_eq!(msg[1], next[src], "sender {src}'s messages in order");
                    assert_eq!(status.tag, (msg[1] % 3) as i32);
                    next[src] += 1;
                    seen_local |= src < t;
                    seen_remote |= src >= t;
                }
                assert!(seen_local && seen_remote);
                assert!(next[1..].iter().all(|&n| n == MESSAGES));
            } else {
                for i in 0..MESSAGES {
                    world.send(&[me as u64, i], 0, (i % 3) as i32)?;
                }
            }
            Ok(())
        })
        .unwrap();
    }
}

/// A wildcard receive posted before a specific one gets the first matching message, also when
/// the specific one names a sender whose message is the only one: the later receive waits.
#[test]
fn an_earlier_wildcard_receive_wins_over_a_later_specific_one() {
    for (np, t) in LAYOUTS {
        let remote = t; // first rank of process 1
        for sender in [1, remote] {
            run(np, t, |world| {
                let me = world.rank();
                if me == 0 {
                    let mut a = [0u32; 1];
                    let mut b = [0u32; 1];
                    world.scope(|s| {
                        let any = s.irecv(&mut a, ANY_SOURCE, 7)?;
                        let specific = s.irecv(&mut b, sender, 7)?;
                        world.send(&[0u8], sender, 1)?; // go
                        let any_status = any.wait()?;
                        let specific_status = specific.wait()?;
                        assert_eq!((any_status.source, specific_status.source), (sender, sender));
                        Ok::<_, Error>(())
                    })?;
                    assert_eq!((a[0], b[0]), (1, 2), "the wildcard receive was posted first");
                    Ok(())
                } else if me == sender {
                    world.recv(&mut [0u8], 0, 1)?;
                    world.send(&[1u32], 0, 7)?;
                    world.send(&[2u32], 0, 7)
                } else {
                    Ok(())
                }
            })
            .unwrap();
        }
    }
}

/// Probes name the sender on either side; a matched probe takes the message off matching.
#[test]
fn probes_see_both_transports() {
    for (np, t) in LAYOUTS {
        run(np, t, |world| {
            let me = world.rank();
            let last = np - 1; // another process
            if me == 0 {
                for _ in 0..2 {
                    let st = world.probe(ANY_SOURCE, 5)?;
                    assert!(st.source == 1 || st.source == last);
                    let mut v = [0usize; 1];
                    let got = world.recv(&mut v, st.source, 5)?;
                    assert_eq!((v[0], got.source), (st.source, st.source));
                }
                world.barrier()?;
                // improbe on each side, then iprobe finds nothing left.
                let mut found = Vec::new();
                while found.len() < 2 {
                    if let Some((msg, st)) = world.improbe(ANY_SOURCE, 6)? {
                        let mut v = [0usize; 1];
                        msg.recv(&mut v)?;
                        assert_eq!(v[0], st.source);
                        found.push(st.source);
                    }
                }
                found.sort();
                assert_eq!(found, vec![1, last]);
                assert!(world.iprobe(ANY_SOURCE, 6)?.is_none());
            } else if me == 1 || me == last {
                world.send(&[me], 0, 5)?;
                world.send(&[me], 0, 6)?;
                world.barrier()?;
            } else {
                world.barrier()?;
            }
            Ok(())
        })
        .unwrap();
    }
}

/// A wildcard receive held at the hybrid level can be cancelled, and the receives queued
/// behind it still match afterwards.
#[test]
fn cancel_of_a_held_wildcard_receive() {
    run(6, 3, |world| {
        let me = world.rank();
        if me == 0 {
            let mut a = [0u32; 1];
            let mut b = [0u32; 1];
            world.scope(|s| {
                let any = s.irecv(&mut a, ANY_SOURCE, 9)?;
                let specific = s.irecv(&mut b, 4, 3)?;
                any.cancel()?;
                let st = any.wait()?;
                assert!(st.cancelled);
                world.send(&[0u8], 4, 1)?;
                let st = specific.wait()?;
                assert_eq!(st.source, 4);
                Ok::<_, Error>(())
            })?;
            assert_eq!(b[0], 44);
            Ok(())
        } else if me == 4 {
            world.recv(&mut [0u8], 0, 1)?;
            world.send(&[44u32], 0, 3)
        } else {
            Ok(())
        }
    })
    .unwrap();
}

/// A message longer than the receive is a truncation error naming its world sender, whichever
/// transport brought it (eager and rendezvous sizes).
#[test]
fn truncation_from_either_transport() {
    for len in [4usize, 200_000] {
        run(6, 3, |world| {
            let me = world.rank();
            if me == 0 {
                for src in [2, 5] {
                    let mut small = vec![0u8; 2];
                    match world.recv(&mut small, src, 0) {
                        Err(Error::Truncated { source_rank, message_bytes, .. }) => {
                            assert_eq!((source_rank, message_bytes), (src, len));
                        }
                        other => panic!("expected truncation from {src}, got {other:?}"),
                    }
                }
            } else if me == 2 || me == 5 {
                world.send(&vec![1u8; len], 0, 0)?;
            }
            Ok(())
        })
        .unwrap();
    }
}

/// A rank that fails fails the ranks blocked on it: its thread peers and the other process's
/// ranks, each blocked in a receive that can never complete (no hang), and the job reports it.
#[test]
fn a_failing_rank_fails_blocked_ranks_on_both_processes() {
    for panics in [false, true] {
        let err = run(6, 3, |world| {
            let me = world.rank();
            if me == 4 {
                if panics {
                    panic!("rank 4 gives up");
                }
                return Err(Error::InvalidArgument("rank 4 gives up".into()));
            }
            let mut buf = [0u8; 1];
            // Local and remote sources, specific and wildcard.
            let source = if me % 2 == 0 { fastmp::Source::Any } else { fastmp::Source::Rank(4) };
            match world.recv(&mut buf, source, 0) {
                Err(Error::PeerFailed { rank: 4, .. }) => Ok(()),
                other => panic!("rank {me}: expected PeerFailed from rank 4, got {other:?}"),
            }
        })
        .expect_err("the job failed");
        match err {
            Error::RankFailed { rank: 4, cause } => assert!(cause.contains("rank 4 gives up"), "{cause}"),
            other => panic!("expected RankFailed naming rank 4, got {other:?}"),
        }
    }
}

/// A large message between thread peers moves by shared memory: the tcp side of both ranks
/// stays idle (no bytes would move over loopback in time to matter; the placement says local).
#[test]
fn large_messages_between_thread_peers_complete() {
    run(4, 2, |world| {
        let me = world.rank();
        let data: Vec<u64> = (0..1 << 20).map(|i| i as u64 ^ me as u64).collect();
        let peer = me ^ 1;
        assert_eq!(world.locality(peer)?, Locality::SameProcess);
        let mut got = vec![0u64; 1 << 20];
        world.sendrecv(&data, peer, 0, &mut got, peer, 0)?;
        assert!(got.iter().enumerate().all(|(i, &v)| v == i as u64 ^ peer as u64));
        Ok(())
    })
    .unwrap();
}

/// Collectives over both transports (message-based on the world), and the shm native ones on a
/// per-process communicator (every member a thread peer), with a process of 3 and one of 2.
#[test]
fn collectives_on_the_world_and_on_per_process_communicators() {
    use fastmp::{SplitType, op::Sum};
    run(5, 3, |world| {
        let me = world.rank();
        let mut sum = [0u64; 2];
        world.allreduce(&[me as u64, 1], &mut sum, Sum)?;
        assert_eq!(sum, [10, 5]);
        let mut data = if me == 4 { [7u32, 8, 9] } else { [0; 3] };
        world.bcast(&mut data, 4)?;
        assert_eq!(data, [7, 8, 9]);
        let local = world.split_type(SplitType::SharedProcess, 0)?;
        assert_eq!(local.size(), if me < 3 { 3 } else { 2 });
        let mut local_sum = [0u64];
        local.allreduce(&[me as u64], &mut local_sum, Sum)?;
        assert_eq!(local_sum[0], if me < 3 { 3 } else { 7 });
        local.barrier()?;
        world.barrier()
    })
    .unwrap();
}

/// A remote failure reaches ranks blocked in a shm native collective of their own process, not
/// only ranks blocked on the network.
#[test]
fn a_remote_failure_fails_a_per_process_collective() {
    use fastmp::SplitType;
    let err = run(5, 3, |world| {
        let me = world.rank();
        let local = world.split_type(SplitType::SharedProcess, 0)?;
        if me == 4 {
            return Err(Error::InvalidArgument("rank 4 gives up".into()));
        }
        if me == 2 {
            // Joins its process's barrier only once the failure has reached this process.
            while world.iprobe(4, 99).is_ok() {
                std::thread::yield_now();
            }
        }
        match local.barrier() {
            Err(Error::PeerFailed { rank: 4, .. }) => Ok(()),
            other if me == 3 => other, // process 1's other rank: its barrier partner failed
            other => panic!("rank {me}: expected PeerFailed from rank 4, got {other:?}"),
        }
    })
    .expect_err("the job failed");
    assert!(matches!(err, Error::RankFailed { rank: 4, .. }), "{err:?}");
}

/// Thread peers blocked on each other in shm's own blocking receive (which never looks at the
/// network) fail when a remote rank fails: the tcp side's waker puts the failure on record in
/// their shm world. Without it this job would hang.
#[test]
fn a_remote_failure_wakes_thread_peers_blocked_on_each_other() {
    let err = run(4, 2, |world| {
        let me = world.rank();
        match me {
            3 => Err(Error::InvalidArgument("rank 3 gives up".into())),
            0 | 1 => match world.recv(&mut [0u8; 1], me ^ 1, 5) {
                Err(Error::PeerFailed { rank: 3, .. }) => Ok(()),
                other => panic!("rank {me}: expected PeerFailed from rank 3, got {other:?}"),
            },
            _ => match world.recv(&mut [0u8; 1], 3, 5) {
                Err(Error::PeerFailed { rank: 3, .. }) => Ok(()),
                other => panic!("rank {me}: expected PeerFailed from rank 3, got {other:?}"),
            },
        }
    })
    .expect_err("the job failed");
    assert!(matches!(err, Error::RankFailed { rank: 3, .. }), "{err:?}");
}

/// A wildcard probe while a wildcard receive is held: the message the held receive is owed
/// (tag 1) arrives together with a later one (tag 2) from a thread peer or a remote rank, in
/// many rounds, so it often arrives between the held receives' turn and the probe's. The probe
/// never reports the owed message, finds the later one (the owed one is handed over and the
/// probe repeated, `queue::probe_unowed`), and each receive gets its own message.
#[test]
fn a_wildcard_probe_finds_the_message_behind_one_owed_to_a_held_receive() {
    const ROUNDS: usize = 60;
    for (np, t) in LAYOUTS {
        run(np, t, |world| {
            let me = world.rank();
            let senders = [1, np - 1]; // a thread peer of rank 0, and a rank of another process
            if me == 0 {
                for round in 0..ROUNDS {
                    let sender = senders[round % 2];
                    let mut owed = [0usize; 1];
                    world.scope(|s| {
                        let held = s.irecv(&mut owed, ANY_SOURCE, 1)?;
                        world.send(&[round], sender, 9)?;
                        let st = loop {
                            if let Some(st) = world.iprobe(ANY_SOURCE, ANY_TAG)? {
                                break st;
                            }
                        };
                        assert_eq!((st.source, st.tag), (sender, 2), "round {round}: the probe reported {st:?}");
                        let mut later = [0usize; 1];
                        world.recv(&mut later, sender, 2)?;
                        assert_eq!(later[0], 2 * round + 1, "round {round}");
                        let got = held.wait()?;
                        assert_eq!((got.source, got.tag), (sender, 1), "round {round}");
                        Ok(())
                    })?;
                    assert_eq!(owed[0], 2 * round, "round {round}");
                }
            } else if senders.contains(&me) {
                for round in (0..ROUNDS).filter(|r| senders[r % 2] == me) {
                    let mut go = [0usize; 1];
                    world.recv(&mut go, 0, 9)?;
                    assert_eq!(go[0], round);
                    world.send(&[2 * round], 0, 1)?;
                    world.send(&[2 * round + 1], 0, 2)?;
                }
            }
            world.barrier()
        })
        .unwrap();
    }
}
