//! One rank's block of a grid function: a 3-D array of its interior points wrapped in a layer
//! of ghost cells, x fastest, so every stencil reads whole rows of contiguous memory.

/// A block of `n[0] × n[1] × n[2]` interior points (x, y, z) inside one ghost cell on every
/// side. Array index 0 and `n + 1` along an axis are ghosts; the interior is `1..=n`.
///
/// A field either stores every z-plane, or only those a sweep over the planes in order still
/// reads ([`Field::sweep`]): the first three, the last three (ghosts included) and the three
/// written last.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    n: [usize; 3],
    data: Vec<f64>,
    planes: Planes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Planes {
    All,
    Sweep,
}

/// Planes a [`Planes::Sweep`] field stores: three at each end, and three in rotation.
const SWEEP_PLANES: usize = 9;

impl Field {
    /// A zero field of `n` interior points per axis.
    pub fn new(n: [usize; 3]) -> Self {
        Field::with_planes(n, Planes::All, n[2] + 2)
    }

    /// A zero field that keeps only the planes a sweep in increasing z still reads: planes
    /// `0..=2` and `n − 1 ..= n + 1` for good, any other plane until three planes later
    /// are written. An operator reading three neighbouring planes of it must run right
    /// behind the one writing them.
    pub fn sweep(n: [usize; 3]) -> Self {
        Field::with_planes(n, Planes::Sweep, SWEEP_PLANES.min(n[2] + 2))
    }

    fn with_planes(n: [usize; 3], planes: Planes, stored: usize) -> Self {
        let len = (n[0] + 2) * (n[1] + 2) * stored;
        Field { n, data: vec![0.0; len], planes }
    }

    /// Whether every plane is stored.
    pub fn is_whole(&self) -> bool {
        self.planes == Planes::All
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

    /// Where z-plane `z` is stored, in planes.
    fn slot(&self, z: usize) -> usize {
        let nz = self.n[2];
        match self.planes {
            Planes::All => z,
            Planes::Sweep if z <= 2 || nz + 2 <= SWEEP_PLANES => z,
            Planes::Sweep if z + 1 >= nz => 3 + (z + 1 - nz),
            Planes::Sweep => 6 + z % 3,
        }
    }

    /// Where row `(y, z)` (array indices, ghosts included) starts in the storage.
    pub fn row_start(&self, y: usize, z: usize) -> usize {
        (self.slot(z) * (self.n[1] + 2) + y) * (self.n[0] + 2)
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

    /// The two z-ghost planes to write and the two faces they mirror (the same plane when
    /// the block is one plane deep): `(ghost 0, plane 1, plane n, ghost n + 1)`.
    pub fn z_ghosts_and_faces(&mut self) -> (&mut [f64], &[f64], &[f64], &mut [f64]) {
        let (len, nz) = (self.plane_len(), self.n[2]);
        let [lo, first, last, hi] = [0, 1, nz, nz + 1].map(|z| self.slot(z) * len);
        let (ghost_lo, rest) = self.data[lo..].split_at_mut(len);
        let (faces, ghost_hi) = rest[first - lo - len..].split_at_mut(hi - first);
        let faces = &*faces;
        (ghost_lo, &faces[..len], &faces[last - first..last - first + len], &mut ghost_hi[..len])
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
        let (from, to) = (self.slot(from) * len, self.slot(to) * len);
        self.data.copy_within(from..from + len, to);
    }

    pub fn fill(&mut self, value: f64) {
        self.data.fill(value);
    }

    /// The interior rows, each without its two ghosts, as `(y, z, row)` (of a whole field).
    pub fn interior_rows(&self) -> impl Iterator<Item = (usize, usize, &[f64])> {
        debug_assert!(self.is_whole());
        let [nx, ny, nz] = self.n;
        (1..=nz).flat_map(move |z| (1..=ny).map(move |y| (y, z, &self.row(y, z)[1..=nx])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_contiguous_x_fastest() {
        let mut f = Field::new([3, 2, 1]);
        assert_eq!((f.row_len(), f.plane_len(), f.data.len()), (5, 20, 60));
        f.set(2, 1, 1, 7.0);
        assert_eq!(f.data[20 + 5 + 2], 7.0);
        assert_eq!(f.row(1, 1), &[0.0, 0.0, 7.0, 0.0, 0.0]);
        assert_eq!(f.interior_rows().count(), 2);
    }

    /// Every plane a sweep needs at each step has a slot of its own.
    #[test]
    fn a_sweep_field_keeps_the_ends_and_the_last_three_planes() {
        for nz in 1..20 {
            let f = Field::sweep([1, 1, nz]);
            let pinned = [0, 1, 2, nz - 1, nz, nz + 1].map(|z| z.min(nz + 1));
            for z in 0..=nz + 1 {
                let mut live: Vec<usize> = pinned.iter().copied().chain(z.saturating_sub(2)..=z).collect();
                live.sort();
                live.dedup();
                let mut slots: Vec<usize> = live.iter().map(|&p| f.slot(p)).collect();
                slots.sort();
                slots.dedup();
                assert_eq!(slots.len(), live.len(), "nz {nz}, writing plane {z}");
                assert!(slots.iter().all(|&s| s < SWEEP_PLANES));
            }
            let ends = [0, 1, nz, nz + 1].map(|z| f.slot(z));
            assert!(ends.windows(2).all(|w| w[0] < w[1] || (nz == 1 && w[0] == w[1])), "nz {nz}: {ends:?}");
        }
    }

    #[test]
    fn z_ghosts_and_faces_are_the_end_planes() {
        for f in [Field::new([2, 1, 5]), Field::sweep([2, 1, 12]), Field::new([2, 1, 1])] {
            let mut f = f;
            let nz = f.extent()[2];
            for z in 0..=nz + 1 {
                f.row_mut(1, z).fill(z as f64);
            }
            let (lo, first, last, hi) = f.z_ghosts_and_faces();
            assert_eq!([lo[4], first[4], last[4], hi[4]], [0.0, 1.0, nz as f64, (nz + 1) as f64]);
        }
    }
}
