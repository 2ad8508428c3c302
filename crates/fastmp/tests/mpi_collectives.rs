//! The collectives on the mpi device, delegated to the MPI library (`native`, the device's
//! default) and with fastmp's algorithms forced by name. Processes are ranks: run under mpirun
//! by `scripts/mpi-device.sh` (np 2 and 4, `FASTMP_DEVICE=mpi`, `--test-threads=1` so every
//! process runs the same tests in the same order). Without `FASTMP_DEVICE=mpi` every test says
//! so and returns.
#![cfg(feature = "mpi")]

mod coll_common;
mod collectives_common;

use std::sync::atomic::AtomicUsize;

use coll_common::{Context, check_each, roots, val};
use collectives_common::{Case, LARGE, SENTINEL, check_case, is_rooted, large_block};
use fastmp::coll::{Algorithm, Collective};
use fastmp::op::{Band, Bor, Bxor, Land, Loc, Lor, Lxor, Max, MaxLoc, Min, MinLoc, Op, Prod, Sum, UserOp};
use fastmp::{Comm, Config, Result};

/// Runs `f` as this process's rank of the mpi-device job, or returns at once (saying why)
/// outside mpirun.
fn on_mpi(what: &str, f: impl Fn(Comm) -> Result<()> + Sync) {
    if std::env::var("FASTMP_DEVICE").as_deref() != Ok("mpi") {
        eprintln!("{what}: skipped (run under mpirun with FASTMP_DEVICE=mpi: scripts/mpi-device.sh)");
        return;
    }
    let config = Config::from_env().unwrap_or_else(|e| panic!("{what}: {e}"));
    config
        .run(|world| {
            assert_eq!(world.device_name(), "mpi", "{what}: FASTMP_DEVICE=mpi runs on the mpi device");
            f(world)
        })
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// Every collective but the barrier (see [`barrier_waits_for_every_rank`]) on `comm` with
/// `alg`, for each of `sizes` (elements, scaled to blocks as the shared suite does) and every
/// root.
fn sweep(comm: &Comm, colls: &[Collective], alg: Algorithm, sizes: impl Fn(Collective) -> Vec<usize>) -> Result<()> {
    let np = comm.size();
    let (barriers, mut done) = (AtomicUsize::new(0), 0);
    for &coll in colls {
        let c = comm.with_tuning(comm.tuning().clone().force(coll, alg)?);
        let case_roots: Vec<Option<usize>> =
            if is_rooted(coll) { roots(np).into_iter().map(Some).collect() } else { vec![None] };
        for n in sizes(coll) {
            for &root in &case_roots {
                check_case(&c, Case { coll, alg, np, n, root }, &barriers, &mut done)?;
            }
        }
    }
    Ok(())
}

fn all_but_barrier() -> Vec<Collective> {
    Collective::ALL.into_iter().filter(|&c| c != Collective::Barrier).collect()
}

#[test]
fn every_collective_runs_on_the_mpi_library_at_every_size() {
    on_mpi("native sweep", |world| {
        for coll in Collective::ALL {
            assert_eq!(world.algorithm_for(coll, 1 << 20, false), Algorithm::Native, "{coll}: the mpi default");
        }
        let np = world.size();
        sweep(&world, &all_but_barrier(), Algorithm::Native, |coll| {
            let large = if collectives_common::sizes(coll, np)[4] == LARGE { LARGE } else { large_block(np) };
            vec![0, 1, 3, 2053, large]
        })
    });
}

#[test]
fn fastmp_algorithms_stay_selectable_by_name() {
    on_mpi("forced algorithms", |world| {
        // Message-based algorithms over the device's point-to-point, and composites whose parts
        // are the MPI library's again (allreduce reduce_bcast: MPI_Reduce then MPI_Bcast).
        let picks = [
            (Collective::Bcast, Algorithm::Bt),
            (Collective::Scatterv, Algorithm::Mst),
            (Collective::Allgather, Algorithm::Bkt),
            (Collective::Alltoallv, Algorithm::Nbft),
            (Collective::Allreduce, Algorithm::Rabenseifner),
            (Collective::Allreduce, Algorithm::ReduceBcast),
            (Collective::ReduceScatter, Algorithm::ReduceScatter),
            (Collective::Scan, Algorithm::Linear),
        ];
        for (coll, alg) in picks {
            let c = world.with_tuning(world.tuning().clone().force(coll, alg)?);
            assert_eq!(c.algorithm_for(coll, 64, true), alg);
            sweep(&world, &[coll], alg, |_| vec![0, 5, 3000])?;
        }
        Ok(())
    });
}

#[test]
fn barrier_waits_for_every_rank() {
    on_mpi("barrier", |world| {
        let (me, np) = (world.rank(), world.size());
        // Every rank leaves a mark in a directory all processes see, then each checks all
        // marks are there after the barrier: a barrier that let a rank through early fails.
        let mut nonce = [if me == 0 { std::process::id() as u64 } else { 0 }];
        world.bcast(&mut nonce, 0)?;
        let dir = std::env::temp_dir().join(format!("fastmp-mpi-barrier-{}", nonce[0]));
        std::fs::create_dir_all(&dir).map_err(|e| fastmp::Error::other(e.to_string()))?;
        for round in 0..3 {
            let mark = |r: usize| dir.join(format!("{round}-{r}"));
            std::fs::write(mark(me), b"").map_err(|e| fastmp::Error::other(e.to_string()))?;
            if round == 1 {
                world.scope(|s| s.ibarrier()?.wait().map(drop))?;
            } else {
                world.barrier()?;
            }
            for r in 0..np {
                assert!(mark(r).exists(), "round {round}: rank {me} left the barrier before rank {r} entered it");
            }
        }
        world.barrier()?;
        if me == 0 {
            let _ = std::fs::remove_dir_all(&dir);
        }
        Ok(())
    });
}

/// Affine maps x ↦ a·x + b composed: associative, not commutative.
fn compose(l: [u64; 2], r: [u64; 2]) -> [u64; 2] {
    [l[0].wrapping_mul(r[0]), l[0].wrapping_mul(r[1]).wrapping_add(l[1])]
}

fn affine(rank: usize, n: usize) -> Vec<[u64; 2]> {
    (0..n).map(|i| [u64::from(val(7, rank, i)) | 1, u64::from(val(9, rank, i))]).collect()
}

/// `x(ranks.start) ∘ … ∘ x(ranks.end - 1)` computed locally with `op`, each rank's vector from
/// `input(rank)`.
fn reference<T: Copy>(op: &dyn Op<T>, ranks: std::ops::Range<usize>, input: impl Fn(usize) -> Vec<T>) -> Vec<T> {
    let mut ranks = ranks.rev();
    let mut acc = input(ranks.next().expect("at least one rank"));
    for r in ranks {
        op.combine(&input(r), &mut acc);
    }
    acc
}

/// Every reduction with `op` on `T` against the local reference, blocking and nonblocking.
fn check_reductions<T>(world: &Comm, op: &dyn Op<T>, input: impl Fn(usize) -> Vec<T>, what: &str) -> Result<()>
where
    T: bytemuck::Pod + PartialEq + std::fmt::Debug,
{
    let (me, np) = (world.rank(), world.size());
    let root = np - 1;
    let mine = input(me);
    let n = mine.len();
    let all = reference(op, 0..np, &input);
    let ctx = |call: &str| format!("{what}: {call} on rank {me}");

    let mut got = mine.clone();
    world.allreduce(&mine, &mut got, op).ctx(|| ctx("allreduce"))?;
    assert_eq!(got, all, "{}", ctx("allreduce"));
    let mut got = mine.clone();
    world.scope(|s| s.iallreduce_in_place(&mut got, op)?.wait().map(drop)).ctx(|| ctx("iallreduce_in_place"))?;
    assert_eq!(got, all, "{}", ctx("iallreduce_in_place"));

    let mut got = if me == root { mine.clone() } else { Vec::new() };
    world.reduce(&mine, &mut got, op, root).ctx(|| ctx("reduce"))?;
    if me == root {
        assert_eq!(got, all, "{}", ctx("reduce"));
    }
    let mut got = mine.clone();
    world.scope(|s| s.ireduce(&mine, &mut got, op, 0)?.wait().map(drop)).ctx(|| ctx("ireduce"))?;
    assert_eq!(got, if me == 0 { all.clone() } else { mine.clone() }, "{}", ctx("ireduce"));

    let mut got = mine.clone();
    world.scan(&mine, &mut got, op).ctx(|| ctx("scan"))?;
    assert_eq!(got, reference(op, 0..me + 1, &input), "{}", ctx("scan"));
    let mut got = mine.clone();
    world.scope(|s| s.iscan(&mine, &mut got, op)?.wait().map(drop)).ctx(|| ctx("iscan"))?;
    assert_eq!(got, reference(op, 0..me + 1, &input), "{}", ctx("iscan"));
    let mut got = mine.clone();
    world.scope(|s| s.iexscan(&mine, &mut got, op)?.wait().map(drop)).ctx(|| ctx("iexscan"))?;
    let want = if me == 0 { mine.clone() } else { reference(op, 0..me, &input) };
    assert_eq!(got, want, "{}", ctx("iexscan (rank 0's untouched)"));

    // Uneven blocks (rank 1's empty) of the reduced vector.
    let counts: Vec<usize> = (0..np).map(|r| if r == 1 { 0 } else { n / np + r % 2 }).collect();
    let total: usize = counts.iter().sum();
    if total <= n {
        let start: usize = counts[..me].iter().sum();
        let mut got = mine[..counts[me]].to_vec();
        world.reduce_scatter(&mine[..total], &mut got, &counts, op).ctx(|| ctx("reduce_scatter"))?;
        assert_eq!(got, all[start..start + counts[me]], "{}", ctx("reduce_scatter"));
        let mut got = mine[..counts[me]].to_vec();
        world
            .scope(|s| s.ireduce_scatter(&mine[..total], &mut got, &counts, op)?.wait().map(drop))
            .ctx(|| ctx("ireduce_scatter"))?;
        assert_eq!(got, all[start..start + counts[me]], "{}", ctx("ireduce_scatter"));
    }
    Ok(())
}

#[test]
fn typed_reductions_with_every_predefined_op_and_user_ops() {
    on_mpi("typed reductions", |world| {
        let n = 37;
        let ints = |r: usize| (0..n).map(|i| (val(1, r, i) % 200) as i32 - 100).collect::<Vec<i32>>();
        let bits = |r: usize| (0..n).map(|i| val(2, r, i) as u8 % 3).collect::<Vec<u8>>();
        let wide = |r: usize| (0..n).map(|i| u64::from(val(3, r, i)) << 20).collect::<Vec<u64>>();
        let floats = |r: usize| (0..n).map(|i| f64::from(val(4, r, i) % 1000) / 8.0).collect::<Vec<f64>>();
        let small = |r: usize| (0..n).map(|i| (val(5, r, i) % 5) as i16 - 2).collect::<Vec<i16>>();
        for (name, op) in [("sum", &Sum as &dyn Op<i32>), ("prod", &Prod), ("min", &Min), ("max", &Max)] {
            check_reductions(&world, op, ints, &format!("i32 {name}"))?;
        }
        for (name, op) in [("land", &Land as &dyn Op<u8>), ("lor", &Lor), ("lxor", &Lxor), ("band", &Band)] {
            check_reductions(&world, op, bits, &format!("u8 {name}"))?;
        }
        for (name, op) in [("bor", &Bor as &dyn Op<u64>), ("bxor", &Bxor), ("sum", &Sum), ("max", &Max)] {
            check_reductions(&world, op, wide, &format!("u64 {name}"))?;
        }
        check_reductions(&world, &Prod, small, "i16 prod")?;
        check_reductions(&world, &Sum, |r| floats(r).iter().map(|&x| x as f32).collect::<Vec<f32>>(), "f32 sum")?;
        // Sums of multiples of 1/8 below 2^20 are exact in any order.
        check_reductions(&world, &Sum, floats, "f64 sum")?;
        // Float min/max keep Rust's NaN rule (the other operand wins), so they are folded here.
        let with_nan = |r: usize| {
            let mut v = floats(r);
            v[r % n] = f64::NAN;
            v
        };
        let (me, np) = (world.rank(), world.size());
        let mut got = vec![0.0; n];
        world.allreduce(&with_nan(me), &mut got, Max)?;
        let mut want = with_nan(0);
        (1..np).for_each(|r| Max.combine(&with_nan(r), &mut want));
        assert!(got.iter().zip(&want).all(|(g, w)| g == w || (g.is_nan() && w.is_nan())), "f64 max with NaN");
        assert!(got.iter().all(|g| !g.is_nan()), "a NaN operand yields the other (np {np} ranks)");
        // Pairs and user closures: gathered through MPI and folded in rank order.
        let locs = |r: usize| (0..n).map(|i| Loc { value: f64::from(val(6, r, i) % 4), index: r as i64 }).collect();
        check_reductions(&world, &MinLoc, locs, "minloc")?;
        check_reductions(&world, &MaxLoc, locs, "maxloc")?;
        let matmul = UserOp::non_commutative(|input: &[[u64; 2]], inout: &mut [[u64; 2]]| {
            for (l, r) in input.iter().zip(inout.iter_mut()) {
                *r = compose(*l, *r);
            }
        });
        check_reductions(&world, &matmul, |r| affine(r, n), "non-commutative user op")?;
        check_reductions(&world, &matmul, |r| affine(r, 40_000), "non-commutative user op, large")?;
        let max_abs = UserOp::commutative(|input: &[i64], inout: &mut [i64]| {
            for (a, b) in input.iter().zip(inout.iter_mut()) {
                *b = (*b).max(a.abs());
            }
        });
        check_reductions(&world, &max_abs, |r| vec![r as i64 * -3; 5], "commutative user op")
    });
}

#[test]
fn a_collective_inside_a_user_op_fails_clearly() {
    on_mpi("collective in a user op", |world| {
        let inner = std::cell::Cell::new(None);
        let calls_barrier = UserOp::commutative(|input: &[u32], inout: &mut [u32]| {
            inner.set(Some(world.barrier().is_err()));
            inout.iter_mut().zip(input).for_each(|(b, a)| *b += a);
        });
        let mut got = [0u32];
        world.allreduce(&[1], &mut got, &calls_barrier)?;
        assert_eq!(got, [world.size() as u32]);
        assert_eq!(inner.get(), Some(true), "the nested barrier was refused");
        Ok(())
    });
}

#[test]
fn in_place_variants_match_their_out_of_place_twins() {
    on_mpi("in place", |world| {
        let (me, np) = (world.rank(), world.size());
        let root = np - 1;
        for n in [0, 3, 5000] {
            let data = |r: usize| (0..n).map(|i| val(11, r, i)).collect::<Vec<u32>>();
            let mut want = vec![0; n];
            world.allreduce(&data(me), &mut want, Sum)?;
            let mut buf = data(me);
            world.allreduce_in_place(&mut buf, Sum)?;
            assert_eq!(buf, want, "allreduce_in_place n={n}");

            let mut buf = data(me);
            world.reduce_in_place(&mut buf, Sum, root)?;
            if me == root {
                assert_eq!(buf, want, "reduce_in_place n={n}");
            }

            let all: Vec<u32> = (0..np).flat_map(data).collect();
            let mut buf = vec![SENTINEL; n * np];
            buf[me * n..][..n].copy_from_slice(&data(me));
            world.allgather_in_place(&mut buf)?;
            assert_eq!(buf, all, "allgather_in_place n={n}");
            let mut buf = vec![SENTINEL; n * np];
            buf[me * n..][..n].copy_from_slice(&data(me));
            world.scope(|s| s.iallgather_in_place(&mut buf)?.wait().map(drop))?;
            assert_eq!(buf, all, "iallgather_in_place n={n}");

            // Block j of rank i's buffer is val(i * np + j); afterwards block i of rank j's.
            let blocks =
                |r: usize| (0..np).flat_map(|j| (0..n).map(move |i| val(12, r * np + j, i))).collect::<Vec<_>>();
            let want: Vec<u32> = (0..np).flat_map(|j| (0..n).map(move |i| val(12, j * np + me, i))).collect();
            let mut buf = blocks(me);
            world.alltoall_in_place(&mut buf)?;
            assert_eq!(buf, want, "alltoall_in_place n={n}");
            let mut buf = blocks(me);
            world.scope(|s| s.ialltoall_in_place(&mut buf)?.wait().map(drop))?;
            assert_eq!(buf, want, "ialltoall_in_place n={n}");

            let counts: Vec<usize> = (0..np).map(|r| if r % 2 == 0 { n } else { n / 2 }).collect();
            let displs: Vec<usize> = (0..np).map(|r| counts[..r].iter().sum::<usize>() + r).collect();
            let len = displs[np - 1] + counts[np - 1];
            let mut buf = vec![SENTINEL; len];
            buf[displs[me]..][..counts[me]].copy_from_slice(&data(me)[..counts[me]]);
            world.allgatherv_in_place(&mut buf, &counts, &displs)?;
            for r in 0..np {
                assert_eq!(buf[displs[r]..][..counts[r]], data(r)[..counts[r]], "allgatherv_in_place block {r}");
            }

            let mut buf = data(me);
            world.scan_in_place(&mut buf, Sum)?;
            let want: Vec<u32> =
                (0..n).map(|i| (0..=me).fold(0u32, |acc, r| acc.wrapping_add(val(11, r, i)))).collect();
            assert_eq!(buf, want, "scan_in_place n={n}");

            let mut buf = data(me);
            world.exscan_in_place(&mut buf, Sum)?;
            let want: Vec<u32> = if me == 0 {
                data(0)
            } else {
                (0..n).map(|i| (0..me).fold(0u32, |acc, r| acc.wrapping_add(val(11, r, i)))).collect()
            };
            assert_eq!(buf, want, "exscan_in_place n={n} (rank 0 keeps its buffer)");

            // Rank i and rank j trade (i + j) % 3 * n / 2 elements each way, blocks one apart.
            let count = |i: usize, j: usize| (i + j) % 3 * n / 2;
            let counts: Vec<usize> = (0..np).map(|j| count(me, j)).collect();
            let displs: Vec<usize> = (0..np).map(|j| counts[..j].iter().sum::<usize>() + j).collect();
            let mut buf = vec![SENTINEL; displs[np - 1] + counts[np - 1] + 1];
            for j in 0..np {
                for (k, x) in buf[displs[j]..][..counts[j]].iter_mut().enumerate() {
                    *x = val(13, me * np + j, k);
                }
            }
            world.alltoallv_in_place(&mut buf, &counts, &displs)?;
            for j in 0..np {
                let want: Vec<u32> = (0..counts[j]).map(|k| val(13, j * np + me, k)).collect();
                assert_eq!(buf[displs[j]..][..counts[j]], want, "alltoallv_in_place block {j} n={n}");
            }
        }
        Ok(())
    });
}

#[test]
fn nonblocking_collectives_overlap_and_blocking_ones_run_meanwhile() {
    on_mpi("overlapping nonblocking", |world| {
        let (me, np) = (world.rank(), world.size());
        for n in [1usize, 70_000] {
            let mut data = if me == 0 { (0..n as u32).collect() } else { vec![SENTINEL; n] };
            let mine: Vec<u64> = vec![me as u64 + 1; n];
            let mut total = vec![0u64; n];
            let send: Vec<u32> = (0..np * 3).map(|k| (me * 1000 + k) as u32).collect();
            let mut recv = vec![SENTINEL; np * 3];
            let mut gathered = vec![SENTINEL; np];
            world.scope(|s| {
                let bcast = s.ibcast(&mut data, 0)?;
                let reduced = s.iallreduce(&mine, &mut total, Sum)?;
                let exchanged = s.ialltoall(&send, &mut recv)?;
                // A blocking collective while three are in flight: it waits in the device,
                // which keeps driving them, and MPI sees the calls in the same order everywhere.
                world.allgather(&[me as u32], &mut gathered)?;
                exchanged.wait()?;
                reduced.wait()?;
                bcast.wait().map(drop)
            })?;
            check_each(&data, |i| i as u32, &|| format!("ibcast n={n} on rank {me}"));
            let sum = (np * (np + 1) / 2) as u64;
            check_each(&total, |_| sum, &|| format!("iallreduce n={n} on rank {me}"));
            check_each(&recv, |k| ((k / 3) * 1000 + me * 3 + k % 3) as u32, &|| format!("ialltoall on rank {me}"));
            check_each(&gathered, |r| r as u32, &|| format!("allgather on rank {me}"));
        }
        // A request dropped unwaited is finished by its scope (MPI cannot cancel it).
        let mut buf = [me as u32; 4];
        world.scope(|s| s.ibcast(&mut buf, np - 1).map(drop))?;
        assert_eq!(buf, [np as u32 - 1; 4]);
        Ok(())
    });
}

#[test]
fn split_communicators_have_their_own_mpi_collectives() {
    on_mpi("split", |world| {
        let me = world.rank();
        let half = world.split(Some((me % 2) as u32), -(me as i32))?.expect("every rank has a color");
        assert_eq!(half.algorithm_for(Collective::Allreduce, 8, true), Algorithm::Native);
        sweep(&half, &all_but_barrier(), Algorithm::Native, |_| vec![0, 7, 3000])?;
        // Collectives on the halves and the world interleave without mixing up.
        let mut sum = [0u64];
        half.allreduce(&[me as u64], &mut sum, Sum)?;
        let want: u64 = (0..world.size()).filter(|r| r % 2 == me % 2).map(|r| r as u64).sum();
        assert_eq!(sum, [want]);
        world.barrier()
    });
}

#[test]
fn mismatched_arguments_that_mpi_detects_are_errors() {
    on_mpi("mismatched arguments", |world| {
        let me = world.rank();
        // Pairs of ranks, so a failing receiver never leaves a forwarding tree waiting.
        let pair = world.split(Some((me / 2) as u32), me as i32)?.expect("every rank has a color");
        if pair.size() == 2 {
            // The root broadcasts 16 bytes where rank 1 expects 8: MPI reports the truncation.
            let mut buf = vec![1u8; if pair.rank() == 0 { 16 } else { 8 }];
            let outcome = pair.bcast(&mut buf, 0);
            if pair.rank() == 1 {
                let err = outcome.expect_err("a longer broadcast than the buffer");
                assert!(err.to_string().contains("MPI_Bcast"), "the error names the call: {err}");
                assert!(err.to_string().to_lowercase().contains("trunc"), "MPI's reason: {err}");
            }
        }
        drop(pair);
        world.barrier()
    });
}

#[test]
fn nonblocking_argument_errors_come_from_the_start_and_use_no_operation() {
    on_mpi("nonblocking argument errors", |world| {
        let np = world.size();
        let mut buf = [0u32; 4];
        let mut short = [0u32; 3];
        let (five, mut into) = ([1u32; 5], [0u32; 5]);
        world.scope(|s| {
            let err = s.ibcast(&mut buf, np).map(drop).expect_err("a root out of range");
            assert!(err.to_string().contains("root"), "{err}");
            let err = s.iallreduce(&[1u32; 4], &mut short, Sum).map(drop).expect_err("a short receive buffer");
            assert!(err.to_string().contains("allreduce"), "{err}");
            let err = s.ialltoall(&five, &mut into).map(drop);
            assert_eq!(err.is_err(), 5 % np != 0, "alltoall blocks that do not split: {err:?}");
            Ok::<_, fastmp::Error>(())
        })?;
        // The failed starts took no operation number: the ranks still agree on the next one.
        let mut total = [0u64];
        world.scope(|s| s.iallreduce(&[1u64], &mut total, Sum)?.wait().map(drop))?;
        assert_eq!(total, [np as u64]);
        let user = UserOp::commutative(|a: &[u64], b: &mut [u64]| b.iter_mut().zip(a).for_each(|(b, a)| *b += a));
        world.scope(|s| s.iallreduce(&[2u64], &mut total, user)?.wait().map(drop))?;
        assert_eq!(total, [2 * np as u64], "a user op folds outside MPI on the nonblocking path too");
        Ok(())
    });
}

/// The nonblocking `v` collectives on MPI, with gaps between blocks: their requests keep the
/// counts and displacements they were given (the caller's vectors may go before the wait), and
/// their arguments are checked at the start, as the blocking twins' are.
#[test]
fn nonblocking_v_collectives_keep_their_counts_and_check_them_at_the_start() {
    on_mpi("nonblocking v", |world| {
        let (me, np) = (world.rank(), world.size());
        let root = np - 1;
        // Rank r's block has r + 1 elements; one element of gap after each block.
        let counts: Vec<usize> = (0..np).map(|r| r + 1).collect();
        let displs: Vec<usize> = (0..np).map(|r| r * (r + 1) / 2 + r).collect();
        let total = displs[np - 1] + counts[np - 1] + 1;
        let source: Vec<u32> = (0..total as u32).collect();
        let mine: Vec<u32> = (0..=me as u32).map(|k| me as u32 * 100 + k).collect();
        let at_root = if me == root { total } else { 0 };
        let (mut scattered, mut gathered, mut everyone) =
            (vec![SENTINEL; me + 1], vec![SENTINEL; at_root], vec![SENTINEL; total]);
        // alltoallv: rank i sends i + 1 elements to every rank, packed; receives with gaps.
        let send_counts = vec![me + 1; np];
        let send_displs: Vec<usize> = (0..np).map(|j| j * (me + 1)).collect();
        let send: Vec<u32> =
            (0..np).flat_map(|j| (0..=me as u32).map(move |k| me as u32 * 1000 + j as u32 * 10 + k)).collect();
        let mut exchanged = vec![SENTINEL; total];
        world.scope(|s| {
            let (c, d) = (counts.clone(), displs.clone());
            let (sc, sd) = (send_counts.clone(), send_displs.clone());
            let scatter = s.iscatterv(&source, &c, &d, &mut scattered, root)?;
            let gather = s.igatherv(&mine, &mut gathered, &c, &d, root)?;
            let allgather = s.iallgatherv(&mine, &mut everyone, &c, &d)?;
            let alltoall = s.ialltoallv(&send, &sc, &sd, &mut exchanged, &c, &d)?;
            drop((c, d, sc, sd));
            alltoall.wait()?;
            allgather.wait()?;
            gather.wait()?;
            scatter.wait().map(drop)
        })?;
        let block_of = |at: usize| (0..np).find(|&r| (displs[r]..displs[r] + counts[r]).contains(&at));
        let gathered_value = |at: usize| block_of(at).map_or(SENTINEL, |r| r as u32 * 100 + (at - displs[r]) as u32);
        check_each(&scattered, |k| (displs[me] + k) as u32, &|| format!("iscatterv on rank {me}"));
        check_each(&everyone, gathered_value, &|| format!("iallgatherv on rank {me}"));
        if me == root {
            check_each(&gathered, gathered_value, &|| "igatherv at the root".into());
        }
        let exchanged_value =
            |at: usize| block_of(at).map_or(SENTINEL, |i| i as u32 * 1000 + me as u32 * 10 + (at - displs[i]) as u32);
        check_each(&exchanged, exchanged_value, &|| format!("ialltoallv on rank {me}"));
        // Counts every rank can see are wrong: `Err` at the start, and no operation taken.
        world.scope(|s| {
            let err = s.iallgatherv(&mine, &mut everyone, &counts[1..], &displs[1..]).map(drop);
            assert!(err.as_ref().is_err_and(|e| e.to_string().contains("allgatherv")), "short counts: {err:?}");
            let err = s.ialltoallv(&send, &send_counts, &send_displs, &mut exchanged[..1], &counts, &displs).map(drop);
            assert!(
                err.as_ref().is_err_and(|e| e.to_string().contains("alltoallv")),
                "a short receive buffer: {err:?}"
            );
            Ok::<_, fastmp::Error>(())
        })?;
        let mut sum = [0u64];
        world.scope(|s| s.iallreduce(&[1u64], &mut sum, Sum)?.wait().map(drop))?;
        assert_eq!(sum, [np as u64], "the ranks still agree on the next operation");
        Ok(())
    });
}
