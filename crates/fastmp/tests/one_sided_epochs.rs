//! One-sided communication under every kind of epoch (modelled on MPICH's rma tests: test1–5,
//! wintest, lockall, win_shared, reqops): put/get/accumulate under fence, post/start/complete/
//! wait (all ranks and subgroups, `wait` and `test`), passive-target `lock`/`lock_all` with every
//! flush, `win_create` over user memory (aligned or not), `win_allocate_shared` + `shared_query`,
//! the owner's `local()` guard holding origins off, and request-based operations. Both devices.

mod common;
mod one_sided_common;

use common::device_suite;
use fastmp::op::Sum;
use fastmp::window::{Assert, LockKind};
use fastmp::{Comm, DeviceKind, Error, Result, SplitType, waitall};
use one_sided_common::{expect_invalid, expect_sync, go, pause, run, wait_go};

/// Value rank `origin` writes at element `i` of rank `target`'s part.
fn val(origin: usize, target: usize, i: usize) -> u64 {
    (origin as u64) << 32 | (target as u64) << 16 | i as u64
}

fn fence_put_get_accumulate(dev: DeviceKind) {
    run(dev, 4, |world| {
        let (me, np) = (world.rank(), world.size());
        let win = world.win_allocate::<u64>(np + 1)?;
        assert_eq!((win.rank(), win.size(), win.len()), (me, np, np + 1));
        assert!(!win.is_empty());
        win.fence(Assert::NOPRECEDE)?;
        for t in 0..np {
            win.put(&[val(me, t, 0)], t, me)?;
            win.accumulate(&[me as u64 + 1], t, np, Sum)?;
        }
        win.fence(Assert::NONE)?;
        {
            let part = win.local()?;
            for o in 0..np {
                assert_eq!(part[o], val(o, me, 0), "rank {me}: element {o}");
            }
            assert_eq!(part[np], (1..=np as u64).sum::<u64>(), "rank {me}: accumulated sum");
        }
        // Gets in the next epoch see the previous epoch's puts; blocking gets are complete on return.
        let right = (me + 1) % np;
        let mut got = vec![0u64; np + 1];
        win.get(&mut got, right, 0)?;
        let want: Vec<u64> = (0..np).map(|o| val(o, right, 0)).chain([(1..=np as u64).sum()]).collect();
        assert_eq!(got, want, "rank {me}: get from {right}");
        win.fence(Assert::NOSUCCEED)?;
        win.free()
    })
    .unwrap();
}

fn fence_assertions_open_and_close_epochs(dev: DeviceKind) {
    run(dev, 3, |world| {
        let (me, np) = (world.rank(), world.size());
        let win = world.win_allocate::<i32>(4)?;
        // Between creation and the first fence there is no epoch.
        expect_sync(win.put(&[1], (me + 1) % np, 0), "put");
        win.fence(Assert::NOPRECEDE | Assert::NOSTORE)?;
        win.put(&[me as i32 + 7], (me + 1) % np, 1)?;
        win.fence(Assert::NONE)?;
        let mut got = [0i32; 1];
        win.get(&mut got, (me + 1) % np, 1)?;
        assert_eq!(got[0], me as i32 + 7);
        // Nobody puts in the next epoch: NOPUT is true everywhere.
        win.fence(Assert::NOPUT)?;
        // The left neighbour's element 1 holds what its own left neighbour put.
        win.get(&mut got, (me + np - 1) % np, 1)?;
        assert_eq!(got[0], ((me + np - 2) % np) as i32 + 7);
        win.fence(Assert::NOSUCCEED | Assert::NOSTORE)?;
        expect_sync(win.get(&mut got, 0, 0), "get");
        expect_sync(win.accumulate(&[1], 0, 0, Sum), "accumulate");
        assert_eq!(win.local()?[1], (((me + np - 1) % np) + 7) as i32);
        // A new epoch opens again.
        win.fence(Assert::NOPRECEDE)?;
        win.accumulate(&[1], 0, 3, Sum)?;
        win.fence(Assert::NOSUCCEED)?;
        if me == 0 {
            assert_eq!(win.local()?[3], np as i32);
        }
        win.free()
    })
    .unwrap();
}

fn pscw_every_rank(dev: DeviceKind) {
    run(dev, 4, |world| {
        let (me, np) = (world.rank(), world.size());
        let win = world.win_allocate::<u64>(np)?;
        let others: Vec<usize> = (0..np).filter(|&r| r != me).collect();
        let group = world.group().incl(&others)?;
        for round in 0..3u64 {
            win.post(&group, Assert::NONE)?;
            win.start(&group, Assert::NONE)?;
            for &t in &others {
                win.put(&[val(me, t, round as usize)], t, me)?;
            }
            win.complete()?;
            win.wait()?;
            let part = win.local()?;
            for &o in &others {
                assert_eq!(part[o], val(o, me, round as usize), "rank {me} round {round}: from {o}");
            }
        }
        win.free()
    })
    .unwrap();
}

/// MPICH test2's shape: even ranks are origins of their two odd neighbours, odd ranks are
/// targets of their two even neighbours; every other rank calls nothing for the epoch.
fn pscw_subgroups(dev: DeviceKind) {
    run(dev, 6, |world| {
        let (me, np) = (world.rank(), world.size());
        let win = world.win_allocate::<i64>(np + 1)?;
        for use_test in [false, true] {
            if me % 2 == 0 {
                let targets = [(me + 1) % np, (me + 3) % np];
                win.start(&world.group().incl(&targets)?, Assert::NONE)?;
                // The previous round is visible (before this round's put: a get after a put to
                // the same place in one epoch is undefined in MPI).
                let mut got = [0i64; 1];
                win.get(&mut got, targets[0], me)?;
                assert_eq!(got[0], if use_test { me as i64 * 10 } else { 0 });
                for t in targets {
                    win.put(&[me as i64 * 10 + use_test as i64], t, me)?;
                    win.accumulate(&[me as i64 + 1], t, np, Sum)?;
                }
                win.complete()?;
            } else {
                let origins = [(me + np - 1) % np, (me + np - 3) % np];
                win.post(&world.group().incl(&origins)?, Assert::NONE)?;
                if use_test {
                    while !win.test()? {
                        std::thread::yield_now();
                    }
                    // Once `test` said yes, the epoch is over: a second `test` or `wait` is misuse.
                    expect_sync(win.wait(), "wait");
                } else {
                    win.wait()?;
                }
                let mut part = win.local()?;
                for o in origins {
                    assert_eq!(part[o], o as i64 * 10 + use_test as i64, "rank {me}: from {o}");
                }
                assert_eq!(part[np], origins.iter().map(|&o| o as i64 + 1).sum::<i64>());
                part[np] = 0;
            }
        }
        win.free()
    })
    .unwrap();
}

/// Each rank exposes to its left neighbour and accesses its right one: every rank is origin and
/// target at once, in a cycle.
fn pscw_ring(dev: DeviceKind) {
    run(dev, 5, |world| {
        let (me, np) = (world.rank(), world.size());
        let (left, right) = ((me + np - 1) % np, (me + 1) % np);
        let win = world.win_allocate::<u32>(8)?;
        for round in 0..4u32 {
            win.post(&world.group().incl(&[left])?, Assert::NONE)?;
            win.start(&world.group().incl(&[right])?, Assert::NONE)?;
            win.put(&[round * 100 + me as u32; 8], right, 0)?;
            win.complete()?;
            win.wait()?;
            assert_eq!(&*win.local()?, &[round * 100 + left as u32; 8]);
        }
        win.free()
    })
    .unwrap();
}

fn lock_shared_and_exclusive(dev: DeviceKind) {
    run(dev, 4, |world| {
        let (me, np) = (world.rank(), world.size());
        let win = world.win_allocate::<u64>(np)?;
        for t in 0..np {
            win.lock(LockKind::Exclusive, t, Assert::NONE)?;
            win.put(&[val(me, t, 1)], t, me)?;
            win.unlock(t)?;
        }
        world.barrier()?;
        for t in (0..np).rev() {
            win.lock(LockKind::Shared, t, Assert::NONE)?;
            let mut got = vec![0u64; np];
            win.get(&mut got, t, 0)?;
            win.unlock(t)?;
            assert_eq!(got, (0..np).map(|o| val(o, t, 1)).collect::<Vec<_>>(), "rank {me}: part of {t}");
        }
        // Locking oneself works like any target (after everyone has read the parts).
        world.barrier()?;
        win.lock(LockKind::Exclusive, me, Assert::NOCHECK)?;
        win.put(&[5], me, 0)?;
        let mut got = [0u64];
        win.get(&mut got, me, 0)?;
        win.unlock(me)?;
        assert_eq!(got[0], 5);
        assert_eq!(win.local()?[0], 5);
        win.free()
    })
    .unwrap();
}

fn lock_all_with_every_flush(dev: DeviceKind) {
    run(dev, 3, |world| {
        let (me, np) = (world.rank(), world.size());
        // Element `2*o` belongs to origin `o` (puts), element `2*o+1` to its accumulates.
        let win = world.win_allocate::<i64>(2 * np)?;
        win.lock_all(Assert::NONE)?;
        for t in 0..np {
            win.put(&[me as i64 + 100], t, 2 * me)?;
            win.flush(t)?;
            let mut got = [0i64];
            win.get(&mut got, t, 2 * me)?;
            assert_eq!(got[0], me as i64 + 100, "rank {me}: get after flush from {t}");
            win.accumulate(&[1], t, 2 * me + 1, Sum)?;
            win.flush_local(t)?;
            win.accumulate(&[2], t, 2 * me + 1, Sum)?;
        }
        win.flush_local_all()?;
        win.flush_all()?;
        for t in 0..np {
            let mut got = [0i64; 2];
            win.get(&mut got, t, 2 * me)?;
            assert_eq!(got, [me as i64 + 100, 3], "rank {me}: from {t} after flush_all");
        }
        win.sync()?;
        win.unlock_all()?;
        world.barrier()?;
        let want: Vec<i64> = (0..np).flat_map(|o| [o as i64 + 100, 3]).collect();
        assert_eq!(&*win.local()?, &want[..]);
        win.free()
    })
    .unwrap();
}

fn win_create_over_user_memory(dev: DeviceKind) {
    run(dev, 3, |world| {
        let (me, np) = (world.rank(), world.size());
        let (left, right) = ((me + np - 1) % np, (me + 1) % np);
        let mut mem: Vec<u32> = (0..6).map(|i| me as u32 * 10 + i).collect();
        let from_left = world.win_create(&mut mem, |win| {
            assert_eq!((win.len(), win.len_of(right)?), (6, 6));
            win.fence(Assert::NONE)?;
            // What the user wrote before win_create is what the others read.
            let mut got = [0u32; 6];
            win.get(&mut got, left, 0)?;
            win.fence(Assert::NONE)?;
            win.put(&[1000 + me as u32; 3], right, 2)?;
            win.fence(Assert::NOSUCCEED)?;
            Ok(got)
        })?;
        assert_eq!(from_left, std::array::from_fn(|i| left as u32 * 10 + i as u32));
        // After win_create returns, the puts are in the user's slice.
        assert_eq!(
            mem,
            [
                me as u32 * 10,
                me as u32 * 10 + 1,
                1000 + left as u32,
                1000 + left as u32,
                1000 + left as u32,
                me as u32 * 10 + 5
            ]
        );
        Ok(())
    })
    .unwrap();
}

/// `win_create` over byte slices that start and end off the 8-byte grid: puts, gets and
/// accumulates across the unaligned edges land exactly, and nothing outside the slice moves.
fn win_create_unaligned_bytes(dev: DeviceKind) {
    run(dev, 2, |world| {
        let me = world.rank();
        let peer = 1 - me;
        let mut backing = [0xEEu8; 48];
        let (lo, hi) = (3 + me, 3 + me + 29);
        backing[lo..hi].iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        world.win_create(&mut backing[lo..hi], |win| {
            win.lock_all(Assert::NONE)?;
            let data: Vec<u8> = (0..29).map(|i| 100 + i as u8).collect();
            // Everything but the first and last byte, then those two by accumulate.
            win.put(&data[1..28], peer, 1)?;
            win.accumulate(&[5u8], peer, 0, Sum)?;
            win.accumulate(&[6u8], peer, 28, Sum)?;
            win.flush(peer)?;
            let mut got = vec![0u8; 29];
            win.get(&mut got, peer, 0)?;
            let mut want = data.clone();
            want[0] = 5;
            want[28] = 28 + 6;
            assert_eq!(got, want, "rank {me}: the peer's unaligned part");
            win.unlock_all()?;
            world.barrier()
        })?;
        assert!(
            backing[..lo].iter().chain(&backing[hi..]).all(|&b| b == 0xEE),
            "rank {me}: bytes outside the window changed"
        );
        assert_eq!(backing[lo], 5);
        assert_eq!(backing[hi - 1], 34);
        assert!(backing[lo + 1..hi - 1].iter().enumerate().all(|(i, &b)| b == 101 + i as u8));
        Ok(())
    })
    .unwrap();
}

fn shared_window_checks(world: &Comm) -> Result<()> {
    let (me, np) = (world.rank(), world.size());
    let win = world.win_allocate_shared::<u64>(4 + me)?;
    win.lock_all(Assert::NONE)?;
    let right = (me + 1) % np;
    for r in 0..np {
        assert_eq!(win.shared_query(r)?.len(), 4 + r);
    }
    let part = win.shared_query(right)?;
    part.store(0, me as u64 + 1)?;
    part.write(1, &[7, 8, 9])?;
    expect_invalid(part.store(4 + right, 0), "store");
    expect_invalid(part.write(3 + right, &[1, 2]), "write");
    win.sync()?;
    world.barrier()?;
    win.sync()?;
    let mine = win.shared_query(me)?;
    let left = (me + np - 1) % np;
    assert_eq!(mine.load(0)?, left as u64 + 1);
    let mut got = [0u64; 3];
    mine.read(1, &mut got)?;
    assert_eq!(got, [7, 8, 9]);
    expect_invalid(mine.load(4 + me), "load");
    expect_invalid(mine.read(4 + me, &mut got), "read");
    win.unlock_all()?;
    // The same bytes through put/get and the owner's guard.
    assert_eq!(win.local()?[..4], [left as u64 + 1, 7, 8, 9]);
    world.barrier()?;
    win.free()
}

fn win_allocate_shared_and_query(dev: DeviceKind) {
    run(dev, 3, |world| match dev {
        DeviceKind::Tcp => match world.win_allocate_shared::<u64>(4) {
            // tcp ranks are separate processes in general: refusing is the documented outcome.
            Err(Error::InvalidArgument(msg)) => {
                assert!(msg.contains("win_allocate_shared"), "{msg}");
                Ok(())
            }
            Err(e) => panic!("win_allocate_shared on tcp: unexpected error {e:?}"),
            Ok(win) => {
                win.free()?;
                shared_window_checks(&world)
            }
        },
        // The world spans two processes: refused; each process's ranks share its memory.
        DeviceKind::Hybrid => {
            expect_invalid(world.win_allocate_shared::<u64>(4).map(drop), "win_allocate_shared");
            shared_window_checks(&world.split_type(SplitType::SharedProcess, 0)?)
        }
        _ => shared_window_checks(&world),
    })
    .unwrap();
}

/// A window that is not shared refuses `shared_query`.
fn shared_query_needs_a_shared_window(dev: DeviceKind) {
    run(dev, 2, |world| {
        let win = world.win_allocate::<u8>(8)?;
        assert!(win.shared_query(0).is_err());
        win.free()
    })
    .unwrap();
}

/// The owner's guard holds an origin's get and put off: the origin issues both while the guard
/// is alive (it learns so by a message); the get must see what the owner wrote before dropping
/// the guard, and the put must land after the owner's last write.
fn local_guard_holds_origins_off(dev: DeviceKind) {
    run(dev, 2, |world| {
        let me = world.rank();
        let win = world.win_allocate::<u64>(4)?;
        if me == 0 {
            let mut guard = win.local()?;
            guard[0] = 1;
            go(&world, 1)?;
            pause();
            guard[0] = 42;
            guard[1] = 5;
            guard[2] = 6;
            drop(guard);
        } else {
            win.lock(LockKind::Shared, 0, Assert::NONE)?;
            wait_go(&world, 0)?;
            win.put(&[7], 0, 1)?;
            let mut got = [0u64; 2];
            win.get(&mut got[1..], 0, 2)?;
            win.get(&mut got[..1], 0, 0)?;
            win.unlock(0)?;
            assert_eq!(got, [42, 6], "the get ran while the owner's guard was alive");
        }
        world.barrier()?;
        if me == 0 {
            assert_eq!(win.local()?[..3], [42, 7, 6], "the put ran while the owner's guard was alive");
        }
        win.free()
    })
    .unwrap();
}

fn request_based_operations(dev: DeviceKind) {
    run(dev, 3, |world| {
        let (me, np) = (world.rank(), world.size());
        // [0, np): preset by the owner, read by rget; [np, 2np): rput by origin o at np + o;
        // 2np: raccumulate target; 2np+1: rget_accumulate target.
        let len = 2 * np + 2;
        let win = world.win_allocate::<u64>(len)?;
        win.local()?.iter_mut().enumerate().for_each(|(i, x)| *x = if i < np { val(me, me, i) } else { 0 });
        world.barrier()?;
        win.lock_all(Assert::NONE)?;
        let data: Vec<u64> = (0..np).map(|t| val(me, t, 9)).collect();
        let one = [1u64];
        let mut got = vec![vec![0u64; np]; np];
        let mut fetched = vec![[0u64]; np];
        world.scope(|s| {
            let mut reqs = Vec::new();
            for ((t, into), old) in got.iter_mut().enumerate().zip(fetched.iter_mut()) {
                reqs.push(s.rput(&win, &data[t..t + 1], t, np + me)?);
                reqs.push(s.rget(&win, into, t, 0)?);
                reqs.push(s.raccumulate(&win, &one, t, 2 * np, Sum)?);
                reqs.push(s.rget_accumulate(&win, &one, old, t, 2 * np + 1, Sum)?);
            }
            waitall(&mut reqs).map(drop)
        })?;
        for (t, g) in got.iter().enumerate() {
            assert_eq!(g, &(0..np).map(|i| val(t, t, i)).collect::<Vec<_>>(), "rank {me}: rget from {t}");
        }
        // Requests left to the scope's end complete there too.
        let mut late = vec![0u64; np];
        world.scope(|s| {
            let _ = s.rget(&win, &mut late, (me + 1) % np, 0)?;
            let _ = s.raccumulate(&win, &one, (me + 1) % np, 2 * np, Sum)?;
            Ok::<_, Error>(())
        })?;
        assert_eq!(late, (0..np).map(|i| val((me + 1) % np, (me + 1) % np, i)).collect::<Vec<_>>());
        win.unlock_all()?;
        world.barrier()?;
        let part = win.local()?;
        for o in 0..np {
            assert_eq!(part[np + o], val(o, me, 9), "rank {me}: rput from {o}");
        }
        assert_eq!(part[2 * np], np as u64 + 1, "rank {me}: raccumulates");
        assert_eq!(part[2 * np + 1], np as u64, "rank {me}: rget_accumulates");
        drop(part);
        // The values rget_accumulate fetched at each target are distinct, 0..np.
        let mut all = vec![0u64; np * np];
        world.allgather(&fetched.concat(), &mut all)?;
        for t in 0..np {
            let mut seen: Vec<u64> = (0..np).map(|o| all[o * np + t]).collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..np as u64).collect::<Vec<_>>(), "fetched values at target {t}");
        }
        win.free()
    })
    .unwrap();
}

/// Parts of different lengths, including empty ones, and two windows alive at once that must
/// not see each other's traffic.
fn uneven_parts_and_two_windows(dev: DeviceKind) {
    run(dev, 4, |world| {
        let (me, np) = (world.rank(), world.size());
        let a = world.win_allocate::<u16>(me)?;
        let b = world.win_allocate::<f64>(2)?;
        assert_eq!(a.is_empty(), me == 0);
        for r in 0..np {
            assert_eq!(a.len_of(r)?, r);
        }
        a.fence(Assert::NONE)?;
        b.fence(Assert::NONE)?;
        for t in 1..np {
            // The last element of each non-empty part.
            a.accumulate(&[me as u16 + 1], t, t - 1, Sum)?;
        }
        b.put(&[me as f64 + 0.5], (me + 1) % np, 0)?;
        a.fence(Assert::NOSUCCEED)?;
        b.fence(Assert::NOSUCCEED)?;
        if me > 0 {
            assert_eq!(a.local()?[me - 1], (1..=np as u16).sum::<u16>());
            assert!(a.local()?[..me - 1].iter().all(|&x| x == 0));
        }
        assert_eq!(&*b.local()?, &[((me + np - 1) % np) as f64 + 0.5, 0.0]);
        a.free()?;
        b.free()
    })
    .unwrap();
}

device_suite! {
    both: [
        fence_put_get_accumulate,
        fence_assertions_open_and_close_epochs,
        pscw_every_rank,
        pscw_subgroups,
        pscw_ring,
        lock_shared_and_exclusive,
        lock_all_with_every_flush,
        win_create_over_user_memory,
        win_create_unaligned_bytes,
        win_allocate_shared_and_query,
        shared_query_needs_a_shared_window,
        local_guard_holds_origins_off,
        request_based_operations,
        uneven_parts_and_two_windows,
    ],
    tcp_ignored: [],
}
