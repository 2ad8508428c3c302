//! Point-to-point on the mpi device. Run under `mpirun` by `scripts/mpi-device.sh` (np 2 and 4,
//! `--test-threads=1` so every process runs the same tests in the same order): each test joins
//! the MPI job with `Config::from_env()` (a fresh duplicate of `MPI_COMM_WORLD` per job) and
//! asserts on its own rank's results. Every test is meaningful at any even size ≥ 2.
//!
//! The shm/tcp suites (`p2p_*.rs`, `device_suite!`) are not reused: their bodies choose their own
//! rank counts (1, 3, 5, ...) and eager limits per device, while under mpirun the launcher fixes
//! the size; see the README's mpi section.

#![cfg(feature = "mpi")]

use fastmp::{ANY_SOURCE, ANY_TAG, Comm, Config, DeviceKind, Error, Result, Status, ThreadLevel, waitall};

/// Runs `f` as this process's rank of a fresh job on the mpi device and returns its result.
fn job<R: Send>(f: impl Fn(Comm) -> Result<R> + Sync) -> R {
    let config = Config::from_env().expect("launch environment");
    assert_eq!(config.get_device(), DeviceKind::Mpi, "run under mpirun -x FASTMP_DEVICE=mpi");
    let mut results = config.run(f).expect("job");
    assert_eq!(results.len(), 1, "one rank per process");
    results.pop().unwrap()
}

/// Deterministic bytes of message `seed`.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8).collect()
}

fn assert_status(st: &Status, source: usize, tag: i32, bytes: usize) {
    assert_eq!((st.source, st.tag, st.bytes, st.cancelled), (source, tag, bytes, false), "status {st:?}");
}

/// The partner of `rank` in pairs (0,1), (2,3), ...; sizes are even under the harness.
fn partner(world: &Comm) -> usize {
    let peer = world.rank() ^ 1;
    assert!(peer < world.size(), "the mpi suites run at even sizes");
    peer
}

#[test]
fn blocking_ring() {
    let (prev, got) = job(|world| {
        let (rank, size) = (world.rank(), world.size());
        assert_eq!(world.device_name(), "mpi");
        let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);
        let mut got = [0u64; 3];
        if rank == 0 {
            world.send(&[rank as u64, 10, 20], next, 7)?;
            assert_status(&world.recv(&mut got, prev, 7)?, prev, 7, 24);
        } else {
            world.recv(&mut got, prev, 7)?;
            world.send(&[rank as u64, 10, 20], next, 7)?;
        }
        Ok((prev, got))
    });
    assert_eq!(got, [prev as u64, 10, 20]);
}

#[test]
fn wildcards_keep_each_senders_order() {
    let seen = job(|world| {
        const PER_SENDER: i32 = 5;
        if world.rank() != 0 {
            for i in 0..PER_SENDER {
                world.send(&[world.rank() as u32, i as u32], 0, 100 + i)?;
            }
            return Ok(Vec::new());
        }
        let mut seen = Vec::new();
        for _ in 0..PER_SENDER as usize * (world.size() - 1) {
            let mut msg = [0u32; 2];
            let st = world.recv(&mut msg, ANY_SOURCE, ANY_TAG)?;
            assert_status(&st, msg[0] as usize, 100 + msg[1] as i32, 8);
            seen.push((st.source, msg[1]));
        }
        Ok(seen)
    });
    // Messages of one sender arrive in the order sent (MPI's non-overtaking rule).
    let mut last = std::collections::HashMap::new();
    for (source, i) in &seen {
        let prev = last.insert(*source, *i);
        assert_eq!(prev.map_or(0, |p| p + 1), *i, "source {source} out of order in {seen:?}");
    }
}

#[test]
fn probe_improbe_and_mrecv() {
    job(|world| {
        let peer = partner(&world);
        if world.rank() % 2 == 1 {
            world.send(&pattern(1, 40), peer, 4)?;
            world.send(&pattern(2, 1000), peer, 5)?;
            return Ok(());
        }
        let st = world.probe(ANY_SOURCE, ANY_TAG)?;
        assert_status(&st, peer, 4, 40);
        // The probed message is still there for a matched probe, which takes it off matching.
        let (msg, st) = world.mprobe(peer, 4)?;
        assert_status(&st, peer, 4, 40);
        let mut got = vec![0u8; 40];
        assert_status(&world.mrecv(&mut got, msg)?, peer, 4, 40);
        assert_eq!(got, pattern(1, 40));
        let (msg, st) = loop {
            if let Some(found) = world.improbe(peer, 5)? {
                break found;
            }
        };
        assert_status(&st, peer, 5, 1000);
        let (got, _) = world.mrecv_vec::<u8>(msg)?;
        assert_eq!(got, pattern(2, 1000));
        assert!(world.iprobe(ANY_SOURCE, ANY_TAG)?.is_none());
        Ok(())
    });
}

#[test]
fn unmatched_receive_is_cancelled() {
    job(|world| {
        let peer = partner(&world);
        let mut buf = [0u8; 8];
        let st = world.scope(|s| {
            let req = s.irecv(&mut buf, peer, 77)?;
            req.cancel()?;
            req.wait()
        })?;
        assert!(st.cancelled, "{st:?}");
        // The channel still works after the cancel.
        let mut got = [0u8; 1];
        world.sendrecv(&[9u8], peer, 78, &mut got, peer, 78)?;
        assert_eq!(got, [9]);
        world.barrier()
    });
}

#[test]
fn large_and_zero_byte_messages() {
    job(|world| {
        let peer = partner(&world);
        for (i, len) in [0usize, 1, 8, 65_536, 3 * (1 << 20) + 5].into_iter().enumerate() {
            let out = pattern(world.rank() as u64 * 10 + i as u64, len);
            let mut got = vec![0xC3u8; len + 16];
            let st = world.sendrecv(&out, peer, i as i32, &mut got, peer, i as i32)?;
            assert_status(&st, peer, i as i32, len);
            assert!(got[..len] == pattern(peer as u64 * 10 + i as u64, len)[..], "message {len} bytes");
            assert!(got[len..].iter().all(|&b| b == 0xC3), "bytes past the message written");
        }
        Ok(())
    });
}

#[test]
fn nonblocking_requests_and_waitall() {
    job(|world| {
        let (rank, size) = (world.rank(), world.size());
        let others: Vec<usize> = (0..size).filter(|&r| r != rank).collect();
        let outgoing: Vec<Vec<u8>> = others.iter().map(|&r| pattern((rank * 100 + r) as u64, 70_000)).collect();
        let mut incoming = vec![vec![0u8; 70_000]; others.len()];
        world.scope(|s| {
            let mut reqs = Vec::new();
            for (buf, &r) in incoming.iter_mut().zip(&others) {
                reqs.push(s.irecv(buf, r, 3)?);
            }
            for (buf, &r) in outgoing.iter().zip(&others) {
                reqs.push(s.isend(buf, r, 3)?);
            }
            let statuses = waitall(&mut reqs)?;
            for (st, &r) in statuses.iter().zip(&others) {
                assert_status(st, r, 3, 70_000);
            }
            Ok::<_, Error>(())
        })?;
        for (buf, &r) in incoming.iter().zip(&others) {
            assert!(*buf == pattern((r * 100 + rank) as u64, 70_000), "from {r}");
        }
        Ok(())
    });
}

#[test]
fn truncation_is_an_error_naming_both_sizes() {
    job(|world| {
        let peer = partner(&world);
        if world.rank() % 2 == 1 {
            // 100 kB: Open MPI's single-copy path would write it past a posted 10-byte receive.
            for len in [100usize, 100_000, 64] {
                world.send(&pattern(3, len), peer, 6)?;
            }
            return world.barrier();
        }
        for len in [100usize, 100_000] {
            let mut small = [0u8; 10];
            match world.recv(&mut small, peer, 6) {
                Err(Error::Truncated { message_bytes, capacity: 10, source_rank, tag: 6 }) => {
                    assert_eq!((message_bytes, source_rank), (len, peer));
                    // The message's first bytes are delivered, and nothing past the buffer.
                    assert_eq!(small.to_vec(), pattern(3, 10));
                }
                other => panic!("expected a truncation error, got {other:?}"),
            }
        }
        // The same through a matched probe.
        let (msg, _) = world.mprobe(peer, 6)?;
        let mut small = [0u8; 10];
        match world.mrecv(&mut small, msg) {
            Err(Error::Truncated { message_bytes: 64, capacity: 10, source_rank, tag: 6 }) => {
                assert_eq!(source_rank, peer)
            }
            other => panic!("expected a truncation error, got {other:?}"),
        }
        world.barrier()
    });
}

#[test]
fn bad_ranks_and_tags_are_errors() {
    job(|world| {
        let size = world.size();
        assert!(matches!(world.send(&[1u8], size, 0), Err(Error::RankOutOfRange { rank, .. }) if rank == size));
        let mut buf = [0u8];
        assert!(matches!(world.recv(&mut buf, size + 3, 0), Err(Error::RankOutOfRange { .. })));
        assert!(matches!(world.send(&[1u8], 0, -5), Err(Error::TagOutOfRange { tag: -5, .. })));
        // The job goes on normally afterwards.
        world.barrier()
    });
}

#[test]
fn receives_posted_at_once_and_matched_later_keep_the_posting_order() {
    job(|world| {
        let peer = partner(&world);
        if world.rank() % 2 == 1 {
            for (i, len) in [4usize, 4, 4, 4, 100].into_iter().enumerate() {
                world.send(&pattern(i as u64, len), peer, 40)?;
            }
            world.send(&[7u8], peer, 41)?;
            return world.barrier();
        }
        // Small first (posted to MPI at once), then large (matched by probe), and the reverse:
        // each pair takes the messages in the order its receives were posted.
        for small_first in [true, false] {
            let (mut small, mut large) = ([0u8; 4], vec![0u8; 100_000]);
            let (first, second) = world.scope(|s| {
                let (a, b) = if small_first {
                    (s.irecv(&mut small, peer, 40)?, s.irecv(&mut large, peer, 40)?)
                } else {
                    let b = s.irecv(&mut large, peer, 40)?;
                    (s.irecv(&mut small, peer, 40)?, b)
                };
                Ok((a.wait()?, b.wait()?))
            })?;
            let (small_seed, large_seed) = if small_first { (0, 1) } else { (3, 2) };
            assert_eq!(small.to_vec(), pattern(small_seed, 4), "small_first={small_first}");
            assert_eq!(large[..4].to_vec(), pattern(large_seed, 4), "small_first={small_first}");
            assert_eq!((first.bytes, second.bytes, first.tag, first.source), (4, 4, 40, peer));
        }
        // A message longer than a small nonblocking receive: its first bytes, then the error.
        let mut small = [0u8; 8];
        let truncated = world.scope(|s| s.irecv(&mut small, peer, 40)?.wait());
        match truncated {
            Err(Error::Truncated { message_bytes: 100, capacity: 8, source_rank, tag: 40 }) => {
                assert_eq!(source_rank, peer);
                assert_eq!(small.to_vec(), pattern(4, 8));
            }
            other => panic!("expected a truncation error, got {other:?}"),
        }
        // A small receive posted to MPI and cancelled, then one that receives.
        let mut buf = [0u8; 1];
        let st = world.scope(|s| {
            let req = s.irecv(&mut buf, peer, 42)?;
            req.cancel()?;
            req.wait()
        })?;
        assert!(st.cancelled, "{st:?}");
        let st = world.scope(|s| s.irecv(&mut buf, ANY_SOURCE, ANY_TAG)?.wait())?;
        assert_eq!((buf, st.tag, st.source), ([7], 41, peer));
        world.barrier()
    });
}

#[test]
fn tags_up_to_the_mpi_bound_travel_and_user_tags_above_it_are_refused() {
    job(|world| {
        let peer = partner(&world);
        // i32::MAX is within Open MPI's MPI_TAG_UB; above MPICH's (2^28 - 1) it is refused,
        // naming the bound, on both sides.
        let mut got = [0u8];
        match world.sendrecv(&[5u8], peer, i32::MAX, &mut got, peer, i32::MAX) {
            Ok(st) => assert_eq!((got, st.tag), ([5], i32::MAX)),
            Err(Error::TagOutOfRange { tag: i32::MAX, max }) => assert!(((1 << 28) - 1..i32::MAX).contains(&max)),
            Err(other) => panic!("expected the message or a tag error, got {other:?}"),
        }
        // Collectives' internal tags are mapped into the bound whatever it is.
        let mut sum = [0u64];
        world.allreduce(&[1u64], &mut sum, fastmp::op::Sum)?;
        assert_eq!(sum[0], world.size() as u64);
        world.barrier()
    });
}

#[test]
fn synchronous_send_waits_for_the_receive() {
    job(|world| {
        let peer = partner(&world);
        if world.rank() % 2 == 0 {
            let data = pattern(4, 16);
            let matched_early = world.scope(|s| {
                let mut req = s.issend(&data, peer, 8)?;
                // The peer posts its receive only after the go below, so this cannot be done.
                let early = req.test()?.is_some();
                world.send::<u8>(&[], peer, 9)?;
                if !early {
                    assert_status(&req.wait()?, world.rank(), 8, 16);
                }
                Ok::<_, Error>(early)
            })?;
            assert!(!matched_early, "a synchronous send completed before its receive was posted");
        } else {
            world.recv::<u8>(&mut [], peer, 9)?;
            let mut got = [0u8; 16];
            assert_status(&world.recv(&mut got, peer, 8)?, peer, 8, 16);
            assert_eq!(got.to_vec(), pattern(4, 16));
        }
        Ok(())
    });
}

#[test]
fn dup_and_split_carry_their_own_traffic() {
    job(|world| {
        let dup = world.dup()?;
        let peer = partner(&world);
        // Same tag on both communicators: each receive gets its own communicator's message.
        dup.send(&[1u32], peer, 1)?;
        world.send(&[2u32], peer, 1)?;
        let mut got = [0u32];
        world.recv(&mut got, peer, 1)?;
        assert_eq!(got, [2]);
        dup.recv(&mut got, peer, 1)?;
        assert_eq!(got, [1]);

        // Halves by parity; ranks renumbered inside, traffic in rings.
        let half = world.split(Some((world.rank() % 2) as u32), world.rank() as i32)?.expect("a colour");
        assert_eq!(half.size(), world.size() / 2);
        assert_eq!(half.rank(), world.rank() / 2);
        let (r, n) = (half.rank(), half.size());
        let mut from = [0u64];
        let st = half.sendrecv(&[world.rank() as u64], (r + 1) % n, 2, &mut from, (r + n - 1) % n, 2)?;
        assert_eq!(st.source, (r + n - 1) % n, "status source in the split's numbering");
        assert_eq!(from[0] as usize, ((r + n - 1) % n) * 2 + world.rank() % 2);
        let mut sum = [0u64];
        half.allreduce(&[1u64], &mut sum, fastmp::op::Sum)?;
        assert_eq!(sum[0] as usize, n);
        Ok(())
    });
}

#[test]
fn several_jobs_one_after_another() {
    for round in 0..3u64 {
        let got = job(|world| {
            let peer = partner(&world);
            let mut got = [0u64];
            world.sendrecv(&[round * 10 + world.rank() as u64], peer, 0, &mut got, peer, 0)?;
            Ok((peer, got[0]))
        });
        assert_eq!(got.1, round * 10 + got.0 as u64);
    }
}

/// Under `MPI_THREAD_SINGLE` (asked for by `FASTMP_MPI_THREADS=single`, or by default when the
/// process's first job ran on its main thread) only that thread may start jobs; above it any
/// thread may, one at a time. `scripts/mpi-device.sh` also runs this test alone with
/// `FASTMP_MPI_THREADS=single`, so that its first job decides the level.
#[test]
fn jobs_on_other_threads_need_more_than_mpi_thread_single() {
    job(|world| world.barrier());
    let single = match std::env::var("FASTMP_MPI_THREADS") {
        Ok(level) => level == "single",
        Err(_) => std::thread::current().name() == Some("main"),
    };
    let elsewhere =
        std::thread::spawn(|| Config::from_env()?.run(|world| world.barrier()).map(drop)).join().expect("job thread");
    if single {
        let err = elsewhere.expect_err("a job on a second thread under MPI_THREAD_SINGLE");
        assert!(err.to_string().contains("FASTMP_MPI_THREADS=serialized"), "{err}");
    } else {
        elsewhere.expect("a job on another thread, one at a time");
    }
    job(|world| world.barrier());
}

#[test]
fn threads_share_the_endpoint_when_mpi_allows() {
    job(|world| {
        let peer = partner(&world);
        if std::env::var("FASTMP_MPI_THREADS").as_deref() == Ok("multiple") {
            // The harness asks for it from Open MPI, which grants it.
            assert_eq!(world.thread_level(), ThreadLevel::Multiple, "MPI_THREAD_MULTIPLE was asked for");
        }
        if world.thread_level() != ThreadLevel::Multiple {
            // Funnelled: the refusal says why.
            let Err(err) = world.threaded() else { panic!("a thread handle without MPI_THREAD_MULTIPLE") };
            assert!(err.to_string().contains("MPI_THREAD_MULTIPLE"), "{err}");
            return Ok(());
        }
        let handle = world.threaded()?;
        let rank = world.rank() as u32;
        std::thread::scope(|s| {
            let helper = s.spawn(|| -> Result<u32> {
                let mut got = [0u32];
                handle.sendrecv(&[10u32 + rank], peer, 1, &mut got, peer, 1)?;
                Ok(got[0])
            });
            let mut got = [0u32];
            world.sendrecv(&[20u32 + world.rank() as u32], peer, 0, &mut got, peer, 0)?;
            assert_eq!(got[0], 20 + peer as u32);
            assert_eq!(helper.join().expect("helper thread")?, 10 + peer as u32);
            Ok(())
        })
    });
}

#[test]
fn dropped_large_send_finishes_at_scope_end() {
    job(|world| {
        let peer = partner(&world);
        let data = pattern(5, 1 << 20);
        let mut got = vec![0u8; 1 << 20];
        if world.rank() % 2 == 0 {
            // Not waited for: the scope's end waits until MPI is done with the buffer.
            world.scope(|s| s.isend(&data, peer, 11).map(drop))?;
        } else {
            world.recv(&mut got, peer, 11)?;
            assert!(got == data);
        }
        world.barrier()
    });
}

/// Sends `len` bytes to the partner three ways (blocking, nonblocking, synchronous) and receives
/// them, then once more into a buffer a little too small (truncation).
fn exchange_long_messages(world: &Comm, len: usize) -> Result<()> {
    let peer = partner(world);
    let data = pattern(5, len);
    if world.rank() % 2 == 1 {
        world.send(&data, peer, 20)?;
        world.scope(|s| s.isend(&data, peer, 21)?.wait().map(drop))?;
        world.ssend(&data, peer, 22)?;
        world.send(&data, peer, 23)?;
        return world.barrier();
    }
    let mut got = vec![0u8; len + 1];
    assert_status(&world.recv(&mut got, peer, 20)?, peer, 20, len);
    assert!(got[..len] == data[..], "blocking receive");
    got.fill(0);
    let st = world.scope(|s| s.irecv(&mut got, peer, 21)?.wait())?;
    assert_status(&st, peer, 21, len);
    assert!(got[..len] == data[..], "nonblocking receive");
    got.fill(0);
    assert_status(&world.recv(&mut got, peer, 22)?, peer, 22, len);
    assert!(got[..len] == data[..], "synchronous send");
    let mut short = vec![0u8; len - 2];
    match world.recv(&mut short, peer, 23) {
        Err(Error::Truncated { message_bytes, source_rank, tag: 23, .. }) => {
            assert_eq!((message_bytes, source_rank), (len, peer));
            assert!(short[..] == data[..len - 2], "the first bytes of a truncated message");
        }
        other => panic!("expected a truncation error, got {other:?}"),
    }
    world.barrier()
}

/// Messages longer than one MPI count travel as a derived datatype. `scripts/mpi-device.sh` runs
/// this with `FASTMP_MPI_MAX_COUNT=65536` (a hidden knob lowering the 2^31 - 1 limit), so these
/// 196 613 bytes take that path (three chunks and a remainder) in CI.
#[test]
fn long_messages_cross_the_count_limit() {
    job(|world| exchange_long_messages(&world, 3 * 65_536 + 5));
}

/// 2 GiB + 3 bytes for real (about 6.5 GiB of memory over the two ranks); run by hand:
/// `mpirun -np 2 -x FASTMP_DEVICE=mpi <mpi_p2p binary> --ignored --exact over_2_gib`.
#[test]
#[ignore = "needs about 6.5 GiB of memory and tens of seconds"]
fn over_2_gib() {
    job(|world| exchange_long_messages(&world, (1usize << 31) + 3));
}
