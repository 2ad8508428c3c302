//! Ranks that disagree on lengths: every collective, every algorithm, on shm and tcp, ends in
//! `Err` within the watchdog (never a hang, never `Ok`), and no message names an internal tag.
//! Also the case where the ranks' sizes make them choose different algorithms (the default
//! tables switch between message-based and native algorithms by size on shm).

mod coll_common;

use coll_common::job;
use fastmp::coll::{Algorithm, Collective, Tuning};
use fastmp::op::Sum;
use fastmp::{Comm, Config, DeviceKind, Error, Result};

type Call = fn(&Comm, usize) -> Result<()>;

/// One mismatched call per collective; `n` scales the lengths (rank 1 always differs).
fn mismatched(coll: Collective) -> Call {
    match coll {
        Collective::Barrier => |_, _| Err(Error::other("barrier has no lengths")),
        Collective::Bcast => |c, n| c.bcast(&mut vec![0u32; if c.rank() == 1 { n / 10 + 1 } else { n }], 0),
        Collective::Scatter => |c, n| {
            let send = vec![1u32; if c.rank() == 0 { n * c.size() } else { 0 }];
            c.scatter(&send, &mut vec![0u32; if c.rank() == 1 { n + 1 } else { n }], 0)
        },
        Collective::Scatterv => |c, n| {
            let (counts, displs) = (vec![n; c.size()], (0..c.size()).map(|r| n * r).collect::<Vec<_>>());
            let send = vec![1u32; n * c.size()];
            c.scatterv(&send, &counts, &displs, &mut vec![0u32; if c.rank() == 1 { n + 1 } else { n }], 0)
        },
        Collective::Gather => |c, n| {
            let mut recv = vec![0u32; if c.rank() == 0 { n * c.size() } else { 0 }];
            c.gather(&vec![1u32; if c.rank() == 1 { n + 1 } else { n }], &mut recv, 0)
        },
        Collective::Gatherv => |c, n| {
            let (counts, displs) = (vec![n; c.size()], (0..c.size()).map(|r| n * r).collect::<Vec<_>>());
            let mut recv = vec![0u32; n * c.size()];
            c.gatherv(&vec![1u32; if c.rank() == 1 { n + 1 } else { n }], &mut recv, &counts, &displs, 0)
        },
        Collective::Allgather => |c, n| {
            let n = if c.rank() == 1 { n + 1 } else { n };
            c.allgather(&vec![1u32; n], &mut vec![0u32; n * c.size()])
        },
        Collective::Allgatherv => |c, n| {
            let mut counts = vec![n; c.size()];
            if c.rank() == 1 {
                counts[0] = n + 1;
            }
            let displs: Vec<usize> = (0..c.size()).map(|r| (n + 1) * r).collect();
            let mut recv = vec![0u32; (n + 1) * c.size()];
            c.allgatherv(&vec![1u32; counts[c.rank()]], &mut recv, &counts, &displs)
        },
        Collective::Alltoall => |c, n| {
            let n = if c.rank() == 1 { n + 1 } else { n };
            c.alltoall(&vec![1u32; n * c.size()], &mut vec![0u32; n * c.size()])
        },
        Collective::Alltoallv => |c, n| {
            let np = c.size();
            let mut recv_counts = vec![n; np];
            if c.rank() == 1 {
                recv_counts[0] = n + 1;
            }
            let displs: Vec<usize> = (0..np).map(|r| (n + 1) * r).collect();
            let mut recv = vec![0u32; (n + 1) * np];
            c.alltoallv(&vec![1u32; (n + 1) * np], &vec![n; np], &displs, &mut recv, &recv_counts, &displs)
        },
        Collective::Reduce => |c, n| {
            let n = if c.rank() == 1 { n + 1 } else { n };
            let mut recv = vec![0u64; if c.rank() == 0 { n } else { 0 }];
            c.reduce(&vec![1u64; n], &mut recv, Sum, 0)
        },
        Collective::Allreduce => |c, n| {
            let n = if c.rank() == 1 { n + 1 } else { n };
            c.allreduce(&vec![1u64; n], &mut vec![0u64; n], Sum)
        },
        Collective::ReduceScatter => |c, n| {
            let n = if c.rank() == 1 { n + 1 } else { n };
            c.reduce_scatter_block(&vec![1u64; n * c.size()], &mut vec![0u64; n], Sum)
        },
        Collective::Scan => |c, n| {
            let n = if c.rank() == 1 { n + 1 } else { n };
            c.scan(&vec![1u64; n], &mut vec![0u64; n], Sum)
        },
    }
}

/// Runs `call` on `np` ranks of `device` and checks that the job fails with a message free of
/// internal tags.
fn fails(device: DeviceKind, np: usize, tuning: Tuning, what: &str, call: Call, n: usize) {
    let config = Config::new().device(device).np(np).tuning(tuning);
    match job(config, what, move |world| call(&world, n)) {
        Ok(_) => panic!("{what}: the job succeeded"),
        Err(e) => {
            let text = e.to_string();
            assert!(!text.contains("tag"), "{what}: the error names a tag: {text}");
        }
    }
}

fn matrix(device: DeviceKind) {
    let nps: &[usize] = if device == DeviceKind::Hybrid { &[2, 3, 5] } else { &[2, 3] };
    for &np in nps {
        for coll in Collective::ALL.into_iter().filter(|&c| c != Collective::Barrier) {
            for &algorithm in coll.algorithms() {
                let tuning = Tuning::defaults_for(device).force(coll, algorithm).expect("force");
                let what = format!("{device:?} np {np} {coll} {algorithm}");
                fails(device, np, tuning, &what, mismatched(coll), 3);
            }
        }
    }
}

#[test]
fn every_algorithm_fails_on_mismatched_lengths_on_shm() {
    matrix(DeviceKind::Shm);
}

#[test]
fn every_algorithm_fails_on_mismatched_lengths_on_tcp() {
    matrix(DeviceKind::Tcp);
}

/// Hybrid at np 2 and 3 (1 + 1, 2 + 1) and 5 (3 + 2).
#[test]
fn every_algorithm_fails_on_mismatched_lengths_on_hybrid() {
    matrix(DeviceKind::Hybrid);
}

/// Sizes on either side of the default tables' switches (for bcast at np 2: nbft up to 1 KiB,
/// native above), so the ranks pick different algorithms: the reported hang (root 1000
/// elements, rank 1 ten) among them.
#[test]
fn ranks_choosing_different_algorithms_fail_instead_of_hanging() {
    for device in [DeviceKind::Shm, DeviceKind::Tcp] {
        different_algorithms_on(device);
    }
}

/// Hybrid at np 3 (2 + 1): bcast at n 20 000 makes the root and rank 2 choose `hierarchical`
/// and rank 1 `bt`; the root waited for rank 1 inside its process's native bcast until rank 1's
/// flat choice passed the local level's operation by (`Run::chose`).
#[test]
fn ranks_choosing_different_algorithms_fail_instead_of_hanging_on_hybrid() {
    different_algorithms_on(DeviceKind::Hybrid);
}

fn different_algorithms_on(device: DeviceKind) {
    for np in [2, 3] {
        for coll in Collective::ALL.into_iter().filter(|&c| c != Collective::Barrier) {
            for n in [1000, 20_000] {
                let what = format!("{device:?} np {np} {coll} default tuning, n {n}");
                fails(device, np, Tuning::defaults_for(device), &what, mismatched(coll), n);
            }
        }
    }
}

/// One correct call per collective (`n` elements per block); only the algorithms differ.
fn agreeing(coll: Collective) -> Call {
    match coll {
        Collective::Barrier => |c, _| c.barrier(),
        Collective::Bcast => |c, n| c.bcast(&mut vec![1u32; n], 0),
        Collective::Scatter => |c, n| c.scatter(&vec![1u32; n * c.size()], &mut vec![0u32; n], 0),
        Collective::Scatterv => |c, n| {
            let (counts, displs) = uniform(c, n);
            c.scatterv(&vec![1u32; n * c.size()], &counts, &displs, &mut vec![0u32; n], 0)
        },
        Collective::Gather => |c, n| c.gather(&vec![1u32; n], &mut vec![0u32; n * c.size()], 0),
        Collective::Gatherv => |c, n| {
            let (counts, displs) = uniform(c, n);
            c.gatherv(&vec![1u32; n], &mut vec![0u32; n * c.size()], &counts, &displs, 0)
        },
        Collective::Allgather => |c, n| c.allgather(&vec![1u32; n], &mut vec![0u32; n * c.size()]),
        Collective::Allgatherv => |c, n| {
            let (counts, displs) = uniform(c, n);
            c.allgatherv(&vec![1u32; n], &mut vec![0u32; n * c.size()], &counts, &displs)
        },
        Collective::Alltoall => |c, n| c.alltoall(&vec![1u32; n * c.size()], &mut vec![0u32; n * c.size()]),
        Collective::Alltoallv => |c, n| {
            let (counts, displs) = uniform(c, n);
            c.alltoallv(&vec![1u32; n * c.size()], &counts, &displs, &mut vec![0u32; n * c.size()], &counts, &displs)
        },
        Collective::Reduce => |c, n| c.reduce(&vec![1u64; n], &mut vec![0u64; n], Sum, 0),
        Collective::Allreduce => |c, n| c.allreduce(&vec![1u64; n], &mut vec![0u64; n], Sum),
        Collective::ReduceScatter => |c, n| c.reduce_scatter_block(&vec![1u64; n * c.size()], &mut vec![0u64; n], Sum),
        Collective::Scan => |c, n| c.scan(&vec![1u64; n], &mut vec![0u64; n], Sum),
    }
}

/// `n` elements from every rank, packed in rank order.
fn uniform(c: &Comm, n: usize) -> (Vec<usize>, Vec<usize>) {
    (vec![n; c.size()], (0..c.size()).map(|r| n * r).collect())
}

/// The first message-based algorithm of `coll` (one a hierarchical rank's peers may choose).
fn flat(coll: Collective) -> Algorithm {
    let flat = coll.algorithms().iter().find(|&&a| a != Algorithm::Native && a != Algorithm::Hierarchical);
    *flat.expect("every collective has a message-based algorithm")
}

/// Runs `call` on `config` with rank `odd` forcing `choices.0` for `coll` and every other rank
/// `choices.1`, and checks that the job fails (with no tag in its message).
fn straddle<F>(config: Config, what: &str, coll: Collective, odd: usize, choices: (Algorithm, Algorithm), call: F)
where
    F: Fn(&Comm) -> Result<()> + Send + Sync + 'static,
{
    straddle_ranks(config, what, coll, move |rank| rank == odd, choices, call);
}

/// [`straddle`] with every rank for which `odd` holds forcing `choices.0`.
fn straddle_ranks<F>(
    config: Config,
    what: &str,
    coll: Collective,
    odd: impl Fn(usize) -> bool + Send + Sync + 'static,
    choices: (Algorithm, Algorithm),
    call: F,
) where
    F: Fn(&Comm) -> Result<()> + Send + Sync + 'static,
{
    let outcome = job(config, what, move |world| {
        let algorithm = if odd(world.rank()) { choices.0 } else { choices.1 };
        let tuning = Tuning::defaults_for(DeviceKind::Hybrid).force(coll, algorithm)?;
        call(&world.with_tuning(tuning))
    });
    match outcome {
        Ok(_) => panic!("{what}: the job succeeded"),
        Err(e) => assert!(!e.to_string().contains("tag"), "{what}: the error names a tag: {e}"),
    }
}

/// Every collective, in both directions, with the odd rank the root (a leader) or another
/// member of its process: `config` must put ranks 0 and 1 in one process.
fn straddles_fail(config: impl Fn() -> Config, label: &str) {
    for coll in Collective::ALL {
        // The same calls succeed where the ranks agree (so the failures below are the straddles').
        for algorithm in [Algorithm::Hierarchical, flat(coll)] {
            let what = format!("{label} {coll}: every rank {algorithm}");
            let tuning = Tuning::defaults_for(DeviceKind::Hybrid).force(coll, algorithm).expect("force");
            let outcome = job(config().tuning(tuning), &what, move |world| agreeing(coll)(&world, 5));
            outcome.unwrap_or_else(|e| panic!("{what}: {e}"));
        }
        for odd in [0, 1] {
            for choices in [(Algorithm::Hierarchical, flat(coll)), (flat(coll), Algorithm::Hierarchical)] {
                let what = format!("{label} {coll}: rank {odd} {} among {}", choices.0, choices.1);
                straddle(config(), &what, coll, odd, choices, move |c| agreeing(coll)(c, 5));
            }
        }
    }
}

/// A rank choosing a flat algorithm among process peers choosing `hierarchical`, and the
/// reverse (found as a hang with bcast by the suite above): hybrid at np 3 (2 + 1).
#[test]
fn hierarchical_and_flat_choices_in_one_process_fail_on_hybrid() {
    straddles_fail(|| Config::new().device(DeviceKind::Hybrid).np(3), "hybrid np 3");
}

/// The same where a rank's first native wait is on its NUMA node's communicator: 2 simulated
/// processes of 3 ranks, each over 2 simulated NUMA nodes (ranks 0 and 1 on one, 2 on the
/// other), on shm.
#[test]
fn hierarchical_and_flat_choices_fail_across_numa_levels() {
    let config = || Config::new().np(6).simulate_processes(3).simulate_numa(2);
    straddles_fail(config, "shm np 6 (3 + 3, 2 NUMA nodes each)");
}

/// Nonblocking straddles: the hierarchical rank's level steps yield instead of waiting in place.
#[test]
fn nonblocking_hierarchical_and_flat_choices_fail() {
    let hybrid = || Config::new().device(DeviceKind::Hybrid).np(3);
    for odd in [0, 1] {
        for choices in [(Algorithm::Hierarchical, Algorithm::Bt), (Algorithm::Bt, Algorithm::Hierarchical)] {
            let what = format!("ibcast: rank {odd} {} among {}", choices.0, choices.1);
            straddle(hybrid(), &what, Collective::Bcast, odd, choices, |c| {
                let mut buf = vec![1u32; 1000];
                c.scope(|s| s.ibcast(&mut buf, 0)?.wait().map(drop))
            });
        }
        let choices = (Algorithm::Hierarchical, Algorithm::Bde);
        let what = format!("iallreduce: rank {odd} hierarchical among bde");
        straddle(hybrid(), &what, Collective::Allreduce, odd, choices, |c| {
            let mut recv = vec![0u64; 100];
            c.scope(|s| s.iallreduce(&[1u64; 100], &mut recv, Sum)?.wait().map(drop))
        });
    }
}

/// A whole process choosing a flat algorithm while the other chooses `hierarchical` (no
/// native operation is shared across the processes to mark bypassed): hybrid np 4 (2 + 2),
/// every collective, both directions, blocking, with the second process odd and then the
/// first; then nonblocking bcast and allreduce.
#[test]
fn whole_processes_choosing_differently_fail() {
    let hybrid = || Config::new().device(DeviceKind::Hybrid).np(4).threads_per_process(2);
    for coll in Collective::ALL {
        for first_odd in [false, true] {
            for choices in [(Algorithm::Hierarchical, flat(coll)), (flat(coll), Algorithm::Hierarchical)] {
                let what =
                    format!("hybrid 2 + 2 {coll}: process {} {} among {}", first_odd as u8 ^ 1, choices.0, choices.1);
                let odd = move |rank: usize| (rank < 2) == first_odd;
                straddle_ranks(hybrid(), &what, coll, odd, choices, move |c| agreeing(coll)(c, 5000));
            }
        }
    }
    for choices in [(Algorithm::Hierarchical, Algorithm::Bt), (Algorithm::Bt, Algorithm::Hierarchical)] {
        let what = format!("hybrid 2 + 2 ibcast: process 1 {} among {}", choices.0, choices.1);
        straddle_ranks(
            hybrid(),
            &what,
            Collective::Bcast,
            |rank| rank >= 2,
            choices,
            |c| {
                let mut buf = vec![1u32; 5000];
                c.scope(|s| s.ibcast(&mut buf, 0)?.wait().map(drop))
            },
        );
    }
    for choices in [(Algorithm::Hierarchical, Algorithm::Bde), (Algorithm::Bde, Algorithm::Hierarchical)] {
        let what = format!("hybrid 2 + 2 iallreduce: process 1 {} among {}", choices.0, choices.1);
        straddle_ranks(
            hybrid(),
            &what,
            Collective::Allreduce,
            |rank| rank >= 2,
            choices,
            |c| {
                let mut recv = vec![0u64; 5000];
                c.scope(|s| s.iallreduce(&[1u64; 5000], &mut recv, Sum)?.wait().map(drop))
            },
        );
    }
}

#[test]
fn mismatch_messages_name_the_call_and_the_argument() {
    let outcome = job(Config::new().np(2), "gatherv message", |world| {
        let (counts, displs) = ([1usize, 0], [0usize, 1]);
        // Counts and displacements swapped at the root: rank 1 sends one element, the root's
        // recvcounts[1] (which the caller meant as a displacement) is 0.
        let mut recv = [0u32; 2];
        let sent = [7u32];
        let result = world.gatherv(&sent, &mut recv, &displs, &counts, 0);
        if world.rank() == 0 {
            let e = result.expect_err("the root sees the mismatch");
            let text = e.to_string();
            assert!(text.contains("gatherv"), "{text}");
            assert!(
                text.contains("gatherv: the root's send buffer has 1 elements but its recvcounts[0] is 0"),
                "{text}"
            );
        }
        Ok(())
    });
    // Rank 1 may or may not see the root's failure, depending on the algorithm.
    drop(outcome);
}
