//! The shm device at many ranks: per-pair rings are created on a pair's first send, so every
//! pair can still talk (wildcard receives included, in each sender's order), first sends from
//! many senders may race, and a job where only neighbours talk creates about 2·np rings, not
//! np². Ring counts come from the world's counter (`Config::run_shm_counting_rings`).

use fastmp::{ANY_SOURCE, ANY_TAG, Comm, Config, Error, Pin, Result};

fn config(np: usize) -> Config {
    Config::new().np(np).pin(Pin::None)
}

/// Message `k` from `source`: its inline (2 words) or spilled (6 words, past the 24 inline
/// bytes) payload.
fn message(source: usize, k: usize) -> Vec<u64> {
    let words = if k.is_multiple_of(2) { 2 } else { 6 };
    (0..words).map(|w| (source * 1000 + k * 10 + w) as u64).collect()
}

/// Receives `per_source` messages from each of `sources` with wildcard receives (or, where
/// `specific` says so, naming the source), checking payloads and each sender's order.
fn receive_from_all(world: &Comm, sources: &[usize], per_source: usize, specific: bool) -> Result<()> {
    let mut next = vec![0usize; world.size()];
    let mut buf = [0u64; 6];
    for i in 0..sources.len() * per_source {
        let status = if specific && i.is_multiple_of(2) {
            // Every source in turn, by name: the source's ring may not exist yet.
            let source = sources[(i / 2) % sources.len()];
            if next[source] == per_source {
                continue;
            }
            world.recv(&mut buf, source, ANY_TAG)?
        } else {
            world.recv(&mut buf, ANY_SOURCE, ANY_TAG)?
        };
        let source = status.source;
        let k = next[source];
        assert!(k < per_source, "rank {}: more than {per_source} messages from {source}", world.rank());
        assert_eq!(status.tag, k as i32, "rank {}: message from {source} out of order", world.rank());
        let want = message(source, k);
        assert_eq!(&buf[..status.bytes / 8], &want[..], "rank {}: payload of message {k} from {source}", world.rank());
        next[source] += 1;
    }
    // Named receives skipped for finished sources leave the rest to wildcards.
    while sources.iter().any(|&s| next[s] < per_source) {
        let status = world.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
        let k = next[status.source];
        assert_eq!(status.tag, k as i32);
        assert_eq!(&buf[..status.bytes / 8], &message(status.source, k)[..]);
        next[status.source] += 1;
    }
    for &s in sources {
        assert_eq!(next[s], per_source, "rank {}: messages from {s}", world.rank());
    }
    Ok(())
}

/// Every ordered pair of 128 ranks (each rank to itself too) exchanges two messages, received
/// with wildcards: one ring per pair, never two, and every message in its sender's order.
#[test]
fn every_pair_talks_at_128_ranks() {
    const NP: usize = 128;
    let (_, rings) = config(NP)
        .run_shm_counting_rings(|world| {
            let me = world.rank();
            let out: Vec<Vec<u64>> = (0..2).map(|k| message(me, k)).collect();
            world.scope(|s| {
                let mut sends = Vec::new();
                // Start at a different peer on each rank, so first sends race everywhere.
                for d in 0..NP {
                    let dest = (me + d) % NP;
                    for (k, payload) in out.iter().enumerate() {
                        sends.push(s.isend(payload, dest, k as i32)?);
                    }
                }
                let everyone: Vec<usize> = (0..NP).collect();
                receive_from_all(&world, &everyone, 2, false)?;
                for send in sends {
                    send.wait()?;
                }
                Ok(())
            })
        })
        .expect("all-to-all job");
    assert_eq!(rings, NP * NP, "one ring per ordered pair");
}

/// 127 senders make their first sends to rank 0 at the same moment; it receives by name and by
/// wildcard in turn. Only the pairs that talked get a ring.
#[test]
fn first_sends_race_to_one_receiver() {
    const NP: usize = 128;
    const PER_SOURCE: usize = 4;
    let (_, rings) = config(NP)
        .run_shm_counting_rings(|world| {
            if world.rank() == 0 {
                let senders: Vec<usize> = (1..NP).collect();
                receive_from_all(&world, &senders, PER_SOURCE, true)
            } else {
                for k in 0..PER_SOURCE {
                    world.send(&message(world.rank(), k), 0, k as i32)?;
                }
                Ok(())
            }
        })
        .expect("many-to-one job");
    assert_eq!(rings, NP - 1, "one ring per sender, none for pairs that never talked");
}

/// 512 ranks where each only talks to its two neighbours on a ring: 2·np rings, far fewer
/// than the np² a job used to allocate up front.
#[test]
fn neighbours_only_job_of_512_ranks_creates_few_rings() {
    const NP: usize = 512;
    let (sums, rings) = config(NP)
        .run_shm_counting_rings(|world| {
            let me = world.rank();
            let (left, right) = ((me + NP - 1) % NP, (me + 1) % NP);
            let mut from = [[0u64; 1]; 2];
            world.scope(|s| {
                let [l, r] = &mut from;
                let recvs = [s.irecv(l, left, 0)?, s.irecv(r, right, 0)?];
                world.send(&[me as u64], right, 0)?;
                world.send(&[me as u64], left, 0)?;
                for recv in recvs {
                    recv.wait()?;
                }
                Ok(())
            })?;
            assert_eq!(from, [[left as u64], [right as u64]]);
            Ok(from[0][0] + from[1][0])
        })
        .expect("neighbour job");
    assert_eq!(sums.len(), NP);
    assert_eq!(rings, 2 * NP, "one ring per neighbour and direction");
    assert!(rings * 100 < NP * NP);
}

/// A peer that never sent (so has no ring to this rank) still wakes a receive naming it or
/// waiting for anyone when it fails; a peer that sent once and exited delivers that message,
/// then is reported gone.
#[test]
fn failures_reach_peers_without_rings() {
    let outcome = config(4).run(|world| match world.rank() {
        0 => {
            let mut buf = [0u64; 1];
            let err = world.recv(&mut buf, 3, 0).expect_err("rank 3 failed without sending");
            assert!(matches!(err, Error::PeerFailed { rank: 3, .. }), "named receive: {err}");
            let err = world.recv(&mut buf, ANY_SOURCE, 0).expect_err("the job is aborted");
            assert!(matches!(err, Error::PeerFailed { rank: 3, .. }), "wildcard receive: {err}");
            Ok(())
        }
        3 => Err(Error::InvalidArgument("rank 3 gives up".into())),
        _ => Ok(()),
    });
    match outcome {
        Err(Error::RankFailed { rank: 3, .. }) => {}
        other => panic!("the job should fail naming rank 3, got {other:?}"),
    }

    config(2)
        .run(|world| {
            if world.rank() == 1 {
                return world.send(&[7u64], 0, 0);
            }
            let mut buf = [0u64; 1];
            // The sender may be gone already: its ring and message must still be found.
            std::thread::sleep(std::time::Duration::from_millis(20));
            world.recv(&mut buf, 1, 0)?;
            assert_eq!(buf, [7]);
            let err = world.recv(&mut buf, 1, 0).expect_err("rank 1 exited");
            assert!(matches!(err, Error::PeerExited { rank: 1 }), "{err}");
            Ok(())
        })
        .expect("the receiver handled the exit");
}

/// The counting hook is for shm jobs only.
#[test]
fn counting_rings_needs_the_shm_device() {
    let err = config(2).device(fastmp::DeviceKind::Tcp).run_shm_counting_rings(|_| Ok(())).expect_err("tcp");
    assert!(err.to_string().contains("not shm"), "{err}");
}
