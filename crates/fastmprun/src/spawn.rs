//! What each launched process gets (its environment, per the contract in the crate
//! docs) and how it is started: directly, or through the agent on a remote host.

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use crate::cli::BindTo;
use crate::hosts::Placement;
use crate::os;

/// Variables the launcher owns. They are removed from every child's inherited
/// environment before the launcher sets its own, so a value from an enclosing job
/// (e.g. fastmprun started from inside a rank) never leaks into this one.
const LAUNCHER_VARIABLES: [&str; 10] = [
    "FASTMP_DEVICE",
    "FASTMP_LAUNCHER",
    "FASTMP_NP",
    "FASTMP_THREADS_PER_PROCESS",
    "FASTMP_RANK",
    "FASTMP_SIZE",
    "FASTMP_RENDEZVOUS",
    "FASTMP_RENDEZVOUS_FD",
    "FASTMP_JOB_SECRET",
    "FASTMP_AGENT",
];

/// Which part of the job a process is, for reports and output tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    Rank(usize),
    /// The single process of a `--device shm` job, whose ranks are threads.
    Shm,
    /// Process `index` of a `--device hybrid` job, running ranks `first..=last` as threads.
    Process {
        index: usize,
        first: usize,
        last: usize,
    },
}

impl Label {
    /// The `--tag-output` prefix: the ranks whose output it may be.
    pub fn tag(self) -> String {
        match self {
            Label::Rank(rank) => format!("[{rank}] "),
            Label::Shm => "[shm] ".into(),
            Label::Process { first, last, .. } if first == last => format!("[{first}] "),
            Label::Process { first, last, .. } => format!("[{first}-{last}] "),
        }
    }

    /// What the supervisor counts when it stops the others: `rank` or `process`.
    pub fn unit(self) -> &'static str {
        match self {
            Label::Rank(_) | Label::Shm => "rank",
            Label::Process { .. } => "process",
        }
    }
}

impl fmt::Display for Label {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Label::Rank(rank) => write!(formatter, "rank {rank}"),
            Label::Shm => write!(formatter, "shm job"),
            Label::Process { index, first, last } if first == last => {
                write!(formatter, "process {index} (rank {first})")
            }
            Label::Process { index, first, last } => write!(formatter, "process {index} (ranks {first}-{last})"),
        }
    }
}

/// The program every process runs, and how remote hosts are reached.
#[derive(Debug)]
pub struct Program {
    pub program: OsString,
    pub args: Vec<OsString>,
    /// Agent command words (`ssh`, `ip netns exec`, ...).
    pub agent: Vec<OsString>,
}

/// Everything needed to start one process.
#[derive(Debug)]
pub struct ProcessSpec {
    pub label: Label,
    pub placement: Placement,
    /// Variables set for this process, on top of the inherited environment.
    pub env: Vec<(&'static str, String)>,
    /// Descriptor the process inherits under the same number (rank 0's rendezvous listener).
    pub inherit: Option<RawFd>,
    /// CPUs the process is bound to; empty: the launcher's own.
    pub cpus: Vec<usize>,
}

/// The one process of a `--device shm` job: ranks are `np` threads inside it.
pub fn shm_process(np: usize, bind_to: Option<BindTo>) -> ProcessSpec {
    let mut env = vec![
        ("FASTMP_DEVICE", "shm".to_string()),
        ("FASTMP_NP", np.to_string()),
        // Tells `fastmp::run(np, ..)` that FASTMP_NP is a launcher's job size it must follow.
        ("FASTMP_LAUNCHER", "fastmprun".to_string()),
    ];
    env.extend(pin_variable(bind_to));
    ProcessSpec { label: Label::Shm, placement: Placement::Local, env, inherit: None, cpus: Vec::new() }
}

/// The job-wide facts every process of a tcp or hybrid job learns from its environment.
#[derive(Debug)]
pub struct NetworkJob<'a> {
    /// One entry per process (per rank on tcp).
    pub placements: &'a [Placement],
    pub rendezvous: &'a str,
    pub secret: &'a str,
    /// The rendezvous listener process 0 inherits (all-local jobs).
    pub rank0_listener: Option<RawFd>,
    pub bind_to: Option<BindTo>,
    /// `None`: tcp, one rank per process.
    pub hybrid: Option<HybridShape>,
    /// CPUs this machine's hybrid processes share out, a block of T each (see
    /// [`local_cpu_blocks`]); empty: they are not bound.
    pub local_cpus: &'a [usize],
}

/// How the ranks of a hybrid job are spread over its processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HybridShape {
    /// Ranks in the whole job.
    pub np: usize,
    /// Thread ranks per process (the last process may have fewer).
    pub threads_per_process: usize,
}

impl HybridShape {
    /// Processes the job needs: ceil(np / threads_per_process).
    pub fn processes(self) -> usize {
        self.np.div_ceil(self.threads_per_process)
    }

    /// Process `index`'s label: which ranks it runs (block-wise by process).
    fn label(self, index: usize) -> Label {
        let first = index * self.threads_per_process;
        let last = (first + self.threads_per_process).min(self.np) - 1;
        Label::Process { index, first, last }
    }
}

/// The processes of a `--device tcp` (one per rank) or `--device hybrid` job. Process 0 plays
/// tcp rank 0's part: it runs rank 0, which holds the rendezvous.
pub fn network_processes(job: &NetworkJob<'_>) -> Vec<ProcessSpec> {
    let size = job.placements.len().to_string();
    let mut cpu_blocks = job
        .hybrid
        .map_or_else(Vec::new, |shape| local_cpu_blocks(job.placements, shape.threads_per_process, job.local_cpus));
    job.placements
        .iter()
        .enumerate()
        .map(|(index, placement)| {
            let device = if job.hybrid.is_some() { "hybrid" } else { "tcp" };
            let mut env = vec![
                ("FASTMP_DEVICE", device.to_string()),
                ("FASTMP_RANK", index.to_string()),
                ("FASTMP_SIZE", size.clone()),
                ("FASTMP_RENDEZVOUS", job.rendezvous.to_string()),
                ("FASTMP_JOB_SECRET", job.secret.to_string()),
            ];
            if let Some(shape) = job.hybrid {
                env.push(("FASTMP_NP", shape.np.to_string()));
                env.push(("FASTMP_THREADS_PER_PROCESS", shape.threads_per_process.to_string()));
            }
            env.extend(pin_variable(job.bind_to));
            let inherit = job.rank0_listener.filter(|_| index == 0);
            if let Some(fd) = inherit {
                env.push(("FASTMP_RENDEZVOUS_FD", fd.to_string()));
            }
            let label = job.hybrid.map_or(Label::Rank(index), |shape| shape.label(index));
            let cpus = if *placement == Placement::Local && !cpu_blocks.is_empty() {
                cpu_blocks.remove(0)
            } else {
                Vec::new()
            };
            ProcessSpec { label, placement: placement.clone(), env, inherit, cpus }
        })
        .collect()
}

/// Shares `cpus` out among the processes placed on this machine, `threads` consecutive ones
/// each in process order, as mpirun binds its processes: without it every process would place
/// its thread ranks on the same first CPUs. Empty (nobody bound) when they do not all fit.
fn local_cpu_blocks(placements: &[Placement], threads: usize, cpus: &[usize]) -> Vec<Vec<usize>> {
    let local = placements.iter().filter(|placement| **placement == Placement::Local).count();
    if local.checked_mul(threads).is_none_or(|needed| needed > cpus.len()) {
        return Vec::new();
    }
    cpus.chunks(threads).take(local).map(<[usize]>::to_vec).collect()
}

/// `FASTMP_PIN` only when `--bind-to` was given, so a value the user exported survives.
fn pin_variable(bind_to: Option<BindTo>) -> Option<(&'static str, String)> {
    bind_to.map(|policy| ("FASTMP_PIN", policy.pin_policy().to_string()))
}

/// Starts one process with null stdin and piped stdout/stderr, as the leader of its own
/// process group so that stopping it also stops whatever it forked (`sh -c` children).
pub fn spawn(spec: &ProcessSpec, program: &Program) -> io::Result<Child> {
    let mut command = match &spec.placement {
        Placement::Local => local_command(spec, program),
        Placement::Remote(host) => agent_command(spec, program, host),
    };
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    os::prepare_child(&mut command, spec.inherit, &spec.cpus)?;
    command.spawn()
}

fn local_command(spec: &ProcessSpec, program: &Program) -> Command {
    let mut command = Command::new(&program.program);
    command.args(&program.args);
    for variable in LAUNCHER_VARIABLES {
        command.env_remove(variable);
    }
    command.envs(spec.env.iter().map(|(name, value)| (name, value)));
    command
}

/// `AGENT... HOST env K=V... PROGRAM ARGS...`. The remote side does not inherit the
/// launcher's environment, so the user's other `FASTMP_*` settings (buffer sizes,
/// eager limit, ...) are passed along explicitly, before the launcher's own.
fn agent_command(spec: &ProcessSpec, program: &Program, host: &str) -> Command {
    let (agent, agent_args) =
        program.agent.split_first().map_or((OsString::from("ssh"), &[][..]), |(first, rest)| (first.clone(), rest));
    let mut command = Command::new(agent);
    command.args(agent_args).arg(host).arg("env");
    // vars_os: `vars` would panic on a non-UTF-8 variable; such variables are skipped.
    let user_settings = std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .filter(|(name, _)| name.starts_with("FASTMP_") && !LAUNCHER_VARIABLES.contains(&name.as_str()));
    let launcher_settings = spec.env.iter().map(|(name, value)| (name.to_string(), value.clone()));
    for (name, value) in user_settings.chain(launcher_settings) {
        command.arg(format!("{name}={value}"));
    }
    command.arg(&program.program).args(&program.args);
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value<'a>(spec: &'a ProcessSpec, name: &str) -> Option<&'a str> {
        spec.env.iter().find(|(key, _)| *key == name).map(|(_, value)| value.as_str())
    }

    fn job<'a>(placements: &'a [Placement], hybrid: Option<HybridShape>) -> NetworkJob<'a> {
        NetworkJob {
            placements,
            rendezvous: "127.0.0.1:5000",
            secret: "ab",
            rank0_listener: Some(7),
            bind_to: Some(BindTo::Core),
            hybrid,
            local_cpus: &[0, 1, 2, 3, 4, 5, 6],
        }
    }

    #[test]
    fn only_rank0_inherits_the_listener() {
        let placements = [Placement::Local, Placement::Local];
        let specs = network_processes(&job(&placements, None));
        assert_eq!(value(&specs[0], "FASTMP_RENDEZVOUS_FD"), Some("7"));
        assert_eq!(value(&specs[1], "FASTMP_RENDEZVOUS_FD"), None);
        assert_eq!(specs[1].inherit, None);
        assert_eq!(value(&specs[1], "FASTMP_RANK"), Some("1"));
        assert_eq!(value(&specs[1], "FASTMP_SIZE"), Some("2"));
        assert_eq!(value(&specs[1], "FASTMP_PIN"), Some("compact"));
        assert_eq!(value(&specs[1], "FASTMP_DEVICE"), Some("tcp"));
        assert_eq!(value(&specs[1], "FASTMP_NP"), None);
        assert_eq!(specs[1].label, Label::Rank(1));
    }

    #[test]
    fn hybrid_processes_run_blocks_of_ranks() {
        let shape = HybridShape { np: 5, threads_per_process: 2 };
        assert_eq!(shape.processes(), 3);
        let placements = vec![Placement::Local; shape.processes()];
        let specs = network_processes(&job(&placements, Some(shape)));
        assert_eq!(specs.len(), 3);
        for (index, spec) in specs.iter().enumerate() {
            let expected = index.to_string();
            assert_eq!(value(spec, "FASTMP_DEVICE"), Some("hybrid"));
            assert_eq!(value(spec, "FASTMP_RANK"), Some(expected.as_str()));
            assert_eq!(value(spec, "FASTMP_SIZE"), Some("3"));
            assert_eq!(value(spec, "FASTMP_NP"), Some("5"));
            assert_eq!(value(spec, "FASTMP_THREADS_PER_PROCESS"), Some("2"));
            assert_eq!(value(spec, "FASTMP_RENDEZVOUS"), Some("127.0.0.1:5000"));
            assert_eq!(value(spec, "FASTMP_JOB_SECRET"), Some("ab"));
            assert_eq!(value(spec, "FASTMP_RENDEZVOUS_FD"), (index == 0).then_some("7"));
        }
        assert_eq!(specs[0].label, Label::Process { index: 0, first: 0, last: 1 });
        assert_eq!(specs[2].label, Label::Process { index: 2, first: 4, last: 4 });
        assert_eq!(specs[1].label.tag(), "[2-3] ");
        let cpus: Vec<&[usize]> = specs.iter().map(|spec| spec.cpus.as_slice()).collect();
        assert_eq!(cpus, [&[0, 1][..], &[2, 3], &[4, 5]], "a block of T CPUs each (the last: T as well)");
        assert_eq!(specs[2].label.tag(), "[4] ");
        assert_eq!(specs[1].label.to_string(), "process 1 (ranks 2-3)");
        assert_eq!(specs[2].label.to_string(), "process 2 (rank 4)");
    }

    #[test]
    fn only_local_processes_that_fit_are_bound() {
        let remote = Placement::Remote("b".into());
        let mixed = [Placement::Local, remote.clone(), Placement::Local];
        assert_eq!(local_cpu_blocks(&mixed, 2, &[0, 1, 2, 3]), [vec![0, 1], vec![2, 3]]);
        assert!(local_cpu_blocks(&mixed, 2, &[0, 1, 2]).is_empty(), "oversubscribed: nobody bound");
        assert!(local_cpu_blocks(&[remote], 2, &[0, 1]).is_empty());
        assert!(local_cpu_blocks(&[Placement::Local], 2, &[]).is_empty());
    }

    #[test]
    fn agent_command_line_shape() {
        let spec = ProcessSpec {
            label: Label::Rank(1),
            placement: Placement::Remote("b".into()),
            env: vec![("FASTMP_RANK", "1".into())],
            inherit: None,
            cpus: Vec::new(),
        };
        let program = Program {
            program: "prog".into(),
            args: vec!["--x".into()],
            agent: vec!["ip".into(), "netns".into(), "exec".into()],
        };
        let command = agent_command(&spec, &program, "b");
        let args: Vec<_> = command.get_args().collect();
        assert_eq!(command.get_program(), "ip");
        assert_eq!(&args[..4], ["netns", "exec", "b", "env"]);
        assert_eq!(&args[args.len() - 3..], ["FASTMP_RANK=1", "prog", "--x"]);
    }
}
