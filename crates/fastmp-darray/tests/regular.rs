//! The regular collectives — remap, shift, cshift, write_halo, copy — on every range kind, on
//! 1-, 2- and 3-D grids, in jobs of 1 to 8 ranks, against the serial model of `support`: with
//! extents no grid divides and extents smaller than the grid (empty blocks), sections (strided,
//! nested) on both sides, replicated arrays, restricted grids, and schedules executed many times.

mod support;

use std::collections::BTreeSet;
use std::fmt::Debug;

use fastmp::{Comm, Config, DeviceKind, Error, Result};
use fastmp_darray::ndarray::{Dimension, Ix3, IxDyn};
use fastmp_darray::{
    DArray, Grid, Halo, HaloSchedule, Pod, Range, RemapSchedule, ShiftSchedule, Triplet, copy, cshift, remap, shift,
};
use support::{
    A, Sel, Shift, UNSET, check, check_halo, diagonal, every_np, filled, grids, kind_counts, model_array, pairwise,
    partner, ranges_of, section_copy, section_copy_of, select, set_ghosts, tail_triplet, unset_array, value,
};

/// Extents for arrays of `ndims` dimensions: ones no grid divides evenly, and ones smaller than
/// the larger grids' dimensions (some blocks empty).
fn extent_sets(ndims: usize) -> [Vec<usize>; 2] {
    match ndims {
        1 => [vec![13], vec![3]],
        2 => [vec![7, 10], vec![3, 2]],
        _ => [vec![5, 3, 4], vec![2, 1, 3]],
    }
}

/// Array dimension `r` over grid dimension `r` (the source of the sweeps).
fn in_order(ndims: usize) -> Vec<Option<usize>> {
    (0..ndims).map(Some).collect()
}

/// Array dimension `r` over grid dimension `r + 1` (mod `ndims`): the destination of the sweeps,
/// so that a remap also transposes the distribution.
fn rotated(ndims: usize) -> Vec<Option<usize>> {
    (0..ndims).map(|r| Some((r + 1) % ndims)).collect()
}

/// Remaps a model array from every kind combination on `src_grid` (dimension `r` over
/// `src_targets[r]`) to every partner combination on `dst_grid`, whole and as strided sections
/// (every other index of the last two thirds, to a stride-3 selection ending at the last
/// index), and checks every destination element on every rank.
fn remap_sweep(
    src_grid: &Grid,
    src_targets: &[Option<usize>],
    dst_grid: &Grid,
    dst_targets: &[Option<usize>],
    extents: &[usize],
) -> Result<()> {
    let whole = Sel::whole(extents);
    let src_sec: Vec<Triplet> = extents.iter().map(|&e| Triplet::new(e / 3, e, 2)).collect();
    let src_sels = select(&whole, &src_sec).expect("source section fits");
    let dst_sec: Vec<Triplet> = src_sels.iter().zip(extents).map(|(s, &e)| tail_triplet(e, s.count)).collect();
    let dst_sels = select(&whole, &dst_sec).expect("destination section fits");
    let (src_counts, dst_counts) = (kind_counts(src_targets), kind_counts(dst_targets));
    for s in diagonal(&src_counts) {
        let src = model_array(src_grid, ranges_of(src_grid, src_targets, extents, &s)?)?;
        let partners: BTreeSet<Vec<usize>> = (0..7).map(|m| partner(&s, &dst_counts, m)).collect();
        for d in partners {
            let dst_ranges = ranges_of(dst_grid, dst_targets, extents, &d)?;
            let what = (src.ranges(), &dst_ranges);
            let mut dst = unset_array(dst_grid, dst_ranges.clone())?;
            remap(&mut dst, &src)?;
            check(&dst, section_copy(&whole, &whole, None), &what);
            // A remap writes no ghost cell.
            check_halo(&dst, &vec![(0, 0); extents.len()], &[], UNSET, value, &what);

            let mut dst = unset_array(dst_grid, dst_ranges.clone())?;
            remap(&mut dst.section_mut(&dst_sec)?, &src.section(&src_sec)?)?;
            check(&dst, section_copy(&dst_sels, &src_sels, None), &("sections", &what));
        }
    }
    Ok(())
}

#[test]
fn remap_every_kind_to_every_kind_on_every_grid() {
    every_np(|world| {
        for grid in grids(&world)? {
            let n = grid.ndims();
            for extents in extent_sets(n) {
                remap_sweep(&grid, &in_order(n), &grid, &rotated(n), &extents)?;
            }
        }
        Ok(())
    });
}

#[test]
fn remap_between_grids_of_different_shapes() {
    every_np(|world| {
        let [line, plane, cube] = [1, 2, 3].map(|n| Grid::auto(&world, n));
        let (line, plane, cube) = (line?, plane?, cube?);
        // A 2-D array over a line of processes (its second dimension sequential) to one over a
        // plane, and back; a 3-D array between a cube and a plane.
        remap_sweep(&line, &[Some(0), None], &plane, &[Some(1), Some(0)], &[7, 5])?;
        remap_sweep(&plane, &[Some(0), Some(1)], &line, &[None, Some(0)], &[7, 5])?;
        remap_sweep(&cube, &[Some(2), Some(0), Some(1)], &plane, &[Some(1), None, Some(0)], &[4, 5, 3])?;
        Ok(())
    });
}

#[test]
fn replicated_arrays_are_sources_and_every_copy_receives() {
    every_np(|world| {
        let line = Grid::auto(&world, 1)?;
        let plane = Grid::auto(&world, 2)?;
        let cube = Grid::auto(&world, 3)?;
        // 1-D arrays on a 2-D grid: over grid dimension 0 (a copy per coordinate of dimension
        // 1), over dimension 1, or collapsed (a copy on every rank); `check` runs on every rank,
        // so every copy is checked.
        let one_d = [[Some(0)], [Some(1)], [None]];
        for src in &one_d {
            for dst in &one_d {
                remap_sweep(&plane, src, &plane, dst, &[11])?;
            }
        }
        // Between grids: a 1-D array on a line to one replicated on a plane, and back.
        remap_sweep(&line, &[Some(0)], &plane, &[Some(1)], &[9])?;
        remap_sweep(&plane, &[Some(0)], &line, &[Some(0)], &[9])?;
        // 2-D arrays on a 3-D grid, replicated over the dimension they leave out.
        remap_sweep(&cube, &[Some(0), Some(2)], &cube, &[Some(1), None], &[5, 6])?;
        remap_sweep(&cube, &[None, Some(1)], &cube, &[Some(2), Some(0)], &[5, 6])?;
        Ok(())
    });
}

#[test]
fn restricted_grids_remap_to_and_from_full_grids() {
    every_np(|world| {
        let plane = Grid::auto(&world, 2)?;
        let (rows, cols) = (plane.dims()[0], plane.dims()[1]);
        let last_row = plane.restrict(0, rows - 1)?;
        let first_row = plane.restrict(0, 0)?;
        let first_col = plane.restrict(1, 0)?;
        assert_eq!(last_row.members(), ((rows - 1) * cols..rows * cols).collect::<Vec<_>>());
        // Restricted to and from the full grid (a 1-D array on the full grid is replicated over
        // the dimension it does not target).
        remap_sweep(&last_row, &[Some(1)], &plane, &[Some(0)], &[9])?;
        remap_sweep(&plane, &[Some(1)], &last_row, &[Some(1)], &[9])?;
        remap_sweep(&first_col, &[Some(0)], &plane, &[None], &[9])?;
        // Between two restricted grids, every rank calling (those outside both return at once) ...
        remap_sweep(&first_col, &[Some(0)], &last_row, &[Some(1)], &[9])?;
        // ... and only the members of either calling.
        if first_row.is_member() || last_row.is_member() {
            remap_sweep(&first_row, &[Some(1)], &last_row, &[Some(1)], &[9])?;
        }
        // A 2-D array on a line of a 3-D grid (restricted twice) to and from the full grid.
        let cube = Grid::auto(&world, 3)?;
        let line = cube.restrict(0, cube.dims()[0] - 1)?.restrict(2, 0)?;
        remap_sweep(&line, &[None, Some(1)], &cube, &[Some(2), Some(0)], &[4, 6])?;
        remap_sweep(&cube, &[Some(1), Some(2)], &line, &[Some(1), None], &[4, 6])?;
        // Non-members store nothing.
        let a = model_array(&last_row, vec![Range::block(9, &last_row, 1)?])?;
        assert_eq!(a.is_member(), world.rank() >= (rows - 1) * cols);
        if !a.is_member() {
            assert_eq!((a.local().len(), a.local_with_ghosts().len(), a.overall().count()), (0, 0, 0));
        }
        Ok(())
    });
}

/// The triplets of the nested-section cases, 12×13 arrays: `(outer, inner)` for the source and
/// for the destination; each inner pair selects a 3×3 section.
fn nested_cases() -> Vec<[[Triplet; 2]; 4]> {
    let t = Triplet::new;
    vec![
        [
            [t(1, 12, 2), Triplet::all()], // rows 1, 3, .., 11; every column
            [t(1, 6, 2), t(2, 13, 4)],     // rows 3, 7, 11; columns 2, 6, 10
            [(0..12).into(), t(0, 13, 3)], // every row; columns 0, 3, .., 12
            [t(9, 12, 1), t(0, 5, 2)],     // rows 9, 10, 11; columns 0, 6, 12
        ],
        [
            [(2..11).into(), t(1, 13, 2)], // rows 2..11; columns 1, 3, .., 11
            [t(0, 9, 4), t(3, 6, 1)],      // rows 2, 6, 10; columns 7, 9, 11
            [t(0, 12, 5), (..).into()],    // rows 0, 5, 10; every column
            [(..).into(), t(4, 13, 4)],    // rows 0, 5, 10; columns 4, 8, 12
        ],
    ]
}

#[test]
fn sections_of_sections_as_source_and_destination() {
    every_np(|world| {
        let grid = Grid::auto(&world, 2)?;
        let extents = [12, 13];
        let targets = in_order(2);
        let counts = kind_counts(&targets);
        let whole = Sel::whole(&extents);
        for s in diagonal(&counts) {
            let src = model_array(&grid, ranges_of(&grid, &targets, &extents, &s)?)?;
            let dst_ranges = ranges_of(&grid, &rotated(2), &extents, &partner(&s, &counts, 2))?;
            for [src_outer, src_inner, dst_outer, dst_inner] in nested_cases() {
                let src_sels = select(&select(&whole, &src_outer).expect("fits"), &src_inner).expect("fits");
                let dst_sels = select(&select(&whole, &dst_outer).expect("fits"), &dst_inner).expect("fits");
                let source = src.section(&src_outer)?.section(&src_inner)?;
                assert_eq!(source.shape(), [3, 3]);
                let what = (src.ranges(), &dst_ranges, src_outer, src_inner, dst_outer, dst_inner);

                let mut dst = unset_array(&grid, dst_ranges.clone())?;
                let mut target = dst.section_mut(&dst_outer)?.section_mut(&dst_inner)?;
                assert_eq!(target.shape(), [3, 3]);
                remap(&mut target, &source)?;
                check(&dst, section_copy(&dst_sels, &src_sels, None), &("remap", &what));

                for (dim, amount, circular) in [(0, 1, false), (1, -2, false), (0, -1, true), (1, 4, true)] {
                    let mut dst = unset_array(&grid, dst_ranges.clone())?;
                    let mut target = dst.section_mut(&dst_outer)?.section_mut(&dst_inner)?;
                    if circular {
                        cshift(&mut target, &source, amount, dim)?;
                    } else {
                        shift(&mut target, &source, amount, dim)?;
                    }
                    let model = section_copy(&dst_sels, &src_sels, Some(Shift { dim, amount, circular }));
                    check(&dst, model, &("shift", dim, amount, circular, &what));
                }
            }
        }
        Ok(())
    });
}

/// Shifts and cshifts along every dimension of model arrays of every kind on `grid`, by
/// positive, negative, zero amounts and amounts beyond the extent either way, into partner kinds.
fn shift_sweep(grid: &Grid, extents: &[usize]) -> Result<()> {
    let n = grid.ndims();
    let (src_t, dst_t) = (in_order(n), rotated(n));
    let counts = kind_counts(&src_t);
    let whole = Sel::whole(extents);
    for (k, s) in diagonal(&counts).into_iter().enumerate() {
        let src = model_array(grid, ranges_of(grid, &src_t, extents, &s)?)?;
        let dst_ranges = ranges_of(grid, &dst_t, extents, &partner(&s, &counts, 1 + k % 3))?;
        for (dim, &e) in extents.iter().enumerate() {
            let e = e as isize;
            let edge_off = [1, -2, e + 1].map(|a| (a, false));
            let circular = [-1, 2, 0, -(2 * e + 1)].map(|a| (a, true));
            for (amount, circular) in edge_off.into_iter().chain(circular) {
                let mut dst = unset_array(grid, dst_ranges.clone())?;
                if circular {
                    cshift(&mut dst, &src, amount, dim)?;
                } else {
                    shift(&mut dst, &src, amount, dim)?;
                }
                let model = section_copy(&whole, &whole, Some(Shift { dim, amount, circular }));
                check(&dst, model, &(src.ranges(), &dst_ranges, dim, amount, circular));
            }
        }
    }
    Ok(())
}

#[test]
fn shift_and_cshift_along_every_dimension() {
    every_np(|world| {
        for grid in grids(&world)? {
            for extents in extent_sets(grid.ndims()) {
                shift_sweep(&grid, &extents)?;
            }
        }
        Ok(())
    });
}

/// Range kinds for the halo sweep over grid dimension `dim`: ghost blocks with asymmetric
/// widths (one wider than some neighbours' blocks), and kinds without ghosts beside them.
fn halo_kinds(grid: &Grid, dim: usize, extent: usize) -> Result<Vec<Range>> {
    Ok(vec![
        Range::ghost_block(extent, grid, dim, 1, 2)?,
        Range::ghost_block(extent, grid, dim, 2, 0)?,
        Range::ghost_block(extent, grid, dim, 0, 1)?,
        Range::ghost_block(extent, grid, dim, 3, 1)?,
        Range::block(extent, grid, dim)?,
        Range::cyclic(extent, grid, dim)?,
        Range::collapsed(extent),
    ])
}

/// The halo updates of the sweep for ranges with these ghost widths: all of them without and
/// with wrap-around (in every dimension, in the first only), and width subsets with mixed wrap.
/// A halo update's widths per dimension and wrap-around flags.
type HaloVariant = (Vec<(usize, usize)>, Vec<bool>);

fn halo_variants(ghosts: &[(usize, usize)]) -> Vec<HaloVariant> {
    let n = ghosts.len();
    let below: Vec<(usize, usize)> = ghosts.iter().map(|&(lo, _)| (lo.min(1), 0)).collect();
    let above: Vec<(usize, usize)> = ghosts.iter().map(|&(_, hi)| (0, hi)).collect();
    let alternate: Vec<bool> = (0..n).map(|r| r % 2 == 1).collect();
    vec![
        (ghosts.to_vec(), vec![false; n]),
        (ghosts.to_vec(), vec![true; n]),
        (ghosts.to_vec(), vec![true]),
        (below, alternate),
        (above, vec![true; n]),
    ]
}

/// write_halo of model arrays mixing ghost blocks with other kinds on `grid`, with every
/// variant of [`halo_variants`] and the default; `pairs` takes every pair of kinds in every pair
/// of dimensions, otherwise every kind in every dimension.
fn halo_sweep(grid: &Grid, extents: &[usize], pairs: bool) -> Result<()> {
    let n = grid.ndims();
    let tuples = if pairs { pairwise(&vec![7; n]) } else { diagonal(&vec![7; n]) };
    for s in tuples {
        let mut ranges = Vec::with_capacity(n);
        for (r, &k) in s.iter().enumerate() {
            ranges.push(halo_kinds(grid, r, extents[r])?.swap_remove(k));
        }
        let ghosts: Vec<(usize, usize)> = ranges.iter().map(Range::ghosts).collect();
        for (widths, wrap) in halo_variants(&ghosts) {
            let mut a = model_array(grid, ranges.clone())?;
            let halo = if widths == ghosts { Halo::all() } else { Halo::all().widths(&widths) };
            a.write_halo_with(&halo.wrap(&wrap))?;
            let what = (&ranges, &widths, &wrap);
            check(&a, value, &what);
            check_halo(&a, &widths, &wrap, UNSET, value, &what);
        }
        // The default: every ghost cell, no wrap-around.
        let mut a = model_array(grid, ranges.clone())?;
        a.write_halo()?;
        check_halo(&a, &ghosts, &[], UNSET, value, &(&ranges, "write_halo()"));
    }
    Ok(())
}

#[test]
fn write_halo_every_width_and_wrap_around() {
    every_np(|world| {
        for grid in grids(&world)? {
            for extents in extent_sets(grid.ndims()) {
                // On the grid with a dimension of one process, every kind in every dimension.
                let flat = grid.ndims() == 2 && grid.dims().contains(&1);
                halo_sweep(&grid, &extents, !flat)?;
            }
        }
        Ok(())
    });
}

#[test]
fn copy_between_aligned_arrays_and_sections() {
    every_np(|world| {
        for grid in grids(&world)? {
            let n = grid.ndims();
            let targets = in_order(n);
            for extents in extent_sets(n) {
                let whole = Sel::whole(&extents);
                let sec: Vec<Triplet> = extents.iter().map(|&e| Triplet::new(e / 2, e, 2)).collect();
                let sels = select(&whole, &sec).expect("fits");
                for s in diagonal(&kind_counts(&targets)) {
                    let ranges = ranges_of(&grid, &targets, &extents, &s)?;
                    let src = model_array(&grid, ranges.clone())?;
                    let mut dst = unset_array(&grid, ranges.clone())?;
                    copy(&mut dst, &src)?;
                    check(&dst, value, &ranges);
                    // Ghost cells are not copied.
                    check_halo(&dst, &vec![(0, 0); n], &[], UNSET, value, &ranges);

                    let mut dst = unset_array(&grid, ranges.clone())?;
                    copy(&mut dst.section_mut(&sec)?, &src.section(&sec)?)?;
                    check(&dst, section_copy(&sels, &sels, None), &("section", &ranges));
                }
            }
        }
        Ok(())
    });
}

/// Sets every element of `a` this rank owns to the model's value plus `offset`.
fn refill(a: &mut A, offset: i64) {
    for (g, x) in a.overall_mut() {
        *x = value(g.slice()) + offset;
    }
}

#[test]
fn schedules_execute_many_times_on_arrays_aligned_with_theirs() {
    every_np(|world| {
        let grid = Grid::auto(&world, 2)?;
        let extents = [9, 7];
        let whole = Sel::whole(&extents);
        let src_ranges = vec![Range::block(9, &grid, 0)?, Range::ghost_block(7, &grid, 1, 1, 1)?];
        let dst_ranges = vec![Range::cyclic(9, &grid, 1)?, Range::block_cyclic(7, 3, &grid, 0)?];
        let other_ranges = vec![Range::block(9, &grid, 1)?, Range::block(7, &grid, 0)?];

        // Remap: the source changes between executions.
        let mut src = model_array(&grid, src_ranges.clone())?;
        let mut dst = unset_array(&grid, dst_ranges.clone())?;
        let mut schedule = RemapSchedule::build(&dst, &src)?;
        for k in 0..5 {
            refill(&mut src, 1000 * k);
            schedule.execute(&mut dst, &src)?;
            check(&dst, |g| value(g) + 1000 * k, &("remap execution", k));
        }
        // Fresh arrays on the same grid and ranges, and clones, are aligned with the originals.
        let (src2, mut dst2) = (model_array(&grid, src_ranges.clone())?, unset_array(&grid, dst_ranges.clone())?);
        schedule.execute(&mut dst2, &src2)?;
        check(&dst2, value, &"remap on fresh arrays");
        let mut dst3 = dst2.clone();
        refill(&mut dst3, 0);
        schedule.execute(&mut dst3, &src)?;
        check(&dst3, |g| value(g) + 4000, &"remap into a clone");
        // A differently aligned destination is refused before anything moves.
        let mut other = unset_array(&grid, other_ranges.clone())?;
        assert!(matches!(schedule.execute(&mut other, &src), Err(Error::InvalidArgument(_))));
        check(&other, |_| UNSET, &"refused remap");
        // The schedule still works after the refusal.
        schedule.execute(&mut dst2, &src)?;
        check(&dst2, |g| value(g) + 4000, &"remap after a refusal");

        // A schedule between sections executes on those sections only.
        let sec = [Triplet::new(1, 9, 3), Triplet::new(0, 7, 2)];
        let sels = select(&whole, &sec).expect("fits");
        let mut on_sections = RemapSchedule::build(&dst.section(&sec)?, &src.section(&sec)?)?;
        for k in 0..3 {
            let mut dst = unset_array(&grid, dst_ranges.clone())?;
            refill(&mut src, k);
            on_sections.execute(&mut dst.section_mut(&sec)?, &src.section(&sec)?)?;
            let model = section_copy(&sels, &sels, None);
            check(&dst, |g| if model(g) == UNSET { UNSET } else { model(g) + k }, &("section schedule", k));
        }
        assert!(on_sections.execute(&mut dst, &src).is_err());

        // Shift and cshift schedules.
        for circular in [false, true] {
            let mut shifted = unset_array(&grid, dst_ranges.clone())?;
            let mut schedule = ShiftSchedule::build(&shifted, &src, -2, 1, circular)?;
            let model = section_copy(&whole, &whole, Some(Shift { dim: 1, amount: -2, circular }));
            for k in 0..4 {
                refill(&mut src, 100 * k);
                schedule.execute(&mut shifted, &src)?;
                check(&shifted, |g| if model(g) == UNSET { UNSET } else { model(g) + 100 * k }, &("shift", k));
            }
            let mut other = unset_array(&grid, other_ranges.clone())?;
            assert!(schedule.execute(&mut other, &src).is_err());
            check(&other, |_| UNSET, &"refused shift");
        }

        // Halo schedules: the interior changes between executions.
        let halo_ranges = vec![Range::ghost_block(9, &grid, 0, 2, 1)?, Range::ghost_block(7, &grid, 1, 1, 2)?];
        let mut a = model_array(&grid, halo_ranges.clone())?;
        let wrap = [true, false];
        let mut halo = HaloSchedule::build(&a, &Halo::all().wrap(&wrap))?;
        for k in 0..5 {
            refill(&mut a, 10 * k);
            halo.execute(&mut a)?;
            check_halo(&a, &[(2, 1), (1, 2)], &wrap, UNSET, |g| value(g) + 10 * k, &("halo", k));
        }
        let mut b = model_array(&grid, halo_ranges.clone())?;
        halo.execute(&mut b)?;
        check_halo(&b, &[(2, 1), (1, 2)], &wrap, UNSET, value, &"halo on a fresh array");
        let mut c = model_array(&grid, vec![Range::ghost_block(9, &grid, 0, 2, 2)?, halo_ranges[1].clone()])?;
        assert!(halo.execute(&mut c).is_err());
        check_halo(&c, &[(0, 0), (0, 0)], &[], UNSET, value, &"refused halo");
        set_ghosts(&mut b, UNSET);
        halo.execute(&mut b)?;
        check_halo(&b, &[(2, 1), (1, 2)], &wrap, UNSET, value, &"halo after a refusal");
        Ok(())
    });
}

/// The fixed-rank forms (`[Range; 3]`, `Ix3`, patterns as tuples) on a 3-D grid.
#[test]
fn three_dimensional_arrays_with_fixed_rank() {
    every_np(|world| {
        let grid = Grid::auto(&world, 3)?;
        let f = |(i, j, k): (usize, usize, usize)| value(&[i, j, k]);
        let ranges = [
            Range::ghost_block(5, &grid, 0, 1, 1)?,
            Range::ghost_block(4, &grid, 1, 0, 2)?,
            Range::ghost_block(6, &grid, 2, 1, 0)?,
        ];
        let mut a: DArray<i64, Ix3> = DArray::from_fn(&grid, ranges.clone(), f)?;
        a.write_halo_with(&Halo::all().wrap(&[true, true, true]))?;
        let dynamic = A::from_elem(&grid, ranges.to_vec(), 0)?;
        // The same checks as the dynamic-rank arrays, through a copy of the stored block.
        let mut b = dynamic.clone();
        b.local_with_ghosts_mut().assign(&a.local_with_ghosts().into_dyn());
        check_halo(&b, &[(1, 1), (0, 2), (1, 0)], &[true, true, true], 0, value, &"Ix3 halo");

        let mut c: DArray<i64, Ix3> = DArray::from_elem(
            &grid,
            [Range::cyclic(5, &grid, 2)?, Range::block_cyclic(4, 3, &grid, 0)?, Range::block(6, &grid, 1)?],
            UNSET,
        )?;
        remap(&mut c, &a)?;
        assert!(c.overall().all(|(g, &x)| x == f(g)));
        cshift(&mut c, &a, -1, 2)?;
        assert!(c.overall().all(|((i, j, k), &x)| x == f((i, j, (k + 5) % 6))));
        for ((i, j, k), x) in c.overall() {
            assert_eq!(c.get((i, j, k)), Some(x));
            let local = c.global_to_local((i, j, k)).expect("owned");
            assert_eq!(c.local_to_global(local), Some((i, j, k)));
        }
        Ok(())
    });
}

/// Regression: `write_halo` took the elements of a ghost row beside a dimension that is not
/// block-distributed from the wrong indices (it assumed every dimension's local indices were
/// contiguous, so a ghost row of a block × cyclic array held a block × block row).
#[test]
fn halo_rows_beside_cyclic_and_block_cyclic_dimensions() {
    for np in [2, 4, 6] {
        fastmp::run(np, |world| {
            let grid = Grid::auto(&world, 2)?;
            for other in [Range::cyclic(7, &grid, 1)?, Range::block_cyclic(7, 2, &grid, 1)?] {
                let ranges = vec![Range::ghost_block(6, &grid, 0, 1, 1)?, other];
                let mut a = model_array(&grid, ranges.clone())?;
                a.write_halo_with(&Halo::all().wrap(&[true]))?;
                check_halo(&a, &[(1, 1), (0, 0)], &[true], UNSET, value, &ranges);
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("np {np}: {e}"));
    }
}

/// Remap, cshift and write_halo of elements of other sizes than the sweeps' `i64` (the fast
/// paths move bytes): `u8`, `u16`, and a 12-byte array.
#[test]
fn elements_of_other_sizes() {
    fn case<T>(world: &Comm, model: fn(&[usize]) -> T, unset: T) -> Result<()>
    where
        T: Pod + Default + PartialEq + Debug,
    {
        let grid = Grid::auto(world, 2)?;
        let whole = Sel::whole(&[9, 7]);
        let src_ranges = vec![Range::ghost_block(9, &grid, 0, 1, 2)?, Range::cyclic(7, &grid, 1)?];
        let dst_ranges = vec![Range::block_cyclic(9, 2, &grid, 1)?, Range::ghost_block(7, &grid, 0, 2, 1)?];
        let mut src = filled(&grid, src_ranges, unset, model)?;
        let mut dst = DArray::<T, IxDyn>::from_elem(&grid, dst_ranges, unset)?;
        remap(&mut dst, &src)?;
        check(&dst, model, &"remap");
        cshift(&mut dst, &src, 3, 1)?;
        let shift = Some(Shift { dim: 1, amount: 3, circular: true });
        check(&dst, section_copy_of(&whole, &whole, shift, model, unset), &"cshift");
        src.write_halo_with(&Halo::all().wrap(&[true, false]))?;
        check_halo(&src, &[(1, 2), (0, 0)], &[true, false], unset, model, &"halo");
        dst.write_halo()?;
        check_halo(&dst, &[(0, 0), (2, 1)], &[], unset, section_copy_of(&whole, &whole, shift, model, unset), &"halo");
        Ok(())
    }
    for np in [1, 2, 3, 4, 6] {
        fastmp::run(np, |world| {
            case(&world, |g| (16 * g[0] + g[1]) as u8, u8::MAX)?;
            case(&world, |g| (1000 * g[0] + g[1]) as u16, u16::MAX)?;
            case(&world, |g| [g[0] as u32, g[1] as u32, (g[0] * g[1]) as u32], [u32::MAX; 3])
        })
        .unwrap_or_else(|e| panic!("np {np}: {e}"));
    }
}

/// write_halo, shift and cshift of replicated arrays (each copy from its own neighbours) and of
/// arrays on restricted grids (the ranks outside call too, and hold nothing).
#[test]
fn halo_and_shifts_of_replicated_and_restricted_arrays() {
    every_np(|world| {
        let plane = Grid::auto(&world, 2)?;
        let cube = Grid::auto(&world, 3)?;
        let row = plane.restrict(0, plane.dims()[0] - 1)?;
        let line = cube.restrict(1, 0)?.restrict(2, cube.dims()[2] - 1)?;
        let cases: Vec<(&Grid, Vec<Range>)> = vec![
            // Replicated over grid dimension 1, then over 0.
            (&plane, vec![Range::ghost_block(11, &plane, 0, 2, 1)?]),
            (&plane, vec![Range::ghost_block(11, &plane, 1, 1, 3)?, Range::collapsed(3)]),
            // A 2-D array on a 3-D grid, replicated over its dimension 1.
            (&cube, vec![Range::ghost_block(5, &cube, 2, 1, 1)?, Range::ghost_block(6, &cube, 0, 0, 2)?]),
            (&row, vec![Range::ghost_block(9, &row, 1, 1, 2)?]),
            (&line, vec![Range::collapsed(4), Range::ghost_block(7, &line, 0, 2, 2)?]),
        ];
        for (grid, ranges) in cases {
            let n = ranges.len();
            let ghosts: Vec<(usize, usize)> = ranges.iter().map(Range::ghosts).collect();
            for wrap in [vec![false; n], vec![true; n]] {
                let mut a = model_array(grid, ranges.clone())?;
                a.write_halo_with(&Halo::all().wrap(&wrap))?;
                check_halo(&a, &ghosts, &wrap, UNSET, value, &(&ranges, &wrap));
            }
            let src = model_array(grid, ranges.clone())?;
            let whole = Sel::whole(&src.shape());
            for dim in 0..n {
                for (amount, circular) in [(2, false), (-1, false), (-3, true), (12, true)] {
                    let mut dst = unset_array(grid, ranges.clone())?;
                    if circular {
                        cshift(&mut dst, &src, amount, dim)?;
                    } else {
                        shift(&mut dst, &src, amount, dim)?;
                    }
                    let model = section_copy(&whole, &whole, Some(Shift { dim, amount, circular }));
                    check(&dst, model, &(&ranges, dim, amount, circular));
                }
            }
        }
        Ok(())
    });
}

/// The sweeps on thread ranks over the TCP device (loopback), whose messages are always packed
/// and travel through sockets: a part of each at 2 and 3 ranks.
#[test]
fn sweeps_on_the_tcp_device() {
    for np in [2, 3] {
        let job = Config::new().np(np).device(DeviceKind::Tcp).run(|world| {
            assert_eq!(world.device_name(), "tcp");
            let plane = Grid::auto(&world, 2)?;
            remap_sweep(&plane, &in_order(2), &plane, &rotated(2), &[7, 10])?;
            remap_sweep(&plane, &[Some(1)], &plane.restrict(0, 0)?, &[Some(1)], &[9])?;
            shift_sweep(&plane, &[7, 3])?;
            halo_sweep(&plane, &[6, 5], false)
        });
        if let Err(e) = job {
            panic!("np {np} on tcp: {e}");
        }
    }
}
