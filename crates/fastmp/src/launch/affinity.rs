//! Pinning rank threads to CPUs (Linux `sched_setaffinity`; a no-op elsewhere), choosing them
//! from the machine's topology (`machine.rs`).

use super::config::Pin;
use crate::error::{Error, Result};
use crate::machine::MachineTopology;

/// CPUs this process may run on, in ascending order.
#[cfg(target_os = "linux")]
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `cpu_set_t` is plain data; zeroed is a valid empty set, and the kernel writes at most
    // `size_of::<cpu_set_t>()` bytes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

#[cfg(not(target_os = "linux"))]
pub fn allowed_cpus() -> Vec<usize> {
    Vec::new()
}

/// Ranks competing for the cores this process may run on, when it holds `per_process` thread
/// ranks and is one of `processes` launched processes: only its own where the launcher bound it
/// to a part of the machine (it then has those CPUs to itself, as fastmprun and `mpirun
/// --bind-to` arrange), otherwise every rank of the processes on this node (from the launcher's
/// local size, else all of them).
pub(crate) fn competing_ranks(per_process: usize, processes: usize) -> Result<usize> {
    let bound = allowed_cpus().len() < crate::machine::topology().cpus().len();
    if bound {
        return Ok(per_process);
    }
    let mut local = None;
    for var in ["FASTMP_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"] {
        if let Some(n) = super::config::env_parse::<usize>(var)? {
            local = Some(n);
            break;
        }
    }
    Ok(per_process * local.unwrap_or(processes).clamp(1, processes.max(1)))
}

/// The CPU `rank` of `np` goes to under `pin`, given the allowed CPUs `cpus`, on this machine's
/// [`topology`](crate::topology) (see [`cpu_for_in`]).
///
/// ```
/// use fastmp::{Pin, affinity};
/// let cpus = affinity::allowed_cpus();
/// if let Some(cpu) = affinity::cpu_for(Pin::Compact, 0, 2, &cpus) {
///     assert!(cpus.contains(&cpu));
/// }
/// assert_eq!(affinity::cpu_for(Pin::None, 0, 2, &cpus), None);
/// ```
pub fn cpu_for(pin: Pin, rank: usize, np: usize, cpus: &[usize]) -> Option<usize> {
    cpu_for_in(crate::topology(), pin, rank, np, cpus)
}

/// The CPU `rank` of `np` goes to under `pin` on `machine`, given the allowed CPUs `cpus`
/// (only those count; `None` for [`Pin::None`] or when none is allowed):
/// - [`Pin::Compact`]: one hardware thread of every core in package/core order, then the
///   cores' second SMT siblings, and so on;
/// - [`Pin::Scatter`]: round-robin over NUMA nodes, each node's CPUs taken in compact order;
/// - [`Pin::Numa`]: contiguous blocks per NUMA node (rank r on node `r * nodes / np` among the
///   nodes with allowed CPUs), compact inside the node.
///
/// More ranks than CPUs wrap around. Allowed CPUs the topology does not know are ignored,
/// unless it knows none of them: then they count as one flat node of single-thread cores.
///
/// ```
/// use fastmp::{MachineTopology, Pin, affinity::cpu_for_in};
/// // Without SMT or NUMA information every pinning fills the CPUs in order.
/// let flat = MachineTopology::flat(&[0, 1, 2, 3]);
/// assert_eq!(cpu_for_in(&flat, Pin::Compact, 1, 4, &[0, 1, 2, 3]), Some(1));
/// assert_eq!(cpu_for_in(&flat, Pin::Numa, 3, 4, &[2, 3]), Some(3));
/// ```
pub fn cpu_for_in(machine: &MachineTopology, pin: Pin, rank: usize, np: usize, cpus: &[usize]) -> Option<usize> {
    if pin == Pin::None || cpus.is_empty() {
        return None;
    }
    let mut known: Vec<usize> = cpus.iter().copied().filter(|&c| machine.numa_of(c).is_some()).collect();
    known.sort_unstable();
    known.dedup();
    let flat;
    let (machine, cpus) = if known.is_empty() {
        flat = MachineTopology::flat(cpus);
        (&flat, flat.cpus())
    } else {
        (machine, known)
    };
    let nodes: Vec<Vec<usize>> = machine
        .numa_nodes()
        .iter()
        .map(|node| compact_order(machine, &cpus, |c| node.cpus.binary_search(&c).is_ok()))
        .filter(|order| !order.is_empty())
        .collect();
    match pin {
        Pin::None => None,
        Pin::Compact => {
            let order = compact_order(machine, &cpus, |_| true);
            Some(order[rank % order.len()])
        }
        Pin::Scatter => {
            let longest = nodes.iter().map(Vec::len).max().unwrap_or(0);
            let order: Vec<usize> =
                (0..longest).flat_map(|i| nodes.iter().filter_map(move |n| n.get(i).copied())).collect();
            Some(order[rank % order.len()])
        }
        Pin::Numa => {
            let np = np.max(rank + 1);
            let node = rank * nodes.len() / np;
            // The first rank placed on `node`: the smallest r with r * nodes / np == node.
            let first = (node * np).div_ceil(nodes.len());
            let order = &nodes[node];
            Some(order[(rank - first) % order.len()])
        }
    }
}

/// The NUMA node of each of ranks `0..np` pinned by `pin` over `cpus` (what `cpu_for` chooses
/// is deterministic, so this is known before the threads start); `None` for unpinned ranks.
pub(crate) fn numa_of_ranks(pin: Pin, np: usize, cpus: &[usize]) -> Vec<Option<usize>> {
    let machine = crate::topology();
    (0..np).map(|rank| cpu_for_in(machine, pin, rank, np, cpus).and_then(|cpu| machine.numa_of(cpu))).collect()
}

/// The allowed CPUs `cpus` (ascending) that `keep` accepts, in compact order: the first
/// hardware thread of every core (package/core order), then the second ones, ...
fn compact_order(machine: &MachineTopology, cpus: &[usize], keep: impl Fn(usize) -> bool) -> Vec<usize> {
    let per_core: Vec<Vec<usize>> = machine
        .cores()
        .iter()
        .map(|core| core.cpus.iter().copied().filter(|&c| keep(c) && cpus.binary_search(&c).is_ok()).collect())
        .collect();
    let deepest = per_core.iter().map(Vec::len).max().unwrap_or(0);
    (0..deepest).flat_map(|i| per_core.iter().filter_map(move |core| core.get(i).copied())).collect()
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> Result<()> {
    run_current_thread_on(&[cpu])
}

/// Lets the calling thread run on the CPUs `cpus` only (all below `CPU_SETSIZE`, as
/// [`allowed_cpus`] gives them).
#[cfg(target_os = "linux")]
pub(crate) fn run_current_thread_on(cpus: &[usize]) -> Result<()> {
    if let Some(&bad) = cpus.iter().find(|&&c| c >= libc::CPU_SETSIZE as usize) {
        return Err(Error::InvalidArgument(format!("CPU {bad} is beyond the CPU sets this system supports")));
    }
    // SAFETY: as in `allowed_cpus`; `CPU_SET` writes inside the set for cpu < CPU_SETSIZE,
    // checked above.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &cpu in cpus {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!("pinning to CPUs {cpus:?} failed: {}", std::io::Error::last_os_error())))
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn run_current_thread_on(_cpus: &[usize]) -> Result<()> {
    Ok(())
}

/// The NUMA node of every CPU the calling thread may run on, when they all share one (on this
/// machine's [`topology`](crate::topology)); `None` when they span several or none is known.
pub fn numa_node_of_current_thread() -> Option<usize> {
    crate::topology().numa_of_cpus(&allowed_cpus())
}
