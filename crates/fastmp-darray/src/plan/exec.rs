//! Executing a plan on `Pod` elements: one message per peer, sent from and received into the
//! stored blocks in place when the message is one contiguous range, packed run by run (one
//! `copy_from_slice` per contiguous run, no per-element work) otherwise.

use bytemuck::Pod;
use fastmp::{Error, Result, waitall};

use super::{Block, Plan};

/// Packing space a schedule keeps between executions, so a warm execution allocates nothing.
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    send: Vec<u8>,
    recv: Vec<u8>,
    /// Lent to direct readers of this rank's block (`plan::direct`).
    pub(super) lease: super::Lease,
}

/// Where the source elements are: another array's block, or the destination block itself.
#[derive(Clone, Copy)]
pub(crate) enum Source<'a, T> {
    Other(&'a [T]),
    InPlace,
}

impl Plan {
    /// Moves the data of the message transfers and local copies: `dst` is this rank's
    /// destination block, `src` its source block.
    pub(super) fn execute_messages<T: Pod>(
        &self,
        src: Source<'_, T>,
        dst: &mut [T],
        tag: i32,
        bufs: &mut Buffers,
    ) -> Result<()> {
        let size = size_of::<T>();
        let packed_len =
            |ts: &[super::Transfer]| ts.iter().filter(|t| t.in_place.is_none()).map(|t| t.elements * size).sum();
        bufs.send.resize(packed_len(&self.sends), 0);
        bufs.recv.resize(packed_len(&self.recvs), 0);
        {
            let from: &[u8] = match &src {
                Source::Other(s) => bytemuck::cast_slice(s),
                Source::InPlace => bytemuck::cast_slice(dst),
            };
            let mut at = 0;
            for t in self.sends.iter().filter(|t| t.in_place.is_none()) {
                let n = t.elements * size;
                pack(&t.blocks, from, &mut bufs.send[at..at + n], size);
                at += n;
            }
        }
        self.exchange(&src, dst, size, tag, bufs)?;
        let to: &mut [u8] = bytemuck::cast_slice_mut(dst);
        let mut at = 0;
        for t in self.recvs.iter().filter(|t| t.in_place.is_none()) {
            let n = t.elements * size;
            unpack(&t.blocks, &bufs.recv[at..at + n], to, size);
            at += n;
        }
        match src {
            Source::Other(s) => {
                let from: &[u8] = bytemuck::cast_slice(s);
                for (a, b) in &self.copies {
                    copy_blocks(a, b, size, |f, t, n| to[t..t + n].copy_from_slice(&from[f..f + n]));
                }
            }
            Source::InPlace => {
                for (a, b) in &self.copies {
                    copy_blocks(a, b, size, |f, t, n| to.copy_within(f..f + n, t));
                }
            }
        }
        Ok(())
    }

    /// Only the local copies (a plan between identically aligned arrays has nothing else).
    pub(crate) fn copy_local<T: Clone>(&self, from: &[T], to: &mut [T]) {
        for (a, b) in &self.copies {
            copy_blocks(a, b, 1, |f, t, n| to[t..t + n].clone_from_slice(&from[f..f + n]));
        }
    }

    /// Posts every receive, then every send, and waits for all.
    fn exchange<T: Pod>(
        &self,
        src: &Source<'_, T>,
        dst: &mut [T],
        size: usize,
        tag: i32,
        bufs: &mut Buffers,
    ) -> Result<()> {
        let dst: &mut [u8] = bytemuck::cast_slice_mut(dst);
        let mut in_place: Vec<(usize, usize, usize)> = self
            .recvs
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.in_place.map(|(o, n)| (o * size, n * size, i)))
            .collect();
        in_place.sort_unstable();
        let (targets, gaps) = carve(dst, &in_place)?;
        let mut packed_recv: Vec<&mut [u8]> = Vec::with_capacity(self.recvs.len());
        let mut rest = &mut bufs.recv[..];
        for t in self.recvs.iter().filter(|t| t.in_place.is_none()) {
            let (head, tail) = rest.split_at_mut(t.elements * size);
            packed_recv.push(head);
            rest = tail;
        }
        let comm = &self.comm;
        comm.scope(|s| {
            let mut reqs = Vec::with_capacity(self.recvs.len() + self.sends.len());
            let mut expected = Vec::with_capacity(self.recvs.len());
            let mut packed = packed_recv.into_iter();
            let mut targets = targets.into_iter();
            for t in &self.recvs {
                let buf = if t.in_place.is_some() { targets.next() } else { packed.next() };
                let buf = buf.expect("one buffer per receive");
                expected.push((t.peer, buf.len()));
                reqs.push(s.irecv(buf, t.peer, tag)?);
            }
            let mut at = 0;
            for t in &self.sends {
                let n = t.elements * size;
                let buf: &[u8] = match (t.in_place, src) {
                    (Some((o, len)), Source::Other(s)) => &bytemuck::cast_slice(s)[o * size..(o + len) * size],
                    (Some((o, len)), Source::InPlace) => find_gap(&gaps, o * size, len * size).ok_or_else(|| {
                        Error::InvalidArgument("distributed array plan: an in-place send overlaps a receive".into())
                    })?,
                    (None, _) => {
                        at += n;
                        &bufs.send[at - n..at]
                    }
                };
                reqs.push(s.isend(buf, t.peer, tag)?);
            }
            let statuses = waitall(&mut reqs)?;
            for (status, (peer, len)) in statuses.iter().zip(expected) {
                if status.bytes != len {
                    return Err(Error::InvalidArgument(format!(
                        "distributed array operation: rank {peer} sent {} bytes where {len} were expected; \
                         the ranks are executing different operations or schedules",
                        status.bytes
                    )));
                }
            }
            Ok(())
        })
    }
}

/// Splits `buf` into the disjoint ranges `(offset, len, _)` (sorted) and the gaps between them
/// (with their offsets), so receives can write some parts while sends read others.
#[allow(clippy::type_complexity)]
fn carve<'a>(
    buf: &'a mut [u8],
    ranges: &[(usize, usize, usize)],
) -> Result<(Vec<&'a mut [u8]>, Vec<(usize, &'a [u8])>)> {
    let mut targets = Vec::with_capacity(ranges.len());
    let mut gaps = Vec::with_capacity(ranges.len() + 1);
    let mut rest = buf;
    let mut pos = 0;
    for &(o, n, _) in ranges {
        if o < pos {
            return Err(Error::InvalidArgument("distributed array plan: overlapping receive ranges".into()));
        }
        let (gap, tail) = rest.split_at_mut(o - pos);
        let (hit, tail) = tail.split_at_mut(n);
        gaps.push((pos, &*gap));
        targets.push(hit);
        rest = tail;
        pos = o + n;
    }
    gaps.push((pos, &*rest));
    // Receives were posted in plan order; put the carved targets back in that order.
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&k| ranges[k].2);
    let mut slots: Vec<Option<&mut [u8]>> = targets.into_iter().map(Some).collect();
    let targets = order.into_iter().map(|k| slots[k].take().expect("each target once")).collect();
    Ok((targets, gaps))
}

/// The part `o..o + n` of the gap that contains it.
fn find_gap<'a>(gaps: &[(usize, &'a [u8])], o: usize, n: usize) -> Option<&'a [u8]> {
    let i = gaps.partition_point(|g| g.0 <= o).checked_sub(1)?;
    let (start, gap) = gaps[i];
    gap.get(o - start..o - start + n)
}

fn pack(blocks: &[Block], from: &[u8], to: &mut [u8], size: usize) {
    let mut at = 0;
    for b in blocks {
        b.for_each_run(|o, n| {
            let n = n * size;
            to[at..at + n].copy_from_slice(&from[o * size..o * size + n]);
            at += n;
        });
    }
}

fn unpack(blocks: &[Block], from: &[u8], to: &mut [u8], size: usize) {
    let mut at = 0;
    for b in blocks {
        b.for_each_run(|o, n| {
            let n = n * size;
            to[o * size..o * size + n].copy_from_slice(&from[at..at + n]);
            at += n;
        });
    }
}

/// Walks two blocks with the same elements in the same order, calling `copy(from, to, bytes)`
/// for each stretch that is contiguous in both.
pub(super) fn copy_blocks(a: &Block, b: &Block, size: usize, mut copy: impl FnMut(usize, usize, usize)) {
    let mut runs_b = Vec::new();
    b.for_each_run(|o, n| runs_b.push((o, n)));
    let mut rb = runs_b.into_iter();
    let mut cur = rb.next();
    a.for_each_run(|mut fo, mut n| {
        while n > 0 {
            let Some((to, tn)) = cur.as_mut() else { return };
            let k = n.min(*tn);
            copy(fo * size, *to * size, k * size);
            fo += k;
            n -= k;
            *to += k;
            *tn -= k;
            if *tn == 0 {
                cur = rb.next();
            }
        }
    });
}
