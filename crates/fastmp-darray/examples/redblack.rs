//! Red-black relaxation of Laplace's equation on a distributed 512 × 512 array: the benchmark of
//! the HPJava paper (Lim, Carpenter, Fox, Lee 2007, Fig. 11).
//!
//! The points are coloured like a chessboard by `(i + j) % 2`. An iteration is two half-sweeps,
//! red then black; each first fills the ghost cells (a `HaloSchedule` built once) and then
//! replaces every interior point of its colour by the mean of its four neighbours, which all
//! have the other colour, in place. The boundary stays fixed. Because a half-sweep reads only
//! points it does not write, the order of the updates inside it does not matter: the serial
//! red-black sweep does the same arithmetic on every point, so the distributed result must
//! equal it bit for bit (the check is exact, `!=` on every element).
//!
//! Reports time per iteration and Mflop/s, counting 4 floating-point operations per point update
//! (three additions, one multiplication) as the usual red-black benchmarks do.
//!
//! ```sh
//! cargo run --release -p fastmp-darray --example redblack -- --np 4 [--size 512] [--iterations 100]
//! fastmprun -np 2 --device tcp target/release/examples/redblack
//! ```

#[path = "common/mod.rs"]
mod common;
#[path = "common/interior.rs"]
mod interior;

use std::fmt;
use std::process::ExitCode;

use common::{Check, Flag, Report};
use fastmp::{Comm, Result};
use fastmp_darray::ndarray::{Array2, ArrayViewMut2, s};
use fastmp_darray::{DArray, Grid, Halo, HaloSchedule, Range};
use interior::Interior;

/// Floating-point operations per point update: `0.25 * (n + s + w + e)`.
const FLOPS_PER_POINT: f64 = 4.0;

/// The problem: a `rows × cols` grid relaxed `iterations` times (red and black each).
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub rows: usize,
    pub cols: usize,
    pub iterations: usize,
}

/// What a run measured and found.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub params: Params,
    /// The process grid's shape.
    pub grid: Vec<usize>,
    /// Seconds per iteration (two halo updates and two half-sweeps), the slowest rank's.
    pub seconds_per_iteration: f64,
    /// The field after the last iteration against the serial red-black relaxation.
    pub check: Check,
}

impl Outcome {
    /// Millions of floating-point operations per second, all ranks together.
    pub fn mflops(&self) -> f64 {
        let points = self.params.rows.saturating_sub(2) * self.params.cols.saturating_sub(2);
        FLOPS_PER_POINT * points as f64 / self.seconds_per_iteration / 1e6
    }
}

/// The fixed boundary values (and the initial guess inside: zero).
fn initial(i: usize, j: usize, rows: usize, cols: usize) -> f64 {
    if i == 0 || j == 0 || i + 1 == rows || j + 1 == cols { (i + 2 * j) as f64 / (rows + cols) as f64 } else { 0.0 }
}

/// Relaxes the field `params.iterations` times on the ranks of `world` (collective) and checks
/// it against the serial relaxation. `Err` (on every rank) if a size is zero.
pub fn run(world: &Comm, params: &Params) -> Result<Outcome> {
    let Params { rows, cols, iterations } = *params;
    common::require_positive("redblack", &[("rows", rows), ("cols", cols)])?;
    let grid = Grid::auto(world, 2)?;
    let ranges = [Range::ghost_block(rows, &grid, 0, 1, 1)?, Range::ghost_block(cols, &grid, 1, 1, 1)?];
    let mut field = DArray::from_fn(&grid, ranges, |(i, j)| initial(i, j, rows, cols))?;
    let mut halo = HaloSchedule::build(&field, &Halo::all())?;
    let interior = Interior::of(&field);

    world.barrier()?;
    let start = fastmp::wtime();
    for _ in 0..iterations {
        for colour in [RED, BLACK] {
            halo.execute(&mut field)?;
            half_sweep(field.local_with_ghosts_mut(), &interior, colour);
        }
    }
    let seconds = common::slowest(world, fastmp::wtime() - start)?;

    let check = common::compare(&field, serial(params).view(), world)?;
    Ok(Outcome {
        params: *params,
        grid: grid.dims().to_vec(),
        seconds_per_iteration: seconds / iterations.max(1) as f64,
        check,
    })
}

/// The same relaxation on one whole array.
pub fn serial(params: &Params) -> Array2<f64> {
    let (rows, cols) = (params.rows, params.cols);
    let mut field = Array2::from_shape_fn((rows, cols), |(i, j)| initial(i, j, rows, cols));
    let interior = Interior::serial(rows, cols);
    for _ in 0..params.iterations {
        for colour in [RED, BLACK] {
            half_sweep(field.view_mut(), &interior, colour);
        }
    }
    field
}

/// The colour of the points with an even `i + j`.
const RED: usize = 0;
/// The colour of the points with an odd `i + j`.
const BLACK: usize = 1;

/// Replaces every `interior` point of `colour` of the stored block by the mean of its four
/// neighbours (ghost cells or the grid's boundary frame the interior).
fn half_sweep(mut block: ArrayViewMut2<'_, f64>, interior: &Interior, colour: usize) {
    if interior.is_empty() {
        return;
    }
    let cols = interior.cols.clone();
    for a in interior.rows.clone() {
        // Rows a - 1, a and a + 1: disjoint, so the centre row is writable while its neighbours
        // are read. The block is row-major, so each row is one contiguous slice.
        let (north, mut centre, south) = block.multi_slice_mut((s![a - 1, ..], s![a, ..], s![a + 1, ..]));
        let (Some(north), Some(centre), Some(south)) = (north.as_slice(), centre.as_slice_mut(), south.as_slice())
        else {
            unreachable!("rows of a standard-layout block are contiguous");
        };
        // The first column of this row with the colour.
        let first = cols.start + (interior.parity + a + cols.start + colour) % 2;
        for b in (first..cols.end).step_by(2) {
            centre[b] = 0.25 * (north[b] + south[b] + centre[b - 1] + centre[b + 1]);
        }
    }
}

impl Report for Outcome {
    fn check(&self) -> Check {
        self.check
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Params { rows, cols, iterations } = self.params;
        write!(
            f,
            "redblack: {rows}x{cols}, {iterations} iterations on a {:?} grid: {:.3} ms per iteration, {:.1} Mflop/s; ",
            self.grid,
            self.seconds_per_iteration * 1e3,
            self.mflops()
        )?;
        f.write_str(&self.check.describe("relaxation"))
    }
}

fn main() -> ExitCode {
    let flags = [
        Flag { name: "size", default: 512, help: "the field is size × size" },
        Flag { name: "iterations", default: 100, help: "red-black iterations" },
    ];
    common::main(
        "redblack",
        "Red-black relaxation (the HPJava paper's benchmark), checked against a serial run",
        &flags,
        |world, v| run(world, &Params { rows: v.get("size"), cols: v.get("size"), iterations: v.get("iterations") }),
    )
}
