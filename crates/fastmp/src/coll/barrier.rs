//! Barrier algorithms: gather+bcast of empty messages, binomial tree, dissemination (BDE).

use super::select::{Algorithm, Collective};
use super::tree::{binomial_children, binomial_parent, send_down};
use crate::comm::Comm;
use crate::error::Result;

const BARRIER: Collective = Collective::Barrier;

pub(super) fn barrier(comm: &Comm, algorithm: Algorithm) -> Result<()> {
    match algorithm {
        Algorithm::GatherBcast => gather_bcast(comm),
        Algorithm::Bt => bt(comm),
        Algorithm::Bde => bde(comm),
        other => Err(Collective::Barrier.unsupported(other)),
    }
}

/// Flat "duplex": every other rank reports to rank 0, which releases them all once everyone
/// has arrived.
fn gather_bcast(comm: &Comm) -> Result<()> {
    if comm.rank() != 0 {
        comm.coll_send(&[], 0, BARRIER)?;
        return comm.coll_recv(&mut [], 0, BARRIER);
    }
    let mut arrivals = comm.pending();
    for rank in 1..comm.size() {
        arrivals.irecv(&mut [], rank, BARRIER)?;
    }
    arrivals.wait_all()?;
    let mut releases = comm.pending();
    for rank in 1..comm.size() {
        releases.isend(&[], rank, BARRIER)?;
    }
    releases.wait_all()
}

/// Binomial fan-in to rank 0, then binomial fan-out from it.
fn bt(comm: &Comm) -> Result<()> {
    let (rank, np) = (comm.rank(), comm.size());
    let parent = binomial_parent(rank);
    for child in binomial_children(rank, np) {
        comm.coll_recv(&mut [], child, BARRIER)?;
    }
    if let Some(parent) = parent {
        comm.coll_send(&[], parent, BARRIER)?;
    }
    send_down(comm, &mut [], parent, binomial_children(rank, np).rev(), BARRIER)
}

/// Dissemination: in round `k` each rank signals `rank + 2^k` and waits for `rank - 2^k`
/// (mod np); after `ceil(log2 np)` rounds every rank has transitively heard from all others.
fn bde(comm: &Comm) -> Result<()> {
    let (rank, np) = (comm.rank(), comm.size());
    let mut distance = 1;
    while distance < np {
        comm.coll_sendrecv(&[], (rank + distance) % np, &mut [], (rank + np - distance) % np, BARRIER)?;
        distance *= 2;
    }
    Ok(())
}
