//! One-sided communication on the `mpi` device: fastmp windows as MPI windows. Run under mpirun
//! by `scripts/mpi-device.sh` (np 2 and 4, `FASTMP_DEVICE=mpi`, `--test-threads=1`, so every
//! process runs the same tests in the same order); each test is one job on the launcher's ranks
//! (`Config::from_env`), written for any size ≥ 2, asserting on its own rank's results.
//! Outside mpirun the jobs run on whatever `Config::from_env` gives (thread ranks), so the bodies
//! stay checked against the other devices' behaviour.

#![cfg(feature = "mpi")]

use fastmp::layout::Vector;
use fastmp::op::{Band, Bxor, Land, Max, Min, NoOp, Prod, Replace, Sum};
use fastmp::window::{Assert, LockKind};
use fastmp::{Comm, Config, Error, PROC_NULL, Result};

/// Tag of the control messages that sequence a test's interleaving.
const GO: i32 = 4243;

/// Runs `f` as one job on the launcher's ranks and fails the test on this rank's error.
fn job(f: impl Fn(&Comm) -> Result<()> + Sync) {
    let config = Config::from_env().expect("Config::from_env");
    config.run(|world| f(&world)).unwrap_or_else(|e| panic!("{e}"));
}

fn expect_sync<T: std::fmt::Debug>(result: Result<T>, words: &str) {
    match result {
        Err(Error::RmaSync(m)) => assert!(m.contains(words), "{m:?} lacks {words:?}"),
        other => panic!("expected RmaSync({words}), got {other:?}"),
    }
}

fn expect_invalid<T: std::fmt::Debug>(result: Result<T>, words: &str) {
    match result {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(words), "{m:?} lacks {words:?}"),
        other => panic!("expected InvalidArgument({words}), got {other:?}"),
    }
}

/// Byte `i` of the data rank `r` writes.
fn pattern(r: usize, i: usize) -> u8 {
    (r * 31 + i * 7 + i / 251) as u8
}

#[test]
fn puts_and_gets_at_several_sizes_and_offsets() {
    job(|world| {
        let (me, np) = (world.rank(), world.size());
        let (right, left) = ((me + 1) % np, (me + np - 1) % np);
        for &(len, offset) in &[(1, 0), (7, 3), (8, 8), (100, 1), (4096, 0), (65_537, 5), (1 << 20, 64)] {
            let part = len + offset + 3;
            let win = world.win_allocate::<u8>(part)?;
            let data: Vec<u8> = (0..len).map(|i| pattern(me, i)).collect();
            win.fence(Assert::NOPRECEDE)?;
            win.put(&data, right, offset)?;
            win.fence(Assert::NONE)?;
            {
                let local = win.local()?;
                assert!(local[..offset].iter().all(|&b| b == 0), "len {len}: bytes before the put");
                assert!(local[offset + len..].iter().all(|&b| b == 0), "len {len}: bytes after the put");
                assert!(local[offset..offset + len].iter().enumerate().all(|(i, &b)| b == pattern(left, i)));
            }
            // Read back what this rank wrote into its right neighbour.
            let mut back = vec![0u8; len];
            win.get(&mut back, right, offset)?;
            win.fence(Assert::NOSUCCEED)?;
            assert!(back == data, "len {len} offset {offset}: get returned other bytes");
            win.free()?;
        }
        Ok(())
    });
}

#[test]
fn accumulates_with_several_ops_and_element_types() {
    job(|world| {
        let (me, np) = (world.rank(), world.size());
        let n = np as i64;
        let wi = world.win_allocate::<i32>(4)?;
        let wu = world.win_allocate::<u64>(2)?;
        let wf = world.win_allocate::<f64>(2)?;
        let wb = world.win_allocate::<u8>(2)?;
        let wh = world.win_allocate::<i16>(2)?;
        wb.fence(Assert::NONE)?;
        wb.accumulate(&[0xff, 0xff], 0, 0, Replace)?;
        wb.fence(Assert::NONE)?;
        wi.fence(Assert::NONE)?;
        wu.fence(Assert::NONE)?;
        wf.fence(Assert::NONE)?;
        wh.fence(Assert::NONE)?;
        // Every rank accumulates into every rank.
        for t in 0..np {
            wi.accumulate(&[me as i32 + 1, -(me as i32), 1, 0], t, 0, Sum)?;
            wi.accumulate(&[me as i32 * 10], t, 3, Max)?;
            wu.accumulate(&[1u64 << me, 3], t, 0, Sum)?;
            wf.accumulate(&[0.5, me as f64], t, 0, Sum)?;
            wh.accumulate(&[-(me as i16), me as i16], t, 0, Min)?;
        }
        wb.accumulate(&[1 << me, !(1 << me)], 0, 0, Bxor)?;
        wi.fence(Assert::NOSUCCEED)?;
        wu.fence(Assert::NOSUCCEED)?;
        wf.fence(Assert::NOSUCCEED)?;
        wh.fence(Assert::NOSUCCEED)?;
        wb.fence(Assert::NOSUCCEED)?;
        let sum = n * (n + 1) / 2;
        assert_eq!(*wi.local()?, [sum as i32, -((n * (n - 1) / 2) as i32), np as i32, (np as i32 - 1) * 10]);
        assert_eq!(*wu.local()?, [(1u64 << np) - 1, 3 * np as u64]);
        assert_eq!(*wf.local()?, [0.5 * np as f64, (n * (n - 1) / 2) as f64]);
        assert_eq!(*wh.local()?, [-(np as i16 - 1), 0]);
        if me == 0 {
            let mask = (1u8 << np) - 1;
            assert_eq!(*wb.local()?, [0xff ^ mask, 0xff ^ (if np % 2 == 0 { 0 } else { 0xff }) ^ mask]);
        }
        world.barrier()?;
        // Logical, bitwise and product ops on a passive epoch, and get_accumulate's old values.
        wi.lock(LockKind::Exclusive, 0, Assert::NONE)?;
        let (mut old, mut mid, mut now) = ([0i32; 4], [0i32; 4], [0i32; 4]);
        wi.get_accumulate(&[2, 1, 1, 6], &mut old, 0, 0, Prod)?;
        wi.get_accumulate(&[], &mut mid, 0, 0, NoOp)?;
        // Logical operators: applied, or refused with a clear error where the MPI library is
        // known to drop them (Open MPI 4).
        let logical = wi.accumulate(&[0, 1, 1, 1], 0, 0, Land);
        wi.get_accumulate(&[], &mut now, 0, 0, NoOp)?;
        wi.unlock(0)?;
        assert_eq!(mid, [old[0] * 2, old[1], old[2], old[3] * 6]);
        match logical {
            Ok(()) => {
                assert_eq!(now, [0, i32::from(mid[1] != 0), i32::from(mid[2] != 0), i32::from(mid[3] != 0)])
            }
            Err(e) => {
                assert_eq!(world.device_name(), "mpi", "{e}");
                expect_invalid::<()>(Err(e), "accumulate with Land");
                assert_eq!(now, mid);
            }
        }
        wu.lock(LockKind::Shared, 0, Assert::NONE)?;
        wu.accumulate(&[u64::MAX, 1], 0, 0, Band)?;
        wu.unlock(0)?;
        world.barrier()?;
        if me == 0 {
            assert_eq!(*wu.local()?, [(1u64 << np) - 1, (3 * np as u64) & 1]);
        }
        wi.free()?;
        wu.free()?;
        wf.free()?;
        wb.free()?;
        wh.free()
    });
}

#[test]
fn fetch_and_op_counter_over_all_ranks() {
    job(|world| {
        let (me, np) = (world.rank(), world.size());
        let win = world.win_allocate::<u64>(1)?;
        const ROUNDS: u64 = 50;
        let mut tickets = Vec::new();
        win.lock(LockKind::Shared, 0, Assert::NONE)?;
        for _ in 0..ROUNDS {
            tickets.push(win.fetch_and_op(1, 0, 0, Sum)?);
        }
        win.unlock(0)?;
        assert!(tickets.windows(2).all(|w| w[0] < w[1]), "rank {me}: tickets not increasing");
        world.barrier()?;
        win.lock(LockKind::Shared, 0, Assert::NONE)?;
        let total = win.fetch_and_op(0, 0, 0, NoOp)?;
        win.unlock(0)?;
        assert_eq!(total, ROUNDS * np as u64);
        world.barrier()?;
        win.lock(LockKind::Shared, 0, Assert::NONE)?;
        let swapped = win.fetch_and_op(7, 0, 0, Replace)?;
        win.unlock(0)?;
        assert!(swapped == total || swapped == 7);
        // Small elements: an i8 and a u16 counter.
        let small = world.win_allocate::<i8>(1)?;
        small.lock_all(Assert::NONE)?;
        let before = small.fetch_and_op(-1, 0, 0, Sum)?;
        small.unlock_all()?;
        assert!(before <= 0 && before > -(np as i8));
        world.barrier()?;
        if me == 0 {
            assert_eq!(small.local()?[0], -(np as i8));
        }
        small.free()?;
        win.free()
    });
}

#[test]
fn compare_and_swap_counter_over_all_ranks() {
    job(|world| {
        let (me, np) = (world.rank(), world.size());
        let win = world.win_allocate::<u32>(2)?;
        const ROUNDS: u32 = 8;
        win.lock_all(Assert::NONE)?;
        for _ in 0..ROUNDS {
            // Increment element 0 of rank 0 by compare-and-swap retries.
            let mut seen = win.fetch_and_op(0, 0, 0, NoOp)?;
            loop {
                let old = win.compare_and_swap(seen, seen + 1, 0, 0)?;
                if old == seen {
                    break;
                }
                seen = old;
            }
        }
        // Exactly one rank wins slot 1 of the last rank.
        let won = win.compare_and_swap(0, me as u32 + 1, np - 1, 1)? == 0;
        win.unlock_all()?;
        world.barrier()?;
        let mut winners = [0u32];
        world.allreduce(&[u32::from(won)], &mut winners, Sum)?;
        assert_eq!(winners[0], 1);
        if me == 0 {
            assert_eq!(win.local()?[0], ROUNDS * np as u32);
        }
        // 64-bit elements, the owner's own compare-and-swaps among the others'.
        let wide = world.win_allocate::<u64>(1)?;
        wide.lock_all(Assert::NONE)?;
        for _ in 0..ROUNDS {
            let mut seen = 0u64;
            loop {
                let old = wide.compare_and_swap(seen, seen + 1, 0, 0)?;
                if old == seen {
                    break;
                }
                seen = old;
            }
        }
        wide.unlock_all()?;
        world.barrier()?;
        if me == 0 {
            assert_eq!(wide.local()?[0], u64::from(ROUNDS) * np as u64);
        }
        wide.free()?;
        win.free()
    });
}

#[test]
fn pscw_ring() {
    job(|world| {
        let (me, np) = (world.rank(), world.size());
        let (right, left) = ((me + 1) % np, (me + np - 1) % np);
        let win = world.win_allocate::<i64>(2)?;
        let group = win.comm().group();
        for round in 0..3i64 {
            win.post(&group.incl(&[left])?, Assert::NONE)?;
            win.start(&group.incl(&[right])?, Assert::NONE)?;
            win.put(&[me as i64 * 100 + round], right, 0)?;
            win.accumulate(&[1], right, 1, Sum)?;
            // Only the right neighbour is in the access group (at np 2, (me + 2) % np is me).
            expect_sync(win.put(&[0], (me + 2) % np, 0), "outside an access epoch");
            win.complete()?;
            win.wait()?;
            assert_eq!(*win.local()?, [left as i64 * 100 + round, round + 1]);
        }
        win.free()
    });
}

#[test]
fn exclusive_locks_serialise_read_modify_write() {
    job(|world| {
        let np = world.size();
        let win = world.win_allocate::<u64>(1)?;
        const ROUNDS: u64 = 25;
        for _ in 0..ROUNDS {
            // A non-atomic increment: only the exclusive lock keeps it from losing updates.
            win.lock(LockKind::Exclusive, 0, Assert::NONE)?;
            let mut v = [0u64];
            win.get(&mut v, 0, 0)?;
            win.flush(0)?;
            win.put(&[v[0] + 1], 0, 0)?;
            win.unlock(0)?;
        }
        world.barrier()?;
        if world.rank() == 0 {
            assert_eq!(win.local()?[0], ROUNDS * np as u64);
        }
        win.free()
    });
}

#[test]
fn shared_locks_and_lock_all_with_flush() {
    job(|world| {
        let (me, np) = (world.rank(), world.size());
        let win = world.win_allocate::<u32>(np)?;
        win.lock_all(Assert::NONE)?;
        for t in 0..np {
            win.put(&[me as u32 + 1], t, me)?;
            win.flush(t)?;
            // Complete at the target after the flush: a get sees it.
            let mut v = [0u32];
            win.get(&mut v, t, me)?;
            assert_eq!(v[0], me as u32 + 1);
        }
        win.flush_all()?;
        win.flush_local_all()?;
        win.unlock_all()?;
        world.barrier()?;
        assert_eq!(*win.local()?, (1..=np as u32).collect::<Vec<_>>());
        world.barrier()?;
        // Shared locks by everyone on one target at once.
        win.lock(LockKind::Shared, np - 1, Assert::NONE)?;
        win.accumulate(&[10], np - 1, me, Sum)?;
        win.unlock(np - 1)?;
        world.barrier()?;
        if me == np - 1 {
            assert_eq!(*win.local()?, (11..11 + np as u32).collect::<Vec<_>>());
        }
        win.free()
    });
}

/// The owner's local guard holds origins' operations off: a put issued while rank 0 writes its
/// slice lands after the guard is dropped, so it is what rank 0 finally holds.
#[test]
fn local_access_holds_origins_off() {
    job(|world| {
        let me = world.rank();
        let win = world.win_allocate::<u64>(4)?;
        win.lock_all(Assert::NONE)?;
        win.unlock_all()?;
        if me == 0 {
            let mut guard = win.local()?;
            world.send::<u8>(&[], 1, GO)?;
            std::thread::sleep(std::time::Duration::from_millis(50));
            guard.fill(11);
            drop(guard);
        } else if me == 1 {
            world.recv::<u8>(&mut [], 0, GO)?;
            win.lock(LockKind::Shared, 0, Assert::NONE)?;
            win.put(&[22; 4], 0, 0)?;
            win.unlock(0)?;
        }
        world.barrier()?;
        if me == 0 {
            assert_eq!(*win.local()?, [22; 4], "the put landed inside the owner's local access");
        }
        // Local access inside this rank's own lock_all (on the mpi device its shared self-lock
        // is suspended meanwhile).
        win.lock_all(Assert::NONE)?;
        win.put(&[me as u64], me, 3)?;
        win.flush(me)?;
        world.barrier()?;
        assert_eq!(win.local()?[3], me as u64);
        win.put(&[me as u64 + 1], me, 2)?;
        win.unlock_all()?;
        assert_eq!(win.local()?[2..], [me as u64 + 1, me as u64]);
        win.free()
    });
}

#[test]
fn strided_and_request_forms_over_win_create() {
    job(|world| {
        let (me, np) = (world.rank(), world.size());
        let (right, left) = ((me + 1) % np, (me + np - 1) % np);
        let column = Vector { count: 3, blocklength: 1, stride: 4 };
        let mut matrix = [0u32; 12];
        let rows: Vec<u32> = (0..12).map(|i| i + 100 * me as u32).collect();
        world.win_create(&mut matrix, |win| {
            win.fence(Assert::NONE)?;
            win.put_strided(&rows, &Vector { count: 1, blocklength: 3, stride: 3 }, right, 1, &column)?;
            win.fence(Assert::NONE)?;
            let (mut got, mut old) = ([0u32; 2], [0u32; 2]);
            world.scope(|s| {
                let a = s.rget(win, &mut got, right, 4)?;
                let b = s.rget_accumulate(win, &[5, 5], &mut old, PROC_NULL, 0, Replace)?;
                let c = s.raccumulate(win, &[1u32], left, 0, Sum)?;
                fastmp::waitall(&mut [a, b, c]).map(drop)
            })?;
            assert_eq!((got, old), ([0, 100 * me as u32 + 1], [0, 0]));
            win.fence(Assert::NOSUCCEED)
        })?;
        assert_eq!(
            [matrix[1], matrix[5], matrix[9]],
            [100 * left as u32, 100 * left as u32 + 1, 100 * left as u32 + 2]
        );
        assert_eq!(matrix[0], 1);
        Ok(())
    });
}

#[test]
fn misuse_is_an_error_on_the_rank_that_made_it() {
    job(|world| {
        let (me, np) = (world.rank(), world.size());
        let win = world.win_allocate::<u32>(4)?;
        let right = (me + 1) % np;
        expect_sync(win.put(&[1], right, 0), "outside an access epoch");
        expect_sync(win.unlock(right), "without a matching lock");
        expect_sync(win.flush(right), "not locked");
        win.lock(LockKind::Shared, right, Assert::NONE)?;
        expect_invalid(win.put(&[1, 2], right, 3), "outside rank");
        expect_invalid(win.get(&mut [0; 5], right, 0), "outside rank");
        match win.put(&[1], np + 3, 0) {
            Err(Error::RankOutOfRange { rank, .. }) => assert_eq!(rank, np + 3),
            other => panic!("expected RankOutOfRange, got {other:?}"),
        }
        expect_sync(win.lock(LockKind::Shared, right, Assert::NONE), "already locked");
        expect_sync(win.fence(Assert::NONE), "passive-target epoch is open");
        win.unlock(right)?;
        {
            let _guard = win.local()?;
            expect_sync(win.lock_all(Assert::NONE), "local() guard");
            assert!(win.local().is_err(), "a second guard");
        }
        win.free()?;
        // A window dropped without free on every rank (the error path), then a fresh one works.
        let lost = world.win_allocate::<u64>(2)?;
        drop(lost);
        let again = world.win_allocate::<u64>(2)?;
        again.fence(Assert::NONE)?;
        again.put(&[9], right, 1)?;
        again.fence(Assert::NOSUCCEED)?;
        assert_eq!(again.local()?[1], 9);
        again.free()
    });
}

#[test]
fn shared_array_on_the_device() {
    job(|world| {
        let (me, np) = (world.rank(), world.size());
        const B: usize = 8;
        let a = world.shared_array::<u64>(B)?;
        let val = |t: usize, i: usize| (t * 1000 + i) as u64;
        assert_eq!(*a.local()?, [0; B]);
        a.barrier()?;
        for t in 0..np {
            a.memput(&[val(t, me)], t, me)?;
        }
        a.local()?[np.min(B)..].iter_mut().enumerate().for_each(|(i, v)| *v = val(me, np + i));
        a.barrier()?;
        let want: Vec<u64> = (0..B).map(|i| val(me, i)).collect();
        assert_eq!(*a.local()?, want);
        for t in 0..np {
            let mut got = [0u64; 3];
            a.memget(&mut got, t, 2)?;
            assert_eq!(got, [val(t, 2), val(t, 3), val(t, 4)]);
        }
        a.barrier()?;
        a.free()
    });
}
