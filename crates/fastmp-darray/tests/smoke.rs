use fastmp_darray::*;
use ndarray::Ix2;

fn f(i: usize, j: usize) -> f64 {
    (1000 * i + j) as f64
}

#[test]
fn remap_halo_shift_smoke() {
    for np in 1..=6 {
        fastmp::run(np, |world| {
            let grid = Grid::auto(&world, 2)?;
            let (m, n) = (11, 7);
            let kinds = |g: &Grid, d: usize, e: usize| -> Vec<Range> {
                vec![
                    Range::block(e, g, d).unwrap(),
                    Range::cyclic(e, g, d).unwrap(),
                    Range::block_cyclic(e, 2, g, d).unwrap(),
                    Range::ghost_block(e, g, d, 1, 2).unwrap(),
                    Range::collapsed(e),
                ]
            };
            for r0 in kinds(&grid, 0, m) {
                for r1 in kinds(&grid, 1, n) {
                    let src = DArray::<f64, Ix2>::from_fn(&grid, [r0.clone(), r1.clone()], |(i, j)| f(i, j))?;
                    for d0 in kinds(&grid, 1, m) {
                        for d1 in kinds(&grid, 0, n) {
                            let mut dst = DArray::<f64, Ix2>::from_elem(&grid, [d0.clone(), d1.clone()], -1.0)?;
                            remap(&mut dst, &src)?;
                            for ((i, j), &x) in dst.overall() {
                                assert_eq!(x, f(i, j), "{r0:?} {r1:?} -> {d0:?} {d1:?}");
                            }
                            // section: every other row, reversed offsets
                            let mut dst2 = DArray::<f64, Ix2>::from_elem(&grid, [d0.clone(), d1.clone()], -1.0)?;
                            let sec = src.section(&[Triplet::new(1, 11, 2), Triplet::new(0, 7, 3)])?;
                            let mut dsec = dst2.section_mut(&[Triplet::new(0, 5, 1), Triplet::new(4, 7, 1)])?;
                            remap(&mut dsec, &sec)?;
                            for ((i, j), &x) in dst2.overall() {
                                let want = if i < 5 && j >= 4 { f(1 + 2 * i, 3 * (j - 4)) } else { -1.0 };
                                assert_eq!(x, want);
                            }
                            for circ in [false, true] {
                                let mut sh = DArray::<f64, Ix2>::from_elem(&grid, [d0.clone(), d1.clone()], -1.0)?;
                                if circ {
                                    cshift(&mut sh, &src, -3, 0)?;
                                } else {
                                    shift(&mut sh, &src, 2, 1)?;
                                }
                                for ((i, j), &x) in sh.overall() {
                                    let want = if circ {
                                        f((i + m - 3) % m, j)
                                    } else if j + 2 < n {
                                        f(i, j + 2)
                                    } else {
                                        -1.0
                                    };
                                    assert_eq!(x, want);
                                }
                            }
                        }
                    }
                }
            }
            // halo
            let r0 = Range::ghost_block(m, &grid, 0, 2, 1)?;
            let r1 = Range::ghost_block(n, &grid, 1, 1, 1)?;
            for wrap in [[false, false], [true, false], [true, true]] {
                let mut a = DArray::<f64, Ix2>::from_fn(&grid, [r0.clone(), r1.clone()], |(i, j)| f(i, j))?;
                a.write_halo_with(&Halo::all().wrap(&wrap))?;
                if let Some(c) = a.coords() {
                    let (c0, c1) = (c[0], c[1]);
                    let len0 = r0.local_len(c0);
                    let len1 = r1.local_len(c1);
                    if len0 == 0 || len1 == 0 {
                        continue;
                    }
                    let g0 = r0.global(c0, 0) as isize;
                    let g1 = r1.global(c1, 0) as isize;
                    let v = a.local_with_ghosts();
                    for s0 in 0..len0 + 3 {
                        for s1 in 0..len1 + 2 {
                            let gi = g0 + s0 as isize - 2;
                            let gj = g1 + s1 as isize - 1;
                            let gi = if wrap[0] { gi.rem_euclid(m as isize) } else { gi };
                            let gj = if wrap[1] { gj.rem_euclid(n as isize) } else { gj };
                            let want = if (0..m as isize).contains(&gi) && (0..n as isize).contains(&gj) {
                                f(gi as usize, gj as usize)
                            } else {
                                0.0
                            };
                            assert_eq!(v[[s0, s1]], want, "np {np} coords {c:?} pos {s0},{s1} wrap {wrap:?}");
                        }
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    }
}
