//! The benchmark binary's output contract: OSU-style tables, JSON lines with the documented keys,
//! clear errors for bad arguments, and tuning files the library accepts.

use std::process::Command;

use fastmp::coll::{Algorithm, Collective, Tuning};

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
    // `--iterations` sets the timed windows, as OSU's `-i` does.
    let lines = json_lines(&bench(&["bw", "--max-size", "8", "--iterations", "2", "--pin", "none", "--json"]));
    assert_eq!(lines.len(), 4, "bw --iterations 2: 1..8 bytes");
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

/// Quick collective runs: tiny sizes, few iterations, no pinning.
fn coll_bench(name: &str, np: usize, extra: &[&str]) -> std::process::Output {
    let np = np.to_string();
    let mut args = vec![name, "--np", &np, "--max-size", "16", "--iterations", "3", "--pin", "none"];
    args.extend_from_slice(extra);
    bench(&args)
}

#[test]
fn every_collective_prints_json_lines_with_the_documented_keys() {
    for np in [2, 3] {
        for coll in Collective::ALL {
            let name = coll.name();
            let lines = json_lines(&coll_bench(name, np, &["--json"]));
            let expected_sizes: &[u64] = match coll {
                Collective::Barrier => &[0],
                Collective::Reduce | Collective::Allreduce | Collective::ReduceScatter | Collective::Scan => {
                    &[4, 8, 16]
                }
                _ => &[1, 2, 4, 8, 16],
            };
            let sizes: Vec<u64> = lines.iter().map(|l| l["size"].as_u64().unwrap()).collect();
            assert_eq!(sizes, expected_sizes, "{name} np={np}");
            for l in &lines {
                let keys: Vec<&str> = l.as_object().unwrap().keys().map(String::as_str).collect();
                let bandwidth: &[&str] = if coll == Collective::Barrier { &[] } else { &["mb_s"] };
                let expected: Vec<&str> = ["bench", "device", "np", "size", "avg_us", "min_us", "max_us"]
                    .into_iter()
                    .chain(bandwidth.iter().copied())
                    .chain(["algorithm"])
                    .collect();
                assert_eq!(keys, expected, "{name} np={np}: {l}");
                assert_eq!(
                    (l["bench"].as_str(), l["device"].as_str(), l["np"].as_u64()),
                    (Some(name), Some("shm"), Some(np as u64))
                );
                let (avg, min, max) =
                    (l["avg_us"].as_f64().unwrap(), l["min_us"].as_f64().unwrap(), l["max_us"].as_f64().unwrap());
                assert!(min >= 0.0 && min <= avg + 1e-3 && avg <= max + 1e-3, "{name} np={np}: {l}");
                let algorithm = Algorithm::from_name(l["algorithm"].as_str().unwrap()).unwrap();
                assert!(coll.algorithms().contains(&algorithm), "{name} np={np}: {l}");
            }
        }
    }
}

#[test]
fn collective_table_follows_the_osu_layout_and_algorithm_is_forced() {
    let out = coll_bench("bcast", 3, &["--algorithm", "mst", "--min-size", "8"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("# fastmp Broadcast Latency Test v7.4"), "{text}");
    assert!(text.contains("# Algorithm: mst (forced)"), "{text}");
    let head = lines.iter().find(|l| l.starts_with("# Size")).unwrap();
    let columns = ["Avg Latency(us)", "Min Latency(us)", "Max Latency(us)", "Bandwidth (MB/s)", "Algorithm"];
    assert_eq!(*head, columns.iter().fold(format!("{:<10}", "# Size"), |h, c| h + &format!("{c:>20}")));
    let rows: Vec<&str> = lines.iter().copied().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows.len(), 2, "sizes 8 and 16: {text}");
    assert!(rows.iter().all(|r| r.ends_with(" mst")), "{text}");
}

#[test]
fn bad_collective_arguments_fail_with_a_message() {
    for (args, needle) in [
        (&["bcast", "--algorithm", "magic"][..], "unknown algorithm \"magic\" for bcast; valid: bft, nbft, fat, mst"),
        (
            &["barrier", "--algorithm", "bkt"][..],
            "barrier has no algorithm \"bkt\"; valid: gather_bcast, bt, bde, native",
        ),
        (&["latency", "--algorithm", "mst"][..], "--algorithm does not apply to latency"),
        (&["allreduce", "--iterations", "0"][..], "--iterations must be at least 1"),
        (&["latency", "--iterations", "0"][..], "--iterations must be at least 1"),
        (&["tune", "--collectives", "bcats"][..], "unknown collective \"bcats\""),
    ] {
        let out = bench(args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn tune_writes_a_loadable_tuning_file() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-tune.json");
    let _ = std::fs::remove_file(&path);
    let out = bench(&[
        "tune",
        "--np-list",
        "2,3",
        "--max-size",
        "8",
        "--iterations",
        "2",
        "--pin",
        "none",
        "--output",
        path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let summary = String::from_utf8(out.stdout).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let tuning = Tuning::from_json(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let file: serde_json::Value = serde_json::from_str(&text).unwrap();
    for coll in Collective::ALL {
        assert!(file[coll.name()].is_array(), "{} missing: {text}", coll.name());
        assert!(summary.lines().any(|l| l.starts_with(coll.name())), "{summary}");
        assert!(coll.algorithms().contains(&tuning.select(coll, 3, 8)));
    }
}

#[test]
fn ring_p2p_reference_reports_like_allreduce() {
    for np in [1, 2, 3] {
        let out = coll_bench("allreduce_ring_p2p", np, &["--json", "--segments", "3"]);
        let lines = json_lines(&out);
        let sizes: Vec<u64> = lines.iter().map(|l| l["size"].as_u64().unwrap()).collect();
        assert_eq!(sizes, [4, 8, 16], "np={np}");
        let library = json_lines(&coll_bench("allreduce", np, &["--json"]));
        for (ours, theirs) in lines.iter().zip(&library) {
            let keys = |l: &serde_json::Value| l.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
            assert_eq!(keys(ours), keys(theirs), "np={np}: {ours}");
            assert_eq!(
                (ours["bench"].as_str(), ours["algorithm"].as_str()),
                (Some("allreduce_ring_p2p"), Some("ring_p2p_s3"))
            );
        }
    }
    let out = bench(&["allreduce_ring_p2p", "--segments", "0"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--segments must be at least 1"));
    let out = bench(&["allreduce", "--segments", "2"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--segments does not apply to allreduce"));
}

#[test]
fn tune_on_tcp_accumulates_points_and_never_writes_native() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let (points, output) = (dir.join("cli-tune-tcp.jsonl"), dir.join("cli-tune-tcp.json"));
    let _ = std::fs::remove_file(&points);
    for (np_list, collectives) in [("2", "allreduce,bcast"), ("3", "allreduce")] {
        let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let args = ["tune", "--np-list", np_list, "--collectives", collectives, "--max-size", "8", "--iterations", "2"];
        let out = Command::new(env!("CARGO_BIN_EXE_fastmp-bench"))
            .args(args)
            .args(["--pin", "none", "--points", points.to_str().unwrap(), "--output", output.to_str().unwrap()])
            .env_remove("FASTMP_NP")
            .env("FASTMP_DEVICE", "tcp")
            .output()
            .expect("run fastmp-bench");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let text = std::fs::read_to_string(&output).unwrap();
    let file: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(file["comment"].as_str().unwrap().contains("tcp device: np 2,3"), "{text}");
    assert!(!text.contains("native"), "{text}");
    let tuning = Tuning::from_json(&text).unwrap();
    let rules = tuning.rules(Collective::Allreduce);
    assert!(rules.iter().any(|r| r.max_np == Some(3)), "np 3 measured in the second run: {text}");
    assert!(file["bcast"].is_array() && file["scan"].is_null(), "only what was measured: {text}");
    let lines = std::fs::read_to_string(&points).unwrap();
    assert!(lines.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()));
    assert!(lines.lines().any(|l| l.contains("\"np\":3")) && lines.lines().any(|l| l.contains("\"np\":2")));
}

const ONE_SIDED: [&str; 8] =
    ["put_latency", "get_latency", "put_bw", "get_bw", "put_bibw", "acc_latency", "fop_latency", "cas_latency"];
const SYNCS: [&str; 6] = ["flush", "flush_local", "lock", "lock_all", "fence", "pscw"];

/// A quick one-sided run (few iterations, small sizes unless the benchmark has its one size)
/// on `device`; returns its JSON lines after checking their keys and values.
fn one_sided(name: &str, device: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut args = vec![name, "--iterations", "3", "--pin", "none", "--json"];
    if !matches!(name, "fop_latency" | "cas_latency") {
        args.extend(["--min-size", "4", "--max-size", "16"]);
    }
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_fastmp-bench"))
        .args(&args)
        .env_remove("FASTMP_NP")
        .env("FASTMP_DEVICE", device)
        .output()
        .expect("run fastmp-bench");
    let lines = json_lines(&out);
    let metric = if name.contains("_bw") || name.contains("_bibw") { "mb_s" } else { "avg_us" };
    let expected_sizes: &[u64] = if name.starts_with("fop") || name.starts_with("cas") { &[8] } else { &[4, 8, 16] };
    let sizes: Vec<u64> = lines.iter().map(|l| l["size"].as_u64().unwrap()).collect();
    assert_eq!(sizes, expected_sizes, "{name} {device} {extra:?}");
    for l in &lines {
        let keys: Vec<&str> = l.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["bench", "device", "np", "size", metric, "win", "sync"], "{l}");
        assert_eq!((l["bench"].as_str(), l["device"].as_str(), l["np"].as_u64()), (Some(name), Some(device), Some(2)));
        assert!(l[metric].as_f64().unwrap() > 0.0, "{l}");
    }
    lines
}

#[test]
fn every_one_sided_benchmark_runs_with_every_synchronisation_on_shm() {
    for name in ONE_SIDED {
        for sync in SYNCS {
            if name == "put_bibw" && !matches!(sync, "fence" | "pscw") {
                continue;
            }
            let lines = one_sided(name, "shm", &["--sync", sync]);
            assert!(lines.iter().all(|l| l["sync"] == sync && l["win"] == "allocate"), "{name} {sync}");
        }
    }
    for name in ["put_latency", "get_bw", "acc_latency", "cas_latency"] {
        let lines = one_sided(name, "shm", &["--win", "create"]);
        assert!(lines.iter().all(|l| l["win"] == "create" && l["sync"] == "flush"), "{name}");
    }
    let lines = one_sided("put_bibw", "shm", &[]);
    assert!(lines.iter().all(|l| l["sync"] == "pscw"), "put_bibw defaults to pscw");
}

#[test]
fn one_sided_benchmarks_run_on_tcp() {
    for name in ONE_SIDED {
        one_sided(name, "tcp", &[]);
    }
    for sync in SYNCS {
        one_sided("put_latency", "tcp", &["--sync", sync]);
    }
    one_sided("put_bw", "tcp", &["--sync", "fence", "--win", "create"]);
}

#[test]
fn one_sided_table_names_the_window_and_synchronisation() {
    let out = bench(&["get_latency", "--min-size", "8", "--max-size", "8", "--iterations", "3", "--sync", "lock"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("# fastmp MPI_Get Latency Test v7.4"), "{text}");
    assert_eq!(lines[1], "# Window creation: allocate (MPI_Win_allocate)");
    assert!(lines[2].starts_with("# Synchronization: lock(shared) + op + unlock"), "{text}");
    assert_eq!(lines[3], format!("{:<10}{:>20}", "# Size", "Latency (us)"));
    assert_eq!(lines.len(), 5, "{text}");
    assert!(lines[4].starts_with("8 ") && lines[4].len() == 30, "{text}");
}

#[test]
fn bad_one_sided_arguments_fail_with_a_message() {
    for (args, needle) in [
        (&["put_latency", "--np", "3"][..], "put_latency needs exactly 2 ranks, got 3"),
        (&["put_bibw", "--sync", "flush"][..], "put_bibw needs active-target synchronisation (--sync fence|pscw"),
        (&["acc_latency", "--min-size", "6"][..], "acc_latency sizes must be positive multiples of 4"),
        (&["fop_latency", "--max-size", "64"][..], "--max-size does not apply to fop_latency"),
        (&["cas_latency", "--min-size", "8"][..], "--min-size does not apply to cas_latency"),
        (&["put_bw", "--max-size", "1073741824"][..], "put_bw: --max-size 1073741824 is above 33554431 bytes"),
        (&["latency", "--sync", "fence"][..], "--sync does not apply to latency"),
        (&["bw", "--win", "create"][..], "--win does not apply to bw"),
        (&["put_latency", "--sync", "flushall"][..], "invalid value 'flushall' for '--sync <MODE>'"),
        (&["get_bw", "--iterations", "0"][..], "--iterations must be at least 1"),
    ] {
        let out = bench(args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
