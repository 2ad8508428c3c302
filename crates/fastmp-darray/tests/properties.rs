//! Property tests of the index mapping: a range's `owner`, `global`, `local_len` and
//! `stored_len` agree for every format; a `DArray`'s `global_to_local` and `local_to_global`
//! invert each other and its ranks together hold every element once per copy; and a section's
//! (nested) triplets select exactly the elements the serial model says, or are refused exactly
//! when the model says they do not fit. Modest case counts: each case is a job of 1 to 8 ranks.

mod support;

use std::ops::RangeInclusive;

use fastmp::op::Sum;
use fastmp::{Comm, Result};
use fastmp_darray::ndarray::{Dimension, IxDyn};
use fastmp_darray::{Format, Grid, Range, Triplet, remap};
use proptest::prelude::*;
use support::{Sel, UNSET, check, model_array, section_copy, select, unset_array, value};

/// One array dimension as the strategies describe it: extent, kind (block, cyclic,
/// block-cyclic, ghost block, collapsed), block size, ghost widths.
#[derive(Clone, Copy, Debug)]
struct DimSpec {
    extent: usize,
    kind: u8,
    block: usize,
    ghosts: (usize, usize),
}

impl DimSpec {
    /// The range over grid dimension `dim` (collapsed if `None` or the kind says so).
    fn range(&self, grid: &Grid, dim: Option<usize>) -> Result<Range> {
        let Some(d) = dim.filter(|_| self.kind != 4) else { return Ok(Range::collapsed(self.extent)) };
        match self.kind {
            0 => Range::block(self.extent, grid, d),
            1 => Range::cyclic(self.extent, grid, d),
            2 => Range::block_cyclic(self.extent, self.block, grid, d),
            _ => Range::ghost_block(self.extent, grid, d, self.ghosts.0, self.ghosts.1),
        }
    }
}

fn dim_spec(extents: RangeInclusive<usize>) -> impl Strategy<Value = DimSpec> {
    (extents, 0..5u8, 1..5usize, 0..3usize, 0..3usize).prop_map(|(extent, kind, block, lo, hi)| DimSpec {
        extent,
        kind,
        block,
        ghosts: (lo, hi),
    })
}

/// An array: job size, grid rank, the grid dimension each array dimension may target (a
/// permutation), and the dimensions.
#[derive(Clone, Debug)]
struct ArraySpec {
    np: usize,
    grid_ndims: usize,
    order: Vec<usize>,
    dims: Vec<DimSpec>,
}

impl ArraySpec {
    fn grid(&self, world: &Comm) -> Result<Grid> {
        Grid::auto(world, self.grid_ndims)
    }

    /// Array dimension `r` targets grid dimension `order[r]` if the grid has that many.
    fn ranges(&self, grid: &Grid) -> Result<Vec<Range>> {
        self.dims.iter().enumerate().map(|(r, d)| d.range(grid, self.order.get(r).copied())).collect()
    }

    fn shape(&self) -> Vec<usize> {
        self.dims.iter().map(|d| d.extent).collect()
    }
}

fn array_spec(extents: RangeInclusive<usize>) -> impl Strategy<Value = ArraySpec> {
    (1..=8usize, 1..=3usize, 1..=3usize).prop_flat_map(move |(np, grid_ndims, ndims)| {
        let order = Just((0..grid_ndims).collect::<Vec<_>>()).prop_shuffle();
        let dims = proptest::collection::vec(dim_spec(extents.clone()), ndims);
        (Just(np), Just(grid_ndims), order, dims).prop_map(|(np, grid_ndims, order, dims)| ArraySpec {
            np,
            grid_ndims,
            order,
            dims,
        })
    })
}

/// A triplet for a dimension whose count is known only in the case: mostly one that fits and
/// selects something (`lo` near the start, `hi` near or "to" the end, strides 1 to 4),
/// sometimes an empty one, sometimes one that does not fit (a zero stride, `hi` past the end,
/// `lo` past `hi`).
#[derive(Clone, Copy, Debug)]
struct TripletSpec {
    lo: usize,
    hi: usize,
    stride: usize,
    mode: u8,
}

impl TripletSpec {
    fn resolve(&self, count: usize) -> Triplet {
        // Mostly not empty: `lo` near the start, `hi` near the end.
        let lo = self.lo.min(count.saturating_sub(1));
        let hi = count.saturating_sub(self.hi).max(lo + 1).min(count);
        match self.mode {
            0 => Triplet::new(lo, hi, 0),
            1 => Triplet::new(lo, count + 1, self.stride),
            2 => Triplet::new(hi + 1, hi, self.stride),
            3 => Triplet::new(count, count, self.stride),
            4..=7 => Triplet::new(lo, usize::MAX, self.stride),
            _ => Triplet::new(lo, hi, self.stride),
        }
    }
}

fn triplets() -> impl Strategy<Value = Vec<TripletSpec>> {
    let one = (0..3usize, 0..3usize, prop_oneof![3 => Just(1usize), 2 => Just(2), 1 => 3..5usize], 0..40u8)
        .prop_map(|(lo, hi, stride, mode)| TripletSpec { lo, hi, stride, mode });
    proptest::collection::vec(one, 3)
}

/// Runs `f` in a job of `np` ranks; a failure on any rank fails the case.
fn job(np: usize, f: impl Fn(Comm) -> Result<()> + Sync) {
    if let Err(e) = fastmp::run(np, f) {
        panic!("np {np}: {e}");
    }
}

/// Asserts what every range must satisfy, whatever its format.
fn range_is_consistent(r: &Range) {
    let (n, p) = (r.extent(), r.procs());
    let mut seen = vec![0; p];
    for g in 0..n {
        let (c, l) = r.owner(g);
        assert!(c < p && l < r.local_len(c), "{r:?}: owner({g}) = ({c}, {l})");
        assert_eq!(r.global(c, l), g, "{r:?}");
        seen[c] += 1;
    }
    for (c, &owned) in seen.iter().enumerate() {
        let len = r.local_len(c);
        assert_eq!(owned, len, "{r:?}: coordinate {c} owns {owned} indices, local_len says {len}");
        // Local order is global order.
        assert!((1..len).all(|l| r.global(c, l - 1) < r.global(c, l)), "{r:?} coordinate {c}");
        let (lo, hi) = r.ghosts();
        assert_eq!(r.stored_len(c), if len == 0 { 0 } else { lo + len + hi }, "{r:?}");
        if r.format() == Format::Block && len > 0 {
            assert_eq!(r.global(c, len - 1) - r.global(c, 0), len - 1, "{r:?}: a block is contiguous");
        }
    }
    assert_eq!(r.local_len(p), 0, "{r:?}: a coordinate past the grid holds nothing");
    if let Format::Block = r.format() {
        let lens: Vec<usize> = (0..p).map(|c| r.local_len(c)).collect();
        assert!(lens.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1), "{r:?}: balanced blocks {lens:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn ranges_agree_on_owner_global_and_lengths(
        np in 1..=8usize,
        dim in dim_spec(0..=0),
        extents in proptest::collection::vec(0..70usize, 8),
    ) {
        job(np, |world| {
            // Creating the grid is collective; the checks are local.
            let grid = Grid::new(&world, &[np])?;
            if world.rank() != 0 {
                return Ok(());
            }
            for &extent in &extents {
                range_is_consistent(&DimSpec { extent, ..dim }.range(&grid, Some(0))?);
            }
            Ok(())
        });
    }

    #[test]
    fn global_and_local_indices_round_trip(spec in array_spec(0..=9)) {
        job(spec.np, |world| {
            let grid = spec.grid(&world)?;
            let a = model_array(&grid, spec.ranges(&grid)?)?;
            let shape = spec.shape();
            // Every element this rank holds: local → global → local, and its value.
            let local_shape = a.local().raw_dim();
            for l in fastmp_darray::ndarray::indices(local_shape.clone()) {
                let g = a.local_to_global(l.clone()).expect("a local index has a global one");
                assert_eq!(a.global_to_local(g.clone()), Some(l.clone()), "{spec:?}");
                assert_eq!(a.get(g.clone()), Some(&value(g.slice())), "{spec:?}");
                assert_eq!(a.local()[l], value(g.slice()));
            }
            // Just past the block in each dimension, and past the extent: nothing.
            for r in 0..shape.len() {
                let mut past = IxDyn(&vec![0; shape.len()]);
                past[r] = local_shape[r];
                assert_eq!(a.local_to_global(past), None, "{spec:?}");
                let mut outside = IxDyn(&vec![0; shape.len()]);
                outside[r] = shape[r];
                assert_eq!(a.global_to_local(outside), None, "{spec:?}");
            }
            // Every global index: held here exactly when this rank's coordinates own it.
            for g in fastmp_darray::ndarray::indices(IxDyn(&shape)) {
                let mine = a.coords().is_some_and(|c| {
                    a.ranges().iter().zip(g.slice()).zip(c).all(|((r, &gi), &ci)| r.owner(gi).0 == ci)
                });
                let local = a.global_to_local(g.clone());
                assert_eq!(local.is_some(), mine, "{spec:?} {g:?}");
                if let Some(l) = local {
                    assert_eq!(a.local_to_global(l), Some(g), "{spec:?}");
                }
            }
            // The ranks together hold each element once per copy of the array.
            let copies: usize = (0..grid.ndims())
                .filter(|&d| a.ranges().iter().all(|r| r.grid_dim() != Some(d)))
                .map(|d| grid.dims()[d])
                .product();
            let mut total = [0u64];
            world.allreduce(&[a.overall().count() as u64], &mut total, Sum)?;
            assert_eq!(total[0] as usize, shape.iter().product::<usize>() * copies, "{spec:?}");
            Ok(())
        });
    }

    #[test]
    fn sections_select_what_the_model_selects(
        spec in array_spec(4..=12),
        outer in triplets(),
        inner in triplets(),
    ) {
        job(spec.np, |world| {
            let grid = spec.grid(&world)?;
            let a = model_array(&grid, spec.ranges(&grid)?)?;
            let whole = Sel::whole(&spec.shape());
            let outer: Vec<Triplet> = whole.iter().zip(&outer).map(|(s, t)| t.resolve(s.count)).collect();
            let outer_model = select(&whole, &outer);
            let inner_counts: Vec<usize> = match &outer_model {
                Some(sels) => sels.iter().map(|s| s.count).collect(),
                None => vec![5; whole.len()],
            };
            let inner: Vec<Triplet> = inner_counts.iter().zip(&inner).map(|(&c, t)| t.resolve(c)).collect();
            let (outer, inner) = (&outer[..], &inner[..]);
            let model = outer_model.and_then(|s| select(&s, inner).map(|t| (s, t)));
            let section = a.section(outer).and_then(|s| s.section(inner).map(|t| (s, t)));
            assert_eq!(model.is_some(), section.is_ok(), "{spec:?} {outer:?} {inner:?}");
            let (Some((outer_sels, sels)), Ok((outer_section, section))) = (model, section) else { return Ok(()) };
            assert_eq!(outer_section.shape(), outer_sels.iter().map(|s| s.count).collect::<Vec<_>>());
            let counts: Vec<usize> = sels.iter().map(|s| s.count).collect();
            assert_eq!(section.shape(), counts);
            // Its elements, onto every rank: a collapsed array of the section's shape.
            let collapsed: Vec<Range> = counts.iter().map(|&c| Range::collapsed(c)).collect();
            let mut copy = unset_array(&grid, collapsed)?;
            remap(&mut copy, &section)?;
            check(&copy, section_copy(&Sel::whole(&counts), &sels, None), &(&spec, outer, inner));
            // And back, into the same selection of an array like the first.
            let mut back = unset_array(&grid, spec.ranges(&grid)?)?;
            remap(&mut back.section_mut(outer)?.section_mut(inner)?, &copy)?;
            check(&back, |g| if sels.iter().zip(g).all(|(s, &gi)| s.index_of(gi).is_some()) { value(g) } else { UNSET }, &(&spec, outer, inner));
            Ok(())
        });
    }
}
