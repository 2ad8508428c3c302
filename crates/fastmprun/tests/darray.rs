//! fastmp-darray's self-test (`crates/fastmp-darray/examples/darray_selftest.rs`, another
//! package) as processes: one process per rank over TCP under `fastmprun`, at 2 and 3 ranks, and
//! once as thread ranks. The program checks remap, write_halo, shift, cshift and a serde remap
//! against a serial computation and exits non-zero on any mismatch; here it must succeed and
//! say so for the right job.

mod support;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use support::{cargo_build, clean, run};

/// `darray_selftest`, built once in the test profile.
fn selftest() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let mut built = cargo_build(&["-p", "fastmp-darray", "--example", "darray_selftest"], "example");
        built.remove("darray_selftest").expect("cargo built darray_selftest")
    })
}

/// Runs `command` and returns what is wrong with its outcome, if anything: it must exit 0 and
/// print the self-test's line for `np` ranks on `device`.
fn failure(command: std::process::Command, np: usize, device: &str) -> Option<String> {
    let (status, stdout, stderr) = run(command);
    let expected = format!("darray_selftest: ok (np {np}, device {device})");
    let ok = status.success() && stdout.lines().any(|line| line == expected);
    (!ok).then(|| format!("np {np} on {device}: {status}\n{stdout}{stderr}"))
}

#[test]
fn darray_selftest_passes_as_processes_over_tcp() {
    let mut failures = Vec::new();
    for np in [2, 3] {
        let mut command = clean(Path::new(env!("CARGO_BIN_EXE_fastmprun")));
        command.args(["-np", &np.to_string(), "--device", "tcp", "--timeout", "100"]).arg(selftest());
        failures.extend(failure(command, np, "tcp"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn darray_selftest_passes_as_thread_ranks() {
    let mut command = clean(selftest());
    command.env("FASTMP_NP", "4");
    if let Some(failure) = failure(command, 4, "shm") {
        panic!("{failure}");
    }
}
