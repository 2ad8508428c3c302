//! Reductions (Adlib's `maxval`, `minval`, `sum`, `product`, `any`, `all`, `count`): over the
//! whole array or a section, the result returned on every member of the grid; and along one
//! dimension, a lower-rank array on the same grid.
//!
//! Each rank folds its own elements first, so one small `allreduce` finishes the job. A whole
//! reduction runs over the grid's members (the grid communicator [`Grid::line_comm`] caches);
//! a reduction along a distributed dimension runs over the grid line of the dimension's grid
//! dimension, so the cached line communicators are the reductions' schedules: created on first
//! use, reused afterwards. A copy of a replicated array that another copy already contributes
//! contributes the identity, so every element counts once.

use bytemuck::Pod;
use fastmp::Result;
use fastmp::op::Op;
use ndarray::{Axis, Dimension, RemoveAxis};

use crate::array::DArray;
use crate::grid::Grid;
use crate::invalid;
use crate::range::{Range, Ranges};
use crate::section::{AsSection, Section, SectionMut, Span};

/// Element types the numeric reductions accept: Rust's primitive integers (`i8`..`i64`,
/// `u8`..`u64`, `isize`, `usize`) and floats, with the identity of each reduction (`Default`,
/// zero, is what a result array's ghost cells hold).
///
/// Integer sums and products wrap on overflow, as `fastmp::op::Sum` does. `maxval` and
/// `minval` ignore NaN elements. The order in which a sum or product is taken is unspecified,
/// so floating-point results may differ in the last bits between grid shapes.
///
/// ```
/// use fastmp_darray::{DArray, Grid, Range, Triplet};
/// fastmp::run(3, |world| {
///     let grid = Grid::new(&world, &[3])?;
///     let a = DArray::from_fn(&grid, [Range::cyclic(10, &grid, 0)?], |i| i as i64)?;
///     assert_eq!(a.sum()?, 45);
///     assert_eq!((a.minval()?, a.maxval()?), (0, 9));
///     // Every other element from 1: 1 + 3 + 5 + 7 + 9.
///     assert_eq!(a.section(&[Triplet::new(1, 10, 2)])?.sum()?, 25);
///     let even = DArray::from_fn(&grid, [Range::block(10, &grid, 0)?], |i| i % 2 == 0)?;
///     assert_eq!((even.count()?, even.any()?, even.all()?), (5, true, false));
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub trait Reducible: Pod + PartialOrd + Default {
    /// The identity of `sum` (0).
    const ZERO: Self;
    /// The identity of `product` (1).
    const ONE: Self;
    /// The identity of `maxval`: the most negative value (−∞ for floats).
    const LOWEST: Self;
    /// The identity of `minval`: the most positive value (+∞ for floats).
    const HIGHEST: Self;
    /// `self + other`, wrapping for integers.
    fn plus(self, other: Self) -> Self;
    /// `self * other`, wrapping for integers.
    fn times(self, other: Self) -> Self;
}

macro_rules! reducible_ints {
    ($($t:ty),*) => {$(
        impl Reducible for $t {
            const ZERO: $t = 0;
            const ONE: $t = 1;
            const LOWEST: $t = <$t>::MIN;
            const HIGHEST: $t = <$t>::MAX;
            fn plus(self, other: $t) -> $t {
                self.wrapping_add(other)
            }
            fn times(self, other: $t) -> $t {
                self.wrapping_mul(other)
            }
        }
    )*};
}

macro_rules! reducible_floats {
    ($($t:ty),*) => {$(
        impl Reducible for $t {
            const ZERO: $t = 0.0;
            const ONE: $t = 1.0;
            const LOWEST: $t = <$t>::NEG_INFINITY;
            const HIGHEST: $t = <$t>::INFINITY;
            fn plus(self, other: $t) -> $t {
                self + other
            }
            fn times(self, other: $t) -> $t {
                self * other
            }
        }
    )*};
}

reducible_ints!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);
reducible_floats!(f32, f64);

/// The larger of two values; a NaN `b` (an element) never wins over the accumulator `a`.
fn larger<T: PartialOrd>(a: T, b: T) -> T {
    if b > a { b } else { a }
}

/// The smaller of two values; a NaN `b` never wins.
fn smaller<T: PartialOrd>(a: T, b: T) -> T {
    if b < a { b } else { a }
}

/// One reduction: the identity, and how two partial results combine.
#[derive(Clone, Copy)]
struct Reduction<U> {
    identity: U,
    combine: fn(U, U) -> U,
}

impl<U: Copy> Op<U> for Reduction<U> {
    fn combine(&self, input: &[U], inout: &mut [U]) {
        for (&a, b) in input.iter().zip(inout) {
            *b = (self.combine)(a, *b);
        }
    }
}

impl<T: Reducible> Reduction<T> {
    fn sum() -> Self {
        Reduction { identity: T::ZERO, combine: T::plus }
    }
    fn product() -> Self {
        Reduction { identity: T::ONE, combine: T::times }
    }
    fn maxval() -> Self {
        Reduction { identity: T::LOWEST, combine: larger }
    }
    fn minval() -> Self {
        Reduction { identity: T::HIGHEST, combine: smaller }
    }
}

/// Counting the true elements of a `bool` array, from which `any` and `all` follow.
fn count_true() -> Reduction<usize> {
    Reduction { identity: 0, combine: usize::wrapping_add }
}

fn count_one(n: usize, x: &bool) -> usize {
    n + usize::from(*x)
}

/// Reduces the elements of `src` (an array or a section) to one value on every member of its
/// grid: this rank's elements first (`fold` adds one element), then one `allreduce` over the
/// members. `Err` on a rank outside the grid.
fn reduce_whole<T, D: Dimension, U: Pod>(
    src: &impl AsSection<T, D>,
    call: &str,
    how: Reduction<U>,
    fold: impl Fn(U, &T) -> U,
) -> Result<U> {
    let (array, spans) = src.parts();
    let grid = array.grid();
    let Some(comm) = grid.line_comm(&vec![true; grid.ndims()])? else {
        return Err(invalid(call, "this rank is not a member of the array's grid"));
    };
    let mut acc = [how.identity];
    if contributes(array) {
        for_each_selected(array, &spans, |x| acc[0] = fold(acc[0], x));
    }
    comm.allreduce_in_place(&mut acc, how)?;
    Ok(acc[0])
}

/// Whether this member's copy of the array is the one that counts: an array replicated over a
/// grid dimension is counted at coordinate 0 of that dimension only.
fn contributes<T, D: Dimension>(array: &DArray<T, D>) -> bool {
    let grid = array.grid();
    let Some(mine) = grid.coords() else { return false };
    crate::plan::untargeted(grid, array.ranges()).into_iter().all(|g| grid.fixed()[g].is_some() || mine[g] == 0)
}

/// Calls `f` on each element this rank stores (physical segment) that `spans` selects.
fn for_each_selected<T, D: Dimension>(array: &DArray<T, D>, spans: &[Span], mut f: impl FnMut(&T)) {
    let local = array.local();
    let whole = spans.iter().zip(array.ranges()).all(|(s, r)| s.lo == 0 && s.stride == 1 && s.count == r.extent());
    if whole {
        local.iter().for_each(f);
        return;
    }
    let Some(coords) = array.coords() else { return };
    // Per dimension, the local indices whose global index the section selects.
    let picked: Vec<Vec<usize>> = array
        .ranges()
        .iter()
        .zip(coords)
        .zip(spans)
        .map(|((r, &c), s)| (0..r.local_len(c)).filter(|&l| selects(s, r.global(c, l))).collect())
        .collect();
    if picked.iter().any(Vec::is_empty) {
        return;
    }
    let local = local.into_dyn();
    let mut at = vec![0; picked.len()];
    let mut index: Vec<usize> = picked.iter().map(|p| p[0]).collect();
    loop {
        f(&local[&index[..]]);
        // Odometer over the picked indices, last dimension fastest.
        let mut d = picked.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            at[d] += 1;
            if at[d] < picked[d].len() {
                index[d] = picked[d][at[d]];
                break;
            }
            at[d] = 0;
            index[d] = picked[d][0];
        }
    }
}

/// Whether global index `g` is one of the span's.
fn selects(s: &Span, g: usize) -> bool {
    g >= s.lo && (g - s.lo).is_multiple_of(s.stride) && (g - s.lo) / s.stride < s.count
}

/// The ranges of a lower-rank result, whatever its dimension type (an array of the right
/// length or a `Vec`: the `Ranges` a generic `D::Smaller` needs).
struct RangesOf<D>(Vec<Range>, std::marker::PhantomData<D>);

impl<D: Dimension> Ranges for RangesOf<D> {
    type Dim = D;
    fn into_vec(self) -> Vec<Range> {
        self.0
    }
}

/// Reduces `array` along dimension `dim` into an array of one rank less on the same grid,
/// with the other ranges: each rank folds its block along `dim` (`fold`), then the ranks of
/// the grid line that `dim`'s range spreads over combine their partial results with one
/// `allreduce` (none for a collapsed range), and `finish` turns each result into an element.
/// The result is replicated over the grid dimension `dim` targeted. A rank outside the grid
/// gets the result's metadata with no block, and communicates nothing.
fn reduce_along<T, D: RemoveAxis, U: Pod, R: Clone + Default>(
    array: &DArray<T, D>,
    dim: usize,
    call: &str,
    how: Reduction<U>,
    fold: impl Fn(U, &T) -> U,
    finish: impl Fn(U) -> R,
) -> Result<DArray<R, D::Smaller>> {
    let ranges = array.ranges();
    if ranges.len() < 2 {
        return Err(invalid(call, "a 1-D array has no lower-rank result; reduce it whole (sum, any, ...)"));
    }
    if dim >= ranges.len() {
        return Err(invalid(call, format!("dimension {dim} does not exist in a {}-D array", ranges.len())));
    }
    let rest: Vec<Range> = ranges.iter().enumerate().filter(|&(r, _)| r != dim).map(|(_, r)| r.clone()).collect();
    let mut result = DArray::from_elem(array.grid(), RangesOf(rest, std::marker::PhantomData), R::default())?;
    if !array.is_member() {
        return Ok(result);
    }
    let partial = array.local().fold_axis(Axis(dim), how.identity, |&acc, x| fold(acc, x));
    let mut partial: Vec<U> = partial.into_iter().collect();
    if let Some(g) = ranges[dim].grid_dim() {
        let comm = line(array.grid(), g, call)?;
        // Every rank of the line holds the same remaining block shape, so all skip alike.
        if !partial.is_empty() {
            comm.allreduce_in_place(&mut partial, how)?;
        }
    }
    for (slot, u) in result.local_mut().iter_mut().zip(partial) {
        *slot = finish(u);
    }
    Ok(result)
}

/// The communicator of this member's grid line along grid dimension `g`.
fn line(grid: &Grid, g: usize, call: &str) -> Result<fastmp::Comm> {
    let keep: Vec<bool> = (0..grid.ndims()).map(|d| d == g).collect();
    grid.line_comm(&keep)?.ok_or_else(|| invalid(call, "this rank is not a member of the array's grid"))
}

/// The whole-array numeric and logical reductions, for arrays and sections alike.
macro_rules! whole_reductions {
    ($($ty:ty),*) => {$(
        impl<T: Reducible, D: Dimension> $ty {
            /// The sum of the elements (0 if there are none), on every member of the grid;
            /// collective over the grid's members, `Err` on any other rank. The order of the
            /// additions is unspecified; integers wrap on overflow.
            pub fn sum(&self) -> Result<T> {
                reduce_whole(self, "sum", Reduction::sum(), |a, &x| a.plus(x))
            }

            /// The product of the elements (1 if there are none), like [`DArray::sum`].
            pub fn product(&self) -> Result<T> {
                reduce_whole(self, "product", Reduction::product(), |a, &x| a.times(x))
            }

            /// The largest element, like [`DArray::sum`]. Of no elements it is the identity,
            /// the most negative value (−∞ for floats), as Fortran's `MAXVAL` gives; NaN
            /// elements are ignored.
            pub fn maxval(&self) -> Result<T> {
                reduce_whole(self, "maxval", Reduction::maxval(), |a, &x| larger(a, x))
            }

            /// The smallest element, like [`DArray::maxval`]: of no elements, the most positive
            /// value (+∞ for floats).
            pub fn minval(&self) -> Result<T> {
                reduce_whole(self, "minval", Reduction::minval(), |a, &x| smaller(a, x))
            }
        }
    )*};
}

macro_rules! logical_reductions {
    ($($ty:ty),*) => {$(
        impl<D: Dimension> $ty {
            /// Whether some element is true (false if there are none), on every member of the
            /// grid; collective over the grid's members, `Err` on any other rank.
            pub fn any(&self) -> Result<bool> {
                Ok(reduce_whole(self, "any", count_true(), count_one)? > 0)
            }

            /// Whether every element is true (true if there are none), like [`DArray::any`].
            pub fn all(&self) -> Result<bool> {
                let elements: usize = self.parts().1.iter().map(|s| s.count).product();
                Ok(reduce_whole(self, "all", count_true(), count_one)? == elements)
            }

            /// How many elements are true, like [`DArray::any`].
            pub fn count(&self) -> Result<usize> {
                reduce_whole(self, "count", count_true(), count_one)
            }
        }
    )*};
}

whole_reductions!(DArray<T, D>, Section<'_, T, D>, SectionMut<'_, T, D>);
logical_reductions!(DArray<bool, D>, Section<'_, bool, D>, SectionMut<'_, bool, D>);

impl<T: Reducible, D: RemoveAxis> DArray<T, D> {
    /// Sums along dimension `dim`: an array of one rank less on the same grid, distributed by
    /// the other ranges and replicated over the grid dimension `dim` was spread over, so every
    /// member holds its part. Collective over each grid line along that grid dimension (the
    /// line's communicator is created on first use and reused); no communication for a
    /// collapsed dimension. A rank outside the grid gets the result without a block. `Err` for
    /// a 1-D array (use [`DArray::sum`]) or a dimension it does not have.
    ///
    /// ```
    /// use fastmp_darray::{DArray, Grid, Range};
    /// fastmp::run(4, |world| {
    ///     let grid = Grid::new(&world, &[2, 2])?;
    ///     let (rows, cols) = (Range::block(3, &grid, 0)?, Range::cyclic(5, &grid, 1)?);
    ///     let a = DArray::from_fn(&grid, [rows, cols], |(i, j)| 10 * i + j)?;
    ///     let column_sums = a.sum_along(0)?; // 1-D, spread like `cols`
    ///     for (j, &s) in column_sums.overall() {
    ///         assert_eq!(s, 30 + 3 * j);
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn sum_along(&self, dim: usize) -> Result<DArray<T, D::Smaller>> {
        reduce_along(self, dim, "sum_along", Reduction::sum(), |a: T, &x| a.plus(x), |u| u)
    }

    /// Products along dimension `dim`, like [`DArray::sum_along`].
    pub fn product_along(&self, dim: usize) -> Result<DArray<T, D::Smaller>> {
        reduce_along(self, dim, "product_along", Reduction::product(), |a: T, &x| a.times(x), |u| u)
    }

    /// Largest elements along dimension `dim`, like [`DArray::sum_along`] (an empty dimension
    /// gives the most negative value; NaNs are ignored).
    pub fn maxval_along(&self, dim: usize) -> Result<DArray<T, D::Smaller>> {
        reduce_along(self, dim, "maxval_along", Reduction::maxval(), |a: T, &x| larger(a, x), |u| u)
    }

    /// Smallest elements along dimension `dim`, like [`DArray::maxval_along`].
    pub fn minval_along(&self, dim: usize) -> Result<DArray<T, D::Smaller>> {
        reduce_along(self, dim, "minval_along", Reduction::minval(), |a: T, &x| smaller(a, x), |u| u)
    }
}

impl<D: RemoveAxis> DArray<bool, D> {
    /// Whether some element is true along dimension `dim`, like [`DArray::sum_along`].
    pub fn any_along(&self, dim: usize) -> Result<DArray<bool, D::Smaller>> {
        reduce_along(self, dim, "any_along", count_true(), count_one, |n| n > 0)
    }

    /// Whether every element is true along dimension `dim`, like [`DArray::sum_along`].
    pub fn all_along(&self, dim: usize) -> Result<DArray<bool, D::Smaller>> {
        let extent = self.ranges().get(dim).map_or(0, Range::extent);
        reduce_along(self, dim, "all_along", count_true(), count_one, move |n| n == extent)
    }

    /// How many elements are true along dimension `dim`, like [`DArray::sum_along`].
    pub fn count_along(&self, dim: usize) -> Result<DArray<usize, D::Smaller>> {
        reduce_along(self, dim, "count_along", count_true(), count_one, |n| n)
    }
}
