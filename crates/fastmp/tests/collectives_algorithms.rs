//! Every algorithm of every collective against sequential references.
//!
//! One parameterized suite: for every [`Collective`] and every algorithm it implements (forced
//! through the communicator's tuning), every process count of [`NPS`], sizes of 0, 1 and 3
//! elements plus one of at least 1 MiB whose length is not a multiple of the process count,
//! and several roots (the cases: `collectives_common`). All cases of one collective and process
//! count run inside one job.
//!
//! Further: full sweeps on reordered sub-communicators, on 33 and 64 ranks and with other eager
//! limits, size-dependent tuning rules, other arities of the k-ary bcast, every collective on the
//! tcp device, and every algorithm on the hybrid device.
//!
//! Hybrid (processes of thread ranks over loopback tcp, all in this test process): every
//! algorithm of every collective, hierarchical included, at np 6 as 2 × 3, np 5 as 3 + 2 and
//! np 7 as 3 + 3 + 1, at the sizes 0, 1, 3 and 2053 elements (past the eager limit) and every
//! root; the > 1 MiB case only at np 6 (it is most of the sweep's cost, about 5 s per np on a
//! 2-core machine, and the odd counts' large messages take the same paths), and through the
//! default selection at every np (`every_collective_runs_on_hybrid`).
//!
//! Every job runs under a watchdog (`FASTMP_TEST_TIMEOUT_S`, default 120 s) so a hang fails the
//! test instead of blocking.

mod coll_common;
mod collectives_common;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use coll_common::{Context, NPS, algorithms, check_each, forced, job, roots, run_ok, val};
use collectives_common::{Case, LARGE, check_case, is_rooted, sizes, sweep, sweep_algorithms};
use fastmp::coll::{Algorithm, Collective, Rule, Tuning};
use fastmp::{Config, DeviceKind};

/// Every algorithm of `coll`, every size and root, on `np` ranks in one job.
fn check_collective_on(coll: Collective, np: usize) {
    let barriers = Arc::new(AtomicUsize::new(0));
    run_ok(np, &format!("{coll} suite"), move |world| {
        let mut barriers_done = 0;
        for alg in algorithms(coll) {
            let comm = forced(&world, coll, alg)?;
            assert_eq!(comm.algorithm_for(coll, 0, true), alg, "{coll}: forcing {alg} did not select it");
            for n in sizes(coll, np) {
                let case_roots = if is_rooted(coll) { roots(np).into_iter().map(Some).collect() } else { vec![None] };
                for root in case_roots {
                    check_case(&comm, Case { coll, alg, np, n, root }, &barriers, &mut barriers_done)?;
                }
            }
        }
        Ok(())
    });
}

fn check_collective(coll: Collective) {
    for np in NPS {
        check_collective_on(coll, np);
    }
}

macro_rules! every_collective {
    ($($test:ident => $coll:ident),+ $(,)?) => {
        $(
            #[test]
            fn $test() {
                check_collective(Collective::$coll);
            }
        )+

        /// The tests above cover every collective there is.
        #[test]
        fn suite_covers_every_collective() {
            assert_eq!([$(Collective::$coll),+], Collective::ALL);
        }
    };
}

every_collective! {
    barrier_every_algorithm => Barrier,
    bcast_every_algorithm => Bcast,
    scatter_every_algorithm => Scatter,
    scatterv_every_algorithm => Scatterv,
    gather_every_algorithm => Gather,
    gatherv_every_algorithm => Gatherv,
    allgather_every_algorithm => Allgather,
    allgatherv_every_algorithm => Allgatherv,
    alltoall_every_algorithm => Alltoall,
    alltoallv_every_algorithm => Alltoallv,
    reduce_every_algorithm => Reduce,
    allreduce_every_algorithm => Allreduce,
    reduce_scatter_every_algorithm => ReduceScatter,
    scan_every_algorithm => Scan,
}

// ---------------------------------------------------------------- full sweeps

#[test]
fn every_algorithm_on_sub_communicators() {
    // Members in a different order than in the world, and sub-communicators of different sizes
    // working at the same time.
    for (np, colors) in [(7, 2), (16, 3)] {
        let barriers: Arc<Vec<AtomicUsize>> = Arc::new((0..colors).map(|_| AtomicUsize::new(0)).collect());
        run_ok(np, "sub-communicator sweep", move |world| {
            let me = world.rank();
            let color = me % colors;
            let key = if color == 1 { -(me as i32) } else { me as i32 };
            let sub = world.split(Some(color as u32), key)?.expect("every rank has a color");
            let mut done = 0;
            sweep(&sub, &[0, 1, 3, 1001], &barriers[color], &mut done)
                .ctx(|| format!("on the sub-communicator of color {color} (world rank {me}, sub rank {})", sub.rank()))
        });
    }
}

#[test]
fn every_algorithm_on_many_ranks() {
    // More ranks than the suite's largest np, and not a power of two: deeper trees, more rounds.
    for np in [33, 64] {
        let barriers = Arc::new(AtomicUsize::new(0));
        run_ok(np, "many-rank sweep", move |world| {
            let mut done = 0;
            sweep(&world, &[0, 1, 3, 700], &barriers, &mut done)
        });
    }
}

#[test]
fn size_dependent_rules_select_the_same_algorithm_on_every_rank() {
    // A table whose rules switch algorithm every few bytes: every rank of a call must still make
    // the same choice (selection only uses sizes all ranks know).
    let mut tuning = Tuning::defaults();
    for coll in Collective::ALL {
        let algs = algorithms(coll);
        let mut rules: Vec<Rule> = algs
            .iter()
            .enumerate()
            .map(|(i, &algorithm)| Rule {
                max_np: None,
                max_bytes: Some(4 * i),
                locality: None,
                cores: None,
                algorithm,
            })
            .collect();
        rules.push(Rule::always(algs[algs.len() / 2]));
        tuning.set_rules(coll, rules).expect("valid rules");
    }
    for np in [3, 5] {
        let barriers = Arc::new(AtomicUsize::new(0));
        let config = Config::new().np(np).tuning(tuning.clone());
        job(config, "size-dependent rules", move |world| {
            let mut done = 0;
            for coll in Collective::ALL {
                for n in [0, 1, 2, 3, 4, 5, 6, 2053] {
                    let roots = if is_rooted(coll) { roots(np).into_iter().map(Some).collect() } else { vec![None] };
                    for root in roots {
                        // The algorithm named in failures is the one for a vector of n u32.
                        let alg = world.algorithm_for(coll, 4 * n, true);
                        check_case(&world, Case { coll, alg, np, n, root }, &barriers, &mut done)?;
                    }
                }
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("size-dependent rules, np={np}: {e}"));
    }
}

#[test]
fn every_algorithm_with_other_eager_limits() {
    for eager_limit in [0, 64, 1 << 20] {
        for np in [3, 8] {
            let barriers = Arc::new(AtomicUsize::new(0));
            let what = format!("sweep with eager limit {eager_limit}");
            let config = Config::new().np(np).eager_limit(eager_limit);
            job(config, &what, move |world| {
                let mut done = 0;
                sweep(&world, &[1, 3, 2053], &barriers, &mut done).ctx(|| format!("eager limit {eager_limit}"))
            })
            .unwrap_or_else(|e| panic!("{what}, np={np}: {e}"));
        }
    }
}

// ---------------------------------------------------------------- tree arity and the tcp device

/// The k-ary tree's arity is a tuning parameter (four by default); other arities broadcast
/// correctly from every root.
#[test]
fn kary_bcast_with_other_arities() {
    for arity in [1, 2, 3, 7] {
        for np in [1, 2, 5, 8, 16] {
            run_ok(np, &format!("fat bcast with arity {arity}"), move |world| {
                let tuning = Tuning::defaults().force(Collective::Bcast, Algorithm::Fat)?.with_kary_arity(arity)?;
                let comm = world.with_tuning(tuning);
                for root in roots(np) {
                    let mut data: Vec<u32> =
                        (0..1000).map(|i| if comm.rank() == root { val(root as u32, arity, i) } else { 0 }).collect();
                    comm.bcast(&mut data, root)?;
                    check_each(&data, |i| val(root as u32, arity, i), &|| {
                        format!("arity {arity}, np {np}, root {root}")
                    });
                }
                Ok(())
            });
        }
    }
}

/// Every collective gives the same results on the tcp device (thread ranks over loopback
/// sockets, default selection, so the point-to-point algorithms run) as the arithmetic says,
/// for small and rendezvous-sized data and non-power-of-two rank counts.
#[test]
fn every_collective_runs_on_tcp() {
    every_collective_on(DeviceKind::Tcp, &[1, 3, 4], &[1, 3000, 70_000]);
}

/// The same on the hybrid device (default selection: hierarchical and the hybrid table's
/// rules), 2 × 3, 3 + 2 and 3 + 3 + 1, up to just over 1 MiB.
#[test]
fn every_collective_runs_on_hybrid() {
    every_collective_on(DeviceKind::Hybrid, &[5, 6, 7], &[1, 3000, 270_000]);
}

/// Every algorithm of every collective on the hybrid device (see the file's documentation).
#[test]
fn every_algorithm_on_hybrid() {
    for np in [6, 5, 7] {
        let barriers = Arc::new(AtomicUsize::new(0));
        job(hybrid(np), "hybrid sweep", move |world| {
            let mut done = 0;
            // Hierarchical too: the ranks are in several processes.
            let every = |coll: Collective| coll.algorithms().to_vec();
            let sizes: &[usize] = if np == 6 { &[0, 1, 3, 2053, LARGE] } else { &[0, 1, 3, 2053] };
            sweep_algorithms(&world, sizes, every, &barriers, &mut done)
        })
        .unwrap_or_else(|e| panic!("hybrid sweep, np={np}: {e}"));
    }
}

/// A hybrid job of `np` ranks: 3 per process (so 2 × 3, 3 + 2, 3 + 3 + 1).
fn hybrid(np: usize) -> Config {
    Config::new().device(DeviceKind::Hybrid).np(np).threads_per_process(3)
}

fn every_collective_on(device: DeviceKind, nps: &[usize], sizes: &[usize]) {
    use fastmp::op::Sum;
    for &np in nps {
        for &n in sizes {
            let config = match device {
                DeviceKind::Hybrid => hybrid(np),
                other => Config::new().device(other).np(np),
            };
            job(config, &format!("{device:?} collectives np={np} n={n}"), move |world| {
                let (rank, size) = (world.rank(), world.size());
                let value = |r: usize, i: usize| (r * 7 + i) as u64;
                world.barrier()?;
                let mut b: Vec<u64> = if rank == size - 1 { (0..n).map(|i| value(9, i)).collect() } else { vec![0; n] };
                world.bcast(&mut b, size - 1)?;
                assert!(b.iter().enumerate().all(|(i, &x)| x == value(9, i)), "bcast");
                let mine: Vec<u64> = (0..n).map(|i| value(rank, i)).collect();
                let mut sum = vec![0u64; n];
                world.allreduce(&mine, &mut sum, Sum)?;
                assert!(
                    sum.iter().enumerate().all(|(i, &x)| x == (0..size).map(|r| value(r, i)).sum::<u64>()),
                    "allreduce"
                );
                let mut all = vec![0u64; n * size];
                world.allgather(&mine, &mut all)?;
                assert!(
                    (0..size).all(|r| all[r * n..(r + 1) * n] == (0..n).map(|i| value(r, i)).collect::<Vec<_>>()[..]),
                    "allgather"
                );
                let send: Vec<u64> = (0..n * size).map(|i| value(rank, i)).collect();
                let mut got = vec![0u64; n * size];
                world.alltoall(&send, &mut got)?;
                assert!((0..size).all(|r| (0..n).all(|i| got[r * n + i] == value(r, rank * n + i))), "alltoall");
                let mut block = vec![0u64; n];
                world.reduce_scatter_block(&send, &mut block, Sum)?;
                assert!(
                    (0..n).all(|i| block[i] == (0..size).map(|r| value(r, rank * n + i)).sum::<u64>()),
                    "reduce_scatter_block"
                );
                let mut prefix = vec![0u64; n];
                world.scan(&mine, &mut prefix, Sum)?;
                assert!((0..n).all(|i| prefix[i] == (0..=rank).map(|r| value(r, i)).sum::<u64>()), "scan");
                let mut gathered = if rank == 0 { vec![0u64; n * size] } else { Vec::new() };
                world.gather(&mine, &mut gathered, 0)?;
                if rank == 0 {
                    assert_eq!(gathered, all, "gather");
                }
                let mut part = vec![0u64; n];
                let source = if rank == 0 { all.clone() } else { Vec::new() };
                world.scatter(&source, &mut part, 0)?;
                assert_eq!(part, mine, "scatter");
                Ok(())
            })
            .unwrap();
        }
    }
}
