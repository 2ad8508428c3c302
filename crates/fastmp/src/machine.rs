//! The machine's CPU topology (cores, SMT siblings, packages, L3 groups, NUMA nodes), read from
//! Linux sysfs without C dependencies. Pinning, `Comm::split_type(SharedNuma)` and the NUMA level
//! of hierarchical collectives decide on it; it is read once, at start-up.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, Result};

/// Where sysfs keeps the CPU and NUMA directories on Linux.
const SYSFS_ROOT: &str = "/sys/devices/system";

/// A physical core: the hardware threads (SMT siblings) that share it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Core {
    /// Package (socket) id the core sits in.
    pub package: usize,
    /// Online CPUs of the core, ascending (one per hardware thread).
    pub cpus: Vec<usize>,
}

/// A NUMA node and the online CPUs attached to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumaNode {
    /// The node's id as the kernel numbers it (`nodeN`; ids may have gaps).
    pub id: usize,
    /// Online CPUs on the node, ascending.
    pub cpus: Vec<usize>,
}

/// What is known about one online CPU: indices into [`MachineTopology::cores`] and
/// [`MachineTopology::l3_groups`], and the ids of its package and NUMA node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CpuPlace {
    id: usize,
    core: usize,
    package: usize,
    l3: Option<usize>,
    numa: usize,
}

/// The CPUs of a machine and how they share cores, caches and memory.
///
/// Read from sysfs ([`topology`] for this machine, [`MachineTopology::from_sysfs`] for a recorded
/// tree). What each part comes from, and what happens when it is missing:
/// - online CPUs: `cpu/online` (required);
/// - cores: `cpuN/topology/core_cpus_list` (or the older `thread_siblings_list`); without either,
///   every CPU is its own core;
/// - packages: `cpuN/topology/physical_package_id`; missing (or `-1`), package 0;
/// - L3 groups: the `cpuN/cache/indexM` whose `level` is 3, by its `shared_cpu_list`; without
///   cache information the CPU belongs to no L3 group;
/// - NUMA nodes: `node/nodeN/cpulist`, else the `cpuN/nodeM` links; without either, every CPU is
///   on node 0.
///
/// ```
/// let machine = fastmp::topology();
/// assert!(!machine.cpus().is_empty());
/// for core in machine.cores() {
///     // SMT siblings share a core and its package.
///     for &cpu in &core.cpus {
///         assert_eq!(machine.smt_siblings(cpu), Some(&core.cpus[..]));
///         assert_eq!(machine.package_of(cpu), Some(core.package));
///     }
/// }
/// println!("{machine}"); // e.g. "1 package, 1 NUMA node, 2 cores, 2 CPUs, 1 L3 group"
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineTopology {
    /// Online CPUs, ascending by id.
    cpus: Vec<CpuPlace>,
    /// Cores ordered by package, then by their lowest CPU.
    cores: Vec<Core>,
    /// Package ids, ascending.
    packages: Vec<usize>,
    /// L3 groups ordered by their lowest CPU.
    l3_groups: Vec<Vec<usize>>,
    /// NUMA nodes with online CPUs, ascending by id.
    numa_nodes: Vec<NumaNode>,
}

/// This machine's topology, read from sysfs on first use and cached. Where sysfs cannot be read
/// (not Linux, a container hiding it, a malformed file) it is flat: one package, one NUMA node,
/// every CPU this process may run on its own core (CPUs `0..available_parallelism` where the
/// affinity mask is unknown), no L3 groups.
///
/// ```
/// let machine = fastmp::topology();
/// let nodes = machine.numa_nodes();
/// assert!(!nodes.is_empty());
/// // Every online CPU is on exactly one NUMA node.
/// assert_eq!(nodes.iter().map(|n| n.cpus.len()).sum::<usize>(), machine.cpus().len());
/// ```
pub fn topology() -> &'static MachineTopology {
    static MACHINE: OnceLock<MachineTopology> = OnceLock::new();
    MACHINE.get_or_init(|| {
        // Under Miri the host is isolated (opening sysfs would end the run): the flat fallback.
        let read = if cfg!(miri) { None } else { MachineTopology::from_sysfs(Path::new(SYSFS_ROOT)).ok() };
        read.unwrap_or_else(|| {
            let mut cpus = crate::launch::affinity::allowed_cpus();
            if cpus.is_empty() {
                cpus = (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
            }
            MachineTopology::flat(&cpus)
        })
    })
}

impl MachineTopology {
    /// Reads the topology under `root`, a directory laid out as `/sys/devices/system` (holding
    /// `cpu/` and optionally `node/`). A malformed file is an `Err` naming it; missing optional
    /// files degrade as described on [`MachineTopology`].
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("fastmp-doc-sysfs-{}", std::process::id()));
    /// # std::fs::create_dir_all(dir.join("cpu/cpu0")).unwrap();
    /// # std::fs::create_dir_all(dir.join("cpu/cpu1")).unwrap();
    /// # std::fs::write(dir.join("cpu/online"), "0-1\n").unwrap();
    /// // A tree with only `cpu/online` ("0-1"): two CPUs, each its own core, on node 0.
    /// let machine = fastmp::MachineTopology::from_sysfs(&dir)?;
    /// assert_eq!(machine.to_string(), "1 package, 1 NUMA node, 2 cores, 2 CPUs, 0 L3 groups");
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn from_sysfs(root: &Path) -> Result<Self> {
        let cpu_dir = root.join("cpu");
        let online = parse_cpulist_file(&cpu_dir.join("online"))?;
        let numa_of = numa_map(root, &online)?;
        let mut raw = Vec::with_capacity(online.len());
        for &cpu in &online {
            let dir = cpu_dir.join(format!("cpu{cpu}"));
            let topo = dir.join("topology");
            let siblings = match optional_cpulist(&topo.join("core_cpus_list"))? {
                Some(list) => Some(list),
                None => optional_cpulist(&topo.join("thread_siblings_list"))?,
            };
            let package_path = topo.join("physical_package_id");
            let package = match read_optional(&package_path)? {
                Some(text) => parse_package_id(&text, &package_path)?,
                None => 0,
            };
            raw.push(RawCpu { id: cpu, siblings, package, l3: l3_of(&dir)?, numa: numa_of(cpu) });
        }
        Ok(Self::assemble(raw))
    }

    /// The flat topology of `cpus`: one package, one NUMA node (0), each CPU its own core, no
    /// L3 groups. What [`topology`] falls back to without sysfs.
    pub fn flat(cpus: &[usize]) -> Self {
        let mut ids = cpus.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let raw = ids.into_iter().map(|id| RawCpu { id, siblings: None, package: 0, l3: None, numa: 0 }).collect();
        Self::assemble(raw)
    }

    /// Groups per-CPU facts into cores, L3 groups and NUMA nodes, keeping only online CPUs in
    /// every list.
    fn assemble(raw: Vec<RawCpu>) -> Self {
        let online: Vec<usize> = raw.iter().map(|c| c.id).collect(); // Ascending, as `raw` is.
        let keep_online = |list: &[usize]| -> Vec<usize> {
            list.iter().copied().filter(|c| online.binary_search(c).is_ok()).collect()
        };

        // Cores: CPUs with the same (package, sibling set); order by package, then lowest CPU.
        let mut core_key: Vec<(usize, usize)> = Vec::with_capacity(raw.len()); // (package, lowest sibling)
        for cpu in &raw {
            let siblings = cpu.siblings.as_deref().map(keep_online).filter(|s| s.contains(&cpu.id));
            let lowest = siblings.as_ref().map_or(cpu.id, |s| s[0]);
            core_key.push((cpu.package, lowest));
        }
        let mut keys = core_key.clone();
        keys.sort_unstable();
        keys.dedup();
        let mut cores: Vec<Core> = keys.iter().map(|&(package, _)| Core { package, cpus: Vec::new() }).collect();
        let mut packages: Vec<usize> = raw.iter().map(|c| c.package).collect();
        packages.sort_unstable();
        packages.dedup();

        // L3 groups: equal shared lists are one group; order by lowest CPU.
        let mut l3_groups: Vec<Vec<usize>> =
            raw.iter().filter_map(|c| c.l3.as_deref().map(keep_online)).filter(|g| !g.is_empty()).collect();
        l3_groups.sort_unstable();
        l3_groups.dedup();

        let mut numa_ids: Vec<usize> = raw.iter().map(|c| c.numa).collect();
        numa_ids.sort_unstable();
        numa_ids.dedup();
        let mut numa_nodes: Vec<NumaNode> = numa_ids.iter().map(|&id| NumaNode { id, cpus: Vec::new() }).collect();

        let mut cpus = Vec::with_capacity(raw.len());
        for (cpu, key) in raw.iter().zip(&core_key) {
            let core = keys.binary_search(key).expect("every key was collected");
            cores[core].cpus.push(cpu.id);
            let l3 = cpu.l3.as_deref().and_then(|list| {
                let list = keep_online(list);
                l3_groups.iter().position(|g| *g == list)
            });
            let node = numa_ids.binary_search(&cpu.numa).expect("every node was collected");
            numa_nodes[node].cpus.push(cpu.id);
            cpus.push(CpuPlace { id: cpu.id, core, package: cpu.package, l3, numa: cpu.numa });
        }
        MachineTopology { cpus, cores, packages, l3_groups, numa_nodes }
    }

    fn place(&self, cpu: usize) -> Option<&CpuPlace> {
        self.cpus.binary_search_by_key(&cpu, |c| c.id).ok().map(|i| &self.cpus[i])
    }

    /// Online CPU ids, ascending.
    pub fn cpus(&self) -> Vec<usize> {
        self.cpus.iter().map(|c| c.id).collect()
    }

    /// Physical cores, ordered by package and then by lowest CPU ("package/core order").
    pub fn cores(&self) -> &[Core] {
        &self.cores
    }

    /// Index into [`cores`](Self::cores) of the core `cpu` belongs to; `None` for a CPU that is
    /// not online.
    pub fn core_of(&self, cpu: usize) -> Option<usize> {
        self.place(cpu).map(|c| c.core)
    }

    /// The CPUs sharing `cpu`'s core (`cpu` included), ascending.
    pub fn smt_siblings(&self, cpu: usize) -> Option<&[usize]> {
        self.place(cpu).map(|c| &self.cores[c.core].cpus[..])
    }

    /// Package (socket) ids, ascending.
    pub fn packages(&self) -> &[usize] {
        &self.packages
    }

    /// Package id of `cpu`.
    pub fn package_of(&self, cpu: usize) -> Option<usize> {
        self.place(cpu).map(|c| c.package)
    }

    /// Groups of CPUs sharing one L3 cache, ordered by lowest CPU; empty when sysfs had no cache
    /// information.
    pub fn l3_groups(&self) -> &[Vec<usize>] {
        &self.l3_groups
    }

    /// Index into [`l3_groups`](Self::l3_groups) of `cpu`'s L3 cache.
    pub fn l3_of(&self, cpu: usize) -> Option<usize> {
        self.place(cpu).and_then(|c| c.l3)
    }

    /// NUMA nodes that have online CPUs, ascending by id.
    pub fn numa_nodes(&self) -> &[NumaNode] {
        &self.numa_nodes
    }

    /// NUMA node id of `cpu`.
    pub fn numa_of(&self, cpu: usize) -> Option<usize> {
        self.place(cpu).map(|c| c.numa)
    }

    /// The NUMA node all of `cpus` are on, when they share one; `None` when they span several,
    /// when one is not online, or when `cpus` is empty. A thread whose allowed CPUs give `Some`
    /// is bound inside that node.
    pub fn numa_of_cpus(&self, cpus: &[usize]) -> Option<usize> {
        let mut nodes = cpus.iter().map(|&c| self.numa_of(c));
        let first = nodes.next()??;
        nodes.all(|n| n == Some(first)).then_some(first)
    }
}

impl fmt::Display for MachineTopology {
    /// A short summary: "2 packages, 2 NUMA nodes, 8 cores, 16 CPUs, 2 L3 groups".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        write!(
            f,
            "{}, {}, {}, {}, {}",
            plural(self.packages.len(), "package"),
            plural(self.numa_nodes.len(), "NUMA node"),
            plural(self.cores.len(), "core"),
            plural(self.cpus.len(), "CPU"),
            plural(self.l3_groups.len(), "L3 group"),
        )
    }
}

/// One online CPU's facts as read, before grouping.
struct RawCpu {
    id: usize,
    siblings: Option<Vec<usize>>,
    package: usize,
    l3: Option<Vec<usize>>,
    numa: usize,
}

/// Parses a kernel cpulist ("0-3,8-11", "5", "" for none; a trailing newline allowed) into
/// ascending, distinct CPU ids. Strict: anything else is an `Err` saying what is wrong.
pub(crate) fn parse_cpulist(text: &str) -> Result<Vec<usize>> {
    /// Far above any machine (Linux's NR_CPUS tops out at 8192), so a corrupt range cannot make
    /// us allocate gigabytes.
    const MAX_CPU: usize = 1 << 16;
    let bad = |why: String| Error::InvalidArgument(format!("malformed cpulist {text:?}: {why}"));
    let number = |s: &str| -> Result<usize> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(format!("'{s}' is not a CPU number")));
        }
        match s.parse::<usize>() {
            Ok(n) if n < MAX_CPU => Ok(n),
            _ => Err(bad(format!("CPU {s} is out of range"))),
        }
    };
    let body = text.strip_suffix('\n').unwrap_or(text);
    let mut cpus = Vec::new();
    if body.is_empty() {
        return Ok(cpus);
    }
    for part in body.split(',') {
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (number(lo)?, number(hi)?);
                if lo > hi {
                    return Err(bad(format!("range {lo}-{hi} runs backwards")));
                }
                cpus.extend(lo..=hi);
            }
            None => cpus.push(number(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The error for a malformed file, naming it.
fn malformed(path: &Path, why: impl fmt::Display) -> Error {
    Error::InvalidArgument(format!("topology: {}: {why}", path.display()))
}

/// The file's text, or `None` when it does not exist.
fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(malformed(path, e)),
    }
}

fn parse_cpulist_file(path: &Path) -> Result<Vec<usize>> {
    let text = std::fs::read_to_string(path).map_err(|e| malformed(path, e))?;
    parse_cpulist(&text).map_err(|e| malformed(path, e))
}

fn optional_cpulist(path: &Path) -> Result<Option<Vec<usize>>> {
    read_optional(path)?.map(|text| parse_cpulist(&text).map_err(|e| malformed(path, e))).transpose()
}

fn parse_package_id(text: &str, path: &Path) -> Result<usize> {
    match text.trim_end_matches('\n') {
        "-1" => Ok(0), // Architectures without packages report -1.
        id => id.parse().map_err(|_| malformed(path, format!("{id:?} is not a package id"))),
    }
}

/// The CPUs sharing `cpu_dir`'s L3 cache (the `cache/indexN` whose `level` is 3), if sysfs says.
fn l3_of(cpu_dir: &Path) -> Result<Option<Vec<usize>>> {
    let cache = cpu_dir.join("cache");
    for index in numbered_entries(&cache, "index")? {
        let dir = cache.join(format!("index{index}"));
        let level_path = dir.join("level");
        let Some(level) = read_optional(&level_path)? else { continue };
        let level: u32 = level
            .trim_end_matches('\n')
            .parse()
            .map_err(|_| malformed(&level_path, format!("{level:?} is not a level")))?;
        if level == 3 {
            return optional_cpulist(&dir.join("shared_cpu_list"));
        }
    }
    Ok(None)
}

/// The numbers N of the entries `{prefix}N` in `dir`, ascending; empty when `dir` is missing.
fn numbered_entries(dir: &Path, prefix: &str) -> Result<Vec<usize>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(malformed(dir, e)),
    };
    let mut numbers: Vec<usize> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix(prefix)?.parse().ok())
        .collect();
    numbers.sort_unstable();
    Ok(numbers)
}

/// Each online CPU's NUMA node: from `node/nodeN/cpulist`, else from the `cpu/cpuN/nodeM` links,
/// else node 0.
fn numa_map(root: &Path, online: &[usize]) -> Result<impl Fn(usize) -> usize + use<>> {
    let node_dir = root.join("node");
    let mut node_of: Vec<(usize, usize)> = Vec::new(); // (cpu, node)
    for node in numbered_entries(&node_dir, "node")? {
        let list: PathBuf = node_dir.join(format!("node{node}")).join("cpulist");
        if let Some(cpus) = optional_cpulist(&list)? {
            node_of.extend(cpus.into_iter().map(|cpu| (cpu, node)));
        }
    }
    if node_of.is_empty() {
        for &cpu in online {
            if let Some(&node) = numbered_entries(&root.join("cpu").join(format!("cpu{cpu}")), "node")?.first() {
                node_of.push((cpu, node));
            }
        }
    }
    node_of.sort_unstable();
    Ok(move |cpu: usize| node_of.binary_search_by_key(&cpu, |&(c, _)| c).map_or(0, |i| node_of[i].1))
}

#[cfg(test)]
mod tests {
    use super::parse_cpulist;

    #[test]
    fn cpulists_parse_strictly() {
        assert_eq!(parse_cpulist("0-3,8,10-11\n").unwrap(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpulist("5").unwrap(), vec![5]);
        assert_eq!(parse_cpulist("2,1,1-2").unwrap(), vec![1, 2]);
        assert_eq!(parse_cpulist("").unwrap(), Vec::<usize>::new());
        assert_eq!(parse_cpulist("\n").unwrap(), Vec::<usize>::new());
        for bad in ["3-1", "0-", "-1", "a", "0,,1", "0 ", "1\n\n", "+1", "0-99999999999999999999", "70000"] {
            assert!(parse_cpulist(bad).is_err(), "{bad:?} parsed");
        }
    }
}
