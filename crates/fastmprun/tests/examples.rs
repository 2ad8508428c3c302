//! Runs every example of the fastmp crate (`crates/fastmp/examples`) as its users would: with
//! thread ranks (`FASTMP_NP=3`, the shm device) and as processes under `fastmprun -np 3 --device
//! tcp`. The examples assert their own results, so a wrong result is a non-zero exit status.
//!
//! The examples belong to another package, so cargo does not build them for this test: the test
//! builds them itself, once, with `cargo build -p fastmp --example ...` in the test profile, and
//! takes their paths from cargo's JSON messages (right under any target directory). Every run
//! has a hang guard; nothing asserts on timing.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

/// The examples run here; `every_example_is_listed` keeps the list complete.
const EXAMPLES: [&str; 11] = [
    "p2p",
    "immediate",
    "datatypes",
    "collectives",
    "immediate_collectives",
    "communicators",
    "topologies",
    "threads",
    "environment",
    "one_sided",
    "pgas",
];

/// Examples that are not demonstrations of features (a benchmark, the README's demo, run by
/// hand).
const NOT_RUN: [&str; 2] = ["neighbor_bench", "quickstart"];

const RANKS: &str = "3";
/// Generous bound on one run; exceeding it means the example hung.
const HANG_GUARD: Duration = Duration::from_secs(120);

fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().and_then(Path::parent).expect("crates/fastmprun is two levels down")
}

/// Builds the examples once (concurrent tests wait for the first) and returns name → executable.
fn examples() -> &'static BTreeMap<String, PathBuf> {
    static BUILT: OnceLock<BTreeMap<String, PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
        let mut command = Command::new(cargo);
        command.current_dir(workspace_root()).args(["build", "--profile", "test", "-p", "fastmp"]);
        for name in EXAMPLES {
            command.args(["--example", name]);
        }
        // Diagnostics go to stderr as text; stdout carries one JSON message per line.
        let output = command
            .arg("--message-format=json-render-diagnostics")
            .stderr(Stdio::inherit())
            .output()
            .expect("run cargo to build the examples");
        assert!(output.status.success(), "cargo build of the examples failed: {}", output.status);
        let mut built = BTreeMap::new();
        for line in BufReader::new(&output.stdout[..]).lines() {
            let message: serde_json::Value =
                serde_json::from_str(&line.expect("cargo prints UTF-8")).unwrap_or_default();
            let target = &message["target"];
            if message["reason"] == "compiler-artifact"
                && target["kind"][0] == "example"
                && let (Some(name), Some(path)) = (target["name"].as_str(), message["executable"].as_str())
            {
                built.insert(name.to_string(), PathBuf::from(path));
            }
        }
        assert_eq!(
            built.keys().map(String::as_str).collect::<Vec<_>>(),
            sorted(&EXAMPLES),
            "cargo built other examples"
        );
        built
    })
}

fn sorted(names: &[&'static str]) -> Vec<&'static str> {
    let mut names = names.to_vec();
    names.sort_unstable();
    names
}

/// A command that inherits none of the job variables of this environment (a launcher's, or a
/// `FASTMP_*` setting of whoever runs the tests).
fn clean(program: &Path) -> Command {
    let mut command = Command::new(program);
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (name, _) in std::env::vars_os() {
        let name_text = name.to_string_lossy();
        if ["FASTMP_", "SLURM_", "OMPI_", "PMI_", "PMIX_"].iter().any(|prefix| name_text.starts_with(prefix)) {
            command.env_remove(&name);
        }
    }
    command
}

/// Runs `command` under the hang guard; returns its status and its output (stdout, stderr).
fn run(mut command: Command) -> (ExitStatus, String, String) {
    let mut child = command.spawn().unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
    let collect = |mut source: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut text = String::new();
            let _ = source.read_to_string(&mut text);
            text
        })
    };
    let stdout = collect(Box::new(child.stdout.take().expect("piped")));
    let stderr = collect(Box::new(child.stderr.take().expect("piped")));
    let deadline = Instant::now() + HANG_GUARD;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the example") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} hung: stopped after {HANG_GUARD:?}");
        }
        thread::sleep(Duration::from_millis(20));
    };
    (status, stdout.join().unwrap_or_default(), stderr.join().unwrap_or_default())
}

/// Thread ranks, as `FASTMP_NP=3 cargo run --example NAME` runs them.
fn on_shm(name: &str, args: &[&str]) -> Command {
    let mut command = clean(&examples()[name]);
    command.args(args).env("FASTMP_NP", RANKS);
    command
}

/// One process per rank over TCP, started by the launcher.
fn on_tcp(name: &str, args: &[&str]) -> Command {
    let mut command = clean(Path::new(env!("CARGO_BIN_EXE_fastmprun")));
    command.args(["-np", RANKS, "--device", "tcp", "--timeout", "100"]).arg(&examples()[name]).args(args);
    command
}

/// Runs every example on one device and reports all that fail, with their output.
fn every_example_succeeds(device: &str, command: fn(&str, &[&str]) -> Command) {
    let mut failures = Vec::new();
    for name in EXAMPLES {
        let (status, stdout, stderr) = run(command(name, &[]));
        let lines = stdout.lines().filter(|l| l.starts_with(&format!("{name}: rank "))).count();
        if !status.success() || lines != 3 {
            failures.push(format!("{name} on {device}: {status}, {lines} report lines\n{stdout}{stderr}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_example_succeeds_with_thread_ranks() {
    every_example_succeeds("shm", on_shm);
}

#[test]
fn every_example_succeeds_with_process_ranks_over_tcp() {
    every_example_succeeds("tcp", on_tcp);
}

#[test]
fn an_aborting_example_exits_with_its_code_on_both_devices() {
    for (device, command) in [("shm", on_shm as fn(&str, &[&str]) -> Command), ("tcp", on_tcp)] {
        let (status, stdout, stderr) = run(command("environment", &["--abort", "3"]));
        assert_eq!(status.code(), Some(3), "environment --abort 3 on {device}\n{stdout}{stderr}");
        assert!(stderr.contains("aborted the job with code 3"), "on {device}: {stderr}");
    }
}

#[test]
fn every_example_is_listed() {
    let dir = workspace_root().join("crates/fastmp/examples");
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .filter_map(|path| Some(path.file_stem()?.to_str()?.to_string()))
        .filter(|name| !NOT_RUN.contains(&name.as_str()))
        .collect();
    found.sort_unstable();
    assert_eq!(found, sorted(&EXAMPLES), "add new examples to EXAMPLES (or NOT_RUN)");
}
