//! `fastmprun`: starts a fastmp program with N ranks, forwards its output and
//! supervises it.
//!
//! ```text
//! fastmprun -np N [--device shm|tcp|hybrid|mpi] [--threads-per-process T|auto] [--interprocess tcp|mpi] [--hostfile F | --hosts a:2,b:2] [--oversubscribe]
//!           [--tag-output] [--timeout S] [--bind-to core|none] [--agent CMD]
//!           [--rendezvous HOST:PORT] PROGRAM ARGS...
//! ```
//!
//! # Environment contract
//!
//! The launcher talks to the ranks only through environment variables; the fastmp
//! library reads them in `Config::from_env()`.
//!
//! `--device shm` runs PROGRAM once; its ranks are threads:
//! - `FASTMP_DEVICE=shm`, `FASTMP_NP=N`, `FASTMP_LAUNCHER=fastmprun` (so that
//!   `fastmp::run(np, ..)` joins the job, or refuses when `np` is not N).
//!
//! `--device tcp` (the default) runs one process per rank:
//! - `FASTMP_DEVICE=tcp`, `FASTMP_RANK=i`, `FASTMP_SIZE=N`;
//! - `FASTMP_RENDEZVOUS=host:port`, rank 0's rendezvous listener, for every rank;
//! - `FASTMP_RENDEZVOUS_FD=n`, rank 0 only and only when every rank is local: the
//!   launcher bound and listens on the rendezvous socket itself and rank 0 inherits it as
//!   descriptor `n` (so the port cannot be taken by someone else before rank 0 starts);
//!   with remote hosts rank 0 binds `FASTMP_RENDEZVOUS` itself;
//! - `FASTMP_JOB_SECRET`: 64 lowercase hex digits (32 random bytes), the same for every
//!   rank of a job; each connection proves it knows it.
//!
//! `--device hybrid` runs P = ceil(N / T) processes of T thread ranks each (T from
//! `--threads-per-process`), placed on hosts as tcp ranks are (a process per slot). Process p
//! runs ranks `p*T .. min((p+1)*T, N)` and gets what a tcp rank p of P would get (process 0
//! plays rank 0's part at the rendezvous), with `FASTMP_DEVICE=hybrid`, plus:
//! - `FASTMP_NP=N` (the job's ranks) and `FASTMP_THREADS_PER_PROCESS=T` (always a number: the
//!   launcher resolves `auto`).
//!
//! The hybrid processes on this machine are bound, as mpirun binds its processes, each to its own
//! block of T of the CPUs the launcher may use (so that pinning inside a process, which counts
//! from its first allowed CPU, does not put every process's threads on the same CPUs), unless
//! they do not all fit or `--bind-to none` is given. Remote processes are not bound.
//!
//! All devices: `FASTMP_PIN=compact` with `--bind-to core`, `FASTMP_PIN=none` with
//! `--bind-to none`; without `--bind-to` an exported `FASTMP_PIN` is left as it is.
//! The other variables above are removed from what the processes inherit, so a value
//! from an enclosing job never leaks in. Remote ranks start as
//! `AGENT HOST env K=V... PROGRAM ARGS...` and also receive the launcher's other
//! `FASTMP_*` settings (e.g. `FASTMP_EAGER_LIMIT`) that way.
//!
//! # Traces
//!
//! With `FASTMP_TRACE=path.json` set (see `fastmp::Config::trace`), each rank process of a tcp or
//! hybrid job writes `path.json.<rank>.json`; when the job ends the launcher merges them into
//! `path.json` (one row per rank) and removes them. shm jobs write `path.json` themselves;
//! `--device mpi` hands the job to mpirun and leaves the per-rank files.
//!
//! # Output and exit status
//!
//! Every process's stdout and stderr are forwarded line by line (`--tag-output` prefixes
//! `[i] `; on shm all thread ranks share one stdout, so the prefix is `[shm] `; on hybrid the
//! thread ranks of a process share its stdout, so the prefix names them all, `[4-7] `). The
//! fastmp library prints a job's failure once, in the rank that failed first (its peers, whose
//! operations failed because of it, stay quiet), and every rank of a failed job exits with the
//! same status under `fastmp::main`: 1, or the code a rank gave `Comm::abort` (MPI_Abort). The
//! launcher exits 0 if every process exits 0; otherwise with the status of the first one
//! to fail (128+signal if it was killed), after terminating the others (any other rank that a
//! signal from outside killed is named as well: its peers may fail and be noticed first); 124 after
//! `--timeout`; 128+signal when the launcher itself gets SIGINT/SIGTERM/SIGHUP, which it
//! forwards to the ranks first.

mod cli;
mod hosts;
mod mpi;
mod os;
mod output;
mod rendezvous;
mod spawn;
mod supervise;
mod trace;

use std::io::ErrorKind;
use std::process::ExitCode;
use std::time::Duration;

use cli::{BindTo, Device, Options, ThreadsPerProcess};
use hosts::{HostSlots, LocalNames, Placement};
use rendezvous::Rendezvous;
use spawn::{HybridShape, NetworkJob, ProcessSpec, Program};
use supervise::Supervisor;

/// Exit status for command-line and configuration mistakes (as clap uses).
const USAGE_EXIT: u8 = 2;

/// How long the output threads may keep running after every process is gone
/// (something that escaped its process group may hold a pipe open).
const OUTPUT_DRAIN_PATIENCE: Duration = Duration::from_secs(5);

fn main() -> ExitCode {
    ExitCode::from(run())
}

fn run() -> u8 {
    let argv: Vec<_> = std::env::args_os().collect();
    let options = match cli::parse(argv, std::env::var_os("FASTMP_AGENT")) {
        Ok(options) => options,
        Err(cli::CliError::Clap(error)) => {
            // Prints help/version to stdout (status 0) or the error to stderr (status 2).
            let _ = error.print();
            return u8::try_from(error.exit_code()).unwrap_or(USAGE_EXIT);
        }
        Err(cli::CliError::Invalid(message)) => return fail(&message, USAGE_EXIT),
    };
    if options.device == Device::Mpi {
        // Before signals are blocked: mpirun inherits the signal mask.
        return fail(&mpi::exec_mpirun(&options, None), spawn_failure_exit(&std::io::Error::last_os_error()));
    }
    if let (Some(choice), cli::Interprocess::Mpi) = (options.threads_per_process, options.interprocess) {
        // mpirun places the processes; `auto` divides this machine's CPUs (no host list here).
        let threads = threads_per_process(choice, None, fastmp::affinity::allowed_cpus().len());
        return fail(&mpi::exec_mpirun(&options, Some(threads)), spawn_failure_exit(&std::io::Error::last_os_error()));
    }
    // Before any other thread exists, so every thread inherits the blocked signals.
    let wakeups = match os::watch_signals() {
        Ok(wakeups) => wakeups,
        Err(error) => return fail(&format!("cannot watch signals: {error}"), 1),
    };
    let (processes, rendezvous) = match plan(&options) {
        Ok(plan) => plan,
        Err(message) => return fail(&message, USAGE_EXIT),
    };
    let program = Program { program: options.program, args: options.args, agent: options.agent };
    let mut listener = rendezvous.and_then(|rendezvous| rendezvous.listener);
    let mut forwarders = output::Forwarders::new(options.tag_output);
    let mut supervisor = Supervisor::new(wakeups, options.timeout);
    for spec in &processes {
        let mut child = match spawn::spawn(spec, &program) {
            Ok(child) => child,
            Err(error) => {
                supervisor.abort();
                forwarders.finish(OUTPUT_DRAIN_PATIENCE);
                let name = program.program.to_string_lossy();
                let what = match &spec.placement {
                    Placement::Local => format!("cannot start `{name}` for {}", spec.label),
                    Placement::Remote(host) => format!(
                        "cannot start the agent `{}` for {} on {host}",
                        program.agent.first().map_or("".into(), |a| a.to_string_lossy()),
                        spec.label
                    ),
                };
                return fail(&format!("{what}: {error}"), spawn_failure_exit(&error));
            }
        };
        if spec.inherit.is_some() {
            // Rank 0 has its copy; the launcher's would keep the port open after rank 0 exits.
            listener = None;
        }
        if let Err(error) = forwarders.attach(&mut child, spec.label) {
            eprintln!("fastmprun: cannot forward the output of {}: {error}", spec.label);
        }
        supervisor.add(spec.label, child);
    }
    drop(listener);
    let status = supervisor.run();
    if !forwarders.finish(OUTPUT_DRAIN_PATIENCE) {
        eprintln!("fastmprun: some output was still open after every rank exited; dropped it");
    }
    if options.device != Device::Shm {
        trace::merge_after_job(options.np);
    }
    status
}

/// Decides where every process runs and what it is told.
fn plan(options: &Options) -> Result<(Vec<ProcessSpec>, Option<Rendezvous>), String> {
    if options.device == Device::Shm {
        return Ok((vec![spawn::shm_process(options.np, options.bind_to)], None));
    }
    let this_machine = LocalNames::detect();
    let host_list = options.hosts.as_ref().map(hosts::load).transpose()?;
    let local_cpus = fastmp::affinity::allowed_cpus();
    let hybrid = options.threads_per_process.map(|choice| HybridShape {
        np: options.np,
        threads_per_process: threads_per_process(choice, host_list.as_deref(), local_cpus.len()),
    });
    let processes = hybrid.map_or(options.np, HybridShape::processes);
    let placements = match &host_list {
        Some(list) => hosts::assign(list, processes, options.oversubscribe, &this_machine)?,
        None => vec![Placement::Local; processes],
    };
    let requested = options.rendezvous.as_deref();
    let rendezvous = if placements.iter().all(|p| *p == Placement::Local) {
        rendezvous::bind_local(requested)?
    } else {
        let rank0_host = match placements.first() {
            Some(Placement::Remote(host)) => Some(host.as_str()),
            // Remote ranks must reach rank 0 by a name that is not "localhost".
            Some(Placement::Local) | None => this_machine.hostname(),
        };
        rendezvous::choose_remote(requested, rank0_host)?
    };
    let secret = rendezvous::job_secret()?;
    let job = NetworkJob {
        placements: &placements,
        rendezvous: &rendezvous.address,
        secret: &secret,
        rank0_listener: rendezvous.listener.as_ref().map(std::os::fd::AsRawFd::as_raw_fd),
        bind_to: options.bind_to,
        hybrid,
        local_cpus: if options.bind_to == Some(BindTo::None) { &[] } else { &local_cpus },
    };
    Ok((spawn::network_processes(&job), Some(rendezvous)))
}

/// Resolves `--threads-per-process auto`: this machine's allowed CPUs shared by the processes
/// of the busiest host (a process per slot; one slot without a host list), at least one each.
fn threads_per_process(choice: ThreadsPerProcess, host_list: Option<&[HostSlots]>, local_cpus: usize) -> usize {
    match choice {
        ThreadsPerProcess::Count(count) => count,
        ThreadsPerProcess::Auto => {
            let busiest = host_list.and_then(|list| list.iter().map(|host| host.slots).max()).unwrap_or(1);
            (local_cpus / busiest).max(1)
        }
    }
}

/// Shell convention: 127 for a program that does not exist, 126 for one that cannot run.
fn spawn_failure_exit(error: &std::io::Error) -> u8 {
    match error.kind() {
        ErrorKind::NotFound => 127,
        ErrorKind::PermissionDenied => 126,
        _ => 1,
    }
}

fn fail(message: &str, status: u8) -> u8 {
    eprintln!("fastmprun: {message}");
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(counts: &[usize]) -> Vec<HostSlots> {
        counts.iter().enumerate().map(|(i, &slots)| HostSlots { name: format!("h{i}"), slots }).collect()
    }

    #[test]
    fn auto_threads_share_the_cpus_of_the_busiest_host() {
        assert_eq!(threads_per_process(ThreadsPerProcess::Count(3), None, 2), 3);
        assert_eq!(threads_per_process(ThreadsPerProcess::Auto, None, 2), 2);
        assert_eq!(threads_per_process(ThreadsPerProcess::Auto, Some(&slots(&[1, 1])), 16), 16);
        assert_eq!(threads_per_process(ThreadsPerProcess::Auto, Some(&slots(&[2, 4])), 16), 4);
        assert_eq!(threads_per_process(ThreadsPerProcess::Auto, Some(&slots(&[4])), 2), 1);
        assert_eq!(threads_per_process(ThreadsPerProcess::Auto, None, 0), 1);
    }
}
