//! Alltoall(v) algorithms: the flat variants of Table 4.1 (bFT, nbFT, nb1FT, nb2FT).
//!
//! Alltoall is alltoallv with uniform layouts, so both share one implementation per algorithm.
//! In every variant rank `r` talks to its peers in the order `r + k` (sends) and `r - k`
//! (receives), `k = 1..np`, so the ranks do not all hit the same peer at once. A rank runs its
//! whole message pattern even when one transfer fails (counts that disagree between sender and
//! receiver) and returns the first error, so a mismatch never leaves the other ranks hanging.

use super::pattern::all_steps;
use super::select::{Algorithm, Collective};
use super::transport::Run;
use super::vector::{Layout, carve_blocks, check_own_block, equal_blocks, equal_chunks};
use crate::error::Result;
use crate::progress_agent::Offloaded;

pub(super) async fn alltoall(comm: &Run<'_>, send: &[u8], recv: &mut [u8], algorithm: Algorithm) -> Result<()> {
    let np = comm.size();
    let block = send.len() / np;
    // Equal blocks by arithmetic: no layout tables on the small-message path.
    let inbox = equal_chunks(recv, block, np).collect();
    exchange(comm, send, |peer| equal_blocks(peer..peer + 1, block), inbox, algorithm, Collective::Alltoall).await
}

pub(super) async fn alltoallv(
    comm: &Run<'_>,
    send: &[u8],
    send_layout: &Layout,
    recv: &mut [u8],
    recv_layout: &Layout,
    algorithm: Algorithm,
) -> Result<()> {
    let inbox = carve_blocks(recv, recv_layout, comm.size());
    exchange(comm, send, |peer| send_layout.block(peer), inbox, algorithm, Collective::Alltoallv).await
}

/// Sends block `send_block(j)` of `send` to rank `j` and receives rank `j`'s block into
/// `inbox[j]`.
async fn exchange(
    comm: &Run<'_>,
    send: &[u8],
    send_block: impl Fn(usize) -> std::ops::Range<usize>,
    mut inbox: Vec<&mut [u8]>,
    algorithm: Algorithm,
    coll: Collective,
) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let outbox = |peer: usize| &send[send_block(peer)];
    let dest = |k: usize| (me + k) % np;
    let source = |k: usize| (me + np - k) % np;
    // The own block is copied while the messages travel (by the progress agent when it is on).
    let own = std::mem::take(&mut inbox[me]);
    // SAFETY: the copy lives in this future, which the engine drops or finishes before the
    // scope's borrows end (a blocking run finishes it below, on its stack).
    let copying = check_own_block(own, outbox(me), coll)
        .map(|()| unsafe { Offloaded::copy(own, outbox(me), comm.is_blocking()) });
    let exchanged = match algorithm {
        // bFT: np - 1 pairwise steps, each a combined send and receive.
        Algorithm::Bft => {
            all_steps(1..np, async |k| {
                comm.coll_sendrecv(outbox(dest(k)), dest(k), inbox[source(k)], source(k), coll).await
            })
            .await
        }
        // nbFT: everything nonblocking at once.
        Algorithm::Nbft => {
            let mut pending = comm.batch();
            for k in 1..np {
                pending.irecv(std::mem::take(&mut inbox[source(k)]), source(k), coll)?;
                pending.isend(outbox(dest(k)), dest(k), coll)?;
            }
            pending.wait_all().await
        }
        // nb1FT: all receives posted first, then blocking sends.
        Algorithm::Nb1ft => {
            let mut pending = comm.batch();
            for k in 1..np {
                pending.irecv(std::mem::take(&mut inbox[source(k)]), source(k), coll)?;
            }
            let sent = all_steps(1..np, async |k| comm.coll_send(outbox(dest(k)), dest(k), coll).await).await;
            sent.and(pending.wait_all().await)
        }
        // nb2FT: all sends started first, then blocking receives.
        Algorithm::Nb2ft => {
            let mut pending = comm.batch();
            for k in 1..np {
                pending.isend(outbox(dest(k)), dest(k), coll)?;
            }
            let received = all_steps(1..np, async |k| comm.coll_recv(inbox[source(k)], source(k), coll).await).await;
            received.and(pending.wait_all().await)
        }
        other => return Err(coll.unsupported(other)),
    };
    let copied = match copying {
        Ok(copying) => copying.finish().await,
        Err(e) => Err(e),
    };
    copied.and(exchanged)
}

/// Alltoall(v) in place over messages, whatever algorithm the rules chose (MPI libraries'
/// pairwise `sendrecv_replace`): in round `k` this rank and rank `(k - me) mod np` trade block
/// `p` of their buffers, so each pair meets in exactly one round and every round is a matching.
/// The outgoing block is first copied into `spare` (at least the largest block), the one
/// temporary, which the caller reuses across calls.
pub(super) async fn exchange_in_place(
    comm: &Run<'_>,
    buf: &mut [u8],
    block: impl Fn(usize) -> std::ops::Range<usize>,
    spare: &mut [u8],
    coll: Collective,
) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let partners = (0..np).map(|k| (k + np - me) % np).filter(|&p| p != me);
    all_steps(partners, async |p| {
        let place = block(p);
        let out = &mut spare[..place.len()];
        out.copy_from_slice(&buf[place.clone()]);
        comm.coll_sendrecv(out, p, &mut buf[place], p, coll).await
    })
    .await
}
