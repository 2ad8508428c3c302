//! Scan / exscan algorithms: flat, linear chain, recursive doubling. All combine in rank order.

use bytemuck::Pod;

use super::fold::{exchange_flat, vector_of};
use super::op::Op;
use super::op::fold_in_rank_order;
use super::select::{Algorithm, Collective};
use super::transport::Run;
use crate::error::Result;

const COLL: Collective = Collective::Scan;

pub(super) async fn scan<T: Pod>(
    comm: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    exclusive: bool,
    algorithm: Algorithm,
) -> Result<()> {
    match algorithm {
        Algorithm::Nbft => flat(comm, send, recv, op, exclusive).await,
        Algorithm::Linear => chain(comm, send, recv, op, exclusive).await,
        Algorithm::Bde => recursive_doubling(comm, send, recv, op, exclusive).await,
        other => Err(Collective::Scan.unsupported(other)),
    }
}

/// Every rank sends its vector to all higher ranks (nonblocking) and combines what it got from
/// the lower ones in rank order.
async fn flat<T: Pod>(comm: &Run<'_>, send: &[T], recv: &mut [T], op: &dyn Op<T>, exclusive: bool) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let lower = exchange_flat(comm, send, 0..me, me + 1..np, COLL).await?;
    // Ranks 0..=me (inclusive) or 0..me (exclusive) take part; `lower` holds ranks 0..me.
    let ranks = if exclusive { 0..me } else { 0..me + 1 };
    fold_in_rank_order(op, recv, ranks, |r| vector_of(r, me, send, &lower))
}

/// Chain: receive the inclusive prefix of ranks `0..me` from the left, combine, pass the
/// inclusive prefix on to the right.
async fn chain<T: Pod>(comm: &Run<'_>, send: &[T], recv: &mut [T], op: &dyn Op<T>, exclusive: bool) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let next = (me + 1 < np).then_some(me + 1);
    if me == 0 {
        if !exclusive {
            recv.copy_from_slice(send);
        }
        return match next {
            Some(next) => comm.coll_send(bytemuck::cast_slice(send), next, COLL).await,
            None => Ok(()),
        };
    }
    if exclusive {
        comm.coll_recv(bytemuck::cast_slice_mut(recv), me - 1, COLL).await?;
        if let Some(next) = next {
            let mut inclusive = comm.process.scratch.copy_of(send, send.len());
            op.combine(recv, &mut inclusive);
            comm.coll_send(bytemuck::cast_slice(&inclusive), next, COLL).await?;
        }
    } else {
        let mut prefix = comm.process.scratch.take::<T>(send.len());
        comm.coll_recv(bytemuck::cast_slice_mut(&mut prefix), me - 1, COLL).await?;
        recv.copy_from_slice(send);
        op.combine(&prefix, recv);
        if let Some(next) = next {
            comm.coll_send(bytemuck::cast_slice(recv), next, COLL).await?;
        }
    }
    Ok(())
}

/// Recursive doubling: at distance `mask` a rank swaps with `rank ^ mask` the reduction of its
/// aligned run of `mask` ranks (clipped to `np`); runs from below extend the prefix and the
/// run's total on the left, runs from above extend the total on the right. Any `np`.
async fn recursive_doubling<T: Pod>(
    comm: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    exclusive: bool,
) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let mut total = comm.process.scratch.copy_of(send, send.len());
    let mut incoming = comm.process.scratch.take::<T>(send.len());
    // Whether `recv` holds a prefix yet; an exclusive scan starts empty.
    let mut have_prefix = !exclusive;
    if have_prefix {
        recv.copy_from_slice(send);
    }
    let mut mask = 1;
    while mask < np {
        let partner = me ^ mask;
        if partner < np {
            comm.coll_sendrecv(
                bytemuck::cast_slice(&total),
                partner,
                bytemuck::cast_slice_mut(&mut incoming),
                partner,
                COLL,
            )
            .await?;
            if partner < me {
                if have_prefix {
                    op.combine(&incoming, recv);
                } else {
                    recv.copy_from_slice(&incoming);
                    have_prefix = true;
                }
                op.combine(&incoming, &mut total);
            } else {
                op.combine(&total, &mut incoming);
                std::mem::swap(&mut total, &mut incoming);
            }
        }
        mask <<= 1;
    }
    Ok(())
}
