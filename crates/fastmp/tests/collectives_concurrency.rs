//! Collectives in sequence and side by side: different collectives at once on split
//! communicators, overlapping communicators used alternately, random sequences of collectives
//! and algorithms, collective traffic next to user wildcard receives, buffers reused right after
//! a call, barrier stress, and native waits that keep point-to-point traffic moving.
//!
//! Every job runs under a watchdog (`FASTMP_TEST_TIMEOUT_S`, default 120 s) so a hang fails the
//! test instead of blocking.

mod coll_common;
mod collectives_common;
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use coll_common::{Context, algorithms, check_each, forced, run_ok, run_ok_on, seed_of, val};
use collectives_common::{Case, SENTINEL, check_case, is_rooted, reduce_inputs, reduce_sum, sweep};
use fastmp::coll::{Algorithm, Collective};
use fastmp::op::Sum;
use fastmp::{ANY_SOURCE, ANY_TAG, Comm, DeviceKind, Result};

// ---------------------------------------------------------------- concurrency and contexts

/// Rotates through `coll`'s algorithms by iteration.
fn rotating(comm: &Comm, coll: Collective, iteration: usize) -> Result<Comm> {
    let algs = algorithms(coll);
    forced(comm, coll, algs[iteration % algs.len()])
}

#[test]
fn different_collectives_at_once_on_split_communicators() {
    different_collectives_at_once_on_split_communicators_on(DeviceKind::Shm, &[2, 3, 5, 8, 16]);
}

/// Hybrid: the halves mix thread peers and ranks of the other process.
#[test]
fn different_collectives_at_once_on_split_communicators_on_hybrid() {
    different_collectives_at_once_on_split_communicators_on(DeviceKind::Hybrid, &[5, 6]);
}

fn different_collectives_at_once_on_split_communicators_on(device: DeviceKind, nps: &[usize]) {
    const ITERATIONS: usize = 40;
    for &np in nps {
        run_ok_on(device, np, "split halves", move |world| {
            let me = world.rank();
            let half = world.split(Some((me % 2) as u32), 0)?.expect("every rank has a color");
            let (hr, hn) = (half.rank(), half.size());
            assert_eq!((hr, hn), (me / 2, (np + 1 - me % 2) / 2), "split by parity");
            for it in 0..ITERATIONS {
                let n = [1, 3, 700, 5000][it % 4];
                if me % 2 == 0 {
                    // Evens: allreduce.
                    let comm = rotating(&half, Collective::Allreduce, it)?;
                    let send: Vec<u64> = (0..n).map(|i| (i * 31 + hr * 7 + it) as u64).collect();
                    let mut recv = vec![0u64; n];
                    comm.allreduce(&send, &mut recv, Sum).ctx(|| format!("evens' allreduce {it}"))?;
                    let ranks = (hn * (hn - 1) / 2) as u64;
                    check_each(&recv, |i| ((i * 31 + it) * hn) as u64 + 7 * ranks, &|| {
                        format!("evens' allreduce {it}")
                    });
                } else {
                    // Odds: bcast and alltoall.
                    let comm = rotating(&half, Collective::Bcast, it)?;
                    let root = it % hn;
                    let mut buf: Vec<u32> =
                        if hr == root { (0..n).map(|i| val(it as u32, root, i)).collect() } else { vec![0; n] };
                    comm.bcast(&mut buf, root).ctx(|| format!("odds' bcast {it}"))?;
                    check_each(&buf, |i| val(it as u32, root, i), &|| format!("odds' bcast {it}"));
                    let comm = rotating(&half, Collective::Alltoall, it)?;
                    let send: Vec<u32> = (0..hn * n).map(|k| val(it as u32, hr * hn + k / n, k % n)).collect();
                    let mut recv = vec![0u32; hn * n];
                    comm.alltoall(&send, &mut recv).ctx(|| format!("odds' alltoall {it}"))?;
                    check_each(&recv, |k| val(it as u32, (k / n) * hn + hr, k % n), &|| format!("odds' alltoall {it}"));
                }
            }
            // The halves are done; the parent communicator still works.
            let mut total = [0u64];
            world.allreduce(&[me as u64], &mut total, Sum)?;
            assert_eq!(total[0], (np * (np - 1) / 2) as u64);
            Ok(())
        });
    }
}

#[test]
fn overlapping_communicators_used_alternately() {
    overlapping_communicators_used_alternately_on(DeviceKind::Shm, &[2, 3, 4, 7]);
}

/// Hybrid, 2 × 3.
#[test]
fn overlapping_communicators_used_alternately_on_hybrid() {
    overlapping_communicators_used_alternately_on(DeviceKind::Hybrid, &[6]);
}

fn overlapping_communicators_used_alternately_on(device: DeviceKind, nps: &[usize]) {
    for &np in nps {
        run_ok_on(device, np, "overlapping communicators", move |world| {
            let me = world.rank();
            let a = world.dup()?;
            let b = world.dup()?;
            // A communicator overlapping both on part of the ranks (ranks >= 1, reversed).
            let tail = world.split((me >= 1).then_some(0), -(me as i32))?;
            for it in 0..30 {
                let n = [1, 2, 64, 3000][it % 4];
                let ca = rotating(&a, Collective::Bcast, it)?;
                let cb = rotating(&b, Collective::Bcast, it + 1)?;
                // Same root and size on both: with eager flat trees the messages of both are in
                // flight to the same ranks at once, and only the context tells them apart.
                let root = it % np;
                let mut x: Vec<u32> = if me == root { vec![1000 + it as u32; n] } else { vec![0; n] };
                let mut y: Vec<u32> = if me == root { vec![2000 + it as u32; n] } else { vec![0; n] };
                ca.bcast(&mut x, root)?;
                cb.bcast(&mut y, root)?;
                assert!(x.iter().all(|&v| v == 1000 + it as u32), "bcast on dup A, iteration {it}");
                assert!(y.iter().all(|&v| v == 2000 + it as u32), "bcast on dup B, iteration {it}");
                let mut sa = [0u64];
                let mut sb = [0u64];
                rotating(&b, Collective::Allreduce, it)?.allreduce(&[me as u64], &mut sb, Sum)?;
                rotating(&a, Collective::Allreduce, it + 2)?.allreduce(&[1u64], &mut sa, Sum)?;
                assert_eq!(
                    (sa[0], sb[0]),
                    (np as u64, (np * (np - 1) / 2) as u64),
                    "allreduce on the dups, iteration {it}"
                );
                if let Some(tail) = &tail {
                    let mut g = vec![0u32; tail.size()];
                    rotating(tail, Collective::Allgather, it)?.allgather(&[me as u32], &mut g)?;
                    let want: Vec<u32> = (1..np as u32).rev().collect();
                    assert_eq!(g, want, "allgather on the reversed tail, iteration {it}");
                }
            }
            Ok(())
        });
    }
}

/// User tag of the point-to-point messages mixed with collectives.
const USER_TAG: i32 = 7;

#[test]
fn random_sequences_of_collectives_and_algorithms() {
    random_sequences_on(DeviceKind::Shm, &[(2, 300), (3, 300), (6, 200), (9, 120)]);
}

/// Hybrid, 2 × 3 and 4 + 3.
#[test]
fn random_sequences_of_collectives_and_algorithms_on_hybrid() {
    random_sequences_on(DeviceKind::Hybrid, &[(6, 200), (7, 120)]);
}

fn random_sequences_on(device: DeviceKind, cases: &[(usize, usize)]) {
    // Consecutive calls switch collective, algorithm, size, root and communicator at random
    // (the same choices on every rank), so no algorithm may leave state or messages behind that
    // confuse the next one.
    for &(np, steps) in cases {
        let barriers = Arc::new(AtomicUsize::new(0));
        run_ok_on(device, np, "random sequence", move |world| {
            let dup = world.dup()?;
            let mut rng = common::Rng::new(np as u64);
            let mut done = 0;
            for step in 0..steps {
                let coll = *rng.pick(&Collective::ALL);
                let algs = algorithms(coll);
                let alg = *rng.pick(&algs);
                let n = *rng.pick(&[0, 1, 2, 5, 17, 300, 2500]);
                let root = is_rooted(coll).then(|| rng.below(np as u64) as usize);
                let comm = if rng.chance(50) { &world } else { &dup };
                let comm = forced(comm, coll, alg)?;
                check_case(&comm, Case { coll, alg, np, n, root }, &barriers, &mut done)
                    .ctx(|| format!("step {step}"))?;
            }
            Ok(())
        });
    }
}

#[test]
fn collective_traffic_never_matches_user_receives() {
    collective_traffic_never_matches_user_receives_on(DeviceKind::Shm, &[1, 2, 3, 5, 8]);
}

/// Hybrid: wildcard receives there are held at the hybrid level, across both transports.
#[test]
fn collective_traffic_never_matches_user_receives_on_hybrid() {
    collective_traffic_never_matches_user_receives_on(DeviceKind::Hybrid, &[5, 6]);
}

fn collective_traffic_never_matches_user_receives_on(device: DeviceKind, nps: &[usize]) {
    for &np in nps {
        let barriers = Arc::new(AtomicUsize::new(0));
        run_ok_on(device, np, "wildcard receives during collectives", move |world| {
            let me = world.rank();
            let (left, right) = ((me + np - 1) % np, (me + 1) % np);
            let mut barriers_done = 0;
            let mut sweep = |comm: &Comm| sweep(comm, &[3], &barriers, &mut barriers_done);
            sweep(&world)?;
            world.barrier()?;
            assert!(world.iprobe(ANY_SOURCE, ANY_TAG)?.is_none(), "collective traffic is visible to a wildcard probe");
            let mut got = [0u64; 2];
            let st = world.scope(|s| {
                let req = s.irecv(&mut got, ANY_SOURCE, ANY_TAG)?;
                sweep(&world)?;
                world.send(&[me as u64, 42], right, USER_TAG)?;
                req.wait()
            })?;
            assert_eq!((st.source, st.tag, st.bytes), (left, USER_TAG, 16), "wildcard receive matched {st:?}");
            assert_eq!(got, [left as u64, 42], "wildcard receive got collective data");
            // Wildcard receives on a duplicate, with collectives on it and on the parent.
            let dup = world.dup()?;
            let mut got = [0u8; 1];
            let st = dup.scope(|s| {
                let req = s.irecv(&mut got, ANY_SOURCE, ANY_TAG)?;
                sweep(&world)?;
                sweep(&dup)?;
                dup.send(&[me as u8], right, USER_TAG + 1)?;
                req.wait()
            })?;
            assert_eq!(
                (st.source, st.tag, got[0]),
                (left, USER_TAG + 1, left as u8),
                "wildcard receive matched {st:?}"
            );
            Ok(())
        });
    }
}

// ---------------------------------------------------------------- buffers and waits

#[test]
fn buffers_are_reusable_as_soon_as_a_call_returns() {
    buffers_are_reusable_as_soon_as_a_call_returns_on(DeviceKind::Shm, &[2, 3, 5]);
}

/// Hybrid, 3 + 2.
#[test]
fn buffers_are_reusable_as_soon_as_a_call_returns_on_hybrid() {
    buffers_are_reusable_as_soon_as_a_call_returns_on(DeviceKind::Hybrid, &[5]);
}

fn buffers_are_reusable_as_soon_as_a_call_returns_on(device: DeviceKind, nps: &[usize]) {
    // Right after each call every rank scribbles over its send buffer (and the bcast root over
    // its data): an algorithm that returns while peers still read this rank's memory (as native
    // ones do, in place) hands them garbage. Random yields vary the interleavings.
    const ITERATIONS: usize = 60;
    const N: usize = 3000;
    for &np in nps {
        run_ok_on(device, np, "buffer reuse", move |world| {
            let me = world.rank();
            let mut rng = common::Rng::new(me as u64 + 1);
            let mut jitter = || {
                for _ in 0..rng.below(3) {
                    std::thread::yield_now();
                }
            };
            for coll in [
                Collective::Bcast,
                Collective::Scatter,
                Collective::Allgather,
                Collective::Alltoall,
                Collective::Allreduce,
                Collective::Scan,
            ] {
                for alg in algorithms(coll) {
                    let comm = forced(&world, coll, alg)?;
                    let what = |it: usize| move || format!("{coll} with algorithm {alg}, np={np}, iteration {it}");
                    for it in 0..ITERATIONS {
                        let seed = seed_of(&[coll as usize, alg as usize, it]);
                        let root = it % np;
                        jitter();
                        match coll {
                            Collective::Bcast => {
                                let mut buf: Vec<u32> =
                                    if me == root { (0..N).map(|i| val(seed, 0, i)).collect() } else { vec![0; N] };
                                comm.bcast(&mut buf, root).ctx(what(it))?;
                                if me == root {
                                    buf.fill(SENTINEL);
                                } else {
                                    check_each(&buf, |i| val(seed, 0, i), &what(it));
                                }
                            }
                            Collective::Scatter => {
                                let mut send: Vec<u32> = if me == root {
                                    (0..N * np).map(|k| val(seed, k / N, k % N)).collect()
                                } else {
                                    vec![]
                                };
                                let mut recv = vec![0u32; N];
                                comm.scatter(&send, &mut recv, root).ctx(what(it))?;
                                send.fill(SENTINEL);
                                jitter();
                                check_each(&recv, |i| val(seed, me, i), &what(it));
                            }
                            Collective::Allgather => {
                                let mut send: Vec<u32> = (0..N).map(|i| val(seed, me, i)).collect();
                                let mut recv = vec![0u32; N * np];
                                comm.allgather(&send, &mut recv).ctx(what(it))?;
                                send.fill(SENTINEL);
                                jitter();
                                check_each(&recv, |k| val(seed, k / N, k % N), &what(it));
                            }
                            Collective::Alltoall => {
                                let mut send: Vec<u32> =
                                    (0..N * np).map(|k| val(seed, me * np + k / N, k % N)).collect();
                                let mut recv = vec![0u32; N * np];
                                comm.alltoall(&send, &mut recv).ctx(what(it))?;
                                send.fill(SENTINEL);
                                jitter();
                                check_each(&recv, |k| val(seed, (k / N) * np + me, k % N), &what(it));
                            }
                            Collective::Allreduce => {
                                let mut send = reduce_inputs(seed, me, N);
                                let mut recv = vec![0u32; N];
                                comm.allreduce(&send, &mut recv, Sum).ctx(what(it))?;
                                send.fill(SENTINEL);
                                jitter();
                                check_each(&recv, |i| reduce_sum(seed, np, i), &what(it));
                            }
                            _ => {
                                let mut send = reduce_inputs(seed, me, N);
                                let mut recv = vec![0u32; N];
                                comm.scan(&send, &mut recv, Sum).ctx(what(it))?;
                                send.fill(SENTINEL);
                                jitter();
                                check_each(&recv, |i| reduce_sum(seed, me + 1, i), &what(it));
                            }
                        }
                    }
                }
            }
            Ok(())
        });
    }
}

#[test]
fn barrier_stress_with_jitter() {
    barrier_stress_with_jitter_on(DeviceKind::Shm, &[3, 7]);
}

/// Hybrid, 3 + 2.
#[test]
fn barrier_stress_with_jitter_on_hybrid() {
    barrier_stress_with_jitter_on(DeviceKind::Hybrid, &[5]);
}

fn barrier_stress_with_jitter_on(device: DeviceKind, nps: &[usize]) {
    // Nobody leaves barrier k before everyone has arrived at it, over many rounds in a row with
    // random delays (round k's flags must not be confused with round k + 1's).
    const ROUNDS: usize = 300;
    for &np in nps {
        let arrivals = Arc::new(AtomicUsize::new(0));
        run_ok_on(device, np, "barrier stress", move |world| {
            let mut rng = common::Rng::new(world.rank() as u64 + 7);
            let mut done = 0;
            for alg in algorithms(Collective::Barrier) {
                let comm = forced(&world, Collective::Barrier, alg)?;
                for _ in 0..ROUNDS {
                    if rng.chance(30) {
                        std::thread::yield_now();
                    }
                    arrivals.fetch_add(1, Ordering::SeqCst);
                    comm.barrier().ctx(|| format!("barrier {alg}, np={np}"))?;
                    done += 1;
                    let seen = arrivals.load(Ordering::SeqCst);
                    assert!(seen >= np * done, "barrier {alg}, np={np}: left barrier {done} after {seen} arrivals");
                    assert!(seen <= np * (done + 1), "barrier {alg}, np={np}: {seen} arrivals while in round {done}");
                }
            }
            Ok(())
        });
    }
}

/// A rank waiting inside a native collective still moves its point-to-point traffic: here the
/// peer can only reach the barrier after the waiting rank has drained a ring the peer filled
/// (blocking sends beyond the ring's 64 slots), and after the waiting rank's own queued
/// nonblocking sends have been started.
#[test]
fn native_waits_keep_point_to_point_moving() {
    const MESSAGES: u32 = 300;
    run_ok(2, "native barrier with point-to-point in flight", |world| {
        let world = forced(&world, Collective::Barrier, Algorithm::Native)?;
        let peer = 1 - world.rank();
        let outgoing: Vec<u32> = (0..MESSAGES).collect();
        world.scope(|s| {
            // Nonblocking sends beyond the ring capacity: the tail is queued in the device.
            let sends: Vec<_> =
                outgoing.iter().map(|v| s.isend(std::slice::from_ref(v), peer, 1)).collect::<Result<_>>()?;
            if world.rank() == 0 {
                world.barrier()?;
                for expect in 0..MESSAGES {
                    let mut got = [0u32];
                    world.recv(&mut got, peer, 1)?;
                    assert_eq!(got[0], expect);
                }
            } else {
                for expect in 0..MESSAGES {
                    let mut got = [0u32];
                    world.recv(&mut got, peer, 1)?;
                    assert_eq!(got[0], expect);
                }
                world.barrier()?;
            }
            sends.into_iter().try_for_each(|r| r.wait().map(drop))
        })
    });
}
