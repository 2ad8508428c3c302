//! Runs every example of the fastmp crate (`crates/fastmp/examples`) as its users would: with
//! thread ranks (`FASTMP_NP=3`, the shm device) and as processes under `fastmprun -np 3 --device
//! tcp`. The examples assert their own results, so a wrong result is a non-zero exit status.
//!
//! The examples belong to another package, so cargo does not build them for this test: the test
//! builds them itself, once, with `cargo build -p fastmp --example ...` in the test profile, and
//! takes their paths from cargo's JSON messages (right under any target directory). Every run
//! has a hang guard; nothing asserts on timing.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use support::{cargo_build, clean, run, workspace_root};

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

/// Builds the examples once (concurrent tests wait for the first) and returns name → executable.
fn examples() -> &'static BTreeMap<String, PathBuf> {
    static BUILT: OnceLock<BTreeMap<String, PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| {
        let mut args = vec!["-p", "fastmp"];
        for name in EXAMPLES {
            args.extend(["--example", name]);
        }
        let built = cargo_build(&args, "example");
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
