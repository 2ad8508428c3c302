//! The benchmark binary's output contract: OSU-style tables, JSON lines with the documented keys,
//! and clear errors for bad arguments.

use std::process::Command;

/// One benchmark process at a time: their spinning ranks would starve each other on a small
/// machine if the test harness ran them in parallel.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn bench(args: &[&str]) -> std::process::Output {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    Command::new(env!("CARGO_BIN_EXE_fastmp-bench"))
        .args(args)
        .env_remove("FASTMP_NP")
        .output()
        .expect("run fastmp-bench")
}

fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect()
}

#[test]
fn latency_json_has_one_line_per_size_with_the_documented_keys() {
    let lines = json_lines(&bench(&["latency", "--max-size", "64", "--pin", "none", "--json"]));
    let sizes: Vec<u64> = lines.iter().map(|l| l["size"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [0, 1, 2, 4, 8, 16, 32, 64]);
    for l in &lines {
        let keys: Vec<&str> = l.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["bench", "device", "np", "size", "avg_us"]);
        assert_eq!(
            (l["bench"].as_str(), l["device"].as_str(), l["np"].as_u64()),
            (Some("latency"), Some("shm"), Some(2))
        );
        assert!(l["avg_us"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn bandwidth_benchmarks_report_mb_s() {
    for name in ["bw", "bibw"] {
        let lines = json_lines(&bench(&[name, "--min-size", "1024", "--max-size", "65536", "--pin", "none", "--json"]));
        assert_eq!(lines.len(), 7, "{name}: 1 KiB..64 KiB");
        assert!(lines.iter().all(|l| l["bench"] == name && l["mb_s"].as_f64().unwrap() > 0.0));
    }
    let lines = json_lines(&bench(&["mbw_mr", "--np", "4", "--max-size", "8", "--pin", "none", "--json"]));
    assert_eq!(lines.len(), 4);
    assert!(lines.iter().all(|l| l["np"] == 4 && l["mb_s"].as_f64().unwrap() > 0.0 && l["msg_s"].as_f64().is_some()));
}

#[test]
fn table_output_follows_the_osu_layout() {
    let out = bench(&["latency", "--min-size", "8", "--max-size", "16", "--pin", "none"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("# fastmp Latency Test v7.4"), "{text}");
    assert_eq!(lines[1], format!("{:<10}{:>20}", "# Size", "Latency (us)"));
    assert_eq!(lines.len(), 4, "header, column titles, two sizes: {text}");
    assert!(lines[2].starts_with("8 ") && lines[2].len() == 30, "{text}");
}

#[test]
fn bad_arguments_fail_with_a_message() {
    for (args, needle) in [
        (&["latency", "--np", "3"][..], "needs exactly 2 ranks"),
        (&["mbw_mr", "--np", "3"][..], "even number of ranks"),
        (&["bw", "--min-size", "64", "--max-size", "8"][..], "larger than --max-size"),
    ] {
        let out = bench(args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
