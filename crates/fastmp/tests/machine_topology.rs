//! Topology discovery (`fastmp::topology`, `MachineTopology::from_sysfs`) against sysfs trees
//! (`tests/data/sysfs/`: this VM's and a real 2-socket Xeon's, recorded, and a constructed
//! 2-socket NUMA machine), the way it degrades when files are missing or malformed, and the CPU
//! choice of every pinning on each.

use std::path::{Path, PathBuf};

use fastmp::affinity::cpu_for_in;
use fastmp::{Core, MachineTopology, NumaNode, Pin};

fn tree(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sysfs").join(name)
}

fn recorded(name: &str) -> MachineTopology {
    MachineTopology::from_sysfs(&tree(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A scratch copy of a recorded tree (links kept as links), removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn of(name: &str, case: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("fastmp-sysfs-{}-{name}-{case}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        copy_tree(&tree(name), &dir);
        Scratch(dir)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }

    fn parse(&self) -> fastmp::Result<MachineTopology> {
        MachineTopology::from_sysfs(&self.0)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create scratch dir");
    for entry in std::fs::read_dir(from).expect("read recorded tree") {
        let entry = entry.expect("dir entry");
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().expect("file type");
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).expect("read link"), &dst).expect("copy link");
        } else if kind.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).expect("copy file");
        }
    }
}

/// Removes every entry named `name` (file, link or directory) under `dir`.
fn remove_named(dir: &Path, name: &dyn Fn(&str) -> bool) {
    for entry in std::fs::read_dir(dir).expect("read scratch dir") {
        let entry = entry.expect("dir entry");
        let path = entry.path();
        let kind = entry.file_type().expect("file type");
        if name(entry.file_name().to_str().expect("utf-8 name")) {
            if kind.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) }
                .expect("remove entry");
        } else if kind.is_dir() {
            remove_named(&path, name);
        }
    }
}

/// Checks every accessor of a machine of 2 packages of `per_package` cores with 2 SMT threads
/// each, numbered as Linux does (each package's cores in turn, then all their second threads),
/// with one L3 and one NUMA node per package.
fn assert_two_sockets_with_smt(m: &MachineTopology, per_package: usize) {
    let (cores, cpus) = (2 * per_package, 4 * per_package);
    assert_eq!(m.to_string(), format!("2 packages, 2 NUMA nodes, {cores} cores, {cpus} CPUs, 2 L3 groups"));
    assert_eq!(m.cpus(), (0..cpus).collect::<Vec<_>>());
    let expected: Vec<Core> = (0..cores).map(|c| Core { package: c / per_package, cpus: vec![c, c + cores] }).collect();
    assert_eq!(m.cores(), &expected[..], "cores in package/core order, SMT siblings N and N+{cores}");
    assert_eq!(m.packages(), &[0, 1]);
    let node = |p: usize| -> Vec<usize> {
        let first = p * per_package;
        (first..first + per_package).chain(cores + first..cores + first + per_package).collect()
    };
    let (node0, node1) = (node(0), node(1));
    assert_eq!(m.l3_groups(), &[node0.clone(), node1.clone()]);
    assert_eq!(m.numa_nodes(), &[NumaNode { id: 0, cpus: node0.clone() }, NumaNode { id: 1, cpus: node1.clone() }]);
    for cpu in 0..cpus {
        let (core, package) = (cpu % cores, (cpu % cores) / per_package);
        assert_eq!(m.core_of(cpu), Some(core), "core of cpu {cpu}");
        assert_eq!(m.smt_siblings(cpu), Some(&[core, core + cores][..]), "siblings of cpu {cpu}");
        assert_eq!(m.package_of(cpu), Some(package), "package of cpu {cpu}");
        assert_eq!(m.l3_of(cpu), Some(package), "L3 of cpu {cpu}");
        assert_eq!(m.numa_of(cpu), Some(package), "NUMA node of cpu {cpu}");
    }
    for absent in [cpus, 4 * cpus] {
        assert_eq!((m.core_of(absent), m.smt_siblings(absent), m.package_of(absent)), (None, None, None));
        assert_eq!((m.l3_of(absent), m.numa_of(absent)), (None, None));
    }
    let last = per_package - 1;
    assert_eq!(m.numa_of_cpus(&node1), Some(1));
    assert_eq!(m.numa_of_cpus(&[last, last + cores]), Some(0), "a core and its sibling");
    assert_eq!(m.numa_of_cpus(&[last, last + 1]), None, "spans both nodes");
}

#[test]
fn two_socket_numa_machine_every_accessor() {
    let m = recorded("numa-2socket");
    assert_two_sockets_with_smt(&m, 4);
    assert_eq!(m.numa_of_cpus(&[3, 99]), None, "an offline CPU");
    assert_eq!(m.numa_of_cpus(&[]), None);
}

/// A real 2-socket machine's tree (Xeon Silver 4108, recorded by hwloc's test suite): Linux
/// numbers each package's cores first and their SMT siblings 16 CPUs later.
#[test]
fn recorded_two_socket_xeon_every_accessor() {
    let m = recorded("xeon-2socket-recorded");
    assert_two_sockets_with_smt(&m, 8);
}

#[test]
fn this_vm_recorded_every_accessor() {
    let m = recorded("vm-2cpu");
    assert_eq!(m.to_string(), "1 package, 1 NUMA node, 2 cores, 2 CPUs, 1 L3 group");
    assert_eq!(m.cpus(), vec![0, 1]);
    assert_eq!(m.cores(), &[Core { package: 0, cpus: vec![0] }, Core { package: 0, cpus: vec![1] }]);
    assert_eq!(m.packages(), &[0]);
    assert_eq!(m.l3_groups(), &[vec![0, 1]]);
    assert_eq!(m.numa_nodes(), &[NumaNode { id: 0, cpus: vec![0, 1] }]);
    for cpu in 0..2 {
        assert_eq!((m.core_of(cpu), m.smt_siblings(cpu)), (Some(cpu), Some(&[cpu][..])));
        assert_eq!((m.package_of(cpu), m.l3_of(cpu), m.numa_of(cpu)), (Some(0), Some(0), Some(0)));
    }
    assert_eq!(m.numa_of_cpus(&[0, 1]), Some(0));
}

#[test]
fn numa_nodes_come_from_cpu_links_without_the_node_directory() {
    let scratch = Scratch::of("numa-2socket", "links");
    std::fs::remove_dir_all(scratch.path("node")).expect("remove node/");
    assert_eq!(scratch.parse().expect("parse"), recorded("numa-2socket"));
}

#[test]
fn missing_optional_files_degrade_to_documented_defaults() {
    // No NUMA information at all: every CPU on node 0.
    let scratch = Scratch::of("numa-2socket", "no-numa");
    std::fs::remove_dir_all(scratch.path("node")).expect("remove node/");
    remove_named(&scratch.0, &|n| n.starts_with("node"));
    let m = scratch.parse().expect("parse");
    assert_eq!(m.numa_nodes(), &[NumaNode { id: 0, cpus: (0..16).collect() }]);
    assert_eq!(m.cores().len(), 8, "cores still known");

    // No cache information: no L3 groups.
    let scratch = Scratch::of("numa-2socket", "no-cache");
    remove_named(&scratch.0, &|n| n == "cache");
    let m = scratch.parse().expect("parse");
    assert_eq!((m.l3_groups().len(), m.l3_of(0)), (0, None));
    assert_eq!(m.to_string(), "2 packages, 2 NUMA nodes, 8 cores, 16 CPUs, 0 L3 groups");

    // The older sibling file alone is enough; with neither, every CPU is its own core.
    let scratch = Scratch::of("numa-2socket", "siblings");
    remove_named(&scratch.0, &|n| n == "core_cpus_list");
    assert_eq!(scratch.parse().expect("parse").cores(), recorded("numa-2socket").cores());
    remove_named(&scratch.0, &|n| n == "thread_siblings_list" || n == "physical_package_id");
    let m = scratch.parse().expect("parse");
    assert_eq!(m.cores().len(), 16);
    assert_eq!((m.packages(), m.smt_siblings(9)), (&[0][..], Some(&[9][..])));

    // Offline CPUs are left out of every list.
    let scratch = Scratch::of("numa-2socket", "offline");
    std::fs::write(scratch.path("cpu/online"), "0-7\n").expect("write online");
    let m = scratch.parse().expect("parse");
    assert_eq!(m.to_string(), "2 packages, 2 NUMA nodes, 8 cores, 8 CPUs, 2 L3 groups");
    assert_eq!(m.smt_siblings(2), Some(&[2][..]));
    assert_eq!(m.numa_nodes()[1], NumaNode { id: 1, cpus: vec![4, 5, 6, 7] });
}

#[test]
fn malformed_files_are_errors_naming_the_file() {
    let cases: [(&str, &str); 8] = [
        ("cpu/online", "0-x\n"),
        ("cpu/online", "3-1\n"),
        ("cpu/online", "0,,1\n"),
        ("cpu/online", " 0-1\n"),
        ("node/node1/cpulist", "4-7,12-\n"),
        ("cpu/cpu5/topology/core_cpus_list", "5;13\n"),
        ("cpu/cpu5/topology/physical_package_id", "one\n"),
        ("cpu/cpu5/cache/index3/level", "L3\n"),
    ];
    for (i, (file, text)) in cases.into_iter().enumerate() {
        let scratch = Scratch::of("numa-2socket", &format!("bad{i}"));
        std::fs::write(scratch.path(file), text).expect("corrupt a file");
        match scratch.parse() {
            Err(fastmp::Error::InvalidArgument(m)) => assert!(m.contains(file), "{file} {text:?}: {m}"),
            other => panic!("{file} {text:?}: expected an error naming the file, got {other:?}"),
        }
    }
    let scratch = Scratch::of("vm-2cpu", "no-online");
    std::fs::remove_file(scratch.path("cpu/online")).expect("remove online");
    assert!(matches!(scratch.parse(), Err(fastmp::Error::InvalidArgument(m)) if m.contains("cpu/online")));
    assert!(MachineTopology::from_sysfs(Path::new("/nonexistent/fastmp/sysfs")).is_err());
}

#[test]
fn this_machine_is_consistent() {
    let m = fastmp::topology();
    assert!(std::ptr::eq(m, fastmp::topology()), "read once, cached");
    let cpus = m.cpus();
    assert!(!cpus.is_empty());
    for &cpu in &fastmp::affinity::allowed_cpus() {
        assert!(cpus.contains(&cpu), "allowed cpu {cpu} is known");
    }
    let in_cores: usize = m.cores().iter().map(|c| c.cpus.len()).sum();
    let in_nodes: usize = m.numa_nodes().iter().map(|n| n.cpus.len()).sum();
    assert_eq!((in_cores, in_nodes), (cpus.len(), cpus.len()), "every CPU in one core and one node");
    #[cfg(target_os = "linux")]
    if Path::new("/sys/devices/system/cpu/online").exists() {
        assert_eq!(m, &MachineTopology::from_sysfs(Path::new("/sys/devices/system")).expect("parse sysfs"));
    }
}

#[test]
fn flat_topology_without_sysfs() {
    let m = MachineTopology::flat(&[3, 1, 2, 1]);
    assert_eq!(m.to_string(), "1 package, 1 NUMA node, 3 cores, 3 CPUs, 0 L3 groups");
    assert_eq!(m.cores()[0], Core { package: 0, cpus: vec![1] });
    assert_eq!(m.numa_of_cpus(&[1, 2, 3]), Some(0));
}

/// The CPU of every rank of `np` under `pin` with `allowed` CPUs.
fn pinned(m: &MachineTopology, pin: Pin, np: usize, allowed: &[usize]) -> Vec<usize> {
    (0..np).map(|r| cpu_for_in(m, pin, r, np, allowed).expect("a CPU")).collect()
}

#[test]
fn pinning_on_the_two_socket_machine() {
    let m = recorded("numa-2socket");
    let all: Vec<usize> = (0..16).collect();
    // Compact: every core once (package 0, then 1), then the SMT siblings; wraps beyond 16.
    assert_eq!(pinned(&m, Pin::Compact, 16, &all), (0..16).collect::<Vec<_>>());
    assert_eq!(pinned(&m, Pin::Compact, 18, &all)[16..], [0, 1]);
    // Scatter: alternate nodes, cores before siblings.
    assert_eq!(pinned(&m, Pin::Scatter, 16, &all), [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15]);
    assert_eq!(pinned(&m, Pin::Scatter, 2, &all), [0, 4]);
    // Numa: contiguous blocks per node, compact inside.
    assert_eq!(pinned(&m, Pin::Numa, 4, &all), [0, 1, 4, 5]);
    assert_eq!(pinned(&m, Pin::Numa, 5, &all), [0, 1, 2, 4, 5]);
    assert_eq!(pinned(&m, Pin::Numa, 16, &all), [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15]);
    assert_eq!(pinned(&m, Pin::Numa, 1, &all), [0]);
    // More ranks than a node's CPUs wrap inside the node.
    assert_eq!(pinned(&m, Pin::Numa, 20, &all)[8..10], [0, 1]);
    for pin in [Pin::Compact, Pin::Scatter, Pin::Numa] {
        assert_eq!(cpu_for_in(&m, pin, 0, 4, &[]), None, "{pin:?}: no allowed CPU");
    }
    assert_eq!(cpu_for_in(&m, Pin::None, 0, 4, &all), None);

    // Only allowed CPUs count: package 1 and one SMT pair of package 0.
    let allowed = [1, 4, 5, 6, 7, 9, 12, 13, 14, 15];
    assert_eq!(pinned(&m, Pin::Compact, 10, &allowed), [1, 4, 5, 6, 7, 9, 12, 13, 14, 15]);
    assert_eq!(pinned(&m, Pin::Scatter, 4, &allowed), [1, 4, 9, 5]);
    assert_eq!(pinned(&m, Pin::Numa, 4, &allowed), [1, 9, 4, 5]);
    // Only node 1 allowed: Numa uses the one node it may.
    assert_eq!(pinned(&m, Pin::Numa, 3, &[4, 5, 12]), [4, 5, 12]);
    // CPUs the topology does not know are ignored while some are known...
    assert_eq!(pinned(&m, Pin::Compact, 2, &[2, 40]), [2, 2]);
    // ... and counted flat when none is.
    assert_eq!(pinned(&m, Pin::Scatter, 2, &[40, 41]), [40, 41]);
}

#[test]
fn pinning_on_the_recorded_two_socket_xeon() {
    let m = recorded("xeon-2socket-recorded");
    let all: Vec<usize> = (0..32).collect();
    assert_eq!(pinned(&m, Pin::Compact, 32, &all), (0..32).collect::<Vec<_>>());
    let scatter: Vec<usize> = (0..8).flat_map(|c| [c, c + 8]).chain((16..24).flat_map(|c| [c, c + 8])).collect();
    assert_eq!(pinned(&m, Pin::Scatter, 32, &all), scatter);
    assert_eq!(pinned(&m, Pin::Numa, 4, &all), [0, 1, 8, 9]);
    let numa: Vec<usize> = [0..8, 16..24, 8..16, 24..32].into_iter().flatten().collect();
    assert_eq!(pinned(&m, Pin::Numa, 32, &all), numa);
    // An mpirun-style cpuset of package 1's first four cores and their siblings.
    let allowed = [8, 9, 10, 11, 24, 25, 26, 27];
    assert_eq!(pinned(&m, Pin::Compact, 8, &allowed), allowed);
    assert_eq!(pinned(&m, Pin::Numa, 3, &allowed), [8, 9, 10]);
}

#[test]
fn pinning_on_this_vm() {
    let m = recorded("vm-2cpu");
    for pin in [Pin::Compact, Pin::Scatter, Pin::Numa] {
        assert_eq!(pinned(&m, pin, 2, &[0, 1]), [0, 1], "{pin:?}");
        assert_eq!(pinned(&m, pin, 3, &[0, 1]), [0, 1, 0], "{pin:?} wraps");
        assert_eq!(pinned(&m, pin, 2, &[1]), [1, 1], "{pin:?} with one allowed CPU");
    }
}

#[test]
fn pin_parses_from_its_names() {
    for (name, pin) in [("none", Pin::None), ("compact", Pin::Compact), ("scatter", Pin::Scatter), ("numa", Pin::Numa)]
    {
        assert_eq!(name.parse::<Pin>().expect(name), pin);
    }
    assert!(matches!("nuam".parse::<Pin>(), Err(fastmp::Error::InvalidArgument(m)) if m.contains("numa")));
}

/// `FASTMP_PIN` read by `fastmp::init` in a child process (the environment is process-wide):
/// `numa` pins the ranks (their NUMA nodes appear in the placement, as `cpu_for` chose them), a
/// misspelling is an `Err` naming the variable.
#[test]
fn fastmp_pin_from_the_environment() {
    const CHILD: &str = "FASTMP_TEST_PIN_CHILD";
    match std::env::var(CHILD).as_deref() {
        Ok("numa") => {
            let allowed = fastmp::affinity::allowed_cpus();
            let numa = fastmp::init()
                .expect("FASTMP_PIN=numa parses")
                .run(|world| Ok(world.placement().numa_of(world.rank())));
            let expected: Vec<Option<usize>> = (0..2)
                .map(|r| {
                    fastmp::affinity::cpu_for(Pin::Numa, r, 2, &allowed).and_then(|c| fastmp::topology().numa_of(c))
                })
                .collect();
            assert_eq!(numa.expect("job"), expected);
            assert!(allowed.is_empty() || expected.iter().all(Option::is_some));
            return;
        }
        Ok("nuam") => {
            let err = fastmp::init().map(|_| ()).expect_err("a misspelt pinning");
            assert!(err.to_string().contains("FASTMP_PIN=nuam"), "{err}");
            return;
        }
        _ => {}
    }
    for value in ["numa", "nuam"] {
        let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"));
        child.args(["--exact", "fastmp_pin_from_the_environment", "--test-threads", "1"]);
        for launcher in ["FASTMP_RANK", "FASTMP_SIZE", "FASTMP_LAUNCHER", "FASTMP_DEVICE", "OMPI_COMM_WORLD_RANK"] {
            child.env_remove(launcher);
        }
        for launcher in ["OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS"] {
            child.env_remove(launcher);
        }
        let out = child.env(CHILD, value).env("FASTMP_PIN", value).env("FASTMP_NP", "2").output().expect("run child");
        assert!(out.status.success(), "FASTMP_PIN={value}: {}", String::from_utf8_lossy(&out.stdout));
        assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"), "the child ran the test");
    }
}
