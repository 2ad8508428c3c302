//! Where each rank's data lies in a buffer, and splitting buffers by it: validated per-rank
//! blocks of the `v` collectives (counts plus displacements, in elements, converted to byte
//! ranges once so the algorithms work on bytes), equal and near-equal splits, and carving one
//! buffer into disjoint pieces so several sends and receives can use it at once without `unsafe`.

use std::cell::RefCell;
use std::ops::Range;

use super::select::Collective;
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

/// A `v` collective's blocks as a device reads them: a built [`Layout`], or the caller's counts
/// and displacements (in elements of `elem` bytes) that [`Layout::check`] accepted, for the mpi
/// device's blocking path, which builds no layout. Only the mpi device reads them.
#[derive(Clone, Copy)]
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) enum Blocks<'a> {
    Built(&'a Layout),
    Checked { counts: &'a [usize], displs: &'a [usize], elem: usize },
}

#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
impl Blocks<'_> {
    /// Byte range of `rank`'s block.
    #[inline]
    pub(crate) fn block(&self, rank: usize) -> Range<usize> {
        match *self {
            Blocks::Built(layout) => layout.block(rank),
            Blocks::Checked { counts, displs, elem } => displs[rank] * elem..(displs[rank] + counts[rank]) * elem,
        }
    }
}

/// Block vectors a thread keeps from dropped layouts (a rank is a thread on every device).
const KEPT_BLOCK_VECTORS: usize = 4;

thread_local! {
    /// Block vectors of dropped layouts, for the next ones: a warm rank's `v` collectives
    /// allocate none for their layouts.
    static SPARE_BLOCKS: RefCell<Vec<Vec<Range<usize>>>> = const { RefCell::new(Vec::new()) };
}

impl Drop for Layout {
    fn drop(&mut self) {
        let blocks = std::mem::take(&mut self.blocks);
        if blocks.capacity() > 0 {
            // A thread whose storage is being torn down just frees it.
            let _ = SPARE_BLOCKS.try_with(|spare| {
                if let Ok(mut spare) = spare.try_borrow_mut()
                    && spare.len() < KEPT_BLOCK_VECTORS
                {
                    spare.push(blocks);
                }
            });
        }
    }
}

impl Layout {
    /// Checks `counts`/`displs` (one per rank, in elements of `T`) of a receive buffer of
    /// `buf_len` elements: blocks must lie inside it and must not overlap (MPI: no location of a
    /// receive buffer is written twice).
    pub(crate) fn new<T>(
        comm: &Comm,
        what: &str,
        counts: &[usize],
        displs: &[usize],
        buf_len: usize,
    ) -> Result<Layout> {
        Self::build::<T>(comm, what, counts, displs, buf_len, true)
    }

    /// [`Layout::new`] where the blocks must be `disjoint` (receive buffers); send buffers' may
    /// overlap (MPI allows reading a location for several ranks; the algorithms only read send
    /// blocks).
    pub(crate) fn build<T>(
        comm: &Comm,
        what: &str,
        counts: &[usize],
        displs: &[usize],
        buf_len: usize,
        disjoint: bool,
    ) -> Result<Layout> {
        Self::check_lengths(comm, what, counts, displs)?;
        Self::of_blocks::<T>(what, counts, displs, buf_len, disjoint)
    }

    /// What [`Layout::build`] checks, without building: allocation-free unless the blocks are
    /// out of rank order and must be disjoint (the overlap check sorts them).
    pub(crate) fn check<T>(
        comm: &Comm,
        what: &str,
        counts: &[usize],
        displs: &[usize],
        buf_len: usize,
        disjoint: bool,
    ) -> Result<()> {
        Self::check_lengths(comm, what, counts, displs)?;
        let (mut end, mut ascending) = (0, true);
        for (rank, (&count, &displ)) in counts.iter().zip(displs).enumerate() {
            let block = Self::block_of(what, rank, count, displ, buf_len)?;
            if !block.is_empty() {
                ascending &= std::mem::replace(&mut end, block.end) <= block.start;
            }
        }
        if !ascending && disjoint {
            Self::of_blocks::<T>(what, counts, displs, buf_len, true)?;
        }
        Ok(())
    }

    fn check_lengths(comm: &Comm, what: &str, counts: &[usize], displs: &[usize]) -> Result<()> {
        let np = comm.size();
        if counts.len() != np || displs.len() != np {
            return Err(Error::InvalidArgument(format!(
                "{what}: {} counts and {} displacements for a communicator of size {np}",
                counts.len(),
                displs.len()
            )));
        }
        Ok(())
    }

    /// Rank `rank`'s block in elements, if it lies inside the buffer.
    #[inline]
    fn block_of(what: &str, rank: usize, count: usize, displ: usize, buf_len: usize) -> Result<Range<usize>> {
        match displ.checked_add(count) {
            Some(end) if end <= buf_len => Ok(displ..end),
            _ => Err(Error::InvalidArgument(format!(
                "{what}: block of rank {rank} (displacement {displ}, count {count}) exceeds the buffer of {buf_len} elements"
            ))),
        }
    }

    /// [`Layout::new`] for as many blocks as `counts` has (its caller checked that `displs` has
    /// as many): the neighbour collectives have one block per neighbour, not per rank. Blocks
    /// must be `disjoint` where they are written (receive buffers).
    pub(crate) fn of_blocks<T>(
        what: &str,
        counts: &[usize],
        displs: &[usize],
        buf_len: usize,
        disjoint: bool,
    ) -> Result<Layout> {
        let np = counts.len();
        let elem = size_of::<T>();
        let spare = SPARE_BLOCKS.try_with(|spare| spare.try_borrow_mut().ok()?.pop()).ok().flatten();
        let mut blocks = spare.unwrap_or_default();
        blocks.clear();
        blocks.reserve(np);
        for (rank, (&count, &displ)) in counts.iter().zip(displs).enumerate() {
            let block = Self::block_of(what, rank, count, displ, buf_len)?;
            blocks.push(block.start * elem..block.end * elem);
        }
        let ascending = Self::ascending(&blocks);
        if !ascending && disjoint {
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

/// Start of block `index` (`index` may be `parts`, giving `len`) when `len` elements are split
/// into `parts` near-equal blocks, the first `len % parts` of them one longer. Never overflows:
/// `index · (len / parts) ≤ len`.
pub(crate) fn even_bound(len: usize, parts: usize, index: usize) -> usize {
    index * (len / parts) + index.min(len % parts)
}

/// Element range of block `index` of the split of [`even_bound`].
pub(crate) fn even_block(len: usize, parts: usize, index: usize) -> Range<usize> {
    even_bound(len, parts, index)..even_bound(len, parts, index + 1)
}

/// Element offsets of consecutive blocks of `counts` elements: block `i` is
/// `offsets[i]..offsets[i + 1]` ([`offset_block`]).
pub(crate) fn offsets_of(counts: &[usize]) -> Vec<usize> {
    std::iter::once(0)
        .chain(counts.iter().scan(0, |end, &count| {
            *end += count;
            Some(*end)
        }))
        .collect()
}

/// Element range of block `i` given the offsets of [`offsets_of`].
pub(crate) fn offset_block(offsets: &[usize], i: usize) -> Range<usize> {
    offsets[i]..offsets[i + 1]
}

/// Copies a rank's own block, which never travels as a message; a length difference means the
/// caller's counts disagree.
pub(crate) fn copy_own_block(dst: &mut [u8], src: &[u8], coll: Collective) -> Result<()> {
    check_own_block(dst, src, coll)?;
    dst.copy_from_slice(src);
    Ok(())
}

/// The error of [`copy_own_block`], if any, without copying.
pub(crate) fn check_own_block(dst: &[u8], src: &[u8], coll: Collective) -> Result<()> {
    if dst.len() != src.len() {
        return Err(Error::InvalidArgument(format!(
            "{coll}: this rank's own block has {} bytes but its place in the buffer {}",
            src.len(),
            dst.len()
        )));
    }
    Ok(())
}

/// [`copy_own_block`] unless the block is already in place (`src` is `None`: MPI_IN_PLACE).
pub(crate) fn place_own_block(dst: &mut [u8], src: Option<&[u8]>, coll: Collective) -> Result<()> {
    src.map_or(Ok(()), |src| copy_own_block(dst, src, coll))
}

/// Splits `buf` into the byte ranges `range(i)` for `i` in `order`, which must list the
/// non-empty ranges (in bounds, pairwise disjoint) by increasing start; empty ranges get an
/// empty slice wherever they point (layouts allow that). The one place buffers are carved, so
/// one buffer can feed several sends and receives at once without `unsafe`.
pub(crate) fn carve_in_order<T>(
    buf: &mut [T],
    order: impl IntoIterator<Item = usize>,
    range: impl Fn(usize) -> Range<usize>,
) -> impl Iterator<Item = (usize, &mut [T])> {
    let (mut rest, mut offset) = (buf, 0);
    order.into_iter().map(move |i| {
        let r = range(i);
        if r.is_empty() {
            return (i, Default::default());
        }
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(r.start - offset);
        let (piece, tail) = tail.split_at_mut(r.len());
        (rest, offset) = (tail, r.end);
        (i, piece)
    })
}

/// Splits `buf` into the `N` byte ranges (in-bounds, pairwise disjoint unless empty), in the
/// given order.
pub(crate) fn carve<const N: usize>(buf: &mut [u8], ranges: [Range<usize>; N]) -> [&mut [u8]; N] {
    let mut pieces: [&mut [u8]; N] = std::array::from_fn(|_| Default::default());
    let mut order: [usize; N] = std::array::from_fn(|i| i);
    order.sort_unstable_by_key(|&i| ranges[i].start);
    for (i, piece) in carve_in_order(buf, order, |i| ranges[i].clone()) {
        pieces[i] = piece;
    }
    pieces
}

/// Splits `buf` into the blocks of `layout`, indexed by rank.
pub(crate) fn carve_blocks<'a>(buf: &'a mut [u8], layout: &Layout, np: usize) -> Vec<&'a mut [u8]> {
    let block = |rank| layout.block(rank);
    if layout.is_ascending() {
        // Blocks in rank order: one pass, no sorting.
        return carve_in_order(buf, 0..np, block).map(|(_, piece)| piece).collect();
    }
    let mut pieces: Vec<&mut [u8]> = (0..np).map(|_| Default::default()).collect();
    let mut order: Vec<usize> = (0..np).collect();
    order.sort_unstable_by_key(|&rank| block(rank).start);
    for (rank, piece) in carve_in_order(buf, order, block) {
        pieces[rank] = piece;
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_offsets() {
        assert_eq!(offsets_of(&[2, 0, 3]), [0, 2, 2, 5]);
        assert_eq!(offset_block(&offsets_of(&[2, 0, 3]), 2), 2..5);
        let even = |len, parts| (0..=parts).map(|i| even_bound(len, parts, i)).collect::<Vec<_>>();
        assert_eq!(even(7, 3), [0, 3, 5, 7]);
        assert_eq!(even(0, 2), [0, 0, 0]);
        assert_eq!(even(usize::MAX, 2), [0, usize::MAX / 2 + 1, usize::MAX]);
        assert_eq!(even_block(7, 3, 2), 5..7);
    }

    #[test]
    fn carving_gives_disjoint_pieces_in_the_requested_order() {
        let mut buf: Vec<u8> = (0..10).collect();
        let [late, early, empty] = carve(&mut buf, [6..9, 1..3, 4..4]);
        assert_eq!((&*late, &*early, empty.len()), (&[6, 7, 8][..], &[1, 2][..], 0));
    }
}
