//! Misuse of windows is an `Err` naming the call, never UB, a panic in the library or a hang
//! (items 3–4 of the one-sided issue): operations outside an epoch, ranges outside the target's
//! part, lock/unlock and PSCW misuse, fence misuse and mismatched assertions, groups with ranks
//! outside the window, types a window cannot hold, free inside an epoch, a second local guard.
//! Every misuse is made by every rank of the window at once (so no rank is left waiting in a
//! collective another rank skipped), and the window stays usable afterwards. Both devices.

mod common;
mod one_sided_common;

use common::device_suite;
use fastmp::op::{Max, NoOp, Sum};
use fastmp::window::{Assert, LockKind};
use fastmp::{DeviceKind, Error};
use one_sided_common::{expect_bad_rank, expect_invalid, expect_sync, expect_sync_or_invalid, run};

fn operations_outside_an_epoch(dev: DeviceKind) {
    run(dev, 2, |world| {
        let peer = 1 - world.rank();
        let win = world.win_allocate::<u64>(4)?;
        let mut buf = [0u64; 2];
        expect_sync(win.put(&[1], peer, 0), "put");
        expect_sync(win.get(&mut buf, peer, 0), "get");
        expect_sync(win.accumulate(&[1], peer, 0, Sum), "accumulate");
        expect_sync(win.get_accumulate(&[1], &mut buf[..1], peer, 0, Sum), "get_accumulate");
        expect_sync(win.fetch_and_op(1, peer, 0, Sum), "fetch_and_op");
        expect_sync(win.compare_and_swap(0, 1, peer, 0), "compare_and_swap");
        world.scope(|s| {
            expect_sync(s.rput(&win, &[1], peer, 0).map(drop), "rput");
            expect_sync(s.rget(&win, &mut buf, peer, 0).map(drop), "rget");
            expect_sync(s.raccumulate(&win, &[1], peer, 0, Sum).map(drop), "raccumulate");
        });
        // A lock on one target is no epoch for another.
        if world.size() == 2 {
            win.lock(LockKind::Shared, world.rank(), Assert::NONE)?;
            expect_sync(win.put(&[1], peer, 0), "put");
            win.unlock(world.rank())?;
        }
        // Flushes belong to passive-target epochs.
        expect_sync(win.flush(peer), "flush");
        expect_sync(win.flush_all(), "flush_all");
        expect_sync(win.flush_local(peer), "flush_local");
        expect_sync(win.flush_local_all(), "flush_local_all");
        // Nothing moved.
        world.barrier()?;
        assert_eq!(&*win.local()?, &[0; 4]);
        win.free()
    })
    .unwrap();
}

fn ranges_outside_the_target_part(dev: DeviceKind) {
    run(dev, 3, |world| {
        let (me, np) = (world.rank(), world.size());
        // Rank r's part has 4 + r elements.
        let win = world.win_allocate::<u32>(4 + me)?;
        win.lock_all(Assert::NONE)?;
        let t = (me + 1) % np;
        let len = 4 + t;
        let mut buf = vec![0u32; len + 1];
        // Exactly up to the end is fine.
        win.put(&buf[..2], t, len - 2)?;
        win.get(&mut buf[..len], t, 0)?;
        expect_invalid(win.put(&buf[..2], t, len - 1), "put");
        expect_invalid(win.put(&buf[..1], t, len), "put");
        expect_invalid(win.put(&buf[..1], t, usize::MAX), "put");
        expect_invalid(win.get(&mut buf[..len + 1], t, 0), "get");
        expect_invalid(win.get(&mut buf[..1], t, usize::MAX / 4 + 1), "get");
        expect_invalid(win.accumulate(&buf[..3], t, len - 2, Sum), "accumulate");
        expect_invalid(win.fetch_and_op(1, t, len, Sum), "fetch_and_op");
        expect_invalid(win.compare_and_swap(0, 1, t, len), "compare_and_swap");
        let (data, result) = buf.split_at_mut(2);
        expect_invalid(win.get_accumulate(data, &mut result[..2], t, len - 1, Max), "get_accumulate");
        // get_accumulate's result must match its data (unless NoOp, where data may be empty).
        expect_invalid(win.get_accumulate(&data[..2], &mut result[..1], t, 0, Sum), "get_accumulate");
        win.get_accumulate(&[], &mut result[..2], t, 0, NoOp)?;
        world.scope(|s| {
            expect_invalid(s.rput(&win, &[1, 2], t, len - 1).map(drop), "rput");
            expect_invalid(s.rget(&win, &mut buf[..2], t, len - 1).map(drop), "rget");
            expect_invalid(s.raccumulate(&win, &[1, 2], t, len - 1, Sum).map(drop), "raccumulate");
        });
        // Targets outside the window.
        expect_bad_rank(win.put(&[1], np, 0), "put", np);
        expect_bad_rank(win.get(&mut buf[..1], np + 5, 0), "get", np + 5);
        expect_bad_rank(win.fetch_and_op(1, np, 0, Sum), "fetch_and_op", np);
        expect_bad_rank(win.flush(np), "flush", np);
        assert!(win.len_of(np).is_err());
        win.unlock_all()?;
        expect_bad_rank(win.lock(LockKind::Shared, np, Assert::NONE), "lock", np);
        world.barrier()?;
        // Nothing landed anywhere: the in-range put wrote zeros, every other part is untouched.
        assert!(win.local()?.iter().all(|&x| x == 0));
        win.free()
    })
    .unwrap();
}

fn lock_misuse(dev: DeviceKind) {
    run(dev, 2, |world| {
        let (me, peer) = (world.rank(), 1 - world.rank());
        let win = world.win_allocate::<u64>(2)?;
        expect_sync(win.unlock(peer), "unlock");
        expect_sync(win.unlock_all(), "unlock_all");
        win.lock(LockKind::Shared, peer, Assert::NONE)?;
        expect_sync(win.lock(LockKind::Shared, peer, Assert::NONE), "lock");
        expect_sync(win.lock(LockKind::Exclusive, peer, Assert::NONE), "lock");
        expect_sync(win.lock_all(Assert::NONE), "lock_all");
        expect_sync(win.unlock(me), "unlock");
        // A lock epoch and a fence epoch do not mix.
        expect_sync(win.fence(Assert::NONE), "fence");
        win.put(&[me as u64 + 1], peer, me)?;
        win.unlock(peer)?;
        expect_sync(win.unlock(peer), "unlock");
        win.lock_all(Assert::NONE)?;
        expect_sync(win.lock_all(Assert::NONE), "lock_all");
        expect_sync(win.lock(LockKind::Shared, peer, Assert::NONE), "lock");
        expect_sync(win.fence(Assert::NONE), "fence");
        expect_sync(win.unlock(peer), "unlock");
        win.unlock_all()?;
        // The window still works.
        win.fence(Assert::NONE)?;
        win.fence(Assert::NOSUCCEED)?;
        assert_eq!(win.local()?[peer], peer as u64 + 1);
        win.free()
    })
    .unwrap();
}

fn pscw_misuse(dev: DeviceKind) {
    run(dev, 3, |world| {
        let (me, np) = (world.rank(), world.size());
        let (left, right) = ((me + np - 1) % np, (me + 1) % np);
        let win = world.win_allocate::<u64>(2)?;
        expect_sync(win.complete(), "complete");
        expect_sync(win.wait(), "wait");
        expect_sync(win.test(), "test");
        win.post(&world.group().incl(&[left])?, Assert::NONE)?;
        expect_sync(win.post(&world.group().incl(&[left])?, Assert::NONE), "post");
        win.start(&world.group().incl(&[right])?, Assert::NONE)?;
        // Only the started group is accessible.
        if left != right {
            expect_sync(win.put(&[1], left, 0), "put");
        }
        win.put(&[me as u64 + 10], right, 0)?;
        win.complete()?;
        expect_sync(win.complete(), "complete");
        win.wait()?;
        expect_sync(win.wait(), "wait");
        assert_eq!(win.local()?[0], left as u64 + 10);
        win.free()
    })
    .unwrap();
}

/// A group naming a rank that is not in the window's communicator, for post and start.
fn pscw_group_outside_the_window(dev: DeviceKind) {
    run(dev, 4, |world| {
        let me = world.rank();
        let evens = world.split(Some(me as u32 % 2), me as i32)?.expect("every rank has a colour");
        let win = evens.win_allocate::<u8>(1)?;
        // World rank (me + 1) % 4 has the other parity: not in `evens`.
        let stranger = world.group().incl(&[(me + 1) % 4])?;
        expect_sync_or_invalid(win.post(&stranger, Assert::NONE), "post");
        expect_sync_or_invalid(win.start(&stranger, Assert::NONE), "start");
        let mixed = world.group().incl(&[(me + 2) % 4, (me + 1) % 4])?;
        expect_sync_or_invalid(win.start(&mixed, Assert::NONE), "start");
        // The window's own group (built from its communicator) works.
        let partner = win.comm().group().incl(&[1 - win.rank()])?;
        win.post(&partner, Assert::NONE)?;
        win.start(&partner, Assert::NONE)?;
        win.put(&[me as u8], 1 - win.rank(), 0)?;
        win.complete()?;
        win.wait()?;
        assert_eq!(win.local()?[0], ((me + 2) % 4) as u8);
        win.free()
    })
    .unwrap();
}

/// NOPRECEDE/NOSUCCEED that not every rank gives make fence fail on every rank.
fn mismatched_fence_assertions(dev: DeviceKind) {
    run(dev, 3, |world| {
        let me = world.rank();
        let win = world.win_allocate::<u32>(1)?;
        win.fence(Assert::NONE)?;
        let bad = if me == 1 { Assert::NOPRECEDE } else { Assert::NONE };
        expect_sync(win.fence(bad), "fence");
        let bad = if me == 2 { Assert::NOSUCCEED } else { Assert::NONE };
        expect_sync(win.fence(bad), "fence");
        // Agreeing assertions work again.
        win.fence(Assert::NOSUCCEED)?;
        win.free()
    })
    .unwrap();
}

fn free_inside_an_epoch(dev: DeviceKind) {
    run(dev, 2, |world| {
        let peer = 1 - world.rank();
        let win = world.win_allocate::<u64>(1)?;
        win.lock(LockKind::Shared, peer, Assert::NONE)?;
        expect_sync(win.free(), "free");
        let win = world.win_allocate::<u64>(1)?;
        win.lock_all(Assert::NONE)?;
        expect_sync(win.free(), "free");
        let win = world.win_allocate::<u64>(1)?;
        win.post(&world.group().incl(&[peer])?, Assert::NONE)?;
        win.start(&world.group().incl(&[peer])?, Assert::NONE)?;
        expect_sync(win.free(), "free");
        // After a closing fence(NONE) free works (MPI's usual fence … free).
        let win = world.win_allocate::<u64>(1)?;
        win.fence(Assert::NONE)?;
        win.put(&[3], peer, 0)?;
        win.fence(Assert::NONE)?;
        win.free()
    })
    .unwrap();
}

#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(16))]
struct Wide([u64; 2]);

#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct Empty;

/// Zero-sized elements are refused; an element aligned beyond 8 bytes is refused or correctly
/// aligned in the owner's slice (a misaligned `&[Wide]` would be UB).
fn element_types_a_window_cannot_hold(dev: DeviceKind) {
    run(dev, 2, |world| {
        expect_invalid(world.win_allocate::<()>(4).map(drop), "win_allocate");
        expect_invalid(world.win_allocate::<Empty>(1).map(drop), "win_allocate");
        let mut zst = [(); 3];
        expect_invalid(world.win_create(&mut zst, |_| Ok(())), "win_create");
        match world.win_allocate::<Wide>(3) {
            Err(e) => expect_invalid(Err::<(), _>(e), "win_allocate"),
            Ok(win) => {
                let peer = 1 - world.rank();
                win.fence(Assert::NONE)?;
                win.put(&[Wide([world.rank() as u64, 7])], peer, 1)?;
                win.fence(Assert::NOSUCCEED)?;
                let part = win.local()?;
                assert_eq!(part.as_ptr() as usize % 16, 0, "a misaligned &[Wide]");
                assert_eq!(part[1], Wide([peer as u64, 7]));
                drop(part);
                win.free()?;
            }
        }
        Ok(())
    })
    .unwrap();
}

fn second_local_guard_and_shared_misuse(dev: DeviceKind) {
    run(dev, 2, |world| {
        let win = world.win_allocate::<u64>(2)?;
        let guard = win.local()?;
        expect_sync_or_invalid(win.local().map(drop), "local");
        drop(guard);
        win.local()?[0] = 1;
        // `shared_query` needs a shared window.
        assert!(matches!(win.shared_query(0).map(drop), Err(Error::InvalidArgument(_) | Error::RmaSync(_))));
        world.barrier()?;
        win.free()
    })
    .unwrap();
}

/// Strided layouts whose counts differ, or that reach past either buffer.
fn strided_misuse(dev: DeviceKind) {
    use fastmp::layout::Vector;
    run(dev, 2, |world| {
        let peer = 1 - world.rank();
        let win = world.win_allocate::<i32>(10)?;
        win.lock_all(Assert::NONE)?;
        let origin = [1i32; 10];
        let mut into = [0i32; 10];
        let two = Vector { count: 2, blocklength: 1, stride: 3 };
        let three = Vector { count: 3, blocklength: 1, stride: 3 };
        expect_invalid(win.put_strided(&origin, &two, peer, 0, &three), "put_strided");
        expect_invalid(win.get_strided(&mut into, &three, peer, 0, &two), "get_strided");
        expect_invalid(win.accumulate_strided(&origin, &two, peer, 0, &three, Sum), "accumulate_strided");
        // Target extent 7 from displacement 4 passes the 10-element part.
        expect_invalid(win.put_strided(&origin, &three, peer, 4, &three), "put_strided");
        // Origin extent 7 passes a 5-element origin.
        expect_invalid(win.put_strided(&origin[..5], &three, peer, 0, &three), "put_strided");
        // Overlapping blocks cannot be received into.
        let overlapping = Vector { count: 2, blocklength: 2, stride: 1 };
        expect_invalid(
            win.get_strided(&mut into, &overlapping, peer, 0, &Vector { count: 4, blocklength: 1, stride: 1 }),
            "get_strided",
        );
        win.unlock_all()?;
        world.barrier()?;
        assert!(win.local()?.iter().all(|&x| x == 0));
        win.free()
    })
    .unwrap();
}

device_suite! {
    both: [
        operations_outside_an_epoch,
        ranges_outside_the_target_part,
        lock_misuse,
        pscw_misuse,
        pscw_group_outside_the_window,
        mismatched_fence_assertions,
        free_inside_an_epoch,
        element_types_a_window_cannot_hold,
        second_local_guard_and_shared_misuse,
        strided_misuse,
    ],
    tcp_ignored: [],
}
