//! NPB MG: V-cycle multigrid for the discrete Poisson problem `∇²u = v` on a periodic cubic
//! grid (32³ for class S up to 512³ for class C), where `v` is zero but for ten charges of +1
//! and ten of −1 placed by NPB's random numbers. Each iteration runs one V-cycle through every
//! level down to 2³ (restriction P, smoother S, prolongation Q, residual A) and then the
//! residual; the L2 norm of the final residual is checked against NPB's value.
//!
//! Decomposition: the ranks (a power of two) form a periodic 3-D process grid, z split first,
//! and each holds one block of every fine level, wrapped in a ghost layer one point deep.
//! The coarse levels, too small to be worth splitting (at most 16³, or fewer than two points
//! per axis in a block), are replicated: every rank computes the whole level.
//!
//! Communication: after each operator a rank refreshes its ghosts by exchanging faces with
//! its two neighbours along each axis in turn (nonblocking point-to-point in a scope, faces
//! packed into reused buffers; z planes go straight from and into the field). An axis a
//! rank holds whole wraps around inside its block instead, row by row as the operator writes.
//! Where that covers x and y (up to two ranks), the operators of a level run back to back in
//! one sweep over the z-planes, reusing each plane while it is in cache, and only z-planes
//! travel. The prolongation computes its ghosts itself and exchanges nothing. On the way
//! down, the first replicated level is assembled by one allgather of the blocks each rank
//! restricted; on the way up each rank interpolates its own block from the replicated level,
//! with no communication. The residual norm is an allreduce.
//!
//! Memory: about 2.3 words per point of the finest grid (class C: 2.5 GB in all).

mod charges;
mod field;
mod gather;
mod halo;
mod layout;
mod stencil;
mod vcycle;

use fastmp::Comm;

use crate::report::job_seconds;
use crate::{Class, Kernel, Outcome, power_of_two};
use layout::{ProcGrid, process_dims};
use stencil::Smoother;
use vcycle::Multigrid;

/// The largest levels (points per axis) computed whole on every rank rather than split.
const REPLICATE_UP_TO: usize = 16;

/// NPB's relative tolerance on the residual norm.
const TOLERANCE: f64 = 1e-8;

/// What a class fixes.
struct Params {
    /// Points per axis of the finest grid.
    edge: usize,
    iterations: usize,
    /// NPB's L2 norm of the final residual.
    reference: f64,
    smoother: Smoother,
}

impl Params {
    fn of(class: Class) -> Self {
        // NPB's smoother S(a) for the smaller classes, S(b) for B and C.
        let sa = Smoother { center: -3.0 / 8.0, face: 1.0 / 32.0, edge: -1.0 / 64.0 };
        let sb = Smoother { center: -3.0 / 17.0, face: 1.0 / 33.0, edge: -1.0 / 61.0 };
        let (edge, iterations, reference, smoother) = match class {
            Class::S => (32, 4, 0.5307707005734e-04, sa),
            Class::W => (128, 4, 0.6467329375339e-05, sa),
            Class::A => (256, 4, 0.2433365309069e-05, sa),
            Class::B => (256, 20, 0.1800564401355e-05, sb),
            Class::C => (512, 20, 0.5706732285740e-06, sb),
        };
        Params { edge, iterations, reference, smoother }
    }
}

/// Whether this kernel runs `class` on `np` ranks: a power of two, and few enough that every
/// block of the finest grid keeps at least two points per axis.
pub fn check(class: Class, np: usize) -> Result<(), String> {
    power_of_two(np)?;
    let edge = Params::of(class).edge;
    let procs = process_dims(np)?;
    if procs.iter().any(|&p| edge / p < 2) {
        let most = (edge / 2).pow(3);
        return Err(format!(
            "a {edge}³ grid on {np} ranks leaves blocks under 2 points per axis: at most {most} ranks"
        ));
    }
    Ok(())
}

/// Runs the kernel (collective over `world`) on a class and rank count `check` accepted
/// (`Kernel::run` checks).
pub(crate) fn run(world: &Comm, class: Class) -> fastmp::Result<Outcome> {
    let params = Params::of(class);
    run_with(world, class, &params, REPLICATE_UP_TO)
}

/// The run, with the replication threshold open to tests.
fn run_with(world: &Comm, class: Class, params: &Params, replicate_up_to: usize) -> fastmp::Result<Outcome> {
    let grid = ProcGrid::new(world)?;
    let mut mg = Multigrid::new(grid, params.edge, params.smoother, replicate_up_to);
    mg.place_charges()?;

    // One untimed iteration, as NPB, so the timed ones find every page touched.
    mg.residual()?;
    mg.vcycle()?;
    mg.residual()?;
    mg.clear_solution();
    mg.comm().barrier()?;

    let start = fastmp::wtime();
    mg.residual()?;
    for _ in 0..params.iterations {
        mg.vcycle()?;
        mg.residual()?;
    }
    let rnm2 = mg.residual_norm()?;
    let seconds = job_seconds(world, fastmp::wtime() - start)?;

    let points = (params.edge as f64).powi(3);
    Ok(Outcome {
        kernel: Kernel::Mg,
        class,
        np: world.size(),
        device: world.device_name(),
        size: format!("{0}x{0}x{0}", params.edge),
        iterations: params.iterations,
        seconds,
        mops: 58.0 * params.iterations as f64 * points / seconds / 1e6,
        operation: "floating point",
        checks: vec![crate::Check::relative("L2 norm of residual", rnm2, params.reference, TOLERANCE)],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_s_verifies_with_every_level_split_as_far_as_blocks_allow() {
        for np in [1, 2, 4, 8] {
            let outcomes = fastmp::run(np, |world| run_with(&world, Class::S, &Params::of(Class::S), 0)).unwrap();
            assert!(outcomes[0].verified(), "{np} ranks:\n{}", outcomes[0].report());
            assert!(outcomes.iter().all(|o| o.checks == outcomes[0].checks));
        }
    }

    #[test]
    fn rank_counts_are_checked() {
        assert!(check(Class::S, 3).unwrap_err().contains("power-of-two"));
        assert!(check(Class::S, 4096).is_ok());
        assert!(check(Class::S, 8192).unwrap_err().contains("at most 4096 ranks"));
        assert!(check(Class::C, 1).is_ok());
    }
}
