//! The inverse power method with conjugate-gradient inner solves, the matrix split in row
//! blocks: each rank multiplies its block of rows, and keeps every vector whole.
//!
//! The product `q = A·p` is the only work split over the ranks. Each rank publishes its rows of
//! `q` together with its part of `p·q` (one allgatherv of `n + np` values), and then every rank
//! updates the whole residual `r` and direction `p` itself, in the same order, so they stay the
//! same everywhere. A CG iteration thus waits on the other ranks once, at the price of `O(n)`
//! vector work repeated on every rank (small next to the product's `O(nonzeros / np)`);
//! splitting the vectors too would need a second wait for `r·r`, and a third to gather `p`.
//! Only the solution `z` is kept by rows (each rank adds to its own), and gathered at the end.

use std::ops::Range;

use fastmp::Comm;
use fastmp::op::Sum;

use super::csr::Csr;
use super::sums::{Lanes, dot};

/// Conjugate-gradient iterations per inner solve (NPB's `cgitmax`).
pub const CG_ITERATIONS: usize = 25;

/// Contiguous blocks of rows, one per rank, as even as `n` allows.
#[derive(Clone, Debug, PartialEq)]
pub struct RowBlocks {
    counts: Vec<usize>,
    /// Where each block starts, and `n` last.
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

    fn ranks(&self) -> usize {
        self.counts.len()
    }

    /// Fills the whole of `vector` on every rank from each rank's own block (collective).
    fn gather(&self, world: &Comm, vector: &mut [f64]) -> fastmp::Result<()> {
        world.allgatherv_in_place(vector, &self.counts, &self.starts[..self.ranks()])
    }
}

/// A vector split in row blocks as every rank sees it once published: block by block, each
/// followed by one number its rank adds to it (its part of a dot product).
struct Published {
    values: Vec<f64>,
    counts: Vec<usize>,
    displs: Vec<usize>,
    rank: usize,
}

impl Published {
    fn new(blocks: &RowBlocks, rank: usize) -> Self {
        let counts: Vec<usize> = blocks.counts.iter().map(|count| count + 1).collect();
        let displs: Vec<usize> = (0..blocks.ranks()).map(|k| blocks.starts[k] + k).collect();
        let values = vec![0.0; blocks.starts[blocks.ranks()] + blocks.ranks()];
        Published { values, counts, displs, rank }
    }

    /// This rank's block and its number.
    fn own(&mut self) -> (&mut [f64], &mut f64) {
        let own = &mut self.values[self.displs[self.rank]..][..self.counts[self.rank]];
        let (block, number) = own.split_at_mut(own.len() - 1);
        (block, &mut number[0])
    }

    /// Shares every rank's block and number with all (collective); returns the numbers' sum,
    /// added in rank order so that it is the same on every rank.
    fn share(&mut self, world: &Comm) -> fastmp::Result<f64> {
        world.allgatherv_in_place(&mut self.values, &self.counts, &self.displs)?;
        Ok(self.displs.iter().zip(&self.counts).map(|(displ, count)| self.values[displ + count - 1]).sum())
    }

    /// The blocks in order: together, the whole vector.
    fn blocks(&self) -> impl Iterator<Item = &[f64]> {
        self.displs.iter().zip(&self.counts).map(|(&displ, &count)| &self.values[displ..][..count - 1])
    }
}

/// What a step of the power method found, the same on every rank.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PowerStep {
    /// The eigenvalue estimate `shift + 1 / (x·z)`.
    pub zeta: f64,
    /// `‖x − A·z‖`, how well CG solved: NPB computes (and times) it, though nothing checks it.
    pub residual: f64,
}

/// One rank's share of the method: its rows of the matrix, and the vectors.
pub struct Solver<'w> {
    world: &'w Comm,
    matrix: Csr,
    blocks: RowBlocks,
    rows: Range<usize>,
    /// The power method's iterate `x`, the residual `r` and the search direction `p`: whole,
    /// and the same on every rank.
    x: Vec<f64>,
    r: Vec<f64>,
    p: Vec<f64>,
    /// The solution `z` of `A·z = x`: this rank's rows during the solve, whole after it.
    z: Vec<f64>,
    /// `q = A·p` (then `A·z`) as published.
    q: Published,
}

impl<'w> Solver<'w> {
    /// `matrix` holds this rank's rows of `blocks` (collective only in later calls).
    pub fn new(world: &'w Comm, matrix: Csr, blocks: RowBlocks) -> Self {
        let rows = blocks.rows(world.rank());
        assert_eq!(matrix.nrows(), rows.len(), "the matrix holds this rank's rows");
        let n = matrix.ncols();
        let q = Published::new(&blocks, world.rank());
        Solver { world, matrix, blocks, rows, x: vec![1.0; n], r: vec![0.0; n], p: vec![0.0; n], z: vec![0.0; n], q }
    }

    /// Starts the power method again from `x = (1, …, 1)`.
    pub fn reset(&mut self) {
        self.x.fill(1.0);
    }

    /// One step of the inverse power method: `z ≈ A⁻¹·x` by conjugate gradients, then
    /// `x = z / ‖z‖` (collective).
    pub fn power_step(&mut self, shift: f64) -> fastmp::Result<PowerStep> {
        self.conjugate_gradient()?;
        self.blocks.gather(self.world, &mut self.z)?;
        let (az, _) = self.q.own();
        self.matrix.mul_vec(&self.z, az);
        let (x, z) = (&self.x[self.rows.clone()], &self.z[self.rows.clone()]);
        let misfit: f64 = x.iter().zip(az.iter()).map(|(x, az)| (x - az) * (x - az)).sum();
        let [misfit, xz, zz] = global_sum(self.world, [misfit, dot(x, z), dot(z, z)])?;
        let norm = 1.0 / zz.sqrt();
        for (x, z) in self.x.iter_mut().zip(&self.z) {
            *x = norm * z;
        }
        Ok(PowerStep { zeta: shift + 1.0 / xz, residual: misfit.sqrt() })
    }

    /// Solves `A·z = x` approximately by [`CG_ITERATIONS`] iterations from `z = 0`, leaving this
    /// rank's rows of `z`.
    fn conjugate_gradient(&mut self) -> fastmp::Result<()> {
        self.z.fill(0.0);
        self.r.copy_from_slice(&self.x);
        self.p.copy_from_slice(&self.x);
        let mut rho = dot(&self.r, &self.r);
        for _ in 0..CG_ITERATIONS {
            let (q, pq) = self.q.own();
            self.matrix.mul_vec(&self.p, q);
            let p = &self.p[self.rows.clone()];
            *pq = dot(p, q);
            let alpha = rho / self.q.share(self.world)?;
            for (z, p) in self.z[self.rows.clone()].iter_mut().zip(p) {
                *z += alpha * p;
            }
            let rho_before = rho;
            rho = self.step_residual(alpha);
            let beta = rho / rho_before;
            for (p, r) in self.p.iter_mut().zip(&self.r) {
                *p = r + beta * *p;
            }
        }
        Ok(())
    }

    /// `r −= α·q` over the whole published `q`; returns the new `r·r`.
    fn step_residual(&mut self, alpha: f64) -> f64 {
        let mut rr = Lanes::default();
        let mut rest = self.r.as_mut_slice();
        for q in self.q.blocks() {
            let (r, tail) = rest.split_at_mut(q.len());
            rest = tail;
            let body = q.len() / 4 * 4;
            let ((r, r_tail), (q, q_tail)) = (r.split_at_mut(body), q.split_at(body));
            for (r, q) in r.chunks_exact_mut(4).zip(q.chunks_exact(4)) {
                for lane in 0..4 {
                    r[lane] -= alpha * q[lane];
                }
                rr.add([r[0] * r[0], r[1] * r[1], r[2] * r[2], r[3] * r[3]]);
            }
            for (r, q) in r_tail.iter_mut().zip(q_tail) {
                *r -= alpha * q;
                rr.add_one(*r * *r);
            }
        }
        rr.total()
    }
}

/// Sums of local partial sums over all ranks, the same on every rank.
fn global_sum<const N: usize>(world: &Comm, local: [f64; N]) -> fastmp::Result<[f64; N]> {
    let mut total = [0.0; N];
    world.allreduce(&local, &mut total, Sum)?;
    Ok(total)
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
    fn published_blocks_reach_every_rank_with_their_sum() {
        // 7 rows over 4 ranks: blocks of 1, 2, 2 and 2 rows.
        let (n, ranks) = (7, 4);
        let seen = fastmp::run(ranks, |world| {
            let blocks = RowBlocks::new(n, ranks);
            let mut published = Published::new(&blocks, world.rank());
            let rows = blocks.rows(world.rank());
            let (block, number) = published.own();
            for (value, row) in block.iter_mut().zip(rows) {
                *value = row as f64;
            }
            *number = 10.0 * (world.rank() + 1) as f64;
            let sum = published.share(&world)?;
            Ok((sum, published.blocks().flatten().copied().collect::<Vec<f64>>()))
        })
        .expect("job");
        for (sum, whole) in seen {
            assert_eq!(sum, 100.0);
            assert_eq!(whole, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        }
    }

    #[test]
    fn a_power_step_solves_a_small_system() {
        // tridiag(-1, 2.5, -1) on 12 rows, split over 1, 2 and 4 ranks: 25 CG iterations solve
        // it exactly (it has 12 eigenvalues), so zeta is shift + 1 / (1·A⁻¹1) from x = 1.
        let n = 12;
        let laplacian = |rows: Range<usize>| {
            let mut a = Csr::with_capacity(n, rows.len(), 3 * rows.len());
            for i in rows {
                let entries = [(i.wrapping_sub(1), -1.0), (i, 2.5), (i + 1, -1.0)];
                a.push_row(entries.into_iter().filter(|&(j, _)| j < n).map(|(j, v)| (j as u32, v)));
            }
            a
        };
        let expected = 7.0 + 1.0 / solve_tridiagonal(n, -1.0, 2.5).iter().sum::<f64>();
        for ranks in [1, 2, 4] {
            let steps = fastmp::run(ranks, |world| {
                let blocks = RowBlocks::new(n, ranks);
                let mut solver = Solver::new(&world, laplacian(blocks.rows(world.rank())), blocks);
                solver.power_step(7.0)
            })
            .expect("job");
            assert!(steps.iter().all(|s| s == &steps[0]), "ranks disagree: {steps:?}");
            assert!(steps[0].residual < 1e-12, "{steps:?} on {ranks} ranks");
            assert!((steps[0].zeta - expected).abs() < 1e-12, "{steps:?} on {ranks} ranks, expected {expected}");
        }
    }

    /// `A·z = 1` for the symmetric tridiagonal `A = tridiag(off, diagonal, off)`, by elimination.
    fn solve_tridiagonal(n: usize, off: f64, diagonal: f64) -> Vec<f64> {
        let (mut upper, mut rhs) = (vec![0.0; n], vec![0.0; n]);
        for i in 0..n {
            let (previous_upper, previous_rhs) = if i == 0 { (0.0, 0.0) } else { (upper[i - 1], rhs[i - 1]) };
            let pivot = diagonal - off * previous_upper;
            upper[i] = off / pivot;
            rhs[i] = (1.0 - off * previous_rhs) / pivot;
        }
        for i in (0..n - 1).rev() {
            rhs[i] -= upper[i] * rhs[i + 1];
        }
        rhs
    }
}
