//! What the distributed-array test files share: the serial model (a value per global index,
//! sections as index progressions), the range kinds and grids the tests sweep, and the checks of
//! a rank's elements and ghost cells against the model.
//!
//! Every test computes what each element must hold from global indices alone, then compares
//! every element a rank stores (its physical segment through `overall()`, its ghost cells through
//! `local_with_ghosts()`).

#![allow(dead_code)] // each test file uses part of it

use std::fmt::Debug;

use fastmp::{Comm, Result};
use fastmp_darray::{DArray, Format, Grid, Range, Triplet};
use ndarray::{Dimension, IxDyn};

/// The arrays of the sweeps: any rank, integer elements.
pub type A = DArray<i64, IxDyn>;

/// What a destination element holds before an operation (and keeps where the operation does not
/// write it); no model value equals it.
pub const UNSET: i64 = -1;

/// The model's element at global index `g`: distinct for every index below 100 in each
/// dimension, and never 0 (the default of fresh ghost cells) or [`UNSET`].
pub fn value(g: &[usize]) -> i64 {
    g.iter().fold(1, |v, &i| v * 100 + i as i64)
}

/// Every range kind over grid dimension `dim` (only the collapsed one if `dim` is `None`):
/// block, cyclic, block-cyclic with blocks of 2 and 3, ghost blocks with asymmetric widths, and
/// collapsed.
pub fn kinds(grid: &Grid, dim: Option<usize>, extent: usize) -> Result<Vec<Range>> {
    let Some(d) = dim else { return Ok(vec![Range::collapsed(extent)]) };
    Ok(vec![
        Range::block(extent, grid, d)?,
        Range::cyclic(extent, grid, d)?,
        Range::block_cyclic(extent, 2, grid, d)?,
        Range::block_cyclic(extent, 3, grid, d)?,
        Range::ghost_block(extent, grid, d, 1, 2)?,
        Range::ghost_block(extent, grid, d, 2, 0)?,
        Range::collapsed(extent),
    ])
}

/// Kind tuples for an array with `counts[r]` kinds in dimension `r`, in which every dimension
/// takes every kind (dimension `r` of tuple `k` takes kind `k + r`); with the seven [`partner`]s
/// of each as destinations, every dimension sees every pair of source and destination kinds.
pub fn diagonal(counts: &[usize]) -> Vec<Vec<usize>> {
    let n = counts.iter().copied().max().unwrap_or(1);
    (0..n).map(|k| counts.iter().enumerate().map(|(r, &c)| (k + r) % c).collect()).collect()
}

/// Kind tuples in which every pair of dimensions takes every pair of kinds: the full product
/// for one or two dimensions, 49 tuples covering all pairs for three (seven kinds, a prime).
pub fn pairwise(counts: &[usize]) -> Vec<Vec<usize>> {
    let n = counts.iter().copied().max().unwrap_or(1);
    match counts.len() {
        1 => (0..n).map(|k| vec![k % counts[0]]).collect(),
        2 => (0..n * n).map(|k| vec![(k / n) % counts[0], (k % n) % counts[1]]).collect(),
        _ => (0..n * n).map(|k| counts.iter().enumerate().map(|(r, &c)| (k / n + r * (k % n)) % c).collect()).collect(),
    }
}

/// The `m`-th destination kind tuple for source tuple `src`: dimension `r` moves `m * (r + 1)`
/// kinds on (7 kinds: each `m` in `0..7` gives a different partner in every dimension).
pub fn partner(src: &[usize], counts: &[usize], m: usize) -> Vec<usize> {
    src.iter().zip(counts).enumerate().map(|(r, (&k, &c))| (k + m * (r + 1)) % c).collect()
}

/// The grids swept at this communicator's size: 1-D, the 2-D and 3-D grids `dims_create` gives,
/// and a 2-D grid with a dimension of one process. Collective.
pub fn grids(world: &Comm) -> Result<Vec<Grid>> {
    Ok(vec![Grid::auto(world, 1)?, Grid::auto(world, 2)?, Grid::auto(world, 3)?, Grid::new(world, &[1, world.size()])?])
}

/// The ranges picked by `pick` from [`kinds`] per dimension: dimension `r` targets grid
/// dimension `targets[r]`.
pub fn ranges_of(grid: &Grid, targets: &[Option<usize>], extents: &[usize], pick: &[usize]) -> Result<Vec<Range>> {
    let mut ranges = Vec::with_capacity(extents.len());
    for ((&t, &e), &k) in targets.iter().zip(extents).zip(pick) {
        ranges.push(kinds(grid, t, e)?.swap_remove(k));
    }
    Ok(ranges)
}

/// How many kinds [`kinds`] offers per dimension for these targets.
pub fn kind_counts(targets: &[Option<usize>]) -> Vec<usize> {
    targets.iter().map(|t| if t.is_some() { 7 } else { 1 }).collect()
}

/// Runs `f` as a job of every size from 1 to 8 (primes included), one job per size.
pub fn every_np(f: impl Fn(Comm) -> Result<()> + Sync) {
    for np in 1..=8 {
        if let Err(e) = fastmp::run(np, &f) {
            panic!("np {np}: {e}");
        }
    }
}

/// An array holding `model`'s values, its ghost cells `unset`.
pub fn filled<T: Clone + Default>(
    grid: &Grid,
    ranges: Vec<Range>,
    unset: T,
    model: impl Fn(&[usize]) -> T,
) -> Result<DArray<T, IxDyn>> {
    let mut a = DArray::from_elem(grid, ranges, unset)?;
    for (g, x) in a.overall_mut() {
        *x = model(g.slice());
    }
    Ok(a)
}

/// An array holding the model's values, its ghost cells [`UNSET`].
pub fn model_array(grid: &Grid, ranges: Vec<Range>) -> Result<A> {
    filled(grid, ranges, UNSET, value)
}

/// An array of [`UNSET`] everywhere.
pub fn unset_array(grid: &Grid, ranges: Vec<Range>) -> Result<A> {
    A::from_elem(grid, ranges, UNSET)
}

/// Asserts that every element this rank owns holds `want(global index)`, and that it owns the
/// number of elements its ranges give it.
pub fn check<T: PartialEq + Debug>(a: &DArray<T, IxDyn>, want: impl Fn(&[usize]) -> T, what: &dyn Debug) {
    let mut seen = 0;
    for (g, x) in a.overall() {
        assert_eq!(*x, want(g.slice()), "{what:?}: element {:?} on rank {}", g.slice(), a.grid().comm().rank());
        seen += 1;
    }
    let owned: usize = match a.coords() {
        Some(c) => a.ranges().iter().zip(c).map(|(r, &c)| r.local_len(c)).product(),
        None => 0,
    };
    assert_eq!(seen, owned, "{what:?}: overall() visits {seen} elements, the ranges give this rank {owned}");
}

/// A selection of one dimension in the serial model: global indices `lo, lo + stride, ...`,
/// `count` of them (what a triplet selects from its parent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sel {
    pub lo: usize,
    pub stride: usize,
    pub count: usize,
}

impl Sel {
    /// The whole dimension of extent `n`.
    pub fn all(n: usize) -> Sel {
        Sel { lo: 0, stride: 1, count: n }
    }

    /// The whole of every dimension.
    pub fn whole(shape: &[usize]) -> Vec<Sel> {
        shape.iter().map(|&n| Sel::all(n)).collect()
    }

    /// The selection's `i`-th global index.
    pub fn at(&self, i: usize) -> usize {
        self.lo + i * self.stride
    }

    /// The position of global index `g` in the selection, if selected.
    pub fn index_of(&self, g: usize) -> Option<usize> {
        let k = g.checked_sub(self.lo)?;
        (k % self.stride == 0 && k / self.stride < self.count).then_some(k / self.stride)
    }

    /// The sub-selection triplet `t` (relative to this selection) picks; `None` where the
    /// triplet does not fit (zero stride, `lo > hi`, `hi` beyond the count).
    pub fn select(&self, t: Triplet) -> Option<Sel> {
        let hi = if t.hi == usize::MAX { self.count } else { t.hi };
        if t.stride == 0 || t.lo > hi || hi > self.count {
            return None;
        }
        Some(Sel { lo: self.at(t.lo), stride: self.stride * t.stride, count: (hi - t.lo).div_ceil(t.stride) })
    }
}

/// Per dimension, [`Sel::select`].
pub fn select(sels: &[Sel], triplets: &[Triplet]) -> Option<Vec<Sel>> {
    sels.iter().zip(triplets).map(|(s, &t)| s.select(t)).collect()
}

/// A shift in the model: along `dim` by `amount`, wrapping around if `circular`.
#[derive(Clone, Copy, Debug)]
pub struct Shift {
    pub dim: usize,
    pub amount: isize,
    pub circular: bool,
}

/// The model of a section copy (remap, shift, cshift, copy) from a source holding `model` into
/// a destination holding `unset`: destination element `g` takes the source element at the same
/// section position (moved by `shift` along its dimension), and keeps `unset` where it is
/// outside the destination section or its shifted source position falls off the edge.
pub fn section_copy_of<T: Clone>(
    dst: &[Sel],
    src: &[Sel],
    shift: Option<Shift>,
    model: impl Fn(&[usize]) -> T,
    unset: T,
) -> impl Fn(&[usize]) -> T {
    let (dst, src) = (dst.to_vec(), src.to_vec());
    move |g: &[usize]| {
        let mut from = Vec::with_capacity(g.len());
        for (r, ((d, s), &gi)) in dst.iter().zip(&src).zip(g).enumerate() {
            let Some(mut k) = d.index_of(gi) else { return unset.clone() };
            if let Some(sh) = shift.filter(|sh| sh.dim == r) {
                // Wide enough for any amount.
                let j = k as i128 + sh.amount as i128;
                let n = d.count as i128;
                k = if sh.circular {
                    j.rem_euclid(n) as usize
                } else if (0..n).contains(&j) {
                    j as usize
                } else {
                    return unset.clone();
                };
            }
            from.push(s.at(k));
        }
        model(&from)
    }
}

/// [`section_copy_of`] the integer model: [`value`] into [`UNSET`].
pub fn section_copy(dst: &[Sel], src: &[Sel], shift: Option<Shift>) -> impl Fn(&[usize]) -> i64 {
    section_copy_of(dst, src, shift, value, UNSET)
}

/// A triplet selecting `count` indices of a dimension of extent `extent` with a stride of up to
/// 3, ending at its last index (so a destination section sits elsewhere than its source).
pub fn tail_triplet(extent: usize, count: usize) -> Triplet {
    let stride = if count <= 1 { 1 } else { ((extent - 1) / (count - 1)).clamp(1, 3) };
    let lo = extent - 1 - stride * count.saturating_sub(1);
    Triplet::new(lo, lo + stride * count.saturating_sub(1) + 1, stride)
}

/// Per dimension of the stored block (ghosts included) of this rank, for each stored position:
/// the global index it mirrors (wrapped around where `wrap[r]`) and whether it is a physical
/// position; `None` for a ghost position whose index falls off the array's edge.
pub fn stored_globals(a: &DArray<impl Sized, IxDyn>, wrap: &[bool]) -> Vec<Vec<(Option<usize>, bool)>> {
    let Some(coords) = a.coords() else { return vec![Vec::new(); a.ranges().len()] };
    a.ranges()
        .iter()
        .zip(coords)
        .enumerate()
        .map(|(r, (range, &c))| {
            let (lo, len) = (range.ghosts().0, range.local_len(c));
            let n = range.extent() as isize;
            (0..range.stored_len(c))
                .map(|pos| {
                    if (lo..lo + len).contains(&pos) {
                        return (Some(range.global(c, pos - lo)), true);
                    }
                    // Only block ranges have ghosts: their indices are contiguous.
                    assert_eq!(range.format(), Format::Block, "ghosts on a non-block range");
                    let g = range.global(c, 0) as isize + pos as isize - lo as isize;
                    let g = if wrap.get(r).copied().unwrap_or(false) { g.rem_euclid(n) } else { g };
                    ((0..n).contains(&g).then_some(g as usize), false)
                })
                .collect()
        })
        .collect()
}

/// Calls `f(stored index, global index per dimension or None off the edge, physical per dimension)`
/// for every stored position (ghosts included) of this rank's block.
pub fn for_each_stored(
    a: &DArray<impl Sized, IxDyn>,
    wrap: &[bool],
    mut f: impl FnMut(&[usize], &[Option<usize>], &[bool]),
) {
    let table = stored_globals(a, wrap);
    let shape: Vec<usize> = table.iter().map(Vec::len).collect();
    for idx in ndarray::indices(IxDyn(&shape)) {
        let idx = idx.slice();
        let (globals, physical): (Vec<Option<usize>>, Vec<bool>) = idx.iter().zip(&table).map(|(&p, t)| t[p]).unzip();
        f(idx, &globals, &physical);
    }
}

/// Asserts the model of a halo update with widths `widths` and wrap-around `wrap` of an array
/// holding `model` with ghost cells `before`: a ghost cell is filled (with the model's value of
/// the index it mirrors) when in every dimension it is physical or within the requested width of
/// the physical segment, and on the array (after wrapping); other ghost cells keep `before`.
pub fn check_halo<T: PartialEq + Debug + Clone>(
    a: &DArray<T, IxDyn>,
    widths: &[(usize, usize)],
    wrap: &[bool],
    before: T,
    model: impl Fn(&[usize]) -> T,
    what: &dyn Debug,
) {
    let ghosts: Vec<(usize, usize)> = a.ranges().iter().map(Range::ghosts).collect();
    let lens: Vec<usize> = match a.coords() {
        Some(c) => a.ranges().iter().zip(c).map(|(r, &c)| r.local_len(c)).collect(),
        None => return,
    };
    let view = a.local_with_ghosts();
    for_each_stored(a, wrap, |idx, globals, physical| {
        let reached = idx
            .iter()
            .zip(&ghosts)
            .zip(&lens)
            .zip(widths)
            .zip(physical)
            .all(|((((&p, &(glo, _)), &len), &(wlo, whi)), &phys)| phys || (p + wlo >= glo && p < glo + len + whi));
        let want = match globals.iter().copied().collect::<Option<Vec<usize>>>() {
            Some(g) if reached => model(&g),
            _ => before.clone(),
        };
        assert_eq!(view[idx], want, "{what:?}: stored {idx:?} (global {globals:?}) on rank {}", a.grid().comm().rank());
    });
}

/// Sets every ghost cell (stored, not physical) of this rank's block to `x`.
pub fn set_ghosts<T: Clone>(a: &mut DArray<T, IxDyn>, x: T) {
    let mut ghosts = Vec::new();
    for_each_stored(a, &[], |idx, _, physical| {
        if !physical.iter().all(|&p| p) {
            ghosts.push(idx.to_vec());
        }
    });
    let mut view = a.local_with_ghosts_mut();
    for idx in ghosts {
        view[&idx[..]] = x.clone();
    }
}
