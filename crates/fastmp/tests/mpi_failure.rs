//! A failing rank ends an mpi-device job under `mpirun` with a clear report. Run by plain
//! `cargo test --features mpi` (not under mpirun): each test starts `mpirun -np 2` on this very
//! test binary, whose ignored `child_*` tests are the ranks' programs.

#![cfg(feature = "mpi")]

use std::process::{Command, Output};

/// Set in the children's environment, so a `child_*` test run by hand does nothing.
const CHILD: &str = "FASTMP_MPI_FAILURE_CHILD";

/// Runs the ignored test `child` of this binary on 2 ranks under mpirun.
fn mpirun_child(child: &str) -> Output {
    let exe = std::env::current_exe().expect("test binary path");
    let mpirun = std::env::var("MPIRUN").unwrap_or_else(|_| "mpirun".into());
    let mut cmd = Command::new(&mpirun);
    // mpirun refuses to run as root without this flag.
    if is_root() {
        cmd.arg("--allow-run-as-root");
    }
    cmd.args(["--oversubscribe", "-np", "2", "-x", "FASTMP_DEVICE=mpi", "-x", &format!("{CHILD}=1")]).arg(exe).args([
        "--exact",
        child,
        "--ignored",
        "--test-threads=1",
        "--nocapture",
    ]);
    cmd.output().unwrap_or_else(|e| panic!("cannot run {mpirun} (install openmpi-bin): {e}"))
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

#[test]
fn a_panicking_rank_fails_the_job_with_its_message() {
    let out = mpirun_child("child_rank_one_panics");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the job must fail; stderr:\n{stderr}");
    assert!(
        stderr.contains("fastmp: rank 1 failed: panicked: deliberate failure of rank 1"),
        "fastmp's report names the rank and its panic; stderr:\n{stderr}"
    );
    assert_eq!(stderr.matches("fastmp: rank").count(), 1, "reported once; stderr:\n{stderr}");
}

#[test]
fn an_aborting_rank_ends_the_job_with_its_code() {
    let out = mpirun_child("child_rank_zero_aborts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "mpirun exits with the abort code; stderr:\n{stderr}");
    assert!(stderr.contains("fastmp: rank 0 aborted the job with code 7"), "stderr:\n{stderr}");
}

#[test]
fn a_killed_rank_fails_the_job() {
    let out = mpirun_child("child_rank_one_is_killed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the job must fail; stderr:\n{stderr}");
    assert!(stderr.contains("signal 9"), "mpirun names the signal; stderr:\n{stderr}");
}

#[test]
#[ignore = "a rank's program for a_panicking_rank_fails_the_job_with_its_message (run under mpirun)"]
fn child_rank_one_panics() {
    if !is_child() {
        return;
    }
    fastmp::main(|world| {
        if world.rank() == 1 {
            panic!("deliberate failure of rank 1");
        }
        // Rank 0 waits for rank 1, which never comes: the abort must end it.
        world.recv::<u8>(&mut [0], 1, 0)?;
        Ok(())
    });
}

#[test]
#[ignore = "a rank's program for an_aborting_rank_ends_the_job_with_its_code (run under mpirun)"]
fn child_rank_zero_aborts() {
    if !is_child() {
        return;
    }
    fastmp::main(|world| {
        if world.rank() == 0 {
            world.abort(7);
        }
        world.barrier()
    });
}

#[test]
#[ignore = "a rank's program for a_killed_rank_fails_the_job (run under mpirun)"]
fn child_rank_one_is_killed() {
    if !is_child() {
        return;
    }
    fastmp::main(|world| {
        if world.rank() == 1 {
            kill_self();
        }
        world.barrier()
    });
}

/// Sends SIGKILL to this process (through the `kill` command: the tests use no libc).
fn kill_self() {
    let _ = Command::new("kill").args(["-9", &std::process::id().to_string()]).status();
    std::thread::sleep(std::time::Duration::from_secs(60));
}
