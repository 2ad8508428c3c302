//! NPB CG: estimates the smallest eigenvalue of a large sparse symmetric matrix by the inverse
//! power method, each step solving `A·z = x` approximately with 25 conjugate-gradient
//! iterations (`zeta = shift + 1 / (x·z)`, verified against NPB's value to 1e-10).
//!
//! Decomposition: the `n` rows of the matrix are cut into one contiguous block per rank (np a
//! power of two, as NPB requires); a rank builds only its rows (`makea`) and multiplies only
//! them, while the vectors (`n` values, small next to the matrix) are kept whole on every rank.
//! Communication (`solver`): once per CG iteration an allgatherv publishes every rank's rows
//! of `q = A·p` with its part of `p·q`; once per power step an allgatherv of the solution and an
//! allreduce of three sums (`x·z`, `z·z`, the residual).

mod csr;
mod makea;
mod solver;
mod sums;

use fastmp::Comm;

use crate::report::job_seconds;
use crate::{Check, Class, Kernel, Outcome};
use makea::Shape;
use solver::{CG_ITERATIONS, RowBlocks, Solver};

/// NPB's `rcond`, the same for every class: the smallest outer product's weight, also added to
/// the diagonal (bounding the spectrum from below).
const RCOND: f64 = 0.1;

/// NPB's verification tolerance on zeta (relative).
const TOLERANCE: f64 = 1e-10;

/// The sizes of a class and its official result.
struct Params {
    n: usize,
    nonzer: usize,
    /// Power-method steps timed.
    niter: usize,
    shift: f64,
    /// The official zeta.
    zeta: f64,
}

impl Params {
    fn of(class: Class) -> Params {
        let (n, nonzer, niter, shift, zeta) = match class {
            Class::S => (1400, 7, 15, 10.0, 8.5971775078648),
            Class::W => (7000, 8, 15, 12.0, 10.362595087124),
            Class::A => (14000, 11, 15, 20.0, 17.130235054029),
            Class::B => (75000, 13, 75, 60.0, 22.712745482631),
            Class::C => (150000, 15, 75, 110.0, 28.973605592845),
        };
        Params { n, nonzer, niter, shift, zeta }
    }

    fn shape(&self) -> Shape {
        Shape { n: self.n, nonzer: self.nonzer, rcond: RCOND, shift: self.shift }
    }

    /// NPB's operation count of the timed section: per step 25 CG iterations and the residual,
    /// with `nonzer·(nonzer + 1)` taken as the nonzeros per row.
    fn flops(&self) -> f64 {
        let per_row = (self.nonzer * (self.nonzer + 1)) as f64;
        let per_step = 3.0 + per_row + CG_ITERATIONS as f64 * (5.0 + per_row) + 3.0;
        2.0 * self.niter as f64 * self.n as f64 * per_step
    }
}

/// Whether this kernel runs `class` on `np` ranks: a power of two, at most one rank per row.
pub fn check(class: Class, np: usize) -> Result<(), String> {
    crate::power_of_two(np)?;
    let n = Params::of(class).n;
    if np > n {
        return Err(format!("has {n} rows for {np} ranks"));
    }
    Ok(())
}

/// Runs the kernel (collective over `world`): builds this rank's rows, runs one untimed power
/// step, then `niter` timed ones from the same start, as NPB does.
pub(crate) fn run(world: &Comm, class: Class) -> fastmp::Result<Outcome> {
    let params = Params::of(class);
    let blocks = RowBlocks::new(params.n, world.size());
    let matrix = makea::generate(&params.shape(), blocks.rows(world.rank()));
    let mut solver = Solver::new(world, matrix, blocks);

    solver.power_step(params.shift)?;
    solver.reset();
    world.barrier()?;
    let start = fastmp::wtime();
    let mut zeta = f64::NAN;
    for _ in 0..params.niter {
        zeta = solver.power_step(params.shift)?.zeta;
    }
    let seconds = job_seconds(world, fastmp::wtime() - start)?;

    Ok(Outcome {
        kernel: Kernel::Cg,
        class,
        np: world.size(),
        device: world.device_name(),
        size: params.n.to_string(),
        iterations: params.niter,
        seconds,
        mops: params.flops() / seconds * 1e-6,
        operation: "floating point",
        checks: vec![Check::relative("zeta", zeta, params.zeta, TOLERANCE)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_must_be_a_power_of_two_and_no_more_than_the_rows() {
        assert!(check(Class::A, 4).is_ok() && check(Class::C, 1).is_ok());
        assert!(check(Class::S, 3).unwrap_err().contains("power-of-two"));
        assert!(check(Class::S, 2048).unwrap_err().contains("1400 rows for 2048 ranks"));
    }

    #[test]
    fn operation_count_is_npbs() {
        // Class A: 2·15·14000·(3 + 132 + 25·137 + 3), NPB's count for 15 steps.
        assert_eq!(Params::of(Class::A).flops(), 2.0 * 15.0 * 14000.0 * 3563.0);
    }
}
