//! The NAS kernels binary (`fastmp-npb`, another package) as processes: one process per rank
//! over TCP under `fastmprun`, the same binary that runs thread ranks by default. Each kernel's
//! class S must verify (the binary exits non-zero otherwise) and report the tcp device.

mod support;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use support::{cargo_build, clean, run};

/// `fastmp-npb`, built once in the test profile.
fn npb() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let mut built = cargo_build(&["-p", "fastmp-npb", "--bin", "fastmp-npb"], "bin");
        built.remove("fastmp-npb").expect("cargo built fastmp-npb")
    })
}

#[test]
fn every_kernel_verifies_class_s_as_processes_over_tcp() {
    let mut failures = Vec::new();
    for kernel in ["ep", "is", "cg", "mg", "ft"] {
        let mut command = clean(Path::new(env!("CARGO_BIN_EXE_fastmprun")));
        command.args(["-np", "2", "--device", "tcp", "--timeout", "100"]).arg(npb());
        command.args([kernel, "--class", "S", "--json"]);
        let (status, stdout, stderr) = run(command);
        let expected = format!(r#"{{"kernel":"{kernel}","class":"S","np":2,"device":"tcp","#);
        let json = stdout.lines().filter(|l| l.starts_with('{')).collect::<Vec<_>>();
        if !status.success()
            || json.len() != 1
            || !json[0].starts_with(&expected)
            || !json[0].contains(r#""verified":true"#)
        {
            failures.push(format!("{kernel}: {status}\n{stdout}{stderr}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
