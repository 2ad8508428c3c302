//! NPB IS (Integer Sort): ranks 2^(16, 20, 23, 25, 27) integer keys (classes S to C) of range
//! 2^(11, 16, 19, 21, 23), ten times.
//!
//! The keys come from NPB's generator, each the scaled mean of four uniform numbers, so they
//! cluster around the middle of the range. Before each ranking two keys are changed (see
//! `keys::plant`); after it the ranks of five test keys are compared with NPB's values
//! (partial verification). After the timed loop the last ranking places every key at its rank
//! and the keys must come out sorted, within and across ranks (full verification).
//!
//! Decomposition: rank r holds keys r·n..(r+1)·n of the global sequence (n = keys / np) and
//! generates them itself after jumping ahead in the generator, so the keys are the same for any
//! rank count. The number of ranks is a power of two, as it must divide the number of keys.
//!
//! Communication per iteration (see the `ranking` module): an allreduce of the bucket counts, an
//! alltoall of the key counts and an alltoallv of the keys themselves, to the rank owning
//! their bucket range.

mod keys;
mod problem;
mod ranking;

use fastmp::Comm;
use fastmp::op::Sum;

use crate::report::job_seconds;
use crate::{Check, Class, Kernel, Outcome};
use problem::{Problem, TEST_KEYS};
use ranking::Ranker;

/// Rankings timed, as NPB does.
const ITERATIONS: usize = 10;

/// The most ranks IS runs on: NPB's limit, and the number of buckets.
const MAX_RANKS: usize = 1024;

/// Whether this kernel runs `class` on `np` ranks: every class, on a power of two ranks up to
/// `MAX_RANKS`.
pub fn check(_class: Class, np: usize) -> Result<(), String> {
    crate::power_of_two(np)?;
    if np > MAX_RANKS {
        return Err(format!("runs on at most {MAX_RANKS} ranks, got {np}"));
    }
    Ok(())
}

/// Runs the kernel (collective over `world`) on a class and rank count `check` accepted
/// (`Kernel::run` checks).
pub(crate) fn run(world: &Comm, class: Class) -> fastmp::Result<Outcome> {
    let problem = Problem::of(class);
    let (np, me) = (world.size(), world.rank());
    let total = problem.total_keys();
    let per_rank = (total / np as u64) as usize;
    let first = me as u64 * per_rank as u64;
    let max_key = problem.max_key();

    let mut keys = vec![0; per_rank];
    keys::generate(&mut keys, first, max_key);
    let mut ranker = Ranker::new(&problem, np, me, per_rank);
    // One iteration: plant its two keys, rank all keys, and count the test keys whose rank
    // this rank computed and found as NPB expects.
    let mut rank_and_check = |keys: &mut [i32], iteration: usize| -> fastmp::Result<u64> {
        keys::plant(keys, first, iteration, ITERATIONS, max_key);
        let held = problem.test_keys.map(|test| {
            let local = test.index.checked_sub(first).filter(|&i| i < per_rank as u64);
            local.map_or(0, |i| keys[i as usize] as u32)
        });
        let values = ranker.rank(world, keys, held)?;
        let passed = problem.test_keys.iter().zip(values).filter(|&(test, value)| {
            ranker.rank_of(value as i32).is_some_and(|rank| rank as i64 == test.expected_rank(iteration))
        });
        Ok(passed.count() as u64)
    };

    // One untimed ranking first, as NPB does, so that every page and table is touched.
    rank_and_check(&mut keys, 1)?;
    world.barrier()?;
    let start = fastmp::wtime();
    let mut passed = 0;
    for iteration in 1..=ITERATIONS {
        passed += rank_and_check(&mut keys, iteration)?;
    }
    let seconds = job_seconds(world, fastmp::wtime() - start)?;

    let mut counts = [0u64; 2];
    world.allreduce(&[passed, ranker.ranked_here()], &mut counts, Sum)?;
    let out_of_order = ranker.keys_out_of_order(world, &keys)?;
    let [passed, ranked] = counts;
    Ok(Outcome {
        kernel: Kernel::Is,
        class,
        np,
        device: world.device_name(),
        size: total.to_string(),
        iterations: ITERATIONS,
        seconds,
        mops: (ITERATIONS as u64 * total) as f64 / seconds / 1e6,
        operation: "keys ranked",
        checks: vec![
            Check::exact("partial verifications", passed as i64, (TEST_KEYS * ITERATIONS) as i64),
            Check::exact("keys ranked", ranked as i64, total as i64),
            Check::exact("keys out of order", out_of_order as i64, 0),
        ],
    })
}
