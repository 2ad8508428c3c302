//! Process-level tests: the real fastmp program `fastmp-testprog` with one process per rank on
//! the tcp device, started by `fastmprun`, by Open MPI's `mpirun`, by hand with the variables
//! Slurm or MPICH's hydra would set, and across two network namespaces.
//!
//! Every child runs under a hang guard: past [`HANG_GUARD`] it is stopped and the test fails.
//! Nothing here asserts on timing.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

#[path = "support/namespaces.rs"]
mod namespaces;
#[path = "support/ring.rs"]
mod ring;

use namespaces::{NAMESPACE_ADDRESSES, NamespacePair};
use ring::ring_checksum;

const LAUNCHER: &str = env!("CARGO_BIN_EXE_fastmprun");
const TESTPROG: &str = env!("CARGO_BIN_EXE_fastmp-testprog");

/// Generous bound on any one job; exceeding it means something hung.
const HANG_GUARD: Duration = Duration::from_secs(120);
/// How long a stopped child may take to go after SIGTERM (a launcher forwards it to its ranks
/// and kills them after its own grace period) before it gets SIGKILL.
const STOP_PATIENCE: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);

/// Job secret for jobs started without `fastmprun` (any 64 hex digits do).
const SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// Variables that would make a child believe it belongs to some other job.
const JOB_VARIABLES: [&str; 17] = [
    "FASTMP_DEVICE",
    "FASTMP_NP",
    "FASTMP_RANK",
    "FASTMP_SIZE",
    "FASTMP_RENDEZVOUS",
    "FASTMP_RENDEZVOUS_FD",
    "FASTMP_JOB_SECRET",
    "FASTMP_AGENT",
    "FASTMP_TCP_ADDRESS",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "TESTPROG_START_GATE",
    "FASTMP_PIN",
];

// ---------------------------------------------------------------------------------------------
// Running children under the hang guard
// ---------------------------------------------------------------------------------------------

/// A command with null stdin, piped output and none of the job variables of the environment.
fn command(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(program);
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for name in JOB_VARIABLES {
        command.env_remove(name);
    }
    command
}

fn fastmprun(args: &[&str]) -> Command {
    let mut command = command(LAUNCHER);
    command.args(args);
    command
}

/// Output of a child, collected by a thread as it arrives.
struct Captured {
    text: Arc<Mutex<String>>,
    reader: Option<thread::JoinHandle<()>>,
}

impl Captured {
    fn start(source: Option<impl Read + Send + 'static>) -> Self {
        let text = Arc::new(Mutex::new(String::new()));
        let sink = text.clone();
        let reader = source.map(|mut source| {
            thread::spawn(move || {
                let mut chunk = [0u8; 4096];
                while let Ok(n @ 1..) = source.read(&mut chunk) {
                    sink.lock().unwrap_or_else(|e| e.into_inner()).push_str(&String::from_utf8_lossy(&chunk[..n]));
                }
            })
        });
        Captured { text, reader }
    }

    fn snapshot(&self) -> String {
        self.text.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Everything, once the child has closed its end.
    fn finish(&mut self) -> String {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.snapshot()
    }
}

/// A started child; dropped while still running (a failed assertion), it is stopped.
struct Running {
    name: String,
    child: Child,
    stdout: Captured,
    stderr: Captured,
    deadline: Instant,
    reaped: bool,
}

/// How a child ended and what it printed.
#[derive(Debug)]
struct Finished {
    name: String,
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Running {
    fn start(name: impl Into<String>, command: &mut Command) -> Self {
        let name = name.into();
        let mut child = command.spawn().unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let stdout = Captured::start(child.stdout.take());
        let stderr = Captured::start(child.stderr.take());
        Running { name, child, stdout, stderr, deadline: Instant::now() + HANG_GUARD, reaped: false }
    }

    /// Waits until the child's stderr satisfies `done` (or the child ends, or the guard expires).
    fn wait_for_stderr(&mut self, what: &str, done: impl Fn(&str) -> bool) {
        loop {
            let stderr = self.stderr.snapshot();
            if done(&stderr) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                self.reaped = true;
                panic!("{} ended ({status}) before {what}; stderr:\n{stderr}", self.name);
            }
            assert!(
                Instant::now() < self.deadline,
                "{}: no {what} within {HANG_GUARD:?}; stderr:\n{stderr}",
                self.name
            );
            thread::sleep(POLL);
        }
    }

    /// Waits for the child under the hang guard.
    fn finish(mut self) -> Finished {
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < self.deadline => thread::sleep(POLL),
                Ok(None) => {
                    self.stop();
                    let (stdout, stderr) = (self.stdout.snapshot(), self.stderr.snapshot());
                    panic!("{} still running after {HANG_GUARD:?}\nstdout:\n{stdout}\nstderr:\n{stderr}", self.name);
                }
                Err(e) => panic!("cannot wait for {}: {e}", self.name),
            }
        };
        self.reaped = true;
        Finished { name: self.name.clone(), status, stdout: self.stdout.finish(), stderr: self.stderr.finish() }
    }

    /// SIGTERM (a launcher passes it on to its ranks), SIGKILL if that is not enough.
    fn stop(&mut self) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) only sends a signal; the child is not reaped yet, so the pid is ours.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let give_up = Instant::now() + STOP_PATIENCE;
        while Instant::now() < give_up {
            if let Ok(Some(_)) = self.child.try_wait() {
                self.reaped = true;
                return;
            }
            thread::sleep(POLL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.reaped = true;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.reaped {
            self.stop();
        }
    }
}

impl Finished {
    fn assert_success(&self) {
        assert!(
            self.status.success(),
            "{} failed ({})\nstdout:\n{}\nstderr:\n{}",
            self.name,
            self.status,
            self.stdout,
            self.stderr
        );
    }

    fn assert_failure(&self) {
        assert!(
            !self.status.success(),
            "{} succeeded but should have failed\nstdout:\n{}\nstderr:\n{}",
            self.name,
            self.stdout,
            self.stderr
        );
    }

    fn assert_stdout_has(&self, needle: &str) {
        assert!(
            self.stdout.contains(needle),
            "{}: stdout lacks `{needle}`\nstdout:\n{}\nstderr:\n{}",
            self.name,
            self.stdout,
            self.stderr
        );
    }

    fn assert_stderr_has(&self, needle: &str) {
        assert!(
            self.stderr.contains(needle),
            "{}: stderr lacks `{needle}`\nstdout:\n{}\nstderr:\n{}",
            self.name,
            self.stdout,
            self.stderr
        );
    }
}

fn run(name: &str, command: &mut Command) -> Finished {
    Running::start(name, command).finish()
}

/// A loopback port that was free a moment ago (for jobs whose rank 0 binds it itself).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    listener.local_addr().expect("address of a bound listener").port()
}

/// Starts `size` testprog processes as the ranks of one job, without any launcher: each gets its
/// rank and size in `rank_var`/`size_var`, plus the rendezvous and the secret.
fn start_ranks(size: usize, vars: (&str, &str), args: &[&str]) -> Vec<Running> {
    start_ranks_with(size, vars, args, &[])
}

/// As [`start_ranks`], with `env` set in every rank's environment.
fn start_ranks_with(
    size: usize,
    (rank_var, size_var): (&str, &str),
    args: &[&str],
    env: &[(&str, &str)],
) -> Vec<Running> {
    let rendezvous = format!("127.0.0.1:{}", free_port());
    (0..size)
        .map(|rank| {
            let mut command = command(TESTPROG);
            command
                .args(args)
                .env(rank_var, rank.to_string())
                .env(size_var, size.to_string())
                .env("FASTMP_RENDEZVOUS", &rendezvous)
                .env("FASTMP_JOB_SECRET", SECRET)
                .envs(env.iter().copied());
            Running::start(format!("rank {rank} of `testprog {}`", args.join(" ")), &mut command)
        })
        .collect()
}

fn finish_all(ranks: Vec<Running>) -> Vec<Finished> {
    ranks.into_iter().map(Running::finish).collect()
}

// ---------------------------------------------------------------------------------------------
// fastmprun
// ---------------------------------------------------------------------------------------------

#[test]
fn ring_runs_unchanged_on_tcp_and_shm() {
    for np in [1, 2, 4] {
        let np_text = np.to_string();
        let tcp = run(
            &format!("tcp ring of {np}"),
            &mut fastmprun(&["-np", &np_text, "--device", "tcp", "--tag-output", TESTPROG, "ring"]),
        );
        tcp.assert_success();
        let tcp_sum = ring_checksum(&tcp.name, &tcp.stdout, np, |rank| format!("[{rank}] "));

        let shm = run(
            &format!("shm ring of {np}"),
            &mut fastmprun(&["-np", &np_text, "--device", "shm", "--tag-output", TESTPROG, "ring"]),
        );
        shm.assert_success();
        let shm_sum = ring_checksum(&shm.name, &shm.stdout, np, |_| "[shm] ".to_string());
        assert_eq!(tcp_sum, shm_sum, "the same program computed different data on tcp and shm ({np} ranks)");

        let mut over_rings = fastmprun(&["-np", &np_text, "--device", "tcp", "--tag-output", TESTPROG, "ring"]);
        let rings = run(&format!("tcp ring of {np} over shared memory"), over_rings.env("FASTMP_SAME_NODE", "shm"));
        rings.assert_success();
        let rings_sum = ring_checksum(&rings.name, &rings.stdout, np, |rank| format!("[{rank}] "));
        assert_eq!(tcp_sum, rings_sum, "shared-memory links changed the data ({np} ranks)");
    }
}

/// Each rank is its own process on tcp (the bootstrap exchanged where every rank runs), and all
/// ranks are one process on shm; either way they share this node.
#[test]
fn placement_tells_processes_and_nodes() {
    for (device, separate_processes) in [("tcp", true), ("shm", false)] {
        let job = run(
            &format!("{device} placement of 3"),
            &mut fastmprun(&["-np", "3", "--device", device, TESTPROG, "placement"]),
        );
        job.assert_success();
        for rank in 0..3 {
            let (process, processes) = if separate_processes { (rank, 3) } else { (0, 1) };
            job.assert_stdout_has(&format!("rank {rank} of 3: process {process} of {processes}, node 0 of 1"));
        }
    }
}

/// Every rank's shutdown waits for its peers' goodbyes and closed connections; with many ranks
/// and no traffic, a peer whose `Bye` and end-of-stream are read before it shut its own write
/// side used to leave a cycle of half-closed connections (CLOSE-WAIT / FIN-WAIT-2) and hang.
#[test]
fn many_ranks_without_traffic_shut_down() {
    for attempt in 0..10 {
        let job = run(&format!("env of 8, attempt {attempt}"), &mut fastmprun(&["-np", "8", TESTPROG, "env"]));
        job.assert_success();
    }
    for attempt in 0..3 {
        let mut launch = fastmprun(&["-np", "8", TESTPROG, "env"]);
        launch.env("FASTMP_SAME_NODE", "shm");
        run(&format!("env of 8 over shared memory, attempt {attempt}"), &mut launch).assert_success();
    }
}

#[test]
fn failing_rank_fails_the_job() {
    let job = run("fail 1", &mut fastmprun(&["-np", "3", "--device", "tcp", "--tag-output", TESTPROG, "fail", "1"]));
    assert_eq!(job.status.code(), Some(1), "{job:?}");
    job.assert_stdout_has("[1] rank 1: failing on purpose");
    // The cause reaches stderr: from rank 1 itself, or from the survivors it told (the launcher
    // may stop rank 1 before it prints, once a survivor has exited).
    job.assert_stderr_has("rank 1 fails on purpose");
    // The launcher names the first rank it found failed; that may be a survivor that exited
    // before rank 1, so only the report's shape is fixed here.
    job.assert_stderr_has("exited with status 1");
}

#[test]
fn survivors_of_a_failing_rank_report_it_instead_of_hanging() {
    let ranks = finish_all(start_ranks(3, ("FASTMP_RANK", "FASTMP_SIZE"), &["fail", "1"]));
    for rank in &ranks {
        rank.assert_failure();
    }
    ranks[1].assert_stderr_has("testprog: rank 1 fails on purpose");
    for survivor in [0, 2] {
        let rank = &ranks[survivor];
        rank.assert_stdout_has(&format!("rank {survivor}: receive from rank 1 failed: "));
        rank.assert_stdout_has("rank 1 fails on purpose");
    }
}

#[test]
fn killed_rank_fails_the_job() {
    let job = run("die 1", &mut fastmprun(&["-np", "3", "--device", "tcp", "--tag-output", TESTPROG, "die", "1"]));
    job.assert_failure();
    job.assert_stdout_has("[1] rank 1: killing itself with SIGKILL");
    // Its peers may fail and be noticed first (then the launcher exits with their status), but
    // the killed rank is always named with its signal.
    let report = job.stderr.lines().find(|line| line.starts_with("fastmprun: rank 1 (pid "));
    let report = report.unwrap_or_else(|| panic!("the launcher did not name rank 1: {job:?}"));
    assert!(report.ends_with("was killed by signal 9 (SIGKILL)"), "{report}");
}

#[test]
fn survivors_of_a_killed_rank_fail_with_a_clear_error() {
    survivors_of_a_killed_rank_fail_over("socket");
}

/// The same over shared-memory rings: the kernel closing the dead process's sockets ends the
/// rings' streams too, also for the survivor blocked on a full ring (the 256 MiB send).
#[test]
fn survivors_of_a_killed_rank_fail_with_a_clear_error_over_shared_memory() {
    survivors_of_a_killed_rank_fail_over("shm");
}

fn survivors_of_a_killed_rank_fail_over(link: &str) {
    let env = [("FASTMP_SAME_NODE", link)];
    let ranks = finish_all(start_ranks_with(3, ("FASTMP_RANK", "FASTMP_SIZE"), &["die", "1"], &env));
    assert_eq!(ranks[1].status.signal(), Some(libc::SIGKILL), "{:?}", ranks[1]);
    ranks[1].assert_stdout_has("rank 1: killing itself with SIGKILL");
    // Rank 2 was sending the big message to rank 1; rank 0 waited for a message from it.
    let pending = [(0, "receive from rank 1 failed: "), (2, "send of 256 MiB to rank 1 failed: ")];
    for (survivor, what) in pending {
        let rank = &ranks[survivor];
        assert_eq!(rank.status.code(), Some(1), "{rank:?}");
        for operation in [what, "later send to rank 1 failed: "] {
            let line = rank.stdout.lines().find(|line| line.contains(operation));
            let line = line.unwrap_or_else(|| panic!("rank {survivor} did not report `{operation}`: {rank:?}"));
            assert!(line.contains("connection to rank 1 lost"), "unclear error from rank {survivor}: {line}");
        }
    }
}

#[test]
fn survivors_of_a_rank_killed_inside_a_lock_all_epoch_fail_with_a_clear_error() {
    let ranks = finish_all(start_ranks(3, ("FASTMP_RANK", "FASTMP_SIZE"), &["rma-die", "1"]));
    assert_eq!(ranks[1].status.signal(), Some(libc::SIGKILL), "{:?}", ranks[1]);
    ranks[1].assert_stdout_has("rank 1: killing itself with SIGKILL inside a lock_all epoch");
    for survivor in [0, 2] {
        let rank = &ranks[survivor];
        assert_eq!(rank.status.code(), Some(1), "{rank:?}");
        for operation in ["fetch_and_op", "later fetch_and_op"] {
            let prefix = format!("rank {survivor}: {operation} on rank 1 failed: ");
            let line = rank.stdout.lines().find(|line| line.starts_with(&prefix));
            let line = line.unwrap_or_else(|| panic!("rank {survivor} did not report `{prefix}`: {rank:?}"));
            assert!(line[prefix.len()..].contains("rank 1"), "unclear error from rank {survivor}: {line}");
        }
    }
}

#[test]
fn timeout_stops_a_hanging_job() {
    let job = run("hang", &mut fastmprun(&["-np", "2", "--device", "tcp", "--timeout", "2", TESTPROG, "hang"]));
    assert_eq!(job.status.code(), Some(124), "{job:?}");
    job.assert_stderr_has("timed out");
}

/// First bytes of every fastmp connection (`MAGIC` in crates/fastmp/src/device/tcp/handshake.rs).
const HANDSHAKE_MAGIC: &[u8; 8] = b"FASTMP\0\x01";

/// Connects to `address`, retrying while nothing listens there yet.
fn connect_retrying(address: &str) -> TcpStream {
    let give_up = Instant::now() + HANG_GUARD;
    loop {
        match TcpStream::connect(address) {
            Ok(stream) => {
                stream.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
                return stream;
            }
            Err(e) if Instant::now() >= give_up => panic!("nothing accepts on {address}: {e}"),
            Err(_) => thread::sleep(POLL),
        }
    }
}

#[test]
fn handshake_rejects_strangers_and_the_job_still_completes() {
    let gate_dir = tempfile::tempdir().expect("temporary directory");
    let gate = gate_dir.path().join("open");
    let address = format!("127.0.0.1:{}", free_port());
    // Rank 1 stays away until the gate opens, so rank 0 is still at its rendezvous when the
    // strangers knock.
    let mut launch = fastmprun(&["-np", "2", "--device", "tcp", "--rendezvous", &address, TESTPROG, "env"]);
    launch.env("TESTPROG_START_GATE", &gate);
    let mut job = Running::start("env with strangers", &mut launch);

    // Garbage: not even the magic.
    let mut garbage = connect_retrying(&address);
    garbage.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("send garbage");
    let _ = garbage.shutdown(Shutdown::Write);
    let _ = garbage.read_to_end(&mut Vec::new());

    // A client that speaks the protocol but does not know the secret: right magic, any nonce,
    // then a proof made without the secret (as good as one made with a wrong secret).
    let mut impostor = connect_retrying(&address);
    let mut hello = HANDSHAKE_MAGIC.to_vec();
    hello.extend_from_slice(&[0x42; 32]);
    impostor.write_all(&hello).expect("send hello");
    let mut their_hello = [0u8; 40];
    let _ = impostor.read_exact(&mut their_hello);
    let _ = impostor.write_all(&[0x17; 32]);
    let _ = impostor.read_to_end(&mut Vec::new());

    job.wait_for_stderr("two rejections", |stderr| stderr.matches("rejected a connection").count() >= 2);
    std::fs::write(&gate, b"").expect("open the start gate");
    let job = job.finish();
    job.assert_success();
    // The impostor got as far as its proof, and that is what gave it away.
    job.assert_stderr_has("does not know the job secret");
    for rank in 0..2 {
        job.assert_stdout_has(&format!("rank {rank} of 2 device tcp rank-from FASTMP_RANK"));
    }
}

// ---------------------------------------------------------------------------------------------
// Other launchers
// ---------------------------------------------------------------------------------------------

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

#[test]
fn mpirun_starts_a_tcp_job() {
    if !on_path("mpirun") {
        eprintln!("skipped: mpirun is not on PATH (apt-get install openmpi-bin)");
        return;
    }
    for mode in ["env", "ring"] {
        let rendezvous = format!("FASTMP_RENDEZVOUS=127.0.0.1:{}", free_port());
        let secret = format!("FASTMP_JOB_SECRET={SECRET}");
        let mut mpirun = command("mpirun");
        mpirun.args(["--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", &rendezvous, "-x", &secret]);
        mpirun.args([TESTPROG, mode]);
        let job = run(&format!("mpirun testprog {mode}"), &mut mpirun);
        job.assert_success();
        if mode == "env" {
            for rank in 0..2 {
                job.assert_stdout_has(&format!("rank {rank} of 2 device tcp rank-from OMPI_COMM_WORLD_RANK"));
            }
        } else {
            ring_checksum(&job.name, &job.stdout, 2, |_| String::new());
        }
    }
}

#[test]
fn slurm_and_hydra_variables_start_a_job_without_any_launcher() {
    for variables in [("SLURM_PROCID", "SLURM_NTASKS"), ("PMI_RANK", "PMI_SIZE")] {
        let ranks = finish_all(start_ranks(2, variables, &["env"]));
        for (rank, finished) in ranks.iter().enumerate() {
            finished.assert_success();
            finished.assert_stdout_has(&format!("rank {rank} of 2 device tcp rank-from {}", variables.0));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Several hosts: network namespaces
// ---------------------------------------------------------------------------------------------

#[test]
fn ranks_on_two_hosts_in_network_namespaces() {
    let namespaces = match NamespacePair::create() {
        Ok(pair) => pair,
        Err(why) => {
            eprintln!("skipped: needs root and iproute2 ({why})");
            return;
        }
    };
    let hosts = format!("{}:2,{}:2", namespaces.names[0], namespaces.names[1]);
    // Rank 0 runs in the first namespace and binds the rendezvous itself; the port is private
    // to this test's namespaces, so a fixed one cannot clash.
    let rendezvous = format!("{}:47000", NAMESPACE_ADDRESSES[0]);
    let args = ["-np", "4", "--hosts", &hosts, "--agent", "ip netns exec", "--rendezvous", &rendezvous, "--tag-output"];
    let mut launch = fastmprun(&args);
    launch.args([TESTPROG, "ring"]);
    let job = run("ring across namespaces", &mut launch);
    job.assert_success();
    ring_checksum(&job.name, &job.stdout, 4, |rank| format!("[{rank}] "));
    drop(namespaces);
}

/// Ranks on two hosts of their own name (each rank in a UTS namespace with that host name) are
/// two nodes: a node is told apart by its host name as well as by its boot id.
#[test]
fn ranks_on_two_named_hosts_are_two_nodes() {
    if Command::new("unshare").args(["--uts", "true"]).status().map_or(true, |status| !status.success()) {
        eprintln!("skipped: needs root and unshare(1) for UTS namespaces");
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    let agent = dir.path().join("named-host");
    // `named-host HOST COMMAND...` runs COMMAND with HOST as its host name, on this machine.
    let script =
        "#!/bin/sh\nhost=$1; shift\nexec unshare --uts sh -c 'hostname \"$0\" && exec \"$@\"' \"$host\" \"$@\"\n";
    std::fs::write(&agent, script).expect("write the agent script");
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("make it executable");
    let rendezvous = format!("127.0.0.1:{}", free_port());
    let agent = agent.to_str().expect("a UTF-8 temporary path");
    let args = ["-np", "4", "--hosts", "fmp-node-a:2,fmp-node-b:2", "--agent", agent, "--rendezvous", &rendezvous];
    let mut launch = fastmprun(&args);
    launch.args([TESTPROG, "placement"]);
    let job = run("placement on two named hosts", &mut launch);
    job.assert_success();
    for rank in 0..4 {
        job.assert_stdout_has(&format!("rank {rank} of 4: process {rank} of 4, node {} of 2", rank / 2));
    }
}
