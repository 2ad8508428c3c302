//! The shm device's eager rooted collectives (native bcast and scatter up to 4 KiB, where the
//! root copies into its lane's buffer and returns without waiting for its readers):
//! oversubscribed runs (np 8 and 16 on any machine), readers more than a lane cycle behind
//! (the root must wait before reusing the buffer), many nonblocking ones in flight, and ranks
//! that leave or fail: every outcome is a result or an error, never a hang (the watchdog of
//! `coll_common::job`).

mod coll_common;

use std::time::Duration;

use coll_common::job;
use fastmp::coll::{Algorithm, Collective, Tuning};
use fastmp::{Comm, Config, Error, Result};

/// Largest eager payload (the device's `EAGER_MAX`); sizes up to it take the eager path.
const EAGER_MAX: usize = 4096;

fn native() -> Tuning {
    [Collective::Bcast, Collective::Scatter]
        .into_iter()
        .fold(Tuning::defaults(), |t, c| t.force(c, Algorithm::Native).expect("native"))
}

fn config(np: usize) -> Config {
    Config::new().np(np).tuning(native())
}

fn byte(round: usize, root: usize, i: usize) -> u8 {
    (round * 31 + root * 7 + i) as u8
}

/// Sizes across the eager range and just past it (the shared-buffer path).
fn size_of_round(round: usize) -> usize {
    [0, 1, 7, 8, 64, 200, 1000, EAGER_MAX - 1, EAGER_MAX, EAGER_MAX + 1][round % 10]
}

/// `rounds` bcasts and scatters with rotating roots and sizes, each checked.
fn rounds(world: &Comm, rounds: usize) -> Result<()> {
    let (me, np) = (world.rank(), world.size());
    for round in 0..rounds {
        let root = round % np;
        let len = size_of_round(round);
        let mut buf: Vec<u8> = (0..len).map(|i| if me == root { byte(round, root, i) } else { 0 }).collect();
        world.bcast(&mut buf, root)?;
        if buf.iter().enumerate().any(|(i, &b)| b != byte(round, root, i)) {
            return Err(Error::other(format!("bcast round {round}, {len} B from {root}: rank {me} got {buf:?}")));
        }
        let block = len / np;
        let send: Vec<u8> = (0..block * np).map(|i| byte(round, root, i)).collect();
        let mut recv = vec![0u8; block];
        world.scatter(if me == root { &send[..] } else { &[] }, &mut recv, root)?;
        if recv[..] != send[me * block..][..block] {
            return Err(Error::other(format!("scatter round {round}, {block} B per rank: rank {me} got {recv:?}")));
        }
    }
    Ok(())
}

#[test]
fn oversubscribed_rounds_deliver_every_payload() {
    for np in [2, 8, 16] {
        job(config(np), "eager rounds", |world| rounds(&world, 300)).unwrap_or_else(|e| panic!("np {np}: {e}"));
    }
}

#[test]
fn a_reader_a_lane_cycle_behind_is_waited_for_before_reuse() {
    // Rank 2 sleeps while root 0 posts more bcasts than there are lanes: the root's later posts
    // must wait for it before overwriting a payload it has not taken.
    job(config(3), "slow reader", |world| {
        let me = world.rank();
        if me == 2 {
            std::thread::sleep(Duration::from_millis(50));
        }
        for round in 0..40 {
            let mut buf = [if me == 0 { round as u8 } else { 0xff }; 16];
            world.bcast(&mut buf, 0)?;
            if buf != [round as u8; 16] {
                return Err(Error::other(format!("round {round}: rank {me} got {buf:?}")));
            }
        }
        Ok(())
    })
    .expect("job");
}

#[test]
fn many_nonblocking_bcasts_in_flight() {
    for np in [3, 8] {
        job(config(np), "ibcasts", move |world| {
            let me = world.rank();
            let mut bufs: Vec<Vec<u8>> =
                (0..20).map(|k| vec![if me == k % np { k as u8 } else { 0 }; 1 + k * 37]).collect();
            world.scope(|s| {
                let requests =
                    bufs.iter_mut().enumerate().map(|(k, b)| s.ibcast(b, k % np)).collect::<Result<Vec<_>>>()?;
                requests.into_iter().try_for_each(|r| r.wait().map(drop))
            })?;
            for (k, b) in bufs.iter().enumerate() {
                if b.iter().any(|&x| x != k as u8) {
                    return Err(Error::other(format!("ibcast {k}: rank {me} got {b:?}")));
                }
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("np {np}: {e}"));
    }
}

#[test]
fn a_failed_root_fails_its_readers_and_a_gone_reader_blocks_nobody() {
    for np in [2, 4] {
        // The root fails before posting: its readers get an error, not a hang.
        let outcome = job(config(np), "failed root", |world| {
            if world.rank() == 1 {
                return Err(Error::other("root fails"));
            }
            let mut buf = [0u8; 8];
            assert!(world.bcast(&mut buf, 1).is_err(), "rank {} read from a failed root", world.rank());
            Ok(())
        });
        assert!(outcome.is_err(), "np {np}");
        // A reader that returns early: the root posts on (past a lane cycle) without waiting for it.
        job(config(np), "gone reader", |world| {
            if world.rank() == 1 {
                return Ok(());
            }
            for round in 0..30u8 {
                let mut buf = [if world.rank() == 0 { round } else { 0 }; 8];
                world.bcast(&mut buf, 0)?;
                if world.rank() == 0 {
                    continue;
                }
                // Other readers still get every payload.
                assert_eq!(buf, [round; 8]);
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("np {np}: {e}"));
    }
}
