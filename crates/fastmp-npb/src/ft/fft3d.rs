//! The distributed 3-D FFT of FT, on z-slabs: 1-D transforms along x and y on a rank's own
//! planes, a global transpose (`alltoall`), then 1-D transforms along z; the inverse runs the
//! same steps backwards.
//!
//! The 1-D transforms are rustfft's. Lines along x are contiguous and transformed where they
//! lie; lines along y and z are strided, so they are copied a block of [`BLOCK`] neighbouring
//! lines at a time into a small buffer that stays in cache, transformed there, and written to
//! their next layout (see [`super::slabs`]), which doubles as packing for the transpose.

use std::sync::Arc;

use fastmp::Comm;
use num_complex::Complex64;
use rustfft::{Fft, FftDirection, FftPlanner};

use super::slabs::{RowMap, Slabs};

/// Neighbouring strided lines moved and transformed together: wide enough that every copy
/// moves whole cache lines, small enough that the lines stay in L1/L2.
const BLOCK: usize = 16;

/// Padding between the lines of the block buffer, so lines a power of two long do not all map
/// to the same cache sets.
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

    fn all(&self) -> [&Arc<dyn Fft<f64>>; 3] {
        [&self.x, &self.y, &self.z]
    }
}

/// The two buffers of the global transpose: the space side writes `outgoing`, [`exchange`]
/// moves it, the frequency side reads `incoming` (and the other way round). On one rank the
/// transpose is the identity, so both sides share one buffer.
///
/// [`exchange`]: Transit::exchange
pub(crate) struct Transit {
    outgoing: Vec<Complex64>,
    incoming: Option<Vec<Complex64>>,
}

impl Transit {
    pub fn new(slabs: &Slabs) -> Self {
        let buffer = || vec![Complex64::default(); slabs.local_len()];
        Transit { outgoing: buffer(), incoming: (slabs.np > 1).then(buffer) }
    }

    /// Block `c` of every rank's outgoing buffer becomes block `rank` of rank `c`'s incoming one.
    fn exchange(&mut self, world: &Comm) -> fastmp::Result<()> {
        match &mut self.incoming {
            Some(incoming) => world.alltoall(&self.outgoing, incoming),
            None => Ok(()),
        }
    }

    fn incoming(&mut self) -> &mut [Complex64] {
        self.incoming.as_mut().unwrap_or(&mut self.outgoing)
    }
}

/// Plans and working buffers of one rank's share of the 3-D transforms; they allocate nothing
/// once built.
pub(crate) struct Fft3d {
    slabs: Slabs,
    forward: AxisPlans,
    inverse: AxisPlans,
    space_rows: RowMap,
    transit_rows: RowMap,
    /// [`BLOCK`] lines of the longest axis, `pitch` apart.
    lines: Vec<Complex64>,
    pitch: usize,
    scratch: Vec<Complex64>,
}

impl Fft3d {
    pub fn new(slabs: Slabs) -> Self {
        let mut planner = FftPlanner::new();
        let forward = AxisPlans::new(&mut planner, &slabs, Direction::Forward);
        let inverse = AxisPlans::new(&mut planner, &slabs, Direction::Inverse);
        let scratch_len = [&forward, &inverse]
            .iter()
            .flat_map(|plans| plans.all())
            .map(|fft| {
                fft.get_inplace_scratch_len().max(fft.get_outofplace_scratch_len()).max(fft.get_immutable_scratch_len())
            })
            .max()
            .unwrap_or(0);
        let pitch = slabs.nx.max(slabs.ny).max(slabs.nz) + PAD;
        Fft3d {
            slabs,
            forward,
            inverse,
            space_rows: slabs.space_rows(),
            transit_rows: slabs.transit_rows(),
            lines: vec![Complex64::default(); BLOCK * pitch],
            pitch,
            scratch: vec![Complex64::default(); scratch_len],
        }
    }

    /// NPB's forward transform of `space` into `frequency` (collective). `space` is left
    /// partly transformed.
    pub fn forward(
        &mut self,
        world: &Comm,
        space: &mut [Complex64],
        transit: &mut Transit,
        frequency: &mut [Complex64],
    ) -> fastmp::Result<()> {
        self.planes(Direction::Forward, space, &mut transit.outgoing, true);
        transit.exchange(world)?;
        self.z_lines_forward(transit.incoming(), frequency);
        Ok(())
    }

    /// NPB's inverse transform of `frequency` into `space` (collective). Before its z-line at
    /// (global y, x) is transformed, `prepare(y, x, line)` may update it in place: the caller's
    /// pass over the spectrum rides on the transform's.
    pub fn inverse(
        &mut self,
        world: &Comm,
        frequency: &mut [Complex64],
        transit: &mut Transit,
        space: &mut [Complex64],
        prepare: impl FnMut(usize, usize, &mut [Complex64]),
    ) -> fastmp::Result<()> {
        self.z_lines_inverse(frequency, &mut transit.outgoing, prepare);
        transit.exchange(world)?;
        self.planes(Direction::Inverse, transit.incoming(), space, false);
        Ok(())
    }

    /// The x and y transforms of every plane, from `src` (whose x-rows are transformed in
    /// place) into `dst`. Forward goes from the space layout to the outgoing one, inverse from
    /// the incoming one (which is laid out as outgoing) to space.
    fn planes(&mut self, direction: Direction, src: &mut [Complex64], dst: &mut [Complex64], from_space: bool) {
        let Slabs { nx, ny, .. } = self.slabs;
        let plans = match direction {
            Direction::Forward => &self.forward,
            Direction::Inverse => &self.inverse,
        };
        let (src_rows, dst_rows) =
            if from_space { (&self.space_rows, &self.transit_rows) } else { (&self.transit_rows, &self.space_rows) };
        let scratch = &mut self.scratch;
        let pitch = self.pitch;
        for plane in 0..self.slabs.planes() {
            for run in src_rows.runs(plane) {
                plans.x.process_with_scratch(&mut src[run], scratch);
            }
            for x0 in (0..nx).step_by(BLOCK) {
                let width = BLOCK.min(nx - x0);
                let lines = &mut self.lines[..width * pitch];
                for (y, start) in src_rows.rows(plane).enumerate() {
                    for (b, &value) in src[start + x0..start + x0 + width].iter().enumerate() {
                        lines[b * pitch + y] = value;
                    }
                }
                for line in lines.chunks_exact_mut(pitch) {
                    plans.y.process_with_scratch(&mut line[..ny], scratch);
                }
                for (y, start) in dst_rows.rows(plane).enumerate() {
                    for (b, slot) in dst[start + x0..start + x0 + width].iter_mut().enumerate() {
                        *slot = lines[b * pitch + y];
                    }
                }
            }
        }
    }

    /// The forward z transforms: z-lines gathered from the incoming layout, transformed into
    /// the frequency layout.
    fn z_lines_forward(&mut self, incoming: &[Complex64], frequency: &mut [Complex64]) {
        let Slabs { nx, nz, .. } = self.slabs;
        let z_stride = self.slabs.rows() * nx;
        let pitch = self.pitch;
        for (row, row_out) in frequency.chunks_exact_mut(nx * nz).enumerate() {
            for x0 in (0..nx).step_by(BLOCK) {
                let width = BLOCK.min(nx - x0);
                let lines = &mut self.lines[..width * pitch];
                let first = row * nx + x0;
                for (z, plane) in incoming[first..].chunks(z_stride).take(nz).enumerate() {
                    for (b, &value) in plane[..width].iter().enumerate() {
                        lines[b * pitch + z] = value;
                    }
                }
                let out = &mut row_out[x0 * nz..(x0 + width) * nz];
                for (line, line_out) in lines.chunks_exact_mut(pitch).zip(out.chunks_exact_mut(nz)) {
                    self.forward.z.process_outofplace_with_scratch(&mut line[..nz], line_out, &mut self.scratch);
                }
            }
        }
    }

    /// The inverse z transforms: each z-line of `frequency` prepared in place, transformed
    /// into the block buffer and scattered into the outgoing layout.
    fn z_lines_inverse(
        &mut self,
        frequency: &mut [Complex64],
        outgoing: &mut [Complex64],
        mut prepare: impl FnMut(usize, usize, &mut [Complex64]),
    ) {
        let Slabs { nx, nz, .. } = self.slabs;
        let z_stride = self.slabs.rows() * nx;
        let first_row = self.slabs.first_row();
        let pitch = self.pitch;
        for (row, row_in) in frequency.chunks_exact_mut(nx * nz).enumerate() {
            for x0 in (0..nx).step_by(BLOCK) {
                let width = BLOCK.min(nx - x0);
                let lines = &mut self.lines[..width * pitch];
                let input = &mut row_in[x0 * nz..(x0 + width) * nz];
                for (b, (line_in, line)) in input.chunks_exact_mut(nz).zip(lines.chunks_exact_mut(pitch)).enumerate() {
                    prepare(first_row + row, x0 + b, line_in);
                    self.inverse.z.process_immutable_with_scratch(line_in, &mut line[..nz], &mut self.scratch);
                }
                let first = row * nx + x0;
                for (z, plane) in outgoing[first..].chunks_mut(z_stride).take(nz).enumerate() {
                    for (b, slot) in plane[..width].iter_mut().enumerate() {
                        *slot = lines[b * pitch + z];
                    }
                }
            }
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
                let mut space = space_of(&slabs);
                let mut frequency = vec![Complex64::default(); slabs.local_len()];
                fft.forward(&world, &mut space, &mut transit, &mut frequency)?;
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
                let mut space = original.clone();
                let mut frequency = vec![Complex64::default(); slabs.local_len()];
                fft.forward(&world, &mut space, &mut transit, &mut frequency)?;
                let mut prepared = 0;
                fft.inverse(&world, &mut frequency, &mut transit, &mut space, |_, _, _| prepared += 1)?;
                assert_eq!(prepared, slabs.local_len() / DIMS[2], "every z-line is prepared once");
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
