//! `wtime`/`wtick`/`processor_name` (MPI_Wtime, MPI_Wtick, MPI_Get_processor_name) and
//! `Comm::abort` (MPI_Abort) through `run`, on both devices.

use std::sync::Mutex;

use fastmp::{Config, DeviceKind, Error};

fn configs() -> [(&'static str, Config); 2] {
    [("shm", Config::new()), ("tcp", Config::new().device(DeviceKind::Tcp))]
}

#[test]
fn wtime_is_monotonic_and_counts_seconds() {
    let mut last = fastmp::wtime();
    for _ in 0..10_000 {
        let now = fastmp::wtime();
        assert!(now >= last, "wtime went back from {last} to {now}");
        last = now;
    }
    let before = fastmp::wtime();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let slept = fastmp::wtime() - before;
    // A sleep lasts at least as long as asked; seconds, not milli- or nanoseconds.
    assert!((0.02..60.0).contains(&slept), "20 ms measured as {slept} s");
}

#[test]
fn wtime_is_one_clock_for_all_thread_ranks() {
    // Each rank reads the clock after a barrier that the others entered before; so every
    // rank's reading after it is at least every rank's reading before it.
    for (device, config) in configs() {
        let times = config
            .np(3)
            .run(|world| {
                let before = fastmp::wtime();
                world.barrier()?;
                Ok((before, fastmp::wtime()))
            })
            .unwrap();
        let latest_before = times.iter().map(|t| t.0).fold(f64::MIN, f64::max);
        for (rank, &(_, after)) in times.iter().enumerate() {
            assert!(after >= latest_before, "{device}: rank {rank} read {after} < {latest_before}");
        }
    }
}

#[test]
fn wtick_is_the_clock_resolution() {
    let tick = fastmp::wtick();
    assert!(tick > 0.0 && tick <= 1e-3, "wtick {tick}");
}

#[test]
fn processor_name_is_the_host_name() {
    let name = fastmp::processor_name();
    let expected = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(name, expected.trim());
    let names = fastmp::run(2, |_| Ok(fastmp::processor_name())).unwrap();
    assert_eq!(names, vec![name.clone(), name]);
}

/// Rank 1 aborts with code 3 after a barrier: `run` returns `Aborted { rank: 1, code: 3 }`, and
/// every other rank's barrier or receive fails with `PeerFailed` naming it.
#[test]
fn abort_ends_the_job_with_its_code() {
    for (device, config) in configs() {
        let seen = Mutex::new(Vec::new());
        let result = config.np(4).run(|world| {
            // A survivor may still be finishing the barrier when rank 1 (already through it)
            // aborts: it must see the same error there.
            let outcome = world.barrier().and_then(|()| {
                if world.rank() == 1 {
                    world.abort(3);
                }
                world.recv(&mut [0u8; 1], 1, 0)
            });
            let named = match &outcome {
                Err(Error::PeerFailed { rank, cause }) => Some((*rank, cause.clone())),
                _ => None,
            };
            seen.lock().unwrap().push((world.rank(), named));
            outcome.map(drop)
        });
        match result {
            Err(Error::Aborted { rank: 1, code: 3 }) => {}
            other => panic!("{device}: run returned {other:?}"),
        }
        let mut seen = seen.into_inner().unwrap();
        seen.sort_by_key(|s| s.0);
        assert_eq!(seen.len(), 3, "{device}: {seen:?}");
        for (rank, named) in seen {
            assert_eq!(named, Some((1, "called abort with code 3".to_string())), "{device}: rank {rank}");
        }
    }
}

/// An abort with nonblocking operations outstanding, and from a one-rank job; `exit_code` gives
/// the code `main` exits with.
#[test]
fn abort_with_operations_outstanding_and_alone() {
    for (device, config) in configs() {
        let result = config.clone().np(3).run(|world| {
            let mut sum = [0u32];
            world.scope(|s| {
                let _pending = s.iallreduce(&[1u32], &mut sum, fastmp::op::Sum)?;
                if world.rank() == 2 {
                    world.abort(-2);
                }
                Ok::<_, Error>(())
            })?;
            world.barrier()
        });
        let error = result.expect_err("aborted");
        assert!(matches!(error, Error::Aborted { rank: 2, code: -2 }), "{device}: {error:?}");
        assert_eq!(error.exit_code(), -2);
        let alone = config.np(1).run(|world| -> fastmp::Result<()> { world.abort(0) });
        assert!(matches!(alone, Err(Error::Aborted { rank: 0, code: 0 })), "{device}: {alone:?}");
    }
    assert_eq!(Error::InvalidArgument("x".into()).exit_code(), 1);
}
