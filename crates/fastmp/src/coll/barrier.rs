//! Barrier algorithms: gather+bcast of empty messages, binomial tree, dissemination (BDE).

use super::select::{Algorithm, Collective};
use super::transport::Run;
use super::tree::{binomial_children, binomial_parent, send_down};
use crate::error::Result;

const BARRIER: Collective = Collective::Barrier;

pub(super) async fn barrier(comm: &Run<'_>, algorithm: Algorithm) -> Result<()> {
    match algorithm {
        Algorithm::GatherBcast => gather_bcast(comm).await,
        Algorithm::Bt => bt(comm).await,
        Algorithm::Bde => bde(comm).await,
        other => Err(Collective::Barrier.unsupported(other)),
    }
}

/// Flat "duplex": every other rank reports to rank 0, which releases them all once everyone
/// has arrived.
async fn gather_bcast(comm: &Run<'_>) -> Result<()> {
    if comm.rank() != 0 {
        comm.coll_send(&[], 0, BARRIER).await?;
        return comm.coll_recv(&mut [], 0, BARRIER).await;
    }
    let mut arrivals = comm.batch();
    for rank in 1..comm.size() {
        arrivals.irecv(&mut [], rank, BARRIER)?;
    }
    arrivals.wait_all().await?;
    let mut releases = comm.batch();
    for rank in 1..comm.size() {
        releases.isend(&[], rank, BARRIER)?;
    }
    releases.wait_all().await
}

/// Binomial fan-in to rank 0, then binomial fan-out from it.
async fn bt(comm: &Run<'_>) -> Result<()> {
    let (rank, np) = (comm.rank(), comm.size());
    let parent = binomial_parent(rank);
    for child in binomial_children(rank, np) {
        comm.coll_recv(&mut [], child, BARRIER).await?;
    }
    if let Some(parent) = parent {
        comm.coll_send(&[], parent, BARRIER).await?;
    }
    send_down(comm, &mut [], parent, binomial_children(rank, np).rev(), BARRIER).await
}

/// Dissemination: in round `k` each rank signals `rank + 2^k` and waits for `rank - 2^k`
/// (mod np); after `ceil(log2 np)` rounds every rank has transitively heard from all others.
async fn bde(comm: &Run<'_>) -> Result<()> {
    let (rank, np) = (comm.rank(), comm.size());
    let mut distance = 1;
    while distance < np {
        comm.coll_sendrecv(&[], (rank + distance) % np, &mut [], (rank + np - distance) % np, BARRIER).await?;
        distance *= 2;
    }
    Ok(())
}
