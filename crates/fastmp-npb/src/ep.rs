//! NPB EP (Embarrassingly Parallel): Gaussian deviates by the Marsaglia polar method.
//!
//! The kernel draws 2^(M+1) uniform numbers from NPB's generator (seed 271828183; M = 24, 25,
//! 28, 30, 32 for classes S to C), takes them
//! in pairs (x, y) mapped to the square [-1, 1]², keeps the pairs inside the unit disc
//! (t = x² + y² ≤ 1) and turns each into two independent Gaussian deviates
//! (x, y)·√(−2 ln t / t). It sums the deviates (sx, sy) and counts the pairs in the ten square
//! annuli l ≤ max(|X|, |Y|) < l + 1.
//!
//! Decomposition: the 2^M pairs form one global sequence, split into contiguous ranges of
//! nearly equal length, one per rank (any rank count; a rank may get none). A rank jumps to the
//! first number of its range with [`random::pow`], then generates its numbers in small chunks
//! that stay in L1 cache. The chunk size does not change the result: within a rank the pairs
//! are summed in sequence order whatever the chunking.
//!
//! Communication: one allreduce of the sums and the annulus counts, plus the job time.

use fastmp::Comm;
use fastmp::op::Sum;

use crate::report::job_seconds;
use crate::{Check, Class, Kernel, Outcome, random};

/// The generator's seed for the first uniform number.
const SEED: f64 = 271_828_183.0;

/// Square annuli counted, as NPB reports them.
const ANNULI: usize = 10;

/// Slots of the count array. A deviate's magnitude is at most √(−2 ln t) with t ≥ 2^-90 (the
/// uniforms are multiples of 2^-46), below 12: the slots past the tenth stay empty, and
/// clamping an index to the last slot is only there to spare the bounds check.
const SLOTS: usize = 16;

/// Pairs generated per chunk: the chunk's uniforms (16 KiB) and its points in the disc
/// (4 × 8 KiB) stay in the L1 cache together. A power of two (see [`Disc::keep_inside`]).
const CHUNK_PAIRS: usize = 1024;
const _: () = assert!(CHUNK_PAIRS.is_power_of_two());

/// NPB's `epsilon` for EP: the relative error allowed in sx and sy.
const TOLERANCE: f64 = 1e-8;

/// A class's size: log2 of the number of pairs, and the official sums (sx, sy).
struct Problem {
    log2_pairs: u32,
    sx: f64,
    sy: f64,
}

fn problem(class: Class) -> Problem {
    let (log2_pairs, sx, sy) = match class {
        Class::S => (24, -3.247_834_652_034_74e3, -6.958_407_078_382_297e3),
        Class::W => (25, -2.863_319_731_645_753e3, -6.320_053_679_109_499e3),
        Class::A => (28, -4.295_875_165_629_892e3, -1.580_732_573_678_431e4),
        Class::B => (30, 4.033_815_542_441_498e4, -2.660_669_192_809_235e4),
        Class::C => (32, 4.764_367_927_995_374e4, -8.084_072_988_043_731e4),
    };
    Problem { log2_pairs, sx, sy }
}

/// Whether this kernel runs `class` on `np` ranks: every class on any rank count.
pub fn check(_class: Class, _np: usize) -> Result<(), String> {
    Ok(())
}

/// Runs the kernel (collective over `world`) on a class and rank count `check` accepted
/// (`Kernel::run` checks).
pub(crate) fn run(world: &Comm, class: Class) -> fastmp::Result<Outcome> {
    let problem = problem(class);
    let pairs = 1u64 << problem.log2_pairs;
    let mine = share(pairs, world.size(), world.rank());

    world.barrier()?;
    let start = fastmp::wtime();
    let local = Tally::of_pairs(mine.start, mine.end - mine.start);
    let mut global = [0.0; 2 + ANNULI];
    world.allreduce(&local.to_sums(), &mut global, Sum)?;
    let seconds = job_seconds(world, fastmp::wtime() - start)?;

    let (sx, sy) = (global[0], global[1]);
    let numbers = 2 * pairs;
    Ok(Outcome {
        kernel: Kernel::Ep,
        class,
        np: world.size(),
        device: world.device_name(),
        size: numbers.to_string(),
        iterations: 0,
        seconds,
        mops: numbers as f64 / seconds / 1e6,
        operation: "Random numbers generated",
        checks: vec![
            Check::relative("sx", sx, problem.sx, TOLERANCE),
            Check::relative("sy", sy, problem.sy, TOLERANCE),
        ],
    })
}

/// Rank `rank`'s contiguous range of `total` items split over `np` ranks, the first
/// `total % np` ranks taking one more.
fn share(total: u64, np: usize, rank: usize) -> std::ops::Range<u64> {
    let (np, rank) = (np as u64, rank as u64);
    let (base, extra) = (total / np, total % np);
    let start = rank * base + rank.min(extra);
    start..start + base + u64::from(rank < extra)
}

/// One rank's sums of the deviates and its counts per annulus.
#[derive(Debug, Default)]
struct Tally {
    sx: f64,
    sy: f64,
    counts: [u64; SLOTS],
}

impl Tally {
    /// Tallies the `count` pairs from pair number `first` of the global sequence.
    fn of_pairs(first: u64, count: u64) -> Tally {
        let mut seed = SEED;
        random::randlc(&mut seed, random::pow(random::A, 2 * first));
        let mut tally = Tally::default();
        let mut uniforms = [0.0; 2 * CHUNK_PAIRS];
        let mut disc = Disc::new();
        let mut left = count;
        while left > 0 {
            let pairs = left.min(CHUNK_PAIRS as u64) as usize;
            let chunk = &mut uniforms[..2 * pairs];
            random::vranlc(&mut seed, random::A, chunk);
            tally.add_pairs(chunk, &mut disc);
            left -= pairs as u64;
        }
        tally
    }

    /// Turns each pair of uniforms in `uniforms` that falls in the unit disc into two
    /// deviates, summing and counting them.
    ///
    /// In passes over the chunk, so that no branch depends on the random numbers (a
    /// mispredicted branch every few pairs costs more than the arithmetic) and the long
    /// latencies of ln, division and square root overlap across pairs: keep the pairs inside
    /// the disc, packed in order; take their logarithms; scale; sum and count. The deviates
    /// are summed in sequence order, as by one loop over the pairs.
    fn add_pairs(&mut self, uniforms: &[f64], disc: &mut Disc) {
        let inside = disc.keep_inside(uniforms);
        let (x, y, t, scale) = (&disc.x[..inside], &disc.y[..inside], &disc.t[..inside], &mut disc.scale[..inside]);
        for (s, &t) in scale.iter_mut().zip(t) {
            *s = t.ln();
        }
        for (s, &t) in scale.iter_mut().zip(t) {
            *s = (-2.0 * *s / t).sqrt();
        }
        let (mut sx, mut sy) = (self.sx, self.sy);
        for ((&x, &y), &s) in x.iter().zip(y).zip(scale.iter()) {
            let (gx, gy) = (x * s, y * s);
            let (ax, ay) = (gx.abs(), gy.abs());
            // A plain comparison does for the maximum: a NaN needs t = 0 (both uniforms exactly
            // 1/2), and would then still convert to annulus 0.
            let annulus = if ax > ay { ax } else { ay } as i32 as usize;
            self.counts[annulus.min(SLOTS - 1)] += 1;
            sx += gx;
            sy += gy;
        }
        (self.sx, self.sy) = (sx, sy);
    }

    /// The sums and the first [`ANNULI`] counts, as one array to reduce.
    fn to_sums(&self) -> [f64; 2 + ANNULI] {
        let mut sums = [0.0; 2 + ANNULI];
        sums[0] = self.sx;
        sums[1] = self.sy;
        for (sum, &count) in sums[2..].iter_mut().zip(&self.counts) {
            *sum = count as f64;
        }
        sums
    }
}

/// The points of one chunk that fall in the unit disc: coordinates in [-1, 1] and t = x² + y².
struct Disc {
    x: Box<[f64; CHUNK_PAIRS]>,
    y: Box<[f64; CHUNK_PAIRS]>,
    t: Box<[f64; CHUNK_PAIRS]>,
    /// √(−2 ln t / t) of each point, the factor that makes it a pair of deviates.
    scale: Box<[f64; CHUNK_PAIRS]>,
}

impl Disc {
    fn new() -> Disc {
        let zeros = || Box::new([0.0; CHUNK_PAIRS]);
        Disc { x: zeros(), y: zeros(), t: zeros(), scale: zeros() }
    }

    /// Maps each pair of `uniforms` (at most [`CHUNK_PAIRS`]) to a point of [-1, 1]², keeps
    /// those with t ≤ 1 at the front, in order, and returns how many. Every point is written,
    /// the next one over it unless it was kept: no branch.
    fn keep_inside(&mut self, uniforms: &[f64]) -> usize {
        debug_assert!(uniforms.len() <= 2 * CHUNK_PAIRS);
        let mut kept = 0;
        for pair in uniforms.chunks_exact(2) {
            let x = 2.0 * pair[0] - 1.0;
            let y = 2.0 * pair[1] - 1.0;
            let t = x * x + y * y;
            // `kept` never exceeds the pairs seen, below CHUNK_PAIRS: the mask changes
            // nothing but lets the compiler drop the bounds checks.
            let slot = kept & (CHUNK_PAIRS - 1);
            self.x[slot] = x;
            self.y[slot] = y;
            self.t[slot] = t;
            kept += usize::from(t <= 1.0);
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_cover_the_range_once_in_order() {
        for (total, np) in [(10, 3), (3, 5), (1 << 20, 4), (7, 1)] {
            let mut next = 0;
            for rank in 0..np {
                let range = share(total, np, rank);
                assert_eq!(range.start, next);
                assert!(range.end - range.start <= total / np as u64 + 1);
                next = range.end;
            }
            assert_eq!(next, total);
        }
    }

    #[test]
    fn any_rank_count_verifies_with_the_same_outcome_on_every_rank() {
        for np in [3, 6] {
            let outcomes = fastmp::run(np, |world| run(&world, Class::S)).unwrap();
            assert!(outcomes[0].verified(), "{}", outcomes[0].report());
            assert!(outcomes.iter().all(|o| *o == outcomes[0]), "ranks disagree on {np} ranks");
        }
    }

    #[test]
    fn split_tallies_count_the_same_pairs_as_one() {
        let whole = Tally::of_pairs(0, 10_000);
        let (left, right) = (Tally::of_pairs(0, 3_333), Tally::of_pairs(3_333, 6_667));
        let counts: Vec<u64> = left.counts.iter().zip(&right.counts).map(|(a, b)| a + b).collect();
        assert_eq!(counts, whole.counts);
        assert!((left.sx + right.sx - whole.sx).abs() < 1e-9 * whole.sx.abs().max(1.0));
        assert!((left.sy + right.sy - whole.sy).abs() < 1e-9 * whole.sy.abs().max(1.0));
        // About π/4 of the pairs fall in the unit disc, none beyond the tenth annulus.
        let accepted: u64 = whole.counts.iter().sum();
        assert!((7_700..8_000).contains(&accepted), "{accepted}");
        assert!(whole.counts[ANNULI..].iter().all(|&c| c == 0));
    }

    #[test]
    fn a_pair_outside_the_disc_is_skipped_and_one_inside_is_transformed() {
        let mut tally = Tally::default();
        tally.add_pairs(&[0.99, 0.99, 0.75, 0.5], &mut Disc::new());
        // Only (0.5, 0): t = 0.25, scale = √(−2 ln 0.25 / 0.25) = √(16 ln 2).
        let scale = (16.0 * 2f64.ln()).sqrt();
        assert_eq!((tally.sx, tally.sy), (0.5 * scale, 0.0));
        assert_eq!(tally.counts.iter().sum::<u64>(), 1);
        assert_eq!(tally.counts[(0.5 * scale) as usize], 1);
    }
}
