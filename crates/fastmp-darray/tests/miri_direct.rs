//! Tiny jobs through the direct-copy path between thread ranks, small enough for Miri
//! (`scripts/miri.sh` runs them under Stacked and Tree Borrows): a strided halo update on a 2×2
//! grid (columns are strided, so they are copied directly) and a remap block → cyclic.

use fastmp_darray::{DArray, Grid, Range, remap};

#[test]
fn strided_halo_and_remap_copy_directly() {
    fastmp::run(4, |world| {
        let grid = Grid::new(&world, &[2, 2])?;
        let rows = Range::ghost_block(4, &grid, 0, 1, 1)?;
        let cols = Range::ghost_block(4, &grid, 1, 1, 1)?;
        let mut a = DArray::from_fn(&grid, [rows, cols], |(i, j)| (10 * i + j) as i32)?;
        a.write_halo()?;
        let (i0, j0) = a.local_to_global((0, 0)).expect("every rank holds a 2×2 block");
        let g = a.local_with_ghosts();
        // The ghost column beside the block holds the neighbour's edge column.
        let side = if j0 == 0 { 3 } else { 0 };
        let neighbour_col = if j0 == 0 { 2 } else { 1 };
        assert_eq!(g[[1, side]], (10 * i0 + neighbour_col) as i32);
        let cyclic = [Range::cyclic(4, &grid, 0)?, Range::cyclic(4, &grid, 1)?];
        let mut b = DArray::from_elem(&grid, cyclic, 0)?;
        remap(&mut b, &a)?;
        assert!(b.overall().all(|((i, j), &x)| x == (10 * i + j) as i32));
        Ok(())
    })
    .unwrap();
}
