//! The window layer end to end, quickly, on every device with one-sided support: each
//! synchronisation mode moves data, the atomics compose, strided and request forms land where
//! they should, and the origin-side checks turn misuse into errors on the rank that made it.
//! (The broad suites are the `one_sided_*` files.)

use fastmp::layout::Vector;
use fastmp::op::{NoOp, Replace, Sum};
use fastmp::window::{Assert, LockKind};
use fastmp::{Comm, Config, DeviceKind, Error, PROC_NULL, Result};

fn on_each_device(np: usize, f: impl Fn(&Comm) -> Result<()> + Send + Sync) {
    for device in [DeviceKind::Tcp, DeviceKind::Shm, DeviceKind::Hybrid] {
        Config::new().device(device).np(np).run(|world| f(&world)).unwrap_or_else(|e| panic!("{device:?}: {e}"));
    }
}

fn expect_sync<T: std::fmt::Debug>(result: Result<T>, words: &str) {
    match result {
        Err(Error::RmaSync(m)) => assert!(m.contains(words), "{m:?} lacks {words:?}"),
        other => panic!("expected RmaSync({words}), got {other:?}"),
    }
}

#[test]
fn fence_moves_puts_gets_and_accumulates() {
    on_each_device(3, |world| {
        let (rank, np) = (world.rank(), world.size());
        let win = world.win_allocate::<u64>(np + 1)?;
        win.fence(Assert::NOPRECEDE)?;
        for t in 0..np {
            win.put(&[rank as u64 + 1], t, rank)?;
            win.accumulate(&[10], t, np, Sum)?;
        }
        win.fence(Assert::NONE)?;
        let mut all = vec![0u64; np + 1];
        win.get(&mut all, (rank + 1) % np, 0)?;
        win.fence(Assert::NOSUCCEED)?;
        let mut expect: Vec<u64> = (1..=np as u64).collect();
        expect.push(10 * np as u64);
        assert_eq!(all, expect);
        assert_eq!(*win.local()?, expect[..]);
        win.free()
    });
}

#[test]
fn pscw_with_a_subgroup_and_test() {
    on_each_device(4, |world| {
        let win = world.win_allocate::<i32>(2)?;
        let group = win.comm().group();
        // Ranks 1..4 put into rank 0; rank 0 exposes to them.
        if world.rank() == 0 {
            win.post(&group.incl(&[1, 2, 3])?, Assert::NONE)?;
            while !win.test()? {}
            assert_eq!(win.local()?[1], 6);
        } else {
            win.start(&group.incl(&[0])?, Assert::NONE)?;
            win.accumulate(&[world.rank() as i32], 0, 1, Sum)?;
            expect_sync(win.put(&[1], 2, 0), "put to rank 2 outside an access epoch");
            win.complete()?;
        }
        win.free()
    });
}

#[test]
fn exclusive_locks_and_atomics_count_every_increment() {
    const N: u64 = 20;
    on_each_device(3, |world| {
        let win = world.win_allocate::<u64>(2)?;
        for _ in 0..N {
            win.lock(LockKind::Exclusive, 0, Assert::NONE)?;
            let mut v = [0u64];
            win.get(&mut v, 0, 0)?;
            win.flush(0)?;
            win.put(&[v[0] + 1], 0, 0)?;
            win.unlock(0)?;
        }
        win.lock_all(Assert::NONE)?;
        let mut tickets = Vec::new();
        for _ in 0..N {
            tickets.push(win.fetch_and_op(1, 0, 1, Sum)?);
        }
        win.flush_all()?;
        assert!(tickets.windows(2).all(|w| w[0] < w[1]), "tickets increase: {tickets:?}");
        win.unlock_all()?;
        world.barrier()?;
        if world.rank() == 0 {
            let local = win.local()?;
            assert_eq!(local[..], [N * 3, N * 3]);
        }
        world.barrier()?;
        win.lock(LockKind::Shared, 0, Assert::NONE)?;
        let now = win.fetch_and_op(0, 0, 0, NoOp)?;
        assert_eq!(now, N * 3);
        let old = win.compare_and_swap(N * 3, 7, 0, 1)?;
        win.unlock(0)?;
        assert!(old == N * 3 || old == 7, "{old}");
        win.free()
    });
}

#[test]
fn strided_requests_and_shared_parts() {
    on_each_device(2, |world| {
        let peer = 1 - world.rank();
        let column = Vector { count: 3, blocklength: 1, stride: 4 };
        let mut matrix = [0u32; 12];
        let rows: Vec<u32> = (0..12).map(|i| i + 100 * world.rank() as u32).collect();
        world.win_create(&mut matrix, |win| {
            win.fence(Assert::NONE)?;
            // Column 1 of the peer's matrix gets my first 3 values.
            win.put_strided(&rows, &Vector { count: 1, blocklength: 3, stride: 3 }, peer, 1, &column)?;
            win.fence(Assert::NONE)?;
            let (mut got, mut old) = ([0u32; 2], [0u32; 2]);
            world.scope(|s| {
                let a = s.rget(win, &mut got, peer, 4)?;
                let b = s.rget_accumulate(win, &[5, 5], &mut old, PROC_NULL, 0, Replace)?;
                fastmp::waitall(&mut [a, b]).map(drop)
            })?;
            assert_eq!((got, old), ([0, 100 * world.rank() as u32 + 1], [0, 0]));
            win.fence(Assert::NOSUCCEED)
        })?;
        assert_eq!(
            [matrix[1], matrix[5], matrix[9]],
            [100 * peer as u32, 100 * peer as u32 + 1, 100 * peer as u32 + 2]
        );
        if world.device_name() == "shm" {
            let win = world.win_allocate_shared::<u16>(1 + world.rank())?;
            win.lock_all(Assert::NONE)?;
            let part = win.shared_query(1)?;
            assert_eq!(part.len(), 2);
            part.store(world.rank(), 3 + world.rank() as u16)?;
            win.unlock_all()?;
            world.barrier()?;
            win.lock_all(Assert::NONE)?;
            assert_eq!((part.load(0)?, part.load(1)?), (3, 4));
            win.unlock_all()?;
            win.free()?;
        } else {
            let err = world
                .win_allocate_shared::<u16>(1)
                .err()
                .expect("tcp ranks, and hybrid ranks of two processes, share no memory");
            assert!(err.to_string().contains("win_allocate_shared"), "{err}");
        }
        Ok(())
    });
}

#[test]
fn misuse_is_an_error_on_the_rank_that_made_it() {
    on_each_device(2, |world| {
        let win = world.win_allocate::<u64>(4)?;
        expect_sync(win.put(&[1], 1, 0), "put to rank 1 outside an access epoch");
        expect_sync(win.unlock(1), "unlock(1) without a matching lock(1)");
        expect_sync(win.complete(), "complete without a matching start");
        expect_sync(win.wait(), "wait without a matching post");
        expect_sync(win.flush(0), "not locked");
        win.lock(LockKind::Shared, 1, Assert::NONE)?;
        expect_sync(win.lock(LockKind::Shared, 1, Assert::NONE), "already locked");
        expect_sync(win.lock_all(Assert::NONE), "holds a lock");
        let range = win.put(&[1, 2], 1, 3).unwrap_err();
        assert!(range.to_string().contains("elements 3..5 lie outside rank 1's window part of 4"), "{range}");
        assert!(matches!(win.get(&mut [0], 2, 0), Err(Error::RankOutOfRange { rank: 2, size: 2 })));
        win.put(&[1, 2], PROC_NULL, 99)?;
        {
            let _guard = win.local()?;
            expect_sync(win.put(&[1], 1, 0), "local() guard is alive");
            expect_sync(win.local().map(drop), "local() guard is alive");
        }
        win.unlock(1)?;
        // A fence refused on one rank fails on every rank, with no hang.
        if world.rank() == 0 {
            win.lock(LockKind::Shared, 1, Assert::NONE)?;
            expect_sync(win.fence(Assert::NONE), "passive-target epoch is open");
            win.unlock(1)?;
        } else {
            expect_sync(win.fence(Assert::NONE), "another rank");
        }
        let assert = if world.rank() == 0 { Assert::NOSUCCEED } else { Assert::NONE };
        expect_sync(win.fence(assert), "disagree on NOSUCCEED");
        win.lock(LockKind::Exclusive, 1 - world.rank(), Assert::NONE)?;
        expect_sync(win.free(), "free while this rank has a lock");
        Ok(())
    });
}

#[test]
fn creation_rejects_unusable_types_on_every_rank() {
    on_each_device(2, |world| {
        let err = world.win_allocate::<()>(3).err().expect("zero-sized");
        assert!(err.to_string().contains("zero-sized"), "{err}");
        let empty = world.win_allocate::<f64>(if world.rank() == 0 { 0 } else { 2 })?;
        assert_eq!((empty.len_of(0)?, empty.len_of(1)?), (0, 2));
        drop(empty);
        Ok(())
    });
}
