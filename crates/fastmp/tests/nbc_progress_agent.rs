//! The progress agent (`Config::progress_agent`): nonblocking collectives give the blocking
//! twins' results with it on, on every device; leaked requests, panicking scopes and failing
//! ranks with agent copies in flight neither corrupt memory nor hang; oversubscribed runs stay
//! correct. (The agent is process-wide: once on, it serves every later job of this test binary.)

use fastmp::coll::{Algorithm, Collective, Tuning};
use fastmp::op::Sum;
use fastmp::{Comm, Config, DeviceKind, Error, Result};

/// Bytes per alltoall block: above the agent's 64 KiB threshold.
const BLOCK: usize = 80 * 1024 + 3;

fn config(device: DeviceKind, np: usize) -> Config {
    let config = Config::new().device(device).np(np).progress_agent(true);
    if device == DeviceKind::Hybrid { config.threads_per_process(2) } else { config }
}

/// `world` with alltoall(v) over messages (the path whose own-block copy goes to the agent).
fn over_messages(world: &Comm) -> Result<Comm> {
    let tuning = Tuning::defaults()
        .force(Collective::Alltoall, Algorithm::Nbft)?
        .force(Collective::Alltoallv, Algorithm::Nbft)?;
    Ok(world.with_tuning(tuning))
}

/// Rank `me`'s send buffer: block `j` is for rank `j`.
fn send_of(me: usize, np: usize) -> Vec<u8> {
    (0..np * BLOCK).map(|i| (me * 31 + i * 7 + i / BLOCK) as u8).collect()
}

/// ialltoall, ialltoallv, ibcast and iallreduce against their blocking twins.
fn twins_agree(world: Comm) -> Result<()> {
    let comm = over_messages(&world)?;
    let (me, np) = (comm.rank(), comm.size());
    let send = send_of(me, np);
    let (mut blocking, mut nonblocking) = (vec![0u8; send.len()], vec![1u8; send.len()]);
    comm.alltoall(&send, &mut blocking)?;
    comm.scope(|s| s.ialltoall(&send, &mut nonblocking)?.wait().map(drop))?;
    assert_eq!(blocking, nonblocking, "ialltoall on rank {me}");

    let counts = vec![BLOCK; np];
    let displs: Vec<usize> = (0..np).map(|j| (np - 1 - j) * BLOCK).collect();
    let (mut blocking, mut nonblocking) = (vec![0u8; send.len()], vec![2u8; send.len()]);
    comm.alltoallv(&send, &counts, &displs, &mut blocking, &counts, &displs)?;
    comm.scope(|s| s.ialltoallv(&send, &counts, &displs, &mut nonblocking, &counts, &displs)?.wait().map(drop))?;
    assert_eq!(blocking, nonblocking, "ialltoallv on rank {me}");

    let mine: Vec<f64> = (0..BLOCK / 8).map(|i| (i + me) as f64).collect();
    let (mut blocking, mut nonblocking) = (vec![0.0; mine.len()], vec![0.0; mine.len()]);
    world.allreduce(&mine, &mut blocking, Sum)?;
    world.scope(|s| s.iallreduce(&mine, &mut nonblocking, Sum)?.wait().map(drop))?;
    assert_eq!(blocking, nonblocking, "iallreduce on rank {me}");

    let mut bcast = if me == np - 1 { send.clone() } else { vec![0; send.len()] };
    world.scope(|s| s.ibcast(&mut bcast, np - 1)?.wait().map(drop))?;
    assert_eq!(bcast, send_of(np - 1, np), "ibcast on rank {me}");
    Ok(())
}

#[test]
fn results_equal_the_blocking_twins_on_every_device() {
    for (device, np) in [(DeviceKind::Shm, 2), (DeviceKind::Shm, 3), (DeviceKind::Tcp, 2), (DeviceKind::Hybrid, 4)] {
        config(device, np).run(twins_agree).unwrap_or_else(|e| panic!("{device:?} np {np}: {e}"));
    }
}

/// Requests leaked with `mem::forget` while their copies may be queued or running: the scope's
/// end finishes them, so the buffers hold the right data once it returns.
#[test]
fn leaked_requests_are_finished_by_the_scope() {
    config(DeviceKind::Shm, 3)
        .run(|world| {
            let comm = over_messages(&world)?;
            let (me, np) = (comm.rank(), comm.size());
            let send = send_of(me, np);
            let mut recv = vec![0u8; send.len()];
            let mut expected = vec![0u8; send.len()];
            comm.alltoall(&send, &mut expected)?;
            for _ in 0..3 {
                recv.fill(0);
                comm.scope(|s| {
                    std::mem::forget(s.ialltoall(&send, &mut recv)?);
                    Ok(())
                })?;
                assert_eq!(recv, expected, "rank {me}");
            }
            Ok(())
        })
        .unwrap();
}

/// A rank that panics with an agent copy in flight fails the job (naming it), and nobody
/// hangs; the panicking scope drops (revokes or waits for) its copy before the buffers go.
#[test]
fn a_panicking_scope_with_copies_in_flight_fails_the_job() {
    let outcome = config(DeviceKind::Shm, 3).run(|world| {
        let comm = over_messages(&world)?;
        let (me, np) = (comm.rank(), comm.size());
        let send = send_of(me, np);
        let mut recv = vec![0u8; send.len()];
        comm.scope(|s| {
            let request = s.ialltoall(&send, &mut recv)?;
            if me == 1 {
                panic!("deliberate panic on rank 1 with an alltoall outstanding");
            }
            request.wait().map(drop)
        })
    });
    expect_rank_1_failed(outcome);
}

/// A rank that leaves with an error instead of joining the alltoall: the others get an `Err`
/// from their wait (or start), not a hang.
#[test]
fn a_failing_rank_fails_the_others_operations() {
    let outcome = config(DeviceKind::Shm, 3).run(|world| {
        let comm = over_messages(&world)?;
        let (me, np) = (comm.rank(), comm.size());
        if me == 2 {
            return Err(Error::other("rank 2 gives up"));
        }
        let send = send_of(me, np);
        let mut recv = vec![0u8; send.len()];
        comm.scope(|s| s.ialltoall(&send, &mut recv)?.wait().map(drop))
    });
    assert!(outcome.is_err(), "the job must fail: {outcome:?}");
}

/// Eight ranks on however few cores: ranks make their own copies when the agent is not
/// scheduled, so the run stays correct.
#[test]
fn oversubscribed_ranks_stay_correct() {
    config(DeviceKind::Shm, 8)
        .run(|world| {
            let comm = over_messages(&world)?;
            let (me, np) = (comm.rank(), comm.size());
            let send = send_of(me, np);
            let mut recv = vec![0u8; send.len()];
            comm.scope(|s| s.ialltoall(&send, &mut recv)?.wait().map(drop))?;
            for (j, block) in recv.chunks(BLOCK).enumerate() {
                assert_eq!(block, &send_of(j, np)[me * BLOCK..(me + 1) * BLOCK], "rank {me} from {j}");
            }
            Ok(())
        })
        .unwrap();
}

/// Elements per reduction: odd, and each rank's chunk above the agent's 64 KiB threshold.
const ELEMS: usize = 3 * 8 * 1024 + 5;

fn values(me: usize, salt: u64) -> Vec<u64> {
    (0..ELEMS as u64).map(|i| i.wrapping_mul(2654435761) ^ (me as u64 * 977 + salt)).collect()
}

/// The default tuning (the shm device's native collectives hand their bcast copies and
/// allreduce folds to the agent): every predefined op, a user op, in place, every root.
fn reductions_and_bcasts_agree(world: Comm) -> Result<()> {
    use fastmp::op::{Band, Bxor, Max, Min, Prod, UserOp};
    let (me, np) = (world.rank(), world.size());
    let mine = values(me, 1);
    macro_rules! check_op {
        ($op:expr) => {{
            let (mut blocking, mut nonblocking) = (vec![0u64; ELEMS], vec![7u64; ELEMS]);
            world.allreduce(&mine, &mut blocking, $op)?;
            world.scope(|s| s.iallreduce(&mine, &mut nonblocking, $op)?.wait().map(drop))?;
            assert_eq!(blocking, nonblocking, "iallreduce {} on rank {me}", stringify!($op));
        }};
    }
    check_op!(Sum);
    check_op!(Prod);
    check_op!(Max);
    check_op!(Min);
    check_op!(Band);
    check_op!(Bxor);
    check_op!(UserOp::commutative(|a: &[u64], b: &mut [u64]| b
        .iter_mut()
        .zip(a)
        .for_each(|(b, a)| *b = b.wrapping_add(*a))));
    let floats: Vec<f64> = mine.iter().map(|&v| (v % 1000) as f64 * 0.5).collect();
    let (mut blocking, mut nonblocking) = (vec![0.0; ELEMS], vec![1.0; ELEMS]);
    world.allreduce(&floats, &mut blocking, Sum)?;
    world.scope(|s| s.iallreduce(&floats, &mut nonblocking, Sum)?.wait().map(drop))?;
    assert_eq!(blocking, nonblocking, "iallreduce f64 on rank {me}");
    for root in 0..np {
        let expected = values(root, 2);
        let mut buf = if me == root { expected.clone() } else { vec![0; ELEMS] };
        world.scope(|s| s.ibcast(&mut buf, root)?.wait().map(drop))?;
        assert_eq!(buf, expected, "ibcast from {root} on rank {me}");
    }
    // Several in flight at once, completed in reverse order.
    let (mut sum, mut max) = (vec![0u64; ELEMS], vec![0u64; ELEMS]);
    let mut bcast = if me == 0 { values(0, 3) } else { vec![0; ELEMS] };
    world.scope(|s| {
        let a = s.iallreduce(&mine, &mut sum, Sum)?;
        let b = s.ibcast(&mut bcast, 0)?;
        let c = s.iallreduce(&mine, &mut max, Max)?;
        c.wait()?;
        b.wait()?;
        a.wait().map(drop)
    })?;
    let (mut sum2, mut max2) = (vec![0u64; ELEMS], vec![0u64; ELEMS]);
    world.allreduce(&mine, &mut sum2, Sum)?;
    world.allreduce(&mine, &mut max2, Max)?;
    assert_eq!((sum, max), (sum2, max2), "overlapping iallreduces on rank {me}");
    assert_eq!(bcast, values(0, 3), "overlapping ibcast on rank {me}");
    Ok(())
}

#[test]
fn native_bcast_and_allreduce_with_the_agent_equal_the_blocking_twins() {
    for (device, np) in [(DeviceKind::Shm, 2), (DeviceKind::Shm, 3), (DeviceKind::Tcp, 2), (DeviceKind::Hybrid, 4)] {
        config(device, np).run(reductions_and_bcasts_agree).unwrap_or_else(|e| panic!("{device:?} np {np}: {e}"));
    }
}

/// Reduction and bcast items leaked with `mem::forget`: the scope's end finishes them.
#[test]
fn leaked_reductions_are_finished_by_the_scope() {
    config(DeviceKind::Shm, 3)
        .run(|world| {
            let me = world.rank();
            let mine = values(me, 4);
            let mut expected = vec![0u64; ELEMS];
            world.allreduce(&mine, &mut expected, Sum)?;
            for round in 0..3 {
                let (mut sum, mut bcast) = (vec![0u64; ELEMS], vec![0u64; ELEMS]);
                if me == round % 3 {
                    bcast.clone_from(&mine);
                }
                world.scope(|s| {
                    std::mem::forget(s.iallreduce(&mine, &mut sum, Sum)?);
                    std::mem::forget(s.ibcast(&mut bcast, round % 3)?);
                    Ok(())
                })?;
                assert_eq!(sum, expected, "rank {me}");
                assert_eq!(bcast, values(round % 3, 4), "rank {me}");
            }
            Ok(())
        })
        .unwrap();
}

/// A rank that panics with reductions in flight fails the job (naming it); nobody hangs.
#[test]
fn a_panicking_scope_with_reductions_in_flight_fails_the_job() {
    let outcome = config(DeviceKind::Shm, 3).run(|world| {
        let me = world.rank();
        let mine = values(me, 5);
        let mut sum = vec![0u64; ELEMS];
        world.scope(|s| {
            let request = s.iallreduce(&mine, &mut sum, Sum)?;
            if me == 1 {
                panic!("deliberate panic on rank 1 with an allreduce outstanding");
            }
            request.wait().map(drop)
        })
    });
    expect_rank_1_failed(outcome);
}

/// A rank that leaves instead of joining an iallreduce: the others get an `Err`, not a hang.
#[test]
fn a_failing_rank_fails_the_others_reductions() {
    let outcome = config(DeviceKind::Shm, 3).run(|world| {
        let me = world.rank();
        if me == 0 {
            return Err(Error::other("rank 0 gives up"));
        }
        let mine = values(me, 6);
        let mut sum = vec![0u64; ELEMS];
        world.scope(|s| s.iallreduce(&mine, &mut sum, Sum)?.wait().map(drop))
    });
    assert!(outcome.is_err(), "the job must fail: {outcome:?}");
}

/// Eight ranks on however few cores, reductions and bcasts through the agent.
#[test]
fn oversubscribed_reductions_stay_correct() {
    config(DeviceKind::Shm, 8).run(reductions_and_bcasts_agree).unwrap();
}

/// The agent path is taken: on shm (ranks are threads, so a rank's thread counts are its own)
/// ialltoall's own-block copy, iallreduce's share folds and ibcast's copies are handed to the
/// agent.
#[test]
fn large_operations_hand_items_to_the_agent() {
    let handed = |f: &mut dyn FnMut() -> Result<()>| -> Result<u64> {
        let before = fastmp::agent_counts().handed;
        f()?;
        Ok(fastmp::agent_counts().handed - before)
    };
    let per_rank = config(DeviceKind::Shm, 2)
        .run(|world| {
            let comm = over_messages(&world)?;
            let (me, np) = (comm.rank(), comm.size());
            let send = send_of(me, np);
            let mut recv = vec![0u8; send.len()];
            let alltoall = handed(&mut || comm.scope(|s| s.ialltoall(&send, &mut recv)?.wait().map(drop)))?;
            let mine = values(me, 7);
            let mut sum = vec![0u64; ELEMS];
            let allreduce = handed(&mut || world.scope(|s| s.iallreduce(&mine, &mut sum, Sum)?.wait().map(drop)))?;
            let mut buf = if me == 0 { mine.clone() } else { vec![0; ELEMS] };
            let bcast = handed(&mut || world.scope(|s| s.ibcast(&mut buf, 0)?.wait().map(drop)))?;
            Ok([alltoall, allreduce, bcast])
        })
        .unwrap();
    for (rank, [alltoall, ..]) in per_rank.iter().enumerate() {
        assert!(*alltoall >= 1, "rank {rank} handed no ialltoall copy to the agent");
    }
    // Each share of the vector is folded once, by whichever rank claimed it (the last to arrive
    // may claim both).
    let allreduces: u64 = per_rank.iter().map(|counts| counts[1]).sum();
    assert_eq!(allreduces, 2, "iallreduce shares handed to the agent: {per_rank:?}");
    let bcasts: u64 = per_rank.iter().map(|counts| counts[2]).sum();
    assert!(bcasts >= 1, "no rank handed an ibcast copy to the agent");
}

/// The agent thread runs items while their rank does no fastmp call (the point of the agent):
/// a rank that starts ialltoall and then only sleeps finds its own-block copy run by another
/// thread. Retried, as a loaded machine may not schedule the agent within one sleep.
#[test]
fn the_agent_runs_items_while_the_rank_computes() {
    config(DeviceKind::Shm, 2)
        .run(|world| {
            let comm = over_messages(&world)?;
            let (me, np) = (comm.rank(), comm.size());
            let send = send_of(me, np);
            let mut recv = vec![0u8; send.len()];
            let start = fastmp::agent_counts();
            for _ in 0..2000 {
                comm.scope(|s| {
                    let request = s.ialltoall(&send, &mut recv)?;
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    request.wait().map(drop)
                })?;
                // Every rank goes on until all have seen the agent run one of their copies.
                let seen = u64::from(fastmp::agent_counts().run_elsewhere > start.run_elsewhere);
                let mut all_seen = [0u64];
                comm.allreduce(&[seen], &mut all_seen, fastmp::op::Min)?;
                if all_seen[0] == 1 {
                    return Ok(());
                }
            }
            Err(Error::other(format!("rank {me}: the agent ran none of 2000 own-block copies of some rank")))
        })
        .unwrap();
}

/// The job failed because rank 1 panicked (a peer may see rank 1's abandonment before its panic
/// is recorded).
fn expect_rank_1_failed<T: std::fmt::Debug>(outcome: fastmp::Result<T>) {
    match outcome {
        Err(Error::RankFailed { rank: 1, .. }) => {}
        Err(Error::RankFailed { cause, .. }) if cause.contains("rank 1 abandoned") => {}
        other => panic!("expected rank 1 to fail the job, got {other:?}"),
    }
}

/// `world` with alltoall on the shm device's native path (whose copies go to the agent in
/// chunks that every rank takes too).
fn native_alltoall(world: &Comm) -> Result<Comm> {
    Ok(world.with_tuning(Tuning::defaults().force(Collective::Alltoall, Algorithm::Native)?))
}

/// What rank `me` receives from everyone in an alltoall of `send_of` buffers.
fn expected_alltoall(me: usize, np: usize) -> Vec<u8> {
    (0..np).flat_map(|j| send_of(j, np)[me * BLOCK..(me + 1) * BLOCK].to_vec()).collect()
}

/// The native ialltoall with the agent: started and waited for at once, with compute (a sleep)
/// between, several in flight, and leaked; every result checked. (Its copies go to the agent
/// only where the agent has idle CPUs, which depends on the machine and on this binary's first
/// job: `progress_agent_idle_cpu.rs` checks the hand-over.)
#[test]
fn native_ialltoall_with_the_agent_delivers_every_block() {
    for np in 1..=4 {
        config(DeviceKind::Shm, np)
            .run(|world| {
                let comm = native_alltoall(&world)?;
                let (me, np) = (comm.rank(), comm.size());
                let (send, expected) = (send_of(me, np), expected_alltoall(me, np));
                for round in 0..4 {
                    let mut recv = vec![0u8; send.len()];
                    comm.scope(|s| {
                        let request = s.ialltoall(&send, &mut recv)?;
                        if round % 2 == 1 {
                            std::thread::sleep(std::time::Duration::from_millis(2));
                        }
                        request.wait().map(drop)
                    })?;
                    assert_eq!(recv, expected, "round {round}, rank {me} of {np}");
                }
                let (mut a, mut b) = (vec![0u8; send.len()], vec![0u8; send.len()]);
                comm.scope(|s| {
                    let first = s.ialltoall(&send, &mut a)?;
                    let second = s.ialltoall(&send, &mut b)?;
                    second.wait()?;
                    first.wait().map(drop)
                })?;
                assert_eq!((&a, &b), (&expected, &expected), "two in flight, rank {me} of {np}");
                let mut leaked = vec![0u8; send.len()];
                comm.scope(|s| {
                    std::mem::forget(s.ialltoall(&send, &mut leaked)?);
                    Ok(())
                })?;
                assert_eq!(leaked, expected, "leaked request, rank {me} of {np}");
                Ok(())
            })
            .unwrap_or_else(|e| panic!("np {np}: {e}"));
    }
}

/// A rank that panics with a native ialltoall in flight fails the job (naming it); nobody hangs.
#[test]
fn a_panicking_scope_with_a_native_ialltoall_in_flight_fails_the_job() {
    let outcome = config(DeviceKind::Shm, 3).run(|world| {
        let comm = native_alltoall(&world)?;
        let send = send_of(comm.rank(), 3);
        let mut recv = vec![0u8; send.len()];
        comm.scope(|s| {
            let request = s.ialltoall(&send, &mut recv)?;
            if comm.rank() == 1 {
                panic!("deliberate panic on rank 1 with an alltoall outstanding");
            }
            request.wait().map(drop)
        })
    });
    expect_rank_1_failed(outcome);
}

/// Ranks that disagree on the native ialltoall's block size get errors, not a hang or a
/// partial copy into a buffer too small.
#[test]
fn mismatched_native_ialltoall_sizes_are_errors() {
    let outcomes = config(DeviceKind::Shm, 2)
        .run(|world| {
            let comm = native_alltoall(&world)?;
            let block = if comm.rank() == 1 { BLOCK + 1 } else { BLOCK };
            let send = vec![1u8; 2 * block];
            let mut recv = vec![0u8; 2 * block];
            Ok(comm.scope(|s| s.ialltoall(&send, &mut recv)?.wait().map(drop)).is_err())
        })
        .unwrap();
    assert_eq!(outcomes, [true, true], "both ranks see the mismatch");
}
