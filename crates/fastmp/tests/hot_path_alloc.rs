//! Small messages allocate nothing on the hot path: after warm-up, a ping-pong of eager messages
//! (blocking and nonblocking) performs zero heap allocations on either rank thread, on the shm
//! and tcp devices. Blocking collectives on the device's collective provider (`native`, shm)
//! allocate nothing either: the provider's operation is part of the collective's future, which a
//! blocking call runs on its own stack.

use fastmp::coll::{Algorithm, Collective, Tuning};
use fastmp::op::{Sum, UserOp};
use fastmp::{Comm, Config, Result};

mod alloc_counter;
use alloc_counter::allocations;

fn ping_pong(world: &fastmp::Comm, rounds: usize, out: &[u8], inc: &mut [u8]) -> fastmp::Result<()> {
    let peer = 1 - world.rank();
    for _ in 0..rounds {
        if world.rank() == 0 {
            world.send(out, peer, 1)?;
            world.recv(inc, peer, 1)?;
        } else {
            world.recv(inc, peer, 1)?;
            world.send(out, peer, 1)?;
        }
        assert!(inc.iter().all(|&b| b == peer as u8));
        // Nonblocking variant; `waitall` on a slice allocates its status vector, so complete the
        // requests one by one here.
        world.scope(|s| {
            let r = s.irecv(&mut *inc, peer, 2)?;
            let w = s.isend(out, peer, 2)?;
            w.wait()?;
            r.wait().map(drop)
        })?;
    }
    Ok(())
}

/// Allocations per size during 500 round trips after a warm-up, per rank.
fn allocations_per_size(config: fastmp::Config, sizes: &[usize]) -> Vec<Vec<(usize, u64)>> {
    config
        .run(|world| {
            let mut per_size = Vec::new();
            for &size in sizes {
                let out = vec![world.rank() as u8; size];
                let mut inc = vec![0u8; size];
                ping_pong(&world, 50, &out, &mut inc)?; // warm-up: pools and spill buffers fill here
                let before = allocations();
                ping_pong(&world, 500, &out, &mut inc)?;
                per_size.push((size, allocations() - before));
                // The peer's first message of the next size (its spill buffers) must not land in
                // this rank's count.
                world.barrier()?;
            }
            Ok(per_size)
        })
        .unwrap()
}

fn assert_no_allocations(counts: &[Vec<(usize, u64)>]) {
    for (rank, per_size) in counts.iter().enumerate() {
        for &(size, n) in per_size {
            assert_eq!(n, 0, "rank {rank}: {n} allocations during 500 round trips of {size} bytes");
        }
    }
}

#[test]
fn eager_messages_do_not_allocate_after_warm_up() {
    assert_no_allocations(&allocations_per_size(fastmp::Config::new().np(2), &[0, 8, 40, 41, 1024, 4096]));
}

/// On tcp the rank thread receives directly from its sockets; rendezvous sizes are included
/// because their requests and queues are recycled too.
#[test]
fn tcp_messages_do_not_allocate_after_warm_up() {
    let config = fastmp::Config::new().device(fastmp::DeviceKind::Tcp).np(2);
    assert_no_allocations(&allocations_per_size(config, &[0, 8, 1024, 8192, 65536]));
}

/// Every collective forced to `native`.
fn native(world: &Comm) -> Result<Comm> {
    let tuning = Collective::ALL.iter().try_fold(Tuning::defaults(), |t, &c| t.force(c, Algorithm::Native))?;
    Ok(world.with_tuning(tuning))
}

/// One round of small blocking collectives, reductions with a predefined and a user op.
fn round(comm: &Comm, matmul: &UserOp<impl Fn(&[[u64; 2]], &mut [[u64; 2]])>) -> Result<()> {
    let (me, np) = (comm.rank() as u64, comm.size() as u64);
    comm.barrier()?;
    let mut b = [me; 2];
    comm.bcast(&mut b, 0)?;
    assert_eq!(b, [0; 2]);
    let mut sum = [0u64; 1];
    comm.allreduce(&[me], &mut sum, Sum)?;
    assert_eq!(sum[0], np * (np - 1) / 2);
    let mut total = [0u64; 1];
    comm.reduce(&[1], &mut total, Sum, 0)?;
    let mut product = [[0u64; 2]; 1];
    comm.allreduce(&[[1, me]], &mut product, matmul)?;
    let mut prefix = [0u64; 1];
    comm.scan(&[1], &mut prefix, Sum)?;
    assert_eq!(prefix[0], me + 1);
    let mut all = [0u64; 8];
    comm.allgather(&[me], &mut all[..np as usize])?;
    Ok(())
}

#[test]
fn blocking_native_collectives_do_not_allocate_after_warm_up() {
    for np in [2, 3] {
        let counts = Config::new()
            .np(np)
            .run(|world| {
                let comm = native(&world)?;
                let matmul = UserOp::non_commutative(|input: &[[u64; 2]], inout: &mut [[u64; 2]]| {
                    for (l, r) in input.iter().zip(inout.iter_mut()) {
                        *r = [l[0].wrapping_mul(r[0]), l[0].wrapping_mul(r[1]).wrapping_add(l[1])];
                    }
                });
                for _ in 0..20 {
                    round(&comm, &matmul)?;
                }
                let before = allocations();
                for _ in 0..200 {
                    round(&comm, &matmul)?;
                }
                Ok(allocations() - before)
            })
            .expect("job");
        assert_eq!(counts, vec![0; np], "allocations per rank during 200 rounds at np {np}");
    }
}
