//! The inverse power method with conjugate-gradient inner solves, over row blocks of the
//! matrix: each rank owns a contiguous block of rows and the same rows of every vector.
//!
//! The only product, `q = A·p`, needs all of `p` on every rank, so the search direction lives
//! whole on each rank and its blocks are gathered (one allgatherv) after each update; dot
//! products are a local sum and one allreduce. Per CG iteration: one allgatherv of `n` values
//! and two allreduces of one value.

use std::ops::Range;

use fastmp::Comm;
use fastmp::op::Sum;

use super::csr::Csr;

/// Conjugate-gradient iterations per inner solve (NPB's `cgitmax`).
pub const CG_ITERATIONS: usize = 25;

/// Contiguous blocks of rows, one per rank, as even as `n` allows.
#[derive(Clone, Debug, PartialEq)]
pub struct RowBlocks {
    counts: Vec<usize>,
    starts: Vec<usize>,
}

impl RowBlocks {
    pub fn new(n: usize, ranks: usize) -> Self {
        let starts: Vec<usize> = (0..=ranks).map(|rank| rank * n / ranks).collect();
        let counts = starts.windows(2).map(|w| w[1] - w[0]).collect();
        RowBlocks { counts, starts }
    }

    /// The rows of `rank`.
    pub fn rows(&self, rank: usize) -> Range<usize> {
        self.starts[rank]..self.starts[rank + 1]
    }
}

/// One rank's share of the method: its rows of the matrix and of the vectors.
pub struct Solver<'w> {
    world: &'w Comm,
    matrix: Csr,
    blocks: RowBlocks,
    rows: Range<usize>,
    /// The whole search direction `p`; this rank updates `direction[rows]`.
    direction: Vec<f64>,
    /// This rank's rows of the power method's iterate `x`, the solution `z` of `A·z = x`, the
    /// residual `r` and the product `q = A·p`.
    x: Vec<f64>,
    z: Vec<f64>,
    r: Vec<f64>,
    q: Vec<f64>,
}

impl<'w> Solver<'w> {
    /// `matrix` holds this rank's rows of `blocks` (collective only in later calls).
    pub fn new(world: &'w Comm, matrix: Csr, blocks: RowBlocks) -> Self {
        let rows = blocks.rows(world.rank());
        assert_eq!(matrix.nrows(), rows.len(), "the matrix holds this rank's rows");
        let (n, m) = (matrix.ncols(), rows.len());
        Solver {
            world,
            matrix,
            blocks,
            rows,
            direction: vec![0.0; n],
            x: vec![1.0; m],
            z: vec![0.0; m],
            r: vec![0.0; m],
            q: vec![0.0; m],
        }
    }

    /// Starts the power method again from `x = (1, …, 1)`.
    pub fn reset(&mut self) {
        self.x.fill(1.0);
    }

    /// One step of the inverse power method: `z ≈ A⁻¹·x` by conjugate gradients, then
    /// `x = z / ‖z‖`. Returns the eigenvalue estimate `shift + 1 / (x·z)` (collective).
    pub fn power_step(&mut self, shift: f64) -> fastmp::Result<f64> {
        self.conjugate_gradient()?;
        let [xz, zz] = global_sum(self.world, [dot(&self.x, &self.z), dot(&self.z, &self.z)])?;
        let norm = 1.0 / zz.sqrt();
        for (x, z) in self.x.iter_mut().zip(&self.z) {
            *x = norm * z;
        }
        Ok(shift + 1.0 / xz)
    }

    /// Solves `A·z = x` approximately by [`CG_ITERATIONS`] iterations from `z = 0`; returns the
    /// residual norm `‖x − A·z‖`, which NPB computes (and times) though nothing checks it.
    fn conjugate_gradient(&mut self) -> fastmp::Result<f64> {
        self.z.fill(0.0);
        self.r.copy_from_slice(&self.x);
        self.direction[self.rows.clone()].copy_from_slice(&self.x);
        let [mut rho] = global_sum(self.world, [dot(&self.r, &self.r)])?;
        for _ in 0..CG_ITERATIONS {
            self.gather_direction()?;
            self.matrix.mul_vec(&self.direction, &mut self.q);
            let own_direction = &mut self.direction[self.rows.clone()];
            let [pq] = global_sum(self.world, [dot(own_direction, &self.q)])?;
            let alpha = rho / pq;
            let rho_before = rho;
            [rho] = global_sum(self.world, [step_solution(alpha, own_direction, &self.q, &mut self.z, &mut self.r)])?;
            let beta = rho / rho_before;
            for (p, r) in own_direction.iter_mut().zip(&self.r) {
                *p = r + beta * *p;
            }
        }
        // ‖x − A·z‖, with the direction's storage holding the whole z.
        self.direction[self.rows.clone()].copy_from_slice(&self.z);
        self.gather_direction()?;
        self.matrix.mul_vec(&self.direction, &mut self.q);
        let local: f64 = self.x.iter().zip(&self.q).map(|(x, az)| (x - az) * (x - az)).sum();
        let [squared] = global_sum(self.world, [local])?;
        Ok(squared.sqrt())
    }

    /// Fills the whole direction from every rank's block of it.
    fn gather_direction(&mut self) -> fastmp::Result<()> {
        self.world.allgatherv_in_place(
            &mut self.direction,
            &self.blocks.counts,
            &self.blocks.starts[..self.blocks.counts.len()],
        )
    }
}

/// Sums of local partial sums over all ranks, the same on every rank.
fn global_sum<const N: usize>(world: &Comm, local: [f64; N]) -> fastmp::Result<[f64; N]> {
    let mut total = [0.0; N];
    world.allreduce(&local, &mut total, Sum)?;
    Ok(total)
}

/// `z += α·p`, `r −= α·q`, returning this block's part of `r·r`: one pass over the four vectors.
fn step_solution(alpha: f64, p: &[f64], q: &[f64], z: &mut [f64], r: &mut [f64]) -> f64 {
    let mut rr = 0.0;
    for (((z, r), p), q) in z.iter_mut().zip(r.iter_mut()).zip(p).zip(q) {
        *z += alpha * p;
        *r -= alpha * q;
        rr += *r * *r;
    }
    rr
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_blocks_cover_the_rows_in_order() {
        for (n, ranks) in [(1400, 1), (1400, 4), (7, 4), (3, 8)] {
            let blocks = RowBlocks::new(n, ranks);
            assert_eq!(blocks.rows(0).start, 0);
            assert_eq!(blocks.rows(ranks - 1).end, n);
            for rank in 1..ranks {
                assert_eq!(blocks.rows(rank - 1).end, blocks.rows(rank).start);
                assert!(blocks.rows(rank).len().abs_diff(blocks.rows(0).len()) <= 1);
            }
            assert_eq!(blocks.counts.iter().sum::<usize>(), n);
        }
    }

    #[test]
    fn conjugate_gradient_solves_a_small_system() {
        // The 1-D Laplacian tridiag(-1, 2.5, -1) on 12 rows, split over 1, 2 and 4 ranks:
        // 25 iterations of CG solve it exactly (it has 12 distinct eigenvalues at most).
        let n = 12;
        let laplacian = |rows: Range<usize>| {
            let mut a = Csr::with_capacity(n, rows.len(), 3 * rows.len());
            for i in rows {
                let entries = [(i.wrapping_sub(1), -1.0), (i, 2.5), (i + 1, -1.0)];
                a.push_row(entries.into_iter().filter(|&(j, _)| j < n).map(|(j, v)| (j as u32, v)));
            }
            a
        };
        for ranks in [1, 2, 4] {
            let residuals = fastmp::run(ranks, |world| {
                let blocks = RowBlocks::new(n, ranks);
                let mut solver = Solver::new(&world, laplacian(blocks.rows(world.rank())), blocks);
                solver.conjugate_gradient()
            })
            .expect("job");
            assert!(residuals.iter().all(|&r| r < 1e-12 && r == residuals[0]), "{residuals:?} on {ranks} ranks");
        }
    }
}
