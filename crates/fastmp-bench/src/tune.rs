//! `fastmp-bench tune`: measures every algorithm of every collective at each process count and
//! power-of-two size (the collective benchmarks' method with fewer iterations, ranked by the
//! median call time, best of [`ROUNDS`] interleaved rounds), keeps the fastest per (np, size), compresses the winners into selection rules and writes a JSON tuning file that
//! `Tuning::from_json` and `FASTMP_TUNING_FILE` accept.

use std::path::Path;
use std::time::Instant;

use fastmp::coll::{Algorithm, Collective, Rule, Tuning};
use fastmp::{Comm, Config, Error, Pin};
use indicatif::{ProgressBar, ProgressStyle};

use crate::coll::{Iterations, Workload, forcing, measure, selects_by_size, sizes_for};
use crate::support::Sizes;

/// What to measure.
pub struct Plan {
    pub np_list: Vec<usize>,
    /// Empty: all collectives.
    pub collectives: Vec<Collective>,
    pub sizes: Sizes,
    pub iterations: Iterations,
}

/// The median call time (averaged over ranks) of one algorithm at one size.
struct Point {
    coll: Collective,
    algorithm: Algorithm,
    size: usize,
    median_us: f64,
}

pub fn run(config: &Config, plan: &Plan, output: &Path) -> Result<(), String> {
    if std::env::var_os("FASTMP_NP").is_some() {
        return Err("tune starts its own thread ranks for each --np-list entry; run it without a launcher".into());
    }
    let mut np_list = plan.np_list.clone();
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
    let started = Instant::now();
    let cpus = fastmp::affinity::allowed_cpus().len();
    let mut measured = Vec::new();
    for &np in &np_list {
        let mut config = config.clone().np(np);
        if np > cpus {
            // Oversubscribed: pinning would stack spinning ranks on a few cores (compare.sh and
            // Open MPI's --oversubscribe runs are unpinned too).
            bar.suspend(|| eprintln!("tune: np={np} > {cpus} CPUs: ranks run unpinned"));
            config = config.pin(Pin::None);
        }
        let mut ranks = config
            .run(|world: Comm| measure_all(&world, &collectives, plan, &bar))
            .map_err(|e| format!("tune at np={np}: {e}"))?;
        measured.push((np, ranks.swap_remove(0)));
    }
    bar.finish_and_clear();

    let mut file = serde_json::Map::new();
    let mut summary = Vec::new();
    for &coll in &collectives {
        let winners: Vec<(usize, Vec<(usize, Algorithm)>)> =
            measured.iter().map(|(np, points)| (*np, fastest(coll, points))).collect();
        let rules = compress(coll, &winners);
        summary.push((coll, rules.iter().map(rule_text).collect::<Vec<_>>().join("; ")));
        file.insert(coll.name().into(), serde_json::to_value(&rules).map_err(|e| e.to_string())?);
    }
    let text = serde_json::to_string_pretty(&file).map_err(|e| e.to_string())? + "\n";
    Tuning::from_json(&text).map_err(|e| format!("tune produced an invalid tuning file: {e}"))?;
    std::fs::write(output, &text).map_err(|e| format!("cannot write {}: {e}", output.display()))?;

    let nps: Vec<String> = np_list.iter().map(usize::to_string).collect();
    println!(
        "# fastmp tune: np {}; sizes {}..{} B; {} measurements in {:.1} s",
        nps.join(","),
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

/// Rounds over the whole plan; each point keeps its best round. Rounds are interleaved, so a
/// preemption or a noisy minute on a shared machine spoils one round of a few algorithms, not
/// the choice between them.
pub const ROUNDS: usize = 3;

/// Every algorithm of every collective at every size on this communicator; the points at rank 0.
fn measure_all(world: &Comm, collectives: &[Collective], plan: &Plan, bar: &ProgressBar) -> fastmp::Result<Vec<Point>> {
    let mut points: Vec<Point> = Vec::new();
    for _ in 0..ROUNDS {
        for point in measure_round(world, collectives, plan, bar)? {
            match points.iter_mut().find(|p| (p.coll, p.algorithm, p.size) == (point.coll, point.algorithm, point.size))
            {
                Some(best) => best.median_us = best.median_us.min(point.median_us),
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
    bar: &ProgressBar,
) -> fastmp::Result<Vec<Point>> {
    let np = world.size();
    let mut points = Vec::new();
    for &coll in collectives {
        let sizes = sizes_for(coll, &plan.sizes);
        let mut work = Workload::new(coll, np, world.rank(), plan.sizes.max)?;
        for &algorithm in coll.algorithms() {
            let comm = forcing(world, coll, algorithm)?;
            for &size in &sizes {
                if world.rank() == 0 {
                    bar.set_message(format!("np {np} {coll} {algorithm} {size} B"));
                }
                let stats = measure(world, &comm, &mut work, size, plan.iterations)
                    .map_err(|e| Error::other(format!("{coll} {algorithm}, {size} B: {e}")))?;
                if let Some(stats) = stats {
                    points.push(Point { coll, algorithm, size, median_us: stats.median_us });
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
    let best_at = |size: usize| {
        mine.iter().filter(|p| p.size == size).min_by(|a, b| a.median_us.total_cmp(&b.median_us)).copied()
    };
    if selects_by_size(coll) {
        let mut winners: Vec<(usize, Algorithm)> = Vec::new();
        for size in sizes {
            let Some(best) = best_at(size) else { continue };
            let near_best = |a: Algorithm| {
                mine.iter().any(|p| p.size == size && p.algorithm == a && p.median_us <= best.median_us * TIE)
            };
            let previous = winners.last().map(|&(_, a)| a).filter(|&a| near_best(a));
            winners.push((size, previous.unwrap_or(best.algorithm)));
        }
        return winners;
    }
    let relative = |algorithm: Algorithm| -> f64 {
        mine.iter()
            .filter(|p| p.algorithm == algorithm)
            .filter_map(|p| best_at(p.size).map(|best| p.median_us / best.median_us.max(f64::MIN_POSITIVE)))
            .sum()
    };
    let algorithms = coll.algorithms().iter().copied().filter(|&a| mine.iter().any(|p| p.algorithm == a));
    algorithms.min_by(|&a, &b| relative(a).total_cmp(&relative(b))).map(|a| vec![(0, a)]).unwrap_or_default()
}

/// Rules from the winners per np (ascending) and size (ascending): runs of one winner become one
/// rule up to the run's last size, each np's last run has no size limit and the last np none
/// either; an np whose rules equal the next np's is left to those.
/// Rules from the winners per process count. Beyond the largest measured process count the
/// measurements say nothing, so the last rule is the collective's scalable fallback (an
/// oversubscribed winner such as a flat tree, whose root holds np buffers, must not be
/// extrapolated to hundreds of ranks).
fn compress(coll: Collective, winners: &[(usize, Vec<(usize, Algorithm)>)]) -> Vec<Rule> {
    let per_np: Vec<(usize, Vec<Rule>)> = winners
        .iter()
        .filter(|(_, w)| !w.is_empty())
        .map(|(np, w)| {
            let mut rules: Vec<Rule> = Vec::new();
            for (i, &(size, algorithm)) in w.iter().enumerate() {
                let last_of_run = w.get(i + 1).is_none_or(|next| next.1 != algorithm);
                if last_of_run {
                    rules.push(Rule { max_np: None, max_bytes: Some(size), algorithm });
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
    rules.push(Rule::always(coll.fallback()));
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
        let rules = compress(Collective::Bcast, &winners);
        let rule = |max_np, max_bytes, algorithm| Rule { max_np, max_bytes, algorithm };
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
    fn size_blind_collectives_get_one_algorithm_per_np() {
        let point = |algorithm, size, median_us| Point { coll: Collective::Alltoallv, algorithm, size, median_us };
        let points = [
            point(Algorithm::Bft, 1, 1.0),
            point(Algorithm::Nbft, 1, 2.0),
            point(Algorithm::Bft, 1024, 30.0),
            point(Algorithm::Nbft, 1024, 10.0),
        ];
        assert_eq!(fastest(Collective::Alltoallv, &points), [(0, Algorithm::Nbft)]);
        assert_eq!(
            compress(Collective::Alltoallv, &[(2, fastest(Collective::Alltoallv, &points))]),
            [Rule { max_np: Some(2), max_bytes: None, algorithm: Algorithm::Nbft }, Rule::always(Algorithm::Nbft)]
        );
    }

    #[test]
    fn near_ties_keep_the_previous_winner() {
        let point = |algorithm, size, median_us| Point { coll: Collective::Bcast, algorithm, size, median_us };
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
