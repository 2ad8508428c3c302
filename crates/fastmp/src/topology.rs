//! Cartesian process topologies (MPI_Cart_*): a communicator whose ranks are laid out on a grid.

use std::ops::Deref;

use crate::comm::Comm;
use crate::error::{Error, Result};

/// A communicator with a Cartesian layout; it derefs to [`Comm`] for communication. Ranks are
/// laid out in row-major order (the last dimension varies fastest), as in MPI.
///
/// ```
/// fastmp::run(6, |world| {
///     let grid = world.cart_create(&[2, 3], &[false, true])?.unwrap();
///     let coords = grid.coords(grid.rank())?;
///     assert_eq!(grid.rank_of(&[coords[0] as isize, coords[1] as isize])?, grid.rank());
///     // Along the periodic dimension the neighbours wrap around.
///     let (from, to) = grid.shift(1, 1)?;
///     assert!(from.is_some() && to.is_some());
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

/// Balanced dimensions for `nodes` processes in `ndims` dimensions, largest first
/// (MPI_Dims_create with no constraints).
pub fn dims_create(nodes: usize, ndims: usize) -> Result<Vec<usize>> {
    if ndims == 0 || nodes == 0 {
        return Err(Error::InvalidArgument(format!("dims_create({nodes}, {ndims}): both must be positive")));
    }
    // Beyond log2(nodes) dimensions every extra one is 1; refuse absurd counts rather than
    // allocating them.
    if ndims > 4096 {
        return Err(Error::InvalidArgument(format!("dims_create: {ndims} dimensions is more than 4096")));
    }
    let mut dims = vec![1; ndims];
    let mut rest = nodes;
    let mut factors = Vec::new();
    let mut f = 2;
    while f <= rest / f {
        while rest.is_multiple_of(f) {
            factors.push(f);
            rest /= f;
        }
        f += 1;
    }
    if rest > 1 {
        factors.push(rest);
    }
    // Largest prime factors first, each onto the currently smallest dimension.
    for &p in factors.iter().rev() {
        let smallest = (0..ndims).min_by_key(|&i| dims[i]).expect("ndims > 0");
        dims[smallest] *= p;
    }
    dims.sort_unstable_by(|a, b| b.cmp(a));
    Ok(dims)
}

impl Comm {
    /// Lays the first `dims.iter().product()` ranks out on a grid (MPI_Cart_create, without
    /// reordering). The remaining ranks get `None`. Collective.
    pub fn cart_create(&self, dims: &[usize], periods: &[bool]) -> Result<Option<CartComm>> {
        if dims.len() != periods.len() {
            return Err(Error::InvalidArgument(format!(
                "cart_create: {} dimensions but {} periodicity flags",
                dims.len(),
                periods.len()
            )));
        }
        let cells = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).filter(|&c| c > 0 || dims.is_empty());
        match cells {
            Some(cells) if cells <= self.size() => {
                let color = (self.rank() < cells).then_some(0);
                let comm = self.split(color, self.rank() as i32)?;
                Ok(comm.map(|comm| CartComm { comm, dims: dims.to_vec(), periods: periods.to_vec() }))
            }
            _ => Err(Error::InvalidArgument(format!(
                "cart_create: grid {dims:?} needs more than the {} ranks of the communicator (or has a zero extent)",
                self.size()
            ))),
        }
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
    /// ranks `disp` steps down and up. `None` is MPI_PROC_NULL (off a non-periodic edge).
    pub fn shift(&self, dimension: usize, disp: isize) -> Result<(Option<usize>, Option<usize>)> {
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
                return Ok(None);
            }
            let mut c = here.clone();
            c[dimension] = target as isize;
            self.try_rank_of(&c)
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
