//! Reduce algorithms: flat trees and MST, combining in rank order. Also the small building
//! blocks the other reductions share (typed temporaries, rank-order combining, [`Partial`]).

use bytemuck::Pod;

use super::op::Op;
use super::select::{Algorithm, Collective};
use crate::comm::Comm;
use crate::error::{Error, Result};

const COLL: Collective = Collective::Reduce;

pub(super) fn reduce<T: Pod>(
    comm: &Comm,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    root: usize,
    algorithm: Algorithm,
) -> Result<()> {
    match algorithm {
        Algorithm::Bft => flat_blocking(comm, send, recv, op, root),
        Algorithm::Nbft => flat_nonblocking(comm, send, recv, op, root),
        Algorithm::Mst => mst(comm, send, recv, op, root),
        other => Err(Error::InvalidArgument(format!("reduce has no algorithm {other}"))),
    }
}

/// A zero-filled typed temporary (typed so that its alignment suits `T`).
pub(super) fn zeroed<T: Pod>(len: usize) -> Vec<T> {
    vec![T::zeroed(); len]
}

/// Splits `buf` into `parts` consecutive blocks of `len` elements each (`len` may be 0, which
/// `chunks_mut` does not allow).
pub(super) fn blocks_mut<T>(buf: &mut [T], len: usize, parts: usize) -> Vec<&mut [T]> {
    let mut rest = buf;
    (0..parts)
        .map(|_| {
            let (block, tail) = std::mem::take(&mut rest).split_at_mut(len);
            rest = tail;
            block
        })
        .collect()
}

/// `out = x0 ∘ x1 ∘ … ∘ x(np-1)`, where `vector(r)` is rank `r`'s contribution. Combines from the
/// highest rank down so that every step is `inout = lower ∘ inout` in place.
pub(super) fn combine_in_rank_order<'v, T: Pod>(
    op: &dyn Op<T>,
    np: usize,
    vector: impl Fn(usize) -> &'v [T],
    out: &mut [T],
) {
    out.copy_from_slice(vector(np - 1));
    for rank in (0..np - 1).rev() {
        op.combine(vector(rank), out);
    }
}

/// Posts nonblocking receives of every rank's vector except this one's into one temporary
/// (`n` elements per peer, in rank order without `me`), plus the sends in `send_to`, and waits.
pub(super) fn exchange_flat<T: Pod>(
    comm: &Comm,
    send: &[T],
    receive_from: impl Iterator<Item = usize>,
    send_to: impl Iterator<Item = usize>,
    coll: Collective,
) -> Result<Vec<T>> {
    let n = send.len();
    let sources: Vec<usize> = receive_from.collect();
    let mut received = zeroed::<T>(n * sources.len());
    let mut pending = comm.pending();
    for (&peer, block) in sources.iter().zip(blocks_mut(&mut received, n, sources.len())) {
        pending.irecv(bytemuck::cast_slice_mut(block), peer, coll)?;
    }
    for peer in send_to {
        pending.isend(bytemuck::cast_slice(send), peer, coll)?;
    }
    pending.wait_all()?;
    Ok(received)
}

/// Rank `rank`'s vector when `others` holds every other rank's (in rank order, skipping `me`).
pub(super) fn vector_of<'v, T>(rank: usize, me: usize, mine: &'v [T], others: &'v [T]) -> &'v [T] {
    let n = mine.len();
    match rank.cmp(&me) {
        std::cmp::Ordering::Equal => mine,
        std::cmp::Ordering::Less => &others[rank * n..(rank + 1) * n],
        std::cmp::Ordering::Greater => &others[(rank - 1) * n..rank * n],
    }
}

/// Flat tree, blocking: the root receives the vectors from the highest rank down, folding each
/// in as `inout = lower ∘ inout`, which keeps rank order with a single temporary.
fn flat_blocking<T: Pod>(comm: &Comm, send: &[T], recv: &mut [T], op: &dyn Op<T>, root: usize) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    if me != root {
        return comm.coll_send(bytemuck::cast_slice(send), root, COLL);
    }
    let last = np - 1;
    if last == root {
        recv.copy_from_slice(send);
    } else {
        comm.coll_recv(bytemuck::cast_slice_mut(recv), last, COLL)?;
    }
    let mut incoming = zeroed::<T>(if np > 1 { send.len() } else { 0 });
    for rank in (0..last).rev() {
        if rank == root {
            op.combine(send, recv);
        } else {
            comm.coll_recv(bytemuck::cast_slice_mut(&mut incoming), rank, COLL)?;
            op.combine(&incoming, recv);
        }
    }
    Ok(())
}

/// Flat tree, nonblocking: the root posts every receive at once, then combines in rank order.
fn flat_nonblocking<T: Pod>(comm: &Comm, send: &[T], recv: &mut [T], op: &dyn Op<T>, root: usize) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    if me != root {
        return comm.coll_send(bytemuck::cast_slice(send), root, COLL);
    }
    let others = exchange_flat(comm, send, (0..np).filter(|&r| r != me), std::iter::empty(), COLL)?;
    combine_in_rank_order(op, np, |r| vector_of(r, me, send, &others), recv);
    Ok(())
}

/// A partial result over a contiguous range of ranks, plus a spare buffer that receives a
/// neighbouring range's partial result. Combining with a higher range leaves the result in the
/// spare buffer, so the two swap roles instead of copying.
pub(super) struct Partial<'a, T> {
    held: &'a mut [T],
    spare: &'a mut [T],
    swapped: bool,
}

impl<'a, T: Pod> Partial<'a, T> {
    /// `held` must already contain this rank's contribution; `spare` has the same length.
    pub(super) fn new(held: &'a mut [T], spare: &'a mut [T]) -> Self {
        Partial { held, spare, swapped: false }
    }

    /// The current partial result.
    pub(super) fn value(&self) -> &[T] {
        self.held
    }

    /// The current partial result (to send) and the spare buffer (to receive into).
    pub(super) fn buffers(&mut self) -> (&[T], &mut [T]) {
        (self.held, self.spare)
    }

    /// Folds the spare buffer's contents into the partial result: before it when they come from
    /// lower ranks, after it otherwise.
    pub(super) fn absorb(&mut self, op: &dyn Op<T>, from_lower: bool) {
        if from_lower {
            op.combine(self.spare, self.held);
        } else {
            op.combine(self.held, self.spare);
            std::mem::swap(&mut self.held, &mut self.spare);
            self.swapped = !self.swapped;
        }
    }

    /// Makes sure the result sits in the buffer first given as `held`.
    pub(super) fn settle(self) {
        if self.swapped {
            self.spare.copy_from_slice(self.held);
        }
    }
}

/// One exchange of this rank in the MST: a partial result from `peer` (whose ranks are all
/// lower than ours if `from_lower`), or the final send of our subtree's result to `peer`.
enum MstStep {
    Receive { peer: usize, from_lower: bool },
    Send { peer: usize },
}

/// This rank's steps in the minimum spanning tree over ranks `0..np` rooted at `root`, in the
/// order they run. The range is halved recursively; the half without the root gets a local root
/// (the rank next to the other half), which sends its half's result across once that half is
/// reduced. Every subtree spans contiguous ranks, so combining left ∘ right keeps rank order
/// for any root.
fn mst_steps(np: usize, me: usize, root: usize) -> Vec<MstStep> {
    let (mut lo, mut hi, mut local_root) = (0, np, root);
    let mut steps = Vec::new();
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let (root_half, other_half, other_root) =
            if local_root < mid { ((lo, mid), (mid, hi), mid) } else { ((mid, hi), (lo, mid), mid - 1) };
        if me == local_root {
            steps.push(MstStep::Receive { peer: other_root, from_lower: other_root < me });
        }
        if (root_half.0..root_half.1).contains(&me) {
            (lo, hi) = root_half;
        } else {
            if me == other_root {
                steps.push(MstStep::Send { peer: local_root });
            }
            (lo, hi) = other_half;
            local_root = other_root;
        }
    }
    steps.reverse();
    steps
}

/// Minimum spanning tree (recursive interval halving) rooted at `root`: order-correct for
/// non-commutative operations without an extra hop, since every subtree is a rank interval.
fn mst<T: Pod>(comm: &Comm, send: &[T], recv: &mut [T], op: &dyn Op<T>, root: usize) -> Result<()> {
    let (np, me) = (comm.size(), comm.rank());
    let steps = mst_steps(np, me, root);
    let receives = steps.iter().filter(|s| matches!(s, MstStep::Receive { .. })).count();
    if receives == 0 {
        // A leaf (or np == 1): nothing to combine.
        return match steps.first() {
            Some(MstStep::Send { peer }) => comm.coll_send(bytemuck::cast_slice(send), *peer, COLL),
            _ => {
                recv.copy_from_slice(send);
                Ok(())
            }
        };
    }
    let mut own = if me == root { Vec::new() } else { zeroed::<T>(send.len()) };
    let held: &mut [T] = if me == root { recv } else { &mut own };
    held.copy_from_slice(send);
    let mut spare = zeroed::<T>(send.len());
    let mut partial = Partial::new(held, &mut spare);
    for step in steps {
        match step {
            MstStep::Receive { peer, from_lower } => {
                comm.coll_recv(bytemuck::cast_slice_mut(partial.buffers().1), peer, COLL)?;
                partial.absorb(op, from_lower);
            }
            MstStep::Send { peer } => comm.coll_send(bytemuck::cast_slice(partial.value()), peer, COLL)?,
        }
    }
    partial.settle();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every non-root rank sends exactly once, to a rank that receives from it exactly once.
    #[test]
    fn mst_steps_form_a_spanning_tree() {
        for np in 1..20 {
            for root in 0..np {
                let mut edges = Vec::new();
                for me in 0..np {
                    let steps = mst_steps(np, me, root);
                    let sends: Vec<usize> = steps
                        .iter()
                        .filter_map(|s| if let MstStep::Send { peer } = s { Some(*peer) } else { None })
                        .collect();
                    assert_eq!(sends.len(), usize::from(me != root), "np {np} root {root} rank {me}");
                    edges.extend(sends.iter().map(|&to| (me, to)));
                    for s in &steps {
                        if let MstStep::Receive { peer, .. } = s {
                            assert!(
                                mst_steps(np, *peer, root)
                                    .iter()
                                    .any(|t| matches!(t, MstStep::Send { peer } if *peer == me))
                            );
                        }
                    }
                }
                assert_eq!(edges.len(), np - 1);
            }
        }
    }
}
