//! Where the progress agent has a CPU the ranks leave idle, a step handed to it at a
//! nonblocking start is left to it: the start's own poll does not run the step, so a rank that
//! starts an operation and then computes finds the copy made meanwhile. (When the start's poll
//! helped at once, it ran the copy before a parked agent thread could wake, on most tries.)
//! The shm device's native ialltoall hands its copies to such an agent (and only to such a
//! one). A binary of its own: the agent's plan is process-wide and the first job's decides it,
//! here one rank on a machine of two or more CPUs.

use fastmp::coll::{Algorithm, Collective, Tuning};
use fastmp::{Config, DeviceKind, Error};

/// Bytes of the one alltoall block: above the agent's 64 KiB threshold.
const BLOCK: usize = 256 * 1024;
const TRIES: u64 = 10;

/// One rank with the agent on and `algorithm` forced for alltoall starts an `ialltoall` and
/// sleeps (computes) 20 ms, `TRIES` times: every copy must be handed to the agent, and the
/// agent must have made at least half of them meanwhile. Skipped on one CPU (no idle one).
fn the_agent_makes_the_copies(algorithm: Algorithm) {
    if std::thread::available_parallelism().map_or(1, usize::from) < 2 {
        eprintln!("skipped: one CPU, so no agent has an idle one");
        return;
    }
    Config::new()
        .device(DeviceKind::Shm)
        .np(1)
        .progress_agent(true)
        .run(|world| {
            let comm = world.with_tuning(Tuning::defaults().force(Collective::Alltoall, algorithm)?);
            let send: Vec<u8> = (0..BLOCK).map(|i| (i * 7 + i / 251) as u8).collect();
            let mut recv = vec![0u8; BLOCK];
            let start = fastmp::agent_counts();
            for _ in 0..TRIES {
                recv.fill(0);
                comm.scope(|s| {
                    let request = s.ialltoall(&send, &mut recv)?;
                    // Computing (here: sleeping) without a fastmp call.
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    request.wait().map(drop)
                })?;
                assert_eq!(recv, send, "the copy is complete once the request is");
            }
            let counts = fastmp::agent_counts();
            let (handed, run_elsewhere) = (counts.handed - start.handed, counts.run_elsewhere - start.run_elsewhere);
            assert_eq!(handed, TRIES, "every try hands its copy over");
            if run_elsewhere * 2 < TRIES {
                return Err(Error::other(format!("the agent ran {run_elsewhere} of {TRIES} copies handed to it")));
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{algorithm:?}: {e}"));
}

/// Over messages: the path whose own-block copy goes to the agent.
#[test]
fn a_step_handed_over_at_the_start_is_left_to_an_idle_cpu_agent() {
    the_agent_makes_the_copies(Algorithm::Nbft);
}

/// The native path (one rank: its own block, in chunks).
#[test]
fn the_native_ialltoall_hands_its_copies_to_an_idle_cpu_agent() {
    the_agent_makes_the_copies(Algorithm::Native);
}
