//! MG's right-hand side v: zero but for +1 at the ten points where a field of NPB's random
//! numbers is largest and −1 at the ten where it is smallest.
//!
//! The field takes the numbers of NPB's sequence (seed 314159265, multiplier 5^13) in
//! global x-fastest order, starting with the second: the point at global index g gets the
//! (g+1)-th number after the seed. Every rank jumps straight to its own rows, finds its ten
//! extremes either way, and one allgather of those candidates lets every rank pick the same
//! global twenty, whatever the number of ranks.

use super::field::Field;
use super::layout::{Layout, ProcGrid};
use crate::random::{A, pow, randlc, vranlc};

/// NPB's seed for MG's random field.
const SEED: f64 = 314_159_265.0;

/// How many points get each charge.
pub const CHARGES: usize = 10;

/// A candidate point: its random value and global index (as `f64`, exact below 2^53); a
/// placeholder where a block has fewer points than candidates has index −1.
type Candidate = [f64; 2];

const NONE: Candidate = [0.0, -1.0];

/// Sets `v`'s interior to the charges that fall in this rank's block (ghosts are left for the
/// caller to refresh). Collective.
pub fn place(grid: &ProcGrid, layout: &Layout, v: &mut Field) -> fastmp::Result<()> {
    fill_random(layout, v);
    let mut mine = [NONE; 2 * CHARGES];
    let (largest, smallest) = mine.split_at_mut(CHARGES);
    extremes(layout, v, largest, smallest);
    let mut all = vec![NONE; 2 * CHARGES * grid.comm().size()];
    grid.comm().allgather(mine.as_flattened(), all.as_flattened_mut())?;
    let (positive, negative) = select(&all);
    v.fill(0.0);
    for (charge, points) in [(-1.0, negative), (1.0, positive)] {
        for g in points {
            if let Some([x, y, z]) = local_index(layout, g) {
                v.set(x, y, z, charge);
            }
        }
    }
    Ok(())
}

/// Writes NPB's random field on this rank's interior points.
fn fill_random(layout: &Layout, v: &mut Field) {
    let [nx, ny, nz] = layout.extent;
    let [ox, oy, oz] = layout.offset;
    let n = layout.edge as u64;
    for z in 1..=nz {
        for y in 1..=ny {
            let first = ox as u64 + n * ((oy + y - 1) as u64 + n * (oz + z - 1) as u64);
            let mut seed = SEED;
            randlc(&mut seed, pow(A, first));
            vranlc(&mut seed, A, &mut v.row_mut(y, z)[1..=nx]);
        }
    }
}

/// This block's `CHARGES` largest and smallest values with their global indices.
fn extremes(layout: &Layout, v: &Field, largest: &mut [Candidate], smallest: &mut [Candidate]) {
    let [ox, oy, oz] = layout.offset;
    let n = layout.edge;
    // Kept sorted, the entry to beat first: ascending for the largest, descending for the
    // smallest. The random numbers lie in (0, 1).
    largest.fill(NONE);
    smallest.fill([1.0, -1.0]);
    for (y, z, row) in v.interior_rows() {
        let row_start = ox + n * ((oy + y - 1) + n * (oz + z - 1));
        for (x, &value) in row.iter().enumerate() {
            if value > largest[0][0] {
                keep(largest, [value, (row_start + x) as f64], |a, b| a > b);
            }
            if value < smallest[0][0] {
                keep(smallest, [value, (row_start + x) as f64], |a, b| a < b);
            }
        }
    }
}

/// Replaces the first (weakest) entry of `kept` with `new` and moves it up to its place.
fn keep(kept: &mut [Candidate], new: Candidate, beats: impl Fn(f64, f64) -> bool) {
    kept[0] = new;
    for i in 1..kept.len() {
        if !beats(kept[i - 1][0], kept[i][0]) {
            break;
        }
        kept.swap(i - 1, i);
    }
}

/// The global indices of the `CHARGES` largest and the `CHARGES` smallest of all ranks'
/// candidates (the same on every rank).
fn select(all: &[Candidate]) -> (Vec<usize>, Vec<usize>) {
    let mut real: Vec<Candidate> = all.iter().copied().filter(|c| c[1] >= 0.0).collect();
    real.sort_by(|a, b| a[0].total_cmp(&b[0]).then(a[1].total_cmp(&b[1])));
    // A block of fewer than twice `CHARGES` points offers some points as both kinds.
    real.dedup();
    let index = |c: &Candidate| c[1] as usize;
    let smallest = real.iter().take(CHARGES).map(index).collect();
    let largest = real.iter().rev().take(CHARGES).map(index).collect();
    (largest, smallest)
}

/// The array index of global point `g` if it is this rank's.
fn local_index(layout: &Layout, g: usize) -> Option<[usize; 3]> {
    let n = layout.edge;
    let global = [g % n, g / n % n, g / (n * n)];
    let mut local = [0; 3];
    for axis in 0..3 {
        let i = global[axis].checked_sub(layout.offset[axis])?;
        if i >= layout.extent[axis] {
            return None;
        }
        local[axis] = i + 1;
    }
    Some(local)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The charges of a 16³ grid, gathered into one global list per rank count.
    fn charges_on(np: usize) -> Vec<(usize, f64)> {
        let per_rank = fastmp::run(np, |world| {
            let grid = ProcGrid::new(&world)?;
            let layout = Layout::distributed(16, &grid);
            let mut v = Field::new(layout.extent);
            place(&grid, &layout, &mut v)?;
            let mut found = Vec::new();
            for (y, z, row) in v.interior_rows() {
                for (x, &value) in row.iter().enumerate() {
                    if value != 0.0 {
                        let [ox, oy, oz] = layout.offset;
                        found.push((ox + x + 16 * ((oy + y - 1) + 16 * (oz + z - 1)), value));
                    }
                }
            }
            Ok(found)
        })
        .unwrap();
        let mut all: Vec<(usize, f64)> = per_rank.into_iter().flatten().collect();
        all.sort_by_key(|&(g, _)| g);
        all
    }

    #[test]
    fn the_charges_are_the_extremes_of_the_sequence_for_any_rank_count() {
        // Serially: the (g+1)-th number after the seed at global index g.
        let mut numbers = vec![0.0; 16 * 16 * 16];
        let mut seed = SEED;
        vranlc(&mut seed, A, &mut numbers);
        let mut order: Vec<usize> = (0..numbers.len()).collect();
        order.sort_by(|&a, &b| numbers[a].total_cmp(&numbers[b]));
        let mut expected: Vec<(usize, f64)> = order[..CHARGES].iter().map(|&g| (g, -1.0)).collect();
        expected.extend(order[order.len() - CHARGES..].iter().map(|&g| (g, 1.0)));
        expected.sort_by_key(|&(g, _)| g);
        for np in [1, 2, 4, 8] {
            assert_eq!(charges_on(np), expected, "{np} ranks");
        }
    }

    #[test]
    fn keep_holds_the_best_sorted() {
        let mut kept = [[0.0, -1.0]; 3];
        for (i, v) in [0.5, 0.1, 0.9, 0.7, 0.3].into_iter().enumerate() {
            if v > kept[0][0] {
                keep(&mut kept, [v, i as f64], |a, b| a > b);
            }
        }
        assert_eq!(kept, [[0.5, 0.0], [0.7, 3.0], [0.9, 2.0]]);
    }
}
