//! Building blocks of the reductions: typed temporaries, folding vectors in rank order, the
//! flat exchange of whole vectors, and [`Partial`], a partial result that grows by neighbouring
//! ranges of ranks. Every reduction module (reduce, allreduce, reduce_scatter, scan) uses these;
//! none of them owns them.

use std::ops::Range;

use bytemuck::Pod;

use super::op::Op;
use super::select::Collective;
use super::transport::Run;
use crate::error::Result;

/// A zero-filled typed temporary (typed so that its alignment suits `T`).
pub(super) fn zeroed<T: Pod>(len: usize) -> Vec<T> {
    vec![T::zeroed(); len]
}

/// Posts nonblocking receives of the vectors of the ranks in `receive_from` into one temporary
/// (`send.len()` elements per rank, in rank order), plus sends of `send` to the ranks in
/// `send_to`, and waits. Both ranges skip this rank.
pub(super) async fn exchange_flat<T: Pod>(
    comm: &Run<'_>,
    send: &[T],
    receive_from: Range<usize>,
    send_to: Range<usize>,
    coll: Collective,
) -> Result<Vec<T>> {
    let me = comm.rank();
    let sources = receive_from.len() - usize::from(receive_from.contains(&me));
    let mut received = zeroed::<T>(send.len() * sources);
    // `max(1)`: zero-byte vectors leave `received` empty, so each receive gets an empty slice.
    let mut blocks = bytemuck::cast_slice_mut::<T, u8>(&mut received).chunks_exact_mut(size_of_val(send).max(1));
    let mut pending = comm.batch();
    for peer in receive_from.filter(|&r| r != me) {
        pending.irecv(blocks.next().unwrap_or_default(), peer, coll)?;
    }
    for peer in send_to.filter(|&r| r != me) {
        pending.isend(bytemuck::cast_slice(send), peer, coll)?;
    }
    pending.wait_all().await?;
    Ok(received)
}

/// Rank `rank`'s vector when `others` holds every other rank's (in rank order, skipping `me`).
pub(super) fn vector_of<'v, T>(rank: usize, me: usize, mine: &'v [T], others: &'v [T]) -> Result<&'v [T]> {
    let n = mine.len();
    Ok(match rank.cmp(&me) {
        std::cmp::Ordering::Equal => mine,
        std::cmp::Ordering::Less => &others[rank * n..(rank + 1) * n],
        std::cmp::Ordering::Greater => &others[(rank - 1) * n..rank * n],
    })
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
