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
const LAUNCHER_VARIABLES: [&str; 9] = [
    "FASTMP_DEVICE",
    "FASTMP_LAUNCHER",
    "FASTMP_NP",
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
}

impl Label {
    /// The `--tag-output` prefix.
    pub fn tag(self) -> String {
        match self {
            Label::Rank(rank) => format!("[{rank}] "),
            Label::Shm => "[shm] ".into(),
        }
    }
}

impl fmt::Display for Label {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Label::Rank(rank) => write!(formatter, "rank {rank}"),
            Label::Shm => write!(formatter, "shm job"),
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
    ProcessSpec { label: Label::Shm, placement: Placement::Local, env, inherit: None }
}

/// The job-wide facts every tcp rank learns from its environment.
#[derive(Debug)]
pub struct TcpJob<'a> {
    /// One entry per rank.
    pub placements: &'a [Placement],
    pub rendezvous: &'a str,
    pub secret: &'a str,
    /// The rendezvous listener rank 0 inherits (all-local jobs).
    pub rank0_listener: Option<RawFd>,
    pub bind_to: Option<BindTo>,
}

/// One process per rank of a `--device tcp` job.
pub fn tcp_processes(job: &TcpJob<'_>) -> Vec<ProcessSpec> {
    let size = job.placements.len().to_string();
    job.placements
        .iter()
        .enumerate()
        .map(|(rank, placement)| {
            let mut env = vec![
                ("FASTMP_DEVICE", "tcp".to_string()),
                ("FASTMP_RANK", rank.to_string()),
                ("FASTMP_SIZE", size.clone()),
                ("FASTMP_RENDEZVOUS", job.rendezvous.to_string()),
                ("FASTMP_JOB_SECRET", job.secret.to_string()),
            ];
            env.extend(pin_variable(job.bind_to));
            let inherit = job.rank0_listener.filter(|_| rank == 0);
            if let Some(fd) = inherit {
                env.push(("FASTMP_RENDEZVOUS_FD", fd.to_string()));
            }
            ProcessSpec { label: Label::Rank(rank), placement: placement.clone(), env, inherit }
        })
        .collect()
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
    os::prepare_child(&mut command, spec.inherit)?;
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

    #[test]
    fn only_rank0_inherits_the_listener() {
        let placements = [Placement::Local, Placement::Local];
        let job = TcpJob {
            placements: &placements,
            rendezvous: "127.0.0.1:5000",
            secret: "ab",
            rank0_listener: Some(7),
            bind_to: Some(BindTo::Core),
        };
        let specs = tcp_processes(&job);
        assert_eq!(value(&specs[0], "FASTMP_RENDEZVOUS_FD"), Some("7"));
        assert_eq!(value(&specs[1], "FASTMP_RENDEZVOUS_FD"), None);
        assert_eq!(specs[1].inherit, None);
        assert_eq!(value(&specs[1], "FASTMP_RANK"), Some("1"));
        assert_eq!(value(&specs[1], "FASTMP_SIZE"), Some("2"));
        assert_eq!(value(&specs[1], "FASTMP_PIN"), Some("compact"));
    }

    #[test]
    fn agent_command_line_shape() {
        let spec = ProcessSpec {
            label: Label::Rank(1),
            placement: Placement::Remote("b".into()),
            env: vec![("FASTMP_RANK", "1".into())],
            inherit: None,
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
