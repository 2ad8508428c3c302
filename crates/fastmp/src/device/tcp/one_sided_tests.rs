//! Device-level tests of one-sided communication over tcp: thread ranks drive `OneSided` and
//! `RmaWindow` directly (no window layer), over loopback connections.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use super::bootstrap::Site;
use super::tests::connect_all;
use super::{TcpEndpoint, TcpOptions};
use crate::device::one_sided::{AccumulateOp, Element, LockKind, RmaWindow};
use crate::device::wait::WaitPolicy;
use crate::device::{Device, Failure, Started};
use crate::error::Error;

/// Eager limit of the test endpoints: small, so 4 KiB transfers take the borrowed-payload path.
const EAGER: usize = 1024;

/// What one rank's test body gets.
struct Rank<'a> {
    rank: usize,
    ep: &'a TcpEndpoint,
    win: &'a dyn RmaWindow,
    /// The rank's window memory (read only under local access).
    memory: *mut u64,
    words: usize,
    barrier: &'a Barrier,
}

impl Rank<'_> {
    /// The rank's own part as plain memory, under local access.
    fn local<R>(&self, f: impl FnOnce(&mut [u64]) -> R) -> R {
        self.win.begin_local_access().unwrap();
        // SAFETY: local access holds every origin's operations off the part, which is this
        // rank's live `memory` of `words` words.
        let r = f(unsafe { std::slice::from_raw_parts_mut(self.memory, self.words) });
        self.win.end_local_access();
        r
    }

    fn complete(&self, started: Started) {
        self.ep.complete(started).unwrap();
    }
}

/// Runs `body` on `n` thread ranks over tcp, each exposing `words` zeroed u64 words as window 7,
/// then closes the windows and shuts the endpoints down.
fn with_windows(n: usize, words: usize, body: impl Fn(&Rank) + Sync) {
    let options = TcpOptions {
        eager_limit: EAGER,
        progress_thread: false,
        pace: 0,
        peer_reads: true,
        policy: WaitPolicy::for_ranks(n),
    };
    let here = Site::of_this_process().unwrap();
    let meshes = connect_all(&vec![here; n]);
    let barrier = Barrier::new(n);
    std::thread::scope(|s| {
        for (rank, mesh) in meshes.into_iter().enumerate() {
            let (barrier, body) = (&barrier, &body);
            s.spawn(move || {
                let ep = TcpEndpoint::new(rank, mesh, options).unwrap();
                let mut memory = vec![0u64; words];
                let members: Vec<usize> = (0..n).collect();
                // SAFETY: `memory` outlives the window, which is closed before it goes.
                let win = unsafe { ep.one_sided().unwrap().expose(7, &members, memory.as_mut_ptr().cast(), words * 8) }
                    .unwrap();
                barrier.wait();
                win.connect().unwrap();
                assert_eq!(win.part_lengths(), vec![words * 8; n]);
                barrier.wait();
                body(&Rank { rank, ep: &ep, win: &*win, memory: memory.as_mut_ptr(), words, barrier });
                barrier.wait();
                win.close().unwrap();
                drop(win);
                ep.shutdown().unwrap();
            });
        }
    });
}

fn bytes_of(words: &[u64]) -> &[u8] {
    bytemuck::cast_slice(words)
}

/// Put, get, accumulate, get-accumulate, fetch-and-op and compare-and-swap between two ranks and
/// on the rank itself, with payloads on both sides of the eager limit and of the stacked reply.
#[test]
fn operations_reach_the_target_part() {
    const WORDS: usize = 1024;
    with_windows(2, WORDS, |r| {
        let peer = 1 - r.rank;
        if r.rank == 0 {
            let small = [11u64, 12, 13];
            let large: Vec<u64> = (0..600).map(|i| i * 3 + 1).collect();
            // SAFETY (every raw call below): the buffers outlive the operations, which complete
            // in `r.complete` or `flush` before the buffers are touched again.
            unsafe {
                r.complete(r.win.put(peer, 8, small.as_ptr().cast(), 24).unwrap());
                r.complete(r.win.put(peer, 64, large.as_ptr().cast(), large.len() * 8).unwrap());
                let ones = [1i32; 4];
                r.complete(
                    r.win.accumulate(peer, 8, ones.as_ptr().cast(), 16, Element::I32, AccumulateOp::Sum).unwrap(),
                );
            }
            r.win.flush(Some(peer)).unwrap();
            let mut back = vec![0u64; 603];
            // SAFETY: as above.
            unsafe { r.complete(r.win.get(peer, 8, back.as_mut_ptr().cast(), back.len() * 8).unwrap()) };
            // Two i32 ones summed into each of the first two words.
            assert_eq!(back[0], 11 + (1 + (1 << 32)));
            assert_eq!(back[1], 12 + (1 + (1 << 32)));
            assert_eq!(back[2], 13);
            assert_eq!(&back[7..], &large[..596]);
            let operand = [5u64, 6];
            let mut previous = [0u64; 2];
            // SAFETY: as above.
            unsafe {
                let started = r.win.get_accumulate(
                    peer,
                    24,
                    operand.as_ptr().cast(),
                    previous.as_mut_ptr().cast(),
                    16,
                    Element::U64,
                    AccumulateOp::Max,
                );
                r.complete(started.unwrap());
            }
            assert_eq!(previous, [13, 0]);
            assert_eq!(r.win.fetch_and_op(peer, 24, Element::U64, AccumulateOp::Sum, 100).unwrap(), 13);
            assert_eq!(r.win.compare_and_swap(peer, 32, Element::U64, 6, 77).unwrap(), 6);
            assert_eq!(r.win.compare_and_swap(peer, 32, Element::U64, 6, 88).unwrap(), 77);
            // On this rank itself: no socket, same semantics.
            // SAFETY: as above.
            unsafe { r.complete(r.win.put(0, 0, small.as_ptr().cast(), 8).unwrap()) };
            assert_eq!(r.win.fetch_and_op(0, 0, Element::U64, AccumulateOp::Sum, 1).unwrap(), 11);
            r.win.flush(None).unwrap();
        }
        r.barrier.wait();
        if r.rank == 1 {
            r.local(|mem| {
                assert_eq!(&mem[1..5], &[11 + (1 + (1 << 32)), 12 + (1 + (1 << 32)), 113, 77]);
                assert_eq!(bytes_of(&mem[8..608]), bytes_of(&(0..600).map(|i| i * 3 + 1).collect::<Vec<u64>>()));
            });
        } else {
            r.local(|mem| assert_eq!(mem[0], 12));
        }
    });
}

/// Ranges outside the target's part, unaligned elements and operators a type lacks are errors at
/// the origin; nothing is sent.
#[test]
fn bad_ranges_and_elements_are_errors_at_the_origin() {
    with_windows(2, 4, |r| {
        let peer = 1 - r.rank;
        let buf = [0u64; 8];
        // SAFETY: every call fails before it reads `buf`.
        let err = unsafe { r.win.put(peer, 8, buf.as_ptr().cast(), 32) }.err().unwrap();
        assert!(err.to_string().contains("bytes 8..40 lie outside"), "{err}");
        let err = unsafe { r.win.put(5, 0, buf.as_ptr().cast(), 8) }.err().unwrap();
        assert!(err.to_string().contains("target 5 is not a member"), "{err}");
        let err = r.win.fetch_and_op(peer, 3, Element::U32, AccumulateOp::Sum, 1).unwrap_err();
        assert!(err.to_string().contains("not whole U32 elements"), "{err}");
        let err = r.win.fetch_and_op(peer, 0, Element::F64, AccumulateOp::Band, 1).unwrap_err();
        assert!(err.to_string().contains("Band is not defined on F64"), "{err}");
        r.win.flush(None).unwrap();
    });
}

/// The target computes (sleeps, never calling fastmp) while the origin puts, gets, locks and
/// fetches: the target's input-handler thread serves everything.
#[test]
fn a_target_in_user_code_still_serves_requests() {
    let done = AtomicBool::new(false);
    with_windows(2, 16, |r| {
        if r.rank == 1 {
            // User code that never calls the library until the origin says it finished.
            while !done.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(5));
            }
            r.local(|mem| assert_eq!(mem[..3], [42, 43, 40]));
            return;
        }
        let data = [42u64, 43];
        r.win.lock(1, LockKind::Exclusive).unwrap();
        // SAFETY: `data` outlives the put, completed at once or in `complete`.
        unsafe { r.complete(r.win.put(1, 0, data.as_ptr().cast(), 16).unwrap()) };
        for _ in 0..40 {
            r.win.fetch_and_op(1, 16, Element::U64, AccumulateOp::Sum, 1).unwrap();
        }
        let mut back = [0u64; 3];
        // SAFETY: `back` outlives the get, completed in `complete`.
        unsafe { r.complete(r.win.get(1, 0, back.as_mut_ptr().cast(), 24).unwrap()) };
        assert_eq!(back, [42, 43, 40]);
        r.win.unlock(1).unwrap();
        done.store(true, Ordering::Release);
    });
}

/// Every rank increments a counter on rank 0 under an exclusive lock, with a non-atomic
/// get + put: the locks exclude each other (rank 0 locks its own part through the same queue).
#[test]
fn exclusive_locks_serialise_read_modify_write() {
    const ROUNDS: u64 = 30;
    const NP: usize = 3;
    with_windows(NP, 1, |r| {
        for _ in 0..ROUNDS {
            r.win.lock(0, LockKind::Exclusive).unwrap();
            let mut value = [0u64];
            // SAFETY: `value` outlives the get and the put, each completed before the next step.
            unsafe {
                r.complete(r.win.get(0, 0, value.as_mut_ptr().cast(), 8).unwrap());
                value[0] += 1;
                r.complete(r.win.put(0, 0, value.as_ptr().cast(), 8).unwrap());
            }
            r.win.unlock(0).unwrap();
        }
        r.barrier.wait();
        if r.rank == 0 {
            r.local(|mem| assert_eq!(mem[0], ROUNDS * NP as u64));
        }
    });
}

/// Shared locks coexist; an exclusive request waits until they are all released.
#[test]
fn an_exclusive_lock_waits_for_shared_holders() {
    let released = AtomicUsize::new(0);
    with_windows(3, 1, |r| {
        if r.rank == 1 || r.rank == 2 {
            r.win.lock(0, LockKind::Shared).unwrap();
            r.barrier.wait(); // both shared locks held
            std::thread::sleep(Duration::from_millis(20));
            released.fetch_add(1, Ordering::SeqCst);
            r.win.unlock(0).unwrap();
        } else {
            r.barrier.wait();
            r.win.lock(0, LockKind::Exclusive).unwrap();
            assert_eq!(released.load(Ordering::SeqCst), 2, "granted while shared locks were held");
            r.win.unlock(0).unwrap();
        }
    });
}

/// While the owner has local access, arriving puts wait in a queue (its memory is unchanged and
/// the origin's flush waits); ending local access applies them and answers the flush.
#[test]
fn local_access_holds_requests_off_until_it_ends() {
    let held = AtomicBool::new(false);
    let flushed = AtomicBool::new(false);
    with_windows(2, 4, |r| {
        if r.rank == 1 {
            r.win.begin_local_access().unwrap();
            held.store(true, Ordering::Release);
            // Let the origin's put and flush arrive (served by the input thread, and queued).
            std::thread::sleep(Duration::from_millis(50));
            // SAFETY: local access is held; the memory is this rank's part.
            let mem = unsafe { std::slice::from_raw_parts(r.memory, r.words) };
            assert_eq!(mem, [0, 0, 0, 0], "a put reached the part during local access");
            assert!(!flushed.load(Ordering::Acquire), "the flush returned before the put was applied");
            r.win.end_local_access();
            while !flushed.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
            r.local(|mem| assert_eq!(mem, [0, 9, 8, 0]));
        } else {
            while !held.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            let data = [9u64, 8];
            // SAFETY: `data` outlives the put (complete at once: it is below the eager limit).
            unsafe { r.complete(r.win.put(1, 8, data.as_ptr().cast(), 16).unwrap()) };
            r.win.flush(Some(1)).unwrap();
            flushed.store(true, Ordering::Release);
        }
    });
}

/// After the target closed its part, the origin's requests are refused with a clear error (a get
/// at once, a put at the next flush).
#[test]
fn requests_to_a_closed_part_fail_clearly() {
    with_windows(2, 4, |r| {
        if r.rank == 1 {
            r.win.close().unwrap();
        }
        r.barrier.wait();
        if r.rank == 0 {
            let mut buf = [0u64; 1];
            // SAFETY: `buf` outlives the get, which fails inside `complete`.
            let started = unsafe { r.win.get(1, 0, buf.as_mut_ptr().cast(), 8) }.unwrap();
            let err = r.ep.complete(started).unwrap_err();
            assert!(matches!(&err, Error::RmaSync(m) if m.contains("window 7 is not open at rank 1")), "{err}");
            // SAFETY: `buf` outlives the put (complete at once).
            unsafe { r.complete(r.win.put(1, 0, buf.as_ptr().cast(), 8).unwrap()) };
            let err = r.win.flush(Some(1)).unwrap_err();
            assert!(err.to_string().contains("not open at rank 1"), "{err}");
        }
    });
}

/// A rank that fails while another waits for its lock: the waiter's lock fails with PeerFailed
/// instead of waiting forever, and later operations fail at once.
#[test]
fn a_failed_target_fails_pending_and_later_operations() {
    let options = TcpOptions {
        eager_limit: EAGER,
        progress_thread: false,
        pace: 0,
        peer_reads: true,
        policy: WaitPolicy::for_ranks(2),
    };
    let here = Site::of_this_process().unwrap();
    let meshes = connect_all(&[here.clone(), here]);
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        for (rank, mesh) in meshes.into_iter().enumerate() {
            let barrier = &barrier;
            s.spawn(move || {
                let ep = TcpEndpoint::new(rank, mesh, options).unwrap();
                let mut memory = [0u64; 2];
                // SAFETY: `memory` outlives the window (closed below, or leaked with the failure).
                let win =
                    unsafe { ep.one_sided().unwrap().expose(3, &[0, 1], memory.as_mut_ptr().cast(), 16) }.unwrap();
                barrier.wait();
                win.connect().unwrap();
                if rank == 1 {
                    win.lock(1, LockKind::Exclusive).unwrap();
                    barrier.wait();
                    std::thread::sleep(Duration::from_millis(30));
                    ep.abort(Failure { rank: 1, cause: "rank 1 died mid-epoch".into(), code: None });
                } else {
                    barrier.wait();
                    let err = win.lock(1, LockKind::Shared).unwrap_err();
                    assert!(matches!(&err, Error::PeerFailed { rank: 1, .. }), "{err}");
                    let err = win.fetch_and_op(1, 0, Element::U64, AccumulateOp::Sum, 1).unwrap_err();
                    assert!(matches!(&err, Error::PeerFailed { rank: 1, .. }), "{err}");
                    win.close().unwrap();
                    ep.abort(Failure { rank: 0, cause: "test over".into(), code: None });
                }
            });
        }
    });
}
