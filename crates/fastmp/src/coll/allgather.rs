//! Allgather(v) algorithms: flat, binomial, recursive doubling, ring, gather+bcast.
//!
//! Every algorithm writes the blocks straight into `recv` at their final positions. The only
//! staging buffer is for an allgatherv layout whose blocks are not packed in rank order, in
//! gather+bcast, BT and BDE (which move intervals of ranks as one message). Once a rank has
//! started, it runs its whole message pattern even if one exchange failed (a peer disagreeing on
//! the lengths) and returns the first error, so a mismatch on some ranks never leaves the others
//! hanging.

use std::ops::Range;

use super::pattern::{Fold, recursive_doubling, ring_allgather};
use super::select::{Algorithm, Collective, Pick};
use super::transport::Run;
use super::tree::{binomial_children, binomial_parent, binomial_subtree};
use super::vector::{Layout, carve, carve_blocks, copy_own_block, equal_blocks, equal_chunks, place_own_block};
use crate::error::Result;

/// `send` is `None` in place (MPI_IN_PLACE): this rank's block already lies in `recv`.
pub(super) async fn allgather(
    comm: &Run<'_>,
    send: Option<&[u8]>,
    recv: &mut [u8],
    algorithm: Algorithm,
) -> Result<()> {
    let coll = Collective::Allgather;
    let (np, me) = (comm.size(), comm.rank());
    let block = send.map_or(recv.len() / np, <[u8]>::len);
    // Equal blocks by arithmetic: no layout tables on the small-message path.
    let bytes = |ranks: Range<usize>| equal_blocks(ranks, block);
    let in_place = |recv: &mut [u8]| place_own_block(&mut recv[bytes(me..me + 1)], send, coll);
    match algorithm {
        Algorithm::Nbft => {
            let (below, from_me) = recv.split_at_mut(me * block);
            let rotated = equal_chunks(from_me, block, np - me).chain(equal_chunks(below, block, me));
            flat_nonblocking(comm, send, rotated, coll).await
        }
        Algorithm::Bt => in_place(recv).and(binomial(comm, recv, bytes, coll).await),
        Algorithm::Bde => in_place(recv).and(bde(comm, recv, bytes, coll).await),
        Algorithm::Bkt => in_place(recv).and(ring_allgather(comm, recv, |rank| bytes(rank..rank + 1), coll).await),
        Algorithm::GatherBcast => {
            let own;
            let send = match send {
                Some(send) => send,
                None => {
                    own = recv[bytes(me..me + 1)].to_vec();
                    &own
                }
            };
            let gathered = comm.dispatch_gather(send, recv, 0, Pick::Tuned).await;
            // Both phases always run (see the module docs).
            gathered.and(bcast_from_rank0(comm, recv).await)
        }
        other => Err(coll.unsupported(other)),
    }
}

/// `send` is `None` in place, as for [`allgather`].
pub(super) async fn allgatherv(
    comm: &Run<'_>,
    send: Option<&[u8]>,
    recv: &mut [u8],
    layout: &Layout,
    algorithm: Algorithm,
) -> Result<()> {
    let coll = Collective::Allgatherv;
    let (np, me) = (comm.size(), comm.rank());
    match algorithm {
        Algorithm::Nbft => {
            let mut blocks = carve_blocks(recv, layout, np);
            blocks.rotate_left(me);
            flat_nonblocking(comm, send, blocks, coll).await
        }
        Algorithm::Bt => {
            in_rank_order(comm, send, recv, layout, async |buf, bytes| binomial(comm, buf, bytes, coll).await).await
        }
        Algorithm::Bde => {
            in_rank_order(comm, send, recv, layout, async |buf, bytes| bde(comm, buf, bytes, coll).await).await
        }
        Algorithm::Bkt => place_own_block(&mut recv[layout.block(me)], send, coll)
            .and(ring_allgather(comm, recv, |r| layout.block(r), coll).await),
        Algorithm::GatherBcast => gatherv_bcast(comm, send, recv, layout).await,
        other => Err(coll.unsupported(other)),
    }
}

/// Runs `gather` (BT, BDE) on a buffer holding the blocks in rank order without gaps, where an
/// interval of ranks is one byte range (`bytes(ranks)`), as the tree algorithms need: `recv`
/// itself when the layout already is so (the usual case), otherwise a packed copy that is
/// unpacked into the blocks of `recv` afterwards (bytes between the blocks are never written).
/// Every rank knows the layout, so all pick the same message pattern.
async fn in_rank_order(
    comm: &Run<'_>,
    send: Option<&[u8]>,
    recv: &mut [u8],
    layout: &Layout,
    gather: impl AsyncFnOnce(&mut [u8], &dyn Fn(Range<usize>) -> Range<usize>) -> Result<()>,
) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let offsets = layout.packed_offsets();
    let bytes = |ranks: Range<usize>| offsets[ranks.start]..offsets[ranks.end];
    let own = |buf: &mut [u8]| place_own_block(&mut buf[bytes(me..me + 1)], send, Collective::Allgatherv);
    if let Some(span) = layout.span(0..np) {
        let buf = &mut recv[span];
        let own_copied = own(buf);
        return own_copied.and(gather(buf, &bytes).await);
    }
    let mut packed = vec![0u8; offsets[np]];
    let own_copied = match send {
        Some(_) => own(&mut packed),
        None => copy_own_block(&mut packed[bytes(me..me + 1)], &recv[layout.block(me)], Collective::Allgatherv),
    };
    own_copied.and(gather(&mut packed, &bytes).await)?;
    for rank in 0..np {
        recv[layout.block(rank)].copy_from_slice(&packed[bytes(rank..rank + 1)]);
    }
    Ok(())
}

/// nbFT: every rank starts receives of all other blocks and sends of its own to all others.
/// `rotated` yields the blocks of `recv` starting with this rank's own, then those of the ranks
/// above it (wrapping around), so the ranks do not all send to rank 0 first.
/// In place (`send` is `None`), this rank's block of `recv` is what it sends.
async fn flat_nonblocking<'a>(
    comm: &Run<'_>,
    send: Option<&'a [u8]>,
    rotated: impl IntoIterator<Item = &'a mut [u8]>,
    coll: Collective,
) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let mut blocks = rotated.into_iter();
    let own = blocks.next().unwrap_or_default();
    let (copied, send) = match send {
        Some(send) => (copy_own_block(own, send, coll), send),
        None => (Ok(()), &*own),
    };
    let mut pending = comm.batch();
    for (k, block) in (1..np).zip(blocks) {
        let peer = (me + k) % np;
        pending.irecv(block, peer, coll)?;
        pending.isend(send, peer, coll)?;
    }
    copied.and(pending.wait_all().await)
}

/// BT: binomial gather to rank 0 (each child sends its whole subtree's blocks in one message),
/// then binomial bcast of the whole buffer from rank 0. `buf` holds the blocks in rank order,
/// this rank's own already in place; `bytes(ranks)` is the byte range of an interval of ranks.
async fn binomial(
    comm: &Run<'_>,
    buf: &mut [u8],
    bytes: impl Fn(Range<usize>) -> Range<usize>,
    coll: Collective,
) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let mut status = Ok(());
    for child in binomial_children(me, np) {
        status = status.and(comm.coll_recv(&mut buf[bytes(binomial_subtree(child, np))], child, coll).await);
    }
    if let Some(parent) = binomial_parent(me) {
        status = status.and(comm.coll_send(&buf[bytes(binomial_subtree(me, np))], parent, coll).await);
        status = status.and(comm.coll_recv(buf, parent, coll).await);
    }
    for child in binomial_children(me, np).rev() {
        status = status.and(comm.coll_send(buf, child, coll).await);
    }
    status
}

/// BDE: recursive doubling when np is a power of two, Bruck's algorithm otherwise (same
/// arguments as [`binomial`]).
async fn bde(
    comm: &Run<'_>,
    buf: &mut [u8],
    bytes: impl Fn(Range<usize>) -> Range<usize>,
    coll: Collective,
) -> Result<()> {
    let np = comm.size();
    if np.is_power_of_two() {
        // The fold of a power of two keeps every rank: virtual ranks are the real ones.
        recursive_doubling(comm, buf, &Fold::new(np), comm.rank(), |rank| bytes(0..rank).end, coll).await
    } else {
        bruck(comm, buf, bytes, coll).await
    }
}

/// Bruck's allgather, used by BDE when np is not a power of two: ceil(log2(np)) steps. Before
/// the step with distance `d` a rank holds blocks `rank..rank + d` (mod np); it sends the first
/// `min(d, np - d)` of them to `rank - d` and receives as many, starting at block `rank + d`,
/// from `rank + d`. Blocks stay at their final positions in `buf`, so no rotation is needed;
/// a run of blocks that wraps past the end goes as two messages (split at the same block
/// index on both sides, decided by ranks alone so both sides agree even on empty blocks).
async fn bruck(
    comm: &Run<'_>,
    buf: &mut [u8],
    bytes: impl Fn(Range<usize>) -> Range<usize>,
    coll: Collective,
) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    // The at most two intervals of ranks `first..first + count` (mod np).
    let wrapped = |first: usize, count: usize| {
        let end = first + count;
        [first..end.min(np), 0..end.saturating_sub(np)]
    };
    let mut status = Ok(());
    let mut dist = 1;
    while dist < np {
        let count = dist.min(np - dist);
        let (to, from) = ((me + np - dist) % np, (me + dist) % np);
        let [out_a, out_b] = wrapped(me, count);
        let [in_a, in_b] = wrapped(from, count);
        let (send_wraps, recv_wraps) = (!out_b.is_empty(), !in_b.is_empty());
        let [out_a, out_b, in_a, in_b] = carve(buf, [out_a, out_b, in_a, in_b].map(&bytes));
        // Starting only fails if the job is aborted; length mismatches show up in `wait_all`.
        let mut pending = comm.batch();
        pending.irecv(in_a, from, coll)?;
        if recv_wraps {
            pending.irecv(in_b, from, coll)?;
        }
        pending.isend(out_a, to, coll)?;
        if send_wraps {
            pending.isend(out_b, to, coll)?;
        }
        status = status.and(pending.wait_all().await);
        dist *= 2;
    }
    status
}

/// Bcast of `buf` from rank 0 with the configured algorithm, except scatter+allgather: its
/// allgatherv could be gather+bcast again and recurse forever.
async fn bcast_from_rank0(comm: &Run<'_>, buf: &mut [u8]) -> Result<()> {
    comm.dispatch_bcast(buf, 0, Pick::Excluding(Algorithm::ScatterAllgather)).await
}

/// Gatherv to rank 0, then bcast. A layout whose blocks follow each other in rank order is
/// broadcast in place; any other is packed at rank 0 and unpacked after the bcast, so bytes of
/// `recv` outside the blocks are never written.
async fn gatherv_bcast(comm: &Run<'_>, send: Option<&[u8]>, recv: &mut [u8], layout: &Layout) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let own;
    let send = match send {
        Some(send) => send,
        None => {
            own = recv[layout.block(me)].to_vec();
            &own
        }
    };
    let gathered = comm.dispatch_gatherv(send, recv, (me == 0).then_some(layout), 0, Pick::Tuned).await;
    if let Some(span) = layout.span(0..np) {
        return gathered.and(bcast_from_rank0(comm, &mut recv[span]).await);
    }
    let offsets = layout.packed_offsets();
    let packed_block = |rank: usize| offsets[rank]..offsets[rank + 1];
    let mut packed = vec![0u8; offsets[np]];
    if me == 0 {
        (0..np).for_each(|r| packed[packed_block(r)].copy_from_slice(&recv[layout.block(r)]));
    }
    let status = gathered.and(bcast_from_rank0(comm, &mut packed).await);
    if me != 0 {
        (0..np).for_each(|r| recv[layout.block(r)].copy_from_slice(&packed[packed_block(r)]));
    }
    status
}

#[cfg(test)]
mod tests {
    use crate::coll::{Collective, Tuning};
    use crate::{Comm, Result};

    const SENTINEL: u32 = u32::MAX;

    /// Uneven counts with zeros, and displacements in rank order: packed (`gap` 0, where blocks
    /// travel straight from and into the caller's buffer) or with `gap` elements before each.
    fn ascending(np: usize, gap: usize) -> (Vec<usize>, Vec<usize>, usize) {
        let counts: Vec<usize> = (0..np).map(|r| if r % 3 == 1 { 0 } else { 1 + r % 4 }).collect();
        let mut displs = Vec::with_capacity(np);
        let mut at = 0;
        for &count in &counts {
            at += gap;
            displs.push(at);
            at += count;
        }
        (counts, displs, at + gap)
    }

    fn value(rank: usize, i: usize) -> u32 {
        (rank * 1000 + i) as u32
    }

    fn expected(counts: &[usize], displs: &[usize], len: usize) -> Vec<u32> {
        let mut buf = vec![SENTINEL; len];
        for (rank, (&count, &displ)) in counts.iter().zip(displs).enumerate() {
            (0..count).for_each(|i| buf[displ + i] = value(rank, i));
        }
        buf
    }

    /// Runs `body(comm, gap)` on np 1..=9 for every algorithm of `colls[0]`, forced for all of
    /// `colls` (which must share their algorithms), and gaps `0..=np / 2`.
    fn each_forced(colls: &[Collective], body: impl Fn(&Comm, usize) -> Result<()> + Sync) {
        for np in 1..=9 {
            for &algorithm in colls[0].algorithms() {
                crate::run(np, |world| {
                    let tuning = colls.iter().try_fold(Tuning::defaults(), |t, &coll| t.force(coll, algorithm))?;
                    let comm = world.with_tuning(tuning);
                    (0..=comm.size() / 2).try_for_each(|gap| body(&comm, gap))
                })
                .unwrap_or_else(|e| panic!("{colls:?} {algorithm} np {np}: {e}"));
            }
        }
    }

    /// The collectives suite uses reversed layouts; these cover blocks already in rank order.
    #[test]
    fn v_collectives_with_blocks_in_rank_order() {
        each_forced(&[Collective::Allgatherv], |comm, gap| {
            let (counts, displs, len) = ascending(comm.size(), gap);
            let me = comm.rank();
            let send: Vec<u32> = (0..counts[me]).map(|i| value(me, i)).collect();
            let mut recv = vec![SENTINEL; len];
            comm.allgatherv(&send, &mut recv, &counts, &displs)?;
            assert_eq!(recv, expected(&counts, &displs, len), "gap {gap}");
            Ok(())
        });
        each_forced(&[Collective::Gatherv, Collective::Scatterv], |comm, gap| {
            let (counts, displs, len) = ascending(comm.size(), gap);
            let me = comm.rank();
            let own: Vec<u32> = (0..counts[me]).map(|i| value(me, i)).collect();
            for root in 0..comm.size() {
                let is_root = me == root;
                let (c, d): (&[usize], &[usize]) = if is_root { (&counts, &displs) } else { (&[], &[]) };
                let mut gathered = vec![SENTINEL; if is_root { len } else { 0 }];
                comm.gatherv(&own, &mut gathered, c, d, root)?;
                if is_root {
                    assert_eq!(gathered, expected(&counts, &displs, len), "gatherv gap {gap} root {root}");
                }
                let mut scattered = vec![SENTINEL; counts[me]];
                comm.scatterv(&gathered, c, d, &mut scattered, root)?;
                assert_eq!(scattered, own, "scatterv gap {gap} root {root}");
            }
            Ok(())
        });
    }
}
