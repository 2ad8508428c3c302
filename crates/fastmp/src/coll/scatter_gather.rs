//! Scatter(v) and gather(v).await algorithms: flat trees and MST.
//!
//! MST scatterv/gatherv: only the root knows the counts, but an inner node of the tree must
//! know how many bytes each rank of its subtree gets or sends. So every message carrying a
//! subtree's blocks (packed in rank order) is preceded by a header with their lengths (one
//! `u64` per rank of the subtree, a length both ends know from the tree alone): downwards from
//! the root for scatterv, upwards with the data for gatherv. A leaf of a scatterv knows its own
//! count (its receive buffer), so it gets no header. This costs one extra small message per tree
//! edge but no extra round through the tree (unlike scattering the counts first).

use std::ops::Range;

use super::select::{Algorithm, Collective};
use super::transport::Run;
use super::tree::{Mst, send_from_root};
use super::vector::{Layout, carve_in_order, copy_own_block, equal_blocks};
use crate::error::{Error, Result};

pub(super) async fn scatter(
    comm: &Run<'_>,
    send: &[u8],
    recv: &mut [u8],
    root: usize,
    algorithm: Algorithm,
) -> Result<()> {
    let coll = Collective::Scatter;
    if algorithm == Algorithm::Mst {
        return scatter_mst(comm, send, recv, root).await;
    }
    let nonblocking = nonblocking(coll, algorithm)?;
    if comm.rank() != root {
        return comm.coll_recv(recv, root, coll).await;
    }
    scatter_flat_root(comm, send, uniform_blocks(recv.len()), recv, nonblocking, coll).await
}

pub(super) async fn scatterv(
    comm: &Run<'_>,
    send: &[u8],
    layout: Option<&Layout>,
    recv: &mut [u8],
    root: usize,
    algorithm: Algorithm,
) -> Result<()> {
    let coll = Collective::Scatterv;
    if algorithm == Algorithm::Mst {
        return scatterv_mst(comm, send, layout, recv, root).await;
    }
    let nonblocking = nonblocking(coll, algorithm)?;
    if comm.rank() != root {
        return comm.coll_recv(recv, root, coll).await;
    }
    let layout = root_layout(layout, coll)?;
    scatter_flat_root(comm, send, |rank| layout.block(rank), recv, nonblocking, coll).await
}

pub(super) async fn gather(
    comm: &Run<'_>,
    send: &[u8],
    recv: &mut [u8],
    root: usize,
    algorithm: Algorithm,
) -> Result<()> {
    let coll = Collective::Gather;
    if algorithm == Algorithm::Mst {
        return gather_mst(comm, send, recv, root).await;
    }
    let nonblocking = nonblocking(coll, algorithm)?;
    if comm.rank() != root {
        return comm.coll_send(send, root, coll).await;
    }
    gather_flat_root(comm, send, recv, uniform_blocks(send.len()), 0..comm.size(), nonblocking, coll).await
}

pub(super) async fn gatherv(
    comm: &Run<'_>,
    send: &[u8],
    recv: &mut [u8],
    layout: Option<&Layout>,
    root: usize,
    algorithm: Algorithm,
) -> Result<()> {
    let coll = Collective::Gatherv;
    if algorithm == Algorithm::Mst {
        return gatherv_mst(comm, send, recv, layout, root).await;
    }
    let nonblocking = nonblocking(coll, algorithm)?;
    if comm.rank() != root {
        return comm.coll_send(send, root, coll).await;
    }
    let layout = root_layout(layout, coll)?;
    let block = |rank| layout.block(rank);
    if layout.is_ascending() {
        // Blocks in rank order (the usual case) need no sorted copy of the ranks.
        return gather_flat_root(comm, send, recv, block, 0..comm.size(), nonblocking, coll).await;
    }
    let mut by_offset: Vec<usize> = (0..comm.size()).collect();
    by_offset.sort_by_key(|&rank| layout.block(rank).start);
    gather_flat_root(comm, send, recv, block, by_offset.into_iter(), nonblocking, coll).await
}

/// Whether a flat-tree `algorithm` uses nonblocking point-to-point; other algorithms are errors.
fn nonblocking(coll: Collective, algorithm: Algorithm) -> Result<bool> {
    match algorithm {
        Algorithm::Bft => Ok(false),
        Algorithm::Nbft => Ok(true),
        other => Err(coll.unsupported(other)),
    }
}

/// Byte ranges of consecutive blocks of `block` bytes each, by rank.
fn uniform_blocks(block: usize) -> impl Fn(usize) -> Range<usize> {
    move |rank| equal_blocks(rank..rank + 1, block)
}

/// The root's layout, which the public API always passes (`None` only on other ranks).
fn root_layout(layout: Option<&Layout>, coll: Collective) -> Result<&Layout> {
    layout.ok_or_else(|| Error::other(format!("{coll}: the root has no block layout")))
}

/// Root side of the flat scatters: send each rank `send[block_of(rank)]`.
async fn scatter_flat_root(
    comm: &Run<'_>,
    send: &[u8],
    block_of: impl Fn(usize) -> Range<usize>,
    recv: &mut [u8],
    nonblocking: bool,
    coll: Collective,
) -> Result<()> {
    let root = comm.rank();
    copy_own_block(recv, &send[block_of(root)], coll)?;
    send_from_root(comm, root, |rank| &send[block_of(rank)], nonblocking, coll).await
}

/// Root side of the flat gathers: receive each rank's block into `recv[block_of(rank)]`, in
/// rank order with blocking receives, or all posted at once. `by_offset` lists the ranks with
/// their blocks in increasing position, which lets the posted receives split `recv` into
/// disjoint slices (blocks are validated not to overlap; empty ones may lie anywhere).
async fn gather_flat_root(
    comm: &Run<'_>,
    send: &[u8],
    recv: &mut [u8],
    block_of: impl Fn(usize) -> Range<usize>,
    by_offset: impl Iterator<Item = usize>,
    nonblocking: bool,
    coll: Collective,
) -> Result<()> {
    let root = comm.rank();
    if !nonblocking {
        for rank in 0..comm.size() {
            let slot = &mut recv[block_of(rank)];
            if rank == root { copy_own_block(slot, send, coll)? } else { comm.coll_recv(slot, rank, coll).await? }
        }
        return Ok(());
    }
    let mut receives = comm.batch();
    for (rank, slot) in carve_in_order(recv, by_offset, block_of) {
        if rank == root { copy_own_block(slot, send, coll)? } else { receives.irecv(slot, rank, coll)? }
    }
    receives.wait_all().await
}

/// Byte range, inside a buffer holding the blocks of ranks `held_from..`, of the blocks of `ranks`.
fn bytes_of(ranks: &Range<usize>, held_from: usize, block: usize) -> Range<usize> {
    equal_blocks(ranks.start - held_from..ranks.end - held_from, block)
}

/// MST scatter: each node receives its whole subtree's blocks (an interval of ranks, so
/// contiguous) from its parent, keeps its own and forwards each child's subtree, largest first.
async fn scatter_mst(comm: &Run<'_>, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    let coll = Collective::Scatter;
    let (rank, block) = (comm.rank(), recv.len());
    let node = Mst::new(comm.size(), root, rank);
    let mut subtree_blocks = Vec::new();
    let held: &[u8] = match node.parent {
        None => send,
        // A leaf receives only its own block: straight into `recv`.
        Some(parent) if node.subtree.len() == 1 => return comm.coll_recv(recv, parent, coll).await,
        Some(parent) => {
            subtree_blocks.resize(node.subtree.len() * block, 0);
            comm.coll_recv(&mut subtree_blocks, parent, coll).await?;
            &subtree_blocks
        }
    };
    for (child, ranks) in node.children() {
        comm.coll_send(&held[bytes_of(&ranks, node.subtree.start, block)], child, coll).await?;
    }
    copy_own_block(recv, &held[bytes_of(&(rank..rank + 1), node.subtree.start, block)], coll)
}

/// MST gather, the mirror of [`scatter_mst`]: each node collects its children's subtrees
/// (smallest first) next to its own block and sends the lot to its parent.
async fn gather_mst(comm: &Run<'_>, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    let coll = Collective::Gather;
    let (rank, block) = (comm.rank(), send.len());
    let node = Mst::new(comm.size(), root, rank);
    let mut subtree_blocks = Vec::new();
    let held: &mut [u8] = match node.parent {
        None => recv,
        Some(parent) if node.subtree.len() == 1 => return comm.coll_send(send, parent, coll).await,
        Some(_) => {
            subtree_blocks.resize(node.subtree.len() * block, 0);
            &mut subtree_blocks
        }
    };
    copy_own_block(&mut held[bytes_of(&(rank..rank + 1), node.subtree.start, block)], send, coll)?;
    for (child, ranks) in node.children().rev() {
        comm.coll_recv(&mut held[bytes_of(&ranks, node.subtree.start, block)], child, coll).await?;
    }
    match node.parent {
        Some(parent) => comm.coll_send(held, parent, coll).await,
        None => Ok(()),
    }
}

/// Lengths header of the MST v-variants: `lengths[i]` bytes for the `i`-th rank of a subtree.
type Lengths = Vec<u64>;

/// Prefix sums of a received header: the `i`-th rank's block is `offsets[i]..offsets[i + 1]` of
/// the packed data. An error (never a panic) if the total does not fit in `usize`.
fn header_offsets(lengths: &[u64], coll: Collective) -> Result<Vec<usize>> {
    let mut offsets = Vec::with_capacity(lengths.len() + 1);
    offsets.push(0usize);
    let mut end = 0usize;
    for &len in lengths {
        end = usize::try_from(len)
            .ok()
            .and_then(|len| end.checked_add(len))
            .ok_or_else(|| Error::other(format!("{coll}: a subtree's block lengths overflow usize")))?;
        offsets.push(end);
    }
    Ok(offsets)
}

/// The bytes of `ranks`' blocks of `buf` in rank order: straight from `buf` when they already lie
/// so, otherwise packed into `scratch` (reused across calls).
fn packed_blocks<'a>(buf: &'a [u8], layout: &Layout, ranks: Range<usize>, scratch: &'a mut Vec<u8>) -> &'a [u8] {
    if let Some(span) = layout.span(ranks.clone()) {
        return &buf[span];
    }
    scratch.clear();
    for rank in ranks {
        scratch.extend_from_slice(&buf[layout.block(rank)]);
    }
    scratch
}

/// MST scatterv (see the module docs): like [`scatter_mst`], with a lengths header before each
/// subtree's data unless the child is a leaf.
async fn scatterv_mst(
    comm: &Run<'_>,
    send: &[u8],
    layout: Option<&Layout>,
    recv: &mut [u8],
    root: usize,
) -> Result<()> {
    let coll = Collective::Scatterv;
    let rank = comm.rank();
    let node = Mst::new(comm.size(), root, rank);
    let parent = match node.parent {
        None => {
            let layout = root_layout(layout, coll)?;
            let (mut header, mut scratch, mut status) = (Lengths::new(), Vec::new(), Ok(()));
            for (child, ranks) in node.children() {
                if ranks.len() > 1 {
                    header.clear();
                    header.extend(ranks.clone().map(|r| layout.block(r).len() as u64));
                    status = status.and(comm.coll_send(bytemuck::cast_slice(&header), child, coll).await);
                }
                status =
                    status.and(comm.coll_send(packed_blocks(send, layout, ranks, &mut scratch), child, coll).await);
            }
            return status.and(copy_own_block(recv, &send[layout.block(rank)], coll));
        }
        // A leaf receives only its own block: straight into `recv`.
        Some(parent) if node.subtree.len() == 1 => return comm.coll_recv(recv, parent, coll).await,
        Some(parent) => parent,
    };
    let mut lengths: Lengths = vec![0; node.subtree.len()];
    comm.coll_recv(bytemuck::cast_slice_mut(&mut lengths), parent, coll).await?;
    let offsets = header_offsets(&lengths, coll)?;
    let mut held = vec![0u8; offsets[lengths.len()]];
    comm.coll_recv(&mut held, parent, coll).await?;
    // Positions inside the subtree, which starts with this rank.
    let local = |ranks: &Range<usize>| ranks.start - rank..ranks.end - rank;
    let mut status = Ok(());
    for (child, ranks) in node.children() {
        let local = local(&ranks);
        if ranks.len() > 1 {
            status = status.and(comm.coll_send(bytemuck::cast_slice(&lengths[local.clone()]), child, coll).await);
        }
        status = status.and(comm.coll_send(&held[offsets[local.start]..offsets[local.end]], child, coll).await);
    }
    status.and(copy_own_block(recv, &held[offsets[0]..offsets[1]], coll))
}

/// MST gatherv (see the module docs): each node sends its parent the lengths of its subtree's
/// blocks, then the blocks packed in rank order; the root checks the lengths against its counts.
async fn gatherv_mst(comm: &Run<'_>, send: &[u8], recv: &mut [u8], layout: Option<&Layout>, root: usize) -> Result<()> {
    let coll = Collective::Gatherv;
    let rank = comm.rank();
    let node = Mst::new(comm.size(), root, rank);
    let Some(parent) = node.parent else {
        let layout = root_layout(layout, coll)?;
        let mut status = copy_own_block(&mut recv[layout.block(rank)], send, coll);
        let (mut lengths, mut scratch) = (Lengths::new(), Vec::new());
        for (child, ranks) in node.children().rev() {
            lengths.clear();
            lengths.resize(ranks.len(), 0);
            comm.coll_recv(bytemuck::cast_slice_mut(&mut lengths), child, coll).await?;
            let offsets = header_offsets(&lengths, coll)?;
            let mismatch = ranks.clone().zip(&lengths).find(|&(r, &len)| layout.block(r).len() as u64 != len);
            if let Some((r, &len)) = mismatch {
                // Still take the data off the wire, then report.
                scratch.resize(offsets[ranks.len()], 0);
                status = status.and(comm.coll_recv(&mut scratch, child, coll).await);
                status = status.and(Err(Error::InvalidArgument(format!(
                    "{coll}: rank {r} sends {len} bytes but the root expects {}",
                    layout.block(r).len()
                ))));
            } else if let Some(span) = layout.span(ranks.clone()) {
                status = status.and(comm.coll_recv(&mut recv[span], child, coll).await);
            } else {
                scratch.resize(offsets[ranks.len()], 0);
                status = status.and(comm.coll_recv(&mut scratch, child, coll).await);
                for (i, r) in ranks.enumerate() {
                    recv[layout.block(r)].copy_from_slice(&scratch[offsets[i]..offsets[i + 1]]);
                }
            }
        }
        return status;
    };
    let mut lengths: Lengths = Vec::with_capacity(node.subtree.len());
    lengths.push(send.len() as u64);
    if node.subtree.len() == 1 {
        comm.coll_send(bytemuck::cast_slice(&lengths), parent, coll).await?;
        return comm.coll_send(send, parent, coll).await;
    }
    let mut held = send.to_vec();
    let mut status = Ok(());
    // Smallest subtree first: as this rank's subtree starts with itself, that is rank order.
    for (child, ranks) in node.children().rev() {
        let at = lengths.len();
        lengths.resize(at + ranks.len(), 0);
        status = status.and(comm.coll_recv(bytemuck::cast_slice_mut(&mut lengths[at..]), child, coll).await);
        let incoming = header_offsets(&lengths[at..], coll)?[ranks.len()];
        let start = held.len();
        held.resize(start + incoming, 0);
        status = status.and(comm.coll_recv(&mut held[start..], child, coll).await);
    }
    status = status.and(comm.coll_send(bytemuck::cast_slice(&lengths), parent, coll).await);
    status.and(comm.coll_send(&held, parent, coll).await)
}
