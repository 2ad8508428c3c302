//! Validated per-rank blocks of the `v` collectives (counts plus displacements, in elements),
//! converted to byte ranges once so the algorithms work on bytes.

use std::ops::Range;

use crate::comm::Comm;
use crate::error::{Error, Result};

/// Byte range of each rank's block in a buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    blocks: Vec<Range<usize>>,
    /// The non-empty blocks follow each other in rank order without overlapping (the usual
    /// case, which needs no sorting to check or to split a buffer by).
    ascending: bool,
}

impl Layout {
    /// Checks `counts`/`displs` (one per rank, in elements of `T`) against a buffer of
    /// `buf_len` elements; blocks must lie inside it and must not overlap (MPI requires that of
    /// receive buffers, and send buffers are checked the same way to catch swapped arguments).
    pub(crate) fn new<T>(
        comm: &Comm,
        what: &str,
        counts: &[usize],
        displs: &[usize],
        buf_len: usize,
    ) -> Result<Layout> {
        let np = comm.size();
        if counts.len() != np || displs.len() != np {
            return Err(Error::InvalidArgument(format!(
                "{what}: {} counts and {} displacements for a communicator of size {np}",
                counts.len(),
                displs.len()
            )));
        }
        let elem = size_of::<T>();
        let mut blocks = Vec::with_capacity(np);
        for (rank, (&count, &displ)) in counts.iter().zip(displs).enumerate() {
            match displ.checked_add(count) {
                Some(end) if end <= buf_len => blocks.push(displ * elem..end * elem),
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "{what}: block of rank {rank} (displacement {displ}, count {count}) exceeds the buffer of {buf_len} elements"
                    )));
                }
            }
        }
        let ascending = Self::ascending(&blocks);
        if !ascending {
            let mut order: Vec<usize> = (0..np).filter(|&r| !blocks[r].is_empty()).collect();
            order.sort_by_key(|&r| blocks[r].start);
            if let Some(pair) = order.windows(2).find(|w| blocks[w[0]].end > blocks[w[1]].start) {
                return Err(Error::InvalidArgument(format!(
                    "{what}: blocks of ranks {} and {} overlap",
                    pair[0], pair[1]
                )));
            }
        }
        Ok(Layout { blocks, ascending })
    }

    fn ascending(blocks: &[Range<usize>]) -> bool {
        let mut end = 0;
        blocks.iter().filter(|b| !b.is_empty()).all(|b| std::mem::replace(&mut end, b.end) <= b.start)
    }

    /// Whether the non-empty blocks are in rank order and disjoint.
    pub(crate) fn is_ascending(&self) -> bool {
        self.ascending
    }

    /// Byte range of `rank`'s block.
    pub(crate) fn block(&self, rank: usize) -> Range<usize> {
        self.blocks[rank].clone()
    }

    /// Sum of the block lengths in bytes.
    pub(crate) fn total_bytes(&self) -> usize {
        self.blocks.iter().map(|b| b.len()).sum()
    }

    /// Where the blocks go when packed in rank order without gaps: rank `r`'s block is
    /// `offsets[r]..offsets[r + 1]` (`np + 1` entries), so an interval of ranks is one range.
    pub(crate) fn packed_offsets(&self) -> Vec<usize> {
        let mut offsets = Vec::with_capacity(self.blocks.len() + 1);
        offsets.push(0);
        let mut end = 0;
        for block in &self.blocks {
            end += block.len();
            offsets.push(end);
        }
        offsets
    }

    /// The byte span of the blocks of `ranks` if their non-empty blocks follow each other in rank
    /// order without gaps (empty blocks may point anywhere), so they can travel as one message
    /// straight from or into the caller's buffer; `None` when they would need packing.
    pub(crate) fn span(&self, ranks: Range<usize>) -> Option<Range<usize>> {
        let mut non_empty = self.blocks[ranks].iter().filter(|b| !b.is_empty());
        let Some(first) = non_empty.next() else { return Some(0..0) };
        let mut end = first.end;
        for block in non_empty {
            if block.start != end {
                return None;
            }
            end = block.end;
        }
        Some(first.start..end)
    }
}

/// Byte range of the blocks of `ranks` when every rank's block has `block` bytes and the blocks
/// follow each other in rank order (scatter, gather, allgather, alltoall).
pub(crate) fn equal_blocks(ranks: Range<usize>, block: usize) -> Range<usize> {
    ranks.start * block..ranks.end * block
}

/// The `n` consecutive blocks of `block` bytes that make up `buf` (`n * block` bytes), also for
/// empty blocks, which `chunks_mut` refuses: no table of ranges needed.
pub(crate) fn equal_chunks(buf: &mut [u8], block: usize, n: usize) -> impl Iterator<Item = &mut [u8]> {
    buf.chunks_mut(block.max(1)).chain(std::iter::repeat_with(Default::default)).take(n)
}
