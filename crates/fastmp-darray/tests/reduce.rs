//! Reductions against a serial model: every range kind, 1-D/2-D/3-D grids, replicated arrays,
//! sections, along each dimension, np 1–6.

use fastmp::Result;
use fastmp_darray::ndarray::{Dimension, Ix2, IxDyn};
use fastmp_darray::*;

/// A value per global index: small, never zero, of both signs.
fn val(idx: &[usize]) -> i64 {
    let h = idx.iter().enumerate().fold(5usize, |h, (d, &i)| h * 31 + i * (7 + 3 * d)) % 17;
    if h == 8 { 9 } else { h as i64 - 8 }
}

fn flag(idx: &[usize]) -> bool {
    val(idx) % 3 == 0
}

/// Every index of `shape`, row-major.
fn indices(shape: &[usize]) -> Vec<Vec<usize>> {
    let mut all = vec![vec![]];
    for &n in shape {
        all = all.into_iter().flat_map(|p| (0..n).map(move |i| [&p[..], &[i]].concat())).collect();
    }
    all
}

/// The serial results of every whole-array reduction over `idxs`.
#[derive(Debug, PartialEq)]
struct Whole {
    sum: i64,
    product: i64,
    max: i64,
    min: i64,
    fsum: f64,
    any: bool,
    all: bool,
    count: usize,
}

fn serial(idxs: &[Vec<usize>]) -> Whole {
    let v = || idxs.iter().map(|i| val(i));
    Whole {
        sum: v().sum(),
        product: v().fold(1i64, i64::wrapping_mul),
        max: v().max().unwrap_or(i64::MIN),
        min: v().min().unwrap_or(i64::MAX),
        fsum: v().map(|x| x as f64).sum(),
        any: idxs.iter().any(|i| flag(i)),
        all: idxs.iter().all(|i| flag(i)),
        count: idxs.iter().filter(|i| flag(i)).count(),
    }
}

fn whole(
    s: &Section<'_, i64, IxDyn>,
    floats: &Section<'_, f64, IxDyn>,
    flags: &Section<'_, bool, IxDyn>,
) -> Result<Whole> {
    Ok(Whole {
        sum: s.sum()?,
        product: s.product()?,
        max: s.maxval()?,
        min: s.minval()?,
        fsum: floats.sum()?,
        any: flags.any()?,
        all: flags.all()?,
        count: flags.count()?,
    })
}

/// Checks every reduction of the arrays `val`/`flag` with `ranges` on `grid`.
fn check(grid: &Grid, ranges: &[Range]) -> Result<()> {
    let shape: Vec<usize> = ranges.iter().map(Range::extent).collect();
    let ints = DArray::<i64, IxDyn>::from_fn(grid, ranges.to_vec(), |i| val(i.slice()))?;
    let floats = DArray::<f64, IxDyn>::from_fn(grid, ranges.to_vec(), |i| val(i.slice()) as f64)?;
    let flags = DArray::<bool, IxDyn>::from_fn(grid, ranges.to_vec(), |i| flag(i.slice()))?;
    let all = vec![Triplet::all(); shape.len()];
    let what = format!("{shape:?} {ranges:?} on {grid:?}");

    // Whole arrays, through the array methods and through a whole section.
    let want = serial(&indices(&shape));
    let got = Whole {
        sum: ints.sum()?,
        product: ints.product()?,
        max: ints.maxval()?,
        min: ints.minval()?,
        fsum: floats.sum()?,
        any: flags.any()?,
        all: flags.all()?,
        count: flags.count()?,
    };
    assert_eq!(got, want, "{what}");
    let got = whole(&ints.section(&all)?, &floats.section(&all)?, &flags.section(&all)?)?;
    assert_eq!(got, want, "whole section of {what}");

    // A strided section: every other index from 1 (or the whole of a short dimension).
    let triplets: Vec<Triplet> =
        shape.iter().map(|&n| if n > 2 { Triplet::new(1, n, 2) } else { Triplet::all() }).collect();
    let picked: Vec<Vec<usize>> = indices(&shape)
        .into_iter()
        .filter(|i| i.iter().zip(&shape).all(|(&x, &n)| n <= 2 || (x >= 1 && (x - 1) % 2 == 0)))
        .collect();
    let got = whole(&ints.section(&triplets)?, &floats.section(&triplets)?, &flags.section(&triplets)?)?;
    assert_eq!(got, serial(&picked), "section {triplets:?} of {what}");

    // Along each dimension.
    if shape.len() < 2 {
        assert!(ints.sum_along(0).is_err());
        return Ok(());
    }
    for (dim, &extent) in shape.iter().enumerate() {
        let sums = ints.sum_along(dim)?;
        let products = ints.product_along(dim)?;
        let maxs = ints.maxval_along(dim)?;
        let mins = ints.minval_along(dim)?;
        let anys = flags.any_along(dim)?;
        let alls = flags.all_along(dim)?;
        let counts = flags.count_along(dim)?;
        let rest: Vec<Range> = ranges.iter().enumerate().filter(|&(r, _)| r != dim).map(|(_, r)| r.clone()).collect();
        assert_eq!(sums.ranges(), &rest[..]);
        assert_eq!(sums.grid(), grid);
        let line = |idx: &IxDyn| -> Vec<Vec<usize>> {
            (0..extent)
                .map(|k| {
                    let mut full = idx.slice().to_vec();
                    full.insert(dim, k);
                    full
                })
                .collect()
        };
        let mut seen = 0;
        for (idx, &s) in sums.overall() {
            let want = serial(&line(&idx));
            let got = Whole {
                sum: s,
                product: *products.get(idx.clone()).unwrap(),
                max: *maxs.get(idx.clone()).unwrap(),
                min: *mins.get(idx.clone()).unwrap(),
                fsum: want.fsum,
                any: *anys.get(idx.clone()).unwrap(),
                all: *alls.get(idx.clone()).unwrap(),
                count: *counts.get(idx.clone()).unwrap(),
            };
            assert_eq!(got, want, "along {dim} at {idx:?} of {what}");
            seen += 1;
        }
        assert_eq!(seen, sums.local().len());
    }
    assert!(ints.sum_along(shape.len()).is_err());
    Ok(())
}

fn kinds(grid: &Grid, dim: usize, extent: usize) -> Vec<Range> {
    vec![
        Range::block(extent, grid, dim).unwrap(),
        Range::cyclic(extent, grid, dim).unwrap(),
        Range::block_cyclic(extent, 2, grid, dim).unwrap(),
        Range::ghost_block(extent, grid, dim, 1, 2).unwrap(),
        Range::collapsed(extent),
    ]
}

#[test]
fn reductions_on_every_grid_and_range_kind() {
    for np in 1..=6 {
        fastmp::run(np, |world| {
            // 1-D grid: 1-D arrays, an empty one, and 2-D arrays replicated over nothing.
            let g1 = Grid::new(&world, &[np])?;
            for extent in [13, 0, 2] {
                for r in kinds(&g1, 0, extent) {
                    check(&g1, &[r])?;
                }
            }
            for r in kinds(&g1, 0, 7) {
                check(&g1, &[r.clone(), Range::collapsed(3)])?;
                check(&g1, &[Range::collapsed(3), r])?;
            }
            // 2-D grid: every pair of kinds; 1-D arrays replicated over the other dimension.
            let g2 = Grid::auto(&world, 2)?;
            for r0 in kinds(&g2, 0, 7) {
                for r1 in kinds(&g2, 1, 5) {
                    check(&g2, &[r0.clone(), r1])?;
                }
            }
            for d in 0..2 {
                for r in kinds(&g2, d, 9) {
                    check(&g2, &[r])?;
                }
            }
            // 3-D grid: matching kinds in every dimension, and 2-D arrays replicated over the
            // third grid dimension.
            let g3 = Grid::auto(&world, 3)?;
            for k in 0..5 {
                let ranges =
                    [kinds(&g3, 0, 5)[k].clone(), kinds(&g3, 1, 4)[(k + 1) % 5].clone(), kinds(&g3, 2, 3)[k].clone()];
                check(&g3, &ranges)?;
            }
            for (a, b) in [(0, 1), (2, 0), (1, 2)] {
                for k in 0..5 {
                    check(&g3, &[kinds(&g3, a, 6)[k].clone(), kinds(&g3, b, 5)[(k + 2) % 5].clone()])?;
                }
            }
            Ok(())
        })
        .unwrap();
    }
}

#[test]
fn reductions_on_tcp() {
    fastmp::Config::new()
        .device(fastmp::DeviceKind::Tcp)
        .np(4)
        .run(|world| {
            let g2 = Grid::auto(&world, 2)?;
            for (r0, r1) in kinds(&g2, 0, 7).into_iter().zip(kinds(&g2, 1, 5).into_iter().rev()) {
                check(&g2, &[r0, r1])?;
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn typed_dimensions_and_floats() {
    fastmp::run(4, |world| {
        let grid = Grid::new(&world, &[2, 2])?;
        let (rows, cols) = (Range::cyclic(6, &grid, 0)?, Range::block(5, &grid, 1)?);
        let a = DArray::<f32, Ix2>::from_fn(&grid, [rows, cols], |(i, j)| i as f32 - j as f32 * 0.5)?;
        assert_eq!(a.maxval()?, 5.0);
        assert_eq!(a.minval()?, -2.0);
        let maxs = a.maxval_along(1)?; // one per row, spread like the rows
        for (i, &m) in maxs.overall() {
            assert_eq!(m, i as f32);
        }
        // A writable section reduces like a read-only one.
        let picked = [Triplet::new(1, 6, 2), Triplet::new(0, 5, 3)];
        let want = a.section(&picked)?.sum()?;
        assert_eq!(want, [1.0f32, 3.0, 5.0].iter().map(|i| 2.0 * i - 1.5).sum::<f32>());
        let mut b = a.clone();
        assert_eq!(b.section_mut(&picked)?.sum()?, want);
        // NaNs are ignored by maxval and minval.
        let nan = DArray::<f64, Ix2>::from_fn(&grid, [Range::block(3, &grid, 0)?, Range::collapsed(3)], |(i, j)| {
            if i == j { f64::NAN } else { (i + j) as f64 }
        })?;
        assert_eq!((nan.maxval()?, nan.minval()?), (3.0, 1.0));
        // Empty: the identities, as Fortran's MAXVAL/MINVAL give.
        let empty = DArray::<f64, Ix2>::from_elem(&grid, [Range::block(0, &grid, 0)?, Range::collapsed(3)], 1.0)?;
        assert_eq!((empty.sum()?, empty.product()?), (0.0, 1.0));
        assert_eq!((empty.maxval()?, empty.minval()?), (f64::NEG_INFINITY, f64::INFINITY));
        Ok(())
    })
    .unwrap();
}

#[test]
fn restricted_grids_and_non_members() {
    fastmp::run(6, |world| {
        let grid = Grid::new(&world, &[3, 2])?;
        // The sub-grid of row 1: ranks 2 and 3.
        let row = grid.restrict(0, 1)?;
        let a = DArray::<u32, Ix2>::from_fn(&row, [Range::collapsed(4), Range::cyclic(5, &row, 1)?], |(i, j)| {
            (i * 5 + j) as u32
        })?;
        if row.is_member() {
            assert_eq!(a.sum()?, (0..20).sum::<u32>());
            check(&row, &[Range::block(5, &row, 1)?, Range::collapsed(3)])?;
        } else {
            let err = a.sum().unwrap_err().to_string();
            assert!(err.contains("sum") && err.contains("not a member"), "{err}");
        }
        // Along a dimension a non-member gets the result's metadata without a block.
        let sums = a.sum_along(1)?;
        assert_eq!(sums.shape(), [4]);
        assert_eq!(sums.is_member(), row.is_member());
        for (i, &s) in sums.overall() {
            assert_eq!(s, (0..5).map(|j| (i * 5 + j) as u32).sum::<u32>());
        }
        // A 2-D array replicated over grid dimension 0 (3 copies) counts each element once.
        let rep = DArray::<u64, Ix2>::from_elem(&grid, [Range::collapsed(2), Range::block(3, &grid, 1)?], 1)?;
        assert_eq!(rep.sum()?, 6);
        assert_eq!(
            rep.sum_along(0)?.overall().map(|(_, &x)| x).collect::<Vec<_>>(),
            vec![2; rep.sum_along(0)?.local().len()]
        );
        Ok(())
    })
    .unwrap();
}
