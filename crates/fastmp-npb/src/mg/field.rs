//! One rank's block of a grid function: a 3-D array of its interior points wrapped in a layer
//! of ghost cells, x fastest, so every stencil reads whole rows of contiguous memory.

/// A block of `n[0] × n[1] × n[2]` interior points (x, y, z) inside one ghost cell on every
/// side. Array index 0 and `n + 1` along an axis are ghosts; the interior is `1..=n`.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    n: [usize; 3],
    data: Vec<f64>,
}

impl Field {
    /// A zero field of `n` interior points per axis.
    pub fn new(n: [usize; 3]) -> Self {
        let len = (n[0] + 2) * (n[1] + 2) * (n[2] + 2);
        Field { n, data: vec![0.0; len] }
    }

    /// The interior extent along each axis.
    pub fn extent(&self) -> [usize; 3] {
        self.n
    }

    /// Elements per row, ghosts included.
    pub fn row_len(&self) -> usize {
        self.n[0] + 2
    }

    /// Elements per z-plane, ghosts included.
    pub fn plane_len(&self) -> usize {
        (self.n[0] + 2) * (self.n[1] + 2)
    }

    /// Where row `(y, z)` (array indices, ghosts included) starts in [`Field::data`].
    pub fn row_start(&self, y: usize, z: usize) -> usize {
        (z * (self.n[1] + 2) + y) * (self.n[0] + 2)
    }

    /// Row `(y, z)`, ghosts included.
    pub fn row(&self, y: usize, z: usize) -> &[f64] {
        let start = self.row_start(y, z);
        &self.data[start..start + self.row_len()]
    }

    /// Row `(y, z)`, ghosts included, for writing.
    pub fn row_mut(&mut self, y: usize, z: usize) -> &mut [f64] {
        let (start, len) = (self.row_start(y, z), self.row_len());
        &mut self.data[start..start + len]
    }

    /// Every element, ghosts included, x fastest.
    pub fn data_mut(&mut self) -> &mut [f64] {
        &mut self.data
    }

    /// The value at array indices `(x, y, z)`, ghosts included.
    #[cfg(test)]
    pub fn at(&self, x: usize, y: usize, z: usize) -> f64 {
        self.row(y, z)[x]
    }

    pub fn set(&mut self, x: usize, y: usize, z: usize, value: f64) {
        self.row_mut(y, z)[x] = value;
    }

    /// The periodic x-ghosts of row `(y, z)`, for a block that spans the whole x-axis.
    pub fn wrap_row(&mut self, y: usize, z: usize) {
        let nx = self.n[0];
        let row = self.row_mut(y, z);
        row[0] = row[nx];
        row[nx + 1] = row[1];
    }

    /// The periodic y-ghost rows of plane `z`, for a block that spans the whole y-axis.
    pub fn wrap_plane(&mut self, z: usize) {
        let (len, ny) = (self.row_len(), self.n[1]);
        let (first, last) = (self.row_start(1, z), self.row_start(ny, z));
        self.data.copy_within(last..last + len, first - len);
        self.data.copy_within(first..first + len, last + len);
    }

    /// Copies z-plane `from` onto z-plane `to`, ghosts included.
    pub fn copy_plane(&mut self, from: usize, to: usize) {
        let len = self.plane_len();
        self.data.copy_within(from * len..(from + 1) * len, to * len);
    }

    pub fn fill(&mut self, value: f64) {
        self.data.fill(value);
    }

    /// The interior rows, each without its two ghosts, as `(y, z, row)`.
    pub fn interior_rows(&self) -> impl Iterator<Item = (usize, usize, &[f64])> {
        let [nx, ny, nz] = self.n;
        (1..=nz).flat_map(move |z| (1..=ny).map(move |y| (y, z, &self.row(y, z)[1..=nx])))
    }

    /// The sum of squares of the interior points.
    pub fn interior_sum_of_squares(&self) -> f64 {
        self.interior_rows().map(|(_, _, row)| row.iter().map(|v| v * v).sum::<f64>()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_contiguous_x_fastest() {
        let mut f = Field::new([3, 2, 1]);
        assert_eq!((f.row_len(), f.plane_len(), f.data_mut().len()), (5, 20, 60));
        f.set(2, 1, 1, 7.0);
        assert_eq!(f.data_mut()[20 + 5 + 2], 7.0);
        assert_eq!(f.row(1, 1), &[0.0, 0.0, 7.0, 0.0, 0.0]);
        assert_eq!(f.interior_rows().count(), 2);
        assert_eq!(f.interior_sum_of_squares(), 49.0);
    }
}
