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
    if world.rank() != 0 {
        world.send(&[value], 0, TAG_GATHER)?;
        return Ok(Vec::new());
    }
    let mut all = vec![value];
    for r in 1..world.size() {
        let mut v = [0f64];
        world.recv(&mut v, r, TAG_GATHER)?;
        all.push(v[0]);
    }
    Ok(all)
}
