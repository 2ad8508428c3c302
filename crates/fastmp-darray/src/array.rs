//! `DArray`: a distributed array — metadata every rank shares, and this rank's stored block.

use fastmp::Result;
use ndarray::{Array, ArrayView, ArrayViewMut, Dimension, IntoDimension, Slice};

use crate::grid::Grid;
use crate::invalid;
use crate::range::{Range, Ranges};
use crate::section::{Section, SectionMut, Span, Triplet, select};

/// A distributed array of element type `T` and dimensionality `D` (an `ndarray` dimension:
/// `Ix1`, `Ix2`, `Ix3`, ..., or `IxDyn`).
///
/// Every rank holds the same metadata (grid, ranges); a member of the grid also stores its
/// block — its physical segment plus any ghost cells — as an `ndarray` array in row-major
/// order. Creating an array is local: no communication.
#[derive(Clone, Debug)]
pub struct DArray<T, D: Dimension> {
    grid: Grid,
    ranges: Vec<Range>,
    /// This rank's coordinate along each dimension's range (0 for collapsed; `None` for a
    /// rank outside the grid).
    coords: Option<Vec<usize>>,
    /// Per dimension, the global index of each physical local index.
    globals: Vec<Vec<usize>>,
    /// The stored block, ghosts included (empty on a non-member).
    block: Array<T, D>,
}

impl<T: Clone + Default, D: Dimension> DArray<T, D> {
    /// An array whose element at global index `i` is `f(i)`, computed on its owners. Ghost
    /// cells start as `T::default()`.
    ///
    /// ```
    /// use fastmp_darray::{DArray, Grid, Range};
    /// fastmp::run(2, |world| {
    ///     let grid = Grid::new(&world, &[2])?;
    ///     let a = DArray::from_fn(&grid, [Range::cyclic(5, &grid, 0)?], |i| i * i)?;
    ///     let mine: Vec<usize> = a.overall().map(|(_, &x)| x).collect();
    ///     assert_eq!(mine, if world.rank() == 0 { vec![0, 4, 16] } else { vec![1, 9] });
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn from_fn(grid: &Grid, ranges: impl Ranges<Dim = D>, mut f: impl FnMut(D::Pattern) -> T) -> Result<Self> {
        let mut a = DArray::from_elem(grid, ranges, T::default())?;
        let offsets: Vec<usize> = a.ranges.iter().map(|r| r.ghosts().0).collect();
        let mut global = D::zeros(a.ranges.len());
        let globals = std::mem::take(&mut a.globals);
        for (mut idx, x) in a.block.indexed_iter_mut().map(|(i, x): (D::Pattern, &mut T)| (i.into_dimension(), x)) {
            let inside = idx.slice_mut().iter_mut().zip(&offsets).zip(&globals).zip(global.slice_mut()).all(
                |(((l, &off), table), g)| {
                    let Some(&gl) = l.checked_sub(off).and_then(|l| table.get(l)) else { return false };
                    *g = gl;
                    true
                },
            );
            if inside {
                *x = f(global.clone().into_pattern());
            }
        }
        a.globals = globals;
        Ok(a)
    }

    /// An array with every element (ghosts included) equal to `value`.
    pub fn from_elem(grid: &Grid, ranges: impl Ranges<Dim = D>, value: T) -> Result<Self> {
        let ranges: Vec<Range> = ranges.into_vec();
        check_ranges::<D>(grid, &ranges)?;
        let coords: Option<Vec<usize>> =
            grid.coords().map(|gc| ranges.iter().map(|r| r.grid_dim().map_or(0, |d| gc[d])).collect());
        let stored: Vec<usize> = match &coords {
            Some(c) => ranges.iter().zip(c).map(|(r, &c)| r.stored_len(c)).collect(),
            None => vec![0; ranges.len()],
        };
        let globals = match &coords {
            Some(c) => {
                ranges.iter().zip(c).map(|(r, &c)| (0..r.local_len(c)).map(|l| r.global(c, l)).collect()).collect()
            }
            None => vec![Vec::new(); ranges.len()],
        };
        let mut shape = D::zeros(ranges.len());
        shape.slice_mut().copy_from_slice(&stored);
        Ok(DArray { grid: grid.clone(), ranges, coords, globals, block: Array::from_elem(shape, value) })
    }
}

/// Ranges must match the array's rank and the grid: distinct, unrestricted grid dimensions of
/// the right extent.
fn check_ranges<D: Dimension>(grid: &Grid, ranges: &[Range]) -> Result<()> {
    if D::NDIM.is_some_and(|n| n != ranges.len()) || ranges.is_empty() {
        let rank = D::NDIM.map_or("an array of at least one dimension".to_string(), |n| format!("a {n}-D array"));
        return Err(invalid("DArray", format!("{} ranges for {rank}", ranges.len())));
    }
    let mut used = vec![false; grid.ndims()];
    for (r, range) in ranges.iter().enumerate() {
        let Some(dim) = range.grid_dim() else { continue };
        if dim >= grid.ndims() || grid.dims()[dim] != range.procs() || grid.fixed()[dim].is_some() {
            return Err(invalid(
                "DArray",
                format!(
                    "range {r} targets grid dimension {dim}, which this {grid:?} does not offer with {} processes",
                    range.procs()
                ),
            ));
        }
        if std::mem::replace(&mut used[dim], true) {
            return Err(invalid("DArray", format!("two ranges target grid dimension {dim}")));
        }
    }
    Ok(())
}

impl<T, D: Dimension> DArray<T, D> {
    /// The process grid.
    pub fn grid(&self) -> &Grid {
        &self.grid
    }

    /// The ranges, one per dimension.
    pub fn ranges(&self) -> &[Range] {
        &self.ranges
    }

    /// The global shape.
    pub fn shape(&self) -> Vec<usize> {
        self.ranges.iter().map(Range::extent).collect()
    }

    /// Whether this rank stores a block (it is a member of the grid).
    pub fn is_member(&self) -> bool {
        self.coords.is_some()
    }

    /// This rank's coordinate along each dimension's range, if a member.
    pub fn coords(&self) -> Option<&[usize]> {
        self.coords.as_deref()
    }

    /// The physical segment: the elements this rank owns, without ghosts.
    pub fn local(&self) -> ArrayView<'_, T, D> {
        let g = self.ghost_lo();
        self.block.slice_each_axis(|ax| physical(&g, &self.globals, ax.axis.index()))
    }

    /// The physical segment, writable.
    pub fn local_mut(&mut self) -> ArrayViewMut<'_, T, D> {
        let g = self.ghost_lo();
        let globals = &self.globals;
        self.block.slice_each_axis_mut(|ax| physical(&g, globals, ax.axis.index()))
    }

    /// The stored block with its ghost cells. Along a dimension with ghost widths `(lo, hi)`,
    /// stored index `lo + l` is physical index `l`, so a stencil reads its neighbours at
    /// `lo + l - 1` and `lo + l + 1` (HPJava's shifted indices on ghost arrays).
    pub fn local_with_ghosts(&self) -> ArrayView<'_, T, D> {
        self.block.view()
    }

    /// The stored block with its ghost cells, writable.
    pub fn local_with_ghosts_mut(&mut self) -> ArrayViewMut<'_, T, D> {
        self.block.view_mut()
    }

    /// The local (physical) index of global index `g`, if this rank stores it.
    pub fn global_to_local(&self, g: D::Pattern) -> Option<D::Pattern> {
        let g = g.into_dimension();
        let coords = self.coords.as_ref()?;
        let mut local = D::zeros(self.ranges.len());
        for (((&gi, l), r), &c) in g.slice().iter().zip(local.slice_mut()).zip(&self.ranges).zip(coords) {
            if gi >= r.extent() {
                return None;
            }
            let (owner, li) = r.owner(gi);
            if owner != c {
                return None;
            }
            *l = li;
        }
        Some(local.into_pattern())
    }

    /// The global index of local (physical) index `l`; `None` if `l` is outside the block.
    pub fn local_to_global(&self, l: D::Pattern) -> Option<D::Pattern> {
        let l = l.into_dimension();
        let mut g = D::zeros(self.ranges.len());
        for ((&li, gi), table) in l.slice().iter().zip(g.slice_mut()).zip(&self.globals) {
            *gi = *table.get(li)?;
        }
        Some(g.into_pattern())
    }

    /// The element at global index `g`, if this rank stores it.
    pub fn get(&self, g: D::Pattern) -> Option<&T> {
        let l = self.global_to_local(g)?;
        let idx = self.stored_index(l.into_dimension());
        self.block.get(idx)
    }

    /// The element at global index `g`, writable, if this rank stores it.
    pub fn get_mut(&mut self, g: D::Pattern) -> Option<&mut T> {
        let l = self.global_to_local(g)?;
        let idx = self.stored_index(l.into_dimension());
        self.block.get_mut(idx)
    }

    /// HPJava's `overall` loop: this rank's elements with their global indices, in local
    /// row-major order.
    pub fn overall(&self) -> impl Iterator<Item = (D::Pattern, &T)> + '_ {
        let globals = &self.globals;
        let local = self.local();
        ndarray::indices(local.raw_dim()).into_iter().zip(local).map(move |(l, x)| (to_global::<D>(globals, l), x))
    }

    /// [`DArray::overall`], writable.
    pub fn overall_mut(&mut self) -> impl Iterator<Item = (D::Pattern, &mut T)> + '_ {
        let g = self.ghost_lo();
        let globals = &self.globals;
        let local = self.block.slice_each_axis_mut(|ax| physical(&g, globals, ax.axis.index()));
        ndarray::indices(local.raw_dim()).into_iter().zip(local).map(move |(l, x)| (to_global::<D>(globals, l), x))
    }

    /// The section selected by one triplet per dimension; it aliases this array.
    pub fn section(&self, triplets: &[Triplet]) -> Result<Section<'_, T, D>> {
        Ok(Section { spans: select(&self.whole_spans(), triplets, "DArray::section")?, array: self })
    }

    /// A writable section.
    pub fn section_mut(&mut self, triplets: &[Triplet]) -> Result<SectionMut<'_, T, D>> {
        Ok(SectionMut { spans: select(&self.whole_spans(), triplets, "DArray::section_mut")?, array: self })
    }

    /// Whether `other` has the same grid and ranges (elements with the same global index live
    /// on the same rank at the same local index).
    pub fn aligned_with<U, E: Dimension>(&self, other: &DArray<U, E>) -> bool {
        self.grid == other.grid && self.ranges == other.ranges
    }

    pub(crate) fn whole_spans(&self) -> Vec<Span> {
        self.ranges.iter().map(|r| Span::whole(r.extent())).collect()
    }

    fn ghost_lo(&self) -> Vec<usize> {
        self.ranges.iter().map(|r| r.ghosts().0).collect()
    }

    fn stored_index(&self, mut l: D) -> D {
        for (li, r) in l.slice_mut().iter_mut().zip(&self.ranges) {
            *li += r.ghosts().0;
        }
        l
    }

    /// The stored block as a row-major slice, and its strides in elements.
    pub(crate) fn storage(&self) -> (&[T], Vec<usize>) {
        let strides = row_major_strides(self.block.shape());
        (self.block.as_slice().expect("blocks are kept in standard layout"), strides)
    }

    /// The stored block as a writable row-major slice, and its strides in elements.
    pub(crate) fn storage_mut(&mut self) -> (&mut [T], Vec<usize>) {
        let strides = row_major_strides(self.block.shape());
        (self.block.as_slice_mut().expect("blocks are kept in standard layout"), strides)
    }
}

/// Row-major strides of a shape, in elements.
pub(crate) fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

/// The physical part of the stored block along `axis`.
fn physical(ghost_lo: &[usize], globals: &[Vec<usize>], axis: usize) -> Slice {
    let lo = ghost_lo[axis] as isize;
    let n = globals[axis].len() as isize;
    if n == 0 { Slice::from(0..0) } else { Slice::from(lo..lo + n) }
}

fn to_global<D: Dimension>(globals: &[Vec<usize>], local: D::Pattern) -> D::Pattern {
    let mut g = local.into_dimension();
    for (x, table) in g.slice_mut().iter_mut().zip(globals) {
        *x = table[*x];
    }
    g.into_pattern()
}
