//! Communication plans: who sends which strided blocks of its stored array to whom.
//!
//! Every regular operation (remap, write_halo, shift, cshift, copy) describes itself the same
//! way, one array dimension at a time: for each coordinate of the destination range, the
//! destination storage positions it fills and the global source index of each ([`DimMap`]).
//! [`build`] turns those per-dimension maps into this rank's [`Plan`]: the product of the
//! dimensions gives r-dimensional strided [`Block`]s, grouped into one message per peer, plus the
//! local copies. Both ends of a message compute its blocks from the same global metadata, in
//! the same order, so nothing is negotiated.
//!
//! The builder only asks ranges who owns a global index ([`crate::Range::owner`]); it never
//! looks at a format.

mod direct;
mod exec;
mod objects;

use std::collections::BTreeMap;

use fastmp::{Comm, Locality};

use crate::array::row_major_strides;
use crate::grid::Grid;
use crate::range::Range;

pub(crate) use direct::Lease;
pub(crate) use exec::{Buffers, Source};

/// One destination position of one array dimension, and where its value comes from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    /// Position in the destination's stored block along this dimension (ghosts counted).
    pub dst_pos: usize,
    /// Global index, along this dimension, of the source element.
    pub src_global: usize,
    /// Moving it is only needed if some other dimension needs moving (the interior of a halo:
    /// a block whose every dimension is optional is the receiver's own data).
    pub optional: bool,
}

/// For each coordinate of the destination range, its entries in increasing `dst_pos`.
pub(crate) type DimMap = Vec<Vec<Entry>>;

/// One side (source or destination) of a plan: the array's grid and ranges, and this rank's
/// stored-block strides for that array.
pub(crate) struct Side<'a> {
    pub grid: &'a Grid,
    pub ranges: &'a [Range],
    pub strides: Vec<usize>,
}

/// An r-dimensional strided box of a stored block, in elements: `offset`, then per dimension
/// `(count, stride)`, outermost first. Its elements, in row-major order, are one part of a
/// message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Block {
    pub offset: usize,
    pub dims: Vec<(usize, isize)>,
}

impl Block {
    pub fn elements(&self) -> usize {
        self.dims.iter().map(|d| d.0).product()
    }

    /// Drops single-element dimensions and merges dimensions that are contiguous together, so
    /// the innermost dimension is as long as possible (element order is unchanged).
    fn normalized(self) -> Block {
        let mut dims: Vec<(usize, isize)> = Vec::with_capacity(self.dims.len());
        for (count, stride) in self.dims.into_iter().filter(|d| d.0 != 1) {
            if count == 0 {
                return Block { offset: self.offset, dims: vec![(0, 1)] };
            }
            dims.push((count, stride));
            while let [.., (c1, s1), (c2, s2)] = dims[..] {
                if s1 != c2 as isize * s2 {
                    break;
                }
                dims.pop();
                *dims.last_mut().expect("two dims") = (c1 * c2, s2);
            }
        }
        if dims.is_empty() {
            dims.push((1, 1));
        }
        Block { offset: self.offset, dims }
    }

    /// The contiguous runs `(offset, len)` of the block, in order.
    pub fn for_each_run(&self, mut f: impl FnMut(usize, usize)) {
        let (&(inner, inner_stride), outer) = self.dims.split_last().expect("normalized blocks have a dimension");
        if inner == 0 || outer.iter().any(|d| d.0 == 0) {
            return;
        }
        let (run, reps) = if inner_stride == 1 { (inner, 1) } else { (1, inner) };
        let mut index = vec![0usize; outer.len()];
        loop {
            let base = self.offset as isize + outer.iter().zip(&index).map(|(d, &i)| d.1 * i as isize).sum::<isize>();
            for k in 0..reps {
                f((base + k as isize * inner_stride) as usize, run);
            }
            // Odometer over the outer dimensions.
            let mut d = outer.len();
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                index[d] += 1;
                if index[d] < outer[d].0 {
                    break;
                }
                index[d] = 0;
            }
        }
    }

    /// The one contiguous range the block covers, if it is one.
    fn contiguous(&self) -> Option<(usize, usize)> {
        match self.dims[..] {
            [(n, 1)] => Some((self.offset, n)),
            [(1, _)] => Some((self.offset, 1)),
            _ => None,
        }
    }
}

/// All blocks exchanged with one peer, in message order.
#[derive(Clone, Debug)]
pub(crate) struct Transfer {
    pub peer: usize,
    pub blocks: Vec<Block>,
    /// The same elements as blocks of the peer's stored block (for a receive, what a direct copy
    /// reads).
    pub peer_blocks: Vec<Block>,
    pub elements: usize,
    /// Set when the message is one contiguous range of the stored block that may be sent from
    /// or received into in place (no packing).
    pub in_place: Option<(usize, usize)>,
}

/// This rank's part of an operation.
#[derive(Clone)]
pub(crate) struct Plan {
    /// The communicator the messages travel on (the destination grid's).
    pub comm: Comm,
    pub sends: Vec<Transfer>,
    pub recvs: Vec<Transfer>,
    /// Transfers to peers in this process that copy straight from this rank's source block
    /// (for serde elements they travel as messages like the others).
    pub direct_sends: Vec<Transfer>,
    /// Receives copied straight from a source block in this process.
    pub direct_recvs: Vec<Transfer>,
    /// Copies from this rank's source block to its destination block: same element count and
    /// order on both sides.
    pub copies: Vec<(Block, Block)>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("sends", &self.sends)
            .field("recvs", &self.recvs)
            .field("copies", &self.copies)
            .finish()
    }
}

/// A run of one dimension: `count` positions, stepping by `src_step`/`dst_step` from
/// `src`/`dst`.
#[derive(Clone, Copy, Debug)]
struct Run {
    count: usize,
    src: usize,
    src_step: isize,
    dst: usize,
    dst_step: isize,
}

/// Per (destination coordinate, source coordinate, optional) of one dimension: its runs.
type Pairs = BTreeMap<(usize, usize, bool), Vec<Run>>;

fn pairs(map: &DimMap, src: &Range) -> Pairs {
    let mut pairs = Pairs::new();
    for (cd, entries) in map.iter().enumerate() {
        for e in entries {
            let (cs, local) = src.owner(e.src_global);
            let s = src.ghosts().0 + local;
            let runs = pairs.entry((cd, cs, e.optional)).or_default();
            push_run(runs, s, e.dst_pos);
        }
    }
    pairs
}

fn push_run(runs: &mut Vec<Run>, s: usize, d: usize) {
    if let Some(run) = runs.last_mut() {
        if run.count == 1 {
            (run.src_step, run.dst_step) = (s as isize - run.src as isize, d as isize - run.dst as isize);
            run.count = 2;
            return;
        }
        let n = run.count as isize;
        if s as isize == run.src as isize + n * run.src_step && d as isize == run.dst as isize + n * run.dst_step {
            run.count += 1;
            return;
        }
    }
    runs.push(Run { count: 1, src: s, src_step: 0, dst: d, dst_step: 0 });
}

/// One group of one dimension in a product: the peer's coordinate, whether optional, its runs.
type Group<'a> = (usize, bool, &'a [Run]);

/// Calls `f` for each combination of one group per dimension, in row-major order.
fn for_each_combo<'a>(groups: &[Vec<Group<'a>>], mut f: impl FnMut(&[Group<'a>])) {
    if groups.iter().any(Vec::is_empty) {
        return;
    }
    let mut index = vec![0; groups.len()];
    let mut combo: Vec<Group<'a>> = groups.iter().map(|g| g[0]).collect();
    loop {
        f(&combo);
        let mut d = groups.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            index[d] += 1;
            if index[d] < groups[d].len() {
                combo[d] = groups[d][index[d]];
                break;
            }
            index[d] = 0;
            combo[d] = groups[d][0];
        }
    }
}

/// The blocks of one combination, for the source side (`src == true`) or the destination side,
/// with that side's strides: the product of the dimensions' runs, row-major.
fn blocks(combo: &[Group<'_>], strides: &[usize], src: bool, out: &mut Vec<Block>) {
    let mut index = vec![0; combo.len()];
    loop {
        let mut offset = 0;
        let dims = combo
            .iter()
            .zip(&index)
            .zip(strides)
            .map(|((g, &i), &stride)| {
                let run = g.2[i];
                let (pos, step) = if src { (run.src, run.src_step) } else { (run.dst, run.dst_step) };
                offset += pos * stride;
                (run.count, step * stride as isize)
            })
            .collect();
        out.push(Block { offset, dims }.normalized());
        let mut d = combo.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            index[d] += 1;
            if index[d] < combo[d].2.len() {
                break;
            }
            index[d] = 0;
        }
    }
}

/// Which copy of a source replicated over grid dimension `g` serves receiver `rank`: a
/// restricted dimension's coordinate, else the receiver's own coordinate if it is in the
/// source grid (its own copy), else spread by rank.
pub(crate) fn replica(grid: &Grid, g: usize, rank: usize) -> usize {
    match (grid.fixed()[g], grid.coords_of(rank)) {
        (Some(c), _) => c,
        (None, Some(coords)) => coords[g],
        (None, None) => rank % grid.dims()[g],
    }
}

/// The grid dimensions no range targets.
pub(crate) fn untargeted(grid: &Grid, ranges: &[Range]) -> Vec<usize> {
    (0..grid.ndims()).filter(|&g| ranges.iter().all(|r| r.grid_dim() != Some(g))).collect()
}

/// Builds this rank's plan. `maps[r]` describes array dimension `r`; `in_place` says the source
/// and destination are the same stored block (so a send may be in place only where no receive
/// writes).
pub(crate) fn build(dst: &Side<'_>, src: &Side<'_>, maps: &[DimMap], in_place: bool) -> Plan {
    let comm = dst.grid.comm().clone();
    let me = comm.rank();
    let pairs: Vec<Pairs> = maps.iter().zip(src.ranges).map(|(m, r)| pairs(m, r)).collect();
    let mut recvs: BTreeMap<usize, Vec<Part>> = BTreeMap::new();
    let mut sends: BTreeMap<usize, Vec<Part>> = BTreeMap::new();
    let mut copies = Vec::new();
    let src_free = untargeted(src.grid, src.ranges);
    let dst_free = untargeted(dst.grid, dst.ranges);

    if let Some(dc) = dst.grid.coords() {
        // As a receiver: group each dimension's runs by source coordinate.
        let mine: Vec<usize> = dst.ranges.iter().map(|r| r.grid_dim().map_or(0, |g| dc[g])).collect();
        let groups: Vec<Vec<Group<'_>>> = pairs
            .iter()
            .zip(&mine)
            .map(|(p, &cd)| p.range((cd, 0, false)..=(cd, usize::MAX, true)).map(|(k, v)| (k.1, k.2, &v[..])).collect())
            .collect();
        for_each_combo(&groups, |combo| {
            if combo.iter().all(|g| g.1) {
                return;
            }
            let mut coords: Vec<usize> = vec![0; src.grid.ndims()];
            for (r, g) in combo.iter().enumerate() {
                if let Some(gd) = src.ranges[r].grid_dim() {
                    coords[gd] = g.0;
                }
            }
            for &g in &src_free {
                coords[g] = replica(src.grid, g, me);
            }
            let peer = src.grid.rank_at(&coords);
            let mut dst_blocks = Vec::new();
            blocks(combo, &dst.strides, false, &mut dst_blocks);
            if peer == me {
                let mut src_blocks = Vec::new();
                blocks(combo, &src.strides, true, &mut src_blocks);
                copies.extend(src_blocks.into_iter().zip(dst_blocks));
            } else {
                let stored: Vec<usize> =
                    src.ranges.iter().map(|r| r.stored_len(r.grid_dim().map_or(0, |g| coords[g]))).collect();
                let mut peer_blocks = Vec::new();
                blocks(combo, &row_major_strides(&stored), true, &mut peer_blocks);
                recvs.entry(peer).or_default().push((combo.iter().map(|g| g.1).collect(), dst_blocks, peer_blocks));
            }
        });
    }

    if let Some(sc) = src.grid.coords() {
        // As a sender: group each dimension's runs by destination coordinate.
        let mine: Vec<usize> = src.ranges.iter().map(|r| r.grid_dim().map_or(0, |g| sc[g])).collect();
        let groups: Vec<Vec<Group<'_>>> = pairs
            .iter()
            .zip(&mine)
            .map(|(p, &cs)| p.iter().filter(|(k, _)| k.1 == cs).map(|(k, v)| (k.0, k.2, &v[..])).collect())
            .collect();
        for_each_combo(&groups, |combo| {
            if combo.iter().all(|g| g.1) {
                return;
            }
            let mut coords: Vec<usize> = dst.grid.fixed().iter().map(|f| f.unwrap_or(0)).collect();
            for (r, g) in combo.iter().enumerate() {
                if let Some(gd) = dst.ranges[r].grid_dim() {
                    coords[gd] = g.0;
                }
            }
            let mut src_blocks = None;
            // Every copy of a replicated destination receives.
            for_each_coords(dst.grid, &dst_free, &mut coords, &mut |coords| {
                let peer = dst.grid.rank_at(coords);
                if peer == me || src_free.iter().any(|&g| replica(src.grid, g, peer) != sc[g]) {
                    return;
                }
                let b = src_blocks.get_or_insert_with(|| {
                    let mut b = Vec::new();
                    blocks(combo, &src.strides, true, &mut b);
                    b
                });
                let mut peer_blocks = Vec::new();
                blocks(combo, &stored_strides(dst.ranges, coords), false, &mut peer_blocks);
                sends.entry(peer).or_default().push((combo.iter().map(|g| g.1).collect(), b.clone(), peer_blocks));
            });
        });
    }

    let (direct_recvs, recvs) = split_direct(&comm, transfers(recvs));
    let (direct_sends, sends) = split_direct(&comm, transfers(sends));
    let mut sends = sends;
    if in_place {
        // A send may leave straight from the block only where no receive writes.
        for s in &mut sends {
            if let Some((o, n)) = s.in_place
                && recvs.iter().any(|r| r.blocks.iter().any(|b| overlaps(b, o, n)))
            {
                s.in_place = None;
            }
        }
    }
    Plan { comm, sends, recvs, direct_sends, direct_recvs, copies }
}

/// Strides of the stored block of the rank at grid coordinates `coords` of an array with
/// `ranges`.
fn stored_strides(ranges: &[Range], coords: &[usize]) -> Vec<usize> {
    let stored: Vec<usize> = ranges.iter().map(|r| r.stored_len(r.grid_dim().map_or(0, |g| coords[g]))).collect();
    row_major_strides(&stored)
}

/// Whether direct copies between thread ranks are on: `FASTMP_DARRAY_DIRECT=0` turns them off
/// (to measure what they save).
fn direct_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("FASTMP_DARRAY_DIRECT").map_or(true, |v| v != "0"))
}

/// Splits transfers into direct copies and messages. A transfer is copied directly when its
/// peer is a thread of this process and the message would need packing on either end (a message
/// that is one contiguous range at both ends already moves with the device's single copy, and
/// one message costs less than the direct protocol's two). Both ends of a pair decide alike:
/// locality is symmetric and both know both ends' blocks.
fn split_direct(comm: &Comm, transfers: Vec<Transfer>) -> (Vec<Transfer>, Vec<Transfer>) {
    if !direct_enabled() {
        return (Vec::new(), transfers);
    }
    transfers.into_iter().partition(|t| {
        let contiguous = |blocks: &[Block]| matches!(blocks, [one] if one.contiguous().is_some());
        let packed = !contiguous(&t.blocks) || !contiguous(&t.peer_blocks);
        packed && matches!(comm.locality(t.peer), Ok(Locality::SameProcess))
    })
}

/// One combination's share of a message: its optional flags (the order key), this rank's blocks,
/// and the peer's blocks of the same elements.
type Part = (Vec<bool>, Vec<Block>, Vec<Block>);

/// Calls `f` with every coordinate vector that varies `free` dimensions over the grid (a
/// restricted dimension stays at its coordinate).
pub(crate) fn for_each_coords(grid: &Grid, free: &[usize], coords: &mut Vec<usize>, f: &mut dyn FnMut(&[usize])) {
    let Some((&g, rest)) = free.split_first() else {
        f(coords);
        return;
    };
    let span = match grid.fixed()[g] {
        Some(c) => c..c + 1,
        None => 0..grid.dims()[g],
    };
    for c in span {
        coords[g] = c;
        for_each_coords(grid, rest, coords, f);
    }
}

/// Whether `block` touches the elements `o..o + n`.
fn overlaps(block: &Block, o: usize, n: usize) -> bool {
    let mut hit = false;
    block.for_each_run(|bo, bn| hit |= bo < o + n && o < bo + bn);
    hit
}

/// One transfer per peer: its parts in a canonical order (by their optional flags, as both ends
/// sort them), concatenated.
fn transfers(by_peer: BTreeMap<usize, Vec<Part>>) -> Vec<Transfer> {
    by_peer
        .into_iter()
        .map(|(peer, mut parts)| {
            parts.sort_by(|a, b| a.0.cmp(&b.0));
            let mut blocks = Vec::new();
            let mut peer_blocks = Vec::new();
            for (_, mine, theirs) in parts {
                blocks.extend(mine.into_iter().filter(|b| b.elements() > 0));
                peer_blocks.extend(theirs.into_iter().filter(|b| b.elements() > 0));
            }
            let elements = blocks.iter().map(Block::elements).sum();
            let in_place = match &blocks[..] {
                [one] => one.contiguous(),
                _ => None,
            };
            Transfer { peer, blocks, peer_blocks, elements, in_place }
        })
        .filter(|t| t.elements > 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(b: &Block) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        b.for_each_run(|o, n| v.push((o, n)));
        v
    }

    #[test]
    fn blocks_merge_contiguous_dimensions() {
        let rows = Block { offset: 5, dims: vec![(3, 10), (10, 1)] }.normalized();
        assert_eq!(rows.dims, [(30, 1)]);
        assert_eq!(runs(&rows), [(5, 30)]);
        let column = Block { offset: 2, dims: vec![(3, 10), (1, 1)] }.normalized();
        assert_eq!(runs(&column), [(2, 1), (12, 1), (22, 1)]);
        let patch = Block { offset: 0, dims: vec![(2, 100), (2, 10), (3, 1)] }.normalized();
        assert_eq!(runs(&patch), [(0, 3), (10, 3), (100, 3), (110, 3)]);
    }

    #[test]
    fn runs_merge_arithmetic_progressions() {
        let mut r = Vec::new();
        for (s, d) in [(0, 1), (2, 2), (4, 3), (5, 4), (6, 5)] {
            push_run(&mut r, s, d);
        }
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].count, r[0].src_step, r[0].dst_step), (3, 2, 1));
        assert_eq!((r[1].count, r[1].src, r[1].src_step), (2, 5, 1));
    }
}
