//! Bcast algorithms: flat trees, four-ary tree, MST, binomial, scatter+allgather.

use super::select::{Algorithm, Collective, Pick};
use super::transport::Run;
use super::tree::{
    Mst, absolute, binomial_children, binomial_parent, kary_children, kary_parent, relative, send_down, send_from_root,
};
use super::vector::{Layout, even_block, even_bound};
use crate::error::Result;

const BCAST: Collective = Collective::Bcast;

pub(super) async fn bcast(comm: &Run<'_>, buf: &mut [u8], root: usize, algorithm: Algorithm) -> Result<()> {
    let (rank, np) = (comm.rank(), comm.size());
    let rel = relative(rank, root, np);
    let to_absolute = move |rel| absolute(rel, root, np);
    match algorithm {
        Algorithm::Bft => flat(comm, buf, root, false).await,
        Algorithm::Nbft => flat(comm, buf, root, true).await,
        Algorithm::Fat => {
            send_down(
                comm,
                buf,
                kary_parent(rel, comm.tuning().kary_arity()).map(to_absolute),
                kary_children(rel, np, comm.tuning().kary_arity()).map(to_absolute),
                BCAST,
            )
            .await
        }
        Algorithm::Mst => {
            let node = Mst::new(np, root, rank);
            send_down(comm, buf, node.parent, node.children().map(|(child, _)| child), BCAST).await
        }
        Algorithm::Bt => {
            send_down(
                comm,
                buf,
                binomial_parent(rel).map(to_absolute),
                binomial_children(rel, np).rev().map(to_absolute),
                BCAST,
            )
            .await
        }
        // Boxed: its allgatherv may be gather+bcast, whose bcast comes back here (one level).
        Algorithm::ScatterAllgather => Box::pin(scatter_allgather(comm, buf, root)).await,
        other => Err(Collective::Bcast.unsupported(other)),
    }
}

/// The root sends the whole buffer to every other rank.
async fn flat(comm: &Run<'_>, buf: &mut [u8], root: usize, nonblocking: bool) -> Result<()> {
    if comm.rank() != root {
        return comm.coll_recv(buf, root, BCAST).await;
    }
    let buf: &[u8] = buf;
    send_from_root(comm, root, |_| buf, nonblocking, BCAST).await
}

/// Van de Geijn's long-message bcast: the root scatters `np` near-equal blocks (the split of
/// [`even_block`], at most `ceil(len / np)` bytes each), then all ranks allgather them, so the
/// root sends the buffer about once instead of `log2 np` times.
async fn scatter_allgather(comm: &Run<'_>, buf: &mut [u8], root: usize) -> Result<()> {
    let (rank, np, len) = (comm.rank(), comm.size(), buf.len());
    let displs: Vec<usize> = (0..np).map(|r| even_bound(len, np, r)).collect();
    let counts: Vec<usize> = (0..np).map(|r| even_block(len, np, r).len()).collect();
    let layout = Layout::new::<u8>(comm, "bcast blocks", &counts, &displs, len)?;
    // This rank's block lies inside `buf`, which the allgather writes, so it travels through a
    // temporary (the root's scatter just copies its own block there).
    let mut own = vec![0u8; counts[rank]];
    comm.dispatch_scatterv(buf, (rank == root).then_some(&layout), &mut own, root, Pick::Tuned).await?;
    // Gather+bcast does not come back here: its bcast excludes scatter+allgather.
    comm.dispatch_allgatherv(Some(&own), buf, &layout, Pick::Tuned).await
}
