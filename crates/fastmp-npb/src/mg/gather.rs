//! The step from the distributed levels to the replicated ones: each rank restricts its own
//! block of the first replicated level, and one allgather gives every rank all the blocks.

use super::field::Field;
use super::layout::{AXES, ProcGrid};

/// This rank's block of the first replicated level, and the allgather's reusable buffers.
pub struct Gather {
    /// Points per axis of each rank's block.
    block: [usize; AXES],
    /// Where this rank restricts to (its ghosts are unused).
    mine: Field,
    packed: Vec<f64>,
    all: Vec<f64>,
}

impl Gather {
    /// Buffers for blocks of `block` points per axis on `np` ranks.
    pub fn new(block: [usize; AXES], np: usize) -> Self {
        let len = block.iter().product();
        Gather { block, mine: Field::new(block), packed: vec![0.0; len], all: vec![0.0; len * np] }
    }

    /// The field this rank writes its block into before [`Gather::share_blocks`].
    pub fn block_mut(&mut self) -> &mut Field {
        &mut self.mine
    }

    /// Fills the interior of `whole` with every rank's block. Ghosts are left for the caller
    /// to refresh. Collective.
    pub fn share_blocks(&mut self, grid: &ProcGrid, whole: &mut Field) -> fastmp::Result<()> {
        copy_block(&mut self.mine, [1; AXES], self.block, &mut self.packed, Direction::Out);
        grid.comm().allgather(&self.packed, &mut self.all)?;
        for (rank, data) in self.all.chunks_exact_mut(self.packed.len()).enumerate() {
            copy_block(whole, origin(self.block, grid.coords_of(rank)), self.block, data, Direction::In);
        }
        Ok(())
    }
}

/// The array index of the first interior point of the block at process `coords`.
fn origin(block: [usize; AXES], coords: [usize; AXES]) -> [usize; AXES] {
    [0, 1, 2].map(|a| 1 + coords[a] * block[a])
}

enum Direction {
    /// From the field into the buffer.
    Out,
    /// From the buffer into the field.
    In,
}

/// Copies the box of `extent` points at array index `origin` between `field` and `buf`
/// (x fastest in both).
fn copy_block(field: &mut Field, origin: [usize; AXES], extent: [usize; AXES], buf: &mut [f64], dir: Direction) {
    let [ex, ey, ez] = extent;
    let rows = (0..ez).flat_map(|z| (0..ey).map(move |y| (origin[1] + y, origin[2] + z)));
    for (chunk, (y, z)) in buf.chunks_exact_mut(ex).zip(rows) {
        let row = &mut field.row_mut(y, z)[origin[0]..origin[0] + ex];
        match dir {
            Direction::Out => chunk.copy_from_slice(row),
            Direction::In => row.copy_from_slice(chunk),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_ends_with_every_block() {
        let wholes = fastmp::run(4, |world| {
            let grid = ProcGrid::new(&world)?;
            let mut gather = Gather::new([4, 2, 2], world.size());
            gather.block_mut().fill((world.rank() + 1) as f64);
            let mut whole = Field::new([4, 4, 4]);
            gather.share_blocks(&grid, &mut whole)?;
            Ok(whole)
        })
        .unwrap();
        assert!(wholes.iter().all(|w| w == &wholes[0]));
        let interior: Vec<f64> = wholes[0].interior_rows().flat_map(|(_, _, row)| row.to_vec()).collect();
        assert!(interior.iter().all(|&v| v > 0.0));
        assert_eq!(interior.iter().sum::<f64>(), 16.0 * (1.0 + 2.0 + 3.0 + 4.0));
    }
}
