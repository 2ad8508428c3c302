//! The hybrid device over the system MPI (`FASTMP_INTERPROCESS=mpi`): thread ranks inside MPI
//! processes. The `job_*` tests run under mpirun (`scripts/mpi-device.sh`: 2 processes × 2
//! threads, 2 × 3 and 3 × 1, `--test-threads=1` so every process runs the same tests in the same
//! order); each process returns its thread ranks' results and asserts on them. The `failure_*`
//! tests run outside mpirun and start `mpirun` on this binary themselves (its ignored `child_*`
//! tests are the ranks' programs).

#![cfg(feature = "mpi")]

use std::process::{Command, Output};

use fastmp::op::Sum;
use fastmp::{ANY_SOURCE, ANY_TAG, Comm, Config, DeviceKind, Error, Result};

/// Runs `f` on this process's thread ranks of a fresh hybrid job over MPI; their results in rank
/// order (the first is world rank `results[0].0`).
fn job<R: Send>(f: impl Fn(Comm) -> Result<R> + Sync) -> Vec<R> {
    let config = Config::from_env().expect("launch environment");
    assert_eq!(config.get_device(), DeviceKind::Hybrid, "run under mpirun -x FASTMP_DEVICE=hybrid");
    assert_eq!(std::env::var("FASTMP_INTERPROCESS").as_deref(), Ok("mpi"), "run with -x FASTMP_INTERPROCESS=mpi");
    config
        .run(|world| {
            assert_eq!(world.device_name(), "hybrid");
            f(world)
        })
        .expect("job")
}

/// Deterministic bytes of message `seed`.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8).collect()
}

/// Threads per process of this job.
fn threads() -> usize {
    std::env::var("FASTMP_THREADS_PER_PROCESS").expect("FASTMP_THREADS_PER_PROCESS").parse().expect("a number")
}

#[test]
fn job_ranks_are_threads_of_mpi_processes_block_wise() {
    let t = threads();
    let seen = job(|world| {
        let (rank, size) = (world.rank(), world.size());
        let placement = world.placement();
        for peer in 0..size {
            assert_eq!(placement.process_of(peer) == placement.process_of(rank), peer / t == rank / t);
        }
        Ok((rank, size))
    });
    assert_eq!(seen.len(), t, "one result per thread rank of this process");
    let first = seen[0].0;
    assert_eq!(first % t, 0);
    for (i, &(rank, size)) in seen.iter().enumerate() {
        assert_eq!(rank, first + i);
        assert!(size >= 2 && size.is_multiple_of(t));
    }
}

#[test]
fn job_any_source_takes_local_and_remote_senders_each_in_order() {
    const PER_SENDER: u32 = 20;
    let results = job(|world| {
        let (rank, size) = (world.rank(), world.size());
        if rank != 0 {
            for i in 0..PER_SENDER {
                // Sizes across MPI's eager and rendezvous protocols, and shm's.
                let len = if i % 5 == 4 { 100_000 } else { 8 + i as usize };
                let mut msg = pattern(u64::from(i) + rank as u64 * 100, len);
                msg[..8].copy_from_slice(&[rank as u8, i as u8, 0, 0, 0, 0, 0, 0]);
                world.send(&msg, 0, 100 + i as i32)?;
            }
            return Ok(None);
        }
        let mut seen = Vec::new();
        let mut buf = vec![0u8; 100_000];
        for _ in 0..PER_SENDER as usize * (size - 1) {
            let st = world.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
            let (source, i) = (buf[0] as usize, u32::from(buf[1]));
            assert_eq!((st.source, st.tag), (source, 100 + i as i32), "status {st:?}");
            let mut expected = pattern(u64::from(i) + source as u64 * 100, st.bytes);
            expected[..8].copy_from_slice(&buf[..8]);
            assert!(buf[..st.bytes] == expected[..], "payload of message {i} from {source}");
            seen.push((source, i));
        }
        Ok(Some(seen))
    });
    if let Some(seen) = &results[0] {
        // Process 0: every sender's messages, each sender's in the order sent.
        let mut next = std::collections::HashMap::new();
        for &(source, i) in seen {
            let expected = next.entry(source).or_insert(0);
            assert_eq!(*expected, i, "source {source} out of order in {seen:?}");
            *expected += 1;
        }
        assert!(next.values().all(|&n| n == PER_SENDER), "{next:?}");
        assert!(next.len() > threads() - 1, "remote senders too: {next:?}");
    }
}

#[test]
fn job_named_sources_tags_sync_probe_and_truncation_across_processes() {
    let t = threads();
    job(|world| {
        let (rank, size) = (world.rank(), world.size());
        // Pair every rank with the same thread of the next process (a remote peer).
        let next = (rank + t) % size;
        let prev = (rank + size - t) % size;
        // Two tags sent in one order, received in the other.
        world.send(&pattern(1, 300), next, 1)?;
        // A synchronous send completes once its receive (posted first here) matched it.
        let mut big = vec![0u8; 70_000];
        let st = world.scope(|s| {
            let r = s.irecv(&mut big, prev, 2)?;
            world.ssend(&pattern(2, 70_000), next, 2)?;
            r.wait()
        })?;
        assert_eq!((st.source, st.tag, st.bytes), (prev, 2, 70_000));
        assert!(big == pattern(2, 70_000));
        let st = world.probe(prev, 1)?;
        assert_eq!((st.source, st.tag, st.bytes), (prev, 1, 300));
        let (msg, _) = world.mprobe(prev, 1)?;
        let (got, _) = world.mrecv_vec::<u8>(msg)?;
        assert!(got == pattern(1, 300));
        // A receive too small for its message: MPI's data up to capacity, and the error.
        world.send(&pattern(3, 5000), next, 3)?;
        let mut small = vec![0u8; 100];
        match world.recv(&mut small, prev, 3) {
            Err(Error::Truncated { message_bytes: 5000, capacity: 100, source_rank, tag: 3 }) => {
                assert_eq!(source_rank, prev)
            }
            other => panic!("expected truncation, got {other:?}"),
        }
        assert!(small == pattern(3, 5000)[..100]);
        // A receive nobody sends to is cancelled; nothing is left over.
        let mut buf = [0u8; 8];
        let st = world.scope(|s| {
            let r = s.irecv(&mut buf, prev, 77)?;
            r.cancel()?;
            r.wait()
        })?;
        assert!(st.cancelled);
        world.barrier()?;
        assert!(world.iprobe(ANY_SOURCE, ANY_TAG)?.is_none());
        Ok(())
    });
}

#[test]
fn job_collective_sweep() {
    job(|world| {
        let (rank, size) = (world.rank(), world.size());
        for n in [1usize, 1000, 40_000] {
            for root in [0, size - 1] {
                let mut buf: Vec<u64> =
                    if rank == root { (0..n as u64).map(|i| i * 3 + root as u64).collect() } else { vec![0; n] };
                world.bcast(&mut buf, root)?;
                assert!(buf.iter().enumerate().all(|(i, &v)| v == i as u64 * 3 + root as u64), "bcast n={n}");
            }
            let send: Vec<u64> = (0..n as u64).map(|i| i + rank as u64).collect();
            let mut sum = vec![0u64; n];
            world.allreduce(&send, &mut sum, Sum)?;
            let ranks = (size * (size - 1) / 2) as u64;
            assert!(sum.iter().enumerate().all(|(i, &v)| v == i as u64 * size as u64 + ranks), "allreduce n={n}");
            let block = n.div_ceil(size).min(2000);
            let send: Vec<u32> = (0..size * block).map(|i| (rank * 1_000_000 + i) as u32).collect();
            let mut got = vec![0u32; size * block];
            world.alltoall(&send, &mut got)?;
            for from in 0..size {
                for j in 0..block {
                    assert_eq!(got[from * block + j], (from * 1_000_000 + rank * block + j) as u32, "alltoall");
                }
            }
            world.barrier()?;
        }
        // A communicator of every other rank (across processes) carries its own traffic.
        let half = world.split(Some((rank % 2) as u32), rank as i32)?.expect("every rank has a colour");
        let mut total = [0u64];
        half.allreduce(&[1], &mut total, Sum)?;
        assert_eq!(total[0], half.size() as u64);
        Ok(())
    });
}

// ------------------------------------------------------------------------- failures

const CHILD: &str = "FASTMP_MPI_HYBRID_CHILD";

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

/// Runs the ignored test `child` of this binary as 2 MPI processes × 2 thread ranks.
fn mpirun_child(child: &str, interprocess: &str) -> Output {
    let exe = std::env::current_exe().expect("test binary path");
    let mpirun = std::env::var("MPIRUN").unwrap_or_else(|_| "mpirun".into());
    let mut cmd = Command::new(&mpirun);
    if is_root() {
        cmd.arg("--allow-run-as-root");
    }
    for var in ["FASTMP_DEVICE=hybrid", "FASTMP_THREADS_PER_PROCESS=2", &format!("{CHILD}=1")] {
        cmd.args(["-x", var]);
    }
    cmd.args(["-x", &format!("FASTMP_INTERPROCESS={interprocess}")]);
    cmd.args(["--oversubscribe", "-np", "2"]).arg(exe).args([
        "--exact",
        child,
        "--ignored",
        "--test-threads=1",
        "--nocapture",
    ]);
    cmd.output().unwrap_or_else(|e| panic!("cannot run {mpirun} (install openmpi-bin): {e}"))
}

#[test]
fn failure_a_panicking_thread_rank_ends_every_process_with_its_report() {
    if std::env::var_os("OMPI_COMM_WORLD_RANK").is_some() {
        return; // Under mpirun: only the parent starts mpirun.
    }
    let out = mpirun_child("child_rank_three_panics", "mpi");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the job must fail; stderr:\n{stderr}");
    assert!(
        stderr.contains("fastmp: rank 3 failed: panicked: deliberate failure of rank 3"),
        "fastmp's report names the rank and its panic; stderr:\n{stderr}"
    );
    assert_eq!(stderr.matches("fastmp: rank").count(), 1, "reported once; stderr:\n{stderr}");
}

#[test]
fn failure_an_unknown_interprocess_transport_is_refused() {
    if std::env::var_os("OMPI_COMM_WORLD_RANK").is_some() {
        return;
    }
    let out = mpirun_child("child_runs_a_job", "carrier-pigeon");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "stderr:\n{stderr}");
    assert!(stderr.contains("FASTMP_INTERPROCESS=carrier-pigeon: expected 'tcp' or 'mpi'"), "stderr:\n{stderr}");
}

#[test]
#[ignore = "a rank's program for failure_a_panicking_thread_rank_ends_every_process_with_its_report"]
fn child_rank_three_panics() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    fastmp::main(|world| {
        if world.rank() == 3 {
            panic!("deliberate failure of rank 3");
        }
        // Every other rank waits for rank 3, which never sends: the abort must end them.
        let mut buf = [0u8; 4];
        world.recv(&mut buf, 3, 0)?;
        Ok(())
    });
}

#[test]
#[ignore = "a rank's program for failure_an_unknown_interprocess_transport_is_refused"]
fn child_runs_a_job() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    fastmp::main(|world| world.barrier());
}
