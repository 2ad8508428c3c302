//! Ranges: how one array dimension's indices are spread over one grid dimension.
//!
//! This is the only module that knows the formats. Everything else asks a range three things —
//! who owns a global index and where ([`Range::owner`]), how many indices a coordinate holds
//! ([`Range::local_len`]), and which global index a local one is ([`Range::global`]) — plus its
//! ghost widths, which shift local indices inside the stored block.

use fastmp::Result;

use crate::grid::Grid;
use crate::invalid;

/// How a range spreads indices over the processes of its grid dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Contiguous blocks, balanced: the first `extent % procs` coordinates hold one more.
    Block,
    /// Index `g` at coordinate `g % procs` (round robin).
    Cyclic,
    /// Blocks of the given size dealt round robin (ScaLAPACK's layout).
    BlockCyclic(usize),
    /// Not distributed: every process holds the whole extent (HPJava's `*` dimension).
    Collapsed,
}

/// One array dimension: extent, format, target grid dimension, ghost widths.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Range {
    extent: usize,
    format: Format,
    /// The grid dimension it is spread over (`None` for collapsed).
    dim: Option<usize>,
    /// Processes along that dimension (1 for collapsed).
    procs: usize,
    /// Ghost cells stored below and above the local block (block ranges only).
    ghosts: (usize, usize),
}

impl Range {
    /// Block distribution of `extent` indices over grid dimension `dim`.
    pub fn block(extent: usize, grid: &Grid, dim: usize) -> Result<Range> {
        Range::on(extent, Format::Block, grid, dim, (0, 0), "Range::block")
    }

    /// Cyclic distribution of `extent` indices over grid dimension `dim`.
    pub fn cyclic(extent: usize, grid: &Grid, dim: usize) -> Result<Range> {
        Range::on(extent, Format::Cyclic, grid, dim, (0, 0), "Range::cyclic")
    }

    /// Block-cyclic distribution with blocks of `block` indices over grid dimension `dim`.
    pub fn block_cyclic(extent: usize, block: usize, grid: &Grid, dim: usize) -> Result<Range> {
        if block == 0 {
            return Err(invalid("Range::block_cyclic", "the block size must be at least 1"));
        }
        Range::on(extent, Format::BlockCyclic(block), grid, dim, (0, 0), "Range::block_cyclic")
    }

    /// Block distribution with `lo` ghost cells stored below each local block and `hi` above
    /// (HPJava's `ExtBlockRange`), filled by [`crate::DArray::write_halo`].
    pub fn ghost_block(extent: usize, grid: &Grid, dim: usize, lo: usize, hi: usize) -> Result<Range> {
        Range::on(extent, Format::Block, grid, dim, (lo, hi), "Range::ghost_block")
    }

    /// A sequential dimension: every process holds all `extent` indices.
    pub fn collapsed(extent: usize) -> Range {
        Range { extent, format: Format::Collapsed, dim: None, procs: 1, ghosts: (0, 0) }
    }

    fn on(extent: usize, format: Format, grid: &Grid, dim: usize, ghosts: (usize, usize), call: &str) -> Result<Range> {
        if dim >= grid.ndims() {
            return Err(invalid(call, format!("grid dimension {dim} does not exist in a {}-D grid", grid.ndims())));
        }
        if let Some(c) = grid.fixed()[dim] {
            return Err(invalid(call, format!("grid dimension {dim} is restricted to coordinate {c}")));
        }
        Ok(Range { extent, format, dim: Some(dim), procs: grid.dims()[dim], ghosts })
    }

    /// Number of global indices.
    pub fn extent(&self) -> usize {
        self.extent
    }

    /// The format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The grid dimension it is spread over (`None` if collapsed).
    pub fn grid_dim(&self) -> Option<usize> {
        self.dim
    }

    /// Processes along its grid dimension (1 if collapsed).
    pub fn procs(&self) -> usize {
        self.procs
    }

    /// Ghost widths `(below, above)`.
    pub fn ghosts(&self) -> (usize, usize) {
        self.ghosts
    }

    /// The coordinate owning global index `g` and `g`'s index in that coordinate's local block
    /// (not counting ghosts). `g` must be below the extent.
    pub fn owner(&self, g: usize) -> (usize, usize) {
        debug_assert!(g < self.extent);
        let p = self.procs;
        match self.format {
            Format::Collapsed => (0, g),
            Format::Block => {
                let (base, rem) = (self.extent / p, self.extent % p);
                let big = rem * (base + 1);
                if g < big { (g / (base + 1), g % (base + 1)) } else { (rem + (g - big) / base, (g - big) % base) }
            }
            Format::Cyclic => (g % p, g / p),
            Format::BlockCyclic(b) => {
                let blk = g / b;
                (blk % p, (blk / p) * b + g % b)
            }
        }
    }

    /// Number of indices coordinate `coord` holds (not counting ghosts).
    pub fn local_len(&self, coord: usize) -> usize {
        let (n, p) = (self.extent, self.procs);
        if coord >= p {
            return 0;
        }
        match self.format {
            Format::Collapsed => n,
            Format::Block => n / p + usize::from(coord < n % p),
            Format::Cyclic => (n + p - 1 - coord) / p,
            Format::BlockCyclic(b) => {
                let blocks = n.div_ceil(b);
                let mine = (blocks + p - 1 - coord) / p;
                let short = if blocks > 0 && (blocks - 1) % p == coord { blocks * b - n } else { 0 };
                mine * b - short
            }
        }
    }

    /// The global index of local index `local` at coordinate `coord`.
    pub fn global(&self, coord: usize, local: usize) -> usize {
        let (n, p) = (self.extent, self.procs);
        match self.format {
            Format::Collapsed => local,
            Format::Block => coord * (n / p) + coord.min(n % p) + local,
            Format::Cyclic => local * p + coord,
            Format::BlockCyclic(b) => ((local / b) * p + coord) * b + local % b,
        }
    }

    /// Length of the stored block at `coord`: ghosts included, none for an empty block.
    pub fn stored_len(&self, coord: usize) -> usize {
        match self.local_len(coord) {
            0 => 0,
            n => self.ghosts.0 + n + self.ghosts.1,
        }
    }
}

/// The ranges of an array, one per dimension: an array `[Range; N]` (which fixes the array's
/// dimensionality at compile time, `ndarray::Dim<[usize; N]>`) or a `Vec<Range>` (`IxDyn`).
pub trait Ranges {
    /// The `ndarray` dimension type of arrays with these ranges.
    type Dim: ndarray::Dimension;
    /// The ranges as a vector.
    fn into_vec(self) -> Vec<Range>;
}

macro_rules! fixed_ranges {
    ($($n:literal),*) => {$(
        impl Ranges for [Range; $n] {
            type Dim = ndarray::Dim<[usize; $n]>;
            fn into_vec(self) -> Vec<Range> {
                self.into()
            }
        }
    )*};
}

fixed_ranges!(1, 2, 3, 4, 5, 6);

impl Ranges for Vec<Range> {
    type Dim = ndarray::IxDyn;
    fn into_vec(self) -> Vec<Range> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(n: usize, p: usize) -> Vec<Range> {
        [Format::Block, Format::Cyclic, Format::BlockCyclic(1), Format::BlockCyclic(3)]
            .into_iter()
            .map(|format| Range { extent: n, format, dim: Some(0), procs: p, ghosts: (0, 0) })
            .collect()
    }

    #[test]
    fn owner_global_and_lengths_agree() {
        for n in 0..40 {
            for p in 1..9 {
                for r in ranges(n, p) {
                    let mut counts = vec![0; p];
                    for g in 0..n {
                        let (c, l) = r.owner(g);
                        assert!(c < p && l < r.local_len(c), "{r:?} g={g}");
                        assert_eq!(r.global(c, l), g, "{r:?}");
                        counts[c] += 1;
                    }
                    assert_eq!(counts, (0..p).map(|c| r.local_len(c)).collect::<Vec<_>>(), "{r:?}");
                }
            }
        }
    }
}
