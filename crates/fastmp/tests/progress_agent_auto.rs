//! The progress agent's automatic mode (the default, `FASTMP_PROGRESS_AGENT=auto`): it starts
//! where the ranks leave one of the process's CPUs idle, and not where they take every CPU. A
//! binary of its own: the agent is process-wide and, once on, stays on.

use fastmp::coll::{Algorithm, Collective, Tuning};
use fastmp::{Config, affinity};

/// Bytes per alltoall block: above the agent's 64 KiB threshold.
const BLOCK: usize = 80 * 1024;

/// Items each rank handed to the agent during an `ialltoall` over messages (whose own-block
/// copy is agent work) on `np` thread ranks with the default configuration.
fn handed_at(np: usize) -> Vec<u64> {
    Config::new()
        .np(np)
        .run(|world| {
            let tuning = Tuning::defaults().force(Collective::Alltoall, Algorithm::Nbft)?;
            let comm = world.with_tuning(tuning);
            let send = vec![comm.rank() as u8; BLOCK * np];
            let mut recv = vec![0u8; send.len()];
            let before = fastmp::agent_counts().handed;
            comm.scope(|s| s.ialltoall(&send, &mut recv)?.wait().map(drop))?;
            assert!(recv.chunks(BLOCK).enumerate().all(|(r, block)| block.iter().all(|&b| b == r as u8)));
            Ok(fastmp::agent_counts().handed - before)
        })
        .expect("the ialltoall job")
}

#[test]
fn the_agent_starts_by_itself_only_where_a_cpu_is_idle() {
    let cpus = affinity::allowed_cpus().len().max(1);
    // Every CPU has a rank: the agent would take time from them, so it stays off.
    assert_eq!(handed_at(cpus), vec![0; cpus], "{cpus} ranks on {cpus} CPUs handed items to an agent");
    if cpus > 1 {
        let handed = handed_at(cpus - 1);
        assert!(handed.iter().all(|&h| h > 0), "{} ranks on {cpus} CPUs: no agent ({handed:?})", cpus - 1);
    }
}
