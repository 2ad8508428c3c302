//! A distributed matrix transpose built on `remap`.
//!
//! `A` (`rows × cols` `f64`) is distributed by blocks of rows over a 1-D process grid, and so is
//! its transpose `B = Aᵀ` (`cols × rows`). A `RemapSchedule`, built once, redistributes `A` to
//! blocks of columns (every rank then holds all rows of the columns that are its rows of `B`);
//! each rank then transposes that block locally, tile by tile, into its block of `B`. The
//! result must equal the serial transpose exactly (elements are only moved).
//!
//! ```sh
//! cargo run --release -p fastmp-darray --example transpose -- --np 4 [--rows 2048] [--cols 2048] [--repeat 20]
//! fastmprun -np 2 --device tcp target/release/examples/transpose
//! ```

#[path = "common/mod.rs"]
mod common;

use std::fmt;
use std::process::ExitCode;

use common::{Check, Flag, Report};
use fastmp::{Comm, Result};
use fastmp_darray::ndarray::{Array2, ArrayView2, ArrayViewMut2, s};
use fastmp_darray::{DArray, Grid, Range, RemapSchedule};

/// Edge of the square tiles the local transpose copies: two 64 × 64 `f64` tiles (64 KiB) stay in
/// L2. Of 16, 32, 64 and 128, 64 was the fastest at 2048 × 2048 on the development VM (about
/// 2.5× a plain `assign` of the transposed view, which strides through memory a row apart).
const TILE: usize = 64;

/// The problem: transpose a `rows × cols` matrix `repeat` times.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub rows: usize,
    pub cols: usize,
    pub repeat: usize,
}

/// What a run measured and found.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub params: Params,
    /// Ranks.
    pub np: usize,
    /// Seconds per transpose: the remap, then the local transpose, the slowest rank's.
    pub seconds_remap: f64,
    pub seconds_local: f64,
    /// The transpose against the serial one.
    pub check: Check,
}

/// The matrix: every element different.
fn element(i: usize, j: usize, cols: usize) -> f64 {
    (i * cols + j) as f64
}

/// Transposes the matrix `params.repeat` times on the ranks of `world` (collective) and checks
/// the result against the serial transpose. `Err` (on every rank) if a size is zero.
pub fn run(world: &Comm, params: &Params) -> Result<Outcome> {
    let Params { rows, cols, repeat } = *params;
    common::require_positive("transpose", &[("rows", rows), ("cols", cols)])?;
    let grid = Grid::new(world, &[world.size()])?;
    let a =
        DArray::from_fn(&grid, [Range::block(rows, &grid, 0)?, Range::collapsed(cols)], |(i, j)| element(i, j, cols))?;
    // A by blocks of columns: the same column range as B's rows, so a rank's columns of A are
    // exactly its rows of B.
    let mut by_cols = DArray::from_elem(&grid, [Range::collapsed(rows), Range::block(cols, &grid, 0)?], 0.0)?;
    let mut b = DArray::from_elem(&grid, [Range::block(cols, &grid, 0)?, Range::collapsed(rows)], 0.0)?;
    let mut remap = RemapSchedule::build(&by_cols, &a)?;

    let (mut remapping, mut transposing) = (0.0, 0.0);
    world.barrier()?;
    for _ in 0..repeat {
        let start = fastmp::wtime();
        remap.execute(&mut by_cols, &a)?;
        let middle = fastmp::wtime();
        transpose_into(by_cols.local(), b.local_mut());
        remapping += middle - start;
        transposing += fastmp::wtime() - middle;
    }
    let per = |seconds: f64| common::slowest(world, seconds / repeat.max(1) as f64);
    let (seconds_remap, seconds_local) = (per(remapping)?, per(transposing)?);

    let serial = Array2::from_shape_fn((rows, cols), |(i, j)| element(i, j, cols));
    let check = common::compare(&b, serial.t(), world)?;
    Ok(Outcome { params: *params, np: world.size(), seconds_remap, seconds_local, check })
}

/// `to = fromᵀ`, tile by tile so both sides stay in cache.
fn transpose_into(from: ArrayView2<'_, f64>, mut to: ArrayViewMut2<'_, f64>) {
    let (rows, cols) = to.dim();
    for i in (0..rows).step_by(TILE) {
        for j in (0..cols).step_by(TILE) {
            let (i_end, j_end) = ((i + TILE).min(rows), (j + TILE).min(cols));
            to.slice_mut(s![i..i_end, j..j_end]).assign(&from.slice(s![j..j_end, i..i_end]).t());
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
        let Params { rows, cols, repeat } = self.params;
        let total = self.seconds_remap + self.seconds_local;
        let gbytes = (rows * cols * size_of::<f64>()) as f64 / total / 1e9;
        write!(
            f,
            "transpose: {rows}x{cols}, np {}, {repeat} times: {:.3} ms per transpose \
             (remap {:.3} ms, local {:.3} ms), {gbytes:.2} GB/s; ",
            self.np,
            total * 1e3,
            self.seconds_remap * 1e3,
            self.seconds_local * 1e3
        )?;
        f.write_str(&self.check.describe("transpose"))
    }
}

fn main() -> ExitCode {
    let flags = [
        Flag { name: "rows", default: 2048, help: "rows of the matrix" },
        Flag { name: "cols", default: 2048, help: "columns of the matrix" },
        Flag { name: "repeat", default: 20, help: "transposes timed (one schedule, built once)" },
    ];
    common::main(
        "transpose",
        "A distributed transpose built on remap, checked against the serial transpose",
        &flags,
        |world, v| run(world, &Params { rows: v.get("rows"), cols: v.get("cols"), repeat: v.get("repeat") }),
    )
}
