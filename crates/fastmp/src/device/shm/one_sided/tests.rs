//! The shm windows driven through the device traits, one thread per rank.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;
use crate::device::Failure;
use crate::device::shm::ShmEndpoint;

/// One rank of a test job.
struct Rank {
    world: Arc<ShmWorld>,
    ep: ShmEndpoint,
    rank: usize,
    np: usize,
    arrived: Arc<AtomicUsize>,
    barriers: Cell<usize>,
}

impl Rank {
    /// Waits for every rank (a failed peer makes it panic rather than hang).
    fn barrier(&self) {
        let round = self.barriers.get() + 1;
        self.barriers.set(round);
        self.arrived.fetch_add(1, Ordering::AcqRel);
        while self.arrived.load(Ordering::Acquire) < round * self.np {
            assert!(!self.world.is_aborted(), "rank {}: a peer failed during a test barrier", self.rank);
            std::thread::yield_now();
        }
    }

    /// Exposes `mem` as this rank's part of window `id` over all ranks and connects.
    fn window(&self, id: ContextId, mem: &mut [u64]) -> Box<dyn RmaWindow> {
        self.window_at(id, mem.as_mut_ptr(), mem.len())
    }

    /// As `window`, over `len` words at `base` (a test that touches the part itself under local
    /// access uses the same pointer, as the window layer's guard does).
    fn window_at(&self, id: ContextId, base: *mut u64, len: usize) -> Box<dyn RmaWindow> {
        let members: Vec<usize> = (0..self.np).collect();
        // SAFETY: every test closes the window before the memory goes, and touches it itself only
        // under local access.
        let win = unsafe { self.ep.expose(id, &members, base.cast(), len * 8) }.unwrap();
        self.barrier();
        win.connect().unwrap();
        win
    }
}

/// Runs `f` on `np` rank threads of one shm world; a panicking rank aborts the job (so peers'
/// waits fail instead of hanging) and its panic is re-raised here.
fn job(np: usize, f: impl Fn(&Rank) + Sync) -> Arc<ShmWorld> {
    let world = ShmWorld::new(np, 1024);
    let arrived = Arc::new(AtomicUsize::new(0));
    let panics: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..np)
            .map(|rank| {
                let (world, arrived, f) = (Arc::clone(&world), Arc::clone(&arrived), &f);
                s.spawn(move || {
                    let ep = world.endpoint(rank).unwrap();
                    let r = Rank { world: Arc::clone(&world), ep, rank, np, arrived, barriers: Cell::new(0) };
                    let outcome = catch_unwind(AssertUnwindSafe(|| f(&r)));
                    match &outcome {
                        Ok(()) => world.mark_exited(rank),
                        Err(_) => world.mark_failed(rank, Failure { rank, cause: "test panicked".into(), code: None }),
                    }
                    outcome
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().unwrap().err()).collect()
    });
    if let Some(p) = panics.into_iter().next() {
        resume_unwind(p);
    }
    world
}

fn put_u64(win: &dyn RmaWindow, target: usize, index: usize, values: &[u64]) -> Result<()> {
    // SAFETY: `values` outlives the call, which completes the put.
    let started = unsafe { win.put(target, index * 8, values.as_ptr().cast(), size_of_val(values)) }?;
    assert!(matches!(started, Started::Complete(Ok(s)) if s.bytes == values.len() * 8));
    Ok(())
}

fn get_u64(win: &dyn RmaWindow, target: usize, index: usize, n: usize) -> Result<Vec<u64>> {
    let mut out = vec![0u64; n];
    // SAFETY: `out` outlives the call, which completes the get.
    let started = unsafe { win.get(target, index * 8, out.as_mut_ptr().cast(), n * 8) }?;
    assert!(matches!(started, Started::Complete(Ok(s)) if s.bytes == n * 8));
    Ok(out)
}

#[test]
fn put_get_accumulate_and_atomics_across_threads() {
    let np = 4;
    job(np, |r| {
        let mut mem = vec![0u64; 2 * np + 2];
        let win = r.window(7, &mut mem);
        assert_eq!(win.part_lengths(), vec![(2 * np + 2) * 8; np]);
        let me = r.rank;
        for t in 0..np {
            put_u64(&*win, t, me, &[me as u64 + 100]).unwrap();
            let ones = vec![1u64; np];
            // SAFETY: `ones` outlives the call, which completes.
            unsafe { win.accumulate(t, np * 8, ones.as_ptr().cast(), np * 8, Element::U64, AccumulateOp::Sum) }
                .unwrap();
            win.fetch_and_op(t, (2 * np) * 8, Element::U64, AccumulateOp::Sum, me as u64 + 1).unwrap();
        }
        win.flush(None).unwrap();
        r.barrier();
        let mine = get_u64(&*win, me, 0, 2 * np + 1).unwrap();
        assert_eq!(&mine[..np], &(0..np as u64).map(|v| v + 100).collect::<Vec<_>>()[..]);
        assert_eq!(&mine[np..2 * np], &vec![np as u64; np][..]);
        assert_eq!(mine[2 * np], (1..=np as u64).sum::<u64>());
        r.barrier();

        // A compare-and-swap race on rank 0's last element: exactly one rank wins.
        let won = win.compare_and_swap(0, (2 * np + 1) * 8, Element::U64, 0, me as u64 + 1).unwrap() == 0;
        // Get-accumulate reads the previous values while adding.
        let add = vec![2u64; np];
        let mut previous = vec![0u64; np];
        // SAFETY: both buffers outlive the call, which completes.
        unsafe {
            win.get_accumulate(
                (me + 1) % np,
                0,
                add.as_ptr().cast(),
                previous.as_mut_ptr().cast(),
                np * 8,
                Element::U64,
                AccumulateOp::Sum,
            )
        }
        .unwrap();
        assert_eq!(previous, (0..np as u64).map(|v| v + 100).collect::<Vec<_>>());
        win.flush(Some(0)).unwrap();
        r.barrier();
        let winner = get_u64(&*win, 0, 2 * np + 1, 1).unwrap()[0];
        assert_eq!(won, winner == me as u64 + 1);
        assert_eq!(get_u64(&*win, me, 0, np).unwrap(), (0..np as u64).map(|v| v + 102).collect::<Vec<_>>());

        // Bad arguments are errors, and nothing outside the part is written.
        assert!(put_u64(&*win, 1, 2 * np + 2, &[1]).is_err());
        assert!(put_u64(&*win, 1, 2 * np + 1, &[1, 2]).is_err());
        let err = put_u64(&*win, np, 0, &[1]).unwrap_err().to_string();
        assert!(err.contains("put") && err.contains(&format!("target rank {np}")), "{err}");
        assert!(win.fetch_and_op(1, 4, Element::U64, AccumulateOp::Sum, 1).is_err());
        assert!(win.flush(Some(np)).is_err());
        r.barrier();
        win.close().unwrap();
    });
}

#[test]
fn exclusive_locks_serialise_read_modify_write() {
    // Miri runs every interleaving step slowly: a small job there.
    let jobs: &[(usize, usize)] = if cfg!(miri) { &[(3, 4)] } else { &[(4, 200), (16, 40)] };
    for &(np, rounds) in jobs {
        let world = job(np, |r| {
            // Element 0: the counter (read and written non-atomically under the lock);
            // element 1: how many ranks are inside an exclusive lock right now.
            let mut mem = vec![0u64; 2];
            let win = r.window(3, &mut mem);
            for _ in 0..rounds {
                win.lock(0, LockKind::Exclusive).unwrap();
                assert_eq!(win.fetch_and_op(0, 8, Element::U64, AccumulateOp::Sum, 1).unwrap(), 0, "exclusion");
                let c = get_u64(&*win, 0, 0, 1).unwrap()[0];
                put_u64(&*win, 0, 0, &[c + 1]).unwrap();
                win.fetch_and_op(0, 8, Element::U64, AccumulateOp::Sum, u64::MAX).unwrap();
                win.unlock(0).unwrap();
            }
            // Shared locks coexist: every rank holds one at once.
            r.barrier();
            win.lock(0, LockKind::Shared).unwrap();
            r.barrier();
            win.unlock(0).unwrap();
            r.barrier();
            if r.rank == 0 {
                assert_eq!(get_u64(&*win, 0, 0, 1).unwrap()[0], (np * rounds) as u64);
            }
            r.barrier();
            win.close().unwrap();
        });
        assert_eq!(world.live_windows(), 0, "every part left the registry");
    }
}

#[test]
fn lock_misuse_is_an_error() {
    job(2, |r| {
        let mut mem = vec![0u64; 1];
        let win = r.window(1, &mut mem);
        let other = 1 - r.rank;
        assert!(matches!(win.unlock(other), Err(Error::RmaSync(m)) if m.contains("holds no lock")));
        win.lock(other, LockKind::Shared).unwrap();
        assert!(matches!(win.lock(other, LockKind::Exclusive), Err(Error::RmaSync(m)) if m.contains("already holds")));
        win.unlock(other).unwrap();
        assert!(win.unlock(other).is_err());
        assert!(win.lock(2, LockKind::Shared).is_err());
        r.barrier();
        win.close().unwrap();
    });
}

#[test]
fn local_access_holds_puts_off() {
    let opened = AtomicBool::new(false);
    let put_done = AtomicBool::new(false);
    job(2, |r| {
        let mut mem = vec![0u64; 1];
        let base = mem.as_mut_ptr();
        let win = r.window_at(9, base, mem.len());
        if r.rank == 0 {
            win.begin_local_access().unwrap();
            // Our own operations on our part would wait for ourselves.
            assert!(matches!(put_u64(&*win, 0, 0, &[1]), Err(Error::RmaSync(m)) if m.contains("local access")));
            opened.store(true, Ordering::Release);
            for _ in 0..2000 {
                std::thread::yield_now();
                // SAFETY: under local access no origin is inside the part.
                assert_eq!(unsafe { base.read() }, 0, "a put landed during local access");
                assert!(!put_done.load(Ordering::Acquire), "a put completed during local access");
            }
            // SAFETY: as above.
            unsafe { base.write(5) };
            win.end_local_access();
            win.end_local_access(); // unpaired: ignored
        } else {
            while !opened.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            put_u64(&*win, 0, 0, &[7]).unwrap();
            put_done.store(true, Ordering::Release);
        }
        r.barrier();
        // The put waited for the local write it follows.
        assert_eq!(get_u64(&*win, 0, 0, 1).unwrap(), [7]);
        r.barrier();
        win.close().unwrap();
    });
}

#[test]
fn closed_parts_refuse_operations_and_windows_can_be_recreated() {
    let world = job(2, |r| {
        for round in 0..3 {
            let mut mem = vec![0u64; 2];
            let win = r.window(42, &mut mem);
            if r.rank == 1 {
                win.close().unwrap();
                assert!(put_u64(&*win, 1, 0, &[1]).is_err(), "own closed part");
            }
            r.barrier();
            if r.rank == 0 {
                let err = put_u64(&*win, 1, 0, &[round]).unwrap_err();
                assert!(
                    matches!(&err, Error::PeerFailed { rank: 1, cause } if cause.contains("rank 1 freed its window part")),
                    "{err}"
                );
                assert!(get_u64(&*win, 1, 0, 1).is_err());
                assert!(win.fetch_and_op(1, 0, Element::U64, AccumulateOp::Sum, 1).is_err());
                assert!(win.lock(1, LockKind::Exclusive).is_err());
                put_u64(&*win, 0, 0, &[round]).unwrap();
                win.close().unwrap();
            }
            r.barrier();
        }
    });
    assert_eq!(world.live_windows(), 0);
}

#[test]
fn exposing_one_id_twice_is_an_error() {
    job(1, |r| {
        let (mut a, mut b) = (vec![0u64; 1], vec![0u64; 1]);
        let win = r.window(5, &mut a);
        // SAFETY: never used: the call fails.
        let again = unsafe { r.ep.expose(5, &[0], b.as_mut_ptr().cast(), 8) };
        assert!(again.is_err());
        // SAFETY: as above.
        assert!(unsafe { r.ep.expose(6, &[1], b.as_mut_ptr().cast(), 8) }.is_err(), "not a member");
        win.close().unwrap();
        // Dropping without close closes too.
        drop(r.window(5, &mut b));
        assert_eq!(r.world.live_windows(), 0);
    });
}

#[test]
fn a_failed_rank_fails_lock_waiters_and_held_off_origins() {
    let locked = AtomicBool::new(false);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        job(3, |r| {
            let mut mem = vec![0u64; 1];
            let win = r.window(11, &mut mem);
            match r.rank {
                0 => {
                    // Holds rank 0's exclusive lock and its local access, then dies.
                    win.lock(0, LockKind::Exclusive).unwrap();
                    win.begin_local_access().unwrap();
                    locked.store(true, Ordering::Release);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    // Unwinding drops (closes) the window: peers learn of the failure.
                    panic!("rank 0 dies holding a lock");
                }
                1 => {
                    while !locked.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    let err = win.lock(0, LockKind::Shared).unwrap_err();
                    assert!(matches!(&err, Error::PeerFailed { rank: 0, .. }), "{err}");
                }
                _ => {
                    while !locked.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    let err = put_u64(&*win, 0, 0, &[1]).unwrap_err();
                    assert!(matches!(&err, Error::PeerFailed { rank: 0, .. }), "{err}");
                }
            }
            win.close().unwrap();
        });
    }));
    let msg = outcome.unwrap_err();
    assert_eq!(msg.downcast_ref::<&str>(), Some(&"rank 0 dies holding a lock"), "only rank 0 panicked");
}
