//! `fastmp-bench scaling`: how start-up, a small job's wall time and peak memory grow with the
//! number of thread ranks on the shm device.
//!
//! Every measurement runs in a child process of this executable, so the peak resident set it
//! reports (`VmHWM`) is that job's alone and no earlier job's heap is reused. The child times
//! `run(np, barrier + allreduce)` (the whole job: thread start, the first contact between ranks,
//! join), then start-up alone (`run(np, barrier)`), and prints one JSON line; the parent reports
//! the median of `--iterations` children per rank count.

use std::process::Command;
use std::time::Instant;

use fastmp::op::Sum;
use fastmp::{Config, Pin};
use serde_json::{Value, json};

/// Rank counts measured unless `--np-list` says otherwise.
pub const DEFAULT_NP: [usize; 4] = [16, 64, 256, 512];
/// Child processes per rank count (the median is reported).
pub const DEFAULT_REPEATS: usize = 3;
/// Set (to the rank count) in a child's environment: the process measures one job and exits.
const CHILD_ENV: &str = "FASTMP_BENCH_SCALING_CHILD";

/// One child's figures.
#[derive(Clone, Copy, Debug)]
struct Sample {
    startup_ms: f64,
    job_ms: f64,
    /// Peak resident set of the child process; `None` where /proc is not there to read it.
    peak_rss_kib: Option<u64>,
}

/// If this process is a scaling child, measures its job, prints the figures and exits.
pub fn child_main_if_requested() {
    let Some(np) = std::env::var_os(CHILD_ENV) else { return };
    let outcome = np
        .to_str()
        .and_then(|n| n.parse::<usize>().ok())
        .ok_or_else(|| format!("{CHILD_ENV}={np:?} is not a rank count"))
        .and_then(measure);
    match outcome {
        Ok(sample) => {
            println!(
                "{}",
                json!({"startup_ms": sample.startup_ms, "job_ms": sample.job_ms, "peak_rss_kib": sample.peak_rss_kib})
            );
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("fastmp-bench scaling child: {e}");
            std::process::exit(1);
        }
    }
}

/// The child's measurement: the whole barrier + allreduce job, then start-up alone.
fn measure(np: usize) -> Result<Sample, String> {
    // Unpinned: with hundreds of ranks on a few cores pinning only adds system calls.
    let config = Config::new().np(np).pin(Pin::None);
    let start = Instant::now();
    config
        .run(|world| {
            world.barrier()?;
            let mine = [world.rank() as u64];
            let mut sum = [0u64];
            world.allreduce(&mine, &mut sum, Sum)?;
            let n = world.size() as u64;
            if sum[0] != n * (n - 1) / 2 {
                return Err(fastmp::Error::InvalidArgument(format!("allreduce gave {} ranks' sum {}", n, sum[0])));
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    let job_ms = start.elapsed().as_secs_f64() * 1e3;
    let start = Instant::now();
    config.run(|world| world.barrier()).map_err(|e| e.to_string())?;
    let startup_ms = start.elapsed().as_secs_f64() * 1e3;
    Ok(Sample { startup_ms, job_ms, peak_rss_kib: peak_rss_kib() })
}

/// `VmHWM` of this process (Linux), in KiB.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs `repeats` children per rank count and prints the medians, as a table or JSON lines.
pub fn run(np_list: &[usize], repeats: usize, json: bool) -> Result<(), String> {
    if let Some(bad) = np_list.iter().find(|&&np| np == 0) {
        return Err(format!("--np-list: a job needs at least one rank, got {bad}"));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable to start children: {e}"))?;
    if !json {
        println!("# fastmp scaling (shm thread ranks, unpinned; medians of {repeats} child processes)");
        println!("# startup: run(np, barrier); job: run(np, barrier + allreduce); peak RSS: the child's VmHWM");
        println!("{:<10}{:>20}{:>20}{:>20}", "# np", "startup (ms)", "job (ms)", "peak RSS (MiB)");
    }
    for &np in np_list {
        let samples = (0..repeats).map(|_| child(&exe, np)).collect::<Result<Vec<_>, _>>()?;
        let startup_ms = median(samples.iter().map(|s| s.startup_ms));
        let job_ms = median(samples.iter().map(|s| s.job_ms));
        let rss = samples.iter().map(|s| s.peak_rss_kib).collect::<Option<Vec<_>>>();
        let peak_rss_mib = rss.map(|kib| median(kib.into_iter().map(|k| k as f64 / 1024.0)));
        if json {
            let round = |v: f64| (v * 1000.0).round() / 1000.0;
            println!(
                "{}",
                json!({
                    "bench": "scaling",
                    "device": "shm",
                    "np": np,
                    "startup_ms": round(startup_ms),
                    "job_ms": round(job_ms),
                    "peak_rss_mib": peak_rss_mib.map(round),
                })
            );
        } else {
            let rss = peak_rss_mib.map_or("n/a".to_string(), |m| format!("{m:.1}"));
            println!("{np:<10}{startup_ms:>20.3}{job_ms:>20.3}{rss:>20}");
        }
    }
    Ok(())
}

/// Starts one child for `np` ranks and reads its figures.
fn child(exe: &std::path::Path, np: usize) -> Result<Sample, String> {
    let output = Command::new(exe)
        .env(CHILD_ENV, np.to_string())
        .output()
        .map_err(|e| format!("cannot start a child for np {np}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "the child for np {np} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let parsed: Value = serde_json::from_str(text.trim())
        .map_err(|e| format!("the child for np {np} printed {text:?}, not its figures: {e}"))?;
    let number = |key: &str| parsed[key].as_f64().ok_or_else(|| format!("the child for np {np} gave no {key}"));
    Ok(Sample {
        startup_ms: number("startup_ms")?,
        job_ms: number("job_ms")?,
        peak_rss_kib: parsed["peak_rss_kib"].as_u64(),
    })
}

/// The median (the mean of the middle two for an even count).
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), 2.0);
        assert_eq!(median([4.0, 1.0, 3.0, 2.0].into_iter()), 2.5);
        assert!(median(std::iter::empty()).is_nan());
    }

    #[test]
    fn measure_runs_a_small_job() {
        let sample = measure(3).expect("a 3-rank job");
        assert!(sample.job_ms > 0.0 && sample.startup_ms > 0.0);
        if cfg!(target_os = "linux") {
            assert!(sample.peak_rss_kib.is_some_and(|k| k > 0), "VmHWM read");
        }
    }
}
