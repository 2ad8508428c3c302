//! Failure attribution: after one rank fails (panics or returns an error), `run` names that rank
//! in `Error::RankFailed`, and every survivor's pending operation fails with `Error::PeerFailed`
//! naming it — never a survivor, never a rank that only relayed the abort, never an
//! "abandoned the operation" argument error. On both devices, with thread ranks.

use std::sync::Mutex;

use fastmp::op::{Sum, UserOp};
use fastmp::{Comm, Config, DeviceKind, Error, Result};

/// How a rank's program ended, as far as attribution is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Ended {
    /// Not recorded (the failing rank itself).
    Unrecorded,
    /// The survivor's operation failed with `PeerFailed` naming this rank.
    PeerFailed(usize),
    /// Anything else: the survivor's operation succeeded or failed otherwise.
    Other(String),
}

fn summarize<T>(outcome: &Result<T>) -> Ended {
    match outcome {
        Err(Error::PeerFailed { rank, .. }) => Ended::PeerFailed(*rank),
        Err(e) => Ended::Other(format!("{e:?}")),
        Ok(_) => Ended::Other("succeeded".into()),
    }
}

fn configs() -> [(&'static str, Config); 2] {
    [("shm", Config::new()), ("tcp", Config::new().device(DeviceKind::Tcp))]
}

/// How the failing rank fails.
#[derive(Clone, Copy, Debug)]
enum Failure {
    Panic,
    Error,
}

impl Failure {
    fn fail(self, rank: usize) -> Result<()> {
        match self {
            Failure::Panic => panic!("rank {rank} fails on purpose"),
            Failure::Error => Err(Error::other(format!("rank {rank} fails on purpose"))),
        }
    }

    fn cause_mentions(self) -> &'static str {
        match self {
            Failure::Panic => "panicked: rank",
            Failure::Error => "fails on purpose",
        }
    }
}

/// Runs `body` on `np` ranks of `config`; rank `failing` must fail, every other rank returns
/// what its operation got (recorded), and the job must end in `RankFailed` naming `failing`
/// with every survivor seeing `PeerFailed` naming it.
fn check_attribution(
    device: &str,
    config: &Config,
    np: usize,
    failing: usize,
    failure: Failure,
    body: impl Fn(&Comm) -> Result<()> + Sync,
) {
    let seen = Mutex::new(vec![Ended::Unrecorded; np]);
    let result = config.clone().np(np).run(|world| {
        let outcome = body(&world);
        if world.rank() != failing {
            seen.lock().unwrap()[world.rank()] = summarize(&outcome);
        }
        outcome
    });
    match result {
        Err(Error::RankFailed { rank, cause }) => {
            assert_eq!(rank, failing, "{device} {failure:?}: run blamed rank {rank} ({cause})");
            assert!(
                cause.contains(failure.cause_mentions()),
                "{device} {failure:?}: cause {cause:?} is not the failing rank's own"
            );
        }
        other => panic!("{device} {failure:?}: run returned {other:?}, expected RankFailed naming {failing}"),
    }
    let seen = seen.into_inner().unwrap();
    for (rank, ended) in seen.iter().enumerate().filter(|&(r, _)| r != failing) {
        assert_eq!(ended, &Ended::PeerFailed(failing), "{device} {failure:?}: survivor {rank}");
    }
}

/// Every rank starts nonblocking collectives; the failing rank fails with them outstanding, the
/// others wait for theirs.
#[test]
fn failure_with_nonblocking_collectives_outstanding_names_the_failed_rank() {
    for (device, config) in configs() {
        for failure in [Failure::Panic, Failure::Error] {
            for _ in 0..3 {
                check_attribution(device, &config, 4, 2, failure, |world| {
                    let mine = [world.rank() as u64 + 1; 4];
                    let mut sum = [0u64; 4];
                    world.scope(|s| {
                        let mut reqs = vec![s.ibarrier()?, s.iallreduce(&mine, &mut sum, Sum)?];
                        if world.rank() == 2 {
                            failure.fail(2)?;
                        }
                        fastmp::waitall(&mut reqs).map(drop)
                    })?;
                    // Survivors whose operations completed before the failure wait on the failed rank.
                    world.barrier()
                });
            }
        }
    }
}

/// The root of small nonblocking collectives fails before it starts them; the others only
/// poll theirs with `test` (never wait), so their receives are polled, not waited for, and must
/// still learn of the failure.
#[test]
fn failure_of_a_root_its_pollers_never_wait_for_names_the_failed_rank() {
    for (device, config) in configs() {
        for failure in [Failure::Panic, Failure::Error] {
            check_attribution(device, &config, 4, 1, failure, |world| {
                if world.rank() == 1 {
                    failure.fail(1)?;
                }
                let mut data = [0u32; 2];
                let mut share = [0u64; 1];
                let table = [0u64; 4];
                world.scope(|s| {
                    let mut reqs = [s.ibcast(&mut data, 1)?, s.iscatter(&table, &mut share, 1)?];
                    loop {
                        for req in reqs.iter_mut().filter(|r| r.is_active()) {
                            req.test()?;
                        }
                        if reqs.iter().all(|r| !r.is_active()) {
                            return Ok(());
                        }
                    }
                })
            });
        }
    }
}

/// The failing rank fails after a barrier while its peers are blocked in an allreduce.
#[test]
fn failure_before_a_blocking_allreduce_names_the_failed_rank() {
    for (device, config) in configs() {
        for failure in [Failure::Panic, Failure::Error] {
            check_attribution(device, &config, 4, 1, failure, |world| {
                world.barrier()?;
                if world.rank() == 1 {
                    failure.fail(1)?;
                }
                let mut sum = [0u64; 2];
                world.allreduce(&[1u64, 2], &mut sum, Sum)
            });
        }
    }
}

/// Sixteen ranks, one of which panics inside the allreduce (in its reduction operation, if the
/// algorithm has it fold anything): run names it and all fifteen survivors get `PeerFailed` naming
/// it.
#[test]
fn sixteen_ranks_one_fails_mid_allreduce() {
    for (device, config) in configs() {
        check_attribution(device, &config, 16, 5, Failure::Panic, |world| {
            let rank = world.rank();
            let op = UserOp::commutative(move |input: &[u64], inout: &mut [u64]| {
                assert!(rank != 5, "rank 5 fails on purpose");
                for (a, b) in input.iter().zip(inout.iter_mut()) {
                    *b += a;
                }
            });
            let mut sum = [0u64; 16];
            world.allreduce(&[1u64; 16], &mut sum, op)?;
            // Which ranks fold depends on the algorithm: one that did not fails right after.
            assert!(rank != 5, "rank 5 fails on purpose");
            // Survivors that finished the allreduce before the failure wait on the failed rank.
            world.barrier()
        });
    }
}

/// Sixteen ranks, one returns an error instead of joining the allreduce.
#[test]
fn sixteen_ranks_one_returns_an_error_instead_of_allreducing() {
    for (device, config) in configs() {
        check_attribution(device, &config, 16, 11, Failure::Error, |world| {
            if world.rank() == 11 {
                Failure::Error.fail(11)?;
            }
            let mut sum = [0u64; 2];
            world.allreduce(&[1u64, 1], &mut sum, Sum)
        });
    }
}
