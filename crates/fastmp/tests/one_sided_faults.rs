//! Progress and faults of one-sided communication: a target busy in user code (sleeping, no
//! fastmp call) still serves locks, puts, gets and atomics (true passive-target progress, which
//! the tcp device owes to its input thread); a rank that fails (panics or returns an error)
//! inside an epoch makes its peers' pending and later one-sided operations and synchronisation
//! fail instead of hanging, and `run` reports it; windows, local guards and requests leaked with
//! `mem::forget` cause neither UB nor a hang where the contract promises none. Both devices.

mod common;
mod one_sided_common;

use std::mem;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use common::device_suite;
use fastmp::op::Sum;
use fastmp::window::{Assert, LockKind};
use fastmp::{Comm, DeviceKind, Error, Result};
use one_sided_common::{HANG, go, pause, run, wait_go};

/// Rank 0 sleeps in user code until every origin has finished a passive-target epoch on it:
/// exclusive and shared locks, put, get, accumulate, fetch_and_op, compare_and_swap, flush and
/// unlock must all complete without any fastmp call by the target.
fn target_sleeping_in_user_code_serves_operations(dev: DeviceKind) {
    const N: usize = 10;
    let finished = AtomicUsize::new(0);
    run(dev, 4, |world| {
        let (me, np) = (world.rank(), world.size());
        let win = world.win_allocate::<u64>(np + 2)?;
        world.barrier()?;
        if me == 0 {
            let start = Instant::now();
            while finished.load(Ordering::Acquire) < np - 1 {
                assert!(start.elapsed() < HANG / 2, "origins did not finish while the target was in user code");
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        } else {
            let mut tickets = Vec::new();
            for i in 0..N {
                win.lock(LockKind::Exclusive, 0, Assert::NONE)?;
                win.put(&[(me * 1000 + i) as u64], 0, me)?;
                let mut got = [0u64];
                win.get(&mut got, 0, me)?;
                assert_eq!(got[0], (me * 1000 + i) as u64, "rank {me}: get after put in one lock epoch");
                win.unlock(0)?;
                win.lock(LockKind::Shared, 0, Assert::NONE)?;
                tickets.push(win.fetch_and_op(1, 0, np, Sum)?);
                win.accumulate(&[2], 0, np + 1, Sum)?;
                win.compare_and_swap(u64::MAX, 0, 0, 0)?;
                win.flush(0)?;
                win.unlock(0)?;
            }
            assert!(tickets.windows(2).all(|w| w[0] < w[1]), "rank {me}: tickets {tickets:?}");
            finished.fetch_add(1, Ordering::Release);
        }
        world.barrier()?;
        if me == 0 {
            let part = win.local()?;
            for o in 1..np {
                assert_eq!(part[o], (o * 1000 + N - 1) as u64);
            }
            assert_eq!((part[np], part[np + 1]), (((np - 1) * N) as u64, (2 * (np - 1) * N) as u64));
        }
        win.free()
    })
    .unwrap();
}

#[derive(Clone, Copy, Debug)]
enum Failure {
    Panic,
    Error,
}

impl Failure {
    fn fail(self, rank: usize) -> Result<()> {
        match self {
            Failure::Panic => panic!("rank {rank} fails on purpose"),
            Failure::Error => Err(Error::other(format!("rank {rank} fails on purpose"))),
        }
    }
}

/// Runs `body` on `np` ranks; rank `failing` fails inside it. `run` must return `RankFailed`
/// naming it, and every survivor's error must be `PeerFailed` naming it (or, for an operation
/// on its withdrawn window part, an error whose message names it).
fn check_failure(dev: DeviceKind, np: usize, failing: usize, body: impl Fn(&Comm) -> Result<()> + Sync) {
    let seen = Mutex::new(vec![None; np]);
    let result = run(dev, np, |world| {
        let outcome = body(&world);
        seen.lock().unwrap()[world.rank()] = Some(match &outcome {
            Ok(()) => "succeeded".to_string(),
            Err(Error::PeerFailed { rank, .. }) if *rank == failing => "ok".to_string(),
            Err(e) if e.to_string().contains(&format!("rank {failing}")) => "ok".to_string(),
            Err(e) => format!("{e:?}"),
        });
        outcome
    });
    match result {
        Err(Error::RankFailed { rank, cause }) => {
            assert_eq!(rank, failing, "{dev:?}: run blamed rank {rank} ({cause})");
            assert!(cause.contains("fails on purpose"), "{dev:?}: cause {cause:?}");
        }
        other => panic!("{dev:?}: run returned {other:?}, expected RankFailed naming {failing}"),
    }
    for (rank, seen) in seen.into_inner().unwrap().into_iter().enumerate().filter(|&(r, _)| r != failing) {
        assert_eq!(seen.as_deref(), Some("ok"), "{dev:?}: survivor {rank}");
    }
}

/// Rank 1 fails while holding an exclusive lock on rank 0's part; rank 2 is blocked acquiring
/// the same lock, rank 0 in a barrier.
fn origin_failing_while_holding_an_exclusive_lock(dev: DeviceKind) {
    for failure in [Failure::Panic, Failure::Error] {
        check_failure(dev, 3, 1, |world| {
            let win = world.win_allocate::<u64>(2)?;
            match world.rank() {
                1 => {
                    win.lock(LockKind::Exclusive, 0, Assert::NONE)?;
                    win.put(&[1], 0, 0)?;
                    go(world, 2)?;
                    pause();
                    failure.fail(1)?;
                }
                2 => {
                    wait_go(world, 1)?;
                    win.lock(LockKind::Exclusive, 0, Assert::NONE)?;
                    win.put(&[2], 0, 1)?;
                    win.unlock(0)?;
                }
                _ => {}
            }
            world.barrier()?;
            win.free()
        });
    }
}

/// The target fails inside a lock_all epoch while the origins keep operating on it: their later
/// operations fail (they may succeed until the failure is known, never forever).
fn target_failing_inside_a_lock_all_epoch(dev: DeviceKind) {
    for failure in [Failure::Panic, Failure::Error] {
        check_failure(dev, 3, 0, |world| {
            let win = world.win_allocate::<u64>(4)?;
            win.lock_all(Assert::NONE)?;
            world.barrier()?;
            if world.rank() == 0 {
                failure.fail(0)?;
            }
            let start = Instant::now();
            let mut got = [0u64; 2];
            loop {
                win.fetch_and_op(1, 0, 0, Sum)?;
                win.put(&[5, 6], 0, 2)?;
                win.get(&mut got, 0, 2)?;
                win.flush(0)?;
                assert!(start.elapsed() < HANG / 2, "operations on a failed target kept succeeding");
            }
        });
    }
}

/// PSCW with a partner that fails inside its access epoch (started, never completed): `start`
/// waits for a post that never comes, `wait` for a complete that never comes; both fail.
fn pscw_partner_failing(dev: DeviceKind) {
    for failure in [Failure::Panic, Failure::Error] {
        check_failure(dev, 3, 2, |world| pscw_with_failing_rank_2(world, failure, true));
    }
}

/// Rank 0 starts an access epoch to rank 2 (which never posts), rank 1 posts to rank 2 and
/// waits; rank 2 fails, inside its own access epoch to rank 1 (`in_epoch`) or between epochs.
fn pscw_with_failing_rank_2(world: &Comm, failure: Failure, in_epoch: bool) -> Result<()> {
    let win = world.win_allocate::<u32>(1)?;
    let (one, two) = (world.group().incl(&[1])?, world.group().incl(&[2])?);
    match world.rank() {
        0 => win.start(&two, Assert::NONE)?,
        1 => {
            win.post(&two, Assert::NONE)?;
            win.wait()?;
        }
        _ => {
            if in_epoch {
                win.start(&one, Assert::NONE)?;
            }
            failure.fail(2)?;
        }
    }
    win.free()
}

/// A rank that returns an error between epochs drops its window; the drop closes its part
/// alone (no barrier), so peers waiting for it in `start`/`wait` fail instead of hanging.
#[test]
fn error_return_between_epochs_does_not_hang_peers() {
    for dev in [DeviceKind::Shm, DeviceKind::Tcp, DeviceKind::Hybrid] {
        check_failure(dev, 3, 2, |world| pscw_with_failing_rank_2(world, Failure::Error, false));
    }
}

/// Windows leaked on every rank (with `win_allocate` and from inside `win_create`), a leaked
/// local guard, and leaked requests: the job goes on, nothing hangs, requests complete by the
/// scope's end.
fn forgetting_windows_guards_and_requests(dev: DeviceKind) {
    run(dev, 2, |world| {
        let (me, peer) = (world.rank(), 1 - world.rank());
        // A window used, then leaked by every rank (no free: the memory stays, nobody waits).
        let leaked = world.win_allocate::<u64>(4)?;
        leaked.fence(Assert::NONE)?;
        leaked.put(&[9], peer, 0)?;
        leaked.fence(Assert::NOSUCCEED)?;
        mem::forget(leaked);

        // A guard leaked: the owner's later `local()` fails instead of aliasing the part.
        let win = world.win_allocate::<u64>(4)?;
        mem::forget(win.local()?);
        assert!(win.local().is_err(), "a second guard while a leaked one is alive");
        mem::forget(win);

        // Requests leaked inside a scope complete by its end.
        let win = world.win_allocate::<u64>(4)?;
        win.local()?.copy_from_slice(&[me as u64; 4]);
        world.barrier()?;
        win.lock_all(Assert::NONE)?;
        let mut got = [0u64; 2];
        let data = [me as u64 + 50; 2];
        world.scope(|s| {
            mem::forget(s.rget(&win, &mut got, peer, 0)?);
            mem::forget(s.rput(&win, &data, peer, 2)?);
            mem::forget(s.raccumulate(&win, &data[..1], peer, 1, Sum)?);
            Ok::<_, Error>(())
        })?;
        assert_eq!(got, [peer as u64; 2], "a leaked rget's data by the scope's end");
        win.unlock_all()?;
        world.barrier()?;
        assert_eq!(&*win.local()?, &[me as u64, me as u64 + peer as u64 + 50, peer as u64 + 50, peer as u64 + 50]);
        win.free()?;

        // win_create whose closure leaks a guard still returns, and the memory is the user's.
        let mut mem_ = vec![1u32; 4];
        world.win_create(&mut mem_, |win| {
            win.fence(Assert::NONE)?;
            win.put(&[me as u32 + 7], peer, 3)?;
            win.fence(Assert::NOSUCCEED)?;
            mem::forget(win.local()?);
            Ok(())
        })?;
        assert_eq!(mem_, [1, 1, 1, peer as u32 + 7]);
        // Point-to-point and collectives still work after all of it.
        let mut sum = [0u64];
        world.allreduce(&[1], &mut sum, Sum)?;
        assert_eq!(sum[0], 2);
        Ok(())
    })
    .unwrap();
}

device_suite! {
    both: [
        target_sleeping_in_user_code_serves_operations,
        origin_failing_while_holding_an_exclusive_lock,
        target_failing_inside_a_lock_all_epoch,
        pscw_partner_failing,
        forgetting_windows_guards_and_requests,
    ],
    tcp_ignored: [],
}
