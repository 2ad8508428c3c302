//! Pinning rank threads to CPUs (Linux `sched_setaffinity`; a no-op elsewhere).

use super::config::Pin;
use crate::error::{Error, Result};

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

/// The CPU `rank` of `np` goes to under `pin`, given the allowed CPUs.
pub fn cpu_for(pin: Pin, rank: usize, np: usize, cpus: &[usize]) -> Option<usize> {
    if cpus.is_empty() {
        return None;
    }
    match pin {
        Pin::None => None,
        Pin::Compact => Some(cpus[rank % cpus.len()]),
        Pin::Scatter => {
            let slot = if np <= cpus.len() { rank * cpus.len() / np } else { rank % cpus.len() };
            Some(cpus[slot])
        }
    }
}

/// Pins the calling thread to `cpu`.
#[cfg(target_os = "linux")]
pub fn pin_current_thread(cpu: usize) -> Result<()> {
    // SAFETY: as in `allowed_cpus`; `CPU_SET` writes inside the set for cpu < CPU_SETSIZE, which
    // `allowed_cpus` guarantees.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!("pinning to CPU {cpu} failed: {}", std::io::Error::last_os_error())))
    }
}

#[cfg(not(target_os = "linux"))]
pub fn pin_current_thread(_cpu: usize) -> Result<()> {
    Ok(())
}

/// The NUMA node of every CPU the calling thread may run on, when they all share one (read from
/// sysfs: `/sys/devices/system/cpu/cpuN/nodeM`); `None` when they span several or sysfs says
/// nothing.
pub fn numa_node_of_current_thread() -> Option<usize> {
    let mut node = None;
    for cpu in allowed_cpus() {
        let dir = std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}")).ok()?;
        let this = dir
            .filter_map(|e| e.ok())
            .find_map(|e| e.file_name().to_str().and_then(|n| n.strip_prefix("node")).and_then(|n| n.parse().ok()))?;
        if node.is_some_and(|n| n != this) {
            return None;
        }
        node = Some(this);
    }
    node
}
