//! Nonblocking collectives (issue 5) beyond their results (the model: `nonblocking_common`):
//! 1. requests leaked with `mem::forget` or dropped, on fast and slow ranks; a panic with
//!    collectives outstanding; a wildcard receive among collectives;
//! 2. argument errors at the call, request states after completion, and cancel;
//! 3. MPI's progress rule: a rank blocked in `recv`, `probe` or a blocking barrier on a dup
//!    still forwards a collective's data (and the tcp progress thread serves a root that makes
//!    no calls).
//!
//! Every job runs under the watchdog of `coll_common::job`, so a hang fails the test.

mod coll_common;
mod common;
mod nonblocking_common;

use std::mem;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use coll_common::{Context, job};
use common::device_suite;
use fastmp::coll::{Algorithm, Collective, Tuning};
use fastmp::{ANY_SOURCE, ANY_TAG, Comm, DeviceKind, Error, Request, Result, Scope, testany, waitall, waitany};
use nonblocking_common::{
    BIG, Bufs, Case, Kind, Red, SENTINEL, Tunings, chain_bcast, config, flat_bcast, run_job, same, spin, start,
    twin_result,
};

// ---------------------------------------------------------------- 1. forgotten requests

/// The collectives whose requests are leaked or dropped, rendezvous sizes included.
fn forgotten_cases(np: usize) -> Vec<Case> {
    let last = np - 1;
    vec![
        Case::new(Kind::Bcast, BIG, last, Red::Sum, 1),
        Case::new(Kind::Allreduce, 33, 0, Red::Affine, 2),
        Case::new(Kind::Alltoall, BIG / np, 0, Red::Sum, 3),
        Case::new(Kind::Gatherv, 2000, np / 2, Red::Sum, 4),
        Case::new(Kind::Barrier, 0, 0, Red::Sum, 5),
        Case::new(Kind::Scan, 4000, 0, Red::Affine, 6),
        Case::new(Kind::Reduce, 17, last, Red::Affine, 7),
        Case::new(Kind::Allgatherv, 3000, 0, Red::Sum, 8),
    ]
}

/// Requests leaked with `mem::forget` or dropped unwaited, on fast and slow ranks, under the
/// default and the point-to-point tunings: the scope's end finishes them, the buffers then hold
/// the blocking twins' results, and later collectives still match.
fn forgotten_requests(dev: DeviceKind) {
    let nps: &[usize] = match dev {
        DeviceKind::Shm => &[1, 3, 4],
        _ => &[3],
    };
    for &np in nps {
        run_job(dev, np, "forgotten requests", move |world| {
            let me = world.rank();
            for (t, tunings) in [Tunings::Default, Tunings::P2p].into_iter().enumerate() {
                let comm = world.with_tuning(tunings.tuning(t));
                for slow in [None, Some(np - 1), Some(0)] {
                    let cases = forgotten_cases(np);
                    let what = || format!("{tunings:?} tuning, slow rank {slow:?}");
                    let mut bufs: Vec<Bufs> = cases.iter().map(|case| case.bufs(np, me)).collect();
                    comm.scope(|s| {
                        if slow == Some(me) {
                            std::thread::sleep(Duration::from_millis(30));
                        }
                        for (i, (case, b)) in cases.iter().zip(bufs.iter_mut()).enumerate() {
                            let req = start(s, case, b).ctx(|| format!("starting {case}"))?;
                            if i % 2 == 0 { mem::forget(req) } else { drop(req) }
                        }
                        Ok(())
                    })
                    .ctx(what)?;
                    for (case, got) in cases.iter().zip(&bufs) {
                        let want = twin_result(&comm, case)?;
                        same(got, &want, || format!("{}: forgotten {case} on rank {me}", what()))?;
                    }
                    // The communicator is still in step, nonblocking and blocking.
                    let (mine, mut sum) = ([me as u32; 3], [0u32; 3]);
                    comm.scope(|s| s.iallreduce(&mine, &mut sum, Red::Sum)?.wait()).ctx(what)?;
                    let total = (np * (np - 1) / 2) as u32;
                    if sum != [total; 3] {
                        return Err(Error::other(format!("{}: iallreduce after forgetting gave {sum:?}", what())));
                    }
                    comm.barrier().ctx(what)?;
                }
            }
            Ok(())
        });
    }
}

/// A forgotten collective is still matched in issue order by the ones started after it in the
/// same scope, which are waited for normally.
fn forgotten_then_waited(dev: DeviceKind) {
    run_job(dev, 3, "a forgotten collective followed by waited ones", |world| {
        let me = world.rank();
        let cases = forgotten_cases(3);
        let mut bufs: Vec<Bufs> = cases.iter().map(|case| case.bufs(3, me)).collect();
        world.scope(|s| {
            let mut reqs = Vec::new();
            for (i, (case, b)) in cases.iter().zip(bufs.iter_mut()).enumerate() {
                let req = start(s, case, b)?;
                if i < 2 { mem::forget(req) } else { reqs.push(req) }
            }
            waitall(&mut reqs).map(drop)
        })?;
        for (case, got) in cases.iter().zip(&bufs) {
            same(got, &twin_result(&world, case)?, || format!("{case} on rank {me}"))?;
        }
        Ok(())
    });
}

/// A panic inside a scope with collectives outstanding abandons them (the scope's end drops
/// their remaining stages instead of running them, see `Engine::finish_scope`). When every rank
/// panics and catches it, nothing hangs; when one rank's panic ends it, the job fails naming
/// that rank while the others wait in `waitall`, instead of hanging. (Whether an abandoned
/// operation writes a buffer after its scope is beyond what this test can see.)
fn panic_with_collectives_outstanding(dev: DeviceKind) {
    let outstanding = |world: &Comm, panics: bool| -> Result<()> {
        let (me, np) = (world.rank(), world.size());
        let cases = forgotten_cases(np);
        let mut bufs: Vec<Bufs> = cases.iter().map(|case| case.bufs(np, me)).collect();
        world.scope(|s| {
            let mut reqs = Vec::new();
            for (case, b) in cases.iter().zip(bufs.iter_mut()) {
                reqs.push(start(s, case, b)?);
            }
            if panics {
                panic!("deliberate panic on rank {me} with {} collectives outstanding", reqs.len());
            }
            waitall(&mut reqs).map(drop)
        })
    };
    run_job(dev, 3, "every rank panics with collectives outstanding", move |world| {
        // A rank may also see a peer's abandonment (or exit) first, as an `Err` from a start.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| outstanding(&world, true))) {
            Err(_) | Ok(Err(_)) => Ok(()),
            Ok(Ok(())) => Err(Error::other("the scope's panic was lost")),
        }
    });
    let what = format!("rank 1 panics with collectives outstanding ({dev:?})");
    // The job's error names rank 1: its panic, or a peer's error about rank 1's abandonment.
    match job(config(dev, 3), &what, move |world| outstanding(&world, world.rank() == 1)) {
        Err(Error::RankFailed { rank: 1, cause }) if cause.contains("deliberate panic") => {}
        Err(Error::RankFailed { cause, .. }) if cause.contains("rank 1 abandoned") => {}
        other => panic!("{what}: expected rank 1 to fail the job, got {other:?}"),
    }
}

/// A wildcard receive (any source, any tag) posted before collectives start on the same
/// communicator gets the user's message, never a collective's traffic.
fn wildcard_receive_among_collectives(dev: DeviceKind) {
    let nps: &[usize] = match dev {
        DeviceKind::Shm => &[2, 4],
        _ => &[3],
    };
    for &np in nps {
        run_job(dev, np, "a wildcard receive among collectives", move |world| {
            let me = world.rank();
            let (right, left) = ((me + 1) % np, (me + np - 1) % np);
            for (k, tunings) in [Tunings::Default, Tunings::P2p].into_iter().enumerate() {
                let comm = world.with_tuning(tunings.tuning(k));
                let cases = forgotten_cases(np);
                let mut bufs: Vec<Bufs> = cases.iter().map(|case| case.bufs(np, me)).collect();
                let (note, mut inbox) = ([me as u32, 1, 2], [SENTINEL; 3]);
                let status = comm.scope(|s| {
                    let wildcard = s.irecv(&mut inbox, ANY_SOURCE, ANY_TAG)?;
                    let mut reqs = Vec::new();
                    for (case, b) in cases.iter().zip(bufs.iter_mut()) {
                        reqs.push(start(s, case, b)?);
                    }
                    waitall(&mut reqs)?;
                    s.isend(&note, right, 42)?.wait()?;
                    wildcard.wait()
                })?;
                if (status.source, status.tag, inbox) != (left, 42, [left as u32, 1, 2]) {
                    return Err(Error::other(format!(
                        "{tunings:?}: rank {me}'s wildcard receive got {inbox:x?} from {} with tag {}",
                        status.source, status.tag
                    )));
                }
                for (case, got) in cases.iter().zip(&bufs) {
                    same(got, &twin_result(&comm, case)?, || format!("{case} under {tunings:?} on rank {me}"))?;
                }
            }
            Ok(())
        });
    }
}

// ---------------------------------------------------------------- 2. errors and request states

/// Starts one collective with `start` in a scope of its own and expects `InvalidArgument`
/// mentioning `want` at the call. A collective that started instead is leaked to the scope
/// (which then finishes or hangs it) and reported.
fn rejects<'e>(
    comm: &'e Comm,
    want: &str,
    what: &str,
    start: impl for<'s> FnOnce(&'s Scope<'s, 'e>) -> Result<Request<'s>>,
) -> Result<()> {
    comm.scope(|s| match start(s) {
        Err(Error::InvalidArgument(m)) if m.contains(want) => Ok(()),
        Err(e) => Err(Error::other(format!("{what}: expected InvalidArgument mentioning {want:?}, got {e}"))),
        Ok(req) => {
            mem::forget(req);
            Err(Error::other(format!("{what}: started instead of failing ({want})")))
        }
    })
}

/// Arguments every rank can see are wrong give `Err` at the call (nothing starts, so the
/// communicator stays in step and the next collectives match).
fn bad_arguments_fail_at_the_call(dev: DeviceKind) {
    const NP: usize = 3;
    run_job(dev, NP, "bad arguments", |world| {
        let me = world.rank();
        let (mut two, mut six, mut seven) = ([0u32; 2], [0u32; 6], [0u32; 7]);
        let (c, twos, displs) = (&world, [2; NP], [0, 2, 4]);
        for root in [NP, NP + 5, usize::MAX] {
            let bad = format!("root {root} out of range");
            rejects(c, &bad, "ibcast", |s| s.ibcast(&mut two, root))?;
            rejects(c, &bad, "iscatter", |s| s.iscatter(&[1; 6], &mut two, root))?;
            rejects(c, &bad, "iscatterv", |s| s.iscatterv(&[1; 6], &twos, &displs, &mut two, root))?;
            rejects(c, &bad, "igather", |s| s.igather(&[1; 2], &mut six, root))?;
            rejects(c, &bad, "igatherv", |s| s.igatherv(&[1; 2], &mut six, &twos, &displs, root))?;
            rejects(c, &bad, "ireduce", |s| s.ireduce(&[1; 2], &mut two, Red::Sum, root))?;
        }
        rejects(c, "receive buffer has 2 elements", "iallreduce", |s| s.iallreduce(&[1; 4], &mut two, Red::Sum))?;
        rejects(c, "receive buffer has 7 elements", "iallgather", |s| s.iallgather(&[1; 2], &mut seven))?;
        rejects(c, "7 elements", "ialltoall", |s| s.ialltoall(&[1; 7], &mut seven))?;
        rejects(c, "receive buffer has 2 elements", "ialltoall", |s| s.ialltoall(&[1; 6], &mut two))?;
        rejects(c, "2 counts", "iallgatherv", |s| s.iallgatherv(&[1; 2], &mut six, &[2; 2], &[0, 2]))?;
        rejects(c, "exceeds", "iallgatherv", |s| s.iallgatherv(&[1; 2], &mut six, &twos, &[0, 2, 5]))?;
        rejects(c, "overlap", "ialltoallv", |s| s.ialltoallv(&[1; 6], &twos, &displs, &mut six, &twos, &[0, 1, 4]))?;
        rejects(c, "counts", "ireduce_scatter", |s| s.ireduce_scatter(&[1; 6], &mut two, &[2; 2], Red::Sum))?;
        rejects(c, "send buffer has 4 elements", "ireduce_scatter", |s| {
            s.ireduce_scatter(&[1; 4], &mut two, &twos, Red::Sum)
        })?;
        rejects(c, "send buffer has 7 elements", "ireduce_scatter_block", |s| {
            s.ireduce_scatter_block(&[1; 7], &mut two, Red::Sum)
        })?;
        rejects(c, "receive buffer has 7 elements", "iscan", |s| s.iscan(&[1; 6], &mut seven, Red::Affine))?;
        rejects(c, "receive buffer has 2 elements", "iexscan", |s| s.iexscan(&[1; 6], &mut two, Red::Affine))?;
        // Nothing started: the next collectives, nonblocking and blocking, match across ranks.
        let mut data = [me as u32 + 10; 5];
        world.scope(|s| s.ibcast(&mut data, NP - 1)?.wait())?;
        if data != [NP as u32 + 9; 5] {
            return Err(Error::other(format!("ibcast after the errors gave {data:?}")));
        }
        world.barrier()?;
        // After finalize every nonblocking collective fails at once.
        world.finalize()?;
        let mut sum = [0u32; 4];
        world.scope(|s| {
            assert!(matches!(s.ibarrier(), Err(Error::Finalized(_))), "ibarrier after finalize");
            let after = s.iallreduce(&[1; 4], &mut sum, Red::Sum);
            assert!(matches!(after, Err(Error::Finalized(_))), "iallreduce after finalize");
        });
        Ok(())
    });
}

/// With one rank the root is everyone, so the root-only checks are local to every rank.
fn root_only_errors_on_a_single_rank(dev: DeviceKind) {
    run_job(dev, 1, "root-only argument errors", |world| {
        let (mut two, mut three, mut four) = ([0u32; 2], [0u32; 3], [0u32; 4]);
        let c = &world;
        rejects(c, "send buffer has 3 elements", "iscatter", |s| s.iscatter(&[0; 3], &mut two, 0))?;
        rejects(c, "receive buffer has 3 elements", "igather", |s| s.igather(&[0; 2], &mut three, 0))?;
        rejects(c, "receive buffer has 3 elements", "ireduce", |s| s.ireduce(&[0; 2], &mut three, Red::Sum, 0))?;
        rejects(c, "exceeds", "iscatterv", |s| s.iscatterv(&[0; 4], &[3], &[2], &mut three, 0))?;
        rejects(c, "receive buffer", "iscatterv", |s| s.iscatterv(&[0; 4], &[3], &[0], &mut two, 0))?;
        rejects(c, "send buffer", "igatherv", |s| s.igatherv(&[0; 2], &mut four, &[3], &[0], 0))
    });
}

/// Completed collective requests behave like point-to-point ones: inactive afterwards, `test`
/// is then an error, `wait`/`waitall` give empty statuses and `waitany`/`testany` find nothing.
fn request_states_after_completion(dev: DeviceKind) {
    run_job(dev, 3, "request states", |world| {
        let me = world.rank();
        let mut data = [me as u32; 4];
        let mut total = [0u32; 4];
        world.scope(|s| {
            let mut barrier = s.ibarrier()?;
            spin(|| Ok(barrier.test()?.is_some()))?;
            assert!(!barrier.is_active(), "a tested-complete ibarrier is inactive");
            assert!(matches!(barrier.test(), Err(Error::InvalidArgument(_))), "test on a completed ibarrier");
            let mut reqs = vec![barrier, s.ibcast(&mut data, 1)?, s.iallreduce(&[1u32; 4], &mut total, Red::Sum)?];
            waitall(&mut reqs)?;
            assert!(reqs.iter().all(|r| !r.is_active()), "waitall leaves every request inactive");
            assert!(waitany(&mut reqs)?.is_none(), "waitany over completed requests");
            assert!(testany(&mut reqs)?.is_none(), "testany over completed requests");
            assert_eq!(waitall(&mut reqs)?.len(), 3, "waitall over completed requests");
            reqs.pop().expect("three requests").wait()?;
            Ok::<_, Error>(())
        })?;
        assert_eq!((data, total), ([1; 4], [3; 4]));
        Ok(())
    });
}

/// Cancelling an outstanding collective is an error (as in MPI) and leaves it running: rank 1
/// cancels its ibarrier before rank 0 (which waits for rank 1's go-ahead) has even started its
/// own, so it cannot have completed yet.
fn collective_requests_cannot_be_cancelled(dev: DeviceKind) {
    run_job(dev, 3, "cancelling a collective", |world| {
        let me = world.rank();
        world.scope(|s| {
            if me == 0 {
                world.recv(&mut [0u8], 1, 9)?;
            }
            let barrier = s.ibarrier()?;
            if me == 1 {
                let cancelled = barrier.cancel();
                if !matches!(cancelled, Err(Error::InvalidArgument(_))) {
                    return Err(Error::other(format!("cancel of an outstanding ibarrier gave {cancelled:?}")));
                }
                world.send(&[1u8], 0, 9)?;
            }
            let status = barrier.wait()?;
            if status.cancelled {
                return Err(Error::other("the ibarrier's status says cancelled"));
            }
            Ok(())
        })
    });
}

// ---------------------------------------------------------------- 3. progress

/// The blocking call rank 1 waits in while rank 2 waits for the collective.
#[derive(Clone, Copy, Debug)]
enum Blocker {
    /// `recv` from rank 2, which sends once its collective is done.
    Recv,
    /// `probe` for that message (then `recv`).
    Probe,
    /// A blocking barrier on a dup, which the other ranks enter once their collective is done.
    DupBarrier,
}

/// MPI's progress rule: rank 1, an interior rank of `case`'s algorithm under `tuning`, is
/// blocked in a call that only returns after rank 2's collective completes, which needs rank 1's
/// part: every `blocker` must progress it.
fn progress_while_blocked(dev: DeviceKind, tuning: Tuning, case: Case) {
    for blocker in [Blocker::Recv, Blocker::Probe, Blocker::DupBarrier] {
        let tuning = tuning.clone();
        run_job(dev, 3, &format!("{case} while rank 1 is blocked in {blocker:?}"), move |world| {
            let comm = world.with_tuning(tuning.clone());
            let dup = comm.dup()?;
            let me = comm.rank();
            let mut got = case.bufs(3, me);
            comm.scope(|s| {
                let req = start(s, &case, &mut got)?;
                match (me, blocker) {
                    (1, Blocker::Recv) => drop(comm.recv(&mut [0u32], 2, 5)?),
                    (1, Blocker::Probe) => {
                        comm.probe(2, 5)?;
                        comm.recv(&mut [0u32], 2, 5)?;
                    }
                    (1, Blocker::DupBarrier) => dup.barrier()?,
                    _ => {}
                }
                req.wait()?;
                match (me, blocker) {
                    (1, _) => {}
                    (_, Blocker::DupBarrier) => dup.barrier()?,
                    (2, _) => comm.send(&[7u32], 1, 5)?,
                    _ => {}
                }
                Ok::<_, Error>(())
            })?;
            same(&got, &twin_result(&comm, &case)?, || format!("{case} on rank {me}"))
        });
    }
}

/// A bcast from rank 0 along the chain 0 → 1 → 2 (and under the default tuning).
fn progress_of_a_forwarded_bcast(dev: DeviceKind) {
    for n in [5, BIG] {
        for tuning in [chain_bcast(), Tuning::defaults()] {
            progress_while_blocked(dev, tuning, Case::new(Kind::Bcast, n, 0, Red::Sum, 9));
        }
    }
}

/// A ring allreduce: every rank's data passes through rank 1.
fn progress_of_a_ring_allreduce(dev: DeviceKind) {
    let ring = Tuning::defaults().force(Collective::Allreduce, Algorithm::Bkt).expect("valid");
    for n in [6, BIG] {
        progress_while_blocked(dev, ring.clone(), Case::new(Kind::Allreduce, n, 0, Red::Sum, 10));
    }
}

/// A rank that waits for one collective while it has another outstanding must keep driving
/// it: only a collective waited for alone may finish in place (as its blocking twin does).
/// Rank 1 waits for a ring allreduce, which needs rank 2's later steps; rank 2 waits for a
/// chain bcast first, which needs rank 1 to forward it. Rank 0 starts only once rank 1 has
/// started both (a message says so), so rank 1 can forward only from inside its wait.
fn waits_in_any_order_drive_every_outstanding_collective(dev: DeviceKind) {
    let ring = Tuning::defaults().force(Collective::Allreduce, Algorithm::Bkt).expect("valid");
    for n in [6, BIG] {
        let ring = ring.clone();
        run_job(dev, 3, &format!("an allreduce and a bcast of {n} waited in crossing orders"), move |world| {
            let me = world.rank();
            // Two communicators (a tuning alone shares its communicator's collective order).
            let (ring_comm, chain_comm) =
                (world.dup()?.with_tuning(ring.clone()), world.dup()?.with_tuning(chain_bcast()));
            let reduce = Case::new(Kind::Allreduce, n, 0, Red::Affine, 11);
            let bcast = Case::new(Kind::Bcast, n, 0, Red::Sum, 12);
            let (mut reduced, mut broadcast) = (reduce.bufs(3, me), bcast.bufs(3, me));
            if me == 0 {
                world.recv(&mut [0u32], 1, 30)?;
            }
            ring_comm.scope(|r| {
                chain_comm.scope(|c| {
                    // Each rank starts first what it waits for first (the order of collectives
                    // on different communicators is free).
                    let (reducing, broadcasting) = if me == 2 {
                        let broadcasting = start(c, &bcast, &mut broadcast)?;
                        (start(r, &reduce, &mut reduced)?, broadcasting)
                    } else {
                        (start(r, &reduce, &mut reduced)?, start(c, &bcast, &mut broadcast)?)
                    };
                    if me == 1 {
                        world.send(&[1u32], 0, 30)?;
                    }
                    if me == 2 {
                        broadcasting.wait()?;
                        reducing.wait()?;
                    } else {
                        reducing.wait()?;
                        broadcasting.wait()?;
                    }
                    Ok::<_, Error>(())
                })
            })?;
            same(&reduced, &twin_result(&ring_comm, &reduce)?, || format!("{reduce} on rank {me}"))?;
            same(&broadcast, &twin_result(&chain_comm, &bcast)?, || format!("{bcast} on rank {me}"))
        });
    }
}

/// A collective waited for alone, while the rank's own point-to-point transfers (rendezvous
/// sizes) are outstanding and a peer receives from it before waiting: the in-place wait still
/// moves the transfers.
fn a_collective_waited_alone_still_moves_point_to_point(dev: DeviceKind) {
    let ring = Tuning::defaults().force(Collective::Allreduce, Algorithm::Bkt).expect("valid");
    run_job(dev, 3, "a ring allreduce waited alone beside rendezvous sends", move |world| {
        let comm = world.with_tuning(ring.clone());
        let (me, np) = (comm.rank(), comm.size());
        let case = Case::new(Kind::Allreduce, BIG, 0, Red::Sum, 14);
        let mut got = case.bufs(np, me);
        let out = vec![me as u32 + 1; BIG];
        let mut inbox = vec![SENTINEL; BIG];
        let (next, prev) = ((me + 1) % np, (me + np - 1) % np);
        comm.scope(|s| {
            let send = s.isend(&out, next, 21)?;
            let collective = start(s, &case, &mut got)?;
            if me == 1 {
                // Rank 1 first receives rank 0's message, blocking, then waits.
                comm.recv(&mut inbox, prev, 21)?;
                collective.wait()?;
            } else {
                collective.wait()?;
                comm.recv(&mut inbox, prev, 21)?;
            }
            send.wait()?;
            Ok::<_, Error>(())
        })?;
        if inbox.iter().any(|&x| x != prev as u32 + 1) {
            return Err(Error::other(format!("rank {me}: wrong message from rank {prev}")));
        }
        same(&got, &twin_result(&comm, &case)?, || format!("{case} on rank {me}"))
    });
}

/// Many small collectives from one root in flight at once, completed in reverse order, the
/// last ones polled with `test` before any is waited for: each receive takes its own
/// operation's message (small receives of nonblocking collectives are matched when polled,
/// not posted, so their messages queue up meanwhile).
fn small_collectives_completed_in_reverse_order(dev: DeviceKind) {
    const OPS: usize = 24;
    run_job(dev, 3, "24 small ibcasts and igathers completed in reverse order", |world| {
        let (me, np) = (world.rank(), world.size());
        let mut bcasts: Vec<[u64; 2]> =
            (0..OPS).map(|k| if me == 0 { [k as u64, 100 + k as u64] } else { [u64::MAX; 2] }).collect();
        let mine: Vec<[u32; 1]> = (0..OPS).map(|k| [(me * 1000 + k) as u32]).collect();
        let mut gathered = vec![vec![0u32; if me == 0 { np } else { 0 }]; OPS];
        world.scope(|s| {
            let mut reqs = Vec::new();
            for ((b, g), m) in bcasts.iter_mut().zip(gathered.iter_mut()).zip(&mine) {
                reqs.push(s.ibcast(b, 0)?);
                reqs.push(s.igather(m, g, 0)?);
            }
            for req in reqs.iter_mut().rev().take(6) {
                req.test()?;
            }
            for req in reqs.into_iter().rev() {
                req.wait()?;
            }
            Ok::<_, Error>(())
        })?;
        for (k, b) in bcasts.iter().enumerate() {
            if *b != [k as u64, 100 + k as u64] {
                return Err(Error::other(format!("rank {me}: ibcast {k} delivered {b:?}")));
            }
        }
        for (k, g) in gathered.iter().enumerate().filter(|_| me == 0) {
            let want: Vec<u32> = (0..np).map(|r| (r * 1000 + k) as u32).collect();
            if *g != want {
                return Err(Error::other(format!("igather {k} delivered {g:?}, want {want:?}")));
            }
        }
        Ok(())
    });
}

/// With the tcp progress thread on, the root's transfers (rendezvous sizes) are served while
/// the root makes no fastmp call at all: it sleeps until every other rank has its data. (The
/// progress thread moves data; a stage that depends on an earlier one, such as forwarding down
/// a tree, still starts only when its rank calls fastmp.)
#[test]
fn tcp_progress_thread_serves_a_root_that_makes_no_calls() {
    let done = Arc::new(AtomicUsize::new(0));
    let config = config(DeviceKind::Tcp, 3).progress_thread(true).tuning(flat_bcast());
    let result = job(config, "tcp progress thread", move |world| {
        let me = world.rank();
        let mut buf = if me == 0 { vec![42u32; BIG] } else { vec![SENTINEL; BIG] };
        world.scope(|s| {
            let req = s.ibcast(&mut buf, 0)?;
            if me == 0 {
                // Computes (no fastmp calls) until the others are done, or gives up after a minute.
                let since = Instant::now();
                while done.load(Ordering::SeqCst) < 2 && since.elapsed() < Duration::from_secs(60) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                if done.load(Ordering::SeqCst) < 2 {
                    return Err(Error::other("ranks 1 and 2 got no data while the root made no fastmp calls"));
                }
            }
            req.wait()?;
            if me != 0 {
                done.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        })?;
        if buf.iter().all(|&x| x == 42) { Ok(()) } else { Err(Error::other(format!("wrong bcast data on rank {me}"))) }
    });
    if let Err(e) = result {
        panic!("tcp progress thread: {e}");
    }
}

device_suite!(
    both: [
        forgotten_requests,
        forgotten_then_waited,
        panic_with_collectives_outstanding,
        wildcard_receive_among_collectives,
        bad_arguments_fail_at_the_call,
        root_only_errors_on_a_single_rank,
        request_states_after_completion,
        collective_requests_cannot_be_cancelled,
        progress_of_a_forwarded_bcast,
        progress_of_a_ring_allreduce,
        waits_in_any_order_drive_every_outstanding_collective,
        a_collective_waited_alone_still_moves_point_to_point,
        small_collectives_completed_in_reverse_order,
    ],
    tcp_ignored: [],
);
