//! `fastmp-bench tune --pgas`: times every algorithm of each PGAS collective (the `uoms`
//! measurement: UPC_IN_ALLSYNC|UPC_OUT_ALLSYNC, root 0, iteration time = maximum over ranks)
//! over a ladder of block sizes (×4 steps) on `--np` ranks, ranks them by the median iteration
//! (best of [`ROUNDS`] interleaved rounds), and writes the winners as selection rules that
//! `fastmp::pgas::Tuning::with_json` and `FASTMP_PGAS_TUNING_FILE` accept.
//!
//! The measured rules are limited to the measured process count (`max_ranks`); the device's
//! built-in rules follow them, so larger jobs keep the scalable defaults rather than a winner
//! extrapolated from a few ranks, and every collective's last rule has no limits.

use std::path::Path;
use std::time::Instant;

use bytemuck::Pod;
use fastmp::op::{Op, Sum};
use fastmp::pgas::select::Rule;
use fastmp::pgas::{Algorithm, Collective, Sync, Tuning};
use fastmp::{Comm, Config, Error};

use crate::support::Sizes;
use crate::uoms::{Run, Uoms, Workload, measure, repetitions};

/// The smallest size of the default ladder (one reduction element).
pub const DEFAULT_MIN_SIZE: usize = 8;
/// Each rung of the ladder is this many times the previous one.
const STEP: usize = 4;
/// Rounds over the whole plan; each point keeps its best round, so a noisy moment on a shared
/// machine spoils one round of a few algorithms, not the choice between them.
const ROUNDS: usize = 2;
/// Timings within this factor of the best count as a tie, which the previous size's winner
/// keeps, so that noise does not fragment the rules.
const TIE: f64 = 1.05;

/// What to measure.
pub struct Plan {
    /// Empty: all eight.
    pub collectives: Vec<Collective>,
    pub sizes: Sizes,
    /// Timed iterations per point (default: a tenth of `uoms`'s, at least 5).
    pub iterations: Option<usize>,
}

/// The median iteration of one algorithm at one size.
#[derive(Clone, Copy, Debug)]
struct Point {
    coll: Collective,
    algorithm: Algorithm,
    size: usize,
    median_ns: f64,
}

/// The ladder: `min`, ×[`STEP`] up to `max` (reductions need whole 8-byte elements, so a
/// minimum below 8 starts at 8).
fn ladder(sizes: &Sizes) -> Vec<usize> {
    let first = sizes.min.max(DEFAULT_MIN_SIZE).next_multiple_of(DEFAULT_MIN_SIZE);
    std::iter::successors(Some(first), |&s| s.checked_mul(STEP)).take_while(|&s| s <= sizes.max).collect()
}

pub fn run(config: Config, plan: &Plan, output: &Path) -> Result<(), String> {
    let collectives = if plan.collectives.is_empty() { Collective::ALL.to_vec() } else { plan.collectives.clone() };
    let sizes = ladder(&plan.sizes);
    if sizes.is_empty() {
        return Err(format!(
            "tune --pgas: no sizes from {} to {} bytes (the ladder starts at 8)",
            plan.sizes.min, plan.sizes.max
        ));
    }
    let started = Instant::now();
    let mut ranks = config
        .run(|world: Comm| {
            let mut points: Vec<Point> = Vec::new();
            for _ in 0..ROUNDS {
                for &coll in &collectives {
                    let round = if Uoms::Coll(coll).is_reduction() {
                        measure_collective::<i64>(&world, coll, &sizes, plan.iterations)?
                    } else {
                        measure_collective::<u8>(&world, coll, &sizes, plan.iterations)?
                    };
                    keep_best(&mut points, round);
                }
            }
            Ok((world.rank(), world.size(), world.device_name(), points))
        })
        .map_err(|e| format!("tune --pgas: {e}"))?;
    let (rank, np, device, points) = ranks.swap_remove(0);
    if rank != 0 {
        // A launched process other than rank 0: rank 0 writes the file.
        return Ok(());
    }
    let mut tuning = Tuning::defaults_for(device);
    let mut summary = Vec::new();
    for &coll in &collectives {
        let mut rules = compress(np, &winners(coll, &points));
        rules.extend_from_slice(tuning.rules(coll));
        summary.push((coll, rules.iter().map(rule_text).collect::<Vec<_>>().join("; ")));
        tuning.set_rules(coll, rules).map_err(|e| format!("tune --pgas made invalid rules: {e}"))?;
    }
    let text = tuning.to_json() + "\n";
    Tuning::defaults_for(device).with_json(&text).map_err(|e| format!("tune --pgas made an invalid file: {e}"))?;
    std::fs::write(output, &text).map_err(|e| format!("cannot write {}: {e}", output.display()))?;
    println!(
        "# fastmp tune --pgas ({device}): np {np}; sizes {}; {} points x {ROUNDS} rounds in {:.1} s",
        sizes.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
        points.len(),
        started.elapsed().as_secs_f64()
    );
    println!("# {:<16}rules, first match wins (np: ranks; B: bytes per block)", "collective");
    for (coll, rules) in summary {
        println!("{:<18}{rules}", coll.name());
    }
    println!("# wrote {} (use it with FASTMP_PGAS_TUNING_FILE={0})", output.display());
    Ok(())
}

/// Every algorithm of `coll` at every size, once; the points at rank 0 (reductions use `Sum`).
fn measure_collective<T: Pod>(
    world: &Comm,
    coll: Collective,
    sizes: &[usize],
    iterations: Option<usize>,
) -> fastmp::Result<Vec<Point>>
where
    Sum: Op<T>,
{
    let max = sizes.last().copied().unwrap_or(0);
    let mut work = Workload::<T>::new(world, Uoms::Coll(coll), max)?;
    let mut times = Vec::new();
    let mut points = Vec::new();
    for algorithm in coll.algorithms() {
        work.force_algorithm(coll, algorithm)?;
        for &size in sizes {
            let timed = iterations.unwrap_or_else(|| (repetitions(size).0 / 10).max(5));
            let run = Run { sync: Sync::default(), op: &Sum, rotate_root: false, repetitions: (timed, 1) };
            let timing = measure(world, &mut work, size, &run, &mut times)
                .map_err(|e| Error::other(format!("{} {algorithm}, {size} B: {e}", coll.name())))?;
            if let Some(t) = timing {
                points.push(Point { coll, algorithm, size, median_ns: t.t_median_ns });
            }
        }
    }
    work.free()?;
    Ok(points)
}

fn keep_best(points: &mut Vec<Point>, round: Vec<Point>) {
    for point in round {
        let same = |p: &&mut Point| (p.coll, p.algorithm, p.size) == (point.coll, point.algorithm, point.size);
        match points.iter_mut().find(same) {
            Some(best) => best.median_ns = best.median_ns.min(point.median_ns),
            None => points.push(point),
        }
    }
}

/// The fastest algorithm of `coll` per size, ascending (near ties keep the previous winner).
fn winners(coll: Collective, points: &[Point]) -> Vec<(usize, Algorithm)> {
    let mine: Vec<&Point> = points.iter().filter(|p| p.coll == coll).collect();
    let mut sizes: Vec<usize> = mine.iter().map(|p| p.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut out: Vec<(usize, Algorithm)> = Vec::new();
    for size in sizes {
        let at = || mine.iter().filter(move |p| p.size == size);
        let Some(best) = at().min_by(|a, b| a.median_ns.total_cmp(&b.median_ns)) else { continue };
        let near_best = |a: Algorithm| at().any(|p| p.algorithm == a && p.median_ns <= best.median_ns * TIE);
        let previous = out.last().map(|&(_, a)| a).filter(|&a| near_best(a));
        out.push((size, previous.unwrap_or(best.algorithm)));
    }
    out
}

/// Runs of one winner become one rule up to the run's last size, limited to `np` ranks; the
/// last run has no size limit.
fn compress(np: usize, winners: &[(usize, Algorithm)]) -> Vec<Rule> {
    let mut rules: Vec<Rule> = Vec::new();
    for (i, &(size, algorithm)) in winners.iter().enumerate() {
        if winners.get(i + 1).is_none_or(|next| next.1 != algorithm) {
            rules.push(Rule { max_ranks: Some(np), max_bytes: Some(size), algorithm });
        }
    }
    if let Some(last) = rules.last_mut() {
        last.max_bytes = None;
    }
    rules
}

fn rule_text(rule: &Rule) -> String {
    let limits: Vec<String> = [rule.max_ranks.map(|n| format!("np<={n}")), rule.max_bytes.map(|b| format!("<={b}B"))]
        .into_iter()
        .flatten()
        .collect();
    if limits.is_empty() { rule.algorithm.to_string() } else { format!("{} {}", limits.join(" "), rule.algorithm) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str) -> Algorithm {
        Algorithm::from_name(name).unwrap()
    }

    #[test]
    fn winners_become_rules_the_library_accepts() {
        let (flat, binomial) = (named("flat_pull"), named("binomial_pull_static"));
        let point = |algorithm, size, median_ns| Point { coll: Collective::Broadcast, algorithm, size, median_ns };
        let points = [
            point(flat, 8, 1.0),
            point(binomial, 8, 2.0),
            point(flat, 32, 1.0),
            point(binomial, 32, 0.97),
            point(flat, 128, 3.0),
            point(binomial, 128, 1.0),
        ];
        let won = winners(Collective::Broadcast, &points);
        assert_eq!(won, [(8, flat), (32, flat), (128, binomial)], "a 3% win is a tie");
        let mut rules = compress(2, &won);
        assert_eq!(
            rules,
            [
                Rule { max_ranks: Some(2), max_bytes: Some(32), algorithm: flat },
                Rule { max_ranks: Some(2), max_bytes: None, algorithm: binomial },
            ]
        );
        let mut tuning = Tuning::defaults_for("shm");
        rules.extend_from_slice(tuning.rules(Collective::Broadcast));
        tuning.set_rules(Collective::Broadcast, rules).unwrap();
        let read = Tuning::defaults_for("shm").with_json(&tuning.to_json()).unwrap();
        assert_eq!(read.select(Collective::Broadcast, 2, 32), flat);
        assert_eq!(read.select(Collective::Broadcast, 2, 1 << 20), binomial);
        assert_eq!(
            read.select(Collective::Broadcast, 64, 8),
            Tuning::defaults_for("shm").select(Collective::Broadcast, 64, 8)
        );
    }

    #[test]
    fn the_ladder_starts_at_a_whole_element() {
        assert_eq!(ladder(&Sizes { min: 4, max: 600 }), [8, 32, 128, 512]);
        assert!(ladder(&Sizes { min: 4, max: 7 }).is_empty());
    }
}
