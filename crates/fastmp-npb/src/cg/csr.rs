//! A block of rows of a sparse matrix in compressed sparse row form, and its product with a
//! dense vector: the kernel CG spends nearly all its time in.

use super::sums::Lanes;

/// Rows of a sparse matrix: row `i` holds the column indices `cols[row_starts[i]..row_starts[i + 1]]`
/// (ascending) and their values at the same places of `values`.
#[derive(Clone, Debug, PartialEq)]
pub struct Csr {
    row_starts: Vec<usize>,
    cols: Vec<u32>,
    values: Vec<f64>,
    /// Every column index is below this: the length of the vectors the matrix multiplies.
    ncols: usize,
}

impl Csr {
    /// An empty block with `ncols` columns, to which rows are appended.
    pub fn with_capacity(ncols: usize, rows: usize, nonzeros: usize) -> Self {
        let mut row_starts = Vec::with_capacity(rows + 1);
        row_starts.push(0);
        assert!(u32::try_from(ncols).is_ok(), "column indices are u32");
        Csr { row_starts, cols: Vec::with_capacity(nonzeros), values: Vec::with_capacity(nonzeros), ncols }
    }

    /// Appends a row given as (column, value) pairs in ascending column order.
    pub fn push_row(&mut self, entries: impl IntoIterator<Item = (u32, f64)>) {
        let start = self.cols.len();
        for (col, value) in entries {
            assert!((col as usize) < self.ncols, "column {col} outside the matrix's {} columns", self.ncols);
            self.cols.push(col);
            self.values.push(value);
        }
        debug_assert!(self.cols[start..].is_sorted(), "a row's columns ascend");
        self.row_starts.push(self.cols.len());
    }

    pub fn nrows(&self) -> usize {
        self.row_starts.len() - 1
    }

    pub fn ncols(&self) -> usize {
        self.ncols
    }

    #[cfg(test)]
    pub fn nonzeros(&self) -> usize {
        self.cols.len()
    }

    /// Row `i` as (column, value) pairs.
    #[cfg(test)]
    pub fn row(&self, i: usize) -> impl Iterator<Item = (u32, f64)> + '_ {
        let range = self.row_starts[i]..self.row_starts[i + 1];
        self.cols[range.clone()].iter().copied().zip(self.values[range].iter().copied())
    }

    /// `y = A·x` for this block's rows; `x` is the whole vector (`ncols` long).
    pub fn mul_vec(&self, x: &[f64], y: &mut [f64]) {
        assert_eq!(x.len(), self.ncols, "x spans the matrix's columns");
        assert_eq!(y.len(), self.nrows(), "y spans the block's rows");
        for (yi, bounds) in y.iter_mut().zip(self.row_starts.windows(2)) {
            let range = bounds[0]..bounds[1];
            *yi = sparse_dot(&self.values[range.clone()], &self.cols[range], x);
        }
    }
}

/// `Σ values[k]·x[cols[k]]`, in four lanes: a single sum would make a row of ~130 entries a
/// chain of dependent additions, slower than fetching its entries.
#[inline]
fn sparse_dot(values: &[f64], cols: &[u32], x: &[f64]) -> f64 {
    let mut sum = Lanes::default();
    let (values, cols) = (values.chunks_exact(4), cols.chunks_exact(4));
    let (values_tail, cols_tail) = (values.remainder(), cols.remainder());
    for (v, c) in values.zip(cols) {
        sum.add([v[0] * x[c[0] as usize], v[1] * x[c[1] as usize], v[2] * x[c[2] as usize], v[3] * x[c[3] as usize]]);
    }
    for (v, &c) in values_tail.iter().zip(cols_tail) {
        sum.add_one(v * x[c as usize]);
    }
    sum.total()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_matches_the_dense_one() {
        // A 5x7 block whose rows have 0, 1, 4, 5 and 7 entries: empty, only the tail, only the
        // unrolled loop, both.
        let dense: Vec<Vec<f64>> = [0, 1, 4, 5, 7]
            .iter()
            .enumerate()
            .map(|(i, &entries)| {
                let mut row = vec![0.0; 7];
                for k in 0..entries {
                    row[(3 * k + i) % 7] = 0.5 + (7 * i + k) as f64;
                }
                row
            })
            .collect();
        let mut block = Csr::with_capacity(7, 5, 35);
        for row in &dense {
            block.push_row(row.iter().enumerate().filter(|(_, v)| **v != 0.0).map(|(j, &v)| (j as u32, v)));
        }
        assert_eq!(block.nrows(), 5);
        let x: Vec<f64> = (0..7).map(|j| 1.0 / (j + 1) as f64).collect();
        let mut y = vec![f64::NAN; 5];
        block.mul_vec(&x, &mut y);
        for (row, yi) in dense.iter().zip(&y) {
            let expected: f64 = row.iter().zip(&x).map(|(a, b)| a * b).sum();
            assert!((yi - expected).abs() <= 1e-12 * expected.abs().max(1.0), "{yi} vs {expected}");
        }
    }

    #[test]
    #[should_panic(expected = "outside the matrix")]
    fn a_column_outside_the_matrix_is_refused() {
        Csr::with_capacity(3, 1, 1).push_row([(3, 1.0)]);
    }
}
