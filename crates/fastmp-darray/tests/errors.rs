//! Mistakes are refused alike on every rank, before any message moves: shape and rank
//! mismatches, triplets out of range or with a zero stride, ranges that do not match the grid,
//! bad grids, halo widths beyond the ghost widths, grids over different communicators, and
//! schedules executed on arrays they were not built for. Each refusal is an
//! `Error::InvalidArgument` naming the call, the same message on every rank; nothing is written;
//! and the job goes on (a remap and a halo update after the refusals come out right, so no
//! refusal sent or left a message behind).

mod support;

use std::fmt::Debug;

use fastmp::{Comm, Error, Result};
use fastmp_darray::ndarray::Ix2;
use fastmp_darray::{
    DArray, Grid, Halo, HaloSchedule, Range, RemapSchedule, ShiftSchedule, Triplet, copy, cshift, remap, shift,
};
use support::{A, Sel, Shift, UNSET, check, check_halo, model_array, section_copy, unset_array, value};

/// Asserts that `result` is `call`'s `InvalidArgument` error; returns its message.
fn refused<T: Debug>(result: Result<T>, call: &str) -> String {
    match result {
        Err(Error::InvalidArgument(message)) => {
            assert!(message.starts_with(&format!("{call}: ")), "{message:?} does not name {call}");
            message
        }
        other => panic!("{call}: expected an InvalidArgument error, got {other:?}"),
    }
}

/// Runs `provoke` in jobs of 1 to 8 ranks, then a remap and a halo update that must come out
/// right; `provoke` returns the messages of the errors it provoked, which must be the same on
/// every rank.
fn every_rank_alike(provoke: impl Fn(&Comm) -> Result<Vec<String>> + Sync) {
    for np in 1..=8 {
        let messages = fastmp::run(np, |world| {
            let messages = provoke(&world)?;
            still_works(&world)?;
            Ok(messages)
        })
        .unwrap_or_else(|e| panic!("np {np}: {e}"));
        assert!(!messages[0].is_empty(), "np {np}: nothing was refused");
        assert!(
            messages.iter().all(|m| *m == messages[0]),
            "np {np}: the ranks were refused differently: {messages:#?}"
        );
    }
}

/// A remap and a halo update on a fresh grid, checked.
fn still_works(world: &Comm) -> Result<()> {
    let grid = Grid::auto(world, 2)?;
    let src = model_array(&grid, vec![Range::ghost_block(9, &grid, 0, 1, 1)?, Range::cyclic(4, &grid, 1)?])?;
    let mut dst = unset_array(&grid, vec![Range::block(9, &grid, 1)?, Range::ghost_block(4, &grid, 0, 1, 0)?])?;
    remap(&mut dst, &src)?;
    check(&dst, value, &"remap after the refusals");
    dst.write_halo_with(&Halo::all().wrap(&[false, true]))?;
    check_halo(&dst, &[(0, 0), (1, 0)], &[false, true], UNSET, value, &"halo after the refusals");
    Ok(())
}

/// Asserts that nothing of `a` changed from [`UNSET`] (ghost cells included).
fn untouched(a: &A, what: &str) {
    assert!(a.local_with_ghosts().iter().all(|&x| x == UNSET), "{what}: a refused operation wrote");
}

#[test]
fn shape_and_rank_mismatches_are_refused() {
    every_rank_alike(|world| {
        let grid = Grid::auto(world, 2)?;
        let mut m = Vec::new();
        let src = model_array(&grid, vec![Range::block(7, &grid, 0)?, Range::cyclic(5, &grid, 1)?])?;
        let mut wide = unset_array(&grid, vec![Range::block(7, &grid, 1)?, Range::block(6, &grid, 0)?])?;
        m.push(refused(remap(&mut wide, &src), "remap"));
        m.push(refused(RemapSchedule::build(&wide, &src), "remap"));
        m.push(refused(shift(&mut wide, &src, 1, 0), "shift"));
        m.push(refused(cshift(&mut wide, &src, 1, 1), "cshift"));
        m.push(refused(ShiftSchedule::build(&wide, &src, 1, 0, true), "cshift"));
        // Sections of different shapes: 3×2 and 3×3.
        let sec = [Triplet::new(0, 7, 3), Triplet::new(0, 5, 3)];
        m.push(refused(
            remap(&mut wide.section_mut(&[Triplet::new(4, 7, 1), Triplet::new(0, 3, 1)])?, &src.section(&sec)?),
            "remap",
        ));
        // Identical alignment, different sections.
        let mut twin = unset_array(&grid, src.ranges().to_vec())?;
        m.push(refused(
            copy(&mut twin.section_mut(&[Triplet::new(1, 7, 3), Triplet::all()])?, &src.section(&sec)?),
            "copy",
        ));
        m.push(refused(copy(&mut wide, &src), "copy"));
        // Array rank: a 3-D destination for a 2-D source, a shift along a dimension that
        // does not exist, no ranges at all.
        let mut deep = unset_array(&grid, vec![Range::block(7, &grid, 0)?, Range::collapsed(5), Range::collapsed(1)])?;
        m.push(refused(remap(&mut deep, &src), "remap"));
        m.push(refused(shift(&mut twin, &src, 1, 2), "shift"));
        let none = refused(A::from_elem(&grid, vec![], UNSET), "DArray");
        assert_eq!(none, "DArray: 0 ranges for an array of at least one dimension");
        m.push(none);
        m.push(refused(src.section(&[Triplet::all()]), "DArray::section"));
        m.push(refused(twin.section_mut(&[Triplet::all(); 3]), "DArray::section_mut"));
        for (a, what) in [(&wide, "wide"), (&twin, "twin"), (&deep, "deep")] {
            untouched(a, what);
        }
        // Arrays on a restricted grid: the ranks outside it are refused too.
        let row = grid.restrict(0, 0)?;
        let a = model_array(&row, vec![Range::block(4, &row, 1)?])?;
        let mut b = unset_array(&row, vec![Range::cyclic(5, &row, 1)?])?;
        m.push(refused(remap(&mut b, &a), "remap"));
        untouched(&b, "restricted");
        Ok(m)
    });
}

#[test]
fn bad_triplets_are_refused() {
    every_rank_alike(|world| {
        let grid = Grid::auto(world, 2)?;
        let mut a = model_array(&grid, vec![Range::block(7, &grid, 0)?, Range::cyclic(5, &grid, 1)?])?;
        let mut m = Vec::new();
        let all = Triplet::all();
        for bad in [Triplet::new(0, 8, 1), Triplet::new(3, 2, 1), Triplet::new(0, 7, 0), Triplet::new(8, 9, 1)] {
            m.push(refused(a.section(&[bad, all]), "DArray::section"));
            m.push(refused(a.section_mut(&[all, bad]), "DArray::section_mut"));
        }
        // Nested: triplets are relative to the section (4 indices: 0, 2, 4, 6).
        let outer = [Triplet::new(0, 7, 2), all];
        m.push(refused(a.section(&outer)?.section(&[Triplet::new(0, 5, 1), all]), "Section::section"));
        m.push(refused(a.section(&outer)?.section(&[all, Triplet::new(1, 3, 0)]), "Section::section"));
        m.push(refused(a.section_mut(&outer)?.section_mut(&[Triplet::new(2, 5, 1), all]), "SectionMut::section_mut"));
        // Edge cases that fit: an empty selection, the last index, a stride past the end.
        assert_eq!(a.section(&[Triplet::new(7, 7, 1), all])?.shape(), [0, 5]);
        assert_eq!(a.section(&[Triplet::new(6, 7, 1), Triplet::new(0, 5, 9)])?.shape(), [1, 1]);
        check(&a, value, &"sectioned");
        Ok(m)
    });
}

#[test]
fn ranges_that_do_not_match_the_grid_are_refused() {
    every_rank_alike(|world| {
        let np = world.size();
        let line = Grid::new(world, &[np])?;
        let flat = Grid::new(world, &[1, np])?;
        let mut m = Vec::new();
        // A range for a grid dimension of another process count.
        if np > 1 {
            m.push(refused(A::from_elem(&flat, vec![Range::block(5, &line, 0)?], 0), "DArray"));
        }
        // A grid dimension the grid does not have.
        m.push(refused(A::from_elem(&line, vec![Range::block(5, &flat, 1)?], 0), "DArray"));
        m.push(refused(Range::block(5, &line, 1), "Range::block"));
        m.push(refused(Range::cyclic(5, &line, 3), "Range::cyclic"));
        m.push(refused(Range::ghost_block(5, &flat, 2, 1, 1), "Range::ghost_block"));
        m.push(refused(Range::block_cyclic(5, 0, &line, 0), "Range::block_cyclic"));
        // Two ranges on one grid dimension.
        let two = vec![Range::block(5, &flat, 1)?, Range::cyclic(4, &flat, 1)?];
        m.push(refused(A::from_elem(&flat, two, 0), "DArray"));
        m.push(refused(
            DArray::<i64, Ix2>::from_fn(&flat, [Range::cyclic(3, &flat, 0)?, Range::block(3, &flat, 0)?], |_| 1),
            "DArray",
        ));
        // A restricted grid dimension.
        let column = flat.restrict(1, np - 1)?;
        m.push(refused(Range::block(5, &column, 1), "Range::block"));
        m.push(refused(A::from_elem(&column, vec![Range::block(5, &flat, 1)?], 0), "DArray"));
        Ok(m)
    });
}

#[test]
fn bad_grids_are_refused() {
    every_rank_alike(|world| {
        let np = world.size();
        let mut m = vec![
            refused(Grid::new(world, &[]), "Grid::new"),
            refused(Grid::new(world, &[np, 0]), "Grid::new"),
            refused(Grid::new(world, &[np + 1]), "Grid::new"),
            refused(Grid::new(world, &[np, 2]), "Grid::new"),
            refused(Grid::new(world, &[usize::MAX, usize::MAX]), "Grid::new"),
        ];
        let grid = Grid::new(world, &[1, np])?;
        m.push(refused(grid.restrict(2, 0), "Grid::restrict"));
        m.push(refused(grid.restrict(1, np), "Grid::restrict"));
        m.push(refused(grid.restrict(0, 1), "Grid::restrict"));
        if np > 1 {
            m.push(refused(grid.restrict(1, 0)?.restrict(1, 1), "Grid::restrict"));
        }
        // Restricting again to the same coordinate is allowed.
        assert_eq!(grid.restrict(1, 0)?.restrict(1, 0)?, grid.restrict(1, 0)?);
        Ok(m)
    });
}

#[test]
fn halo_requests_beyond_the_ghosts_are_refused() {
    every_rank_alike(|world| {
        let grid = Grid::auto(world, 2)?;
        let ranges = vec![Range::ghost_block(7, &grid, 0, 1, 2)?, Range::cyclic(5, &grid, 1)?];
        let mut a = unset_array(&grid, ranges)?;
        let mut m = Vec::new();
        for widths in [vec![(2, 0), (0, 0)], vec![(1, 3), (0, 0)], vec![(0, 0), (0, 1)], vec![(1, 1)], vec![(0, 0); 3]]
        {
            m.push(refused(a.write_halo_with(&Halo::all().widths(&widths)), "write_halo"));
            m.push(refused(HaloSchedule::build(&a, &Halo::all().widths(&widths)), "write_halo"));
            m.push(refused(a.write_halo_obj(&Halo::all().widths(&widths)), "write_halo"));
        }
        m.push(refused(a.write_halo_with(&Halo::all().wrap(&[true, false, true])), "write_halo"));
        untouched(&a, "halo");
        Ok(m)
    });
}

#[test]
fn grids_over_different_communicators_are_refused() {
    every_rank_alike(|world| {
        let (np, rank) = (world.size(), world.rank());
        let grid = Grid::new(world, &[np])?;
        let src = model_array(&grid, vec![Range::cyclic(9, &grid, 0)?])?;
        let mut m = Vec::new();
        // Halves of the job, and the job's ranks in reverse order.
        let halves = world.split(Some((rank % 2) as u32), 0)?.expect("a color");
        let reversed = world.split(Some(0), -(rank as i32))?.expect("a color");
        for comm in [halves, reversed] {
            let other = Grid::new(&comm, &[comm.size()])?;
            let mut dst = unset_array(&other, vec![Range::block(9, &other, 0)?])?;
            if np > 1 {
                m.push(refused(remap(&mut dst, &src), "remap"));
                m.push(refused(RemapSchedule::build(&src, &dst), "remap"));
                m.push(refused(cshift(&mut dst, &src, 1, 0), "cshift"));
                untouched(&dst, "other communicator");
            }
        }
        // A duplicate has the same ranks in the same order: allowed.
        let dup = world.dup()?;
        let same = Grid::new(&dup, &[np])?;
        let mut dst = unset_array(&same, vec![Range::block(9, &same, 0)?])?;
        remap(&mut dst, &src)?;
        check(&dst, value, &"remap across a duplicate communicator");
        m.push(refused(copy(&mut dst, &src), "copy"));
        Ok(m)
    });
}

#[test]
fn schedules_refuse_arrays_they_were_not_built_for() {
    every_rank_alike(|world| {
        let grid = Grid::auto(world, 2)?;
        let ranges = vec![Range::ghost_block(6, &grid, 0, 1, 1)?, Range::block(5, &grid, 1)?];
        let src = model_array(&grid, ranges.clone())?;
        let mut dst = unset_array(&grid, vec![Range::cyclic(6, &grid, 1)?, Range::collapsed(5)])?;
        let mut m = Vec::new();
        let mut remap_schedule = RemapSchedule::build(&dst, &src)?;
        let mut shift_schedule = ShiftSchedule::build(&dst, &src, 2, 0, false)?;
        let mut halo = HaloSchedule::build(&src, &Halo::all())?;
        // Same shape and values, another alignment: another grid object, other ranges,
        // another section.
        let other_grid = Grid::auto(world, 2)?;
        let mut misaligned = vec![
            unset_array(&other_grid, vec![Range::cyclic(6, &other_grid, 1)?, Range::collapsed(5)])?,
            unset_array(&grid, vec![Range::cyclic(6, &grid, 0)?, Range::collapsed(5)])?,
            unset_array(&grid, vec![Range::ghost_block(6, &grid, 0, 1, 0)?, Range::block(5, &grid, 1)?])?,
        ];
        for other in &mut misaligned {
            m.push(refused(remap_schedule.execute(other, &src), "RemapSchedule::execute"));
            m.push(refused(remap_schedule.execute_obj(other, &src), "RemapSchedule::execute_obj"));
            m.push(refused(shift_schedule.execute(other, &src), "RemapSchedule::execute"));
            m.push(refused(remap_schedule.execute(&mut dst, other), "RemapSchedule::execute"));
            m.push(refused(halo.execute(other), "HaloSchedule::execute"));
            untouched(other, "misaligned");
        }
        m.push(refused(
            remap_schedule.execute(
                &mut dst
                    .section_mut(&[Triplet::all(), (0..5).into()])?
                    .section_mut(&[(1..6).into(), Triplet::all()])?,
                &src,
            ),
            "RemapSchedule::execute",
        ));
        untouched(&dst, "destination");
        // The schedules still work.
        remap_schedule.execute(&mut dst, &src)?;
        check(&dst, value, &"remap");
        let mut src = src;
        halo.execute(&mut src)?;
        check_halo(&src, &[(1, 1), (0, 0)], &[], UNSET, value, &"halo");
        Ok(m)
    });
}

/// Extreme arguments are refused or work, and never panic: shifts by `isize::MAX` and
/// `isize::MIN`, triplets with strides near `usize::MAX`, nested.
#[test]
fn extreme_amounts_and_strides_never_panic() {
    every_rank_alike(|world| {
        let grid = Grid::auto(world, 2)?;
        let whole = Sel::whole(&[7, 5]);
        let src = model_array(&grid, vec![Range::block(7, &grid, 0)?, Range::cyclic(5, &grid, 1)?])?;
        let ranges = vec![Range::cyclic(7, &grid, 1)?, Range::ghost_block(5, &grid, 0, 1, 1)?];
        for amount in [isize::MAX, isize::MAX - 1, isize::MIN, isize::MIN + 1] {
            for (dim, circular) in [(0, false), (1, false), (0, true), (1, true)] {
                let mut dst = unset_array(&grid, ranges.clone())?;
                if circular {
                    cshift(&mut dst, &src, amount, dim)?;
                } else {
                    shift(&mut dst, &src, amount, dim)?;
                }
                let model = section_copy(&whole, &whole, Some(Shift { dim, amount, circular }));
                check(&dst, model, &(amount, dim, circular));
            }
        }
        let mut m = Vec::new();
        let big = usize::MAX;
        // One index with a huge stride, then sections of it: empty, the index again, refused.
        let one = src.section(&[Triplet::new(2, 3, big), Triplet::new(4, big, big - 1)])?;
        assert_eq!(one.shape(), [1, 1]);
        assert_eq!(one.section(&[Triplet::new(1, 1, 2), Triplet::all()])?.shape(), [0, 1]);
        let again = one.section(&[Triplet::new(0, 1, big), Triplet::new(0, 1, 3)])?;
        let mut into = unset_array(&grid, vec![Range::collapsed(1), Range::collapsed(1)])?;
        remap(&mut into, &again)?;
        check(&into, |_| value(&[2, 4]), &"one index");
        m.push(refused(one.section(&[Triplet::new(0, 2, big), Triplet::all()]), "Section::section"));
        m.push(refused(src.section(&[Triplet::new(big, big, 1), Triplet::all()]), "DArray::section"));
        Ok(m)
    });
}
