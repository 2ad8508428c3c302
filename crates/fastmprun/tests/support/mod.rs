//! What the tests that run other packages' programs share: building them with cargo, and
//! running them cleanly under a hang guard.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Generous bound on one run; exceeding it means the program hung.
pub const HANG_GUARD: Duration = Duration::from_secs(120);

pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().and_then(Path::parent).expect("crates/fastmprun is two levels down")
}

/// Builds with `cargo build --profile test ARGS` (targets of another package, which cargo does
/// not build for this test) and returns the executables of `kind` ("example", "bin") it built,
/// name → path, from cargo's JSON messages (right under any target directory).
pub fn cargo_build(args: &[&str], kind: &str) -> BTreeMap<String, PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    // Diagnostics go to stderr as text; stdout carries one JSON message per line.
    let output = Command::new(cargo)
        .current_dir(workspace_root())
        .args(["build", "--profile", "test"])
        .args(args)
        .arg("--message-format=json-render-diagnostics")
        .stderr(Stdio::inherit())
        .output()
        .expect("run cargo build");
    assert!(output.status.success(), "cargo build {args:?} failed: {}", output.status);
    let mut built = BTreeMap::new();
    for line in BufReader::new(&output.stdout[..]).lines() {
        let message: serde_json::Value = serde_json::from_str(&line.expect("cargo prints UTF-8")).unwrap_or_default();
        let target = &message["target"];
        if message["reason"] == "compiler-artifact"
            && target["kind"][0] == kind
            && let (Some(name), Some(path)) = (target["name"].as_str(), message["executable"].as_str())
        {
            built.insert(name.to_string(), PathBuf::from(path));
        }
    }
    built
}

/// A command that inherits none of the job variables of this environment (a launcher's, or a
/// `FASTMP_*` setting of whoever runs the tests).
pub fn clean(program: &Path) -> Command {
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
pub fn run(mut command: Command) -> (ExitStatus, String, String) {
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
        if let Some(status) = child.try_wait().expect("wait for the child") {
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
