//! `fastmp-bench tune`: measures every algorithm of every collective at each process count and
//! power-of-two size (the collective benchmarks' method with fewer iterations, ranked by the
//! call time of [`Ranking`], best of [`ROUNDS`] interleaved rounds), keeps the fastest per (np, size),
//! compresses the winners into selection rules (the job's own rules decide beyond the largest
//! measured process count) and writes a JSON tuning file that `Tuning::from_json` and
//! `FASTMP_TUNING_FILE` accept. So `fastmp-bench tune --np-list 2` is a quick calibration of
//! this machine that leaves the other process counts to the defaults.
//!
//! Without a launcher it starts thread ranks for each `--np-list` entry on the device of
//! `FASTMP_DEVICE` (tcp: ranks talk over loopback). Under a launcher (`fastmprun -np N --device
//! tcp fastmp-bench tune ...`) it measures the launcher's N processes. `--points FILE` keeps the
//! measured points across runs (one JSON object per line; the best of repeated points wins), and
//! the tuning file is made from all of them: one launcher run per process count, or runs over
//! different collectives and sizes, add up to one table. Algorithms the device cannot run
//! (`native` on tcp) are not measured, so they never enter the table.

use std::path::Path;
use std::time::Instant;

use fastmp::coll::{Algorithm, Collective, Cores, Rule, Tuning};
use fastmp::{Comm, Config, Error, Pin};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::coll::{Iterations, Workload, forcing, measure, selects_by_size, sizes_for};
use crate::support::Sizes;

/// Process counts measured when `--np-list` is not given (and no launcher fixed one).
pub const DEFAULT_NP_LIST: [usize; 3] = [2, 4, 8];

/// What to measure.
pub struct Plan {
    /// `None`: [`DEFAULT_NP_LIST`], or the launcher's process count.
    pub np_list: Option<Vec<usize>>,
    /// Empty: all collectives.
    pub collectives: Vec<Collective>,
    pub sizes: Sizes,
    pub iterations: Iterations,
    /// Where measured points accumulate across runs, if anywhere.
    pub points: Option<std::path::PathBuf>,
}

/// The call time (averaged over ranks, as [`Ranking`] says) of one algorithm at one size.
#[derive(Clone, Debug)]
struct Point {
    coll: Collective,
    algorithm: Algorithm,
    size: usize,
    time_us: f64,
}

/// Which call time ranks the algorithms at one process count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ranking {
    /// Each rank's median call: robust to a preempted call when every rank has a core.
    Median,
    /// Each rank's mean call, when ranks outnumber the cores: then waiting for a descheduled
    /// peer is the cost itself, not noise, and the median hides it (measured on 2 cores at np 8:
    /// allreduce `nbft` won on medians, but `native`'s mean was about half of `nbft`'s).
    Mean,
}

impl Ranking {
    fn for_ranks(np: usize, cpus: usize) -> Self {
        match Cores::for_ranks(np, cpus) {
            Cores::Shared => Ranking::Mean,
            Cores::Dedicated => Ranking::Median,
        }
    }

    fn time_us(self, stats: &crate::coll::Stats) -> f64 {
        match self {
            Ranking::Median => stats.median_us,
            Ranking::Mean => stats.avg_us,
        }
    }
}

/// Measured points of one process count.
type Measured = Vec<(usize, Vec<Point>)>;

pub fn run(config: &Config, plan: &Plan, output: &Path) -> Result<(), String> {
    // One rank of a launched multi-process job: the launcher fixed the process count, so
    // `Config::np` has no effect.
    let launched = config.clone().np(config.get_np() + 1).get_np() == config.get_np();
    let mut np_list = match (&plan.np_list, launched) {
        (Some(list), true) if list[..] != [config.get_np()] => {
            return Err(format!(
                "under a launcher tune measures the launcher's {} ranks; --np-list {list:?} cannot apply \
                 (run the launcher once per process count, with --points to combine them)",
                config.get_np()
            ));
        }
        (_, true) => vec![config.get_np()],
        (Some(list), false) => list.clone(),
        (None, false) => DEFAULT_NP_LIST.to_vec(),
    };
    np_list.sort_unstable();
    np_list.dedup();
    if np_list.is_empty() || np_list[0] == 0 {
        return Err("--np-list needs process counts of at least 1".into());
    }
    let collectives = if plan.collectives.is_empty() { Collective::ALL.to_vec() } else { plan.collectives.clone() };
    let per_np: usize = collectives.iter().map(|&c| c.algorithms().len() * sizes_for(c, &plan.sizes).len()).sum();
    let bar = ProgressBar::new((ROUNDS * per_np * np_list.len()) as u64).with_style(
        ProgressStyle::with_template("{elapsed_precise} [{wide_bar}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let hidden = ProgressBar::hidden();
    let started = Instant::now();
    let cpus = fastmp::affinity::allowed_cpus().len();
    let mut measured: Measured = Vec::new();
    let mut device = "";
    // The rules the job started with (the device's defaults, with FASTMP_TUNING_FILE applied):
    // they decide beyond the measured process counts.
    let mut base: Option<Tuning> = None;
    for &np in &np_list {
        let mut config = config.clone().np(np);
        if !launched && np > cpus {
            // Oversubscribed: pinning would stack spinning ranks on a few cores (compare.sh and
            // Open MPI's --oversubscribe runs are unpinned too).
            bar.suspend(|| eprintln!("tune: np={np} > {cpus} CPUs: ranks run unpinned"));
            config = config.pin(Pin::None);
        }
        let ranking = Ranking::for_ranks(np, cpus);
        let mut ranks = config
            .run(|world: Comm| {
                let bar = if world.rank() == 0 { &bar } else { &hidden };
                let points = measure_all(&world, &collectives, plan, ranking, bar)?;
                Ok((world.rank(), world.device_name(), world.tuning().clone(), points))
            })
            .map_err(|e| format!("tune at np={np}: {e}"))?;
        let (rank, name, tuning, points) = ranks.swap_remove(0);
        if rank != 0 {
            // A launched process other than rank 0: rank 0 reports.
            return Ok(());
        }
        device = name;
        base = Some(tuning);
        measured.push((np, points));
    }
    bar.finish_and_clear();
    if let Some(path) = &plan.points {
        measured = merge_points(path, measured)?;
    }

    let mut file = serde_json::Map::new();
    let nps: Vec<String> = measured.iter().map(|(np, _)| np.to_string()).collect();
    let all = measured.iter().flat_map(|(_, points)| points);
    let (min, max) = all.clone().fold((usize::MAX, 0), |(lo, hi), p| (lo.min(p.size), hi.max(p.size)));
    file.insert(
        "comment".into(),
        json!(format!(
            "fastmp-bench tune on the {device} device: np {}; {} points of {}..{} B; each point the best of {ROUNDS} \
             interleaved rounds of the ranks' median call times (mean where np exceeds the CPUs); beyond np {} the \
             rules the tuning job started with",
            nps.join(","),
            all.count(),
            min,
            max,
            measured.last().map_or(0, |(np, _)| *np)
        )),
    );
    let mut summary = Vec::new();
    let mut tuned: Vec<Collective> = measured.iter().flat_map(|(_, p)| p.iter().map(|p| p.coll)).collect();
    tuned.sort_unstable();
    tuned.dedup();
    for coll in tuned {
        let winners: Vec<(usize, Vec<(usize, Algorithm)>)> =
            measured.iter().map(|(np, points)| (*np, fastest(coll, points))).collect();
        let beyond = base.as_ref().map_or(&[][..], |t| &t.rules(coll)[..]);
        let rules = compress(coll, &winners, beyond);
        summary.push((coll, rules.iter().map(rule_text).collect::<Vec<_>>().join("; ")));
        file.insert(coll.name().into(), serde_json::to_value(&rules).map_err(|e| e.to_string())?);
    }
    let text = serde_json::to_string_pretty(&file).map_err(|e| e.to_string())? + "\n";
    Tuning::from_json(&text).map_err(|e| format!("tune produced an invalid tuning file: {e}"))?;
    std::fs::write(output, &text).map_err(|e| format!("cannot write {}: {e}", output.display()))?;

    println!(
        "# fastmp tune ({device}): np {}; sizes {}..{} B; {} measurements in {:.1} s",
        np_list.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
        plan.sizes.min,
        plan.sizes.max,
        per_np * np_list.len(),
        started.elapsed().as_secs_f64()
    );
    println!("# {:<16}rules, first match wins (np: process count; B: bytes per rank)", "collective");
    for (coll, rules) in summary {
        println!("{:<18}{rules}", coll.name());
    }
    println!("# wrote {} (use it with FASTMP_TUNING_FILE={0})", output.display());
    Ok(())
}

/// `measured` together with the points in the file at `path` (if it exists), the best of
/// repeated points kept; writes the union back and returns it by process count, ascending.
fn merge_points(path: &Path, measured: Measured) -> Result<Measured, String> {
    let bad = |e: String| format!("points file {}: {e}", path.display());
    let mut all: Vec<(usize, Point)> = Vec::new();
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(bad(e.to_string())),
    };
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let value: serde_json::Value = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        let field = |key: &str| value.get(key).ok_or_else(|| bad(format!("line without {key:?}: {line}")));
        let number = |key: &str| field(key)?.as_u64().map(|n| n as usize).ok_or_else(|| bad(format!("bad {key}")));
        let name = |key: &str| field(key)?.as_str().ok_or_else(|| bad(format!("bad {key}")));
        let point = Point {
            coll: Collective::from_name(name("collective")?).map_err(|e| bad(e.to_string()))?,
            algorithm: Algorithm::from_name(name("algorithm")?).map_err(|e| bad(e.to_string()))?,
            size: number("size")?,
            // Points files from before the mean ranking name the field `median_us`.
            time_us: field("time_us")
                .or_else(|_| field("median_us"))?
                .as_f64()
                .ok_or_else(|| bad("bad time_us".into()))?,
        };
        all.push((number("np")?, point));
    }
    all.extend(measured.into_iter().flat_map(|(np, points)| points.into_iter().map(move |p| (np, p))));
    let mut best: Vec<(usize, Point)> = Vec::new();
    for (np, point) in all {
        let same = |(n, p): &&mut (usize, Point)| {
            (*n, p.coll, p.algorithm, p.size) == (np, point.coll, point.algorithm, point.size)
        };
        match best.iter_mut().find(same) {
            Some((_, kept)) => kept.time_us = kept.time_us.min(point.time_us),
            None => best.push((np, point)),
        }
    }
    best.sort_by_key(|(np, p)| (*np, p.coll, p.size));
    let lines: String = best
        .iter()
        .map(|(np, p)| {
            let line = json!({"np": np, "collective": p.coll.name(), "algorithm": p.algorithm.name(),
                "size": p.size, "time_us": p.time_us});
            format!("{line}\n")
        })
        .collect();
    std::fs::write(path, lines).map_err(|e| bad(e.to_string()))?;
    let mut by_np: Measured = Vec::new();
    for (np, point) in best {
        match by_np.last_mut() {
            Some((n, points)) if *n == np => points.push(point),
            _ => by_np.push((np, vec![point])),
        }
    }
    Ok(by_np)
}

/// Rounds over the whole plan; each point keeps its best round. Rounds are interleaved, so a
/// preemption or a noisy minute on a shared machine spoils one round of a few algorithms, not
/// the choice between them.
pub const ROUNDS: usize = 3;

/// Every algorithm of every collective at every size on this communicator; the points at rank 0.
fn measure_all(
    world: &Comm,
    collectives: &[Collective],
    plan: &Plan,
    ranking: Ranking,
    bar: &ProgressBar,
) -> fastmp::Result<Vec<Point>> {
    let mut points: Vec<Point> = Vec::new();
    for _ in 0..ROUNDS {
        for point in measure_round(world, collectives, plan, ranking, bar)? {
            match points.iter_mut().find(|p| (p.coll, p.algorithm, p.size) == (point.coll, point.algorithm, point.size))
            {
                Some(best) => best.time_us = best.time_us.min(point.time_us),
                None => points.push(point),
            }
        }
    }
    Ok(points)
}

/// One measurement of every point.
fn measure_round(
    world: &Comm,
    collectives: &[Collective],
    plan: &Plan,
    ranking: Ranking,
    bar: &ProgressBar,
) -> fastmp::Result<Vec<Point>> {
    let np = world.size();
    let mut points = Vec::new();
    for &coll in collectives {
        let sizes = sizes_for(coll, &plan.sizes);
        let mut work = Workload::new(coll, np, world.rank(), plan.sizes.max)?;
        for &algorithm in coll.algorithms() {
            let comm = forcing(world, coll, algorithm)?;
            if comm.algorithm_for(coll, 0, true) != algorithm {
                // The device cannot run it (native on tcp): it must not enter the table.
                bar.inc(sizes.len() as u64);
                continue;
            }
            for &size in &sizes {
                if world.rank() == 0 {
                    bar.set_message(format!("np {np} {coll} {algorithm} {size} B"));
                }
                let stats = measure(world, &comm, &mut work, size, plan.iterations)
                    .map_err(|e| Error::other(format!("{coll} {algorithm}, {size} B: {e}")))?;
                if let Some(stats) = stats {
                    points.push(Point { coll, algorithm, size, time_us: ranking.time_us(&stats) });
                    bar.inc(1);
                }
            }
        }
    }
    Ok(points)
}

/// Timings within this factor of the best count as a tie, which the previous size's winner
/// keeps, so that measurement noise does not fragment the rules.
const TIE: f64 = 1.05;

/// The fastest algorithm of `coll` per size, ascending (ties as [`TIE`] says). Collectives whose
/// selection ignores the size get one entry: the algorithm with the smallest sum over sizes of
/// its time relative to the best time at that size.
fn fastest(coll: Collective, points: &[Point]) -> Vec<(usize, Algorithm)> {
    let mine: Vec<&Point> = points.iter().filter(|p| p.coll == coll).collect();
    let mut sizes: Vec<usize> = mine.iter().map(|p| p.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let best_at =
        |size: usize| mine.iter().filter(|p| p.size == size).min_by(|a, b| a.time_us.total_cmp(&b.time_us)).copied();
    if selects_by_size(coll) {
        let mut winners: Vec<(usize, Algorithm)> = Vec::new();
        for size in sizes {
            let Some(best) = best_at(size) else { continue };
            let near_best = |a: Algorithm| {
                mine.iter().any(|p| p.size == size && p.algorithm == a && p.time_us <= best.time_us * TIE)
            };
            let previous = winners.last().map(|&(_, a)| a).filter(|&a| near_best(a));
            winners.push((size, previous.unwrap_or(best.algorithm)));
        }
        return winners;
    }
    let relative = |algorithm: Algorithm| -> f64 {
        mine.iter()
            .filter(|p| p.algorithm == algorithm)
            .filter_map(|p| best_at(p.size).map(|best| p.time_us / best.time_us.max(f64::MIN_POSITIVE)))
            .sum()
    };
    let algorithms = coll.algorithms().iter().copied().filter(|&a| mine.iter().any(|p| p.algorithm == a));
    algorithms.min_by(|&a, &b| relative(a).total_cmp(&relative(b))).map(|a| vec![(0, a)]).unwrap_or_default()
}

/// Rules from the winners per np (ascending) and size (ascending): runs of one winner become one
/// rule up to the run's last size, each np's last run has no size limit and the last np none
/// either; an np whose rules equal the next np's is left to those.
/// Rules from the winners per process count. Beyond the largest measured process count the
/// measurements say nothing, so the `beyond` rules decide there (the job's own, so that a quick
/// `tune --np-list 2` loaded with FASTMP_TUNING_FILE keeps the defaults for other counts), and
/// without them the collective's scalable fallback (an oversubscribed winner such as a flat
/// tree, whose root holds np buffers, must not be extrapolated to hundreds of ranks).
fn compress(coll: Collective, winners: &[(usize, Vec<(usize, Algorithm)>)], beyond: &[Rule]) -> Vec<Rule> {
    let per_np: Vec<(usize, Vec<Rule>)> = winners
        .iter()
        .filter(|(_, w)| !w.is_empty())
        .map(|(np, w)| {
            let mut rules: Vec<Rule> = Vec::new();
            for (i, &(size, algorithm)) in w.iter().enumerate() {
                let last_of_run = w.get(i + 1).is_none_or(|next| next.1 != algorithm);
                if last_of_run {
                    rules.push(Rule { max_np: None, max_bytes: Some(size), locality: None, cores: None, algorithm });
                }
            }
            if let Some(last) = rules.last_mut() {
                last.max_bytes = None;
            }
            (*np, rules)
        })
        .collect();
    let mut rules = Vec::new();
    for (i, (np, group)) in per_np.iter().enumerate() {
        match per_np.get(i + 1) {
            Some((_, next)) if next == group => {}
            _ => rules.extend(group.iter().map(|r| Rule { max_np: Some(*np), ..*r })),
        }
    }
    // Every np up to the largest measured one ends in a rule without a size limit, so `beyond`
    // rules limited to those counts could never apply.
    let largest = per_np.last().map_or(0, |(np, _)| *np);
    rules.extend(beyond.iter().filter(|r| r.max_np.is_none_or(|m| m > largest)));
    if rules.last().is_none_or(|r| r.max_np.is_some() || r.max_bytes.is_some() || r.locality.is_some()) {
        rules.push(Rule::always(coll.fallback()));
    }
    rules
}

fn rule_text(rule: &Rule) -> String {
    let limits: Vec<String> = [rule.max_np.map(|n| format!("np<={n}")), rule.max_bytes.map(|b| format!("<={b}B"))]
        .into_iter()
        .flatten()
        .collect();
    if limits.is_empty() {
        rule.algorithm.name().to_string()
    } else {
        format!("{} {}", limits.join(" "), rule.algorithm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compress_merges_runs_and_equal_process_counts() {
        use Algorithm::{Bt, Mst, Native};
        let winners = vec![
            (2, vec![(1, Bt), (2, Bt), (4, Native), (8, Native)]),
            (4, vec![(1, Mst), (2, Native), (4, Native), (8, Native)]),
            (8, vec![(1, Mst), (2, Native), (4, Native), (8, Native)]),
        ];
        let rules = compress(Collective::Bcast, &winners, &[]);
        let rule = |max_np, max_bytes, algorithm| Rule { max_np, max_bytes, locality: None, cores: None, algorithm };
        assert_eq!(
            rules,
            [
                rule(Some(2), Some(2), Bt),
                rule(Some(2), None, Native),
                rule(Some(8), Some(1), Mst),
                rule(Some(8), None, Native),
                Rule::always(Collective::Bcast.fallback()),
            ]
        );
        let mut tuning = Tuning::defaults();
        tuning.set_rules(Collective::Bcast, rules).unwrap();
        assert_eq!(tuning.select(Collective::Bcast, 2, 2), Bt);
        assert_eq!(tuning.select(Collective::Bcast, 3, 1), Mst);
        assert_eq!(tuning.select(Collective::Bcast, 8, 1 << 20), Native);
        assert_eq!(tuning.select(Collective::Bcast, 16, 1 << 20), Collective::Bcast.fallback());
    }

    #[test]
    fn the_jobs_rules_decide_beyond_the_measured_process_counts() {
        use Algorithm::{Bt, Mst, Native, Nbft};
        let rule = |max_np, max_bytes, algorithm| Rule { max_np, max_bytes, locality: None, cores: None, algorithm };
        let beyond = [
            rule(Some(2), None, Bt),
            rule(Some(8), Some(64), Nbft),
            rule(Some(8), None, Native),
            rule(None, None, Mst),
        ];
        let winners = vec![(2, vec![(1, Mst), (8, Native)])];
        let rules = compress(Collective::Bcast, &winners, &beyond);
        assert_eq!(
            rules,
            [rule(Some(2), Some(1), Mst), rule(Some(2), None, Native), beyond[1], beyond[2], beyond[3]],
            "the job's rules for np <= 2 can never apply and are left out"
        );
        let mut tuning = Tuning::defaults();
        tuning.set_rules(Collective::Bcast, rules).unwrap();
        assert_eq!(tuning.select(Collective::Bcast, 2, 1), Mst);
        assert_eq!(tuning.select(Collective::Bcast, 4, 8), Nbft);
        assert_eq!(tuning.select(Collective::Bcast, 64, 8), Mst);
        let bounded = [rule(Some(16), None, Native)];
        let rules = compress(Collective::Bcast, &winners, &bounded);
        assert_eq!(rules.last(), Some(&Rule::always(Collective::Bcast.fallback())), "always ends unbounded");
    }

    #[test]
    fn oversubscribed_runs_rank_by_the_mean_call() {
        let stats = crate::coll::Stats { avg_us: 9.0, min_us: 1.0, max_us: 40.0, median_us: 2.0 };
        assert_eq!(Ranking::for_ranks(2, 2), Ranking::Median);
        assert_eq!(Ranking::for_ranks(4, 2), Ranking::Mean);
        assert_eq!(Ranking::for_ranks(2, 2).time_us(&stats), 2.0);
        assert_eq!(Ranking::for_ranks(8, 2).time_us(&stats), 9.0);
    }

    #[test]
    fn points_files_keep_the_best_time_and_read_the_old_field_name() {
        let path = std::env::temp_dir().join(format!("fastmp-tune-points-{}.jsonl", std::process::id()));
        let old = r#"{"np":4,"collective":"bcast","algorithm":"bt","size":8,"median_us":3.0}"#;
        std::fs::write(&path, format!("{old}\n")).unwrap();
        let new = Point { coll: Collective::Bcast, algorithm: Algorithm::Bt, size: 8, time_us: 5.0 };
        let merged = merge_points(&path, vec![(4, vec![new])]).unwrap();
        let written = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].0, 4);
        assert_eq!(merged[0].1[0].time_us, 3.0, "the best of repeated points wins");
        assert!(written.contains(r#""time_us":3.0"#), "{written}");
    }

    #[test]
    fn size_blind_collectives_get_one_algorithm_per_np() {
        let point = |algorithm, size, time_us| Point { coll: Collective::Alltoallv, algorithm, size, time_us };
        let points = [
            point(Algorithm::Bft, 1, 1.0),
            point(Algorithm::Nbft, 1, 2.0),
            point(Algorithm::Bft, 1024, 30.0),
            point(Algorithm::Nbft, 1024, 10.0),
        ];
        assert_eq!(fastest(Collective::Alltoallv, &points), [(0, Algorithm::Nbft)]);
        assert_eq!(
            compress(Collective::Alltoallv, &[(2, fastest(Collective::Alltoallv, &points))], &[]),
            [
                Rule { max_np: Some(2), max_bytes: None, locality: None, cores: None, algorithm: Algorithm::Nbft },
                Rule::always(Algorithm::Nbft)
            ]
        );
    }

    #[test]
    fn near_ties_keep_the_previous_winner() {
        let point = |algorithm, size, time_us| Point { coll: Collective::Bcast, algorithm, size, time_us };
        let points = [
            point(Algorithm::Bt, 1, 1.0),
            point(Algorithm::Mst, 1, 1.5),
            point(Algorithm::Bt, 2, 1.02),
            point(Algorithm::Mst, 2, 1.0),
            point(Algorithm::Bt, 4, 2.0),
            point(Algorithm::Mst, 4, 1.0),
        ];
        assert_eq!(fastest(Collective::Bcast, &points), [(1, Algorithm::Bt), (2, Algorithm::Bt), (4, Algorithm::Mst)]);
    }
}
