//! 2-D heat diffusion by Jacobi iteration on a distributed array with ghost cells.
//!
//! The field is `N × N` `f64`, spread block × block (`Range::ghost_block`, one ghost cell per
//! side) over the 2-D process grid `dims_create` gives. Each step fills the ghost cells with a
//! `HaloSchedule` built once, then every rank updates its interior points from its stored
//! block (`local_with_ghosts`) with an `ndarray::Zip` over shifted views; the boundary of the
//! grid stays fixed. The result after the last step must equal, bit for bit, the same stencil
//! run serially (each point's update is the same arithmetic in the same order).
//!
//! ```sh
//! cargo run --release -p fastmp-darray --example heat -- --np 4 [--size 512] [--steps 200]
//! fastmprun -np 2 --device tcp target/release/examples/heat
//! ```

#[path = "common/mod.rs"]
mod common;
#[path = "common/interior.rs"]
mod interior;

use std::fmt;
use std::process::ExitCode;

use common::{Check, Flag, Report};
use fastmp::{Comm, Result};
use fastmp_darray::ndarray::{Array2, ArrayView2, ArrayViewMut2, Zip, s};
use fastmp_darray::{DArray, Grid, Halo, HaloSchedule, Range};
use interior::Interior;

/// The diffusion number κ·Δt/Δx² of the explicit scheme (stable below 1/4).
const ALPHA: f64 = 0.2;

/// The problem: a `rows × cols` grid advanced `steps` times.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub rows: usize,
    pub cols: usize,
    pub steps: usize,
}

/// What a run measured and found.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub params: Params,
    /// The process grid's shape.
    pub grid: Vec<usize>,
    /// Seconds per step (halo update and stencil), the slowest rank's.
    pub seconds_per_step: f64,
    /// The field after the last step against the serial stencil.
    pub check: Check,
}

/// The initial temperature: an uneven pattern, so every point's history is different.
fn initial(i: usize, j: usize) -> f64 {
    ((7 * i + 3 * j) % 11) as f64 / 10.0
}

/// Advances the field `params.steps` times on the ranks of `world` (collective) and checks it
/// against the serial stencil. `Err` (on every rank) if a size is zero.
pub fn run(world: &Comm, params: &Params) -> Result<Outcome> {
    let Params { rows, cols, steps } = *params;
    common::require_positive("heat", &[("rows", rows), ("cols", cols)])?;
    let grid = Grid::auto(world, 2)?;
    let ranges = [Range::ghost_block(rows, &grid, 0, 1, 1)?, Range::ghost_block(cols, &grid, 1, 1, 1)?];
    let mut field = DArray::from_fn(&grid, ranges, |(i, j)| initial(i, j))?;
    // The boundary never changes, so the second buffer starts as a copy and keeps it.
    let mut next = field.clone();
    // Both buffers have the same grid and ranges, so one schedule serves them both.
    let mut halo = HaloSchedule::build(&field, &Halo::all())?;
    let interior = Interior::of(&field);

    world.barrier()?;
    let start = fastmp::wtime();
    for _ in 0..steps {
        halo.execute(&mut field)?;
        jacobi(field.local_with_ghosts(), next.local_with_ghosts_mut(), &interior);
        std::mem::swap(&mut field, &mut next);
    }
    let seconds = common::slowest(world, fastmp::wtime() - start)?;

    let check = common::compare(&field, serial(params).view(), world)?;
    Ok(Outcome { params: *params, grid: grid.dims().to_vec(), seconds_per_step: seconds / steps.max(1) as f64, check })
}

/// The same computation on one whole array.
pub fn serial(params: &Params) -> Array2<f64> {
    let mut field = Array2::from_shape_fn((params.rows, params.cols), |(i, j)| initial(i, j));
    let mut next = field.clone();
    let interior = Interior::serial(params.rows, params.cols);
    for _ in 0..params.steps {
        jacobi(field.view(), next.view_mut(), &interior);
        std::mem::swap(&mut field, &mut next);
    }
    field
}

/// One Jacobi step: `to` at the `interior` positions from the 5-point stencil of `from` (a
/// stored block whose ghost cells, or the grid's boundary, frame those positions).
fn jacobi(from: ArrayView2<'_, f64>, mut to: ArrayViewMut2<'_, f64>, interior: &Interior) {
    if interior.is_empty() {
        return;
    }
    let (r, c) = (interior.rows.clone(), interior.cols.clone());
    // Interior positions are at least one away from the block's edges (a ghost cell or the
    // grid's boundary is always there), so the shifted windows stay inside `from`.
    let window = |rows: std::ops::Range<usize>, cols: std::ops::Range<usize>| from.slice_move(s![rows, cols]);
    Zip::from(to.slice_mut(s![r.clone(), c.clone()]))
        .and(window(r.clone(), c.clone()))
        .and(window(r.start - 1..r.end - 1, c.clone()))
        .and(window(r.start + 1..r.end + 1, c.clone()))
        .and(window(r.clone(), c.start - 1..c.end - 1))
        .and(window(r.clone(), c.start + 1..c.end + 1))
        .for_each(|t, &x, &north, &south, &west, &east| {
            *t = x + ALPHA * ((north + south + west + east) - 4.0 * x);
        });
}

impl Report for Outcome {
    fn check(&self) -> Check {
        self.check
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Params { rows, cols, steps } = self.params;
        write!(
            f,
            "heat: {rows}x{cols}, {steps} steps on a {:?} grid: {:.3} ms per step; ",
            self.grid,
            self.seconds_per_step * 1e3
        )?;
        f.write_str(&self.check.describe("stencil"))
    }
}

fn main() -> ExitCode {
    let flags = [
        Flag { name: "size", default: 512, help: "the field is size × size" },
        Flag { name: "steps", default: 200, help: "Jacobi steps" },
    ];
    common::main(
        "heat",
        "2-D heat diffusion (Jacobi) with write_halo, checked against a serial run",
        &flags,
        |world, v| run(world, &Params { rows: v.get("size"), cols: v.get("size"), steps: v.get("steps") }),
    )
}
