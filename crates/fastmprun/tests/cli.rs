//! End-to-end tests of the built `fastmprun` binary, with `sh -c '...'` as the program so
//! no fastmp program is needed. Deadlines below are hang guards, not timing assertions.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Generous bound on any single launcher run; exceeding it means the launcher hung.
const HANG_GUARD: Duration = Duration::from_secs(60);

struct Outcome {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn code(&self) -> Option<i32> {
        self.status.code()
    }

    fn stdout_lines(&self) -> BTreeSet<&str> {
        self.stdout.lines().collect()
    }
}

fn launcher() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fastmprun"));
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).env_remove("FASTMP_AGENT");
    command
}

fn fastmprun(args: &[&str]) -> Outcome {
    finish(launcher().args(args).spawn().expect("start fastmprun"))
}

fn collect(mut source: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut text = String::new();
        let _ = source.read_to_string(&mut text);
        text
    })
}

/// Waits for the launcher under the hang guard and collects its output.
fn finish(mut child: Child) -> Outcome {
    let stdout = child.stdout.take().map(collect);
    let stderr = child.stderr.take().map(collect);
    let status = wait_guarded(&mut child);
    let text =
        |handle: Option<thread::JoinHandle<String>>| handle.map(|h| h.join().unwrap_or_default()).unwrap_or_default();
    Outcome { status, stdout: text(stdout), stderr: text(stderr) }
}

fn wait_guarded(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        if let Some(status) = child.try_wait().expect("wait for fastmprun") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fastmprun still running after {HANG_GUARD:?}");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` is gone (or a zombie about to be reaped), waiting up to the guard.
fn eventually_gone(pid: &str) -> bool {
    let deadline = Instant::now() + HANG_GUARD;
    while Instant::now() < deadline {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) if stat.rsplit(") ").next().is_some_and(|s| s.starts_with('Z')) => {
                return true;
            }
            Ok(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
    false
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary directory")
}

/// A fake remote agent, run as `sh SCRIPT` (no exec bit, so no "text file busy" race
/// with other tests forking while it is written): it reports the host it was asked for,
/// drops it and runs the rest in an empty environment, as a remote shell would not
/// inherit the launcher's.
fn fake_agent(dir: &Path) -> String {
    let path = dir.join("agent");
    std::fs::write(&path, "#!/bin/sh\necho \"agent-host=$1\" >&2\nshift\nexec env -i PATH=\"$PATH\" \"$@\"\n")
        .expect("write agent");
    format!("sh {}", path.to_str().expect("utf-8 temp path"))
}

#[test]
fn every_rank_sees_the_tcp_environment() {
    let out = fastmprun(&[
        "-np",
        "3",
        "sh",
        "-c",
        "echo \"rank=$FASTMP_RANK size=$FASTMP_SIZE device=$FASTMP_DEVICE \
         rv=$FASTMP_RENDEZVOUS secret=$FASTMP_JOB_SECRET fd=${FASTMP_RENDEZVOUS_FD:-none}\"",
    ]);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    let field = |line: &str, name: &str| -> String {
        line.split(' ').find_map(|word| word.strip_prefix(&format!("{name}="))).unwrap_or_default().to_string()
    };
    let mut ranks: Vec<String> = lines.iter().map(|line| field(line, "rank")).collect();
    ranks.sort();
    assert_eq!(ranks, ["0", "1", "2"]);
    let secret = field(lines[0], "secret");
    assert_eq!(secret.len(), 64);
    assert!(secret.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')));
    let rendezvous = field(lines[0], "rv");
    assert!(rendezvous.starts_with("127.0.0.1:"), "{rendezvous}");
    for line in &lines {
        assert_eq!(field(line, "size"), "3");
        assert_eq!(field(line, "device"), "tcp");
        assert_eq!(field(line, "secret"), secret, "one secret per job");
        assert_eq!(field(line, "rv"), rendezvous);
        let fd = field(line, "fd");
        if field(line, "rank") == "0" {
            assert!(fd.parse::<u32>().is_ok(), "rank 0 gets a descriptor: {line}");
        } else {
            assert_eq!(fd, "none", "{line}");
        }
    }
}

#[test]
fn rank0_inherits_a_socket_and_bind_to_sets_the_pin_policy() {
    let out = fastmprun(&[
        "-n",
        "2",
        "--bind-to",
        "core",
        "--tag-output",
        "sh",
        "-c",
        "echo pin=$FASTMP_PIN; \
         if [ \"$FASTMP_RANK\" = 0 ]; then readlink /proc/self/fd/$FASTMP_RENDEZVOUS_FD; fi",
    ]);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let lines = out.stdout_lines();
    assert!(lines.contains("[0] pin=compact") && lines.contains("[1] pin=compact"));
    assert!(lines.iter().any(|line| line.starts_with("[0] socket:[")), "{}", out.stdout);
}

#[test]
fn output_is_forwarded_line_by_line() {
    let script = "echo out-$FASTMP_RANK; echo err-$FASTMP_RANK >&2; printf 'two\\nlines\\n'; \
                  printf partial-$FASTMP_RANK";
    let plain = fastmprun(&["--np", "2", "sh", "-c", script]);
    assert_eq!(plain.code(), Some(0), "{}", plain.stderr);
    assert!(plain.stdout.contains("out-0\n") && plain.stdout.contains("out-1\n"));
    assert!(plain.stdout.contains("partial-0") && plain.stdout.contains("partial-1"));
    assert_eq!(plain.stderr.lines().collect::<BTreeSet<_>>(), ["err-0", "err-1"].into());

    let tagged = fastmprun(&["-np", "2", "--tag-output", "sh", "-c", script]);
    assert_eq!(tagged.code(), Some(0), "{}", tagged.stderr);
    let expected: BTreeSet<&str> =
        ["[0] out-0", "[0] two", "[0] lines", "[0] partial-0", "[1] out-1", "[1] two", "[1] lines", "[1] partial-1"]
            .into();
    assert_eq!(tagged.stdout_lines(), expected);
    assert_eq!(tagged.stdout.lines().count(), expected.len());
    assert_eq!(tagged.stderr.lines().collect::<BTreeSet<_>>(), ["[0] err-0", "[1] err-1"].into());
}

#[test]
fn program_arguments_pass_through_untouched() {
    let out = fastmprun(&["-np", "1", "--", "sh", "-c", "echo \"$@\"", "argv0", "--tag-output", "-np", "5"]);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, "--tag-output -np 5\n");
}

#[test]
fn first_failing_rank_decides_the_status_and_the_others_are_stopped() {
    let dir = temp_dir();
    let dir_path = dir.path().to_str().expect("utf-8 temp path");
    // Ranks 0 and 2 park a background sleep; rank 1 fails once both are parked.
    let script = format!(
        "cd {dir_path}; if [ \"$FASTMP_RANK\" = 1 ]; then \
           while [ ! -s pid0 ] || [ ! -s pid2 ]; do sleep 0.05; done; exit 7; fi; \
         sleep 1000 & echo $! > pid$FASTMP_RANK.tmp; mv pid$FASTMP_RANK.tmp pid$FASTMP_RANK; wait"
    );
    let out = fastmprun(&["-np", "3", "sh", "-c", &script]);
    assert_eq!(out.code(), Some(7), "{}", out.stderr);
    assert!(
        out.stderr.contains("fastmprun: rank 1 (pid ") && out.stderr.contains(") exited with status 7"),
        "{}",
        out.stderr
    );
    for rank in [0, 2] {
        let pid = std::fs::read_to_string(dir.path().join(format!("pid{rank}"))).expect("pid file");
        assert!(eventually_gone(pid.trim()), "rank {rank}'s sleep outlived the job");
    }
}

#[test]
fn a_rank_killed_by_a_signal_is_reported() {
    let out =
        fastmprun(&["-np", "2", "sh", "-c", "if [ \"$FASTMP_RANK\" = 0 ]; then kill -KILL $$; fi; exec sleep 1000"]);
    assert_eq!(out.code(), Some(128 + 9), "{}", out.stderr);
    assert!(
        out.stderr.contains("fastmprun: rank 0 (pid ") && out.stderr.contains(") was killed by signal 9 (SIGKILL)"),
        "{}",
        out.stderr
    );
}

#[test]
fn timeout_terminates_the_job() {
    let out = fastmprun(&["-np", "2", "--timeout", "0.5", "sleep", "1000"]);
    assert_eq!(out.code(), Some(124), "{}", out.stderr);
    assert!(out.stderr.contains("fastmprun: timed out after 0.5 s; terminated 2 ranks"), "{}", out.stderr);
}

#[test]
fn sigint_is_forwarded_and_leftovers_are_killed() {
    let dir = temp_dir();
    let dir_path = dir.path().to_str().expect("utf-8 temp path");
    // The background sleep ignores SIGINT (non-interactive sh), so only the final
    // SIGKILL of the process group removes it.
    let script = format!(
        "trap 'echo interrupted-$FASTMP_RANK; exit 3' INT; sleep 1000 & \
         echo $! > {dir_path}/pid$FASTMP_RANK; echo ready; wait"
    );
    let mut child = launcher().args(["-np", "2", "sh", "-c", &script]).spawn().expect("start fastmprun");
    let stdout = child.stdout.take().expect("piped stdout");
    let (lines_sender, lines) = mpsc::channel();
    let reader = thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_sender.send(line);
        }
    });
    let mut ready = 0;
    let mut seen = Vec::new();
    while ready < 2 {
        let line = lines.recv_timeout(HANG_GUARD).expect("ranks report ready");
        ready += usize::from(line == "ready");
        seen.push(line);
    }
    let interrupt = Command::new("kill").args(["-INT", &child.id().to_string()]).status().expect("run kill");
    assert!(interrupt.success());
    let out = finish(child);
    let _ = reader.join();
    seen.extend(lines.try_iter());
    assert_eq!(out.code(), Some(128 + 2), "{}", out.stderr);
    assert!(out.stderr.contains("received signal 2 (SIGINT)"), "{}", out.stderr);
    assert!(seen.iter().any(|line| line == "interrupted-0"), "{seen:?}");
    assert!(seen.iter().any(|line| line == "interrupted-1"), "{seen:?}");
    for rank in [0, 1] {
        let pid = std::fs::read_to_string(dir.path().join(format!("pid{rank}"))).expect("pid file");
        assert!(eventually_gone(pid.trim()), "rank {rank}'s sleep outlived the job");
    }
}

#[test]
fn shm_runs_the_program_once_with_thread_ranks() {
    let out = finish(
        launcher()
            .env("FASTMP_RANK", "9")
            .args([
                "-np",
                "4",
                "--device",
                "shm",
                "--bind-to",
                "core",
                "--tag-output",
                "sh",
                "-c",
                "echo $FASTMP_DEVICE $FASTMP_NP $FASTMP_PIN ${FASTMP_RANK:-unset}",
            ])
            .spawn()
            .expect("start fastmprun"),
    );
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, "[shm] shm 4 compact unset\n");
}

#[test]
fn bad_arguments_are_refused_with_a_precise_message() {
    let dir = temp_dir();
    let hostfile = dir.path().join("hosts");
    std::fs::write(&hostfile, "# cluster\nnode1 slots=2\n\nnode2 slots=two\n").expect("hostfile");
    let hostfile = hostfile.to_str().expect("utf-8 temp path");
    let cases: [(&[&str], &str); 8] = [
        (&["-np", "0", "true"], "at least 1"),
        (&["-np", "2"], "PROGRAM"),
        (&["true"], "--np"),
        (&["-np", "2", "--timeout", "soon", "true"], "soon"),
        (&["-np", "2", "--hostfile", hostfile, "true"], "line 4"),
        (&["-np", "3", "--hosts", "localhost:2", "true"], "--oversubscribe"),
        (&["-np", "2", "--device", "shm", "--hosts", "a:2", "true"], "--device tcp"),
        (&["-np", "2", "--rendezvous", "nowhere", "true"], "HOST:PORT"),
    ];
    for (args, expected) in cases {
        let out = fastmprun(args);
        assert_eq!(out.code(), Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(expected), "{args:?}: {}", out.stderr);
    }
    let missing = fastmprun(&["-np", "2", "/no/such/fastmp-program"]);
    assert_eq!(missing.code(), Some(127));
    assert!(missing.stderr.contains("/no/such/fastmp-program"), "{}", missing.stderr);
}

#[test]
fn oversubscribe_wraps_ranks_around_the_hosts() {
    let out = fastmprun(&["-np", "3", "--hosts", "localhost:1", "--oversubscribe", "sh", "-c", "echo $FASTMP_RANK"]);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    assert_eq!(out.stdout_lines(), ["0", "1", "2"].into());
}

#[test]
fn local_host_lists_spawn_directly() {
    let out = fastmprun(&[
        "-np",
        "4",
        "--hosts",
        "localhost:2,127.0.0.1:2",
        "--agent",
        "/no/such/agent",
        "--tag-output",
        "sh",
        "-c",
        "echo fd=${FASTMP_RENDEZVOUS_FD:-none} rv=$FASTMP_RENDEZVOUS",
    ]);
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", out.stdout);
    assert!(lines.iter().all(|line| line.contains("rv=127.0.0.1:")));
    assert_eq!(lines.iter().filter(|line| line.contains("fd=none")).count(), 3);
}

#[test]
fn remote_hosts_run_through_the_agent() {
    let dir = temp_dir();
    let agent = fake_agent(dir.path());
    let script = "echo rank=$FASTMP_RANK fd=${FASTMP_RENDEZVOUS_FD:-none} \
                  rv=$FASTMP_RENDEZVOUS eager=$FASTMP_EAGER_LIMIT";
    let via_option = finish(
        launcher()
            .env("FASTMP_EAGER_LIMIT", "4096")
            .args(["-np", "3", "--hosts", "localhost:1,nodeb:2", "--agent", &agent])
            .args(["--tag-output", "sh", "-c", script])
            .spawn()
            .expect("start fastmprun"),
    );
    assert_eq!(via_option.code(), Some(0), "{}", via_option.stderr);
    assert_eq!(
        via_option.stderr.lines().collect::<BTreeSet<_>>(),
        ["[1] agent-host=nodeb", "[2] agent-host=nodeb"].into(),
        "rank 0 is local, ranks 1 and 2 go through the agent"
    );
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let lines: Vec<&str> = via_option.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", via_option.stdout);
    let rendezvous = lines[0].split(' ').find_map(|word| word.strip_prefix("rv=")).unwrap_or_default();
    let port: u16 =
        rendezvous.strip_prefix(&format!("{}:", hostname.trim())).and_then(|port| port.parse().ok()).unwrap_or(0);
    assert!((20000..60000).contains(&port), "{rendezvous}");
    for line in lines {
        assert!(line.contains("fd=none") && line.contains(&format!("rv={rendezvous}")));
        assert!(line.contains("eager=4096"), "{line}");
    }

    // The agent may also come from FASTMP_AGENT.
    let via_env = finish(
        launcher()
            .env("FASTMP_AGENT", &agent)
            .args(["-np", "2", "--hosts", "nodea:2", "--rendezvous", "nodea:4567"])
            .args(["sh", "-c", "echo $FASTMP_RANK $FASTMP_RENDEZVOUS"])
            .spawn()
            .expect("start fastmprun"),
    );
    assert_eq!(via_env.code(), Some(0), "{}", via_env.stderr);
    assert_eq!(via_env.stdout_lines(), ["0 nodea:4567", "1 nodea:4567"].into());
    assert_eq!(via_env.stderr.lines().filter(|l| *l == "agent-host=nodea").count(), 2);
}
