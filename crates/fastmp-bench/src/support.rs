//! Helpers shared by the benchmarks: aligned buffers, size sweeps, and a point-to-point barrier
//! and gather (so the point-to-point suite depends on nothing but point-to-point).

use fastmp::{Comm, Result};

const TAG_BARRIER: i32 = 900;
const TAG_GATHER: i32 = 901;
const ALIGN: usize = 64;

/// A byte buffer whose usable part starts on a 64-byte boundary (OSU's MESSAGE_ALIGNMENT),
/// touched before timing.
pub struct AlignedBuf {
    storage: Vec<u8>,
    offset: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn new(len: usize, fill: u8) -> Self {
        let storage = vec![fill; len + ALIGN];
        let offset = storage.as_ptr().align_offset(ALIGN);
        AlignedBuf { storage, offset, len }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.storage[self.offset..self.offset + self.len]
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.offset..self.offset + self.len]
    }
}

/// Message sizes: `min`, then powers of two up to `max` (0, 1, 2, 4, ... as OSU).
pub struct Sizes {
    pub min: usize,
    pub max: usize,
}

impl Sizes {
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        let first = self.min;
        std::iter::successors(Some(first), |&s| Some(if s == 0 { 1 } else { s * 2 }))
            .take_while(move |&s| s <= self.max)
    }
}

/// The middle value (the upper one of an even count); `values` must not be empty.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_unstable_by(f64::total_cmp);
    values[values.len() / 2]
}

/// All ranks check in with rank 0, which then releases them.
pub fn barrier(world: &Comm) -> Result<()> {
    let empty: [u8; 0] = [];
    if world.rank() == 0 {
        for r in 1..world.size() {
            world.recv(&mut [0u8; 0], r, TAG_BARRIER)?;
        }
        for r in 1..world.size() {
            world.send(&empty, r, TAG_BARRIER)?;
        }
    } else {
        world.send(&empty, 0, TAG_BARRIER)?;
        world.recv(&mut [0u8; 0], 0, TAG_BARRIER)?;
    }
    Ok(())
}

/// Every rank's value at rank 0 (others get an empty vector).
pub fn gather_f64(world: &Comm, value: f64) -> Result<Vec<f64>> {
    Ok(gather_f64s(world, &[value])?.into_iter().map(|values| values[0]).collect())
}

/// Every rank's `values` at rank 0, in rank order (others get an empty vector); all ranks pass
/// the same number of values.
pub fn gather_f64s(world: &Comm, values: &[f64]) -> Result<Vec<Vec<f64>>> {
    if world.rank() != 0 {
        world.send(values, 0, TAG_GATHER)?;
        return Ok(Vec::new());
    }
    let mut all = vec![values.to_vec()];
    for r in 1..world.size() {
        let mut theirs = vec![0f64; values.len()];
        world.recv(&mut theirs, r, TAG_GATHER)?;
        all.push(theirs);
    }
    Ok(all)
}

/// The average over ranks of each of `values` at rank 0 (`None` elsewhere), as OSU's
/// MPI_Reduce(MPI_SUM) / np.
pub fn mean_over_ranks(world: &Comm, values: &[f64]) -> Result<Option<Vec<f64>>> {
    let all = gather_f64s(world, values)?;
    Ok((world.rank() == 0)
        .then(|| (0..values.len()).map(|i| all.iter().map(|rank| rank[i]).sum::<f64>() / all.len() as f64).collect()))
}
