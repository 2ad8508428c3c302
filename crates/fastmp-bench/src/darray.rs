//! `fastmp-bench halo` and `fastmp-bench remap`: the distributed-array collectives of
//! `fastmp-darray` on an N×N `f64` array over the 2-D grid `dims_create(np, 2)` gives, beside
//! `bench/darray_mpi.c` (the same exchanges written with MPI_Cart_create + MPI_Sendrecv and
//! MPI_Alltoallv).
//!
//! - `halo`: `write_halo` of a block×block array with `width` ghost cells on both sides of both
//!   dimensions (corners included, no wrap-around).
//! - `remap`: rows block → cyclic, columns block on both sides (each rank keeps its columns and
//!   deals its rows round robin along its grid column).
//!
//! Each size runs [`ROUNDS`] alternating rounds of a built schedule executed over and over
//! (`avg_us`) and of the one-shot call that builds, executes and drops it every time
//! (`oneshot_us`); each round times a whole loop after warm-up and averages over ranks, and the
//! row shows the median round of each. The result is checked against the global formula after
//! the rounds.

use std::cell::RefCell;

use fastmp::{Comm, Error, Result};
use fastmp_darray::ndarray::Ix2;
use fastmp_darray::{DArray, Grid, Halo, HaloSchedule, Range, RemapSchedule, remap};

use crate::coll::{Iterations, measure_with};
use crate::report::{Cell, Reporter};
use crate::support::median;

/// Rounds per size, each timing both variants (which goes first alternates).
const ROUNDS: usize = 3;

/// Array sizes (N of N×N) when `--size` is not given.
pub const DEFAULT_SIZES: [usize; 5] = [256, 512, 1024, 2048, 4096];

/// Which collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Halo,
    Remap,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Halo => "halo",
            Op::Remap => "remap",
        }
    }

    /// Timed iterations per round at size `n` (warm-ups: a tenth, at least one). A halo moves
    /// O(n) elements, so every size gets OSU's large-message count; a remap moves all n²,
    /// so its count shrinks with the array (about 1 GiB moved per round, 5 to 1000 iterations).
    fn iterations(self, n: usize) -> usize {
        match self {
            Op::Halo => 1000,
            Op::Remap => ((1usize << 30) / n.saturating_mul(n).saturating_mul(size_of::<f64>()).max(1)).clamp(5, 1000),
        }
    }
}

/// What to run, from the command line.
pub struct Spec {
    pub op: Op,
    /// N of the N×N arrays, one table row (JSON line) each.
    pub sizes: Vec<usize>,
    /// Ghost cells on each side of each dimension (halo only).
    pub width: usize,
    /// `--iterations`: timed iterations at every size instead of [`Op::iterations`].
    pub iterations: Option<usize>,
}

/// The element at global index `(i, j)` of an `n`-column array.
fn value(n: usize, (i, j): (usize, usize)) -> f64 {
    (i * n + j) as f64
}

pub fn bench(world: &Comm, spec: &Spec, out: &Reporter) -> Result<()> {
    let grid = Grid::auto(world, 2)?;
    let dims = grid.dims();
    let (title, what) = match spec.op {
        Op::Halo => (
            "Distributed-array write_halo",
            format!("# N x N f64, block x block, {} ghost cell(s) per side, corners included", spec.width),
        ),
        Op::Remap => {
            ("Distributed-array remap", "# N x N f64, rows block -> cyclic, columns block on both sides".to_string())
        }
    };
    let mut columns = vec!["Execute(us)", "One-shot(us)"];
    if spec.op == Op::Halo {
        columns.insert(0, "Width");
    }
    out.header(
        title,
        &[
            format!("{what}, grid {} x {}", dims[0], dims[1]),
            format!("# Medians of {ROUNDS} alternating rounds of a built schedule and of the one-shot call"),
        ],
        &columns,
    );
    for &n in &spec.sizes {
        let iters = spec.iterations.unwrap_or(spec.op.iterations(n));
        let iterations = Iterations::fixed(iters);
        let (schedule, oneshot) = match spec.op {
            Op::Halo => halo(&grid, n, spec.width, iterations)?,
            Op::Remap => remap_rows(&grid, n, iterations)?,
        };
        let (Some(schedule), Some(oneshot)) = (schedule, oneshot) else { continue };
        let mut cells = vec![("avg_us", Cell::Num(schedule)), ("oneshot_us", Cell::Num(oneshot))];
        if spec.op == Op::Halo {
            cells.insert(0, ("width", Cell::Int(spec.width as u64)));
        }
        out.row_cells(n, &cells);
    }
    Ok(())
}

/// Per variant, the median round (rank 0 only; `None` elsewhere): `schedule` and `oneshot` are
/// timed alternately, [`ROUNDS`] times each.
fn rounds(
    world: &Comm,
    iterations: Iterations,
    mut schedule: impl FnMut() -> Result<()>,
    mut oneshot: impl FnMut() -> Result<()>,
) -> Result<(Option<f64>, Option<f64>)> {
    let (mut by_schedule, mut by_oneshot) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        // Alternating which goes first cancels what the order does (caches, frequency).
        let order = if round % 2 == 0 { [true, false] } else { [false, true] };
        for built in order {
            let (call, times): (&mut dyn FnMut() -> Result<()>, _) =
                if built { (&mut schedule, &mut by_schedule) } else { (&mut oneshot, &mut by_oneshot) };
            // `iterations` is the same at every size, so the size argument does not matter.
            if let Some(stats) = measure_with(world, 0, iterations, true, call)? {
                times.push(stats.avg_us);
            }
        }
    }
    Ok(((!by_schedule.is_empty()).then(|| median(by_schedule)), (!by_oneshot.is_empty()).then(|| median(by_oneshot))))
}

/// `write_halo` of an n×n block×block array with `width` ghosts per side.
fn halo(grid: &Grid, n: usize, width: usize, iterations: Iterations) -> Result<(Option<f64>, Option<f64>)> {
    let ranges = [Range::ghost_block(n, grid, 0, width, width)?, Range::ghost_block(n, grid, 1, width, width)?];
    let a = DArray::<f64, Ix2>::from_fn(grid, ranges, |ij| value(n, ij))?;
    let mut schedule = HaloSchedule::build(&a, &Halo::all())?;
    // Both variants write the array, one call at a time.
    let a = RefCell::new(a);
    let times = rounds(
        grid.comm(),
        iterations,
        || schedule.execute(&mut *a.borrow_mut()),
        || a.borrow_mut().write_halo_with(&Halo::all()),
    )?;
    check_halo(&a.into_inner(), n, width)?;
    Ok(times)
}

/// Every ghost cell inside the global array holds its owner's value.
fn check_halo(a: &DArray<f64, Ix2>, n: usize, width: usize) -> Result<()> {
    let Some(coords) = a.coords() else { return Ok(()) };
    let ranges = a.ranges();
    // Per dimension, the global index of each stored position (None outside the array).
    let globals: Vec<Vec<Option<usize>>> = ranges
        .iter()
        .zip(coords)
        .map(|(r, &c)| {
            let first = r.global(c, 0);
            (0..r.stored_len(c)).map(|s| (first + s).checked_sub(width).filter(|&g| g < n)).collect()
        })
        .collect();
    for ((s0, s1), &x) in a.local_with_ghosts().indexed_iter() {
        if let (Some(i), Some(j)) = (globals[0][s0], globals[1][s1])
            && x != value(n, (i, j))
        {
            return Err(Error::other(format!("halo {n}x{n}: stored ({s0}, {s1}) holds {x}, not element ({i}, {j})")));
        }
    }
    Ok(())
}

/// Remap of an n×n array from rows block to rows cyclic (columns block on both sides).
fn remap_rows(grid: &Grid, n: usize, iterations: Iterations) -> Result<(Option<f64>, Option<f64>)> {
    let src =
        DArray::<f64, Ix2>::from_fn(grid, [Range::block(n, grid, 0)?, Range::block(n, grid, 1)?], |ij| value(n, ij))?;
    let dst = DArray::<f64, Ix2>::from_elem(grid, [Range::cyclic(n, grid, 0)?, Range::block(n, grid, 1)?], -1.0)?;
    let mut schedule = RemapSchedule::build(&dst, &src)?;
    let dst = RefCell::new(dst);
    let times = rounds(
        grid.comm(),
        iterations,
        || schedule.execute(&mut *dst.borrow_mut(), &src),
        || remap(&mut *dst.borrow_mut(), &src),
    )?;
    let dst = dst.into_inner();
    if let Some(((i, j), x)) = dst.overall().find(|&(ij, &x)| x != value(n, ij)) {
        return Err(Error::other(format!("remap {n}x{n}: element ({i}, {j}) is {x}")));
    }
    Ok(times)
}
