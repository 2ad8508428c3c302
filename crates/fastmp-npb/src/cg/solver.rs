//! The inverse power method with conjugate-gradient inner solves, over row blocks of the
//! matrix: each rank owns a contiguous block of rows and the same rows of every vector.
//!
//! The only product, `q = A·p`, needs all of `p` on every rank. Rather than gathering `p`
//! after each update, the ranks publish their rows of the residual `r` together with their
//! part of `r·r` (one allgatherv); every rank then sums `r·r`, and rebuilds the whole of
//! `p = r + β·p` itself (a pass over `n` values, small next to the product). So a CG iteration
//! costs one allgatherv of `n + np` values and one allreduce of one value (`p·q`): two points
//! where the ranks wait for each other, where gathering `p` would need three.

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
        let (block, number) =
            self.values[self.displs[self.rank]..][..self.counts[self.rank]].split_at_mut(self.counts[self.rank] - 1);
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

/// One rank's share of the method: its rows of the matrix and of the vectors.
pub struct Solver<'w> {
    world: &'w Comm,
    matrix: Csr,
    blocks: RowBlocks,
    rows: Range<usize>,
    /// The whole search direction `p`, the same on every rank.
    direction: Vec<f64>,
    /// The residual `r`, whole once published; this rank updates its own block.
    residual: Published,
    /// This rank's rows of the power method's iterate `x`, of the solution `z` of `A·z = x`
    /// and of the product `q = A·p`.
    x: Vec<f64>,
    z: Vec<f64>,
    q: Vec<f64>,
}

impl<'w> Solver<'w> {
    /// `matrix` holds this rank's rows of `blocks` (collective only in later calls).
    pub fn new(world: &'w Comm, matrix: Csr, blocks: RowBlocks) -> Self {
        let rows = blocks.rows(world.rank());
        assert_eq!(matrix.nrows(), rows.len(), "the matrix holds this rank's rows");
        let (n, m) = (matrix.ncols(), rows.len());
        let residual = Published::new(&blocks, world.rank());
        Solver {
            world,
            matrix,
            blocks,
            rows,
            direction: vec![0.0; n],
            residual,
            x: vec![1.0; m],
            z: vec![0.0; m],
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
        let (r, rr) = self.residual.own();
        r.copy_from_slice(&self.x);
        *rr = dot(r, r);
        let mut rho = self.residual.share(self.world)?;
        self.update_direction(None);
        for _ in 0..CG_ITERATIONS {
            self.matrix.mul_vec(&self.direction, &mut self.q);
            let own_direction = &self.direction[self.rows.clone()];
            let [pq] = global_sum(self.world, [dot(own_direction, &self.q)])?;
            let alpha = rho / pq;
            let (r, rr) = self.residual.own();
            *rr = step_solution(alpha, own_direction, &self.q, &mut self.z, r);
            let rho_before = rho;
            rho = self.residual.share(self.world)?;
            self.update_direction(Some(rho / rho_before));
        }
        // ‖x − A·z‖, with the direction's storage holding the whole z.
        self.direction[self.rows.clone()].copy_from_slice(&self.z);
        self.blocks.gather(self.world, &mut self.direction)?;
        self.matrix.mul_vec(&self.direction, &mut self.q);
        let local: f64 = self.x.iter().zip(&self.q).map(|(x, az)| (x - az) * (x - az)).sum();
        let [squared] = global_sum(self.world, [local])?;
        Ok(squared.sqrt())
    }

    /// `p = r + β·p` over the whole published residual (`p = r` to start, without `β`).
    fn update_direction(&mut self, beta: Option<f64>) {
        let mut rest = self.direction.as_mut_slice();
        for r in self.residual.blocks() {
            let (p, tail) = rest.split_at_mut(r.len());
            rest = tail;
            match beta {
                None => p.copy_from_slice(r),
                Some(beta) => p.iter_mut().zip(r).for_each(|(p, r)| *p = r + beta * *p),
            }
        }
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
