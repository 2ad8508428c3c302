//! MG's four grid operators on one rank's block, all 27-point stencils whose coefficients
//! depend only on how far a neighbour lies (centre, face, edge, corner): the residual
//! `r = v − A u`, the smoother `u += S r`, the restriction `P` and the prolongation `Q`.
//!
//! Each walks rows in x. Per row it first sums the row's neighbours across y and z into two
//! scratch rows (faces: the four rows one step away; corners: the four rows one step away
//! in both y and z); the x-neighbours of those sums then give every distance class with a
//! few additions per point, and the inner loops run over contiguous slices.
//!
//! Every operator also comes one z-plane at a time, so that a caller can run several in one
//! sweep over the planes. Those that write interior points wrap the ghosts of the axes the
//! caller says the rank holds whole, as soon as a row or plane is written; the caller
//! exchanges the rest. The prolongation writes the ghosts as well.

use std::ops::Range;

use super::field::Field;
use super::layout::AXES;

/// The Poisson operator A: NPB's coefficients have no face term.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Operator {
    pub center: f64,
    pub edge: f64,
    pub corner: f64,
}

/// The smoother S, an approximate inverse of A: NPB's coefficients have no corner term.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Smoother {
    pub center: f64,
    pub face: f64,
    pub edge: f64,
}

/// Row buffers for the neighbour sums, long enough for the longest row of a run.
pub struct Scratch {
    faces: Vec<f64>,
    corners: Vec<f64>,
}

impl Scratch {
    pub fn new(row_len: usize) -> Self {
        Scratch { faces: vec![0.0; row_len], corners: vec![0.0; row_len] }
    }

    /// The neighbour sums of row `(y, z)` of `src`, over its whole length (ghosts included).
    fn sum_neighbours(&mut self, src: &Field, y: usize, z: usize) -> (&[f64], &[f64]) {
        let len = src.row_len();
        let (faces, corners) = (&mut self.faces[..len], &mut self.corners[..len]);
        let (south, north) = (&src.row(y - 1, z)[..len], &src.row(y + 1, z)[..len]);
        let (below, above) = (&src.row(y, z - 1)[..len], &src.row(y, z + 1)[..len]);
        let (sb, nb) = (&src.row(y - 1, z - 1)[..len], &src.row(y + 1, z - 1)[..len]);
        let (sa, na) = (&src.row(y - 1, z + 1)[..len], &src.row(y + 1, z + 1)[..len]);
        for i in 0..len {
            faces[i] = south[i] + north[i] + below[i] + above[i];
            corners[i] = sb[i] + nb[i] + sa[i] + na[i];
        }
        (faces, corners)
    }
}

/// Where the residual's right-hand side comes from.
#[derive(Clone, Copy)]
pub enum Rhs<'a> {
    /// `r = v − A u` for this `v`.
    Given(&'a Field),
    /// `r = r − A u`: the output holds the right-hand side already.
    InPlace,
}

/// Computes the interior rows of z-plane `z` of `out` with `row(y, row)`, and wraps the
/// ghosts of its first `wrapped` axes as soon as their data is written: the x-ghosts of each
/// row, then the y-ghost rows of the plane, and the z-ghost plane a first or last plane
/// stands for.
fn write_plane(out: &mut Field, z: usize, wrapped: usize, mut row: impl FnMut(usize, &mut [f64])) {
    let [_, ny, nz] = out.extent();
    for y in 1..=ny {
        row(y, out.row_mut(y, z));
        if wrapped >= 1 {
            out.wrap_row(y, z);
        }
    }
    if wrapped >= 2 {
        out.wrap_plane(z);
    }
    if wrapped >= 3 {
        if z == 1 {
            out.copy_plane(1, nz + 1);
        }
        if z == nz {
            out.copy_plane(nz, 0);
        }
    }
}

/// `r = rhs − A u` on the interior of `r`, wrapping the first `wrapped` axes' ghosts.
/// Returns the sum of the squares of the new values.
pub fn residual(a: &Operator, u: &Field, rhs: Rhs, r: &mut Field, wrapped: usize, scratch: &mut Scratch) -> f64 {
    (1..=u.extent()[2]).map(|z| residual_plane(a, u, rhs, r, z, wrapped, scratch)).sum()
}

/// [`residual`] on z-plane `z` alone: it reads planes `z − 1 ..= z + 1` of `u`.
pub fn residual_plane(
    a: &Operator,
    u: &Field,
    rhs: Rhs,
    r: &mut Field,
    z: usize,
    wrapped: usize,
    scratch: &mut Scratch,
) -> f64 {
    let nx = u.extent()[0];
    let mut sum_of_squares = 0.0;
    write_plane(r, z, wrapped, |y, out| {
        let (faces, corners) = scratch.sum_neighbours(u, y, z);
        let centre = &u.row(y, z)[..nx + 2];
        let (faces, corners) = (&faces[..nx + 2], &corners[..nx + 2]);
        let apply = |i: usize| {
            a.center * centre[i + 1]
                + a.edge * (corners[i + 1] + faces[i] + faces[i + 2])
                + a.corner * (corners[i] + corners[i + 2])
        };
        let out = &mut out[1..=nx];
        match rhs {
            Rhs::Given(v) => {
                let v = &v.row(y, z)[1..=nx];
                for i in 0..nx {
                    out[i] = v[i] - apply(i);
                }
            }
            Rhs::InPlace => {
                for (i, out) in out.iter_mut().enumerate() {
                    *out -= apply(i);
                }
            }
        }
        sum_of_squares += sum_of_squares_of(out);
    });
    sum_of_squares
}

/// `Σ x²`, in four interleaved sums so it vectorizes.
fn sum_of_squares_of(values: &[f64]) -> f64 {
    let mut lanes = [0.0; 4];
    let mut chunks = values.chunks_exact(4);
    for chunk in &mut chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane += x * x;
        }
    }
    let tail: f64 = chunks.remainder().iter().map(|x| x * x).sum();
    lanes.iter().sum::<f64>() + tail
}

/// `u = u + S r` on the interior of `u`, wrapping the first `wrapped` axes' ghosts.
pub fn smooth(s: &Smoother, r: &Field, u: &mut Field, wrapped: usize, scratch: &mut Scratch) {
    for z in 1..=r.extent()[2] {
        smooth_plane(s, r, u, z, wrapped, scratch);
    }
}

/// [`smooth`] on z-plane `z` alone: it reads planes `z − 1 ..= z + 1` of `r`.
pub fn smooth_plane(s: &Smoother, r: &Field, u: &mut Field, z: usize, wrapped: usize, scratch: &mut Scratch) {
    let nx = r.extent()[0];
    write_plane(u, z, wrapped, |y, out| {
        let (faces, corners) = scratch.sum_neighbours(r, y, z);
        let centre = &r.row(y, z)[..nx + 2];
        let (faces, corners) = (&faces[..nx + 2], &corners[..nx + 2]);
        for (i, out) in out[1..=nx].iter_mut().enumerate() {
            *out += s.center * centre[i + 1]
                + s.face * (centre[i] + centre[i + 2] + faces[i + 1])
                + s.edge * (corners[i + 1] + faces[i] + faces[i + 2]);
        }
    });
}

/// The restriction `P` into the interior of `coarse` (half `fine`'s extent), wrapping the
/// first `wrapped` axes' ghosts: each coarse point is the trilinear-weighted average of the
/// 27 fine points around its fine twin (weights 1/2, 1/4, 1/8, 1/16 by distance class).
/// Coarse array index `j` sits on fine array index `2j`.
pub fn restrict(fine: &Field, coarse: &mut Field, wrapped: usize, scratch: &mut Scratch) {
    for jz in 1..=coarse.extent()[2] {
        restrict_plane(fine, coarse, jz, wrapped, scratch);
    }
}

/// [`restrict`] onto coarse z-plane `jz` alone: it reads fine planes `2jz − 1 ..= 2jz + 1`.
pub fn restrict_plane(fine: &Field, coarse: &mut Field, jz: usize, wrapped: usize, scratch: &mut Scratch) {
    let len = fine.row_len();
    debug_assert_eq!(coarse.extent(), fine.extent().map(|n| n / 2));
    write_plane(coarse, jz, wrapped, |jy, out| {
        let (faces, corners) = scratch.sum_neighbours(fine, 2 * jy, 2 * jz);
        let centre = &fine.row(2 * jy, 2 * jz)[..len];
        let (faces, corners) = (&faces[..len], &corners[..len]);
        let out = &mut out[1..=(len - 2) / 2];
        for (j, out) in out.iter_mut().enumerate() {
            let f = 2 * j + 2;
            *out = 0.5 * centre[f]
                + 0.25 * (centre[f - 1] + centre[f + 1] + faces[f])
                + 0.125 * (faces[f - 1] + faces[f + 1] + corners[f])
                + 0.0625 * (corners[f - 1] + corners[f + 1]);
        }
    });
}

/// Whether the prolongation replaces the fine values or adds to them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prolong {
    Assign,
    Add,
}

/// The prolongation `Q`: trilinear interpolation of the coarse field onto the whole fine
/// block, ghosts included, so it needs no exchange after it (the coarse ghosts and, to add,
/// the fine ghosts must be current). A fine point at an even array index along an axis lies
/// on a coarse point (`2j` on `j`); at an odd one it lies midway between two. `window` is
/// the array-index shift of this rank's part of `coarse` (non-zero where `coarse` is the
/// whole level and `fine` a block of it).
pub fn prolong(coarse: &Field, window: [usize; AXES], fine: &mut Field, mode: Prolong, scratch: &mut Scratch) {
    for fz in 0..=fine.extent()[2] + 1 {
        prolong_plane(coarse, window, fine, fz, mode, scratch);
    }
}

/// [`prolong`] onto fine z-plane `fz` alone (a ghost plane too).
pub fn prolong_plane(
    coarse: &Field,
    window: [usize; AXES],
    fine: &mut Field,
    fz: usize,
    mode: Prolong,
    scratch: &mut Scratch,
) {
    let [nx, ny, _] = fine.extent();
    let mx = nx / 2;
    let line = &mut scratch.faces[..mx + 2];
    let (zs, wz) = coarse_twins(fz, window[2]);
    for fy in 0..=ny + 1 {
        let (ys, wy) = coarse_twins(fy, window[1]);
        // The coarse row interpolated to (fy, fz) in y and z, still coarse in x.
        line.fill(0.0);
        for cz in zs.clone() {
            for cy in ys.clone() {
                let row = &coarse.row(cy, cz)[window[0]..window[0] + mx + 2];
                for (l, &c) in line.iter_mut().zip(row) {
                    *l += c;
                }
            }
        }
        let weight = wy * wz;
        let half = 0.5 * weight;
        let out = fine.row_mut(fy, fz);
        let put = |slot: &mut f64, value: f64| match mode {
            Prolong::Assign => *slot = value,
            Prolong::Add => *slot += value,
        };
        // Fine 0 lies on coarse 0, fine 2j+1 between coarse j and j+1, fine 2j+2 on j+1.
        put(&mut out[0], weight * line[0]);
        for (pair, c) in out[1..=nx].chunks_exact_mut(2).zip(line.windows(2)) {
            put(&mut pair[0], half * (c[0] + c[1]));
            put(&mut pair[1], weight * c[1]);
        }
        put(&mut out[nx + 1], half * (line[mx] + line[mx + 1]));
    }
}

/// The coarse array indices a fine array index `f` interpolates from along one axis, shifted
/// by `shift`, and the weight of each: the one it lies on, or the two it lies between.
fn coarse_twins(f: usize, shift: usize) -> (Range<usize>, f64) {
    let first = shift + f / 2;
    if f.is_multiple_of(2) { (first..first + 1, 1.0) } else { (first..first + 2, 0.5) }
}

#[cfg(test)]
mod tests {
    //! Each operator against its definition written point by point on a whole periodic grid.

    use super::*;
    use crate::random::{A, vranlc};

    /// A periodic grid of `n³` values, x fastest, indexed by wrapping global coordinates.
    struct Global {
        n: usize,
        values: Vec<f64>,
    }

    impl Global {
        fn random(n: usize, seed: f64) -> Self {
            let mut values = vec![0.0; n * n * n];
            vranlc(&mut seed.clone(), A, &mut values);
            values.iter_mut().for_each(|v| *v -= 0.5);
            Global { n, values }
        }

        fn get(&self, p: [isize; 3]) -> f64 {
            let n = self.n as isize;
            let [x, y, z] = p.map(|c| c.rem_euclid(n) as usize);
            self.values[x + self.n * (y + self.n * z)]
        }

        /// The block of `extent` points at global `offset`, its ghosts filled periodically.
        fn block(&self, offset: [usize; 3], extent: [usize; 3]) -> Field {
            let mut f = Field::new(extent);
            for z in 0..extent[2] + 2 {
                for y in 0..extent[1] + 2 {
                    for x in 0..extent[0] + 2 {
                        let g = [0, 1, 2].map(|a| [x, y, z][a] as isize - 1 + offset[a] as isize);
                        f.set(x, y, z, self.get(g));
                    }
                }
            }
            f
        }

        fn whole(&self) -> Field {
            self.block([0; 3], [self.n; 3])
        }

        /// `Σ_d coefficient[|d|₁] · value(p + d)` over the 27 offsets `d`.
        fn stencil(&self, p: [isize; 3], coefficients: [f64; 4]) -> f64 {
            let mut sum = 0.0;
            for dz in -1..=1isize {
                for dy in -1..=1isize {
                    for dx in -1..=1isize {
                        let class = (dx.abs() + dy.abs() + dz.abs()) as usize;
                        sum += coefficients[class] * self.get([p[0] + dx, p[1] + dy, p[2] + dz]);
                    }
                }
            }
            sum
        }
    }

    /// Every point of `f` (a block at global `offset`) against `expected(global)`: the
    /// interior, and with `ghosts` the ghost layer too (periodic images).
    fn assert_points(f: &Field, offset: [usize; 3], ghosts: bool, expected: impl Fn([isize; 3]) -> f64) {
        let [nx, ny, nz] = f.extent();
        let range = |n: usize| if ghosts { 0..=n + 1 } else { 1..=n };
        for z in range(nz) {
            for y in range(ny) {
                for x in range(nx) {
                    let g = [0, 1, 2].map(|a| [x, y, z][a] as isize - 1 + offset[a] as isize);
                    let (got, want) = (f.at(x, y, z), expected(g));
                    assert!((got - want).abs() < 1e-13, "at {g:?}: {got} != {want}");
                }
            }
        }
    }

    const N: usize = 8;

    #[test]
    fn residual_is_v_minus_a_u() {
        let (u, v) = (Global::random(N, 11.0), Global::random(N, 13.0));
        let a = Operator { center: -8.0 / 3.0, edge: 1.0 / 6.0, corner: 1.0 / 12.0 };
        let coefficients = [a.center, 0.0, a.edge, a.corner];
        let expected = |g| v.get(g) - u.stencil(g, coefficients);
        let mut scratch = Scratch::new(N + 2);

        let mut r = Field::new([N; 3]);
        let sum_of_squares = residual(&a, &u.whole(), Rhs::Given(&v.whole()), &mut r, 0, &mut scratch);
        assert_points(&r, [0; 3], false, expected);
        let all = (0..N * N * N).map(|i| [i % N, i / N % N, i / (N * N)].map(|c| c as isize));
        let expected_sum: f64 = all.map(|g| expected(g).powi(2)).sum();
        assert!((sum_of_squares - expected_sum).abs() < 1e-12 * expected_sum);

        let mut in_place = v.whole();
        residual(&a, &u.whole(), Rhs::InPlace, &mut in_place, 3, &mut scratch);
        assert_points(&in_place, [0; 3], true, expected);
    }

    #[test]
    fn smooth_adds_s_r() {
        let (u, r) = (Global::random(N, 17.0), Global::random(N, 19.0));
        let s = Smoother { center: -3.0 / 8.0, face: 1.0 / 32.0, edge: -1.0 / 64.0 };
        let mut out = u.whole();
        smooth(&s, &r.whole(), &mut out, 3, &mut Scratch::new(N + 2));
        assert_points(&out, [0; 3], true, |g| u.get(g) + r.stencil(g, [s.center, s.face, s.edge, 0.0]));
    }

    /// Coarse point `J` sits on fine point `2J + 1` (global, 0-based).
    fn restricted(fine: &Global, g: [isize; 3]) -> f64 {
        fine.stencil(g.map(|c| 2 * c + 1), [0.5, 0.25, 0.125, 0.0625])
    }

    #[test]
    fn restriction_averages_around_the_fine_twin() {
        let fine = Global::random(N, 23.0);
        let mut coarse = Field::new([N / 2; 3]);
        restrict(&fine.whole(), &mut coarse, 3, &mut Scratch::new(N + 2));
        assert_points(&coarse, [0; 3], true, |g| restricted(&fine, g));
    }

    #[test]
    fn a_block_restricts_to_its_coarse_block() {
        let fine = Global::random(N, 29.0);
        let (offset, extent) = ([0, N / 2, N / 2], [N, N / 2, N / 2]);
        let mut coarse = Field::new(extent.map(|e| e / 2));
        restrict(&fine.block(offset, extent), &mut coarse, 0, &mut Scratch::new(N + 2));
        assert_points(&coarse, offset.map(|o| o / 2), false, |g| restricted(&fine, g));
    }

    /// Trilinear interpolation: a fine point `2J + 1` takes coarse `J`; `2J` the mean of
    /// `J − 1` and `J`, along each axis.
    fn interpolated(coarse: &Global, g: [isize; 3]) -> f64 {
        let twins = g.map(|c| if c % 2 != 0 { vec![(c - 1) / 2] } else { vec![c / 2 - 1, c / 2] });
        let mut sum = 0.0;
        for &z in &twins[2] {
            for &y in &twins[1] {
                for &x in &twins[0] {
                    sum += coarse.get([x, y, z]);
                }
            }
        }
        sum / twins.iter().map(Vec::len).product::<usize>() as f64
    }

    #[test]
    fn prolongation_interpolates_trilinearly() {
        let (coarse, u) = (Global::random(N / 2, 31.0), Global::random(N, 37.0));
        let mut scratch = Scratch::new(N + 2);
        let mut assigned = Field::new([N; 3]);
        prolong(&coarse.whole(), [0; 3], &mut assigned, Prolong::Assign, &mut scratch);
        assert_points(&assigned, [0; 3], true, |g| interpolated(&coarse, g));
        let mut added = u.whole();
        prolong(&coarse.whole(), [0; 3], &mut added, Prolong::Add, &mut scratch);
        assert_points(&added, [0; 3], true, |g| u.get(g) + interpolated(&coarse, g));
    }

    #[test]
    fn a_block_interpolates_from_its_window_of_the_whole_coarse_level() {
        let coarse = Global::random(N / 2, 41.0);
        let (offset, extent) = ([0, N / 2, N / 2], [N, N / 2, N / 2]);
        let mut fine = Field::new(extent);
        prolong(&coarse.whole(), offset.map(|o| o / 2), &mut fine, Prolong::Assign, &mut Scratch::new(N + 2));
        assert_points(&fine, offset, true, |g| interpolated(&coarse, g));
    }
}
