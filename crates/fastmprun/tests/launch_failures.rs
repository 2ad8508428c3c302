//! `fastmp::run` under a launcher, `fastmp::main`'s default rank count, `Comm::abort`'s exit code
//! and failure reports through `fastmprun`, on both devices (`fastmp-testprog` modes `run`,
//! `size`, `abort`, `fail`; `--main` runs a mode through `fastmp::main`).

use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const LAUNCHER: &str = env!("CARGO_BIN_EXE_fastmprun");
const TESTPROG: &str = env!("CARGO_BIN_EXE_fastmp-testprog");

/// Generous bound on any one job; exceeding it means something hung.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// Variables that would make a child believe it belongs to some other job.
const JOB_VARIABLES: [&str; 16] = [
    "FASTMP_DEVICE",
    "FASTMP_NP",
    "FASTMP_LAUNCHER",
    "FASTMP_RANK",
    "FASTMP_SIZE",
    "FASTMP_RENDEZVOUS",
    "FASTMP_RENDEZVOUS_FD",
    "FASTMP_JOB_SECRET",
    "FASTMP_PIN",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "TESTPROG_START_GATE",
];

/// Runs `program args` with none of the job variables and waits (under the hang guard).
fn run(program: &str, args: &[&str]) -> Output {
    run_with(program, args, &[])
}

/// [`run`] with the variables `env` set.
fn run_with(program: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(program);
    command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for name in JOB_VARIABLES {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    let child = command.spawn().unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
    let pid = child.id();
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    match finished.recv_timeout(HANG_GUARD) {
        Ok(output) => output.expect("collecting the output"),
        Err(_) => {
            // SAFETY: kill(2) only sends a signal; the child is ours and not yet reaped.
            unsafe { libc::kill(libc::pid_t::try_from(pid).unwrap_or(0), libc::SIGKILL) };
            panic!("{program} {args:?} hung for {HANG_GUARD:?}")
        }
    }
}

fn fastmprun(np: usize, device: &str, args: &[&str]) -> Output {
    let np = np.to_string();
    let mut all = vec!["-np", &np, "--device", device, TESTPROG];
    all.extend_from_slice(args);
    run(LAUNCHER, &all)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn sorted_lines(bytes: &[u8], prefix: &str) -> Vec<String> {
    let mut lines: Vec<String> = text(bytes).lines().filter(|l| l.starts_with(prefix)).map(String::from).collect();
    lines.sort();
    lines
}

#[test]
fn run_joins_the_launchers_job_when_the_sizes_agree() {
    for device in ["tcp", "shm"] {
        let out = fastmprun(2, device, &["run", "2"]);
        assert!(out.status.success(), "{device}: {out:?}");
        assert_eq!(sorted_lines(&out.stdout, "run:"), ["run: rank 0 of 2", "run: rank 1 of 2"], "{device}");
    }
}

#[test]
fn run_refuses_a_size_the_launcher_did_not_start() {
    for device in ["tcp", "shm"] {
        let out = fastmprun(2, device, &["run", "3"]);
        assert_eq!(out.status.code(), Some(1), "{device}: {out:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains("fastmp::run(3, ..): this process was started"), "{device}: {stderr}");
        assert!(stderr.contains("fastmprun -np 3"), "{device}: {stderr}");
        assert!(sorted_lines(&out.stdout, "run:").is_empty(), "{device}: no private job may run: {out:?}");
    }
}

#[test]
fn run_without_a_launcher_runs_its_own_thread_ranks() {
    let out = run(TESTPROG, &["run", "3"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(sorted_lines(&out.stdout, "run:"), ["run: rank 0 of 3", "run: rank 1 of 3", "run: rank 2 of 3"]);
}

#[test]
fn main_without_a_launcher_runs_one_rank_per_allowed_cpu() {
    let out = run(TESTPROG, &["--main", "size"]);
    assert!(out.status.success(), "{out:?}");
    let cpus = fastmp::affinity::allowed_cpus().len().max(1);
    assert_eq!(text(&out.stdout).trim(), format!("size {cpus}"));
}

#[test]
fn abort_code_is_the_launchers_exit_status() {
    for device in ["tcp", "shm"] {
        for through_main in [false, true] {
            let mut args = vec!["abort", "1", "7"];
            if through_main {
                args.insert(0, "--main");
            }
            let out = fastmprun(3, device, &args);
            assert_eq!(out.status.code(), Some(7), "{device} {args:?}: {out:?}");
            // On shm every survivor's receive named the rank that aborted (tcp ranks may be
            // stopped by the launcher before they print: see `processes_...` below).
            if device == "shm" {
                for survivor in [0, 2] {
                    let line =
                        format!("rank {survivor}: receive from rank 1 failed: rank 1 failed: called abort with code 7");
                    assert!(text(&out.stdout).lines().any(|l| l == line), "{device}: missing {line:?} in {out:?}");
                }
            }
            if through_main {
                let reports = sorted_lines(&out.stderr, "fastmp: ");
                assert_eq!(reports, ["fastmp: rank 1 aborted the job with code 7"], "{device}: {out:?}");
            }
        }
    }
}

#[test]
fn a_failure_is_reported_once_and_blames_the_failed_rank() {
    for device in ["tcp", "shm"] {
        let out = fastmprun(3, device, &["--main", "fail", "1"]);
        assert_eq!(out.status.code(), Some(1), "{device}: {out:?}");
        let reports = sorted_lines(&out.stderr, "fastmp: ");
        assert_eq!(reports, ["fastmp: rank 1 failed: testprog: rank 1 fails on purpose"], "{device}: {out:?}");
        if device == "shm" {
            for survivor in [0, 2] {
                let line = format!(
                    "rank {survivor}: receive from rank 1 failed: rank 1 failed: testprog: rank 1 fails on purpose"
                );
                assert!(text(&out.stdout).lines().any(|l| l == line), "{device}: missing {line:?} in {out:?}");
            }
        }
    }
}

/// Starts `np` tcp ranks of `args` by hand (no launcher stops the survivors early) and waits for
/// all of them.
fn processes(np: usize, args: &[&str]) -> Vec<Output> {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let rendezvous = format!("127.0.0.1:{port}");
    let secret = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let ranks: Vec<_> = (0..np)
        .map(|rank| {
            let (rendezvous, args) = (rendezvous.clone(), args.iter().map(|a| a.to_string()).collect::<Vec<_>>());
            let (size, rank) = (np.to_string(), rank.to_string());
            std::thread::spawn(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                run_with(
                    TESTPROG,
                    &args,
                    &[
                        ("FASTMP_RANK", &rank),
                        ("FASTMP_SIZE", &size),
                        ("FASTMP_RENDEZVOUS", &rendezvous),
                        ("FASTMP_JOB_SECRET", secret),
                    ],
                )
            })
        })
        .collect();
    ranks.into_iter().map(|r| r.join().expect("rank thread")).collect()
}

/// Process ranks of a job where rank 2 of 4 fails or aborts: every rank exits with the job's
/// status, every survivor's pending receive names rank 2, and only rank 2 prints the failure.
#[test]
fn process_ranks_name_the_failed_rank_and_share_its_exit_status() {
    let cases: [(&[&str], i32, &str); 2] = [
        (&["--main", "abort", "2", "5"], 5, "rank 2 failed: called abort with code 5"),
        (&["--main", "fail", "2"], 1, "rank 2 failed: testprog: rank 2 fails on purpose"),
    ];
    for (args, code, error) in cases {
        let ranks = processes(4, args);
        for (rank, out) in ranks.iter().enumerate() {
            assert_eq!(out.status.code(), Some(code), "{args:?} rank {rank}: {out:?}");
            let reports = sorted_lines(&out.stderr, "fastmp: ");
            if rank == 2 {
                assert_eq!(reports.len(), 1, "{args:?} rank 2: {out:?}");
            } else {
                assert!(reports.is_empty(), "{args:?} survivor {rank} reported: {out:?}");
                let line = format!("rank {rank}: receive from rank 2 failed: {error}");
                assert!(text(&out.stdout).lines().any(|l| l == line), "{args:?}: missing {line:?} in {out:?}");
            }
        }
    }
}
