//! NPB's random sparse matrix (the specification's `makea`): the sum of `n` scaled outer
//! products `size_k · v_k v_kᵀ` of random sparse vectors, plus `rcond − shift` on the diagonal.
//!
//! Vector `k` has `nonzer` distinct random positions with random values, drawn from NPB's
//! generator in a fixed order, plus position `k` itself with value 0.5; its weight `size_k` is
//! `rcond^(k/n)`, so the outer products shrink geometrically from 1 to `rcond`. Every rank draws
//! the whole sequence (cheap next to the products) and builds only the rows it owns, so the
//! matrix is the same whatever the number of ranks. Entries that land on the same place are
//! summed in NPB's order (by vector, then by position within the vector), so the values are
//! NPB's to the last bit.

use std::ops::Range;

use super::csr::Csr;
use crate::random::{A, randlc};

/// The generator's seed for CG; one number is drawn before the matrix (NPB's program does so).
const SEED: f64 = 314_159_265.0;

/// What fixes the matrix of a class.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    /// Rows and columns.
    pub n: usize,
    /// Random nonzeros per outer vector.
    pub nonzer: usize,
    /// The smallest outer product's weight, also added to the diagonal.
    pub rcond: f64,
    /// Subtracted from the diagonal.
    pub shift: f64,
}

/// Rows `rows` of the class's matrix, all `n` columns, each row's columns ascending.
pub fn generate(shape: &Shape, rows: Range<usize>) -> Csr {
    assert!(rows.start <= rows.end && rows.end <= shape.n, "rows {rows:?} outside 0..{}", shape.n);
    let vectors = OuterVectors::draw(shape.n, shape.nonzer);
    let weights = weights(shape);
    let touching = Touching::index(&vectors, rows.clone());

    let mut matrix = Csr::with_capacity(shape.n, rows.len(), touching.products);
    let mut row = RowAccumulator::new(shape.n);
    for local in 0..rows.len() {
        for &(k, value_here) in touching.of(local) {
            let weight = weights[k as usize];
            for (col, value) in vectors.get(k as usize) {
                row.add(col, value_here * (weight * value));
            }
        }
        row.add((rows.start + local) as u32, shape.rcond - shape.shift);
        matrix.push_row(row.drain());
    }
    matrix
}

/// `size_k` for every vector: `rcond^(1/n)` multiplied up step by step, as NPB does (a power
/// computed directly would round differently).
fn weights(shape: &Shape) -> Vec<f64> {
    let ratio = shape.rcond.powf(1.0 / shape.n as f64);
    std::iter::successors(Some(1.0), |size| Some(size * ratio)).take(shape.n).collect()
}

/// The `n` random sparse vectors, one after another.
struct OuterVectors {
    /// Vector `k` is `starts[k]..starts[k + 1]` of `positions` and `values`.
    starts: Vec<usize>,
    positions: Vec<u32>,
    values: Vec<f64>,
}

impl OuterVectors {
    /// Draws them in NPB's order: for each entry a value, then a position in `0..2^⌈log2 n⌉`
    /// (rejected if outside the matrix or already taken, its numbers spent all the same).
    fn draw(n: usize, nonzer: usize) -> Self {
        assert!(nonzer < n, "{nonzer} distinct positions out of {n}");
        let range = n.next_power_of_two().max(2) as f64;
        let mut seed = SEED;
        randlc(&mut seed, A);
        let mut starts = Vec::with_capacity(n + 1);
        let mut positions = Vec::with_capacity(n * (nonzer + 1));
        let mut values = Vec::with_capacity(n * (nonzer + 1));
        starts.push(0);
        for k in 0..n {
            let first = positions.len();
            while positions.len() - first < nonzer {
                let value = randlc(&mut seed, A);
                let position = (range * randlc(&mut seed, A)) as usize;
                if position < n && !positions[first..].contains(&(position as u32)) {
                    positions.push(position as u32);
                    values.push(value);
                }
            }
            match positions[first..].iter().position(|&p| p as usize == k) {
                Some(i) => values[first + i] = 0.5,
                None => {
                    positions.push(k as u32);
                    values.push(0.5);
                }
            }
            starts.push(positions.len());
        }
        OuterVectors { starts, positions, values }
    }

    /// Vector `k` as (position, value) pairs, in the order drawn.
    fn get(&self, k: usize) -> impl Iterator<Item = (u32, f64)> + '_ {
        let range = self.starts[k]..self.starts[k + 1];
        self.positions[range.clone()].iter().copied().zip(self.values[range].iter().copied())
    }
}

/// For each row of a block, the vectors that have an entry there, in ascending order, with that
/// entry's value: the outer products that reach the row.
struct Touching {
    starts: Vec<usize>,
    entries: Vec<(u32, f64)>,
    /// How many products land in the block's rows, duplicates included (a bound on its nonzeros).
    products: usize,
}

impl Touching {
    fn index(vectors: &OuterVectors, rows: Range<usize>) -> Self {
        let local = |position: u32| (position as usize).checked_sub(rows.start).filter(|&i| i < rows.len());
        let mut starts = vec![0; rows.len() + 1];
        let mut products = rows.len(); // the diagonal
        for k in 0..vectors.starts.len() - 1 {
            let length = vectors.starts[k + 1] - vectors.starts[k];
            for (position, _) in vectors.get(k) {
                if let Some(i) = local(position) {
                    starts[i + 1] += 1;
                    products += length;
                }
            }
        }
        for i in 0..rows.len() {
            starts[i + 1] += starts[i];
        }
        let mut next = starts.clone();
        let mut entries = vec![(0, 0.0); starts[rows.len()]];
        for k in 0..vectors.starts.len() - 1 {
            for (position, value) in vectors.get(k) {
                if let Some(i) = local(position) {
                    entries[next[i]] = (k as u32, value);
                    next[i] += 1;
                }
            }
        }
        Touching { starts, entries, products }
    }

    fn of(&self, local_row: usize) -> &[(u32, f64)] {
        &self.entries[self.starts[local_row]..self.starts[local_row + 1]]
    }
}

/// One row being summed: a dense scratch row and the columns touched so far.
struct RowAccumulator {
    sums: Vec<f64>,
    touched: Vec<bool>,
    cols: Vec<u32>,
}

impl RowAccumulator {
    fn new(n: usize) -> Self {
        RowAccumulator { sums: vec![0.0; n], touched: vec![false; n], cols: Vec::new() }
    }

    fn add(&mut self, col: u32, value: f64) {
        let j = col as usize;
        self.sums[j] += value;
        if !self.touched[j] {
            self.touched[j] = true;
            self.cols.push(col);
        }
    }

    /// The row's nonzero sums by ascending column (a sum that cancelled to zero is no entry);
    /// leaves the scratch clear for the next row.
    fn drain(&mut self) -> impl Iterator<Item = (u32, f64)> + '_ {
        self.cols.sort_unstable();
        let (sums, touched) = (&mut self.sums, &mut self.touched);
        self.cols.drain(..).filter_map(move |col| {
            let j = col as usize;
            touched[j] = false;
            let sum = std::mem::take(&mut sums[j]);
            (sum != 0.0).then_some((col, sum))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLASS_S: Shape = Shape { n: 1400, nonzer: 7, rcond: 0.1, shift: 10.0 };

    #[test]
    fn outer_vectors_have_distinct_positions_and_their_own_index() {
        let vectors = OuterVectors::draw(CLASS_S.n, CLASS_S.nonzer);
        for k in 0..CLASS_S.n {
            let entries: Vec<_> = vectors.get(k).collect();
            assert!(entries.len() == 7 || entries.len() == 8, "vector {k}: {} entries", entries.len());
            let mut positions: Vec<_> = entries.iter().map(|e| e.0).collect();
            positions.sort_unstable();
            positions.dedup();
            assert_eq!(positions.len(), entries.len(), "vector {k} repeats a position");
            assert!(entries.contains(&(k as u32, 0.5)), "vector {k} lacks its own index");
            assert!(entries.iter().all(|&(p, v)| (p as usize) < CLASS_S.n && v > 0.0 && v < 1.0));
        }
    }

    #[test]
    fn matrix_is_symmetric_with_the_shifted_diagonal() {
        let a = generate(&CLASS_S, 0..CLASS_S.n);
        assert_eq!((a.nrows(), a.ncols()), (CLASS_S.n, CLASS_S.n));
        let entries: std::collections::HashMap<(u32, u32), f64> =
            (0..a.nrows()).flat_map(|i| a.row(i).map(move |(j, v)| ((i as u32, j), v))).collect();
        assert_eq!(entries.len(), a.nonzeros());
        for (&(i, j), &v) in &entries {
            // a·(s·b) and b·(s·a) may round apart, so the mirror is equal to an ulp or so.
            let mirror = entries.get(&(j, i)).unwrap_or_else(|| panic!("({i}, {j}) has no mirror"));
            assert!((v - mirror).abs() <= 1e-15 * v.abs(), "({i}, {j}): {v} vs {mirror}");
        }
        // Every diagonal entry is rcond − shift plus at least 0.25·rcond from the vector's own index.
        for i in 0..a.nrows() {
            let diagonal = a.row(i).find(|&(j, _)| j as usize == i).expect("a diagonal entry").1;
            assert!(diagonal > CLASS_S.rcond - CLASS_S.shift + 0.25 * CLASS_S.rcond - 1e-12, "row {i}: {diagonal}");
        }
        // About (nonzer + 1)² products per row, few of which coincide.
        let per_row = a.nonzeros() as f64 / a.nrows() as f64;
        assert!((40.0..=65.0).contains(&per_row), "{per_row} nonzeros per row");
    }

    #[test]
    fn row_blocks_are_the_same_rows_of_the_whole_matrix() {
        let whole = generate(&CLASS_S, 0..CLASS_S.n);
        for bounds in [&[0, 700, 1400][..], &[0, 1, 350, 1399, 1400]] {
            for block in bounds.windows(2) {
                let part = generate(&CLASS_S, block[0]..block[1]);
                assert_eq!(part.nrows(), block[1] - block[0]);
                for i in 0..part.nrows() {
                    assert!(part.row(i).eq(whole.row(block[0] + i)), "row {}", block[0] + i);
                }
            }
        }
        assert_eq!(generate(&CLASS_S, 5..5).nrows(), 0);
    }
}
