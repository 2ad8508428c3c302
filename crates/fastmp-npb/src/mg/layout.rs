//! Where each rank's block lies: the periodic 3-D process grid, and at every multigrid level
//! either a block of it per rank (distributed) or the whole level on every rank (replicated).

use fastmp::{CartComm, Comm, dims_create};

/// x, y, z.
pub const AXES: usize = 3;

/// The ranks per axis (x, y, z) for `np` ranks: as even as possible, z split first, then y,
/// then x, so the smallest blocks stay long in x, the axis every stencil row runs along.
pub fn process_dims(np: usize) -> Result<[usize; AXES], String> {
    let dims = dims_create(np, &[0; AXES]).map_err(|e| e.to_string())?;
    // `dims_create` orders them non-increasing; the grid's first dimension is z.
    Ok([dims[2], dims[1], dims[0]])
}

/// The ranks as a periodic Cartesian grid, and this rank's place on it.
pub struct ProcGrid {
    cart: CartComm,
    procs: [usize; AXES],
    coords: [usize; AXES],
    /// The lower and upper neighbour along each axis (the same rank when an axis has two).
    neighbours: [(usize, usize); AXES],
}

impl ProcGrid {
    /// Lays the ranks of `world` out on their grid. Collective.
    pub fn new(world: &Comm) -> fastmp::Result<Self> {
        let procs = process_dims(world.size()).map_err(fastmp::Error::InvalidArgument)?;
        let zyx = [procs[2], procs[1], procs[0]];
        let cart = world
            .cart_create(&zyx, &[true; AXES], false)?
            .ok_or_else(|| fastmp::Error::InvalidArgument("the process grid leaves a rank out".into()))?;
        let zyx_coords = cart.coords(cart.rank())?;
        let coords = [zyx_coords[2], zyx_coords[1], zyx_coords[0]];
        let mut neighbours = [(0, 0); AXES];
        for (axis, pair) in neighbours.iter_mut().enumerate() {
            *pair = cart.shift(AXES - 1 - axis, 1)?;
        }
        Ok(ProcGrid { cart, procs, coords, neighbours })
    }

    /// The grid's communicator: every exchange and reduction of the kernel runs on it.
    pub fn comm(&self) -> &Comm {
        self.cart.comm()
    }

    pub fn procs(&self) -> [usize; AXES] {
        self.procs
    }

    /// The (lower, upper) neighbour along `axis`.
    pub fn neighbours(&self, axis: usize) -> (usize, usize) {
        self.neighbours[axis]
    }

    /// The grid coordinates of `rank` (x, y, z), rank = x + px·(y + py·z).
    pub fn coords_of(&self, rank: usize) -> [usize; AXES] {
        let [px, py, _] = self.procs;
        [rank % px, rank / px % py, rank / (px * py)]
    }

    pub fn coords(&self) -> [usize; AXES] {
        self.coords
    }
}

/// How one level of `edge³` points is spread over the ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Points per axis of the whole (periodic) level.
    pub edge: usize,
    /// Ranks sharing each axis: the process grid's, or all ones where every rank holds the
    /// whole level.
    pub procs: [usize; AXES],
    /// This rank's interior points per axis.
    pub extent: [usize; AXES],
    /// The global index of this rank's first interior point along each axis.
    pub offset: [usize; AXES],
}

impl Layout {
    /// Each rank holds its block of the process grid.
    pub fn distributed(edge: usize, grid: &ProcGrid) -> Self {
        let procs = grid.procs();
        let extent = procs.map(|p| edge / p);
        let coords = grid.coords();
        let offset = [0, 1, 2].map(|a| coords[a] * extent[a]);
        Layout { edge, procs, extent, offset }
    }

    /// Every rank holds the whole level.
    pub fn replicated(edge: usize) -> Self {
        Layout { edge, procs: [1; AXES], extent: [edge; AXES], offset: [0; AXES] }
    }

    /// Whether some rank holds points this one does not.
    pub fn is_distributed(&self) -> bool {
        self.procs != [1; AXES]
    }

    /// How many of the leading axes (x, then y, then z) this rank holds whole, so that an
    /// operator can wrap their ghosts itself as it writes each row and plane.
    pub fn wrapped_axes(&self) -> usize {
        self.procs.iter().take_while(|&&p| p == 1).count()
    }

    /// Whether operators can run one after the other in a single sweep over the z-planes:
    /// with whole x-rows and y-columns, a plane's ghosts are complete as soon as it is
    /// written, but for the z-ghost planes.
    pub fn sweeps_planes(&self) -> bool {
        self.wrapped_axes() >= 2
    }

    /// The layout of each level, coarsest (2³) first, up to `edge_top³`: distributed while
    /// the level is larger than `replicate_up_to` per axis and every block keeps at least two
    /// points per axis (so restriction leaves each rank at least one); the levels below are
    /// small enough that computing them on every rank is cheaper than exchanging their ghosts.
    pub fn levels(edge_top: usize, grid: &ProcGrid, replicate_up_to: usize) -> Vec<Layout> {
        let procs = grid.procs();
        let mut levels: Vec<Layout> = std::iter::successors(Some(edge_top), |&e| (e > 2).then_some(e / 2))
            .map(|edge| {
                let blocks_hold_two = procs.iter().all(|&p| edge / p >= 2);
                if edge > replicate_up_to && blocks_hold_two {
                    Layout::distributed(edge, grid)
                } else {
                    Layout::replicated(edge)
                }
            })
            .collect();
        levels.reverse();
        levels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn z_is_split_first_then_y_then_x() {
        assert_eq!(process_dims(1), Ok([1, 1, 1]));
        assert_eq!(process_dims(2), Ok([1, 1, 2]));
        assert_eq!(process_dims(4), Ok([1, 2, 2]));
        assert_eq!(process_dims(8), Ok([2, 2, 2]));
        assert_eq!(process_dims(32), Ok([2, 4, 4]));
    }

    #[test]
    fn blocks_tile_the_grid_and_coarse_levels_are_replicated() {
        let tiles = fastmp::run(8, |world| {
            let grid = ProcGrid::new(&world)?;
            assert_eq!(grid.coords_of(grid.comm().rank()), grid.coords());
            let levels = Layout::levels(32, &grid, 4);
            let edges: Vec<usize> = levels.iter().map(|l| l.edge).collect();
            assert_eq!(edges, [2, 4, 8, 16, 32]);
            let distributed: Vec<bool> = levels.iter().map(Layout::is_distributed).collect();
            assert_eq!(distributed, [false, false, true, true, true]);
            Ok(levels[4].offset)
        })
        .unwrap();
        let mut seen = tiles.clone();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 8);
        assert!(tiles.iter().all(|o| o.iter().all(|&c| c == 0 || c == 16)));
    }
}
