//! `--device hybrid` under the launcher: processes of thread ranks. What each process is told and
//! how a dead process is reported need no hybrid device (a shell script stands in for the
//! program); the rest runs real fastmp programs (`fastmp-testprog`, the fastmp examples,
//! `fastmp-bench`) on the hybrid device: under `fastmprun`, by hand with the launcher variables,
//! under Open MPI's `mpirun` and across two network namespaces.
//!
//! Every run has the hang guard of `support::run`; nothing asserts on timing.

#[path = "support/namespaces.rs"]
mod namespaces;
#[path = "support/ring.rs"]
mod ring;
mod support;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::OnceLock;

use namespaces::{NAMESPACE_ADDRESSES, NamespacePair};
use ring::ring_checksum;
use support::{cargo_build, clean, run};

const LAUNCHER: &str = env!("CARGO_BIN_EXE_fastmprun");
const TESTPROG: &str = env!("CARGO_BIN_EXE_fastmp-testprog");

/// Job secret for jobs started without `fastmprun` (any 64 hex digits do).
const SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// Prints what the launcher told this process, one line: device, process index, processes,
/// ranks, threads per process, whether it inherited the rendezvous listener, rendezvous, secret.
const PRINT_ENVIRONMENT: &str = "echo \"$FASTMP_DEVICE $FASTMP_RANK $FASTMP_SIZE $FASTMP_NP \
                                 $FASTMP_THREADS_PER_PROCESS ${FASTMP_RENDEZVOUS_FD:+fd} \
                                 $FASTMP_RENDEZVOUS $FASTMP_JOB_SECRET\"";

fn fastmprun(args: &[&str]) -> Command {
    let mut command = clean(Path::new(LAUNCHER));
    command.args(args);
    command
}

/// `fastmprun -np NP --device hybrid --threads-per-process T --tag-output ARGS...`.
fn hybrid(np: usize, threads: &str, args: &[&str]) -> Command {
    let np = np.to_string();
    let mut command = fastmprun(&["-np", &np, "--device", "hybrid", "--threads-per-process", threads, "--tag-output"]);
    command.args(args);
    command
}

fn describe(status: ExitStatus, stdout: &str, stderr: &str) -> String {
    format!("{status}\nstdout:\n{stdout}\nstderr:\n{stderr}")
}

/// Runs `command`, asserts success and returns its stdout.
fn succeeds(what: &str, command: Command) -> String {
    let (status, stdout, stderr) = run(command);
    assert!(status.success(), "{what}: {}", describe(status, &stdout, &stderr));
    stdout
}

// ---------------------------------------------------------------------------------------------
// The launcher alone
// ---------------------------------------------------------------------------------------------

#[test]
fn threads_per_process_is_checked_before_anything_starts() {
    let cases: [(&[&str], &str); 4] = [
        (&["-np", "4", "--threads-per-process", "2", "true"], "--threads-per-process only applies to --device hybrid"),
        (&["-np", "4", "--device", "shm", "--threads-per-process", "2", "true"], "only applies to --device hybrid"),
        (&["-np", "4", "--device", "hybrid", "--threads-per-process", "0", "true"], "at least 1 thread rank"),
        (&["-np", "4", "--device", "hybrid", "--threads-per-process", "many", "true"], "neither a number"),
    ];
    for (args, message) in cases {
        let (status, stdout, stderr) = run(fastmprun(args));
        assert_eq!(status.code(), Some(2), "{args:?}: {}", describe(status, &stdout, &stderr));
        assert!(stderr.contains(message), "{args:?}: stderr lacks `{message}`:\n{stderr}");
    }
}

/// Each process is told its place among the processes, the job's rank count and T; process 0
/// alone inherits the rendezvous listener, and all share the rendezvous and the secret.
#[test]
fn every_process_gets_its_place_and_the_job_shape() {
    let stdout = succeeds("environment of 5 ranks in 2s", hybrid(5, "2", &["sh", "-c", PRINT_ENVIRONMENT]));
    let mut shared = Vec::new();
    for (process, tag) in ["[0-1]", "[2-3]", "[4]"].into_iter().enumerate() {
        let line = stdout.lines().find(|line| line.starts_with(tag));
        let line = line.unwrap_or_else(|| panic!("no line tagged {tag}:\n{stdout}"));
        let words: Vec<&str> = line.split_whitespace().collect();
        let inherits = if process == 0 { vec!["fd"] } else { vec![] };
        let index = process.to_string();
        let expected = [vec![tag, "hybrid", &index, "3", "5", "2"], inherits].concat();
        assert_eq!(words[..words.len() - 2], expected, "{line}");
        shared.push(words[words.len() - 2..].to_vec());
        assert_eq!(words[words.len() - 1].len(), 64, "the secret is 64 hex digits: {line}");
    }
    shared.dedup();
    assert_eq!(shared.len(), 1, "processes disagree on the rendezvous or the secret: {shared:?}");
    assert_eq!(stdout.lines().count(), 3, "one process per 2 ranks, 3 in all:\n{stdout}");
}

#[test]
fn auto_gives_each_process_the_cpus_of_this_machine() {
    let cpus = fastmp::affinity::allowed_cpus().len().max(1);
    let processes = 8usize.div_ceil(cpus);
    let stdout = succeeds("environment with auto", hybrid(8, "auto", &["sh", "-c", PRINT_ENVIRONMENT]));
    let expected = format!("hybrid 0 {processes} 8 {cpus} fd");
    assert!(stdout.contains(&expected), "expected `{expected}` ({cpus} CPUs) in\n{stdout}");
    assert_eq!(stdout.lines().count(), processes, "{stdout}");
}

/// The CPUs a process may run on, as Linux lists them (`0-3`, `0,2`).
const PRINT_AFFINITY: &str = "sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status";

/// Processes on this machine each get CPUs of their own (one each here: T = 1), in process
/// order, unless `--bind-to none`.
#[test]
fn local_processes_are_bound_to_cpus_of_their_own() {
    let cpus = fastmp::affinity::allowed_cpus();
    let np = cpus.len().clamp(1, 4);
    let stdout = succeeds("affinity", hybrid(np, "1", &["sh", "-c", PRINT_AFFINITY]));
    for (process, cpu) in cpus.iter().take(np).enumerate() {
        let line = format!("[{process}] {cpu}");
        assert!(stdout.lines().any(|l| l == line), "no `{line}` in\n{stdout}");
    }
    let own = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let own = own.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("a CPU list").trim();
    let unbound = succeeds("unbound", hybrid(np, "1", &["--bind-to", "none", "sh", "-c", PRINT_AFFINITY]));
    assert_eq!(unbound.lines().filter(|l| l.ends_with(&format!("] {own}"))).count(), np, "{unbound}");
}

/// A process killed from outside ends the job: the launcher names it with its ranks and the
/// signal, and stops the other processes.
#[test]
fn a_killed_process_is_named_with_its_ranks() {
    let script = "if [ \"$FASTMP_RANK\" = 1 ]; then kill -9 $$; fi; exec sleep 60";
    let (status, stdout, stderr) = run(hybrid(6, "2", &["sh", "-c", script]));
    let described = describe(status, &stdout, &stderr);
    assert_eq!(status.code(), Some(137), "{described}");
    let report = stderr.lines().find(|line| line.starts_with("fastmprun: process 1 (ranks 2-3) (pid "));
    let report = report.unwrap_or_else(|| panic!("the launcher did not name process 1: {described}"));
    assert!(report.ends_with("was killed by signal 9 (SIGKILL)"), "{report}");
    assert!(stderr.contains("terminating 2 other processes"), "{described}");
}

// ---------------------------------------------------------------------------------------------
// fastmp programs on the hybrid device
// ---------------------------------------------------------------------------------------------

/// The ring computes the same data as with thread ranks on shm, with even and uneven processes.
#[test]
fn ring_on_hybrid_matches_shm() {
    for (np, threads) in [(6, "3"), (5, "2")] {
        let shm = fastmprun(&["-np", &np.to_string(), "--device", "shm", TESTPROG, "ring"]);
        let shm_sum = ring_checksum("shm ring", &succeeds("shm ring", shm), np, |_| String::new());
        let name = format!("ring of {np} in {threads}s");
        let stdout = succeeds(&name, hybrid(np, threads, &[TESTPROG, "ring"]));
        let per_process: usize = threads.parse().expect("a count");
        let tag = |rank: usize| {
            let first = rank / per_process * per_process;
            let last = (first + per_process).min(np) - 1;
            if first == last { format!("[{first}] ") } else { format!("[{first}-{last}] ") }
        };
        assert_eq!(ring_checksum(&name, &stdout, np, tag), shm_sum, "{name} computed other data than shm");
    }
}

/// Builds the fastmp examples run here and `fastmp-bench` once; name → executable.
fn programs() -> &'static BTreeMap<String, PathBuf> {
    static BUILT: OnceLock<BTreeMap<String, PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| {
        let mut built = cargo_build(&["-p", "fastmp", "--example", "p2p", "--example", "collectives"], "example");
        built.extend(cargo_build(&["-p", "fastmp-bench", "--bin", "fastmp-bench"], "bin"));
        built
    })
}

/// The examples check their own results; every rank reports one line.
#[test]
fn examples_run_with_even_and_uneven_processes() {
    for name in ["p2p", "collectives"] {
        let program = programs()[name].to_str().expect("a UTF-8 path");
        for (np, threads) in [(6, "3"), (5, "2")] {
            let stdout = succeeds(&format!("{name} on {np} in {threads}s"), hybrid(np, threads, &[program]));
            for rank in 0..np {
                let report = format!("{name}: rank {rank}/{np} ");
                assert!(stdout.lines().any(|line| line.contains(&report)), "no `{report}` line:\n{stdout}");
            }
        }
    }
}

/// One JSON line per size, printed once (by rank 0), for all ranks of all processes.
#[test]
fn bench_allreduce_runs_on_hybrid() {
    let bench = programs()["fastmp-bench"].to_str().expect("a UTF-8 path");
    let args = [bench, "allreduce", "--json", "--max-size", "64", "--iterations", "5"];
    let stdout = succeeds("fastmp-bench allreduce", hybrid(4, "2", &args));
    let rows: Vec<&str> = stdout.lines().collect();
    // Sizes 4, 8, ..., 64 bytes.
    assert_eq!(rows.len(), 5, "one row per size, from rank 0 only:\n{stdout}");
    for row in rows {
        assert!(row.starts_with("[0-1] {"), "printed by another process: {row}");
        assert!(row.contains("\"device\":\"hybrid\"") && row.contains("\"np\":4"), "{row}");
        assert!(row.contains("\"max_us\":"), "{row}");
    }
}

/// A process killed between operations (SIGKILL, ranks 2-3 with it): the launcher names it, and
/// the job fails instead of hanging.
#[test]
fn killed_process_fails_the_job() {
    let (status, stdout, stderr) = run(hybrid(4, "2", &["--timeout", "100", TESTPROG, "kill", "2"]));
    let described = describe(status, &stdout, &stderr);
    assert!(!status.success() && status.code() != Some(124), "{described}");
    assert!(stdout.contains("[2-3] rank 2: killing its process with SIGKILL"), "{described}");
    let report = stderr.lines().find(|line| line.starts_with("fastmprun: process 1 (ranks 2-3) (pid "));
    let report = report.unwrap_or_else(|| panic!("the launcher did not name process 1: {described}"));
    assert!(report.ends_with("was killed by signal 9 (SIGKILL)"), "{report}");
}

/// A loopback port that was free a moment ago (for jobs whose rank 0 binds it itself).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("address of a bound listener").port()
}

/// Process `index` of `size` of a hybrid job started by hand, as the environment contract says
/// (no `FASTMP_NP`: the job has `size * threads` ranks).
fn process_by_hand(index: usize, size: usize, threads: usize, rendezvous: &str, args: &[&str]) -> Command {
    let mut command = clean(Path::new(TESTPROG));
    command
        .args(args)
        .env("FASTMP_DEVICE", "hybrid")
        .env("FASTMP_THREADS_PER_PROCESS", threads.to_string())
        .env("FASTMP_RANK", index.to_string())
        .env("FASTMP_SIZE", size.to_string())
        .env("FASTMP_RENDEZVOUS", rendezvous)
        .env("FASTMP_JOB_SECRET", SECRET);
    command
}

/// Without a launcher to stop it, the process that survives a killed one fails on its own, with
/// an error naming a rank of the dead process.
#[test]
fn survivor_of_a_killed_process_fails_with_a_clear_error() {
    let rendezvous = format!("127.0.0.1:{}", free_port());
    let victim = std::thread::spawn({
        let rendezvous = rendezvous.clone();
        move || run(process_by_hand(1, 2, 2, &rendezvous, &["kill", "2"]))
    });
    let (status, stdout, stderr) = run(process_by_hand(0, 2, 2, &rendezvous, &["kill", "2"]));
    let (victim_status, victim_stdout, victim_stderr) = victim.join().expect("the victim's runner");
    assert_eq!(
        victim_status.signal(),
        Some(libc::SIGKILL),
        "{}",
        describe(victim_status, &victim_stdout, &victim_stderr)
    );
    let described = describe(status, &stdout, &stderr);
    assert_eq!(status.code(), Some(1), "{described}");
    for survivor in [0, 1] {
        let prefix = format!("rank {survivor}: receive from rank 2 failed: ");
        let line = stdout.lines().find(|line| line.starts_with(&prefix));
        let line = line.unwrap_or_else(|| panic!("rank {survivor} did not report its receive: {described}"));
        // Ranks 2 and 3 died together: the error may name either.
        let error = &line[prefix.len()..];
        assert!(error.contains("rank 2") || error.contains("rank 3"), "unclear error: {line}");
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Open MPI's mpirun starts the processes; the environment names the hybrid device (the README's
/// recipe).
#[test]
fn mpirun_starts_a_hybrid_job() {
    if !on_path("mpirun") {
        eprintln!("skipped: mpirun is not on PATH (apt-get install openmpi-bin)");
        return;
    }
    let rendezvous = format!("FASTMP_RENDEZVOUS=127.0.0.1:{}", free_port());
    let secret = format!("FASTMP_JOB_SECRET={SECRET}");
    let mut mpirun = clean(Path::new("mpirun"));
    mpirun.args(["--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "FASTMP_DEVICE=hybrid"]);
    mpirun.args(["-x", "FASTMP_THREADS_PER_PROCESS=2", "-x", &rendezvous, "-x", &secret, TESTPROG, "env"]);
    let stdout = succeeds("mpirun testprog env", mpirun);
    for rank in 0..4 {
        let line = format!("rank {rank} of 4 device hybrid rank-from OMPI_COMM_WORLD_RANK");
        assert!(stdout.contains(&line), "no `{line}` in\n{stdout}");
    }
}

/// One process per host, two thread ranks each.
#[test]
fn processes_on_two_hosts_in_network_namespaces() {
    let namespaces = match NamespacePair::create() {
        Ok(pair) => pair,
        Err(why) => {
            eprintln!("skipped: needs root and iproute2 ({why})");
            return;
        }
    };
    let hosts = format!("{},{}", namespaces.names[0], namespaces.names[1]);
    // Process 0 binds the rendezvous in the first namespace; the port is private to it.
    let rendezvous = format!("{}:47001", NAMESPACE_ADDRESSES[0]);
    let args = ["--hosts", &hosts, "--agent", "ip netns exec", "--rendezvous", &rendezvous, TESTPROG, "ring"];
    let stdout = succeeds("ring across namespaces", hybrid(4, "2", &args));
    ring_checksum("ring across namespaces", &stdout, 4, |rank| if rank < 2 { "[0-1] " } else { "[2-3] " }.into());
    drop(namespaces);
}
