//! The distributed 3-D FFT of FT, on slabs: 1-D transforms along x and y on a rank's own
//! z-planes, a global transpose (`alltoallv`), then 1-D transforms along z on its own y-rows;
//! the inverse runs the same steps backwards. The layouts are described in [`super::slabs`].
//!
//! The 1-D transforms are rustfft's, many lines per call where lines are contiguous. Every
//! pass reads its input from memory once, in long runs, into a buffer that stays in cache (a
//! whole plane, or a tile of z-lines); the transposes that make strided lines contiguous
//! happen there, and the result goes back to memory once, in long runs, already laid out for
//! the next pass (or packed for the global transpose).

use std::ops::Range;
use std::sync::Arc;

use fastmp::Comm;
use num_complex::Complex64;
use rustfft::{Fft, FftDirection, FftPlanner};

use super::slabs::{PlaneRuns, Slabs};

/// Y-lines of a plane transformed together: enough neighbouring columns that copying them
/// moves whole cache lines.
const BLOCK: usize = 16;

/// Elements of the tile of z-lines: 1 MiB, to stay in a core's L2 cache. (The plane buffer
/// holds a whole plane: 1 MiB in class A, 2 MiB in B, 4 MiB in C, where it spills to L3.)
const TILE_ELEMENTS: usize = 64 * 1024;

/// Padding after each line of a cache buffer, so that lines a power of two long do not all
/// map to the same cache sets when a transpose walks across them.
const PAD: usize = 8;

/// NPB's two transforms, neither normalised. NPB's forward transform multiplies by
/// e^{+2πi jk/n}: rustfft calls that direction "inverse".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    Forward,
    Inverse,
}

impl Direction {
    fn rustfft(self) -> FftDirection {
        match self {
            Direction::Forward => FftDirection::Inverse,
            Direction::Inverse => FftDirection::Forward,
        }
    }
}

/// One direction's 1-D plans, one per axis.
struct AxisPlans {
    x: Arc<dyn Fft<f64>>,
    y: Arc<dyn Fft<f64>>,
    z: Arc<dyn Fft<f64>>,
}

impl AxisPlans {
    fn new(planner: &mut FftPlanner<f64>, slabs: &Slabs, direction: Direction) -> Self {
        let dir = direction.rustfft();
        AxisPlans {
            x: planner.plan_fft(slabs.nx, dir),
            y: planner.plan_fft(slabs.ny, dir),
            z: planner.plan_fft(slabs.nz, dir),
        }
    }

    /// The scratch space any of the plans needs, called any way.
    fn scratch_len(&self) -> usize {
        [&self.x, &self.y, &self.z]
            .iter()
            .map(|fft| {
                fft.get_inplace_scratch_len().max(fft.get_outofplace_scratch_len()).max(fft.get_immutable_scratch_len())
            })
            .max()
            .unwrap_or(0)
    }
}

/// The two buffers of the global transpose: the space side writes `outgoing`, [`exchange`]
/// moves it, the frequency side reads the blocks through [`received`] (and the other way
/// round). A rank's own block never moves: it is read where it was written. On one rank that
/// is the whole transpose, so there is no second buffer.
///
/// [`exchange`]: Transit::exchange
/// [`received`]: Transit::received
pub(crate) struct Transit {
    outgoing: Vec<Complex64>,
    incoming: Option<Vec<Complex64>>,
    rank: usize,
    /// Elements to and from each rank: one block, none to itself.
    counts: Vec<usize>,
    /// Where each rank's block starts, in both buffers.
    displs: Vec<usize>,
}

impl Transit {
    pub fn new(slabs: &Slabs) -> Self {
        let buffer = || vec![Complex64::default(); slabs.local_len()];
        let block = slabs.block_len();
        Transit {
            outgoing: buffer(),
            incoming: (slabs.np > 1).then(buffer),
            rank: slabs.rank,
            counts: (0..slabs.np).map(|k| if k == slabs.rank { 0 } else { block }).collect(),
            displs: (0..slabs.np).map(|k| k * block).collect(),
        }
    }

    /// Block `c` of every rank's outgoing buffer becomes block `rank` of rank `c`'s incoming
    /// one, except a rank's own block, which stays in `outgoing`.
    fn exchange(&mut self, world: &Comm) -> fastmp::Result<()> {
        match &mut self.incoming {
            Some(incoming) => {
                world.alltoallv(&self.outgoing, &self.counts, &self.displs, incoming, &self.counts, &self.displs)
            }
            None => Ok(()),
        }
    }

    /// The blocks after an exchange.
    fn received(&self) -> Blocks<'_> {
        Blocks { others: self.incoming.as_deref().unwrap_or(&self.outgoing), own: &self.outgoing, rank: self.rank }
    }
}

/// Where a pass reads block `k` of its input: `own` for block `rank`, `others` for the rest
/// (both laid out alike). A buffer that is not split in blocks is its own single block.
#[derive(Clone, Copy)]
struct Blocks<'a> {
    others: &'a [Complex64],
    own: &'a [Complex64],
    rank: usize,
}

impl<'a> Blocks<'a> {
    fn whole(buffer: &'a [Complex64]) -> Self {
        Blocks { others: buffer, own: buffer, rank: 0 }
    }

    fn of(&self, block: usize) -> &'a [Complex64] {
        if block == self.rank { self.own } else { self.others }
    }
}

/// One rank's share of the 3-D transforms: plans, layouts and cache buffers, so that a
/// transform allocates nothing.
pub(crate) struct Fft3d {
    slabs: Slabs,
    forward: AxisPlans,
    inverse: AxisPlans,
    space_runs: PlaneRuns,
    transit_runs: PlaneRuns,
    work: Workspace,
}

impl Fft3d {
    pub fn new(slabs: Slabs) -> Self {
        let mut planner = FftPlanner::new();
        let forward = AxisPlans::new(&mut planner, &slabs, Direction::Forward);
        let inverse = AxisPlans::new(&mut planner, &slabs, Direction::Inverse);
        let scratch_len = forward.scratch_len().max(inverse.scratch_len());
        Fft3d {
            slabs,
            forward,
            inverse,
            space_runs: slabs.space_runs(),
            transit_runs: slabs.transit_runs(),
            work: Workspace::new(&slabs, scratch_len),
        }
    }

    /// NPB's forward transform of `space` into `frequency` (collective). `space` is left
    /// unchanged.
    pub fn forward(
        &mut self,
        world: &Comm,
        space: &[Complex64],
        transit: &mut Transit,
        frequency: &mut [Complex64],
    ) -> fastmp::Result<()> {
        self.work.planes(
            &self.forward,
            Blocks::whole(space),
            self.space_runs,
            &mut transit.outgoing,
            self.transit_runs,
        );
        transit.exchange(world)?;
        self.work.z_lines_forward(&self.forward, &self.slabs, transit.received(), frequency);
        Ok(())
    }

    /// NPB's inverse transform of a spectrum into `space` (collective). The spectrum is given
    /// line by line: `fill(y, x, line, out)` writes into `out` the z-line at (global y, x) to
    /// transform, `line` being that z-line of `frequency`; so the caller's pass over the
    /// spectrum rides on the transform's.
    pub fn inverse(
        &mut self,
        world: &Comm,
        frequency: &[Complex64],
        transit: &mut Transit,
        space: &mut [Complex64],
        fill: impl FnMut(usize, usize, &[Complex64], &mut [Complex64]),
    ) -> fastmp::Result<()> {
        self.work.z_lines_inverse(&self.inverse, &self.slabs, frequency, &mut transit.outgoing, fill);
        transit.exchange(world)?;
        self.work.planes(&self.inverse, transit.received(), self.transit_runs, space, self.space_runs);
        Ok(())
    }
}

/// The buffers where strided lines are made contiguous and transformed, sized to stay in
/// cache.
struct Workspace {
    /// One z-plane, `[y][x]`.
    plane: Vec<Complex64>,
    /// [`BLOCK`] y-lines, `y_pitch` apart.
    lines: Vec<Complex64>,
    y_pitch: usize,
    /// The z-lines of `columns` neighbouring x of one y-row, `z_pitch` apart.
    tile: Vec<Complex64>,
    z_pitch: usize,
    columns: usize,
    scratch: Vec<Complex64>,
}

impl Workspace {
    fn new(slabs: &Slabs, scratch_len: usize) -> Self {
        let Slabs { nx, ny, nz, .. } = *slabs;
        let (y_pitch, z_pitch) = (ny + PAD, nz + PAD);
        let columns = prev_power_of_two((TILE_ELEMENTS / z_pitch).clamp(1, nx));
        Workspace {
            plane: vec![Complex64::default(); nx * ny],
            lines: vec![Complex64::default(); BLOCK.min(nx) * y_pitch],
            y_pitch,
            tile: vec![Complex64::default(); columns * z_pitch],
            z_pitch,
            columns,
            scratch: vec![Complex64::default(); scratch_len],
        }
    }

    /// The x and y transforms of every plane: each plane's rows (where `src_runs` says, run
    /// `k` in block `k` of `src`) copied into the plane buffer, transformed along x there,
    /// then along y a block of columns at a time, and copied out to `dst` (where `dst_runs`
    /// says).
    fn planes(
        &mut self,
        plans: &AxisPlans,
        src: Blocks<'_>,
        src_runs: PlaneRuns,
        dst: &mut [Complex64],
        dst_runs: PlaneRuns,
    ) {
        let (nx, ny) = (src_runs.nx(), src_runs.ny());
        let plane = &mut self.plane[..];
        // Every layout holds the rank's planes.
        for p in 0..dst.len() / plane.len() {
            for (k, (run, part)) in src_runs.runs(p).zip(plane.chunks_exact_mut(src_runs.run_len())).enumerate() {
                part.copy_from_slice(&src.of(k)[run]);
            }
            plans.x.process_with_scratch(plane, &mut self.scratch);
            for columns in tiles(nx, BLOCK) {
                let lines = &mut self.lines[..columns.len() * self.y_pitch];
                strip_to_lines(&plane[columns.start..], nx, 0..ny, lines, self.y_pitch);
                for line in lines.chunks_exact_mut(self.y_pitch) {
                    plans.y.process_with_scratch(&mut line[..ny], &mut self.scratch);
                }
                lines_to_strip(lines, self.y_pitch, 0..ny, &mut plane[columns.start..], nx);
            }
            for (run, part) in dst_runs.runs(p).zip(plane.chunks_exact(dst_runs.run_len())) {
                dst[run].copy_from_slice(part);
            }
        }
    }

    /// The forward z transforms: the z-lines of a tile of columns gathered from the received
    /// transit layout `[z][row][x]` (planes of rank k in block k), transformed into the
    /// frequency layout `[row][x][z]`.
    fn z_lines_forward(&mut self, plans: &AxisPlans, slabs: &Slabs, incoming: Blocks<'_>, frequency: &mut [Complex64]) {
        let Slabs { nx, nz, .. } = *slabs;
        let z_stride = slabs.rows() * nx;
        for (row, row_out) in frequency.chunks_exact_mut(nx * nz).enumerate() {
            for columns in tiles(nx, self.columns) {
                let tile = &mut self.tile[..columns.len() * self.z_pitch];
                for (k, planes) in tiles(nz, slabs.planes()).enumerate() {
                    let first = planes.start * z_stride + row * nx + columns.start;
                    strip_to_lines(&incoming.of(k)[first..], z_stride, planes, tile, self.z_pitch);
                }
                let out = &mut row_out[columns.start * nz..columns.end * nz];
                for (line, line_out) in tile.chunks_exact_mut(self.z_pitch).zip(out.chunks_exact_mut(nz)) {
                    plans.z.process_outofplace_with_scratch(&mut line[..nz], line_out, &mut self.scratch);
                }
            }
        }
    }

    /// The inverse z transforms: the z-lines of a tile of columns filled from `frequency`,
    /// transformed in the tile, and scattered into the transit layout `[z][row][x]`.
    fn z_lines_inverse(
        &mut self,
        plans: &AxisPlans,
        slabs: &Slabs,
        frequency: &[Complex64],
        outgoing: &mut [Complex64],
        mut fill: impl FnMut(usize, usize, &[Complex64], &mut [Complex64]),
    ) {
        let Slabs { nx, nz, .. } = *slabs;
        let z_stride = slabs.rows() * nx;
        for (row, row_in) in frequency.chunks_exact(nx * nz).enumerate() {
            let y = slabs.first_row() + row;
            for columns in tiles(nx, self.columns) {
                let tile = &mut self.tile[..columns.len() * self.z_pitch];
                let input = &row_in[columns.start * nz..columns.end * nz];
                for ((x, line_in), line) in
                    columns.clone().zip(input.chunks_exact(nz)).zip(tile.chunks_exact_mut(self.z_pitch))
                {
                    let line = &mut line[..nz];
                    fill(y, x, line_in, line);
                    plans.z.process_with_scratch(line, &mut self.scratch);
                }
                lines_to_strip(tile, self.z_pitch, 0..nz, &mut outgoing[row * nx + columns.start..], z_stride);
            }
        }
    }
}

/// `0..n` cut into ranges of `width`.
fn tiles(n: usize, width: usize) -> impl Iterator<Item = Range<usize>> {
    (0..n).step_by(width).map(move |start| start..(start + width).min(n))
}

fn prev_power_of_two(n: usize) -> usize {
    1 << n.ilog2()
}

/// Transposes a strip of rows, row i starting at `src[i * stride]`, into positions `rows` of
/// lines `pitch` apart: line b receives column b (as many lines as `lines` holds).
fn strip_to_lines(src: &[Complex64], stride: usize, rows: Range<usize>, lines: &mut [Complex64], pitch: usize) {
    let width = lines.len() / pitch;
    for (r, row) in rows.zip(src.chunks(stride)) {
        for (b, &value) in row[..width].iter().enumerate() {
            lines[b * pitch + r] = value;
        }
    }
}

/// The reverse of [`strip_to_lines`]: positions `rows` of line b go back to column b.
fn lines_to_strip(lines: &[Complex64], pitch: usize, rows: Range<usize>, dst: &mut [Complex64], stride: usize) {
    let width = lines.len() / pitch;
    for (r, row) in rows.zip(dst.chunks_mut(stride)) {
        for (b, slot) in row[..width].iter_mut().enumerate() {
            *slot = lines[b * pitch + r];
        }
    }
}

#[cfg(test)]
mod tests {
    use std::f64::consts::PI;

    use super::*;

    /// A value for every grid point, easy to recompute anywhere.
    fn field(x: usize, y: usize, z: usize) -> Complex64 {
        let t = (x * 7 + y * 13 + z * 29) as f64;
        Complex64::new((0.37 * t).sin() + 0.1 * x as f64, (0.11 * t).cos() - 0.05 * z as f64)
    }

    /// This rank's space slab of [`field`].
    fn space_of(slabs: &Slabs) -> Vec<Complex64> {
        let Slabs { nx, ny, .. } = *slabs;
        (0..slabs.local_len()).map(|i| field(i % nx, (i / nx) % ny, slabs.first_plane() + i / (nx * ny))).collect()
    }

    /// NPB's forward transform of [`field`] at frequency (kx, ky, kz), term by term.
    fn naive_forward(dims: [usize; 3], (kx, ky, kz): (usize, usize, usize)) -> Complex64 {
        let [nx, ny, nz] = dims;
        let mut sum = Complex64::default();
        for z in 0..nz {
            for y in 0..ny {
                for x in 0..nx {
                    let phase = 2.0
                        * PI
                        * ((kx * x) as f64 / nx as f64 + (ky * y) as f64 / ny as f64 + (kz * z) as f64 / nz as f64);
                    sum += field(x, y, z) * Complex64::from_polar(1.0, phase);
                }
            }
        }
        sum
    }

    const DIMS: [usize; 3] = [8, 4, 16];

    #[test]
    fn forward_matches_a_naive_dft_on_any_number_of_ranks() {
        for np in [1, 2, 4] {
            fastmp::run(np, |world| {
                let slabs = Slabs::new(DIMS, world.size(), world.rank());
                let mut fft = Fft3d::new(slabs);
                let mut transit = Transit::new(&slabs);
                let space = space_of(&slabs);
                let mut frequency = vec![Complex64::default(); slabs.local_len()];
                fft.forward(&world, &space, &mut transit, &mut frequency)?;
                let [nx, _, nz] = DIMS;
                for (i, &value) in frequency.iter().enumerate() {
                    let k = ((i / nz) % nx, slabs.first_row() + i / (nx * nz), i % nz);
                    let expected = naive_forward(DIMS, k);
                    assert!((value - expected).norm() < 1e-9, "np {np}, k {k:?}: {value} vs {expected}");
                }
                Ok(())
            })
            .unwrap();
        }
    }

    #[test]
    fn inverse_after_forward_scales_by_the_grid_size() {
        for np in [1, 2, 4] {
            fastmp::run(np, |world| {
                let slabs = Slabs::new(DIMS, world.size(), world.rank());
                let mut fft = Fft3d::new(slabs);
                let mut transit = Transit::new(&slabs);
                let original = space_of(&slabs);
                let mut frequency = vec![Complex64::default(); slabs.local_len()];
                fft.forward(&world, &original, &mut transit, &mut frequency)?;
                let mut space = vec![Complex64::default(); slabs.local_len()];
                let mut filled = 0;
                fft.inverse(&world, &frequency, &mut transit, &mut space, |_, _, line, out| {
                    out.copy_from_slice(line);
                    filled += 1;
                })?;
                assert_eq!(filled, slabs.local_len() / DIMS[2], "every z-line is filled once");
                let n = slabs.total() as f64;
                for (&got, &want) in space.iter().zip(&original) {
                    assert!((got - want * n).norm() < 1e-9 * n, "np {np}: {got} vs {}", want * n);
                }
                Ok(())
            })
            .unwrap();
        }
    }
}
