//! Process grids: the ranks of a communicator as a Cartesian grid, and restricted sub-grids.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use fastmp::{CartComm, Comm, Comparison, Result, dims_create};

use crate::invalid;

/// Tag base for the communicators a grid creates among its members (`Comm::create_group`).
const SUBCOMM_TAG: i32 = 0x0da0;

/// A Cartesian arrangement of the ranks of a communicator (HPJava's `Procs`/`Group`).
///
/// The grid's ranks are numbered row-major by coordinates, as `Comm::cart_create` without
/// reordering numbers them. A restricted grid ([`Grid::restrict`]) keeps the same dimensions
/// with some fixed at one coordinate: its members are the ranks at those coordinates. Clones
/// share the communicator.
#[derive(Clone)]
pub struct Grid {
    shared: Rc<Shared>,
    /// Per grid dimension, the coordinate it is restricted to, if any.
    fixed: Vec<Option<usize>>,
}

struct Shared {
    cart: CartComm,
    /// This rank's coordinates in the full grid.
    my_coords: Vec<usize>,
    /// Communicators among the members of restricted grids and of grid lines, created on first
    /// use (collectively over those members only) and kept for the grid's life.
    subcomms: RefCell<HashMap<Vec<Option<usize>>, Comm>>,
}

impl std::fmt::Debug for Grid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grid").field("dims", &self.dims()).field("fixed", &self.fixed).finish()
    }
}

impl PartialEq for Grid {
    /// Same communicator (the same grid creation, or a clone of it), dimensions and restriction.
    fn eq(&self, other: &Grid) -> bool {
        Rc::ptr_eq(&self.shared, &other.shared) && self.fixed == other.fixed
    }
}

impl Grid {
    /// A grid of shape `dims` over all ranks of `comm`; collective over `comm`. The product of
    /// `dims` must be `comm.size()`.
    ///
    /// ```
    /// fastmp::run(6, |world| {
    ///     let grid = fastmp_darray::Grid::new(&world, &[3, 2])?;
    ///     assert_eq!(grid.coords(), Some(&[world.rank() / 2, world.rank() % 2][..]));
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn new(comm: &Comm, dims: &[usize]) -> Result<Grid> {
        if dims.is_empty() {
            return Err(invalid("Grid::new", "a grid needs at least one dimension"));
        }
        let product = dims.iter().try_fold(1usize, |p, &d| p.checked_mul(d));
        if dims.contains(&0) || product != Some(comm.size()) {
            return Err(invalid(
                "Grid::new",
                format!("a {dims:?} grid has {product:?} places, the communicator has {} ranks", comm.size()),
            ));
        }
        let cart = comm
            .cart_create(dims, &vec![false; dims.len()], false)?
            .ok_or_else(|| invalid("Grid::new", "this rank is outside the Cartesian communicator"))?;
        let my_coords = cart.coords(cart.rank())?;
        let shared = Shared { cart, my_coords, subcomms: RefCell::default() };
        Ok(Grid { shared: Rc::new(shared), fixed: vec![None; dims.len()] })
    }

    /// A grid of `ndims` dimensions over all ranks of `comm`, shaped by `fastmp::dims_create`.
    pub fn auto(comm: &Comm, ndims: usize) -> Result<Grid> {
        Grid::new(comm, &dims_create(comm.size(), &vec![0; ndims])?)
    }

    /// The communicator the grid's operations use: a duplicate of the one it was created over,
    /// with the same ranks in the same order.
    pub fn comm(&self) -> &Comm {
        &self.shared.cart
    }

    /// Number of grid dimensions (restricted ones included).
    pub fn ndims(&self) -> usize {
        self.fixed.len()
    }

    /// Extent of every grid dimension (a restricted one keeps its extent; see [`Grid::fixed`]).
    pub fn dims(&self) -> &[usize] {
        self.shared.cart.dims()
    }

    /// Per dimension, the coordinate the grid is restricted to, if any.
    pub fn fixed(&self) -> &[Option<usize>] {
        &self.fixed
    }

    /// Number of member ranks.
    pub fn size(&self) -> usize {
        self.dims().iter().zip(&self.fixed).map(|(&d, f)| if f.is_some() { 1 } else { d }).product()
    }

    /// This rank's coordinates, if it is a member.
    pub fn coords(&self) -> Option<&[usize]> {
        let mine = self.coords_cache();
        self.is_member_at(mine).then_some(mine)
    }

    /// Whether this rank is a member.
    pub fn is_member(&self) -> bool {
        self.coords().is_some()
    }

    /// The sub-grid with dimension `dim` fixed at `coord` (HPJava's `restrict`). Local: no
    /// communication.
    pub fn restrict(&self, dim: usize, coord: usize) -> Result<Grid> {
        if dim >= self.ndims() || coord >= self.dims()[dim] {
            return Err(invalid(
                "Grid::restrict",
                format!("dimension {dim} coordinate {coord} is outside the {:?} grid", self.dims()),
            ));
        }
        if let Some(c) = self.fixed[dim].filter(|&c| c != coord) {
            return Err(invalid("Grid::restrict", format!("dimension {dim} is already restricted to {c}")));
        }
        let mut fixed = self.fixed.clone();
        fixed[dim] = Some(coord);
        Ok(Grid { shared: self.shared.clone(), fixed })
    }

    /// Rank in [`Grid::comm`] of the place at `coords`.
    pub fn rank_at(&self, coords: &[usize]) -> usize {
        coords.iter().zip(self.dims()).fold(0, |rank, (&c, &d)| rank * d + c)
    }

    /// Coordinates of `rank` of [`Grid::comm`] if it is a member of this grid.
    pub fn coords_of(&self, rank: usize) -> Option<Vec<usize>> {
        let coords = self.shared.cart.coords(rank).ok()?;
        self.is_member_at(&coords).then_some(coords)
    }

    /// The member ranks, in row-major order of their coordinates.
    pub fn members(&self) -> Vec<usize> {
        (0..self.comm().size()).filter(|&r| self.coords_of(r).is_some()).collect()
    }

    /// Whether `other` is over the same ranks in the same order (so ranks name the same
    /// processes in both).
    pub fn same_ranks(&self, other: &Grid) -> bool {
        Rc::ptr_eq(&self.shared, &other.shared)
            || matches!(self.comm().compare(other.comm()), Comparison::Ident | Comparison::Congruent)
    }

    /// A communicator over the members of this grid with the dimensions `keep` free and the
    /// others fixed at this rank's coordinates (all `true`: the whole grid). Created on first
    /// use, collectively over its members only, then cached. `None` for a non-member.
    pub(crate) fn line_comm(&self, keep: &[bool]) -> Result<Option<Comm>> {
        let Some(mine) = self.coords() else { return Ok(None) };
        let key: Vec<Option<usize>> =
            self.fixed.iter().zip(keep).zip(mine).map(|((f, &k), &c)| if k { *f } else { Some(c) }).collect();
        if let Some(comm) = self.shared.subcomms.borrow().get(&key) {
            return Ok(Some(comm.clone()));
        }
        let line = Grid { shared: self.shared.clone(), fixed: key.clone() };
        let members: Vec<usize> = line.members();
        let comm = if members.len() == self.comm().size() {
            self.comm().dup()?
        } else {
            let group = self.comm().group().incl(&members)?;
            self.comm().create_group(&group, SUBCOMM_TAG)?
        };
        self.shared.subcomms.borrow_mut().insert(key, comm.clone());
        Ok(Some(comm))
    }

    fn coords_cache(&self) -> &[usize] {
        &self.shared.my_coords
    }

    fn is_member_at(&self, coords: &[usize]) -> bool {
        self.fixed.iter().zip(coords).all(|(f, &c)| f.is_none_or(|f| f == c))
    }
}
