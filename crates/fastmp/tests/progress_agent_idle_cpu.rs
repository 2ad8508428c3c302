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

/// Whether this machine gives one rank an idle CPU (else the tests have nothing to check).
fn has_idle_cpu() -> bool {
    let idle = std::thread::available_parallelism().map_or(1, usize::from) >= 2;
    if !idle {
        eprintln!("skipped: one CPU, so no agent has an idle one");
    }
    idle
}

#[test]
fn a_step_handed_over_at_the_start_is_left_to_an_idle_cpu_agent() {
    if !has_idle_cpu() {
        return;
    }
    Config::new()
        .device(DeviceKind::Shm)
        .np(1)
        .progress_agent(true)
        .run(|world| {
            // Over messages: the path whose own-block copy goes to the agent.
            let comm = world.with_tuning(Tuning::defaults().force(Collective::Alltoall, Algorithm::Nbft)?);
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
        .unwrap();
}

/// The native ialltoall (one rank: its own block) hands its copy to the agent, which makes it
/// while the rank computes.
#[test]
fn the_native_ialltoall_hands_its_copies_to_an_idle_cpu_agent() {
    if !has_idle_cpu() {
        return;
    }
    Config::new()
        .device(DeviceKind::Shm)
        .np(1)
        .progress_agent(true)
        .run(|world| {
            let comm = world.with_tuning(Tuning::defaults().force(Collective::Alltoall, Algorithm::Native)?);
            let send: Vec<u8> = (0..BLOCK).map(|i| (i * 5 + i / 257) as u8).collect();
            let mut recv = vec![0u8; BLOCK];
            let start = fastmp::agent_counts();
            for _ in 0..TRIES {
                recv.fill(0);
                comm.scope(|s| {
                    let request = s.ialltoall(&send, &mut recv)?;
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
        .unwrap();
}
