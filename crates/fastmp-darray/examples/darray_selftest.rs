//! `darray_selftest`: a representative run of fastmp-darray's collectives — remap block → cyclic
//! (a reused schedule, and strided sections), `write_halo` with wrap-around, `shift` and
//! `cshift`, and a remap of `String` elements — each checked against a serial computation. It
//! prints `darray_selftest: ok (np N, device D)` and exits 0 when every rank's elements are
//! right, and exits non-zero otherwise.
//!
//! Under a launcher (`fastmprun -np 3 --device tcp darray_selftest`) each process is one rank;
//! on its own it runs `FASTMP_NP` thread ranks (one per CPU if unset). `fastmprun`'s tests run
//! it over TCP.

use fastmp::op::Sum;
use fastmp::{Comm, Error, Result};
use fastmp_darray::{DArray, Grid, Halo, Range, RemapSchedule, Triplet, cshift, remap, remap_obj, shift};

/// The serial array: element `(i, j)`.
fn value(i: usize, j: usize) -> f64 {
    (100 * i + j) as f64 + 0.5
}

/// What destination elements hold before an operation writes them.
const UNSET: f64 = -1.0;

/// Rows and columns: no grid of 2 to 8 ranks divides both.
const M: usize = 13;
const N: usize = 10;

fn main() {
    fastmp::main(|world| {
        let failures = selftest(&world)?;
        for failure in &failures {
            eprintln!("darray_selftest: rank {}: {failure}", world.rank());
        }
        let mut total = [0u64];
        world.allreduce(&[failures.len() as u64], &mut total, Sum)?;
        if total[0] > 0 {
            return Err(Error::other(format!("{} checks failed", total[0])));
        }
        if world.rank() == 0 {
            println!("darray_selftest: ok (np {}, device {})", world.size(), world.device_name());
        }
        Ok(())
    });
}

/// Runs every check; returns what went wrong on this rank.
fn selftest(world: &Comm) -> Result<Vec<String>> {
    let mut failures = Vec::new();
    let mut expect = |what: &str, wrong: usize| {
        if wrong > 0 {
            failures.push(format!("{what}: {wrong} elements differ from the serial computation"));
        }
    };
    let grid = Grid::auto(world, 2)?;
    let block = DArray::from_fn(&grid, [Range::block(M, &grid, 0)?, Range::block(N, &grid, 1)?], |(i, j)| value(i, j))?;

    // Remap block → cyclic (transposing the distribution), through a schedule executed 3 times.
    let mut cyclic = DArray::from_elem(&grid, [Range::cyclic(M, &grid, 1)?, Range::cyclic(N, &grid, 0)?], UNSET)?;
    let mut schedule = RemapSchedule::build(&cyclic, &block)?;
    for _ in 0..3 {
        schedule.execute(&mut cyclic, &block)?;
    }
    expect("remap block -> cyclic", cyclic.overall().filter(|&((i, j), &x)| x != value(i, j)).count());

    // Strided sections: rows 1, 3, .., 11 of every third column into a block-cyclic array.
    let mut bc = DArray::from_elem(&grid, [Range::block_cyclic(M, 2, &grid, 0)?, Range::collapsed(N)], UNSET)?;
    let src = block.section(&[Triplet::new(1, M, 2), Triplet::new(0, N, 3)])?;
    remap(&mut bc.section_mut(&[Triplet::new(0, 6, 1), Triplet::new(6, 10, 1)])?, &src)?;
    let want = |i: usize, j: usize| if i < 6 && j >= 6 { value(1 + 2 * i, 3 * (j - 6)) } else { UNSET };
    expect("remap of sections", bc.overall().filter(|&((i, j), &x)| x != want(i, j)).count());

    // write_halo with wrap-around in both dimensions: every ghost cell mirrors an element.
    let (ghosts0, ghosts1) = ((1, 2), (2, 1));
    let rows = Range::ghost_block(M, &grid, 0, ghosts0.0, ghosts0.1)?;
    let cols = Range::ghost_block(N, &grid, 1, ghosts1.0, ghosts1.1)?;
    let mut a = DArray::from_fn(&grid, [rows.clone(), cols.clone()], |(i, j)| value(i, j))?;
    a.write_halo_with(&Halo::all().wrap(&[true, true]))?;
    if let Some(c) = a.coords().filter(|c| rows.local_len(c[0]) > 0 && cols.local_len(c[1]) > 0) {
        let (first0, first1) = (rows.global(c[0], 0), cols.global(c[1], 0));
        let wrapped = |first: usize, pos: usize, lo: usize, n: usize| (first + n + pos - lo) % n;
        let wrong = a
            .local_with_ghosts()
            .indexed_iter()
            .filter(|&((s0, s1), &x)| x != value(wrapped(first0, s0, ghosts0.0, M), wrapped(first1, s1, ghosts1.0, N)))
            .count();
        expect("write_halo with wrap-around", wrong);
    }

    // shift (edge-off) along the columns, cshift (circular) along the rows.
    let mut shifted = DArray::from_elem(&grid, [Range::cyclic(M, &grid, 0)?, Range::block(N, &grid, 1)?], UNSET)?;
    shift(&mut shifted, &block, 2, 1)?;
    let want = |i: usize, j: usize| if j + 2 < N { value(i, j + 2) } else { UNSET };
    expect("shift", shifted.overall().filter(|&((i, j), &x)| x != want(i, j)).count());
    cshift(&mut shifted, &block, -3, 0)?;
    expect("cshift", shifted.overall().filter(|&((i, j), &x)| x != value((i + M - 3) % M, j)).count());

    // Serde elements: strings of varying length, block → replicated everywhere.
    let text = |i: usize, j: usize| "x".repeat((i + j) % 4) + &format!("{i},{j}");
    let strings =
        DArray::from_fn(&grid, [Range::block(M, &grid, 1)?, Range::cyclic(N, &grid, 0)?], |(i, j)| text(i, j))?;
    let mut everywhere = DArray::from_elem(&grid, [Range::collapsed(M), Range::collapsed(N)], String::new())?;
    remap_obj(&mut everywhere, &strings)?;
    expect("remap_obj of strings", everywhere.overall().filter(|&((i, j), x)| *x != text(i, j)).count());

    Ok(failures)
}
