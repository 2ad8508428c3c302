//! A warm rank's in-place collectives allocate nothing (issue 12): the native algorithms take
//! their input from the user's buffer or swap in it, and the temporaries the others need come
//! from the rank's scratch pool. Counted per rank thread after a warm-up, shm, every collective
//! forced to `native`. Where the out-of-place operation itself allocates (a `v` layout's table,
//! the message algorithms' request lists), in place allocates no more than it.

use fastmp::coll::{Algorithm, Collective, Tuning};
use fastmp::op::Sum;
use fastmp::{Comm, Config, Result};

mod alloc_counter;
use alloc_counter::allocations;

/// One call of each in-place collective on `n` elements per block.
fn round(comm: &Comm, buf: &mut [u64], counts: &[usize]) -> Result<()> {
    let np = comm.size();
    comm.allreduce_in_place(buf, Sum)?;
    comm.reduce_in_place(buf, Sum, np - 1)?;
    comm.scan_in_place(buf, Sum)?;
    comm.exscan_in_place(buf, Sum)?;
    comm.reduce_scatter_in_place(buf, counts, Sum)?;
    comm.alltoall_in_place(buf)?;
    comm.allgather_in_place(buf)?;
    comm.gather_in_place(if comm.rank() == 0 { &mut *buf } else { &mut buf[..counts[0]] }, 0)?;
    comm.scatter_in_place(if comm.rank() == 0 { &mut *buf } else { &mut buf[..counts[0]] }, 0)
}

/// Allocations of each rank during 20 rounds after a warm-up round, with `tuning`.
fn allocations_with(np: usize, tuning: Tuning) -> Vec<u64> {
    Config::new()
        .np(np)
        .tuning(tuning)
        .run(|world| {
            let block = 512;
            let mut buf = vec![world.rank() as u64; block * world.size()];
            let counts = vec![block; world.size()];
            round(&world, &mut buf, &counts)?; // warm-up: the scratch pool fills here
            let before = allocations();
            for _ in 0..20 {
                round(&world, &mut buf, &counts)?;
            }
            Ok(allocations() - before)
        })
        .unwrap()
}

#[test]
fn native_in_place_collectives_do_not_allocate_once_warm() {
    let native = Collective::ALL.iter().try_fold(Tuning::defaults(), |t, &c| t.force(c, Algorithm::Native)).unwrap();
    for np in [2, 3] {
        let counts = allocations_with(np, native.clone());
        assert!(counts.iter().all(|&n| n == 0), "np {np}: allocations per rank {counts:?}");
    }
}

/// Allocations of each rank during 20 calls after a warm-up call, in place and out of place.
fn both_ways(tuning: Tuning, call: fn(&Comm, &mut [u64], bool) -> Result<()>) -> Vec<(u64, u64)> {
    Config::new()
        .np(3)
        .tuning(tuning)
        .run(move |world| {
            let mut buf = vec![1u64; 3 * 100];
            let mut counted = [0; 2];
            for (mode, in_place) in [false, true].into_iter().enumerate() {
                call(&world, &mut buf, in_place)?;
                let before = allocations();
                for _ in 0..20 {
                    call(&world, &mut buf, in_place)?;
                }
                counted[mode] = allocations() - before;
            }
            Ok((counted[1], counted[0]))
        })
        .unwrap()
}

fn alltoall(comm: &Comm, buf: &mut [u64], in_place: bool) -> Result<()> {
    // The out-of-place form needs its input elsewhere: the copy is part of the comparison.
    let send = buf.to_vec();
    if in_place { comm.alltoall_in_place(buf) } else { comm.alltoall(&send, buf) }
}

fn alltoallv(comm: &Comm, buf: &mut [u64], in_place: bool) -> Result<()> {
    let (counts, displs) = ([100; 3], [0, 100, 200]);
    let send = buf.to_vec();
    if in_place {
        comm.alltoallv_in_place(buf, &counts, &displs)
    } else {
        comm.alltoallv(&send, &counts, &displs, buf, &counts, &displs)
    }
}

/// Both forms above copy the buffer (one allocation each call, so the counts compare like with
/// like); in place allocates no more than out of place (it used to copy its input once more).
#[test]
fn in_place_alltoall_allocates_no_more_than_out_of_place() {
    for algorithm in [Algorithm::Native, Algorithm::Bft, Algorithm::Nbft] {
        for (coll, call) in [
            (Collective::Alltoall, alltoall as fn(&Comm, &mut [u64], bool) -> Result<()>),
            (Collective::Alltoallv, alltoallv),
        ] {
            let counts = both_ways(Tuning::defaults().force(coll, algorithm).unwrap(), call);
            for (rank, &(in_place, out_of_place)) in counts.iter().enumerate() {
                assert!(
                    in_place <= out_of_place,
                    "{coll:?} {algorithm} rank {rank}: {in_place} allocations in place, {out_of_place} out of place"
                );
            }
        }
    }
}
