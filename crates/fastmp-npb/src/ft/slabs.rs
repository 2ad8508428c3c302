//! How FT's nx × ny × nz grid is cut over the ranks, and where each element lies in a rank's
//! buffers.
//!
//! In space a rank holds `planes` consecutive z-planes; in frequency it holds `rows`
//! consecutive y-rows of every plane. The global transpose between the two moves one *block*
//! (`planes` × `rows` × nx elements) from every rank to every rank. Three local layouts, x
//! fastest unless said otherwise:
//!
//! - **space**: `[plane][y][x]`, NPB's own order (the initial field, the inverse's result);
//! - **transit** (both buffers of the transpose): `[block k][plane][row][x]`. On the space
//!   side block k holds this rank's planes and rank k's rows; on the frequency side it holds
//!   rank k's planes and this rank's rows, so the buffer is simply `[z][row][x]`;
//! - **frequency**: `[row][x][z]`, so z-lines are contiguous for the last 1-D transform and
//!   the time evolution.

use std::ops::Range;

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

    /// Where the rows of each plane lie in the space layout: one run per plane.
    pub fn space_runs(&self) -> PlaneRuns {
        PlaneRuns { nx: self.nx, ny: self.ny, run_rows: self.ny, run_stride: 0, plane_stride: self.ny * self.nx }
    }

    /// Where the rows of each plane lie in the transit layout: one run per block.
    pub fn transit_runs(&self) -> PlaneRuns {
        let rows = self.rows();
        PlaneRuns {
            nx: self.nx,
            ny: self.ny,
            run_rows: rows,
            run_stride: self.block_len(),
            plane_stride: rows * self.nx,
        }
    }
}

/// Where the x-rows of each z-plane lie in a buffer: in runs of `run_rows` contiguous rows,
/// `run_stride` apart, the runs of plane p + 1 `plane_stride` after those of plane p.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlaneRuns {
    nx: usize,
    ny: usize,
    run_rows: usize,
    run_stride: usize,
    plane_stride: usize,
}

impl PlaneRuns {
    /// Elements per row.
    pub fn nx(&self) -> usize {
        self.nx
    }

    /// Rows per plane.
    pub fn ny(&self) -> usize {
        self.ny
    }

    /// Elements in one run.
    pub fn run_len(&self) -> usize {
        self.run_rows * self.nx
    }

    /// The index ranges of `plane`'s runs, in y order.
    pub fn runs(&self, plane: usize) -> impl Iterator<Item = Range<usize>> + use<> {
        let Self { run_stride, plane_stride, .. } = *self;
        let run_len = self.run_len();
        (0..self.ny / self.run_rows).map(move |k| {
            let start = k * run_stride + plane * plane_stride;
            start..start + run_len
        })
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
        // Plane 2's rows 0..4 lie in block 0 after planes 0 and 1 (16 elements each), its
        // rows 4..8 likewise in block 1.
        let transit = slabs.transit_runs();
        assert_eq!(transit.runs(2).collect::<Vec<_>>(), vec![32..48, 80..96]);
        assert_eq!(slabs.space_runs().runs(2).collect::<Vec<_>>(), vec![64..96]);
    }
}
