//! The progress agent's automatic mode (`Config::progress_agent_auto`, `FASTMP_PROGRESS_AGENT=auto`):
//! it starts where the ranks leave one of the process's CPUs idle, and not where they take every
//! CPU. A binary of its own: the agent is process-wide and, once on, stays on.

use fastmp::coll::{Algorithm, Collective, Tuning};
use fastmp::{Config, affinity};

/// Bytes per alltoall block: above the agent's 64 KiB threshold.
const BLOCK: usize = 80 * 1024;

/// Items each rank handed to the agent during an `ialltoall` over messages (whose own-block
/// copy is agent work) on `np` thread ranks pinned compactly, the agent in its automatic mode.
fn handed_at(np: usize) -> Vec<u64> {
    Config::new()
        .np(np)
        .pin(fastmp::Pin::Compact)
        .progress_agent_auto()
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
        // The ranks are pinned (compact): the agent runs on the CPU they leave, not on the
        // core of the rank whose step started it (where it would wait for that rank).
        let allowed = affinity::allowed_cpus();
        let ranks: Vec<usize> =
            (0..cpus - 1).filter_map(|r| affinity::cpu_for(fastmp::Pin::Compact, r, cpus - 1, &allowed)).collect();
        let agents = agent_threads_cpus();
        assert!(!agents.is_empty(), "no fastmp-progress-agent thread in /proc/self/task");
        for (name, on) in agents {
            assert!(on.iter().all(|c| !ranks.contains(c)), "{name} may run on {on:?}, where the ranks are ({ranks:?})");
        }
    }
}

/// The CPUs each progress agent thread of this process may run on, from /proc.
fn agent_threads_cpus() -> Vec<(String, Vec<usize>)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    let mut agents = Vec::new();
    for task in tasks.flatten() {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default().trim().to_string();
        if !name.starts_with("fastmp-progress") {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or("").trim();
        agents.push((name, cpu_list(list)));
    }
    agents
}

/// A kernel CPU list such as `0-2,5`.
fn cpu_list(text: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let (lo, hi): (usize, usize) = (lo.parse().expect("cpu list"), hi.parse().expect("cpu list"));
        cpus.extend(lo..=hi);
    }
    cpus
}
