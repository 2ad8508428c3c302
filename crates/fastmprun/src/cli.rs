//! The command line: parsed with clap, then checked and resolved into [`Options`]
//! so the rest of the launcher never sees an inconsistent combination.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{CommandFactory, Parser, ValueEnum};

/// Agent used for remote hosts when neither `--agent` nor `FASTMP_AGENT` says otherwise.
const DEFAULT_AGENT: &str = "ssh";

#[derive(Parser, Debug)]
#[command(
    name = "fastmprun",
    version,
    about = "Run a fastmp program with N ranks (threads on `shm`, processes on `tcp`, processes of \
             thread ranks on `hybrid`).",
    override_usage = "fastmprun -np N [OPTIONS] PROGRAM [ARGS]...",
    after_help = "Everything after PROGRAM is passed to it untouched. `-np N`, `-n N` and \
                  `--np N` are the same option.\n\nExit status: 0 if every rank exits 0; \
                  otherwise the status of the first rank to fail (128+signal if it was \
                  killed), 124 on --timeout, 128+signal when fastmprun itself is interrupted."
)]
struct Cli {
    /// Number of ranks (at least 1).
    #[arg(short = 'n', long = "np", value_name = "N", value_parser = parse_rank_count)]
    np: usize,

    /// `tcp`: one process per rank; `shm`: one process, ranks are threads; `hybrid`: processes
    /// of `--threads-per-process` thread ranks each, numbered block-wise by process; `mpi`: runs
    /// the system `mpirun` (`$MPIRUN`, else `mpirun` on PATH) with `-x FASTMP_DEVICE=mpi` instead.
    #[arg(long, value_enum, default_value_t = Device::Tcp)]
    device: Device,

    /// `--device hybrid`: thread ranks per process, T (default auto). The job runs ceil(N / T)
    /// processes; process p runs ranks p*T .. min((p+1)*T, N), so only the last may have fewer.
    /// `auto`: the CPUs this launcher may run on divided by the slots of the busiest host in
    /// the host list (one slot without a list), at least 1; remote hosts are assumed to have as
    /// many CPUs as this one. With 2 CPUs, `-np 8` on this machine gives T = 2, 4 processes.
    /// Processes take host slots as tcp ranks do (one process per slot).
    #[arg(long, value_name = "T|auto", value_parser = parse_threads_per_process)]
    threads_per_process: Option<ThreadsPerProcess>,

    /// `--device hybrid`: what carries messages between processes. `mpi` runs the system
    /// `mpirun` (as `--device mpi` does) with one MPI process per hybrid process and
    /// `FASTMP_INTERPROCESS=mpi`; the program must be built with fastmp's `mpi` feature.
    #[arg(long, value_enum, value_name = "TRANSPORT")]
    interprocess: Option<Interprocess>,

    /// File listing hosts: `host slots=K`, `host:K` or `host` (one slot) per line; `#` starts a comment.
    #[arg(long, value_name = "FILE", conflicts_with = "hosts")]
    hostfile: Option<PathBuf>,

    /// Comma-separated hosts with slot counts, e.g. `a:2,b:2`; ranks fill each host's slots in order.
    #[arg(long, value_name = "HOST[:SLOTS],...")]
    hosts: Option<String>,

    /// Allow more ranks than slots (ranks wrap around the host list again).
    #[arg(long)]
    oversubscribe: bool,

    /// Prefix every output line with `[RANK] ` (`[shm] ` on the shm device; on hybrid the
    /// ranks of the process that printed it, `[FIRST-LAST] `, or `[RANK] ` for a one-rank process).
    #[arg(long)]
    tag_output: bool,

    /// Terminate the job after this many seconds (fractions allowed) and exit 124.
    #[arg(long, value_name = "SECONDS", value_parser = parse_timeout)]
    timeout: Option<Duration>,

    /// `core` sets FASTMP_PIN=compact, `none` sets FASTMP_PIN=none; unset leaves FASTMP_PIN alone.
    /// Hybrid processes on this machine are each bound to a block of T CPUs when they all fit,
    /// unless `none`.
    #[arg(long, value_enum, value_name = "POLICY")]
    bind_to: Option<BindTo>,

    /// Command that runs a rank on a remote host as `CMD HOST env K=V... PROGRAM ARGS`
    /// (split on whitespace; default `$FASTMP_AGENT`, else `ssh`).
    #[arg(long, value_name = "CMD")]
    agent: Option<String>,

    /// Rank 0's rendezvous address (on hybrid: process 0's, where rank 0 runs). Local jobs: the launcher listens there (port 0 = any).
    /// With remote hosts: rank 0 listens there (default: rank 0's host and a random port).
    #[arg(long, value_name = "HOST:PORT")]
    rendezvous: Option<String>,

    /// The program and its arguments.
    #[arg(value_name = "PROGRAM", required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<OsString>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Device {
    Tcp,
    Shm,
    Hybrid,
    Mpi,
}

/// `--interprocess`: the hybrid device's transport between processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Interprocess {
    Tcp,
    Mpi,
}

/// `--threads-per-process`: a count, or one derived from the CPUs (see the option's help).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadsPerProcess {
    Count(usize),
    Auto,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BindTo {
    Core,
    None,
}

impl BindTo {
    /// The `FASTMP_PIN` value this policy asks the ranks to apply.
    pub fn pin_policy(self) -> &'static str {
        match self {
            BindTo::Core => "compact",
            BindTo::None => "none",
        }
    }
}

/// Where the host list comes from; read later by [`crate::hosts`].
#[derive(Debug)]
pub enum HostSource {
    Spec(String),
    File(PathBuf),
}

/// A checked command line.
#[derive(Debug)]
pub struct Options {
    pub np: usize,
    pub device: Device,
    /// Set exactly when `device` is [`Device::Hybrid`].
    pub threads_per_process: Option<ThreadsPerProcess>,
    /// The hybrid device's transport between processes (tcp unless `--interprocess mpi`).
    pub interprocess: Interprocess,
    pub hosts: Option<HostSource>,
    pub oversubscribe: bool,
    pub tag_output: bool,
    pub timeout: Option<Duration>,
    pub bind_to: Option<BindTo>,
    /// Agent command words; only used for remote hosts.
    pub agent: Vec<OsString>,
    pub rendezvous: Option<String>,
    pub program: OsString,
    pub args: Vec<OsString>,
}

/// What went wrong while reading the command line.
pub enum CliError {
    /// clap's own error (or `--help`/`--version`), which knows how to print itself and its exit code.
    Clap(clap::Error),
    /// A combination clap cannot check.
    Invalid(String),
}

/// Parses `argv` (program name first). `agent_env` is `FASTMP_AGENT`, passed in so tests
/// and callers control it.
pub fn parse(argv: Vec<OsString>, agent_env: Option<OsString>) -> Result<Options, CliError> {
    let cli = Cli::try_parse_from(normalize_mpirun_style(argv)).map_err(CliError::Clap)?;
    let hosts = match (cli.hosts, cli.hostfile) {
        (Some(spec), _) => Some(HostSource::Spec(spec)),
        (None, Some(path)) => Some(HostSource::File(path)),
        (None, None) => None,
    };
    if cli.device == Device::Shm {
        if hosts.is_some() {
            return Err(CliError::Invalid(
                "--device shm runs one process on this machine; --hosts/--hostfile need --device tcp or hybrid".into(),
            ));
        }
        if cli.rendezvous.is_some() {
            return Err(CliError::Invalid("--rendezvous only applies to --device tcp or hybrid".into()));
        }
    }
    if cli.device == Device::Mpi && cli.rendezvous.is_some() {
        return Err(CliError::Invalid(
            "--rendezvous only applies to --device tcp or hybrid (MPI starts the mpi device)".into(),
        ));
    }
    let threads_per_process = match (cli.device, cli.threads_per_process) {
        (Device::Hybrid, choice) => Some(choice.unwrap_or(ThreadsPerProcess::Auto)),
        (_, None) => None,
        (_, Some(_)) => {
            return Err(CliError::Invalid("--threads-per-process only applies to --device hybrid".into()));
        }
    };
    let interprocess = match (cli.device, cli.interprocess) {
        (Device::Hybrid, choice) => choice.unwrap_or(Interprocess::Tcp),
        (_, None) => Interprocess::Tcp,
        (_, Some(_)) => return Err(CliError::Invalid("--interprocess only applies to --device hybrid".into())),
    };
    if interprocess == Interprocess::Mpi && cli.rendezvous.is_some() {
        return Err(CliError::Invalid("--rendezvous does not apply to --interprocess mpi (MPI starts the job)".into()));
    }
    if let Some(address) = &cli.rendezvous {
        check_host_port(address).map_err(CliError::Invalid)?;
    }
    let agent_text = match cli.agent {
        Some(text) => OsString::from(text),
        None => agent_env.unwrap_or_else(|| DEFAULT_AGENT.into()),
    };
    let agent = split_agent(&agent_text).map_err(CliError::Invalid)?;
    let mut command = cli.command.into_iter();
    let program = command.next().ok_or_else(|| CliError::Invalid("no PROGRAM given".into()))?;
    Ok(Options {
        np: cli.np,
        device: cli.device,
        threads_per_process,
        interprocess,
        hosts,
        oversubscribe: cli.oversubscribe,
        tag_output: cli.tag_output,
        timeout: cli.timeout,
        bind_to: cli.bind_to,
        agent,
        rendezvous: cli.rendezvous,
        program,
        args: command.collect(),
    })
}

/// Rewrites mpirun's `-np N` (which clap would read as `-n p`) into `--np N`, but only
/// among the launcher's own options: the scan stops at `--` or at PROGRAM, so the
/// program's arguments stay untouched.
fn normalize_mpirun_style(argv: Vec<OsString>) -> Vec<OsString> {
    let value_options = options_taking_values();
    let mut normalized = Vec::with_capacity(argv.len());
    let mut rest = argv.into_iter();
    normalized.extend(rest.next());
    let mut next_is_value = false;
    for arg in rest.by_ref() {
        if next_is_value {
            next_is_value = false;
            normalized.push(arg);
            continue;
        }
        let Some(text) = arg.to_str().filter(|text| text.starts_with('-') && *text != "--") else {
            // `--`, PROGRAM (anything not starting with '-') or a non-UTF-8 word: stop.
            normalized.push(arg);
            break;
        };
        if let Some(count) = text.strip_prefix("-np") {
            if count.is_empty() {
                normalized.push("--np".into());
                next_is_value = true;
                continue;
            }
            let count = count.strip_prefix('=').unwrap_or(count);
            normalized.push(format!("--np={count}").into());
            continue;
        }
        next_is_value = value_options.iter().any(|option| option == text);
        normalized.push(arg);
    }
    normalized.extend(rest);
    normalized
}

/// Spellings (`-n`, `--np`, `--device`, ...) of the options that consume the next word,
/// taken from the clap definition so the two cannot drift apart.
fn options_taking_values() -> Vec<String> {
    let command = Cli::command();
    let mut spellings = Vec::new();
    for arg in command.get_arguments() {
        if arg.is_positional() || !arg.get_action().takes_values() {
            continue;
        }
        for short in arg.get_short_and_visible_aliases().unwrap_or_default() {
            spellings.push(format!("-{short}"));
        }
        for long in arg.get_long_and_visible_aliases().unwrap_or_default() {
            spellings.push(format!("--{long}"));
        }
    }
    spellings
}

fn parse_rank_count(text: &str) -> Result<usize, String> {
    let count: usize = text.parse().map_err(|_| format!("`{text}` is not a rank count"))?;
    if count == 0 {
        return Err("the number of ranks must be at least 1".into());
    }
    Ok(count)
}

fn parse_threads_per_process(text: &str) -> Result<ThreadsPerProcess, String> {
    if text == "auto" {
        return Ok(ThreadsPerProcess::Auto);
    }
    match text.parse::<usize>() {
        Ok(0) => Err("a process needs at least 1 thread rank".into()),
        Ok(count) => Ok(ThreadsPerProcess::Count(count)),
        Err(_) => Err(format!("`{text}` is neither a number of thread ranks nor `auto`")),
    }
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text.parse().map_err(|_| format!("`{text}` is not a number of seconds"))?;
    if seconds.is_nan() || seconds <= 0.0 {
        return Err(format!("the timeout must be positive, not {text}"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("timeout `{text}` is too large"))
}

/// Checks the `HOST:PORT` shape early, so a typo is reported before anything is spawned.
fn check_host_port(address: &str) -> Result<(), String> {
    let bad = || format!("--rendezvous `{address}` is not HOST:PORT");
    let (host, port) = address.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() {
        return Err(bad());
    }
    port.parse::<u16>().map(|_| ()).map_err(|_| bad())
}

/// Splits an agent command on whitespace (`ip netns exec` → three words).
fn split_agent(text: &OsString) -> Result<Vec<OsString>, String> {
    let text = text.to_str().ok_or_else(|| "the agent command is not valid UTF-8".to_string())?;
    let words: Vec<OsString> = text.split_whitespace().map(OsString::from).collect();
    if words.is_empty() {
        return Err("the agent command is empty".into());
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threads(line: &str) -> Option<ThreadsPerProcess> {
        parse(words(line), None).unwrap_or_else(|_| panic!("valid command line {line}")).threads_per_process
    }

    #[test]
    fn threads_per_process_counts_and_auto() {
        assert_eq!(
            threads("fastmprun -np 6 --device hybrid --threads-per-process 3 prog"),
            Some(ThreadsPerProcess::Count(3))
        );
        assert_eq!(
            threads("fastmprun -np 6 --device hybrid --threads-per-process=auto prog"),
            Some(ThreadsPerProcess::Auto)
        );
        assert_eq!(threads("fastmprun -np 6 --device hybrid prog"), Some(ThreadsPerProcess::Auto));
        assert_eq!(threads("fastmprun -np 6 --device tcp prog --threads-per-process 3"), None);
        let options = parse(words("fastmprun -np 6 --device hybrid --threads-per-process 3 prog -np 2"), None);
        let options = options.unwrap_or_else(|_| panic!("valid command line"));
        assert_eq!(options.args, words("-np 2"));
    }

    fn words(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn np_spellings_rewrite_only_before_the_program() {
        let normalized = normalize_mpirun_style(words("fastmprun -np 2 --device tcp prog -np 3"));
        assert_eq!(normalized, words("fastmprun --np 2 --device tcp prog -np 3"));
        let normalized = normalize_mpirun_style(words("fastmprun --hosts -np -np4 -- -np"));
        assert_eq!(normalized, words("fastmprun --hosts -np --np=4 -- -np"));
    }

    #[test]
    fn program_arguments_are_kept_verbatim() {
        let options =
            parse(words("fastmprun -np 2 prog --tag-output -x"), None).unwrap_or_else(|_| panic!("valid command line"));
        assert_eq!(options.np, 2);
        assert!(!options.tag_output);
        assert_eq!(options.program, "prog");
        assert_eq!(options.args, words("--tag-output -x"));
        assert_eq!(options.agent, words("ssh"));
    }

    #[test]
    fn bad_values_are_rejected() {
        for line in [
            "fastmprun -np 0 prog",
            "fastmprun -np 2 --timeout -1 prog",
            "fastmprun -np 2 --timeout nan prog",
            "fastmprun -np 2 --rendezvous nohost prog",
            "fastmprun -np 2 --device shm --hosts a:2 prog",
            "fastmprun -np 2",
            "fastmprun -np 4 --threads-per-process 2 prog",
            "fastmprun -np 4 --device shm --threads-per-process 2 prog",
            "fastmprun -np 4 --device hybrid --threads-per-process 0 prog",
            "fastmprun -np 4 --device hybrid --threads-per-process two prog",
            "fastmprun -np 4 --device hybrid --threads-per-process -1 prog",
        ] {
            assert!(parse(words(line), None).is_err(), "{line}");
        }
    }
}
