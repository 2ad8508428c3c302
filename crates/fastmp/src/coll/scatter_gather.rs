//! Scatter(v) and gather(v) algorithms: flat trees and MST.

use std::ops::Range;

use super::Layout;
use super::select::{Algorithm, Collective};
use super::tree::{Mst, send_from_root};
use crate::comm::Comm;
use crate::error::{Error, Result};

pub(super) fn scatter(comm: &Comm, send: &[u8], recv: &mut [u8], root: usize, algorithm: Algorithm) -> Result<()> {
    let coll = Collective::Scatter;
    if algorithm == Algorithm::Mst {
        return scatter_mst(comm, send, recv, root);
    }
    let nonblocking = nonblocking(coll, algorithm)?;
    if comm.rank() != root {
        return comm.coll_recv(recv, root, coll);
    }
    scatter_flat_root(comm, send, uniform_blocks(recv.len()), recv, nonblocking, coll)
}

pub(super) fn scatterv(
    comm: &Comm,
    send: &[u8],
    layout: Option<&Layout>,
    recv: &mut [u8],
    root: usize,
    algorithm: Algorithm,
) -> Result<()> {
    let coll = Collective::Scatterv;
    let nonblocking = nonblocking(coll, algorithm)?;
    if comm.rank() != root {
        return comm.coll_recv(recv, root, coll);
    }
    let layout = root_layout(layout, coll)?;
    scatter_flat_root(comm, send, |rank| layout.block(rank), recv, nonblocking, coll)
}

pub(super) fn gather(comm: &Comm, send: &[u8], recv: &mut [u8], root: usize, algorithm: Algorithm) -> Result<()> {
    let coll = Collective::Gather;
    if algorithm == Algorithm::Mst {
        return gather_mst(comm, send, recv, root);
    }
    let nonblocking = nonblocking(coll, algorithm)?;
    if comm.rank() != root {
        return comm.coll_send(send, root, coll);
    }
    gather_flat_root(comm, send, recv, uniform_blocks(send.len()), 0..comm.size(), nonblocking, coll)
}

pub(super) fn gatherv(
    comm: &Comm,
    send: &[u8],
    recv: &mut [u8],
    layout: Option<&Layout>,
    root: usize,
    algorithm: Algorithm,
) -> Result<()> {
    let coll = Collective::Gatherv;
    let nonblocking = nonblocking(coll, algorithm)?;
    if comm.rank() != root {
        return comm.coll_send(send, root, coll);
    }
    let layout = root_layout(layout, coll)?;
    let block = |rank| layout.block(rank);
    if layout.is_ascending() {
        // Blocks in rank order (the usual case) need no sorted copy of the ranks.
        return gather_flat_root(comm, send, recv, block, 0..comm.size(), nonblocking, coll);
    }
    let mut by_offset: Vec<usize> = (0..comm.size()).collect();
    by_offset.sort_by_key(|&rank| layout.block(rank).start);
    gather_flat_root(comm, send, recv, block, by_offset.into_iter(), nonblocking, coll)
}

/// Whether a flat-tree `algorithm` uses nonblocking point-to-point; other algorithms are errors.
fn nonblocking(coll: Collective, algorithm: Algorithm) -> Result<bool> {
    match algorithm {
        Algorithm::Bft => Ok(false),
        Algorithm::Nbft => Ok(true),
        other => Err(coll.unsupported(other)),
    }
}

/// Byte ranges of `np` consecutive blocks of `block` bytes each.
fn uniform_blocks(block: usize) -> impl Fn(usize) -> Range<usize> {
    move |rank| rank * block..(rank + 1) * block
}

/// The root's layout, which the public API always passes (`None` only on other ranks).
fn root_layout(layout: Option<&Layout>, coll: Collective) -> Result<&Layout> {
    layout.ok_or_else(|| Error::other(format!("{coll}: the root has no block layout")))
}

/// Copies the root's (or an MST node's) own block, which never travels as a message.
fn copy_own_block(dst: &mut [u8], src: &[u8], coll: Collective) -> Result<()> {
    if dst.len() != src.len() {
        return Err(Error::InvalidArgument(format!(
            "{coll}: this rank's own block has {} bytes but its place {}",
            src.len(),
            dst.len()
        )));
    }
    dst.copy_from_slice(src);
    Ok(())
}

/// Root side of the flat scatters: send each rank `send[block_of(rank)]`.
fn scatter_flat_root(
    comm: &Comm,
    send: &[u8],
    block_of: impl Fn(usize) -> Range<usize>,
    recv: &mut [u8],
    nonblocking: bool,
    coll: Collective,
) -> Result<()> {
    let root = comm.rank();
    copy_own_block(recv, &send[block_of(root)], coll)?;
    send_from_root(comm, root, |rank| &send[block_of(rank)], nonblocking, coll)
}

/// Root side of the flat gathers: receive each rank's block into `recv[block_of(rank)]`, in
/// rank order with blocking receives, or all posted at once. `by_offset` lists the ranks with
/// their blocks in increasing position, which lets the posted receives split `recv` into
/// disjoint slices (blocks are validated not to overlap; empty ones may lie anywhere).
fn gather_flat_root(
    comm: &Comm,
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
            if rank == root { copy_own_block(slot, send, coll)? } else { comm.coll_recv(slot, rank, coll)? }
        }
        return Ok(());
    }
    let mut receives = comm.pending();
    let (mut rest, mut rest_start) = (recv, 0);
    for rank in by_offset {
        let block = block_of(rank);
        let slot: &mut [u8] = if block.is_empty() {
            &mut []
        } else {
            let (_, from_block) = std::mem::take(&mut rest).split_at_mut(block.start - rest_start);
            let (slot, after) = from_block.split_at_mut(block.len());
            (rest, rest_start) = (after, block.end);
            slot
        };
        if rank == root { copy_own_block(slot, send, coll)? } else { receives.irecv(slot, rank, coll)? }
    }
    receives.wait_all()
}

/// Byte range, inside a buffer holding the blocks of ranks `held_from..`, of the blocks of `ranks`.
fn bytes_of(ranks: &Range<usize>, held_from: usize, block: usize) -> Range<usize> {
    (ranks.start - held_from) * block..(ranks.end - held_from) * block
}

/// MST scatter: each node receives its whole subtree's blocks (an interval of ranks, so
/// contiguous) from its parent, keeps its own and forwards each child's subtree, largest first.
fn scatter_mst(comm: &Comm, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    let coll = Collective::Scatter;
    let (rank, block) = (comm.rank(), recv.len());
    let node = Mst::new(comm.size(), root, rank);
    let mut subtree_blocks = Vec::new();
    let held: &[u8] = match node.parent {
        None => send,
        // A leaf receives only its own block: straight into `recv`.
        Some(parent) if node.subtree.len() == 1 => return comm.coll_recv(recv, parent, coll),
        Some(parent) => {
            subtree_blocks.resize(node.subtree.len() * block, 0);
            comm.coll_recv(&mut subtree_blocks, parent, coll)?;
            &subtree_blocks
        }
    };
    for (child, ranks) in node.children() {
        comm.coll_send(&held[bytes_of(&ranks, node.subtree.start, block)], child, coll)?;
    }
    copy_own_block(recv, &held[bytes_of(&(rank..rank + 1), node.subtree.start, block)], coll)
}

/// MST gather, the mirror of [`scatter_mst`]: each node collects its children's subtrees
/// (smallest first) next to its own block and sends the lot to its parent.
fn gather_mst(comm: &Comm, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    let coll = Collective::Gather;
    let (rank, block) = (comm.rank(), send.len());
    let node = Mst::new(comm.size(), root, rank);
    let mut subtree_blocks = Vec::new();
    let held: &mut [u8] = match node.parent {
        None => recv,
        Some(parent) if node.subtree.len() == 1 => return comm.coll_send(send, parent, coll),
        Some(_) => {
            subtree_blocks.resize(node.subtree.len() * block, 0);
            &mut subtree_blocks
        }
    };
    copy_own_block(&mut held[bytes_of(&(rank..rank + 1), node.subtree.start, block)], send, coll)?;
    let children: Vec<(usize, Range<usize>)> = node.children().collect();
    for (child, ranks) in children.into_iter().rev() {
        comm.coll_recv(&mut held[bytes_of(&ranks, node.subtree.start, block)], child, coll)?;
    }
    match node.parent {
        Some(parent) => comm.coll_send(held, parent, coll),
        None => Ok(()),
    }
}
