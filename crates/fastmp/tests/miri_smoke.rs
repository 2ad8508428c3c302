//! Tiny end-to-end exchanges through the public API on two ranks, small enough to run under Miri
//! (`scripts/miri.sh`): eager (inline and spilled), rendezvous (sender first), receiver-first
//! direct copy, a synchronous send, and requests leaked with `mem::forget` (the scope must finish
//! them: the send's data is detached, the receive still receives); plus the shm device's native
//! collectives on three ranks, where peers copy and reduce straight out of each other's buffers;
//! the request kinds of issue 12 (read after wait, owned, persistent); one-sided windows; and
//! nonblocking collectives whose futures reuse finished ones' memory.

use fastmp::{ANY_SOURCE, ANY_TAG, Comm, Config, Result};

/// Eager limit small enough that a 200-byte message is a rendezvous.
const EAGER: usize = 64;
const BIG: usize = 200;

fn job(f: impl Fn(Comm) -> Result<()> + Sync) {
    Config::new().np(2).eager_limit(EAGER).run(f).expect("job");
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8).wrapping_mul(3)).collect()
}

#[test]
fn eager_inline_spilled_and_synchronous() {
    job(|world| {
        if world.rank() == 0 {
            world.send(&pattern(1, 8), 1, 1)?;
            world.send(&pattern(2, 40), 1, 2)?;
            world.send::<u8>(&[], 1, 3)?;
            world.ssend(&pattern(4, 16), 1, 4)?;
        } else {
            let mut buf = [0u8; 64];
            let st = world.recv(&mut buf, 0, 1)?;
            assert_eq!(&buf[..st.count::<u8>()], &pattern(1, 8)[..]);
            // Wildcards; the spilled payload arrives intact.
            let st = world.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
            assert_eq!((st.source, st.tag), (0, 2));
            assert_eq!(&buf[..st.count::<u8>()], &pattern(2, 40)[..]);
            assert_eq!(world.recv(&mut buf, 0, 3)?.count::<u8>(), 0);
            let st = world.recv(&mut buf, 0, 4)?;
            assert_eq!(&buf[..st.count::<u8>()], &pattern(4, 16)[..]);
        }
        Ok(())
    });
}

#[test]
fn rendezvous_sender_first() {
    job(|world| {
        if world.rank() == 0 {
            world.send(&pattern(5, BIG), 1, 9)?;
        } else {
            // Wait until the ready-to-send is here, so the receive finds it as unexpected.
            let st = world.probe(0, 9)?;
            assert_eq!(st.bytes, BIG);
            let mut buf = vec![0u8; BIG];
            world.recv(&mut buf, 0, 9)?;
            assert_eq!(buf, pattern(5, BIG));
        }
        Ok(())
    });
}

#[test]
fn receiver_first_direct_copy() {
    job(|world| {
        if world.rank() == 0 {
            // Send only once the receive is posted: the sender copies straight into it.
            world.recv(&mut [0u8; 1], 1, 100)?;
            world.send(&pattern(6, BIG), 1, 10)?;
        } else {
            let mut buf = vec![0u8; BIG];
            world.scope(|s| {
                let req = s.irecv(&mut buf, 0, 10)?;
                world.send(&[1u8], 0, 100)?;
                let st = req.wait()?;
                assert_eq!((st.source, st.tag, st.count::<u8>()), (0, 10, BIG));
                Ok::<_, fastmp::Error>(())
            })?;
            assert_eq!(buf, pattern(6, BIG));
        }
        Ok(())
    });
}

#[test]
fn forgotten_requests_are_released_by_the_scope() {
    job(|world| {
        if world.rank() == 0 {
            let mut big = pattern(7, BIG);
            world.scope(|s| {
                let req = s.isend(&big, 1, 20)?;
                // Leaked: the scope's end must detach the data before the buffer is reused.
                std::mem::forget(req);
                Ok::<_, fastmp::Error>(())
            })?;
            big.fill(0xEE);
            drop(big);
            world.send(&[1u8], 1, 21)?;
            // The receiver's leaked receive still receives this one (its scope waits for it).
            world.send(&pattern(8, 16), 1, 23)?;
        } else {
            world.recv(&mut [0u8; 1], 0, 21)?;
            let mut buf = vec![0u8; BIG];
            world.recv(&mut buf, 0, 20)?;
            assert_eq!(buf, pattern(7, BIG), "detached data");
            let mut leaked = [0u8; 16];
            world.scope(|s| {
                std::mem::forget(s.irecv(&mut leaked, 0, 23)?);
                Ok::<_, fastmp::Error>(())
            })?;
            assert_eq!(&leaked[..], &pattern(8, 16)[..], "a leaked receive still receives");
        }
        Ok(())
    });
}

/// Every collective forced to the native (shared-buffer) algorithm.
fn native_job(f: impl Fn(Comm) -> Result<()> + Sync) -> Result<Vec<()>> {
    use fastmp::coll::{Algorithm, Collective, Tuning};
    let tuning = Collective::ALL.iter().try_fold(Tuning::defaults(), |t, &c| t.force(c, Algorithm::Native))?;
    Config::new().np(3).tuning(tuning).run(f)
}

#[test]
fn native_collectives() {
    use fastmp::op::{Sum, UserOp};
    // Keeps the leftmost operand: associative, not commutative, so rank order is visible.
    let first = UserOp::non_commutative(|input: &[u32], inout: &mut [u32]| inout.copy_from_slice(input));
    native_job(|world| {
        let (me, np) = (world.rank(), world.size());
        let mine = [me as u32 * 10, me as u32 * 10 + 1];
        world.barrier()?;
        let mut b = if me == 1 { [7u32, 8, 9] } else { [0; 3] };
        world.bcast(&mut b, 1)?;
        assert_eq!(b, [7, 8, 9]);
        let mut all = [0u32; 6];
        world.allgather(&mine, &mut all)?;
        assert_eq!(all, [0, 1, 10, 11, 20, 21]);
        let mut got = [0u32; 2];
        world.scatter(if me == 0 { &all[..] } else { &[] }, &mut got, 0)?;
        assert_eq!(got, mine);
        let mut at_root = [0u32; 6];
        world.gatherv(&mine, if me == 2 { &mut at_root[..] } else { &mut [] }, &[2; 3], &[4, 2, 0], 2)?;
        if me == 2 {
            assert_eq!(at_root, [20, 21, 10, 11, 0, 1]);
        }
        let send: Vec<u32> = (0..np as u32).map(|j| me as u32 * 10 + j).collect();
        let mut recv = [0u32; 3];
        world.alltoall(&send, &mut recv)?;
        assert_eq!(recv, [me as u32, 10 + me as u32, 20 + me as u32]);
        let mut total = [0u32; 2];
        world.allreduce(&mine, &mut total, Sum)?;
        assert_eq!(total, [30, 33]);
        let mut leftmost = [9u32; 2];
        world.reduce(&mine, if me == 0 { &mut leftmost[..] } else { &mut [] }, &first, 0)?;
        assert_eq!(leftmost, if me == 0 { [0, 1] } else { [9, 9] });
        let mut part = [0u32; 1];
        world.reduce_scatter(&[1, 2, 3], &mut part, &[1, 1, 1], Sum)?;
        assert_eq!(part, [3 * (me as u32 + 1)]);
        let mut prefix = [0u32; 2];
        world.scan(&mine, &mut prefix, Sum)?;
        assert_eq!(prefix[0], (0..=me as u32).map(|r| r * 10).sum::<u32>());
        world.exscan(&mine, &mut prefix, &first)?;
        if me > 0 {
            assert_eq!(prefix, [0, 1]);
        }
        Ok(())
    })
    .expect("job");
}

#[test]
fn native_buffers_are_released_only_after_every_peer_access() {
    use fastmp::op::Sum;
    native_job(|world| {
        for round in 0..4u8 {
            let root = usize::from(round) % world.size();
            // Fresh buffers, freed or overwritten right after each call: a peer still
            // copying from or into them would be a use-after-free or a data race under Miri.
            let mut data = vec![if world.rank() == root { round } else { 0 }; 16];
            world.bcast(&mut data, root)?;
            assert_eq!(data, [round; 16]);
            drop(data);
            let mut total = vec![0u64; if world.rank() == root { 5 } else { 0 }];
            world.reduce(&[u64::from(round); 5], &mut total, Sum, root)?;
            total.fill(0);
            let mut all = vec![0u16; 3 * world.size()];
            world.allgather(&[u16::from(round); 3], &mut all)?;
            all.fill(1);
        }
        Ok(())
    })
    .expect("job");
}

/// An `ibcast` large enough that a root finding its receivers already there copies chunks of
/// their buffers while they copy the rest, into a buffer freed right after the call. (Filled
/// and compared whole: byte loops over 70 KB take minutes under Miri.)
#[test]
fn native_ibcast_chunks_are_copied_once() {
    native_job(|world| {
        let root = 1;
        let sent = vec![0xa5u8; 70_001];
        let mut data = if world.rank() == root { sent.clone() } else { vec![0; sent.len()] };
        world.scope(|s| {
            if world.rank() == root {
                // Receivers first (each says so once its ibcast started), so the root finds them
                // there and takes chunks too.
                for _ in 1..world.size() {
                    world.recv::<u8>(&mut [], fastmp::ANY_SOURCE, 9)?;
                }
                s.ibcast(&mut data, root)?.wait().map(drop)
            } else {
                let bcast = s.ibcast(&mut data, root)?;
                world.send::<u8>(&[], root, 9)?;
                bcast.wait().map(drop)
            }
        })?;
        assert!(data == sent, "rank {}: the bcast's bytes differ", world.rank());
        drop(data);
        Ok(())
    })
    .expect("job");
}

#[test]
fn native_collective_with_a_panicking_op() {
    use fastmp::op::UserOp;
    let outcome = native_job(|world| {
        let me = world.rank();
        let op = UserOp::commutative(move |input: &[u8], inout: &mut [u8]| {
            assert!(me != 1, "user op fails on rank 1");
            inout.copy_from_slice(input);
        });
        let mut out = [0u8; 4];
        world.allreduce(&[me as u8; 4], &mut out, &op)
    });
    assert!(outcome.is_err());
}

/// The request kinds of issue 12 on rendezvous sizes: a scope receive read after its own wait
/// (receiver first: the sender copies into the raw slice the request holds), owned requests
/// (one dropped in flight: its buffer lives on in the rank's orphans until the device is done),
/// and a persistent exchange started twice.
#[test]
fn owned_persistent_and_read_after_wait() {
    job(|world| {
        let peer = 1 - world.rank();
        let mut inc = vec![0u8; BIG];
        world.scope(|s| {
            let req = s.irecv_buf(&mut inc, peer, 30)?;
            world.send(&pattern(30, BIG), peer, 30)?;
            let (got, _) = req.wait()?;
            assert_eq!(&got[..], &pattern(30, BIG)[..]);
            Ok::<_, fastmp::Error>(())
        })?;
        drop(world.irecv_owned(vec![0u8; BIG], peer, 31)?);
        let send = world.isend_owned(pattern(31, BIG), peer, 31)?;
        let (buf, _) = send.wait()?;
        assert_eq!(buf.len(), BIG);
        let mut reqs = vec![world.recv_init(vec![0u8; BIG], peer, 32)?, world.send_init(pattern(32, BIG), peer, 32)?];
        for _ in 0..2 {
            fastmp::startall(&mut reqs)?;
            fastmp::waitall(&mut reqs)?;
            assert_eq!(reqs[0].buf()?, &pattern(32, BIG)[..]);
        }
        world.barrier()
    });
}

/// One-sided windows through the public API: allocated and user memory, a fence epoch, a lock
/// epoch with atomics, and the owner's local guard (leaked windows leak by design, so they are
/// tested outside Miri, in `one_sided_faults`).
#[test]
fn one_sided_windows() {
    use fastmp::window::{Assert, LockKind};
    job(|world| {
        let (me, peer) = (world.rank(), 1 - world.rank());
        let win = world.win_allocate::<u64>(4)?;
        win.fence(Assert::NONE)?;
        win.put(&[me as u64 + 10, 7], peer, 1)?;
        win.fence(Assert::NOSUCCEED)?;
        assert_eq!(&win.local()?[1..3], &[peer as u64 + 10, 7]);
        win.lock(LockKind::Exclusive, 0, Assert::NONE)?;
        win.fetch_and_op(1u64, 0, 3, fastmp::op::Sum)?;
        win.unlock(0)?;
        world.barrier()?;
        if me == 0 {
            assert_eq!(win.local()?[3], 2);
        }
        win.free()?;
        let mut mine = [0u32; 3];
        world.win_create(&mut mine, |win| {
            win.lock_all(Assert::NONE)?;
            win.put(&[me as u32 + 1], peer, me)?;
            win.unlock_all()?;
            world.barrier()
        })?;
        assert_eq!(mine[peer], peer as u32 + 1);
        Ok(())
    });
}

/// Nonblocking collectives on three ranks: each operation's future is built into a block the
/// engine keeps from a finished one (rounds after the first reuse them), one request is leaked
/// with `mem::forget` (the scope's end finishes it), and every result is checked.
#[test]
fn nonblocking_collectives_reuse_their_futures_memory() {
    // The default tables given outright: read from the environment, they would open files.
    Config::new()
        .np(3)
        .tuning(fastmp::coll::Tuning::defaults())
        .run(|world| {
            let me = world.rank() as u32;
            for round in 0..3u32 {
                let send = [me + round; 4];
                let mut sum = [0u32; 4];
                let mut data = if me == 1 { [round; 8] } else { [0; 8] };
                world.scope(|s| {
                    let reduced = s.iallreduce(&send, &mut sum, fastmp::op::Sum)?;
                    let bcast = s.ibcast(&mut data, 1)?;
                    if round == 1 {
                        std::mem::forget(bcast);
                    } else {
                        bcast.wait()?;
                    }
                    reduced.wait().map(drop)
                })?;
                assert_eq!(sum, [3 + 3 * round; 4], "round {round}");
                assert_eq!(data, [round; 8], "round {round}");
            }
            Ok(())
        })
        .expect("job");
}
