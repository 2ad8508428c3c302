//! Serde elements (HPJava's `Object` arrays): `remap_obj`, `shift_obj`, `cshift_obj`,
//! `write_halo_obj` and the schedules' `execute_obj` with `String` and a small struct, on every
//! range kind, 1- to 3-D grids and jobs of 1 to 8 ranks, against the serial model.

mod support;

use fastmp::Result;
use fastmp_darray::ndarray::IxDyn;
use fastmp_darray::{
    DArray, Grid, Halo, HaloSchedule, Range, RemapSchedule, ShiftSchedule, Triplet, cshift_obj, remap_obj, shift_obj,
};
use serde::{Deserialize, Serialize};
use support::{
    Sel, Shift, check, check_halo, diagonal, every_np, filled, grids, kind_counts, partner, ranges_of, section_copy_of,
    select, set_ghosts, tail_triplet,
};

/// A small struct element: a name of varying length, a vector and a float, so elements differ in
/// encoded size.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Cell {
    name: String,
    at: Vec<u16>,
    weight: f32,
}

/// The `String` model: the global index written out.
fn text(g: &[usize]) -> String {
    format!("{g:?}")
}

/// The `Cell` model.
fn cell(g: &[usize]) -> Cell {
    Cell { name: "x".repeat(g.iter().sum::<usize>() % 5), at: g.iter().map(|&i| i as u16).collect(), weight: 0.5 }
}

/// What a destination element holds before an operation.
fn unset_text() -> String {
    "unset".to_string()
}

fn unset_cell() -> Cell {
    Cell { name: "unset".into(), ..Cell::default() }
}

/// Remap, shift and cshift of `T` elements from every kind to its partners on every grid.
fn sweep<T>(world: &fastmp::Comm, model: fn(&[usize]) -> T, unset: fn() -> T) -> Result<()>
where
    T: Clone + Default + PartialEq + std::fmt::Debug + Serialize + serde::de::DeserializeOwned,
{
    for grid in grids(world)? {
        let n = grid.ndims();
        let src_t: Vec<Option<usize>> = (0..n).map(Some).collect();
        let dst_t: Vec<Option<usize>> = (0..n).map(|r| Some((r + 1) % n)).collect();
        let counts = kind_counts(&src_t);
        let extents: Vec<usize> = [7, 5, 3][..n].to_vec();
        let whole = Sel::whole(&extents);
        let src_sec: Vec<Triplet> = extents.iter().map(|&e| Triplet::new(1, e, 2)).collect();
        let src_sels = select(&whole, &src_sec).expect("fits");
        let dst_sec: Vec<Triplet> = src_sels.iter().zip(&extents).map(|(s, &e)| tail_triplet(e, s.count)).collect();
        let dst_sels = select(&whole, &dst_sec).expect("fits");
        for (k, s) in diagonal(&counts).into_iter().enumerate() {
            let src = filled(&grid, ranges_of(&grid, &src_t, &extents, &s)?, unset(), model)?;
            let dst_ranges = ranges_of(&grid, &dst_t, &extents, &partner(&s, &counts, 1 + k % 6))?;
            let what = (src.ranges(), &dst_ranges);
            let fresh = || DArray::<T, IxDyn>::from_elem(&grid, dst_ranges.clone(), unset());

            let mut dst = fresh()?;
            remap_obj(&mut dst, &src)?;
            check(&dst, model, &("remap_obj", &what));

            let mut dst = fresh()?;
            remap_obj(&mut dst.section_mut(&dst_sec)?, &src.section(&src_sec)?)?;
            check(&dst, section_copy_of(&dst_sels, &src_sels, None, model, unset()), &("remap_obj sections", &what));

            let dim = k % n;
            for (amount, circular) in [(1, false), (-2, false), (-1, true), (extents[dim] as isize + 2, true)] {
                let mut dst = fresh()?;
                if circular {
                    cshift_obj(&mut dst, &src, amount, dim)?;
                } else {
                    shift_obj(&mut dst, &src, amount, dim)?;
                }
                let shift = Some(Shift { dim, amount, circular });
                check(
                    &dst,
                    section_copy_of(&whole, &whole, shift, model, unset()),
                    &("shift", amount, circular, &what),
                );
            }
        }
    }
    Ok(())
}

#[test]
fn strings_remap_shift_and_cshift() {
    every_np(|world| sweep(&world, text, unset_text));
}

#[test]
fn structs_remap_shift_and_cshift() {
    every_np(|world| sweep(&world, cell, unset_cell));
}

#[test]
fn write_halo_obj_with_widths_and_wrap_around() {
    every_np(|world| {
        for grid in grids(&world)? {
            let n = grid.ndims();
            let extents = [6, 5, 4];
            let ghosts = [(1, 2), (2, 0), (1, 1)];
            let ranges: Vec<Range> = (0..n)
                .map(|r| Range::ghost_block(extents[r], &grid, r, ghosts[r].0, ghosts[r].1))
                .collect::<Result<_>>()?;
            let all: Vec<(usize, usize)> = ghosts[..n].to_vec();
            let lower: Vec<(usize, usize)> = all.iter().map(|&(lo, _)| (lo, 0)).collect();
            for (widths, wrap) in [(all.clone(), vec![false; n]), (all.clone(), vec![true; n]), (lower, vec![true])] {
                let what = (&ranges, &widths, &wrap);
                let mut a = filled(&grid, ranges.clone(), unset_text(), text)?;
                a.write_halo_obj(&Halo::all().widths(&widths).wrap(&wrap))?;
                check(&a, text, &what);
                check_halo(&a, &widths, &wrap, unset_text(), text, &what);

                let mut b = filled(&grid, ranges.clone(), unset_cell(), cell)?;
                b.write_halo_obj(&Halo::all().widths(&widths).wrap(&wrap))?;
                check_halo(&b, &widths, &wrap, unset_cell(), cell, &what);
            }
        }
        Ok(())
    });
}

#[test]
fn schedules_execute_obj_many_times() {
    every_np(|world| {
        let grid = Grid::auto(&world, 2)?;
        let extents = [7, 6];
        let whole = Sel::whole(&extents);
        let src_ranges = vec![Range::ghost_block(7, &grid, 0, 1, 1)?, Range::cyclic(6, &grid, 1)?];
        let dst_ranges = vec![Range::block_cyclic(7, 2, &grid, 1)?, Range::collapsed(6)];
        let round = |k: usize| move |g: &[usize]| format!("{k}:{g:?}");

        let mut src = filled(&grid, src_ranges.clone(), unset_text(), round(0))?;
        let mut dst = DArray::<String, IxDyn>::from_elem(&grid, dst_ranges.clone(), unset_text())?;
        let mut remap = RemapSchedule::build(&dst, &src)?;
        let mut shift = ShiftSchedule::build(&dst, &src, 3, 1, true)?;
        let mut halo = HaloSchedule::build(&src, &Halo::all().wrap(&[true, false]))?;
        for k in 0..4 {
            src = filled(&grid, src_ranges.clone(), unset_text(), round(k))?;
            remap.execute_obj(&mut dst, &src)?;
            check(&dst, round(k), &("remap", k));
            shift.execute_obj(&mut dst, &src)?;
            let model =
                section_copy_of(&whole, &whole, Some(Shift { dim: 1, amount: 3, circular: true }), round(k), "".into());
            check(&dst, model, &("cshift", k));
            set_ghosts(&mut src, unset_text());
            halo.execute_obj(&mut src)?;
            check_halo(&src, &[(1, 1), (0, 0)], &[true, false], unset_text(), round(k), &("halo", k));
        }
        // Refused on an array it was not built for; nothing written.
        let mut other = DArray::<String, IxDyn>::from_elem(&grid, src_ranges.clone(), unset_text())?;
        assert!(remap.execute_obj(&mut other, &src).is_err());
        assert!(halo.execute_obj(&mut dst).is_err());
        check(&other, |_| unset_text(), &"refused");
        // A replicated destination: every copy receives.
        let mut everywhere =
            DArray::<Cell, IxDyn>::from_elem(&grid, vec![Range::collapsed(7), Range::collapsed(6)], unset_cell())?;
        let cells = filled(&grid, src_ranges.clone(), unset_cell(), cell)?;
        remap_obj(&mut everywhere, &cells)?;
        check(&everywhere, cell, &"replicated");
        Ok(())
    });
}
