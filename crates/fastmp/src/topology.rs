//! Cartesian process topologies (MPI_Cart_*): a communicator whose ranks are laid out on a grid.

use std::ops::Deref;

use crate::comm::Comm;
use crate::device::{PROC_NULL, Placement};
use crate::error::{Error, Result};

/// A communicator with a Cartesian layout; it derefs to [`Comm`] for communication. Ranks are
/// laid out in row-major order (the last dimension varies fastest), as in MPI.
///
/// ```
/// fastmp::run(6, |world| {
///     let grid = world.cart_create(&[2, 3], &[false, true], false)?.unwrap();
///     let coords = grid.coords(grid.rank())?;
///     assert_eq!(grid.rank_of(&[coords[0] as isize, coords[1] as isize])?, grid.rank());
///     // Along the periodic dimension the neighbours wrap around.
///     let (from, to) = grid.shift(1, 1)?;
///     assert!(from != fastmp::PROC_NULL && to != fastmp::PROC_NULL);
///     let row = grid.sub(&[false, true])?;
///     assert_eq!(row.size(), 3);
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
#[derive(Clone)]
pub struct CartComm {
    comm: Comm,
    dims: Vec<usize>,
    periods: Vec<bool>,
}

impl Deref for CartComm {
    type Target = Comm;
    fn deref(&self) -> &Comm {
        &self.comm
    }
}

/// Dimensions for a grid of `nodes` ranks (MPI_Dims_create): `dims` has one entry per
/// dimension, a non-zero entry is kept, and the zero entries are filled as close to each other
/// as possible, in non-increasing order. "Close" is MPICH's rule (after Träff and Lübbe,
/// EuroMPI'15): the smallest difference between the largest and smallest filled dimension;
/// among equally close choices, the lexicographically smallest. `Err` when `nodes` is not a
/// multiple of the fixed entries' product (or all entries are fixed and make another count).
///
/// ```
/// use fastmp::dims_create;
/// assert_eq!(dims_create(72, &[0, 0])?, [9, 8]);
/// assert_eq!(dims_create(12, &[0, 0, 0])?, [3, 2, 2]);
/// assert_eq!(dims_create(6, &[0, 3, 0])?, [2, 3, 1]);
/// assert!(dims_create(7, &[0, 3, 0]).is_err());
/// # Ok::<(), fastmp::Error>(())
/// ```
pub fn dims_create(nodes: usize, dims: &[usize]) -> Result<Vec<usize>> {
    if nodes == 0 {
        return Err(Error::InvalidArgument("dims_create: nodes must be positive, got 0".into()));
    }
    let fixed = dims.iter().filter(|&&d| d != 0).try_fold(1usize, |acc, &d| acc.checked_mul(d)).ok_or_else(|| {
        Error::InvalidArgument(format!("dims_create: the product of the fixed dimensions {dims:?} overflows"))
    })?;
    let free = dims.iter().filter(|&&d| d == 0).count();
    if !nodes.is_multiple_of(fixed) || (free == 0 && fixed != nodes) {
        return Err(Error::InvalidArgument(format!(
            "dims_create: {nodes} nodes cannot fill dims {dims:?}: the fixed dimensions' product {fixed} {}",
            if free == 0 { "must equal it" } else { "must divide it" }
        )));
    }
    let mut filled = balanced(nodes / fixed, free).into_iter();
    Ok(dims.iter().map(|&d| if d == 0 { filled.next().expect("one value per free dimension") } else { d }).collect())
}

/// The `count` factors of `n` in non-increasing order with the smallest spread (largest −
/// smallest), ties to the lexicographically smallest: a depth-first search over the divisors,
/// largest factor first, cut where the spread can no longer beat the best found.
fn balanced(n: usize, count: usize) -> Vec<usize> {
    let divisors: Vec<usize> = (1..).take_while(|&d| d <= n / d).filter(|&d| n.is_multiple_of(d)).collect();
    let mut divisors: Vec<usize> =
        divisors.iter().copied().chain(divisors.iter().rev().map(|&d| n / d)).collect::<Vec<_>>();
    divisors.dedup();
    let mut best = Vec::new();
    let mut current = Vec::with_capacity(count);
    search_balanced(n, count, n, &divisors, &mut current, &mut best);
    best
}

fn spread(dims: &[usize]) -> usize {
    dims.first().zip(dims.last()).map_or(0, |(hi, lo)| hi - lo)
}

/// Extends `current` (non-increasing, each factor at most `cap`) by `left` factors whose
/// product is `rest`, keeping the best complete choice in `best`.
fn search_balanced(
    rest: usize,
    left: usize,
    cap: usize,
    divisors: &[usize],
    current: &mut Vec<usize>,
    best: &mut Vec<usize>,
) {
    if rest == 1 || left == 0 {
        if rest != 1 {
            return;
        }
        let depth = current.len();
        current.resize(depth + left, 1);
        if best.is_empty() || (spread(current), &*current) < (spread(best), &*best) {
            best.clone_from(current);
        }
        current.truncate(depth);
        return;
    }
    // Factors from the largest down: the next factor is the largest of the `left` still to
    // choose, so it is at least the left-th root of `rest`.
    for &f in divisors.iter().rev().filter(|&&f| f <= cap && rest.is_multiple_of(f)) {
        if !power_at_least(f, left, rest) {
            break;
        }
        // Every later factor is at most `f`, so the spread is at least first − f.
        let first = current.first().copied().unwrap_or(f);
        if !best.is_empty() && first - f > spread(best) {
            break;
        }
        current.push(f);
        search_balanced(rest / f, left - 1, f, divisors, current, best);
        current.pop();
    }
}

/// Whether `base^exp >= target`, without overflowing.
fn power_at_least(base: usize, exp: usize, target: usize) -> bool {
    let mut power = 1usize;
    for _ in 0..exp {
        power = power.saturating_mul(base);
        if power >= target {
            return true;
        }
    }
    power >= target
}

/// Communicator ranks in the order the grid takes them when reordering: by node, then process,
/// then rank (a stable order, so one process on one node keeps the identity).
fn placement_order(members: &[usize], placement: &Placement) -> Vec<usize> {
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by_key(|&r| (placement.node_of(members[r]), placement.process_of(members[r]), r));
    order
}

/// Checks a grid's shape for `call` on a communicator of `size` ranks; returns its cell count.
fn grid_cells(call: &str, dims: &[usize], periods: &[bool], size: usize) -> Result<usize> {
    if dims.len() != periods.len() {
        return Err(Error::InvalidArgument(format!(
            "{call}: {} dimensions but {} periodicity flags",
            dims.len(),
            periods.len()
        )));
    }
    let cells = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).filter(|&c| c > 0 || dims.is_empty());
    match cells {
        Some(cells) if cells <= size => Ok(cells),
        _ => Err(Error::InvalidArgument(format!(
            "{call}: grid {dims:?} needs more than the {size} ranks of the communicator (or has a zero extent)"
        ))),
    }
}

impl Comm {
    /// Lays the first `dims.iter().product()` ranks out on a grid (MPI_Cart_create); the
    /// remaining ranks get `None`. Collective. With `reorder`, grid ranks follow
    /// [`Comm::cart_map`] (the ranks of one node on consecutive grid positions), otherwise grid
    /// rank `i` is rank `i` of this communicator; on one node both are the identity.
    pub fn cart_create(&self, dims: &[usize], periods: &[bool], reorder: bool) -> Result<Option<CartComm>> {
        let cells = grid_cells("cart_create", dims, periods, self.size())?;
        let grid_rank =
            if reorder { self.cart_map(dims, periods)? } else { (self.rank() < cells).then_some(self.rank()) };
        let key = i32::try_from(grid_rank.unwrap_or(0))
            .map_err(|_| Error::InvalidArgument(format!("cart_create: {cells} grid cells exceed i32 keys")))?;
        let comm = self.split(grid_rank.map(|_| 0), key)?;
        Ok(comm.map(|comm| CartComm { comm, dims: dims.to_vec(), periods: periods.to_vec() }))
    }

    /// This rank's rank on a grid of `dims` laid out for the machine, or `None` if the grid
    /// leaves it out (MPI_Cart_map). Ranks are taken by node, then process, then rank, so
    /// neighbours along the last dimension share a node wherever they can. Local.
    ///
    /// ```
    /// fastmp::run(3, |world| {
    ///     // Thread ranks of one process: the identity, and rank 2 is not on a 2-cell grid.
    ///     let mapped = world.cart_map(&[2], &[false])?;
    ///     assert_eq!(mapped, (world.rank() < 2).then_some(world.rank()));
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn cart_map(&self, dims: &[usize], periods: &[bool]) -> Result<Option<usize>> {
        let cells = grid_cells("cart_map", dims, periods, self.size())?;
        let order = placement_order(self.group.members(), self.placement());
        Ok(order.iter().position(|&r| r == self.rank()).filter(|&p| p < cells))
    }
}

impl CartComm {
    /// The grid's extent in each dimension.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Whether each dimension wraps around.
    pub fn periods(&self) -> &[bool] {
        &self.periods
    }

    /// The underlying communicator.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// Grid coordinates of `rank` (MPI_Cart_coords).
    pub fn coords(&self, rank: usize) -> Result<Vec<usize>> {
        if rank >= self.size() {
            return Err(Error::RankOutOfRange { rank, size: self.size() });
        }
        let mut coords = vec![0; self.dims.len()];
        let mut rest = rank;
        for (c, &d) in coords.iter_mut().zip(&self.dims).rev() {
            *c = rest % d;
            rest /= d;
        }
        Ok(coords)
    }

    /// Rank at `coords` (MPI_Cart_rank). Periodic dimensions wrap; out-of-range coordinates in
    /// other dimensions are an error.
    pub fn rank_of(&self, coords: &[isize]) -> Result<usize> {
        self.try_rank_of(coords)?.ok_or_else(|| {
            Error::InvalidArgument(format!("coordinates {coords:?} lie outside the non-periodic grid {:?}", self.dims))
        })
    }

    fn try_rank_of(&self, coords: &[isize]) -> Result<Option<usize>> {
        if coords.len() != self.dims.len() {
            return Err(Error::InvalidArgument(format!(
                "{} coordinates for a {}-dimensional grid",
                coords.len(),
                self.dims.len()
            )));
        }
        let mut rank = 0;
        for ((&c, &d), &periodic) in coords.iter().zip(&self.dims).zip(&self.periods) {
            let d = d as isize;
            let c = if periodic { c.rem_euclid(d) } else { c };
            if !(0..d).contains(&c) {
                return Ok(None);
            }
            rank = rank * d as usize + c as usize;
        }
        Ok(Some(rank))
    }

    /// Source and destination for a shift by `disp` along `dimension` (MPI_Cart_shift): the
    /// ranks `disp` steps down and up, [`PROC_NULL`] off a non-periodic edge, so the pair goes
    /// straight into [`Comm::sendrecv`].
    pub fn shift(&self, dimension: usize, disp: isize) -> Result<(usize, usize)> {
        if dimension >= self.dims.len() {
            return Err(Error::InvalidArgument(format!(
                "shift along dimension {dimension} of a {}-dimensional grid",
                self.dims.len()
            )));
        }
        let here: Vec<isize> = self.coords(self.rank())?.into_iter().map(|c| c as isize).collect();
        let extent = self.dims[dimension] as i128;
        // Wide arithmetic: any displacement, even ±isize::MAX, is a valid question.
        let moved = |by: i128| {
            let target = here[dimension] as i128 + by;
            let target = if self.periods[dimension] { target.rem_euclid(extent) } else { target };
            if !(0..extent).contains(&target) {
                return Ok(PROC_NULL);
            }
            let mut c = here.clone();
            c[dimension] = target as isize;
            Ok(self.try_rank_of(&c)?.unwrap_or(PROC_NULL))
        };
        Ok((moved(-(disp as i128))?, moved(disp as i128)?))
    }

    /// The sub-grid through this rank that keeps the dimensions where `remain` is true
    /// (MPI_Cart_sub). Collective.
    pub fn sub(&self, remain: &[bool]) -> Result<CartComm> {
        if remain.len() != self.dims.len() {
            return Err(Error::InvalidArgument(format!(
                "sub: {} flags for a {}-dimensional grid",
                remain.len(),
                self.dims.len()
            )));
        }
        let coords = self.coords(self.rank())?;
        // Ranks agreeing on every dropped coordinate share a sub-grid.
        let color = coords
            .iter()
            .zip(&self.dims)
            .zip(remain)
            .filter(|(_, keep)| !**keep)
            .fold(0usize, |acc, ((&c, &d), _)| acc * d + c);
        let comm = self.comm.split(Some(color as u32), self.rank() as i32)?.expect("every rank has a color");
        let pick = |v: &[usize]| v.iter().zip(remain).filter(|(_, k)| **k).map(|(&x, _)| x).collect::<Vec<_>>();
        let periods = self.periods.iter().zip(remain).filter(|(_, k)| **k).map(|(&p, _)| p).collect();
        Ok(CartComm { comm, dims: pick(&self.dims), periods })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reordering_puts_each_node_on_consecutive_cells() {
        // Ranks dealt round robin onto two nodes, one process per rank.
        let placement = Placement::from_keys(&[0, 1, 2, 3, 4, 5], &["a", "b", "a", "b", "a", "b"]);
        assert_eq!(placement_order(&[0, 1, 2, 3, 4, 5], &placement), [0, 2, 4, 1, 3, 5]);
        // A communicator of world ranks 5, 4, 1: node "a" holds its rank 1, node "b" its ranks
        // 0 and 2, whose processes (world ranks 5 and 1) go in process order.
        assert_eq!(placement_order(&[5, 4, 1], &placement), [1, 2, 0]);
        // One process on one node: the identity.
        assert_eq!(placement_order(&[3, 1, 2], &Placement::single_process(4)), [0, 1, 2]);
    }

    #[test]
    fn balanced_factors_minimise_the_spread() {
        assert_eq!(balanced(72, 2), [9, 8]);
        assert_eq!(balanced(1, 3), [1, 1, 1]);
        assert_eq!(balanced(1 << 20, 20), [2; 20]);
        assert_eq!(balanced(97, 3), [97, 1, 1]);
        assert!(power_at_least(usize::MAX, 3, usize::MAX) && !power_at_least(2, 3, 9));
    }
}
