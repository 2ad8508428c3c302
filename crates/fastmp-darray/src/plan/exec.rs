//! Executing a plan on `Pod` elements: one message per peer, sent from and received into the
//! stored blocks in place when the message is one contiguous range, packed run by run otherwise.
//!
//! What keeps an execution cheap:
//! - Element moves are monomorphised by element size (1, 2, 4, 8, 16 bytes), so the one-element
//!   runs of a strided dimension (a matrix column) are single loads and stores, not `memcpy`
//!   calls.
//! - A schedule keeps its packing space ([`Buffers`]) between executions, so a warm execution
//!   allocates and clears nothing; a dropped schedule's space goes to a small per-thread spare
//!   that the next schedule on the thread (a one-shot call's) takes, so one-shot calls do not
//!   fault in fresh pages every time.
//! - Receives are posted first, then sends in a rotated order (the first peer after this rank
//!   first, so not every rank starts with rank 0); the local copies between this rank's own
//!   blocks run while the messages are in flight when the source is another array.

use std::cell::RefCell;

use bytemuck::Pod;
use fastmp::{Error, Result, waitall};

use super::{Block, Plan, Transfer};

/// Packing space a schedule keeps between executions, so a warm execution allocates nothing.
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    send: Vec<u8>,
    recv: Vec<u8>,
    /// Lent to direct readers of this rank's block (`plan::direct`).
    pub(super) lease: super::Lease,
}

/// Most bytes of dropped packing space a thread keeps for the next schedule (as much as fastmp
/// keeps for its own strided staging).
const SPARE_LIMIT: usize = 64 << 20;

thread_local! {
    /// Packing space of dropped schedules on this thread (on thread ranks: this rank's).
    static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

impl Buffers {
    /// Makes `buf` exactly `len` bytes long, taking the smallest large enough spare when it has
    /// too little room. Bytes it already had are kept (they are overwritten before being read).
    fn fit(buf: &mut Vec<u8>, len: usize) {
        if buf.capacity() < len {
            let spare = SPARE.try_with(|s| {
                let mut s = s.borrow_mut();
                let best = (0..s.len()).filter(|&i| s[i].capacity() >= len).min_by_key(|&i| s[i].capacity());
                best.map(|i| s.swap_remove(i))
            });
            if let Ok(Some(spare)) = spare {
                Buffers::give_back(std::mem::replace(buf, spare));
            }
        }
        buf.resize(len, 0);
    }

    /// Keeps `buf` as a spare if it fits under [`SPARE_LIMIT`] with the others (largest kept).
    fn give_back(buf: Vec<u8>) {
        if buf.capacity() == 0 || buf.capacity() > SPARE_LIMIT {
            return;
        }
        let _ = SPARE.try_with(|s| {
            let mut s = s.borrow_mut();
            s.push(buf);
            s.sort_unstable_by_key(|b| std::cmp::Reverse(b.capacity()));
            let mut total = 0;
            s.retain(|b| {
                total += b.capacity();
                total <= SPARE_LIMIT
            });
        });
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        Buffers::give_back(std::mem::take(&mut self.send));
        Buffers::give_back(std::mem::take(&mut self.recv));
    }
}

/// Where the source elements are: another array's block, or the destination block itself.
#[derive(Clone, Copy)]
pub(crate) enum Source<'a, T> {
    Other(&'a [T]),
    InPlace,
}

/// Bytes of the transfers that are packed (not sent from or received into the block in place).
fn packed_len(transfers: &[Transfer], size: usize) -> usize {
    transfers.iter().filter(|t| t.in_place.is_none()).map(|t| t.elements * size).sum()
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
        let src: Option<&[u8]> = match src {
            Source::Other(s) => Some(bytemuck::cast_slice(s)),
            Source::InPlace => None,
        };
        let dst: &mut [u8] = bytemuck::cast_slice_mut(dst);
        match size_of::<T>() {
            1 => self.execute_bytes::<1>(src, dst, 1, tag, bufs),
            2 => self.execute_bytes::<2>(src, dst, 2, tag, bufs),
            4 => self.execute_bytes::<4>(src, dst, 4, tag, bufs),
            8 => self.execute_bytes::<8>(src, dst, 8, tag, bufs),
            16 => self.execute_bytes::<16>(src, dst, 16, tag, bufs),
            size => self.execute_bytes::<0>(src, dst, size, tag, bufs),
        }
    }

    /// [`Plan::execute`] on bytes, for elements of `size` bytes; `S` is `size` where it is one
    /// of the sizes moved as a single value, 0 otherwise. `src == None`: in place.
    fn execute_bytes<const S: usize>(
        &self,
        src: Option<&[u8]>,
        dst: &mut [u8],
        size: usize,
        tag: i32,
        bufs: &mut Buffers,
    ) -> Result<()> {
        Buffers::fit(&mut bufs.send, packed_len(&self.sends, size));
        Buffers::fit(&mut bufs.recv, packed_len(&self.recvs, size));
        let mut at = 0;
        for t in self.sends.iter().filter(|t| t.in_place.is_none()) {
            let n = t.elements * size;
            pack::<S>(&t.blocks, src.unwrap_or(&*dst), &mut bufs.send[at..at + n], size);
            at += n;
        }
        self.exchange::<S>(src, dst, size, tag, bufs)?;
        let mut at = 0;
        for t in self.recvs.iter().filter(|t| t.in_place.is_none()) {
            let n = t.elements * size;
            unpack::<S>(&t.blocks, &bufs.recv[at..at + n], dst, size);
            at += n;
        }
        if src.is_none() {
            // In place, the copies read and write the block the messages used: only now is it free.
            for (a, b) in &self.copies {
                copy_blocks(a, b, size, |f, t, n| move_within::<S>(dst, f, t, n));
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

    /// Posts every receive, then every send (rotated: the first peer after this rank first),
    /// does the local copies from another array while the messages travel, and waits for all.
    fn exchange<const S: usize>(
        &self,
        src: Option<&[u8]>,
        dst: &mut [u8],
        size: usize,
        tag: i32,
        bufs: &mut Buffers,
    ) -> Result<()> {
        let mut in_place: Vec<(usize, usize, usize)> = self
            .recvs
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.in_place.map(|(o, n)| (o * size, n * size, i)))
            .collect();
        in_place.sort_unstable();
        let (targets, mut gaps) = carve(dst, &in_place)?;
        // In place, sends read the gaps; from another array, the local copies write them.
        let (read_gaps, write_gaps) = match src {
            None => (&gaps[..], None),
            Some(_) => (&[][..], Some(&mut gaps)),
        };
        let mut packed_recv: Vec<(usize, &mut [u8])> = Vec::with_capacity(self.recvs.len() - in_place.len());
        let mut rest = &mut bufs.recv[..];
        for t in self.recvs.iter().filter(|t| t.in_place.is_none()) {
            let (head, tail) = rest.split_at_mut(t.elements * size);
            packed_recv.push((t.peer, head));
            rest = tail;
        }
        let mut outgoing = Vec::with_capacity(self.sends.len());
        let mut at = 0;
        for t in &self.sends {
            let n = t.elements * size;
            let buf: &[u8] = match (t.in_place, src) {
                (Some((o, len)), Some(s)) => &s[o * size..(o + len) * size],
                (Some((o, len)), None) => find_gap(read_gaps, o * size, len * size).ok_or_else(|| {
                    Error::InvalidArgument("distributed array plan: an in-place send overlaps a receive".into())
                })?,
                (None, _) => {
                    at += n;
                    &bufs.send[at - n..at]
                }
            };
            outgoing.push((t.peer, buf));
        }
        let first_after_me = self.sends.partition_point(|t| t.peer < self.comm.rank());
        outgoing.rotate_left(first_after_me);
        let receives = in_place.iter().map(|&(_, _, i)| self.recvs[i].peer).zip(targets).chain(packed_recv);
        self.comm.scope(|s| {
            let mut reqs = Vec::with_capacity(self.recvs.len() + self.sends.len());
            let mut expected = Vec::with_capacity(self.recvs.len());
            for (peer, buf) in receives {
                expected.push((peer, buf.len()));
                reqs.push(s.irecv(buf, peer, tag)?);
            }
            for (peer, buf) in outgoing {
                reqs.push(s.isend(buf, peer, tag)?);
            }
            if let (Some(from), Some(gaps)) = (src, write_gaps) {
                self.copy_into_gaps::<S>(from, gaps, size)?;
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

    /// The local copies from another array's block into the parts of the destination block no
    /// in-place receive writes (every copied element is one no message brings).
    fn copy_into_gaps<const S: usize>(&self, from: &[u8], gaps: &mut [(usize, &mut [u8])], size: usize) -> Result<()> {
        let mut outside = false;
        for (a, b) in &self.copies {
            copy_blocks(a, b, size, |f, t, n| match gap_mut(gaps, t, n) {
                Some(to) => move_bytes::<S>(to, &from[f..f + n]),
                None => outside = true,
            });
        }
        if outside {
            return Err(Error::InvalidArgument("distributed array plan: a local copy overlaps a receive".into()));
        }
        Ok(())
    }
}

/// A disjoint part of a block, with its byte offset in the block.
type Gap<'a> = (usize, &'a mut [u8]);

/// Splits `buf` into the disjoint ranges `(offset, len, _)` (sorted) and the gaps between them
/// (with their offsets), so receives can write some parts while sends read others.
fn carve<'a>(buf: &'a mut [u8], ranges: &[(usize, usize, usize)]) -> Result<(Vec<&'a mut [u8]>, Vec<Gap<'a>>)> {
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
        gaps.push((pos, gap));
        targets.push(hit);
        rest = tail;
        pos = o + n;
    }
    gaps.push((pos, rest));
    Ok((targets, gaps))
}

/// The index of the gap that starts at or before byte `o`.
fn gap_index(gaps: &[Gap<'_>], o: usize) -> Option<usize> {
    gaps.partition_point(|g| g.0 <= o).checked_sub(1)
}

/// The part `o..o + n` of the gap that contains it.
fn find_gap<'a>(gaps: &'a [Gap<'_>], o: usize, n: usize) -> Option<&'a [u8]> {
    let (start, gap) = &gaps[gap_index(gaps, o)?];
    gap.get(o - *start..o - *start + n)
}

/// [`find_gap`], writable.
fn gap_mut<'a>(gaps: &'a mut [Gap<'_>], o: usize, n: usize) -> Option<&'a mut [u8]> {
    let (start, gap) = &mut gaps[gap_index(gaps, o)?];
    gap.get_mut(o - *start..o - *start + n)
}

/// Copies `from` into `to` (same length): one fixed-size move for a single element of `S`
/// bytes (`S != 0`), `memcpy` otherwise.
#[inline(always)]
fn move_bytes<const S: usize>(to: &mut [u8], from: &[u8]) {
    if S != 0 && to.len() == S {
        to[..S].copy_from_slice(&from[..S]);
    } else {
        to.copy_from_slice(from);
    }
}

/// Copies `n` bytes of `buf` from `f` to `t`, as [`move_bytes`] does between two slices.
#[inline(always)]
fn move_within<const S: usize>(buf: &mut [u8], f: usize, t: usize, n: usize) {
    if S != 0 && n == S {
        let mut element = [0u8; S];
        element.copy_from_slice(&buf[f..f + S]);
        buf[t..t + S].copy_from_slice(&element);
    } else {
        buf.copy_within(f..f + n, t);
    }
}

/// The elements of `blocks` in `from`, one after another into `to`.
fn pack<const S: usize>(blocks: &[Block], from: &[u8], to: &mut [u8], size: usize) {
    let mut at = 0;
    for b in blocks {
        b.for_each_run(|o, n| {
            let n = n * size;
            move_bytes::<S>(&mut to[at..at + n], &from[o * size..o * size + n]);
            at += n;
        });
    }
}

/// `from`, one element after another, into the elements of `blocks` in `to`.
fn unpack<const S: usize>(blocks: &[Block], from: &[u8], to: &mut [u8], size: usize) {
    let mut at = 0;
    for b in blocks {
        b.for_each_run(|o, n| {
            let n = n * size;
            move_bytes::<S>(&mut to[o * size..o * size + n], &from[at..at + n]);
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

#[cfg(test)]
mod tests {
    //! Every element-size path (single moves of 1, 2, 4, 8, 16 bytes; `memcpy` of other sizes)
    //! through packed and in-place messages and local copies, against the global formula.

    use bytemuck::Pod;
    use ndarray::Ix2;

    use crate::{DArray, Grid, Halo, Range, cshift, remap};

    /// The element at `(i, j)`: its bytes spell the index (a 1-byte element keeps the low byte).
    fn value<T: Pod>(i: usize, j: usize) -> T {
        let mut x = T::zeroed();
        let code = ((i * 1000 + j) as u32).to_le_bytes();
        for (k, b) in bytemuck::bytes_of_mut(&mut x).iter_mut().enumerate() {
            *b = code[k % 4] ^ (k / 4) as u8;
        }
        x
    }

    fn same<T: Pod>(a: &T, b: &T) -> bool {
        bytemuck::bytes_of(a) == bytemuck::bytes_of(b)
    }

    fn check_sizes<T: Pod + Default>() {
        let (m, n) = (11, 7);
        for np in 1..=4 {
            fastmp::run(np, |world| {
                let grid = Grid::auto(&world, 2)?;
                let src = DArray::<T, Ix2>::from_fn(
                    &grid,
                    [Range::block(m, &grid, 0)?, Range::block(n, &grid, 1)?],
                    |(i, j)| value(i, j),
                )?;
                // Rows over grid dimension 1, columns cyclic over 0: columns of one element.
                let mut dst = DArray::<T, Ix2>::from_elem(
                    &grid,
                    [Range::block(m, &grid, 1)?, Range::cyclic(n, &grid, 0)?],
                    T::default(),
                )?;
                remap(&mut dst, &src)?;
                assert!(dst.overall().all(|((i, j), x)| same(x, &value(i, j))), "remap np {np}");
                cshift(&mut dst, &src, 3, 1)?;
                assert!(dst.overall().all(|((i, j), x)| same(x, &value(i, (j + 3) % n))), "cshift np {np}");
                let ghosts = [Range::ghost_block(m, &grid, 0, 1, 2)?, Range::ghost_block(n, &grid, 1, 2, 1)?];
                let mut a = DArray::<T, Ix2>::from_fn(&grid, ghosts.clone(), |(i, j)| value(i, j))?;
                a.write_halo_with(&Halo::all().wrap(&[true, true]))?;
                if let Some(c) = a.coords() {
                    let first = [ghosts[0].global(c[0], 0), ghosts[1].global(c[1], 0)];
                    for ((s0, s1), x) in a.local_with_ghosts().indexed_iter() {
                        let i = (first[0] + m + s0 - 1) % m;
                        let j = (first[1] + n + s1 - 2) % n;
                        assert!(same(x, &value(i, j)), "halo np {np} at ({s0}, {s1})");
                    }
                }
                Ok(())
            })
            .unwrap();
        }
    }

    #[test]
    fn every_element_size_moves_the_same_elements() {
        check_sizes::<u8>();
        check_sizes::<u16>();
        check_sizes::<u32>();
        check_sizes::<f64>();
        check_sizes::<[u64; 2]>();
        check_sizes::<[u8; 3]>();
        check_sizes::<[u32; 5]>();
    }
}
