//! Allgather(v) algorithms: flat, binomial, recursive doubling, ring, gather+bcast.
//!
//! Every algorithm writes the blocks straight into `recv` at their final positions (no staging
//! buffer except gather+bcast of a gapped allgatherv layout). Once a rank has started, it runs
//! its whole message pattern even if one exchange failed (a peer disagreeing on the lengths) and
//! returns the first error, so a mismatch on some ranks never leaves the others hanging.

use std::ops::Range;

use super::Layout;
use super::select::{Algorithm, Collective};
use super::tree::{binomial_children, binomial_parent};
use super::{bcast, native, scatter_gather};
use crate::comm::Comm;
use crate::error::{Error, Result};

pub(super) fn allgather(comm: &Comm, send: &[u8], recv: &mut [u8], algorithm: Algorithm) -> Result<()> {
    let coll = Collective::Allgather;
    match algorithm {
        Algorithm::Nbft => flat_nonblocking(comm, send, recv, &Layout::uniform(comm.size(), send.len()), coll),
        Algorithm::Bt => binomial(comm, send, recv),
        Algorithm::Bde if comm.size().is_power_of_two() => recursive_doubling(comm, send, recv),
        Algorithm::Bde => bruck(comm, send, recv),
        Algorithm::Bkt => ring(comm, send, recv, &Layout::uniform(comm.size(), send.len()), coll),
        Algorithm::GatherBcast => {
            let gathered = match comm.algorithm_for(Collective::Gather, send.len(), true) {
                Algorithm::Native => native::gather(comm, send, recv, 0),
                algorithm => scatter_gather::gather(comm, send, recv, 0, algorithm),
            };
            // Both phases always run (see the module docs).
            gathered.and(bcast_from_rank0(comm, recv))
        }
        other => Err(coll.unsupported(other)),
    }
}

pub(super) fn allgatherv(
    comm: &Comm,
    send: &[u8],
    recv: &mut [u8],
    layout: &Layout,
    algorithm: Algorithm,
) -> Result<()> {
    let coll = Collective::Allgatherv;
    match algorithm {
        Algorithm::Nbft => flat_nonblocking(comm, send, recv, layout, coll),
        Algorithm::Bkt => ring(comm, send, recv, layout, coll),
        Algorithm::GatherBcast => gatherv_bcast(comm, send, recv, layout),
        other => Err(coll.unsupported(other)),
    }
}

/// Copies a rank's own block; a length difference means the caller's layouts disagree.
pub(super) fn copy_own_block(dst: &mut [u8], src: &[u8], coll: Collective) -> Result<()> {
    if dst.len() != src.len() {
        return Err(Error::InvalidArgument(format!(
            "{coll}: this rank sends itself {} bytes but expects {}",
            src.len(),
            dst.len()
        )));
    }
    dst.copy_from_slice(src);
    Ok(())
}

/// Runs every step even after one fails and returns the first error, so this rank still does
/// its part of the message pattern for the others.
pub(super) fn all_steps(steps: impl IntoIterator<Item = Result<()>>) -> Result<()> {
    let mut first = Ok(());
    for step in steps {
        first = first.and(step);
    }
    first
}

/// Walks the non-empty `range(i)` in address order and hands each piece of `buf` to `put`;
/// empty ranges get an empty slice wherever they point (layouts allow that).
fn carve_with<'a>(
    buf: &'a mut [u8],
    order: &mut [usize],
    range: impl Fn(usize) -> Range<usize>,
    mut put: impl FnMut(usize, &'a mut [u8]),
) {
    order.sort_unstable_by_key(|&i| range(i).start);
    let (mut rest, mut offset) = (buf, 0);
    for &i in order.iter() {
        let r = range(i);
        if r.is_empty() {
            put(i, &mut []);
            continue;
        }
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(r.start - offset);
        let (piece, tail) = tail.split_at_mut(r.len());
        put(i, piece);
        (rest, offset) = (tail, r.end);
    }
}

/// Splits `buf` into the `N` byte ranges (in-bounds, pairwise disjoint unless empty), in the
/// given order, so one buffer can feed a send and a receive at once without `unsafe`.
pub(super) fn carve<const N: usize>(buf: &mut [u8], ranges: [Range<usize>; N]) -> [&mut [u8]; N] {
    let mut pieces: [&mut [u8]; N] = std::array::from_fn(|_| Default::default());
    let mut order: [usize; N] = std::array::from_fn(|i| i);
    carve_with(buf, &mut order, |i| ranges[i].clone(), |i, piece| pieces[i] = piece);
    pieces
}

/// Splits `buf` into the blocks of `layout`, indexed by rank.
pub(super) fn carve_blocks<'a>(buf: &'a mut [u8], layout: &Layout, np: usize) -> Vec<&'a mut [u8]> {
    if layout.is_ascending() {
        // Blocks in rank order: one pass, no sorting.
        let (mut rest, mut offset) = (buf, 0);
        return (0..np)
            .map(|r| {
                let block = layout.block(r);
                if block.is_empty() {
                    return Default::default();
                }
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(block.start - offset);
                let (piece, tail) = tail.split_at_mut(block.len());
                (rest, offset) = (tail, block.end);
                piece
            })
            .collect();
    }
    let mut pieces: Vec<&mut [u8]> = (0..np).map(|_| Default::default()).collect();
    let mut order: Vec<usize> = (0..np).collect();
    carve_with(buf, &mut order, |r| layout.block(r), |r, piece| pieces[r] = piece);
    pieces
}

/// nbFT: every rank starts receives of all other blocks and sends of its own to all others.
fn flat_nonblocking(comm: &Comm, send: &[u8], recv: &mut [u8], layout: &Layout, coll: Collective) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let mut blocks = carve_blocks(recv, layout, np);
    copy_own_block(blocks[me], send, coll)?;
    // Start with the next rank up, so the ranks do not all send to rank 0 first.
    blocks.rotate_left(me);
    let mut pending = comm.pending();
    for (k, block) in blocks.into_iter().enumerate().skip(1) {
        let peer = (me + k) % np;
        pending.irecv(block, peer, coll)?;
        pending.isend(send, peer, coll)?;
    }
    pending.wait_all()
}

/// BKT (ring): in step `s` each rank passes the block it received in step `s - 1` (its own in
/// step 0) to its right neighbour and receives the next one from its left: np - 1 steps.
fn ring(comm: &Comm, send: &[u8], recv: &mut [u8], layout: &Layout, coll: Collective) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    copy_own_block(&mut recv[layout.block(me)], send, coll)?;
    let (right, left) = ((me + 1) % np, (me + np - 1) % np);
    all_steps((0..np.saturating_sub(1)).map(|step| {
        let outgoing = (me + np - step) % np;
        let incoming = (me + np - step - 1) % np;
        let [out, inc] = carve(recv, [layout.block(outgoing), layout.block(incoming)]);
        comm.coll_sendrecv(out, right, inc, left, coll)
    }))
}

/// End of `rank`'s subtree in the binomial tree rooted at rank 0 ([`binomial_children`]): the
/// subtree is the contiguous ranks `rank..rank + lowbit(rank)` (clipped to np), so its blocks
/// are one contiguous range of `recv`.
fn subtree_end(rank: usize, np: usize) -> usize {
    if rank == 0 { np } else { (rank + (rank & rank.wrapping_neg())).min(np) }
}

/// BT: binomial gather to rank 0 (each child sends its whole subtree's blocks in one message),
/// then binomial bcast of the whole buffer from rank 0.
fn binomial(comm: &Comm, send: &[u8], recv: &mut [u8]) -> Result<()> {
    let coll = Collective::Allgather;
    let (np, me, block) = (comm.size(), comm.rank(), send.len());
    copy_own_block(&mut recv[me * block..(me + 1) * block], send, coll)?;
    let mut status = Ok(());
    for child in binomial_children(me, np) {
        let subtree = child * block..subtree_end(child, np) * block;
        status = status.and(comm.coll_recv(&mut recv[subtree], child, coll));
    }
    if let Some(parent) = binomial_parent(me) {
        let subtree = me * block..subtree_end(me, np) * block;
        status = status.and(comm.coll_send(&recv[subtree], parent, coll));
        status = status.and(comm.coll_recv(recv, parent, coll));
    }
    for child in binomial_children(me, np).rev() {
        status = status.and(comm.coll_send(recv, child, coll));
    }
    status
}

/// BDE for a power-of-two np: in step `k` each rank swaps the `2^k` blocks it has gathered so
/// far with partner `rank ^ 2^k`; log2(np) steps.
fn recursive_doubling(comm: &Comm, send: &[u8], recv: &mut [u8]) -> Result<()> {
    let coll = Collective::Allgather;
    let (np, me, block) = (comm.size(), comm.rank(), send.len());
    copy_own_block(&mut recv[me * block..(me + 1) * block], send, coll)?;
    let mut status = Ok(());
    let mut dist = 1;
    while dist < np {
        let partner = me ^ dist;
        let group = |rank: usize| (rank & !(dist - 1)) * block..((rank & !(dist - 1)) + dist) * block;
        let [out, inc] = carve(recv, [group(me), group(partner)]);
        status = status.and(comm.coll_sendrecv(out, partner, inc, partner, coll));
        dist *= 2;
    }
    status
}

/// Bruck's allgather, used by BDE when np is not a power of two: ceil(log2(np)) steps. Before
/// the step with distance `d` a rank holds blocks `rank..rank + d` (mod np); it sends the first
/// `min(d, np - d)` of them to `rank - d` and receives as many, starting at block `rank + d`,
/// from `rank + d`. Blocks stay at their final positions in `recv`, so no rotation is needed;
/// a run of blocks that wraps past the end goes as two messages (split at the same block
/// index on both sides).
fn bruck(comm: &Comm, send: &[u8], recv: &mut [u8]) -> Result<()> {
    let coll = Collective::Allgather;
    let (np, me, block) = (comm.size(), comm.rank(), send.len());
    copy_own_block(&mut recv[me * block..(me + 1) * block], send, coll)?;
    // The at most two byte ranges of blocks `first..first + count` (mod np).
    let wrapped = |first: usize, count: usize| {
        let end = first + count;
        [first * block..end.min(np) * block, 0..end.saturating_sub(np) * block]
    };
    let mut status = Ok(());
    let mut dist = 1;
    while dist < np {
        let count = dist.min(np - dist);
        let (to, from) = ((me + np - dist) % np, (me + dist) % np);
        let [out_a, out_b] = wrapped(me, count);
        let [in_a, in_b] = wrapped(from, count);
        let (send_wraps, recv_wraps) = (!out_b.is_empty(), !in_b.is_empty());
        let [out_a, out_b, in_a, in_b] = carve(recv, [out_a, out_b, in_a, in_b]);
        // Starting only fails if the job is aborted; length mismatches show up in `wait_all`.
        let mut pending = comm.pending();
        pending.irecv(in_a, from, coll)?;
        if recv_wraps {
            pending.irecv(in_b, from, coll)?;
        }
        pending.isend(out_a, to, coll)?;
        if send_wraps {
            pending.isend(out_b, to, coll)?;
        }
        status = status.and(pending.wait_all());
        dist *= 2;
    }
    status
}

/// Bcast of `buf` from rank 0 with the configured algorithm. Scatter+allgather is replaced by
/// the bcast fallback: it could select gather+bcast allgather again and recurse forever.
fn bcast_from_rank0(comm: &Comm, buf: &mut [u8]) -> Result<()> {
    match comm.algorithm_for(Collective::Bcast, buf.len(), true) {
        Algorithm::Native => native::bcast(comm, buf, 0),
        Algorithm::ScatterAllgather => bcast::bcast(comm, buf, 0, Collective::Bcast.fallback()),
        algorithm => bcast::bcast(comm, buf, 0, algorithm),
    }
}

/// Gatherv to rank 0, then bcast. A layout whose blocks follow each other in rank order is
/// broadcast in place; any other is packed at rank 0 and unpacked after the bcast, so bytes of
/// `recv` outside the blocks are never written.
fn gatherv_bcast(comm: &Comm, send: &[u8], recv: &mut [u8], layout: &Layout) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let gathered = match comm.algorithm_for(Collective::Gatherv, 0, true) {
        Algorithm::Native => native::gatherv(comm, send, recv, (me == 0).then_some(layout), 0),
        algorithm => scatter_gather::gatherv(comm, send, recv, (me == 0).then_some(layout), 0, algorithm),
    };
    let contiguous = (1..np).all(|r| layout.block(r).start == layout.block(r - 1).end);
    if contiguous {
        let span = layout.block(0).start..layout.block(np - 1).end;
        return gathered.and(bcast_from_rank0(comm, &mut recv[span]));
    }
    let mut packed = vec![0u8; layout.total_bytes()];
    let packed_blocks = (0..np).scan(0, |offset, r| {
        let len = layout.block(r).len();
        *offset += len;
        Some((*offset - len..*offset, layout.block(r)))
    });
    if me == 0 {
        packed_blocks.clone().for_each(|(p, b)| packed[p].copy_from_slice(&recv[b]));
    }
    let status = gathered.and(bcast_from_rank0(comm, &mut packed));
    if me != 0 {
        packed_blocks.for_each(|(p, b)| recv[b].copy_from_slice(&packed[p]));
    }
    status
}
