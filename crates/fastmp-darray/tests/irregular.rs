//! Gather and scatter against a serial model: permutations, many-to-one, 1-D and 2-D sources,
//! every range kind (replicated included), sections, restricted grids, serde elements, errors
//! on every rank, np 1–5.

use fastmp::Result;
use fastmp_darray::ndarray::{Ix1, Ix2, IxDyn};
use fastmp_darray::*;

/// A pseudo-random permutation of `0..n` (a fixed LCG drives Fisher–Yates).
fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        p.swap(i, (state >> 33) as usize % (i + 1));
    }
    p
}

fn kinds(grid: &Grid, dim: usize, extent: usize) -> Vec<Range> {
    vec![
        Range::block(extent, grid, dim).unwrap(),
        Range::cyclic(extent, grid, dim).unwrap(),
        Range::block_cyclic(extent, 3, grid, dim).unwrap(),
        Range::ghost_block(extent, grid, dim, 1, 2).unwrap(),
        Range::collapsed(extent),
    ]
}

fn v1(i: usize) -> i64 {
    7 * i as i64 + 1
}

fn v2(i: usize, j: usize) -> i64 {
    1000 * i as i64 + j as i64
}

/// 1-D sources of every kind into 1-D destinations of every kind: a permutation (built once,
/// executed twice with different source contents), a many-to-one gather, the inverse scatter
/// and a colliding scatter.
fn one_dimensional(grid: &Grid) -> Result<()> {
    let n = 17;
    let perm = permutation(n, grid.comm().size() as u64);
    for sr in kinds(grid, 0, n) {
        let mut src = DArray::<i64, Ix1>::from_fn(grid, [sr.clone()], v1)?;
        for dr in kinds(grid, 0, n) {
            let what = format!("{sr:?} -> {dr:?}");
            // Permutation gather, schedule reused.
            let subs = DArray::<usize, Ix1>::from_fn(grid, [dr.clone()], |i| perm[i])?;
            let mut dst = DArray::<i64, Ix1>::from_elem(grid, [dr.clone()], -1)?;
            let mut schedule = GatherSchedule::build(&dst, &src, &subs)?;
            schedule.execute(&mut dst, &src)?;
            for (i, &x) in dst.overall() {
                assert_eq!(x, v1(perm[i]), "{what}");
            }
            for (i, x) in src.overall_mut() {
                *x = -v1(i);
            }
            schedule.execute(&mut dst, &src)?;
            for (i, &x) in dst.overall() {
                assert_eq!(x, -v1(perm[i]), "reused {what}");
            }
            for (i, x) in src.overall_mut() {
                *x = v1(i);
            }
            // Many-to-one gather into a longer destination.
            let m = 23;
            let dr_long = kinds(grid, 0, m)[kinds(grid, 0, n).iter().position(|r| r == &dr).unwrap_or(0)].clone();
            let pick = |i: usize| (i * i + 3) % 5;
            let subs = DArray::<usize, Ix1>::from_fn(grid, [dr_long.clone()], pick)?;
            let mut dst = DArray::<i64, Ix1>::from_elem(grid, [dr_long.clone()], -1)?;
            gather(&mut dst, &src, &subs)?;
            for (i, &x) in dst.overall() {
                assert_eq!(x, v1(pick(i)), "many-to-one {what}");
            }
            // Scatter with the permutation: dst[perm[i]] = src[i] (src and subs aligned).
            let subs = DArray::<usize, Ix1>::from_fn(grid, [sr.clone()], |i| perm[i])?;
            let mut dst = DArray::<i64, Ix1>::from_elem(grid, [dr.clone()], -1)?;
            scatter(&mut dst, &src, &subs)?;
            for (j, &x) in dst.overall() {
                let i = perm.iter().position(|&p| p == j).unwrap();
                assert_eq!(x, v1(i), "scatter {what}");
            }
            // Colliding scatter: i goes to i % 4 of a 6-element array; the largest i wins,
            // elements 4 and 5 keep their value.
            let dr_short = kinds(grid, 0, 6)[kinds(grid, 0, n).iter().position(|r| r == &dr).unwrap_or(0)].clone();
            let subs = DArray::<usize, Ix1>::from_fn(grid, [sr.clone()], |i| i % 4)?;
            let mut dst = DArray::<i64, Ix1>::from_elem(grid, [dr_short], -1)?;
            let mut schedule = ScatterSchedule::build(&dst, &src, &subs)?;
            schedule.execute(&mut dst, &src)?;
            schedule.execute(&mut dst, &src)?;
            for (j, &x) in dst.overall() {
                let want = (0..n).filter(|i| i % 4 == j).max().map_or(-1, v1);
                assert_eq!(x, want, "colliding scatter {what}");
            }
        }
    }
    Ok(())
}

/// 2-D sources of every pair of kinds on a 2-D grid, gathered into 1-D destinations on the
/// 1-D grid (2-D subscripts), and the other way round: 1-D sources into 2-D destinations.
fn two_dimensional(g1: &Grid, g2: &Grid) -> Result<()> {
    let (rows, cols) = (7, 5);
    let perm = permutation(rows * cols, 11);
    let at = |k: usize| (perm[k] / cols, perm[k] % cols);
    for r0 in kinds(g2, 0, rows) {
        for r1 in kinds(g2, 1, cols) {
            let what = format!("{r0:?} x {r1:?}");
            let src = DArray::<i64, Ix2>::from_fn(g2, [r0.clone(), r1.clone()], |(i, j)| v2(i, j))?;
            // Into a 1-D array on the 1-D grid, and into one replicated over grid dimension 1
            // of the 2-D grid (every copy receives).
            for (grid, dr) in [(g1, Range::cyclic(rows * cols, g1, 0)?), (g2, Range::block(rows * cols, g2, 0)?)] {
                let subs = DArray::<(usize, usize), Ix1>::from_fn(grid, [dr.clone()], at)?;
                let mut dst = DArray::<i64, Ix1>::from_elem(grid, [dr.clone()], -1)?;
                gather(&mut dst, &src, &subs)?;
                for (k, &x) in dst.overall() {
                    let (i, j) = at(k);
                    assert_eq!(x, v2(i, j), "{what} -> {dr:?}");
                }
                // And back: scatter the 1-D array into a fresh 2-D one.
                let mut back = DArray::<i64, Ix2>::from_elem(g2, [r0.clone(), r1.clone()], -1)?;
                scatter(&mut back, &dst, &subs)?;
                for ((i, j), &x) in back.overall() {
                    assert_eq!(x, v2(i, j), "scatter back {what} from {dr:?}");
                }
            }
            // A 2-D destination aligned with the source's layout, transposed through a 1-D
            // cyclic source on the 1-D grid.
            let line = DArray::<i64, Ix1>::from_fn(g1, [Range::cyclic(rows * cols, g1, 0)?], v1)?;
            let subs = DArray::<usize, Ix2>::from_fn(g2, [r0.clone(), r1.clone()], |(i, j)| j * rows + i)?;
            let mut dst = DArray::<i64, Ix2>::from_elem(g2, [r0.clone(), r1.clone()], -1)?;
            gather(&mut dst, &line, &subs)?;
            for ((i, j), &x) in dst.overall() {
                assert_eq!(x, v1(j * rows + i), "1-D into {what}");
            }
        }
    }
    Ok(())
}

/// Sections as the indexed array, a restricted destination grid, IxDyn subscripts.
fn sections_and_restricted(g1: &Grid, g2: &Grid) -> Result<()> {
    let n = 20;
    let src = DArray::<i64, Ix1>::from_fn(g1, [Range::block_cyclic(n, 2, g1, 0)?], v1)?;
    // The section 3, 6, 9, ...: section index k is global index 3 + 3k.
    let sec = src.section(&[Triplet::new(3, n, 3)])?;
    let count = sec.shape()[0];
    let subs = DArray::<usize, Ix1>::from_fn(g1, [Range::cyclic(10, g1, 0)?], |i| (count - 1) - i % count)?;
    let mut dst = DArray::<i64, Ix1>::from_elem(g1, [Range::cyclic(10, g1, 0)?], 0)?;
    gather(&mut dst, &sec, &subs)?;
    for (i, &x) in dst.overall() {
        assert_eq!(x, v1(3 + 3 * ((count - 1) - i % count)), "gather from a section");
    }
    // Scatter into a section: element i goes to section index i of 1:20:4.
    let mut target = DArray::<i64, Ix1>::from_elem(g1, [Range::block(n, g1, 0)?], -1)?;
    let five = DArray::<i64, Ix1>::from_fn(g1, [Range::cyclic(5, g1, 0)?], |i| 100 + i as i64)?;
    let subs5 = DArray::<usize, Ix1>::from_fn(g1, [Range::cyclic(5, g1, 0)?], |i| i)?;
    let mut tsec = target.section_mut(&[Triplet::new(1, n, 4)])?;
    scatter(&mut tsec, &five, &subs5)?;
    for (g, &x) in target.overall() {
        let want = if g % 4 == 1 { 100 + (g / 4) as i64 } else { -1 };
        assert_eq!(x, want, "scatter into a section");
    }
    // A destination on one row of the 2-D grid: the other ranks still take part (they own
    // source elements) and get nothing.
    let row = g2.restrict(0, g2.dims()[0] - 1)?;
    let wide = DArray::<i64, Ix2>::from_fn(g2, [Range::block(4, g2, 0)?, Range::cyclic(6, g2, 1)?], |(i, j)| v2(i, j))?;
    let dr = Range::block(24, &row, 1)?;
    let subs = DArray::<(usize, usize), Ix1>::from_fn(&row, [dr.clone()], |k| (k % 4, 5 - k / 4))?;
    let mut dst = DArray::<i64, Ix1>::from_elem(&row, [dr.clone()], -1)?;
    gather(&mut dst, &wide, &subs)?;
    assert_eq!(dst.is_member(), row.is_member());
    for (k, &x) in dst.overall() {
        assert_eq!(x, v2(k % 4, 5 - k / 4), "gather into a restricted grid");
    }
    // IxDyn: subscripts are IxDyn index patterns.
    let dyn_src =
        DArray::<i64, IxDyn>::from_fn(g2, vec![Range::cyclic(4, g2, 1)?, Range::collapsed(3)], |i| v2(i[0], i[1]))?;
    let subs = DArray::<IxDyn, Ix1>::from_fn(g1, [Range::block(12, g1, 0)?], |k| IxDyn(&[3 - k / 3, k % 3]))?;
    let mut dst = DArray::<i64, Ix1>::from_elem(g1, [Range::block(12, g1, 0)?], -1)?;
    gather(&mut dst, &dyn_src, &subs)?;
    for (k, &x) in dst.overall() {
        assert_eq!(x, v2(3 - k / 3, k % 3), "IxDyn gather");
    }
    Ok(())
}

/// Serde elements: strings gathered and scattered, schedules reused.
fn objects(g1: &Grid, g2: &Grid) -> Result<()> {
    let name = |i: usize, j: usize| format!("s{i}-{j}");
    let src =
        DArray::<String, Ix2>::from_fn(g2, [Range::cyclic(5, g2, 0)?, Range::block(4, g2, 1)?], |(i, j)| name(i, j))?;
    let subs = DArray::<(usize, usize), Ix1>::from_fn(g1, [Range::block(30, g1, 0)?], |k| (k % 5, (k * 3) % 4))?;
    let mut dst = DArray::<String, Ix1>::from_elem(g1, [Range::block(30, g1, 0)?], String::new())?;
    let mut schedule = GatherSchedule::build(&dst, &src, &subs)?;
    for _ in 0..2 {
        schedule.execute_obj(&mut dst, &src)?;
        for (k, x) in dst.overall() {
            assert_eq!(x, &name(k % 5, (k * 3) % 4));
        }
    }
    gather_obj(&mut dst, &src, &subs)?;
    // Scatter back into an empty 2-D array: the last k naming each element wins.
    let mut back =
        DArray::<String, Ix2>::from_elem(g2, [Range::block(5, g2, 0)?, Range::cyclic(4, g2, 1)?], "?".into())?;
    scatter_obj(&mut back, &dst, &subs)?;
    for ((i, j), x) in back.overall() {
        let last = (0..30).filter(|&k| (k % 5, (k * 3) % 4) == (i, j)).max();
        let want = last.map_or("?".to_string(), |k| name(k % 5, (k * 3) % 4));
        assert_eq!(x, &want);
    }
    Ok(())
}

/// Errors reach every rank before anything moves, and the ranks can go on afterwards.
fn errors(g1: &Grid) -> Result<()> {
    let np = g1.size();
    let src = DArray::<i64, Ix1>::from_fn(g1, [Range::block(10, g1, 0)?], v1)?;
    let dr = Range::cyclic(12, g1, 0)?;
    let mut dst = DArray::<i64, Ix1>::from_elem(g1, [dr.clone()], 0)?;
    // One bad subscript, held by the rank that owns destination index 11 only.
    let bad = DArray::<usize, Ix1>::from_fn(g1, [dr.clone()], |i| if i == 11 { 10 } else { i % 10 })?;
    let err = gather(&mut dst, &src, &bad).unwrap_err().to_string();
    let holder = 11 % np;
    assert!(err.contains("gather") && err.contains("[10]") && err.contains("outside the shape [10]"), "{err}");
    assert!(err.contains(&format!("rank {holder}")), "{err}");
    let err = scatter(&mut DArray::<i64, Ix1>::from_elem(g1, [Range::block(10, g1, 0)?], 0)?, &dst, &bad)
        .unwrap_err()
        .to_string();
    assert!(err.contains("scatter") && err.contains("outside"), "{err}");
    // Misaligned destination and subscripts.
    let other = DArray::<usize, Ix1>::from_fn(g1, [Range::block(12, g1, 0)?], |i| i % 10)?;
    let err = GatherSchedule::build(&dst, &src, &other).unwrap_err().to_string();
    assert!(err.contains("not aligned"), "{err}");
    let err = ScatterSchedule::build(&src, &dst, &other).unwrap_err().to_string();
    assert!(err.contains("not aligned"), "{err}");
    // A grid over the same processes in another order.
    let reversed = g1.comm().split(Some(0), -(g1.comm().rank() as i32))?.expect("every rank has a color");
    let rgrid = Grid::new(&reversed, &[np])?;
    let rsrc = DArray::<i64, Ix1>::from_fn(&rgrid, [Range::block(10, &rgrid, 0)?], v1)?;
    let good = DArray::<usize, Ix1>::from_fn(g1, [dr.clone()], |i| i % 10)?;
    if np > 1 {
        let err = gather(&mut dst, &rsrc, &good).unwrap_err().to_string();
        assert!(err.contains("different ranks"), "{err}");
    }
    // A schedule refuses arrays it was not built for.
    let mut schedule = GatherSchedule::build(&dst, &src, &good)?;
    let mut wrong = DArray::<i64, Ix1>::from_elem(g1, [Range::block(12, g1, 0)?], 0)?;
    assert!(schedule.execute(&mut wrong, &src).unwrap_err().to_string().contains("not the array"));
    // After all that, a good gather still works.
    schedule.execute(&mut dst, &src)?;
    for (i, &x) in dst.overall() {
        assert_eq!(x, v1(i % 10));
    }
    Ok(())
}

#[test]
fn gather_and_scatter() {
    for np in 1..=5 {
        fastmp::run(np, |world| {
            let g1 = Grid::new(&world, &[np])?;
            let g2 = Grid::auto(&world, 2)?;
            one_dimensional(&g1)?;
            two_dimensional(&g1, &g2)?;
            sections_and_restricted(&g1, &g2)?;
            objects(&g1, &g2)?;
            errors(&g1)?;
            Ok(())
        })
        .unwrap_or_else(|e| panic!("np {np}: {e}"));
    }
}

#[test]
fn gather_and_scatter_on_tcp() {
    // Thread ranks joined by TCP connections: every message goes through the byte path.
    for np in [2, 3] {
        fastmp::Config::new()
            .device(fastmp::DeviceKind::Tcp)
            .np(np)
            .run(|world| {
                let g1 = Grid::new(&world, &[np])?;
                let g2 = Grid::auto(&world, 2)?;
                two_dimensional(&g1, &g2)?;
                objects(&g1, &g2)?;
                errors(&g1)
            })
            .unwrap_or_else(|e| panic!("tcp np {np}: {e}"));
    }
}

#[test]
fn replicated_source_reads_the_local_copy() {
    // A source replicated over the whole 1-D grid: every gather is local, so the schedule has
    // no messages; a replicated destination gets every element on every rank.
    fastmp::run(3, |world| {
        let grid = Grid::new(&world, &[3])?;
        let src = DArray::<i64, Ix1>::from_fn(&grid, [Range::collapsed(8)], v1)?;
        let subs = DArray::<usize, Ix1>::from_fn(&grid, [Range::block(8, &grid, 0)?], |i| 7 - i)?;
        let mut dst = DArray::<i64, Ix1>::from_elem(&grid, [Range::block(8, &grid, 0)?], 0)?;
        let schedule = GatherSchedule::build(&dst, &src, &subs)?;
        let plan = format!("{schedule:?}");
        assert!(plan.contains("sends: []") && plan.contains("recvs: []"), "{plan}");
        gather(&mut dst, &src, &subs)?;
        assert!(dst.overall().all(|(i, &x)| x == v1(7 - i)));
        let mut everywhere = DArray::<i64, Ix1>::from_elem(&grid, [Range::collapsed(8)], 0)?;
        scatter(&mut everywhere, &dst, &subs)?;
        assert_eq!(everywhere.local().to_vec(), (0..8).map(v1).collect::<Vec<_>>());
        Ok(())
    })
    .unwrap();
}
