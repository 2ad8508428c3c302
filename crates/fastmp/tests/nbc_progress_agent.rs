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

/// A rank that panics with an agent copy in flight fails the job with its panic, and nobody
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
    match outcome {
        Err(Error::RankFailed { rank: 1, .. }) => {}
        other => panic!("expected rank 1 to fail the job, got {other:?}"),
    }
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
