//! Argument errors of the collectives (detectable locally, only across ranks, or overflowing
//! counts), a user op that panics and a collective called from inside a user op: each must end
//! in `Err`, never in a hang or a panic.
//!
//! Every job runs under a watchdog (`FASTMP_TEST_TIMEOUT_S`, default 120 s) so a hang fails the
//! test instead of blocking.

mod coll_common;

use std::fmt;

use coll_common::{algorithms, config_on, forced, job, run_ok};
use fastmp::coll::{Algorithm, Collective, Tuning};
use fastmp::op::{Sum, UserOp};
use fastmp::{Comm, DeviceKind, Error, Result};

// ---------------------------------------------------------------- argument errors

/// Asserts `result` is `Error::InvalidArgument` whose message contains `want`.
fn assert_invalid<T: fmt::Debug>(result: Result<T>, want: &str, what: &str) {
    match result {
        Err(Error::InvalidArgument(msg)) if msg.contains(want) => {}
        other => panic!("{what}: expected InvalidArgument containing {want:?}, got {other:?}"),
    }
}

#[test]
fn locally_detectable_errors_on_every_rank() {
    run_ok(4, "local argument errors", |world| {
        let me = world.rank();
        let mut buf = [0u32; 8];
        for root in [4, 99] {
            let want = format!("root {root} out of range for a communicator of size 4");
            assert_invalid(world.bcast(&mut buf, root), &want, "bcast");
            assert_invalid(world.scatter(&buf, &mut [0u32; 2], root), &want, "scatter");
            assert_invalid(world.gather(&[0u32; 2], &mut buf, root), &want, "gather");
            assert_invalid(world.scatterv(&buf, &[2; 4], &[0, 2, 4, 6], &mut [0u32; 2], root), &want, "scatterv");
            assert_invalid(world.gatherv(&[0u32; 2], &mut buf, &[2; 4], &[0, 2, 4, 6], root), &want, "gatherv");
            assert_invalid(world.reduce(&[1u32], &mut [0u32], Sum, root), &want, "reduce");
            let mut obj = 5u32;
            assert!(world.bcast_obj(&mut obj, root).is_err(), "bcast_obj with root {root}");
            assert!(world.gather_obj(&obj, root).is_err(), "gather_obj with root {root}");
        }
        let mut seven = [0u32; 7];
        assert_invalid(
            world.allgather(&[0u32; 2], &mut seven),
            "allgather receive buffer has 7 elements, expected 8",
            "allgather",
        );
        assert_invalid(
            world.alltoall(&[0u32; 8], &mut seven),
            "alltoall receive buffer has 7 elements, expected 8",
            "alltoall",
        );
        assert_invalid(
            world.alltoall(&[0u32; 6], &mut [0u32; 6]),
            "alltoall buffers of 6 elements do not split into 4 equal blocks",
            "alltoall",
        );
        let counts = [1usize, 2, 0, 3];
        let displs = [0usize, 1, 3, 3];
        assert_invalid(
            world.allgatherv(&vec![0u32; counts[me]], &mut buf, &counts[..3], &displs),
            "allgatherv: 3 counts and 4 displacements for a communicator of size 4",
            "allgatherv",
        );
        assert_invalid(
            world.allgatherv(&vec![0u32; counts[me]], &mut buf, &counts, &[0, 1, 3, 6]),
            "allgatherv: block of rank 3 (displacement 6, count 3) exceeds the buffer of 8 elements",
            "allgatherv",
        );
        assert_invalid(
            world.allgatherv(&vec![0u32; counts[me]], &mut buf, &counts, &[0, 1, 3, usize::MAX]),
            "allgatherv: block of rank 3",
            "allgatherv with an overflowing displacement",
        );
        assert_invalid(
            world.allgatherv(&vec![0u32; counts[me]], &mut buf, &counts, &[0, 1, 3, 2]),
            "allgatherv: blocks of ranks 1 and 3 overlap",
            "allgatherv",
        );
        assert_invalid(
            world.allgatherv(&[0u32; 5], &mut buf, &counts, &displs),
            &format!("allgatherv: rank {me}'s send buffer has 5 elements but recvcounts[{me}] is {}", counts[me]),
            "allgatherv",
        );
        // Zero-length blocks may sit anywhere, even on top of others.
        let ok_counts = [0usize, 2, 0, 2];
        world.allgatherv(&vec![me as u32; ok_counts[me]], &mut buf, &ok_counts, &[1, 0, 1, 2])?;
        assert_eq!(buf[..4], [1, 1, 3, 3]);
        // Overlapping send blocks are allowed (MPI); receive blocks are not.
        assert_invalid(
            world.alltoallv(&buf, &[2; 4], &[0, 2, 4, 6], &mut [0u32; 8], &[2; 4], &[0, 2, 4, 5]),
            "alltoallv receive: blocks of ranks 2 and 3 overlap",
            "alltoallv",
        );
        assert_invalid(
            world.alltoallv(&buf, &[2; 4], &[0, 2, 4, 6], &mut [0u32; 8], &[2; 4], &[0, 2, 4, 7]),
            "alltoallv receive: block of rank 3 (displacement 7, count 2) exceeds the buffer of 8 elements",
            "alltoallv",
        );
        assert_invalid(
            world.alltoallv(&buf, &[2; 3], &[0, 2, 4], &mut [0u32; 8], &[2; 4], &[0, 2, 4, 6]),
            "alltoallv send: 3 counts and 3 displacements for a communicator of size 4",
            "alltoallv",
        );
        assert_invalid(
            world.allreduce(&[1u32; 3], &mut [0u32; 2], Sum),
            "allreduce receive buffer has 2 elements, expected 3",
            "allreduce",
        );
        assert_invalid(
            world.reduce_scatter(&[1u32; 6], &mut [0u32; 1], &[1, 2, 3], Sum),
            "reduce_scatter counts has 3 elements, expected 4",
            "reduce_scatter",
        );
        assert_invalid(
            world.reduce_scatter(&[1u32; 5], &mut [0u32; 1], &[1, 1, 1, 3], Sum),
            "reduce_scatter send buffer has 5 elements, expected 6",
            "reduce_scatter",
        );
        let rs_counts = [1usize, 1, 1, 3];
        assert_invalid(
            world.reduce_scatter(&[1u32; 6], &mut [0u32; 2], &rs_counts, Sum),
            &format!("reduce_scatter receive buffer has 2 elements, expected {}", rs_counts[me]),
            "reduce_scatter",
        );
        assert_invalid(
            world.reduce_scatter_block(&[1u32; 7], &mut [0u32; 2], Sum),
            "reduce_scatter_block send buffer has 7 elements, expected 8",
            "reduce_scatter_block",
        );
        assert_invalid(
            world.scan(&[1u32; 3], &mut [0u32; 4], Sum),
            "scan receive buffer has 4 elements, expected 3",
            "scan",
        );
        assert_invalid(
            world.exscan(&[1u32; 3], &mut [0u32; 2], Sum),
            "exscan receive buffer has 2 elements, expected 3",
            "exscan",
        );
        assert_invalid(
            Tuning::defaults().force(Collective::Bcast, Algorithm::Bkt),
            "bcast has no algorithm \"bkt\"",
            "forcing an algorithm a collective lacks",
        );
        // Nothing was sent: the communicator is still in step.
        let mut total = [0u32];
        world.allreduce(&[1u32], &mut total, Sum)?;
        assert_eq!(total, [4]);
        // After finalize every collective fails at once, on every communicator of the rank.
        let dup = world.dup()?;
        world.finalize()?;
        assert!(matches!(world.barrier(), Err(Error::Finalized(_))));
        assert!(matches!(dup.bcast(&mut buf, 0), Err(Error::Finalized(_))));
        assert!(matches!(dup.allreduce(&[1u32], &mut total, Sum), Err(Error::Finalized(_))));
        assert!(matches!(world.scan(&[1u32], &mut total, Sum), Err(Error::Finalized(_))));
        assert!(world.gather_obj(&1u8, 0).is_err());
        Ok(())
    });
}

#[test]
fn counts_that_overflow_are_errors_not_panics() {
    // Sums and products of element counts can overflow `usize`: with huge counts, or with
    // zero-sized elements, whose slices may be `usize::MAX` long. Each call must return
    // `InvalidArgument` (on every rank, so no communication starts); a panic is a library bug.
    run_ok(2, "overflowing counts", |world| {
        let me = world.rank();
        let huge = vec![(); usize::MAX];
        let mut huge_out = vec![(); usize::MAX];
        let noop = UserOp::commutative(|_: &[()], _: &mut [()]| {});
        let mut panicked = Vec::new();
        let mut probe = |what: &'static str, call: &mut dyn FnMut() -> Result<()>| match std::panic::catch_unwind(
            std::panic::AssertUnwindSafe(call),
        ) {
            Ok(Err(Error::InvalidArgument(_))) => {}
            Ok(other) => panic!("{what}: expected InvalidArgument, got {other:?}"),
            Err(_) => panicked.push(what),
        };
        probe("reduce_scatter with counts summing past usize::MAX", &mut || {
            world.reduce_scatter(&[0u32; 0], &mut [0u32; 0], &[usize::MAX, 1], Sum)
        });
        probe("allgather of usize::MAX zero-sized elements", &mut || world.allgather(&huge, &mut [(); 0]));
        probe("gather of usize::MAX zero-sized elements", &mut || world.gather(&huge, &mut [(); 0], me));
        probe("scatter into usize::MAX zero-sized elements", &mut || world.scatter(&[(); 0], &mut huge_out, me));
        probe("reduce_scatter_block into usize::MAX zero-sized elements", &mut || {
            world.reduce_scatter_block(&[(); 0], &mut huge_out, &noop)
        });
        assert!(panicked.is_empty(), "the library panicked on: {}", panicked.join("; "));
        Ok(())
    });
}

#[test]
fn root_only_errors_on_a_single_rank() {
    // With one rank the root is everyone, so root-only checks are local to every rank.
    run_ok(1, "root-only argument errors", |world| {
        assert_invalid(
            world.scatter(&[0u32; 3], &mut [0u32; 2], 0),
            "scatter send buffer has 3 elements, expected 2",
            "scatter",
        );
        assert_invalid(
            world.gather(&[0u32; 2], &mut [0u32; 3], 0),
            "gather receive buffer has 3 elements, expected 2",
            "gather",
        );
        assert_invalid(
            world.reduce(&[0u32; 2], &mut [0u32; 3], Sum, 0),
            "reduce receive buffer has 3 elements, expected 2",
            "reduce",
        );
        assert_invalid(
            world.scatterv(&[0u32; 4], &[3], &[2], &mut [0u32; 3], 0),
            "scatterv: block of rank 0 (displacement 2, count 3) exceeds the buffer of 4 elements",
            "scatterv",
        );
        assert_invalid(
            world.scatterv(&[0u32; 4], &[3], &[0], &mut [0u32; 2], 0),
            "scatterv: the root's receive buffer has 2 elements but its sendcounts[0] is 3",
            "scatterv",
        );
        assert_invalid(
            world.gatherv(&[0u32; 2], &mut [0u32; 4], &[3], &[0], 0),
            "gatherv: the root's send buffer has 2 elements but its recvcounts[0] is 3",
            "gatherv",
        );
        assert_invalid(
            world.gatherv(&[0u32; 3], &mut [0u32; 4], &[3, 1], &[0, 3], 0),
            "gatherv: 2 counts and 2 displacements",
            "gatherv",
        );
        assert_invalid(
            world.scatter_obj(&[1u8, 2], 0),
            "scatter_obj: 2 values for a communicator of size 1",
            "scatter_obj",
        );
        Ok(())
    });
}

/// One call of a collective: `bad` says whether this rank passes the wrong arguments.
type Call = fn(&Comm, bool) -> Result<()>;

/// For every algorithm of `coll`: rank `bad_rank` passes wrong arguments, gets `Err` naming
/// `want` and returns it; the other ranks (passing consistent arguments) must not hang, and the
/// job must fail naming that rank.
fn one_rank_errs(device: DeviceKind, coll: Collective, np: usize, bad_rank: usize, want: &'static str, call: Call) {
    for alg in algorithms(coll) {
        let what = format!("{coll} with algorithm {alg} on {device:?}: rank {bad_rank} passes bad arguments");
        let result = job(config_on(device, np), &what, move |world| {
            let comm = forced(&world, coll, alg)?;
            let bad = world.rank() == bad_rank;
            let result = call(&comm, bad);
            if bad {
                assert!(
                    matches!(&result, Err(Error::InvalidArgument(m)) if m.contains(want)),
                    "{coll} {alg}: {result:?}"
                );
            }
            result
        });
        match result {
            Err(Error::RankFailed { rank, cause }) if rank == bad_rank && cause.contains(want) => {}
            other => panic!("{what}: expected RankFailed of rank {bad_rank} with {want:?}, got {other:?}"),
        }
    }
}

#[test]
fn a_rank_with_bad_arguments_fails_the_job_without_hanging() {
    bad_arguments_on(DeviceKind::Shm);
}

/// Hybrid, 2 × 2 (the cases' buffer lengths are written for np 4).
#[test]
fn a_rank_with_bad_arguments_fails_the_job_without_hanging_on_hybrid() {
    bad_arguments_on(DeviceKind::Hybrid);
}

fn bad_arguments_on(device: DeviceKind) {
    const NP: usize = 4;
    one_rank_errs(device, Collective::Bcast, NP, 1, "root 7 out of range", |c, bad| {
        c.bcast(&mut [0u32; 5], if bad { 7 } else { 0 })
    });
    one_rank_errs(device, Collective::Scatter, NP, 2, "scatter send buffer has 7 elements, expected 8", |c, bad| {
        let send = vec![0u32; if bad { 7 } else { 0 }];
        c.scatter(&send, &mut [0u32; 2], 2)
    });
    one_rank_errs(device, Collective::Gather, NP, 3, "gather receive buffer has 9 elements, expected 8", |c, bad| {
        let mut recv = vec![0u32; if bad { 9 } else { 0 }];
        c.gather(&[1u32, 2], &mut recv, 3)
    });
    one_rank_errs(device, Collective::Gatherv, NP, 0, "gatherv: blocks of ranks 0 and 1 overlap", |c, bad| {
        let send_len = [2, 2, 1, 1][c.rank()];
        let (counts, displs): (&[usize], &[usize]) = if bad { (&[2, 2, 1, 1], &[0, 1, 4, 5]) } else { (&[], &[]) };
        c.gatherv(&vec![0u32; send_len], &mut [0u32; 6], counts, displs, 0)
    });
    one_rank_errs(device, Collective::Gatherv, NP, 1, "gatherv: 4 counts and 3 displacements", |c, bad| {
        let (counts, displs): (&[usize], &[usize]) = if bad { (&[1; 4], &[0, 1, 2]) } else { (&[], &[]) };
        c.gatherv(&[0u32], &mut [0u32; 4], counts, displs, 1)
    });
    one_rank_errs(
        device,
        Collective::Allgather,
        NP,
        3,
        "allgather receive buffer has 7 elements, expected 8",
        |c, bad| c.allgather(&[0u32; 2], &mut vec![0u32; if bad { 7 } else { 8 }]),
    );
    one_rank_errs(
        device,
        Collective::Allgatherv,
        NP,
        2,
        "allgatherv: rank 2's send buffer has 3 elements but recvcounts[2] is 2",
        |c, bad| c.allgatherv(&vec![0u32; if bad { 3 } else { 2 }], &mut [0u32; 8], &[2; 4], &[0, 2, 4, 6]),
    );
    one_rank_errs(
        device,
        Collective::Alltoall,
        NP,
        0,
        "alltoall receive buffer has 7 elements, expected 8",
        |c, bad| c.alltoall(&[0u32; 8], &mut vec![0u32; if bad { 7 } else { 8 }]),
    );
    one_rank_errs(device, Collective::Alltoallv, NP, 1, "alltoallv receive: block of rank 3", |c, bad| {
        let recv_displs: &[usize] = if bad { &[0, 1, 2, 4] } else { &[0, 1, 2, 3] };
        c.alltoallv(&[0u32; 4], &[1; 4], &[0, 1, 2, 3], &mut [0u32; 4], &[1; 4], recv_displs)
    });
    one_rank_errs(device, Collective::Reduce, NP, 3, "reduce receive buffer has 1 elements, expected 2", |c, bad| {
        c.reduce(&[1u32, 2], &mut vec![0u32; if bad { 1 } else { 0 }], Sum, 3)
    });
    one_rank_errs(
        device,
        Collective::Allreduce,
        NP,
        2,
        "allreduce receive buffer has 3 elements, expected 2",
        |c, bad| c.allreduce(&[1u32, 2], &mut vec![0u32; if bad { 3 } else { 2 }], Sum),
    );
    one_rank_errs(
        device,
        Collective::ReduceScatter,
        NP,
        1,
        "reduce_scatter_block send buffer has 9 elements, expected 8",
        |c, bad| c.reduce_scatter_block(&vec![1u32; if bad { 9 } else { 8 }], &mut [0u32; 2], Sum),
    );
    one_rank_errs(device, Collective::Scan, NP, 0, "exscan receive buffer has 1 elements, expected 2", |c, bad| {
        c.exscan(&[1u32, 2], &mut vec![0u32; if bad { 1 } else { 2 }], Sum)
    });
    one_rank_errs(
        device,
        Collective::Scatter,
        NP,
        2,
        "scatter_obj: 3 values for a communicator of size 4",
        |c, bad| {
            let values: Vec<u32> = if bad { vec![1, 2, 3] } else { vec![] };
            c.scatter_obj(&values, 2).map(drop)
        },
    );
}

/// Runs `call` on np ranks with `coll` forced to each algorithm in turn; the ranks disagree on
/// the arguments in a way no single rank can see, so the job must end in `Err` (never a hang,
/// and never `Ok`).
fn mismatch_fails(device: DeviceKind, coll: Collective, np: usize, label: &str, call: Call) {
    for alg in algorithms(coll) {
        let what = format!("{coll} with algorithm {alg}, {device:?} np={np}: {label}");
        let result = job(config_on(device, np), &what, move |world| {
            let comm = forced(&world, coll, alg)?;
            call(&comm, false)
        });
        assert!(result.is_err(), "{what}: the job succeeded");
    }
}

#[test]
fn cross_rank_mismatches_end_in_err() {
    mismatches_on(DeviceKind::Shm, &[2, 4, 5]);
}

/// Hybrid, 3 + 2 (a mismatch between processes and inside one).
#[test]
fn cross_rank_mismatches_end_in_err_on_hybrid() {
    mismatches_on(DeviceKind::Hybrid, &[5]);
}

fn mismatches_on(device: DeviceKind, nps: &[usize]) {
    for &np in nps {
        mismatch_fails(device, Collective::Bcast, np, "a receiver's buffer is shorter", |c, _| {
            c.bcast(&mut vec![0u32; if c.rank() == 1 { 8 } else { 10 }], 0)
        });
        mismatch_fails(device, Collective::Bcast, np, "a receiver's buffer is longer", |c, _| {
            c.bcast(&mut vec![0u32; if c.rank() == c.size() - 1 { 12 } else { 10 }], 0)
        });
        mismatch_fails(device, Collective::Bcast, np, "the root's buffer is empty", |c, _| {
            c.bcast(&mut vec![0u8; if c.rank() == 1 { 0 } else { 5 }], 1)
        });
        mismatch_fails(device, Collective::Bcast, np, "large buffers, one element apart", |c, _| {
            c.bcast(&mut vec![0u32; 100_000 + usize::from(c.rank() == c.size() / 2)], c.size() - 1)
        });
        mismatch_fails(device, Collective::Allreduce, np, "one rank reduces more elements", |c, _| {
            let n = if c.rank() == 1 { 1000 } else { 999 };
            c.allreduce(&vec![1u64; n], &mut vec![0u64; n], Sum)
        });
        mismatch_fails(device, Collective::Allgather, np, "one rank sends a shorter block", |c, _| {
            let n = if c.rank() == c.size() - 1 { 2 } else { 3 };
            c.allgather(&vec![1u32; n], &mut vec![0u32; n * c.size()])
        });
        mismatch_fails(device, Collective::Alltoall, np, "one rank exchanges longer blocks", |c, _| {
            let n = if c.rank() == 0 { 5 } else { 4 };
            c.alltoall(&vec![1u32; n * c.size()], &mut vec![0u32; n * c.size()])
        });
        mismatch_fails(device, Collective::Scatter, np, "a receiver expects a longer block", |c, _| {
            let n = if c.rank() == 1 { 4 } else { 3 };
            let send = vec![1u32; if c.rank() == 0 { 3 * c.size() } else { 0 }];
            c.scatter(&send, &mut vec![0u32; n], 0)
        });
        mismatch_fails(device, Collective::Scatterv, np, "a receiver expects a different count", |c, _| {
            let counts = vec![2usize; c.size()];
            let displs: Vec<usize> = (0..c.size()).map(|r| 2 * r).collect();
            let root = c.size() - 1;
            let (cs, ds): (&[usize], &[usize]) = if c.rank() == root { (&counts, &displs) } else { (&[], &[]) };
            let send = vec![1u16; if c.rank() == root { 2 * c.size() } else { 0 }];
            c.scatterv(&send, cs, ds, &mut vec![0u16; if c.rank() == 0 { 1 } else { 2 }], root)
        });
        mismatch_fails(device, Collective::Gatherv, np, "a sender sends more than the root's count", |c, _| {
            let counts = vec![2usize; c.size()];
            let displs: Vec<usize> = (0..c.size()).map(|r| 2 * r).collect();
            let mut recv = vec![0u16; if c.rank() == 0 { 2 * c.size() } else { 0 }];
            let (cs, ds): (&[usize], &[usize]) = if c.rank() == 0 { (&counts, &displs) } else { (&[], &[]) };
            c.gatherv(&vec![1u16; if c.rank() == c.size() - 1 { 3 } else { 2 }], &mut recv, cs, ds, 0)
        });
        mismatch_fails(device, Collective::Allgatherv, np, "ranks disagree on the counts", |c, _| {
            let mut counts = vec![2usize; c.size()];
            if c.rank() == 0 {
                counts[c.size() - 1] = 3;
            }
            let displs: Vec<usize> = (0..c.size()).map(|r| 3 * r).collect();
            let mut recv = vec![0u32; 3 * c.size()];
            c.allgatherv(&vec![1u32; counts[c.rank()]], &mut recv, &counts, &displs)
        });
        mismatch_fails(device, Collective::Alltoallv, np, "a receive count differs from the send count", |c, _| {
            let np = c.size();
            let send_counts = vec![2usize; np];
            let mut recv_counts = vec![2usize; np];
            if c.rank() == np - 1 {
                recv_counts[0] = 1;
            }
            let displs: Vec<usize> = (0..np).map(|r| 2 * r).collect();
            c.alltoallv(&vec![1u8; 2 * np], &send_counts, &displs, &mut vec![0u8; 2 * np], &recv_counts, &displs)
        });
        mismatch_fails(device, Collective::Reduce, np, "one rank reduces fewer elements", |c, _| {
            let n = if c.rank() == c.size() - 1 { 6 } else { 7 };
            let mut recv = vec![0i32; if c.rank() == 0 { 7 } else { 0 }];
            c.reduce(&vec![1i32; n], &mut recv, Sum, 0)
        });
        mismatch_fails(device, Collective::ReduceScatter, np, "one rank's blocks are longer", |c, _| {
            let n = if c.rank() == 0 { 3 } else { 2 };
            c.reduce_scatter_block(&vec![1u64; n * c.size()], &mut vec![0u64; n], Sum)
        });
        mismatch_fails(device, Collective::Scan, np, "one rank scans more elements", |c, _| {
            let n = if c.rank() == c.size() / 2 { 40 } else { 39 };
            c.scan(&vec![1u32; n], &mut vec![0u32; n], Sum)
        });
        mismatch_fails(device, Collective::Gather, np, "one rank sends a longer block", |c, _| {
            let n = if c.rank() == 1 { 4 } else { 3 };
            let mut recv = vec![0u16; if c.rank() == 0 { 3 * c.size() } else { 0 }];
            c.gather(&vec![1u16; n], &mut recv, 0)
        });
    }
}

// ---------------------------------------------------------------- user ops

#[test]
fn a_panicking_user_op_fails_the_job_without_hanging() {
    panicking_user_op_on(DeviceKind::Shm);
}

/// Hybrid, 2 × 2: the victims are rank 0 (a process's first rank) and rank 2 (the other's).
#[test]
fn a_panicking_user_op_fails_the_job_without_hanging_on_hybrid() {
    panicking_user_op_on(DeviceKind::Hybrid);
}

fn panicking_user_op_on(device: DeviceKind) {
    // The op panics on one rank only; peers may be reading that rank's buffers (native
    // reductions) or waiting for its messages. The job must end, and in `Err` whenever the op
    // ran on that rank.
    const NP: usize = 4;
    for coll in [Collective::Reduce, Collective::Allreduce, Collective::ReduceScatter, Collective::Scan] {
        for alg in algorithms(coll) {
            for victim in [0, 2] {
                let what = format!("{coll} with algorithm {alg} on {device:?}: the op panics on rank {victim}");
                let result = job(config_on(device, NP), &what, move |world| {
                    let me = world.rank();
                    let comm = forced(&world, coll, alg)?;
                    let op = UserOp::commutative(move |input: &[u64], inout: &mut [u64]| {
                        assert!(me != victim, "user op panics on rank {me}");
                        for (a, b) in input.iter().zip(inout.iter_mut()) {
                            *b = b.wrapping_add(*a);
                        }
                    });
                    let n = 20_000;
                    let send = vec![me as u64; n];
                    let mut recv = vec![0u64; n];
                    match coll {
                        Collective::Reduce => comm.reduce(&send, &mut recv, &op, victim),
                        Collective::Allreduce => comm.allreduce(&send, &mut recv, &op),
                        Collective::ReduceScatter => comm.reduce_scatter_block(&send, &mut recv[..n / NP], &op),
                        _ => comm.scan(&send, &mut recv, &op),
                    }
                });
                // Peers only fail because of the panic, so the job names the panicking rank
                // (native collectives record the panic before peers can notice it).
                match result {
                    Ok(_) => {}
                    Err(Error::RankFailed { rank, cause }) if rank == victim && cause.contains("panicked") => {}
                    Err(e) => panic!("{what}: unexpected error {e}"),
                }
            }
        }
    }
}

/// A user op that calls a collective on the communicator it is reducing over gets `Err` from
/// that inner call (on the native path it would otherwise republish the rank's slot while the
/// outer reduction still reads peers' buffers); the outer reduction still completes correctly.
#[test]
fn a_collective_inside_a_user_op_on_the_same_communicator_is_an_error() {
    run_ok(3, "allreduce whose op calls a barrier", |world| {
        let tuning = Tuning::defaults()
            .force(Collective::Allreduce, Algorithm::Native)?
            .force(Collective::Barrier, Algorithm::Native)?;
        let comm = world.with_tuning(tuning);
        let inner = std::cell::RefCell::new(Vec::new());
        let op = UserOp::commutative(|input: &[u64], inout: &mut [u64]| {
            inner.borrow_mut().push(comm.barrier());
            for (a, b) in input.iter().zip(inout.iter_mut()) {
                *b += *a;
            }
        });
        let mut sum = [0u64; 4];
        comm.allreduce(&[comm.rank() as u64 + 1; 4], &mut sum, &op)?;
        assert_eq!(sum, [6; 4]);
        let inner = inner.into_inner();
        assert!(!inner.is_empty(), "the op ran on every rank (each reduces a chunk)");
        for result in inner {
            assert!(
                matches!(&result, Err(Error::InvalidArgument(m)) if m.contains("inside another collective")),
                "{result:?}"
            );
        }
        comm.barrier()
    });
}
