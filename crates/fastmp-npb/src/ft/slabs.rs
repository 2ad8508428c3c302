//! How FT's nx × ny × nz grid is cut over the ranks, and where each element lies in a rank's
//! buffers.
//!
//! In space a rank holds `planes` consecutive z-planes; in frequency it holds `rows`
//! consecutive y-rows of every plane. The global transpose between the two moves one *block*
//! (`planes` × `rows` × nx elements) from every rank to every rank. Four local layouts, x
//! fastest unless said otherwise:
//!
//! - **space**: `[plane][y][x]`, NPB's own order (the initial field, the inverse's result);
//! - **outgoing** (space side of the transpose): `[block c][plane][row][x]`, block `c` holding
//!   the y-rows rank `c` owns in frequency;
//! - **incoming** (frequency side): `[block r][plane][row][x]`, block `r` from rank `r`, which
//!   is simply `[z][row][x]`;
//! - **frequency**: `[row][x][z]`, so z-lines are contiguous for the last 1-D transform and
//!   the time evolution.

/// One rank's share of the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slabs {
    pub nx: usize,
    pub ny: usize,
    pub nz: usize,
    pub np: usize,
    pub rank: usize,
}

impl Slabs {
    /// The share of `rank` among `np`; `np` must divide ny and nz.
    pub fn new([nx, ny, nz]: [usize; 3], np: usize, rank: usize) -> Self {
        assert!(ny % np == 0 && nz % np == 0 && rank < np, "{np} ranks cannot share a {nx}x{ny}x{nz} grid by slabs");
        Slabs { nx, ny, nz, np, rank }
    }

    /// Z-planes per rank in space.
    pub fn planes(&self) -> usize {
        self.nz / self.np
    }

    /// Y-rows per rank in frequency.
    pub fn rows(&self) -> usize {
        self.ny / self.np
    }

    /// The first z-plane this rank holds in space.
    pub fn first_plane(&self) -> usize {
        self.rank * self.planes()
    }

    /// The first y-row this rank holds in frequency.
    pub fn first_row(&self) -> usize {
        self.rank * self.rows()
    }

    /// Elements per rank, in every layout.
    pub fn local_len(&self) -> usize {
        self.nx * self.ny * self.planes()
    }

    /// Elements one rank sends another in the transpose.
    pub fn block_len(&self) -> usize {
        self.nx * self.planes() * self.rows()
    }

    /// The total number of grid points.
    pub fn total(&self) -> usize {
        self.nx * self.ny * self.nz
    }

    /// Where the x-rows of the space layout start.
    pub fn space_rows(&self) -> RowMap {
        RowMap::new(self.nx, self.ny, self.ny, 0, self.ny * self.nx)
    }

    /// Where the x-rows of the outgoing (space-side transit) layout start.
    pub fn transit_rows(&self) -> RowMap {
        RowMap::new(self.nx, self.ny, self.rows(), self.block_len(), self.rows() * self.nx)
    }
}

/// Where each x-row of a buffer of z-planes starts: the rows of a plane come in runs of
/// `run_rows` contiguous rows, so a plane is one run (space) or one run per block (transit).
#[derive(Clone, Debug)]
pub(crate) struct RowMap {
    /// Start of row y of plane 0.
    starts: Vec<usize>,
    /// How far plane p + 1 starts after plane p.
    plane_stride: usize,
    /// Elements in one run of contiguous rows.
    run_len: usize,
    run_rows: usize,
}

impl RowMap {
    fn new(nx: usize, ny: usize, run_rows: usize, run_stride: usize, plane_stride: usize) -> Self {
        let starts = (0..ny).map(|y| (y / run_rows) * run_stride + (y % run_rows) * nx).collect();
        RowMap { starts, plane_stride, run_len: run_rows * nx, run_rows }
    }

    /// Start of every row of `plane`, in y order.
    pub fn rows(&self, plane: usize) -> impl Iterator<Item = usize> + '_ {
        let offset = plane * self.plane_stride;
        self.starts.iter().map(move |&start| start + offset)
    }

    /// The index ranges of `plane`'s runs of contiguous rows.
    pub fn runs(&self, plane: usize) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        let offset = plane * self.plane_stride;
        let run_len = self.run_len;
        self.starts.iter().step_by(self.run_rows).map(move |&start| start + offset..start + offset + run_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transit_blocks_hold_each_ranks_rows() {
        let slabs = Slabs::new([4, 8, 6], 2, 1);
        assert_eq!((slabs.planes(), slabs.rows(), slabs.first_plane(), slabs.first_row()), (3, 4, 3, 4));
        assert_eq!(slabs.block_len(), 4 * 3 * 4);
        let transit = slabs.transit_rows();
        // Row 5 of plane 2 lies in block 1 (rows 4..8), plane 2, row 1 of the block.
        assert_eq!(transit.rows(2).nth(5), Some(slabs.block_len() + 2 * 4 * 4 + 4));
        let runs: Vec<_> = transit.runs(2).collect();
        assert_eq!(runs, vec![32..48, 80..96]);
        let space = slabs.space_rows();
        assert_eq!(space.rows(2).nth(5), Some(2 * 32 + 5 * 4));
        assert_eq!(space.runs(2).collect::<Vec<_>>(), vec![64..96]);
    }
}
