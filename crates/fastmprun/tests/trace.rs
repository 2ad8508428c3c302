//! Traces of launched jobs: with `FASTMP_TRACE` set, every rank process writes its own file and
//! `fastmprun` merges them into the one the variable names, a row per rank.

use std::process::Command;

const LAUNCHER: &str = env!("CARGO_BIN_EXE_fastmprun");
const TESTPROG: &str = env!("CARGO_BIN_EXE_fastmp-testprog");

/// Runs the test program's ring under `fastmprun ARGS` with tracing to a temporary file and
/// returns the world ranks (`tid`) of the merged trace's send events.
fn traced_ring(name: &str, args: &[&str], np: usize) -> Vec<u64> {
    let path = std::env::temp_dir().join(format!("fastmprun-trace-{name}-{}.json", std::process::id()));
    let np_text = np.to_string();
    let output = Command::new(LAUNCHER)
        .args(["-np", &np_text, "--timeout", "60"])
        .args(args)
        .args([TESTPROG, "ring"])
        .env("FASTMP_TRACE", &path)
        .env_remove("FASTMP_RANK")
        .env_remove("FASTMP_SIZE")
        .output()
        .expect("fastmprun starts");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{name}: {stderr}");
    assert!(!stderr.contains("trace"), "{name}: the merge complained: {stderr}");
    for rank in 0..np {
        assert!(!fastmp::trace_rank_file(&path, rank).exists(), "{name}: rank {rank}'s file was merged away");
    }
    let text = std::fs::read_to_string(&path).expect("the merged trace");
    std::fs::remove_file(&path).ok();
    let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let mut tids: Vec<u64> = doc["traceEvents"]
        .as_array()
        .expect("traceEvents")
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "p2p")
        .map(|e| e["tid"].as_u64().expect("a rank"))
        .collect();
    tids.sort();
    tids.dedup();
    tids
}

#[test]
fn tcp_ranks_traces_are_merged() {
    assert_eq!(traced_ring("tcp", &["--device", "tcp"], 3), [0, 1, 2]);
}

#[test]
fn hybrid_ranks_traces_are_merged() {
    assert_eq!(traced_ring("hybrid", &["--device", "hybrid", "--threads-per-process", "2"], 4), [0, 1, 2, 3]);
}
