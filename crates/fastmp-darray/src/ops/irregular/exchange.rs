//! Index-list schedules (PARTI/CHAOS style): the one-time negotiation that tells the owners of
//! elements who needs what, and the execution that moves elements listed by stored offset, one
//! message per peer.

use bytemuck::Pod;
use fastmp::{Comm, Error, Result, waitall};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::invalid;
use crate::ops::TAG;

/// What a rank receives from one peer: how many elements, and where each goes.
#[derive(Clone, Debug)]
pub(super) struct Incoming {
    pub peer: usize,
    pub count: usize,
    /// `(k, offset)`: the peer's `k`-th element goes to `offset` of the destination block (an
    /// element may go to several offsets, or to none).
    pub unpack: Vec<(usize, usize)>,
}

/// This rank's part of a gather or scatter.
#[derive(Clone)]
pub(super) struct Exchange {
    pub comm: Comm,
    /// Per peer, the offsets in the source block of the elements it gets, in message order.
    pub sends: Vec<(usize, Vec<usize>)>,
    pub recvs: Vec<Incoming>,
    /// `(from, to)`: elements this rank copies from its source block into its destination block.
    pub local: Vec<(usize, usize)>,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchange")
            .field("sends", &self.sends)
            .field("recvs", &self.recvs)
            .field("local", &self.local)
            .finish()
    }
}

/// Packing space kept between executions, so a warm execution allocates no buffers.
#[derive(Debug, Default)]
pub(super) struct Buffers {
    send: Vec<u8>,
    recv: Vec<u8>,
}

/// Sends every peer the words this rank addressed to it (`outgoing[peer]`) and returns what
/// each peer addressed to this one; collective over all ranks of `comm`.
///
/// First the ranks agree whether one of them found a bad argument (`bad`, a precise message):
/// then the lowest such rank's message is the `Err` of every rank, and nothing else moves.
pub(super) fn negotiate(comm: &Comm, outgoing: &[Vec<u64>], bad: Option<String>) -> Result<Vec<Vec<u64>>> {
    let n = comm.size();
    let header: Vec<u64> = outgoing.iter().flat_map(|w| [w.len() as u64, u64::from(bad.is_some())]).collect();
    let mut headers = vec![0u64; 2 * n];
    comm.alltoall(&header, &mut headers)?;
    if let Some(first_bad) = (0..n).find(|&r| headers[2 * r + 1] != 0) {
        let mut message = bad.unwrap_or_default();
        comm.bcast_obj(&mut message, first_bad)?;
        return Err(Error::InvalidArgument(format!("{message} (found on rank {first_bad})")));
    }
    let send_counts: Vec<usize> = outgoing.iter().map(Vec::len).collect();
    let recv_counts: Vec<usize> = (0..n).map(|r| headers[2 * r] as usize).collect();
    let displs = |counts: &[usize]| -> Vec<usize> {
        counts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect()
    };
    let send: Vec<u64> = outgoing.concat();
    let mut recv = vec![0u64; recv_counts.iter().sum()];
    comm.alltoallv(&send, &send_counts, &displs(&send_counts), &mut recv, &recv_counts, &displs(&recv_counts))?;
    let mut rest = &recv[..];
    Ok(recv_counts
        .iter()
        .map(|&c| {
            let (head, tail) = rest.split_at(c);
            rest = tail;
            head.to_vec()
        })
        .collect())
}

/// `Err` unless every offset in `offsets` is inside a block of `len` elements (a peer computed
/// them from the same metadata; a mismatch means the ranks built from different arguments).
pub(super) fn check_offsets(call: &str, peer: usize, offsets: &[u64], len: usize) -> Result<Vec<usize>> {
    offsets
        .iter()
        .map(|&o| {
            usize::try_from(o).ok().filter(|&o| o < len).ok_or_else(|| {
                invalid(
                    call,
                    format!("rank {peer} asked for element {o} of a block of {len}; the ranks disagree on the arrays"),
                )
            })
        })
        .collect()
}

impl Exchange {
    /// Moves `Pod` elements from `src` (this rank's source block) into `dst`: every receive
    /// posted, then every send, one message per peer, packed and unpacked by stored offset.
    pub fn execute<T: Pod>(&self, src: &[T], dst: &mut [T], bufs: &mut Buffers) -> Result<()> {
        let size = size_of::<T>();
        let send_len: usize = self.sends.iter().map(|s| s.1.len()).sum();
        let recv_len: usize = self.recvs.iter().map(|r| r.count).sum();
        bufs.send.resize(send_len * size, 0);
        bufs.recv.resize(recv_len * size, 0);
        let mut slots = bufs.send.chunks_exact_mut(size.max(1));
        for &o in self.sends.iter().flat_map(|s| &s.1) {
            if let Some(slot) = slots.next() {
                slot.copy_from_slice(bytemuck::bytes_of(&src[o]));
            }
        }
        self.comm.scope(|s| {
            let mut reqs = Vec::with_capacity(self.recvs.len() + self.sends.len());
            let mut rest = &mut bufs.recv[..];
            for r in &self.recvs {
                let (head, tail) = std::mem::take(&mut rest).split_at_mut(r.count * size);
                rest = tail;
                reqs.push(s.irecv(head, r.peer, TAG)?);
            }
            let mut rest = &bufs.send[..];
            for (peer, offsets) in &self.sends {
                let (head, tail) = rest.split_at(offsets.len() * size);
                rest = tail;
                reqs.push(s.isend(head, *peer, TAG)?);
            }
            let statuses = waitall(&mut reqs)?;
            for (status, r) in statuses.iter().zip(&self.recvs) {
                check_length(r.peer, status.bytes, r.count * size)?;
            }
            Ok::<(), Error>(())
        })?;
        let mut base = 0;
        for r in &self.recvs {
            let from = &bufs.recv[base * size..(base + r.count) * size];
            for &(k, to) in &r.unpack {
                dst[to] = bytemuck::pod_read_unaligned(&from[k * size..(k + 1) * size]);
            }
            base += r.count;
        }
        for &(from, to) in &self.local {
            dst[to] = src[from];
        }
        Ok(())
    }

    /// Moves serde elements: each peer's elements travel as one encoded vector. Sends are
    /// nonblocking and posted first, so the blocking receives cannot deadlock.
    pub fn execute_obj<T>(&self, src: &[T], dst: &mut [T]) -> Result<()>
    where
        T: Serialize + DeserializeOwned + Clone,
    {
        let mut outgoing = Vec::with_capacity(self.sends.len());
        for (peer, offsets) in &self.sends {
            let items: Vec<&T> = offsets.iter().map(|&o| &src[o]).collect();
            let bytes = postcard::to_allocvec(&items).map_err(|e| Error::Serialization(e.to_string()))?;
            outgoing.push(self.comm.isend_owned(bytes, *peer, TAG)?);
        }
        for r in &self.recvs {
            let (items, _) = self.comm.recv_obj::<Vec<T>>(r.peer, TAG)?;
            if items.len() != r.count {
                return Err(mismatch(r.peer, items.len(), r.count, "elements"));
            }
            for &(k, to) in &r.unpack {
                dst[to] = items[k].clone();
            }
        }
        waitall(&mut outgoing)?;
        for &(from, to) in &self.local {
            dst[to] = src[from].clone();
        }
        Ok(())
    }
}

fn check_length(peer: usize, got: usize, expected: usize) -> Result<()> {
    if got == expected { Ok(()) } else { Err(mismatch(peer, got, expected, "bytes")) }
}

fn mismatch(peer: usize, got: usize, expected: usize, unit: &str) -> Error {
    Error::InvalidArgument(format!(
        "distributed array gather/scatter: rank {peer} sent {got} {unit} where {expected} were expected; \
         the ranks are executing different operations or schedules"
    ))
}
