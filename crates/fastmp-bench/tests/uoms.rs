//! `fastmp-bench uoms` and `tune --pgas`: UOMS's layout, the documented JSON keys, the
//! iteration statistics and the variability filter, clear errors, and tuning files the library
//! accepts. Tiny sizes and few iterations: these check the output, not the speed.

use std::process::Command;

use fastmp::pgas::{Collective, Tuning};

/// One benchmark process at a time (their spinning ranks would starve each other).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn bench(args: &[&str]) -> std::process::Output {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    Command::new(env!("CARGO_BIN_EXE_fastmp-bench"))
        .args(args)
        .env_remove("FASTMP_NP")
        .env_remove("FASTMP_DEVICE")
        .env_remove("FASTMP_PGAS_TUNING_FILE")
        .output()
        .expect("run fastmp-bench")
}

fn stdout(out: &std::process::Output, what: &str) -> String {
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// `uoms NAME` at 4..16 bytes (reductions 8..16), 3 iterations, as JSON lines.
fn uoms_json(name: &str, np: usize, extra: &[&str]) -> Vec<serde_json::Value> {
    let np = np.to_string();
    let mut args = vec!["uoms", name, "--np", &np, "--max-size", "16", "--iterations", "3", "--pin", "none", "--json"];
    args.extend_from_slice(extra);
    let text = stdout(&bench(&args), &format!("{args:?}"));
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}"))).collect()
}

const KEYS: [&str; 11] = [
    "bench",
    "device",
    "np",
    "size",
    "t_min_ns",
    "t_max_ns",
    "t_avg_ns",
    "bw_mb_s",
    "repetitions",
    "sync",
    "algorithm",
];

/// Checks one benchmark's lines: keys, sizes, the filter, the bandwidth formula.
fn check_lines(name: &str, np: usize, device: &str, lines: &[serde_json::Value]) {
    let sizes: Vec<u64> = lines.iter().map(|l| l["size"].as_u64().unwrap()).collect();
    let expected: &[u64] = match name {
        "barrier" => &[0],
        "reduce" | "prefix_reduce" => &[8, 16],
        _ => &[4, 8, 16],
    };
    assert_eq!(sizes, expected, "{name}");
    let factor = match name {
        "exchange" | "gather_all" => (np * np) as f64,
        "memget" | "memput" | "memcpy" => 1.0,
        "reduce" | "prefix_reduce" | "barrier" => 0.0,
        _ => np as f64,
    };
    let mut floor = 0.0;
    for l in lines {
        let keys: Vec<&str> = l.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, KEYS, "{name}: {l}");
        assert_eq!((l["bench"].as_str(), l["device"].as_str()), (Some(name), Some(device)), "{l}");
        assert_eq!((l["np"].as_u64(), l["repetitions"].as_u64()), (Some(np as u64), Some(3)), "{l}");
        let (min, max, avg) =
            (l["t_min_ns"].as_f64().unwrap(), l["t_max_ns"].as_f64().unwrap(), l["t_avg_ns"].as_f64().unwrap());
        assert!(min > 0.0 && avg <= max && min >= floor, "{name}: {l}");
        floor = min;
        let size = l["size"].as_f64().unwrap();
        let bw = l["bw_mb_s"].as_f64().unwrap();
        assert!((bw - factor * size * 1e3 / min).abs() <= 0.01, "{name}: bandwidth = factor x size / t_min: {l}");
    }
}

#[test]
fn every_uoms_benchmark_prints_json_lines_with_the_documented_keys() {
    let names = [
        "broadcast",
        "scatter",
        "gather",
        "gather_all",
        "exchange",
        "permute",
        "reduce",
        "prefix_reduce",
        "memget",
        "memput",
        "memcpy",
        "barrier",
    ];
    for np in [2, 3] {
        for name in names {
            check_lines(name, np, "shm", &uoms_json(name, np, &[]));
        }
    }
    for name in ["broadcast", "reduce", "memput", "barrier"] {
        check_lines(name, 2, "tcp", &uoms_json(name, 2, &["--device", "tcp"]));
    }
}

#[test]
fn uoms_options_reach_the_calls() {
    let lines = uoms_json("scatter", 3, &["--sync-mode", "in_nosync,out_mysync", "--rotate-root"]);
    assert!(lines.iter().all(|l| l["sync"] == "in_nosync,out_mysync"), "{lines:?}");
    let lines = uoms_json("exchange", 2, &["--algorithm", "flat_pull"]);
    assert!(lines.iter().all(|l| l["algorithm"] == "flat_pull"), "{lines:?}");
    for (op, ty) in [("max", "f64"), ("bxor", "i64"), ("prod", "i64")] {
        let lines = uoms_json("prefix_reduce", 2, &["--reduce-op", op, "--reduce-type", ty]);
        assert_eq!(lines.len(), 2, "{op} {ty}");
    }
}

#[test]
fn uoms_table_follows_the_uoms_layout() {
    let args = ["uoms", "memput", "--min-size", "8", "--max-size", "32", "--iterations", "5", "--pin", "none"];
    let text = stdout(&bench(&args), "memput table");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("# fastmp UPC Operations Microbenchmark Suite V1.1"), "{text}");
    for needle in [
        "# Date ",
        "# Problem sizes:\n# 8\n# 16\n# 32\n",
        "UPC_IN_ALLSYNC|UPC_OUT_ALLSYNC",
        "UPC_ADD",
        "# List of Benchmarks to run:\n# upc_memput\n",
        "# Benchmarking upc_memput\n# #processes = 2\n",
    ] {
        assert!(text.contains(needle), "{needle:?} missing: {text}");
    }
    let head = format!(
        "{:>12} {:>12} {:>14} {:>14} {:>14} {:>22}",
        "#bytes", "#repetitions", "t_min[nsec]", "t_max[nsec]", "t_avg[nsec]", "BW_aggregated[MB/sec]"
    );
    let at = lines.iter().position(|l| *l == head).unwrap_or_else(|| panic!("no column line: {text}"));
    let rows = &lines[at + 1..];
    assert_eq!(rows.len(), 3, "{text}");
    for (row, size) in rows.iter().zip(["8", "16", "32"]) {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!((cells.len(), cells[0], cells[1]), (6, size, "5"), "{row}");
        assert!(cells[2..].iter().all(|c| c.parse::<f64>().is_ok()), "{row}");
    }
    let text = stdout(&bench(&["uoms", "reduce", "--max-size", "8", "--iterations", "2", "--pin", "none"]), "reduce");
    let row = text.lines().last().unwrap();
    assert!(row.trim_start().starts_with("8 ") && row.ends_with(" -"), "no bandwidth for reduce: {row}");
}

#[test]
fn bad_uoms_arguments_fail_with_a_message() {
    for (args, needle) in [
        (&["uoms"][..], "uoms needs a benchmark: one of broadcast, scatter"),
        (&["uoms", "allreduce"][..], "unknown uoms benchmark \"allreduce\""),
        (&["bcast", "scatter"][..], "UOMS_BENCHMARK does not apply to bcast"),
        (&["uoms", "gather_all", "--rotate-root"][..], "--rotate-root does not apply"),
        (&["uoms", "broadcast", "--reduce-op", "max"][..], "--reduce-op does not apply"),
        (&["uoms", "memget", "--sync-mode", "in_nosync"][..], "--sync-mode does not apply"),
        (&["uoms", "broadcast", "--sync-mode", "in_nosync,in_mysync"][..], "more than one IN_* flag"),
        (&["uoms", "broadcast", "--sync-mode", "in_sometimes"][..], "unknown sync flag"),
        (&["uoms", "exchange", "--algorithm", "binomial_pull"][..], "exchange has no algorithm binomial_pull"),
        (&["uoms", "reduce", "--reduce-op", "bxor", "--reduce-type", "f64"][..], "needs integers"),
        (&["uoms", "broadcast", "--device", "ib"][..], "unknown device 'ib'"),
        (&["tune", "--pgas", "--np-list", "2"][..], "--np-list does not apply"),
        (&["tune", "--pgas", "--collectives", "bcast"][..], "unknown PGAS collective \"bcast\""),
    ] {
        let out = bench(args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn tune_pgas_writes_a_tuning_file_the_library_accepts() {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-tune-pgas.json");
    let _ = std::fs::remove_file(&path);
    let out = bench(&[
        "tune",
        "--pgas",
        "--np",
        "3",
        "--collectives",
        "broadcast,permute,reduce",
        "--max-size",
        "32",
        "--iterations",
        "2",
        "--pin",
        "none",
        "--out",
        path.to_str().unwrap(),
    ]);
    let text = stdout(&out, "tune --pgas");
    assert!(text.contains("# fastmp tune --pgas (shm): np 3; sizes 8,32;"), "{text}");
    let json = std::fs::read_to_string(&path).unwrap();
    let tuning = Tuning::defaults_for("shm").with_json(&json).unwrap();
    for coll in [Collective::Broadcast, Collective::Permute, Collective::Reduce] {
        let rules = tuning.rules(coll);
        assert_eq!(rules[0].max_ranks, Some(3), "{coll:?}: measured rules are limited to np 3: {json}");
        let last = rules.last().unwrap();
        assert!(last.max_ranks.is_none() && last.max_bytes.is_none(), "{coll:?}: {json}");
    }
    assert_eq!(tuning.rules(Collective::Exchange), Tuning::defaults_for("shm").rules(Collective::Exchange));
}
