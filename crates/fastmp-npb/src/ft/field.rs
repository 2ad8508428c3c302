//! FT's field in space: its initial values from NPB's generator, and NPB's checksum of it.

use num_complex::Complex64;

use super::slabs::Slabs;
use crate::random::{self, A};

/// NPB's seed of the initial field.
const SEED: f64 = 314_159_265.0;

/// Fills this rank's space slab with the initial field: the generator's sequence from
/// [`SEED`], two numbers (real, imaginary) per point in NPB's x-fastest order, so the field is
/// the same on any number of ranks. A rank jumps straight to its first plane.
pub(crate) fn initial(slabs: &Slabs, space: &mut [Complex64]) {
    let mut seed = SEED;
    let skipped = 2 * slabs.nx * slabs.ny * slabs.first_plane();
    random::randlc(&mut seed, random::pow(A, skipped as u64));
    random::vranlc(&mut seed, A, fastmp::bytemuck::cast_slice_mut(space));
}

/// This rank's part of NPB's checksum of a space slab: the sum of the 1024 points
/// (j, 3j, 5j) mod (nx, ny, nz), j = 1..=1024, that lie in the slab, over the grid size.
pub(crate) fn checksum(slabs: &Slabs, space: &[Complex64]) -> Complex64 {
    let Slabs { nx, ny, nz, .. } = *slabs;
    let planes = slabs.first_plane()..slabs.first_plane() + slabs.planes();
    let sum: Complex64 = (1..=1024)
        .map(|j| (j % nx, (3 * j) % ny, (5 * j) % nz))
        .filter(|(_, _, z)| planes.contains(z))
        .map(|(x, y, z)| space[((z - planes.start) * ny + y) * nx + x])
        .sum();
    sum / slabs.total() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIMS: [usize; 3] = [8, 16, 16];

    #[test]
    fn slabs_of_any_rank_count_make_the_same_field_and_checksum() {
        let whole = Slabs::new(DIMS, 1, 0);
        let mut field = vec![Complex64::default(); whole.local_len()];
        initial(&whole, &mut field);
        let mut seed = SEED;
        let first = random::randlc(&mut seed, A);
        assert_eq!(field[0].re, first, "the field starts with the generator's first number");
        for np in [2, 4, 8, 16] {
            let mut sum = Complex64::default();
            for rank in 0..np {
                let slabs = Slabs::new(DIMS, np, rank);
                let mut slab = vec![Complex64::default(); slabs.local_len()];
                initial(&slabs, &mut slab);
                let start = rank * slabs.local_len();
                assert_eq!(slab, field[start..start + slab.len()], "np {np}, rank {rank}");
                sum += checksum(&slabs, &slab);
            }
            let serial = checksum(&whole, &field);
            assert!((sum - serial).norm() < 1e-13 * serial.norm(), "np {np}: {sum} vs {serial}");
        }
    }
}
