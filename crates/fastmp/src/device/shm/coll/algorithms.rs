//! The shm device's native collectives: ranks publish references to their buffers in the
//! communicator's shared area and peers copy or reduce directly from them — one copy, no
//! intermediate buffers (the "smdev" collectives of the FastMPJ thesis, Listing 4.1).
//!
//! Every operation is one [`Session`] of the area's enter/leave protocol (see `area`): a rank
//! publishes its buffers, waits only for the *sources* it reads or writes, does a bounded amount
//! of copying or reducing, and leaves once no *accessor* can touch its buffers any more.
//! Reductions split the vector into near-equal chunks, one per rank, so the combining runs in
//! parallel, reading every rank's send buffer in place.

use std::ops::Range;
use std::panic::AssertUnwindSafe;

use bytemuck::Pod;

use super::super::copy;
use super::ShmCollectives;
use super::area::{Buffers, Session};
use crate::coll::op::{Op, fold_in_rank_order, fold_into_own};
use crate::coll::vector::even_block;
use crate::coll::{Collective, Layout};
use crate::device::collectives::Operation;
use crate::error::{Error, Result};
use crate::progress_agent::{AGENT_MIN_BYTES, Offloaded, would_offload, would_offload_to_idle_cpus};

/// This rank's part in one operation: the communicator's provider and the operation.
#[derive(Clone, Copy)]
pub(super) struct Native<'a> {
    pub(super) provider: &'a ShmCollectives,
    pub(super) op: &'a Operation<'a>,
}

impl Native<'_> {
    /// This rank in the communicator.
    fn rank(&self) -> usize {
        self.provider.me
    }

    /// Ranks in the communicator.
    fn size(&self) -> usize {
        self.provider.area.size()
    }
}

/// This rank's part of one native operation: publish `buffers`, wait for `sources`, run `work`
/// (synchronous: copies and reductions), then `then` (steps that wait for peers' intermediate
/// results), then leave — also after an error, or when dropped or unwinding (the session leaves
/// in place), so the borrowed buffers outlive every peer's access.
async fn collective_then(
    comm: Native<'_>,
    kind: usize,
    buffers: Buffers,
    sources: Range<usize>,
    accessors: Range<usize>,
    work: impl FnOnce(&Session) -> Result<()>,
    then: impl AsyncFnOnce(&Session) -> Result<()>,
) -> Result<()> {
    let (how, epoch) = comm.provider.open_lane(comm.op).await?;
    let mut session = comm.provider.area.enter(how, epoch, kind, buffers, (sources, accessors));
    let mut outcome = session.await_sources().await;
    if outcome.is_ok() {
        let _busy = comm.provider.hold_busy();
        // A user op may panic: the job fails naming this rank and the panic's message (the first
        // cause recorded wins, so the session's unwinding `Drop` does not replace it).
        outcome = match std::panic::catch_unwind(AssertUnwindSafe(|| work(&session))) {
            Ok(outcome) => outcome,
            Err(payload) => {
                session.fail_panicked(&crate::launch::panic_message(&*payload));
                std::panic::resume_unwind(payload)
            }
        };
    }
    if outcome.is_ok() {
        outcome = then(&session).await;
    }
    let left = session.leave(outcome.is_ok()).await;
    outcome.and(left)
}

/// [`collective_then`] without waiting steps.
async fn collective(
    comm: Native<'_>,
    kind: usize,
    buffers: Buffers,
    sources: Range<usize>,
    accessors: Range<usize>,
    work: impl FnOnce(&Session) -> Result<()>,
) -> Result<()> {
    collective_then(comm, kind, buffers, sources, accessors, work, async |_| Ok(())).await
}

/// What peers must agree on before touching each other's buffers: the operation and, for
/// reductions, the element size (chunk boundaries are computed in elements, so ranks with
/// different element types would write overlapping bytes).
fn kind(coll: Collective, elem_size: usize) -> usize {
    coll as usize | elem_size << 8
}

/// Sources and accessors of a rooted operation where only the root's buffers are shared.
fn rooted(comm: Native<'_>, root: usize) -> (Range<usize>, Range<usize>) {
    if comm.rank() == root { (0..0, 0..comm.size()) } else { (root..root + 1, 0..0) }
}

/// Peers in the order this rank visits them (starting after itself, so ranks spread out).
fn others(comm: Native<'_>) -> impl Iterator<Item = usize> {
    let (me, np) = (comm.rank(), comm.size());
    (1..np).map(move |k| (me + k) % np)
}

/// Bytes `range` of a buffer published in `session`'s operation, bounds-checked against `len`.
///
/// # Safety
/// `(ptr, len)` was published for this operation (by a source returned from [`Session::peer`],
/// or by this rank itself) and, while the session lasts, nobody writes `range`.
unsafe fn shared<'s>(_session: &'s Session, ptr: *const u8, len: usize, range: Range<usize>) -> Result<&'s [u8]> {
    check_range(&range, len)?;
    if range.is_empty() {
        return Ok(&[]);
    }
    // SAFETY: in bounds of the published buffer, which its owner keeps alive until this session
    // has left (protocol step 3); the caller guarantees no concurrent writes.
    Ok(unsafe { std::slice::from_raw_parts(ptr.add(range.start), range.len()) })
}

/// Like [`shared`], for writing.
///
/// # Safety
/// As for [`shared`], and while the session lasts nobody else reads or writes `range` (the
/// operation gives each rank a disjoint part of a written buffer).
#[allow(clippy::mut_from_ref)]
unsafe fn exclusive<'s>(_session: &'s Session, ptr: *mut u8, len: usize, range: Range<usize>) -> Result<&'s mut [u8]> {
    check_range(&range, len)?;
    if range.is_empty() {
        return Ok(&mut []);
    }
    // SAFETY: as in `shared`; exclusivity of `range` is the caller's guarantee.
    Ok(unsafe { std::slice::from_raw_parts_mut(ptr.add(range.start), range.len()) })
}

fn check_range(range: &Range<usize>, len: usize) -> Result<()> {
    if range.start <= range.end && range.end <= len {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "native collective: bytes {range:?} lie outside a peer's buffer of {len} bytes (arguments differ between ranks)"
        )))
    }
}

fn check_len(s: &Session, peer: usize, what: &str, actual: usize, expected: usize) -> Result<()> {
    if actual == expected {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{}: rank {peer}'s {what} has {actual} bytes where this rank expected {expected} (arguments differ between ranks)",
            s.collective()
        )))
    }
}

pub(super) async fn barrier(comm: Native<'_>) -> Result<()> {
    let (how, epoch) = comm.provider.open_lane(comm.op).await?;
    comm.provider.area.barrier(how, epoch).await
}

/// Listing 4.1 with Listing 4.3's rule for nonblocking use: the root publishes its buffer and
/// every receiver its own, and each receiver's copy is split into chunks that the receiver and
/// the root take in turn ([`Session::chunks`]). A receiver copies its chunks whenever it runs; in
/// an `ibcast` of at least [`AGENT_MIN_BYTES`], a root that finds a receiver already there copies
/// too, so a receiver that arrived first and computes overlaps the whole transfer, while one that
/// waits copies alongside the root.
///
/// Otherwise the root copies nothing. The receiver's copy writes lines already in its own cache
/// and the receivers copy in parallel, where the root's would pull each destination line across,
/// one receiver after another (at np 2 on the Intel VM, a blocking 64 KiB took 4.2–4.7 µs copied
/// by the root and 1.9 µs by the receiver).
pub(super) async fn bcast(comm: Native<'_>, buf: &mut [u8], root: usize) -> Result<()> {
    let (me, np, len) = (comm.rank(), comm.size(), buf.len());
    let kind = kind(Collective::Bcast, 1);
    if me == root {
        // Only the published pointer is used from here on: a new `&mut` reborrow of `buf` would
        // invalidate it (Stacked Borrows).
        let buffers = Buffers { send: buf.as_ptr(), send_len: len, ..Buffers::default() };
        let (how, epoch) = comm.provider.open_lane(comm.op).await?;
        let session = comm.provider.area.enter(how, epoch, kind, buffers, (0..np, 0..np));
        let root_copies = !comm.op.blocking && len >= AGENT_MIN_BYTES;
        let mut pushes = Vec::new();
        let mut pushed = others(comm).try_for_each(|p| {
            let Some(dst) = session.try_peer(p)? else { return Ok(()) };
            check_len(&session, p, "buffer", dst.recv_len, len)?;
            if root_copies {
                // SAFETY: `p` published its receive buffer of `len` bytes (checked) for this
                // bcast and reads it only once the copy is complete; ours is only read.
                let push = unsafe { copy_chunks(comm, &session, dst.recv, buffers.send, len, p) };
                if push.in_flight() {
                    pushes.push(push);
                }
            }
            Ok(())
        });
        for push in pushes {
            pushed = pushed.and(push.finish().await);
        }
        let left = session.leave(pushed.is_ok()).await;
        return pushed.and(left);
    }
    let buffers = Buffers { recv: buf.as_mut_ptr(), recv_len: len, ..Buffers::default() };
    let check = |s: &Session| {
        let src = s.peer(root)?;
        check_len(s, root, "buffer", src.send_len, len)
    };
    let pull = async |s: &Session| {
        if len == 0 {
            return Ok(());
        }
        let src = s.peer(root)?;
        // SAFETY: our receive buffer and the root's, both published for this bcast with `len`
        // bytes (checked); the root only reads its own, and ours is read only after the copy.
        unsafe { copy_chunks(comm, s, buffers.recv, src.send, len, me) }.finish().await?;
        s.await_copied(root).await
    };
    let only_root = root..root + 1;
    collective_then(comm, kind, buffers, only_root.clone(), only_root, check, pull).await
}

/// The two ends of a chunked copy, carried to whichever thread runs it.
struct CopyEnds {
    into: *mut u8,
    from: *const u8,
    /// The whole message's length, which picks the store kind for every chunk alike.
    len: usize,
}

// SAFETY: the pointers are dereferenced only in `CopyEnds::copy`, whose callers hold the chunk
// they copy exclusively and keep both buffers alive (see `copy_chunks`).
unsafe impl Send for CopyEnds {}

impl CopyEnds {
    /// # Safety
    /// `range` lies in both buffers, and nobody else touches it in `into` or writes it in `from`.
    unsafe fn copy(&self, range: Range<usize>) {
        // SAFETY: the caller's guarantee.
        unsafe { copy::copy(self.into.add(range.start), self.from.add(range.start), range.len(), self.len) }
    }
}

/// Copies `len` bytes from `from` into `into`, `p`'s receive buffer, taking chunks until none is
/// left ([`Session::chunks`]; `p`'s root may be taking them too): on the progress agent when a
/// nonblocking run's copy is large enough, else here.
///
/// # Safety
/// `into` and `from` were published for `s`'s operation with at least `len` bytes each; while
/// the session lasts nobody writes `from`, and nobody but the chunks' takers touches `into`
/// until the copy is complete.
unsafe fn copy_chunks<'s>(
    comm: Native<'_>,
    s: &'s Session,
    into: *mut u8,
    from: *const u8,
    len: usize,
    p: usize,
) -> Offloaded<'s> {
    let chunks = s.chunks(p, len);
    let ends = CopyEnds { into, from, len };
    // SAFETY: the step is kept in the operation's future (or finished on the blocking run's
    // stack), which is dropped or finished before the session — and so the buffers' borrows —
    // end.
    unsafe {
        Offloaded::start(len, comm.op.blocking, move || {
            // SAFETY: in bounds (the caller's guarantee), and `take` hands each byte to one
            // taker only.
            chunks.copy_each(|chunk| ends.copy(chunk));
        })
    }
}

/// How a buffer splits into per-rank blocks: equal blocks (implied by arguments every rank has,
/// so nothing is published or allocated), a validated `v` layout, or (non-roots of `scatterv`
/// and `gatherv`) the layout the root publishes.
#[derive(Clone, Copy)]
enum Blocks<'a> {
    Equal(usize),
    Layout(&'a Layout),
    RootsLayout,
}

impl<'a> Blocks<'a> {
    fn of(self, rank: usize) -> Range<usize> {
        match self {
            Blocks::Equal(size) => rank * size..(rank + 1) * size,
            Blocks::Layout(layout) => layout.block(rank),
            // Only roots look up their own blocks, and they always have a layout.
            Blocks::RootsLayout => 0..0,
        }
    }

    /// The layout to publish for peers (none for equal blocks, which peers know themselves).
    fn published(self) -> *const () {
        match self {
            Blocks::Equal(_) | Blocks::RootsLayout => std::ptr::null(),
            Blocks::Layout(layout) => std::ptr::from_ref(layout).cast(),
        }
    }

    /// The blocks of source `p`'s buffer (`src`, of `src_len` bytes) in this operation: equal
    /// blocks like ours, once `src_len` is checked to be `count` of them, or (`v` variants) the
    /// layout `p` published.
    fn of_source(self, s: &'a Session, p: usize, src: &Buffers, src_len: usize, count: usize) -> Result<Blocks<'a>> {
        match self {
            Blocks::Equal(size) => {
                check_len(s, p, "buffer", src_len, size * count)?;
                Ok(Blocks::Equal(size))
            }
            // SAFETY: our kind is a `v` variant (see `kind_of`) and the snapshot's kind equals
            // ours, so `p` published its `&Layout` as `extra`.
            Blocks::Layout(_) | Blocks::RootsLayout => Ok(Blocks::Layout(unsafe { source_layout(s, src) })),
        }
    }
}

/// The operation kind: `equal`, or its `v` variant `v` (which publishes its layout).
fn kind_of(blocks: Blocks, equal: Collective, v: Collective) -> usize {
    kind(if matches!(blocks, Blocks::Equal(_)) { equal } else { v }, 1)
}

/// The layout source `src` published.
///
/// # Safety
/// `src` comes from `session`'s [`Session::peer`] and the session's kind is a `v` variant.
unsafe fn source_layout<'s>(_session: &'s Session, src: &Buffers) -> &'s Layout {
    // SAFETY: per the contract `extra` is the source's `&Layout`, alive until the session leaves
    // (protocol step 3) and never written meanwhile.
    unsafe { &*src.extra.cast::<Layout>() }
}

pub(super) async fn scatter(comm: Native<'_>, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    scatter_blocks(comm, send, Blocks::Equal(recv.len()), recv, root).await
}

pub(super) async fn scatterv(
    comm: Native<'_>,
    send: &[u8],
    layout: Option<&Layout>,
    recv: &mut [u8],
    root: usize,
) -> Result<()> {
    scatter_blocks(comm, send, root_layout(comm, layout, root)?, recv, root).await
}

/// The blocks of a rooted `v` collective: only the root has (and must have) a layout.
fn root_layout<'a>(comm: Native<'_>, layout: Option<&'a Layout>, root: usize) -> Result<Blocks<'a>> {
    match layout {
        Some(layout) => Ok(Blocks::Layout(layout)),
        None if comm.rank() == root => Err(Error::InvalidArgument("v collective: the root has no layout".into())),
        None => Ok(Blocks::RootsLayout),
    }
}

/// The root publishes its send buffer (and layout); every rank copies its own block.
async fn scatter_blocks(comm: Native<'_>, send: &[u8], blocks: Blocks<'_>, recv: &mut [u8], root: usize) -> Result<()> {
    let (me, is_root) = (comm.rank(), comm.rank() == root);
    let buffers = if is_root {
        Buffers { send: send.as_ptr(), send_len: send.len(), extra: blocks.published(), ..Buffers::default() }
    } else {
        Buffers::default()
    };
    let (sources, accessors) = rooted(comm, root);
    let kind = kind_of(blocks, Collective::Scatter, Collective::Scatterv);
    collective(comm, kind, buffers, sources, accessors, |s| {
        let (src, src_blocks) = if is_root {
            (buffers, blocks)
        } else {
            let src = s.peer(root)?;
            (src, blocks.of_source(s, root, &src, src.send_len, comm.size())?)
        };
        let mine = src_blocks.of(me);
        check_len(s, root, "block for this rank", mine.len(), recv.len())?;
        // SAFETY: the root's send buffer is published for this scatter, which only reads it.
        recv.copy_from_slice(unsafe { shared(s, src.send, src.send_len, mine) }?);
        Ok(())
    })
    .await
}

pub(super) async fn gather(comm: Native<'_>, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    gather_blocks(comm, send, recv, Blocks::Equal(send.len()), root).await
}

pub(super) async fn gatherv(
    comm: Native<'_>,
    send: &[u8],
    recv: &mut [u8],
    layout: Option<&Layout>,
    root: usize,
) -> Result<()> {
    gather_blocks(comm, send, recv, root_layout(comm, layout, root)?, root).await
}

/// The root publishes its receive buffer (and layout); every rank writes its own block into it.
async fn gather_blocks(comm: Native<'_>, send: &[u8], recv: &mut [u8], blocks: Blocks<'_>, root: usize) -> Result<()> {
    let (me, is_root) = (comm.rank(), comm.rank() == root);
    let buffers = if is_root {
        Buffers { recv: recv.as_mut_ptr(), recv_len: recv.len(), extra: blocks.published(), ..Buffers::default() }
    } else {
        Buffers::default()
    };
    let (sources, accessors) = rooted(comm, root);
    let kind = kind_of(blocks, Collective::Gather, Collective::Gatherv);
    collective(comm, kind, buffers, sources, accessors, |s| {
        let (dst, dst_blocks) = if is_root {
            (buffers, blocks)
        } else {
            let dst = s.peer(root)?;
            (dst, blocks.of_source(s, root, &dst, dst.recv_len, comm.size())?)
        };
        let mine = dst_blocks.of(me);
        check_len(s, root, "block for this rank", mine.len(), send.len())?;
        // SAFETY: the root's receive buffer is published for this gather; every rank writes
        // only its own block (equal blocks, or the root's layout, validated free of overlaps)
        // and the root reads nothing before all have left.
        unsafe { exclusive(s, dst.recv, dst.recv_len, mine) }?.copy_from_slice(send);
        Ok(())
    })
    .await
}

pub(super) async fn allgather(comm: Native<'_>, send: Option<&[u8]>, recv: &mut [u8]) -> Result<()> {
    let block = send.map_or(recv.len() / comm.size().max(1), <[u8]>::len);
    allgather_blocks(comm, send, recv, Blocks::Equal(block)).await
}

pub(super) async fn allgatherv(comm: Native<'_>, send: Option<&[u8]>, recv: &mut [u8], layout: &Layout) -> Result<()> {
    allgather_blocks(comm, send, recv, Blocks::Layout(layout)).await
}

/// Every rank publishes its send buffer (in place: its own block of `recv`) and copies every
/// other block into its own receive buffer.
async fn allgather_blocks(comm: Native<'_>, send: Option<&[u8]>, recv: &mut [u8], blocks: Blocks<'_>) -> Result<()> {
    let me = comm.rank();
    let own = blocks.of(me);
    let recv_len = recv.len();
    check_range(&own, recv_len)?;
    // In place, peers read our own block while we write the others: from here on every access
    // to `recv` goes through this pointer, so the published one stays valid (Stacked Borrows).
    let recv_ptr = recv.as_mut_ptr();
    let buffers = match send {
        Some(send) => Buffers { send: send.as_ptr(), send_len: send.len(), ..Buffers::default() },
        // `own` lies inside `recv` (checked above).
        None => Buffers { send: recv_ptr.wrapping_add(own.start), send_len: own.len(), ..Buffers::default() },
    };
    let everyone = 0..comm.size();
    let kind = kind_of(blocks, Collective::Allgather, Collective::Allgatherv);
    collective(comm, kind, buffers, everyone.clone(), everyone, |s| {
        if let Some(send) = send {
            // SAFETY: our own receive buffer; peers never touch it when we have a send buffer.
            unsafe { exclusive(s, recv_ptr, recv_len, own) }?.copy_from_slice(send);
        }
        for p in others(comm) {
            let src = s.peer(p)?;
            let dest = blocks.of(p);
            check_len(s, p, "send buffer", src.send_len, dest.len())?;
            // SAFETY: our own receive buffer; block `p` is disjoint from our own block, the only
            // part peers read (a validated layout has no overlapping blocks).
            let into = unsafe { exclusive(s, recv_ptr, recv_len, dest.clone()) }?;
            // SAFETY: `p`'s send buffer is published for this allgather, which only reads it.
            into.copy_from_slice(unsafe { shared(s, src.send, src.send_len, 0..dest.len()) }?);
        }
        Ok(())
    })
    .await
}

pub(super) async fn alltoall(comm: Native<'_>, send: Option<&[u8]>, recv: &mut [u8]) -> Result<()> {
    let blocks = Blocks::Equal(recv.len() / comm.size());
    match send {
        Some(send) if offloads_alltoall(comm, send, recv) => alltoall_offloaded(comm, send, recv).await,
        Some(send) => alltoall_blocks(comm, send, blocks, recv, blocks).await,
        None => alltoall_swap(comm, recv, blocks).await,
    }
}

/// In place (`send` is `None`), `recv_layout` is the one layout of both directions.
pub(super) async fn alltoallv(
    comm: Native<'_>,
    send: Option<&[u8]>,
    send_layout: &Layout,
    recv: &mut [u8],
    recv_layout: &Layout,
) -> Result<()> {
    match send {
        Some(send) => alltoall_blocks(comm, send, Blocks::Layout(send_layout), recv, Blocks::Layout(recv_layout)).await,
        None => alltoall_swap(comm, recv, Blocks::Layout(recv_layout)).await,
    }
}

/// Every rank publishes its send buffer (and layout) and reads its block from every peer's.
async fn alltoall_blocks(
    comm: Native<'_>,
    send: &[u8],
    send_blocks: Blocks<'_>,
    recv: &mut [u8],
    recv_blocks: Blocks<'_>,
) -> Result<()> {
    let (me, np) = (comm.rank(), comm.size());
    let buffers =
        Buffers { send: send.as_ptr(), send_len: send.len(), extra: send_blocks.published(), ..Buffers::default() };
    let everyone = 0..np;
    let kind = kind_of(send_blocks, Collective::Alltoall, Collective::Alltoallv);
    collective(comm, kind, buffers, everyone.clone(), everyone, |s| {
        let own = send_blocks.of(me);
        check_len(s, me, "block for itself", own.len(), recv_blocks.of(me).len())?;
        recv[recv_blocks.of(me)].copy_from_slice(&send[own]);
        for p in others(comm) {
            let src = s.peer(p)?;
            let from = send_blocks.of_source(s, p, &src, src.send_len, np)?.of(me);
            let dest = recv_blocks.of(p);
            check_len(s, p, "block for this rank", from.len(), dest.len())?;
            // SAFETY: `p`'s send buffer is published for this alltoall, which only reads it.
            recv[dest].copy_from_slice(unsafe { shared(s, src.send, src.send_len, from) }?);
        }
        Ok(())
    })
    .await
}

/// Whether a nonblocking alltoall hands its copies to the progress agent: equal blocks, not in
/// place, buffers of at least the agent's minimum, and the agent on with idle CPUs. Every rank
/// decides alike (same sizes, same process-wide agent); the kind differs from the inline
/// path's anyway.
fn offloads_alltoall(comm: Native<'_>, send: &[u8], recv: &[u8]) -> bool {
    send.len() == recv.len()
        && recv.len().is_multiple_of(comm.size())
        && would_offload_to_idle_cpus(recv.len(), comm.op.blocking)
}

/// Marks the kind of an alltoall whose copies go to the progress agent (its ranks publish their
/// receive buffers too).
const OFFLOADED: usize = 1 << 6;
const _: () = assert!((Collective::Scan as usize) < OFFLOADED);

/// The copies into rank `dest`'s receive buffer of an alltoall with equal blocks of `block`
/// bytes: its block `j` comes from block `dest` of source `j`'s send buffer. Carried to
/// whichever thread copies a chunk of it.
struct BlockCopies {
    into: *mut u8,
    sources: Vec<*const u8>,
    dest: usize,
    block: usize,
}

// SAFETY: the pointers are dereferenced only in `BlockCopies::copy`, whose callers hold the
// chunk they copy exclusively and keep every buffer alive (see `alltoall_offloaded`).
unsafe impl Send for BlockCopies {}

impl BlockCopies {
    /// Copies bytes `range` of the receive buffer (of `sources.len()` blocks), block by block.
    ///
    /// # Safety
    /// `range` lies in the receive buffer, nobody else touches it there meanwhile, and nobody
    /// writes the sources' send buffers (each of `sources.len()` blocks) meanwhile.
    unsafe fn copy(&self, range: Range<usize>) {
        let whole = self.block * self.sources.len();
        let mut at = range.start;
        while at < range.end {
            let (j, within) = (at / self.block, at % self.block);
            let n = (self.block - within).min(range.end - at);
            // SAFETY: block `j` of the receive buffer and block `dest` of source `j`'s send
            // buffer, both in bounds, per the caller's guarantee.
            unsafe { copy::copy(self.into.add(at), self.sources[j].add(self.dest * self.block + within), n, whole) };
            at += n;
        }
    }
}

/// Alltoall whose copies go to the progress agent while the ranks compute. Every rank publishes
/// both buffers; the copy into each receive buffer is split into chunks ([`Session::chunks`])
/// that whoever runs takes. A rank hands its own buffer's copy to the agent once every source
/// has arrived, and the rank that arrives last (it finds all the others there) hands every
/// rank's, so the ranks that arrived first get their data while they compute. A rank that
/// waits takes the chunks still left of its own buffer, then waits for those in flight.
async fn alltoall_offloaded(comm: Native<'_>, send: &[u8], recv: &mut [u8]) -> Result<()> {
    let (me, np, len) = (comm.rank(), comm.size(), recv.len());
    let block = len / np;
    // Only the published pointer is used from here on (Stacked Borrows).
    let recv_ptr = recv.as_mut_ptr();
    let buffers =
        Buffers { send: send.as_ptr(), send_len: len, recv: recv_ptr, recv_len: len, extra: std::ptr::null() };
    let everyone = 0..np;
    let kind = kind(Collective::Alltoall, 1) | OFFLOADED;
    let (how, epoch) = comm.provider.open_lane(comm.op).await?;
    let mut session = comm.provider.area.enter(how, epoch, kind, buffers, (everyone.clone(), everyone.clone()));
    let last_to_arrive = others(comm).all(|p| matches!(session.try_peer(p), Ok(Some(_))));
    let mut outcome = session.await_sources().await.and_then(|()| {
        others(comm).try_for_each(|p| {
            let peer = session.peer(p)?;
            check_len(&session, p, "send buffer", peer.send_len, len)?;
            check_len(&session, p, "receive buffer", peer.recv_len, len)
        })
    });
    let s = &session;
    let copies_into = |dest: usize| -> Result<BlockCopies> {
        let sources = everyone
            .clone()
            .map(|j| Ok(if j == me { send.as_ptr() } else { s.peer(j)?.send }))
            .collect::<Result<_>>()?;
        let into = if dest == me { recv_ptr } else { s.peer(dest)?.recv };
        Ok(BlockCopies { into, sources, dest, block })
    };
    let mut steps = Vec::new();
    if outcome.is_ok() {
        let dests: Vec<usize> = if last_to_arrive { everyone.clone().collect() } else { vec![me] };
        for dest in dests {
            let copies = match copies_into(dest) {
                Ok(copies) => copies,
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            };
            let chunks = s.chunks(dest, len);
            // SAFETY: the step is kept in this future (or run at once), which is finished or
            // dropped before the session leaves, and so before any buffer's borrow ends: every
            // rank waits in `leave` until all have left. Each chunk is copied by its taker alone.
            steps.push(unsafe {
                Offloaded::start(len, comm.op.blocking, move || {
                    // SAFETY: see above; `take` hands each chunk of `dest`'s buffer to one taker.
                    chunks.copy_each(|chunk| copies.copy(chunk));
                })
            });
        }
    }
    for step in steps {
        outcome = outcome.and(step.finish().await);
    }
    if outcome.is_ok() {
        // What is left of our own buffer's copy we make ourselves, then wait for the chunks
        // other threads are copying (running queued agent items meanwhile).
        outcome = copies_into(me).map(|copies| {
            // SAFETY: as for the steps above.
            s.chunks(me, len).copy_each(|chunk| unsafe { copies.copy(chunk) });
        });
    }
    if outcome.is_ok() {
        outcome = session.await_claimed_done(&crate::progress_agent::help_the_agent).await;
    }
    let left = session.leave(outcome.is_ok()).await;
    outcome.and(left)
}

/// Marks the kind of an in-place operation whose ranks must all be in place (its buffers are
/// published differently).
const IN_PLACE: usize = 1 << 7;
const _: () = assert!((Collective::Scan as usize) < IN_PLACE);

/// Alltoall(v) in place: block `p` of this rank's buffer and block `me` of `p`'s trade places,
/// so the pair's two blocks are swapped where they lie, with no temporary and no more traffic
/// than a copy: the lower rank of the pair swaps the first half of the bytes and the higher
/// rank the rest, so every rank does the same work and all pairs proceed at once. Of each
/// buffer, a pair's blocks are touched by that pair alone, and nobody reads a block before
/// everyone has left.
async fn alltoall_swap(comm: Native<'_>, buf: &mut [u8], blocks: Blocks<'_>) -> Result<()> {
    let (me, np, len) = (comm.rank(), comm.size(), buf.len());
    // Only the published pointer is used from here on, so it stays valid (Stacked Borrows).
    let ptr = buf.as_mut_ptr();
    let buffers = Buffers { recv: ptr, recv_len: len, extra: blocks.published(), ..Buffers::default() };
    let everyone = 0..np;
    let kind = kind_of(blocks, Collective::Alltoall, Collective::Alltoallv) | IN_PLACE;
    collective(comm, kind, buffers, everyone.clone(), everyone, |s| {
        check_range(&blocks.of(me), len)?;
        for p in others(comm) {
            let peer = s.peer(p)?;
            let theirs = blocks.of_source(s, p, &peer, peer.recv_len, np)?.of(me);
            let mine = blocks.of(p);
            check_len(s, p, "block for this rank", theirs.len(), mine.len())?;
            let half = mine.len() / 2;
            let part = if me < p { 0..half } else { half..mine.len() };
            let at = |block: &Range<usize>| block.start + part.start..block.start + part.end;
            // SAFETY: block `p` of our buffer and block `me` of `p`'s, both published for this
            // alltoall: only this pair touches them, and of the bytes `part` only this rank
            // (`p` takes the other half). Validated layouts have no overlapping blocks.
            let (a, b) =
                unsafe { (exclusive(s, ptr, len, at(&mine))?, exclusive(s, peer.recv, peer.recv_len, at(&theirs))?) };
            a.swap_with_slice(b);
        }
        Ok(())
    })
    .await
}

/// Elements to reduce: zero-sized types carry no data, so they reduce as empty vectors.
fn reducible_len<T>(values: &[T]) -> usize {
    if size_of::<T>() == 0 { 0 } else { values.len() }
}

fn typed<T: Pod>(bytes: &[u8]) -> Result<&[T]> {
    if bytes.is_empty() {
        return Ok(&[]);
    }
    bytemuck::try_cast_slice(bytes).map_err(type_mismatch)
}

fn typed_mut<T: Pod>(bytes: &mut [u8]) -> Result<&mut [T]> {
    if bytes.is_empty() {
        return Ok(&mut []);
    }
    bytemuck::try_cast_slice_mut(bytes).map_err(type_mismatch)
}

fn type_mismatch(e: bytemuck::PodCastError) -> Error {
    Error::InvalidArgument(format!("native collective: element types differ between ranks ({e:?})"))
}

/// Elements `elems` of rank `p`'s send buffer (this rank's own `send` for `p == me`).
fn send_of<'s, T: Pod>(s: &'s Session, send: &'s [T], p: usize, elems: Range<usize>) -> Result<&'s [T]> {
    if p == s.me() {
        return Ok(&send[elems]);
    }
    let src = s.peer(p)?;
    let size = size_of::<T>();
    // SAFETY: `p`'s send buffer is published for this reduction, which only reads it.
    typed(unsafe { shared(s, src.send, src.send_len, elems.start * size..elems.end * size) }?)
}

/// Checks that every peer's send buffer has `bytes` bytes.
fn check_sends(comm: Native<'_>, s: &Session, bytes: usize) -> Result<()> {
    others(comm).try_for_each(|p| check_len(s, p, "send buffer", s.peer(p)?.send_len, bytes))
}

/// Rank i reduces chunk i over all send buffers straight into chunk i of the root's receive
/// buffer. A root in place (`send` is `None`) publishes its receive buffer as its send buffer;
/// chunk i of it is read and written by rank i alone, which folds the others' chunks into it.
/// The other ranks see that from the root's buffers (the same pointer twice), since only the
/// root says "in place".
pub(super) async fn reduce<T: Pod>(
    comm: Native<'_>,
    send: Option<&[T]>,
    recv: &mut [T],
    op: &dyn Op<T>,
    root: usize,
) -> Result<()> {
    let (me, np) = (comm.rank(), comm.size());
    let recv_ptr: *mut u8 = recv.as_mut_ptr().cast();
    let (len, bytes) = match send {
        Some(send) => (reducible_len(send), size_of_val(send)),
        None => (reducible_len(&*recv), size_of_val(recv)),
    };
    let send_ptr = send.map_or(recv_ptr.cast_const(), |send| send.as_ptr().cast());
    let mut buffers = Buffers { send: send_ptr, send_len: bytes, ..Buffers::default() };
    if me == root {
        (buffers.recv, buffers.recv_len) = (recv_ptr, size_of_val(recv));
    }
    let send = send.unwrap_or(&[]);
    let everyone = 0..np;
    collective(comm, kind(Collective::Reduce, size_of::<T>()), buffers, everyone.clone(), everyone.clone(), |s| {
        check_sends(comm, s, bytes)?;
        let dst = if me == root { buffers } else { s.peer(root)? };
        check_len(s, root, "receive buffer", dst.recv_len, bytes)?;
        let mine = even_block(len, np, me);
        let size = size_of::<T>();
        // SAFETY: the root's receive buffer is published for this reduce; each rank writes only
        // its own chunk and nobody reads it before all have left (in place, chunk i of the
        // root's send buffer is that chunk, which only rank i reads: see `fold_into_own`).
        let dest = typed_mut(unsafe { exclusive(s, dst.recv, dst.recv_len, mine.start * size..mine.end * size) }?)?;
        let input = |j| send_of(s, send, j, mine.clone());
        if dst.send.cast_mut() == dst.recv && bytes > 0 {
            fold_into_own(op, dest, root, everyone, input)
        } else {
            fold_in_rank_order(op, dest, everyone, input)
        }
    })
    .await
}

/// Rank i reduces chunk i over all send buffers into chunk i of its own receive buffer and
/// writes the result into chunk i of every peer's: chunk i of every buffer is touched by rank i
/// alone, so nobody waits for anyone's intermediate result (leaving waits for the writers), and
/// in place (`send` is `None`: the receive buffer is published as the send buffer too) nothing
/// is copied. Pushing rather than pulling also keeps each chunk's lines in its owner's cache
/// across calls on the same buffers: in place a pull read peers' chunks the peers had just
/// written (their previous copy), which made in-place calls 1.5–1.7× slower at 16–64 KiB.
pub(super) async fn allreduce<T: Pod>(
    comm: Native<'_>,
    send: Option<&[T]>,
    recv: &mut [T],
    op: &dyn Op<T>,
) -> Result<()> {
    let (me, np) = (comm.rank(), comm.size());
    let len = send.map_or_else(|| reducible_len(&*recv), reducible_len);
    let bytes = size_of_val(recv);
    let recv_ptr: *mut u8 = recv.as_mut_ptr().cast();
    let buffers = Buffers {
        send: send.map_or(recv_ptr.cast_const(), |send| send.as_ptr().cast()),
        send_len: send.map_or(bytes, size_of_val),
        recv: recv_ptr,
        recv_len: bytes,
        extra: std::ptr::null(),
    };
    let everyone = 0..np;
    let kind = kind(Collective::Allreduce, size_of::<T>());
    let mine = even_block(len, np, me);
    let chunk = mine.start * size_of::<T>()..mine.end * size_of::<T>();
    // A nonblocking run hands its chunk's fold and copies to the progress agent when the op may
    // run on another thread; the rank then only checks the arguments in its synchronous work.
    // Not in place: there the chunks read are the ones written, which the agent's step could
    // not hold as separate borrows.
    let agent_op = send.and(op.shareable()).filter(|_| would_offload(chunk.len() * np, comm.op.blocking));
    let checks = |s: &Session| {
        check_sends(comm, s, buffers.send_len)?;
        others(comm).try_for_each(|p| check_len(s, p, "receive buffer", s.peer(p)?.recv_len, bytes))
    };
    // SAFETY (both uses below): chunk `me` of our own receive buffer, published for this
    // allreduce: of every buffer only rank `me` touches chunk `me` (in place, only we read it;
    // peers write their own chunks of it).
    let Some(shared_op) = agent_op else {
        return collective(comm, kind, buffers, everyone.clone(), everyone.clone(), |s| {
            checks(s)?;
            let dest = typed_mut(unsafe { exclusive(s, recv_ptr, bytes, chunk.clone()) }?)?;
            fold_chunk(op, send.is_some(), (me, np), dest, |j| send_of(s, send.unwrap_or(&[]), j, mine.clone()))?;
            if chunk.is_empty() {
                return Ok(());
            }
            let result: &[u8] = bytemuck::cast_slice(dest);
            for p in others(comm) {
                let dst = s.peer(p)?;
                // SAFETY: chunk `me` of `p`'s receive buffer, published for this allreduce: only
                // this rank touches it (see above), and in place we finished reading it in the fold.
                unsafe { exclusive(s, dst.recv, dst.recv_len, chunk.clone()) }?.copy_from_slice(result);
            }
            Ok(())
        })
        .await;
    };
    // Each share (chunk q of every vector) is claimed by one rank: its owner, or a rank that
    // arrives when all others have entered (it claims every share still free), so the rank that
    // arrived first gets its share done by the last one's agent while it computes.
    let share_bytes = |q: usize| {
        let block = even_block(len, np, q);
        block.start * size_of::<T>()..block.end * size_of::<T>()
    };
    let (how, epoch) = comm.provider.open_lane(comm.op).await?;
    let mut session = comm.provider.area.enter(how, epoch, kind, buffers, (everyone.clone(), everyone.clone()));
    let outcomes: Vec<std::sync::OnceLock<Result<()>>> = everyone.clone().map(|_| std::sync::OnceLock::new()).collect();
    let last_to_arrive = others(comm).all(|p| matches!(session.try_peer(p), Ok(Some(_))));
    let mut outcome = session.await_sources().await.and_then(|()| checks(&session));
    let mut steps = Vec::new();
    let s = &session;
    let mut start_share = |q: usize| -> Result<()> {
        let bytes_q = share_bytes(q);
        let block = even_block(len, np, q);
        // The agent cannot ask the session for the peers' buffers: resolve them here, as bytes
        // (a `Pod` slice is plain data, whichever thread reads it). Chunk q of every send buffer.
        let sources: Vec<&[u8]> = everyone
            .clone()
            .map(|j| send_of(s, send.unwrap_or(&[]), j, block.clone()).map(bytemuck::cast_slice))
            .collect::<Result<_>>()?;
        let mut targets = Vec::with_capacity(np);
        for p in everyone.clone() {
            let recv_of_p = if p == me { recv_ptr } else { s.peer(p)?.recv };
            // SAFETY: chunk q of `p`'s receive buffer, published for this allreduce (or our
            // own): only the rank that won share q's claim touches it, and it is not a send
            // buffer (not in place).
            targets.push(unsafe { exclusive(s, recv_of_p, bytes, bytes_q.clone()) }?);
        }
        let signal = s.copied_signal(q);
        let outcome_of_step = &outcomes[q];
        // SAFETY: the step lives in this future (see `copy_then_signal`).
        let step = unsafe {
            Offloaded::start(bytes_q.len() * np, false, move || {
                let (dest, copies) = targets.split_first_mut().expect("np >= 1");
                let result = typed_mut::<T>(dest).and_then(|dest| {
                    fold_chunk(shared_op, true, (me, np), dest, |j| typed::<T>(sources[j]))?;
                    let result: &[u8] = bytemuck::cast_slice(dest);
                    copies.iter_mut().for_each(|target| target.copy_from_slice(result));
                    Ok(())
                });
                if result.is_ok() {
                    signal();
                }
                let _ = outcome_of_step.set(result);
            })
        };
        steps.push(step);
        Ok(())
    };
    let mut mine_claimed = false;
    if outcome.is_ok() {
        let shares: Vec<usize> = if last_to_arrive { everyone.clone().collect() } else { vec![me] };
        for q in shares {
            if s.claim_copy(q) {
                mine_claimed |= q == me;
                outcome = start_share(q);
                if outcome.is_err() {
                    break;
                }
            }
        }
    }
    for step in steps {
        outcome = outcome.and(step.finish().await);
    }
    for share in outcomes {
        outcome = outcome.and(share.into_inner().unwrap_or(Ok(())));
    }
    if outcome.is_ok() && !mine_claimed && !chunk.is_empty() {
        // Whoever claimed our share handed it to its agent: run queued steps (that one, or a
        // peer's) rather than only wait.
        outcome = session.await_claimed_done(&crate::progress_agent::help_the_agent).await;
    }
    let left = session.leave(outcome.is_ok()).await;
    outcome.and(left)
}

/// Folds chunk `me` of every rank's vector (`input(j)`) into `dest`, in rank order; in place,
/// `dest` already holds this rank's own.
fn fold_chunk<'v, T: Pod>(
    op: &dyn Op<T>,
    has_send: bool,
    (me, np): (usize, usize),
    dest: &mut [T],
    input: impl Fn(usize) -> Result<&'v [T]>,
) -> Result<()> {
    if has_send { fold_in_rank_order(op, dest, 0..np, input) } else { fold_into_own(op, dest, me, 0..np, input) }
}

/// Rank i reduces its own block over all send buffers into its receive buffer.
pub(super) async fn reduce_scatter<T: Pod>(
    comm: Native<'_>,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    op: &dyn Op<T>,
) -> Result<()> {
    let (me, np) = (comm.rank(), comm.size());
    let start: usize = counts[..me].iter().sum();
    let mine = if size_of::<T>() == 0 { 0..0 } else { start..start + counts[me] };
    let bytes = size_of_val(send);
    let buffers = Buffers { send: send.as_ptr().cast(), send_len: bytes, ..Buffers::default() };
    let everyone = 0..np;
    collective(
        comm,
        kind(Collective::ReduceScatter, size_of::<T>()),
        buffers,
        everyone.clone(),
        everyone.clone(),
        |s| {
            check_sends(comm, s, bytes)?;
            let dest = if mine.is_empty() { &mut recv[..0] } else { &mut *recv };
            fold_in_rank_order(op, dest, everyone, |j| send_of(s, send, j, mine.clone()))
        },
    )
    .await
}

/// Rank i combines the send buffers of ranks 0..=i (0..i for exscan) in place. In place
/// (`send` is `None`: the receive buffer is published as the send buffer) rank 0 has nothing to
/// do and the last rank, whose buffer nobody reads, folds the others into its own; a middle
/// rank's buffer is read by the ranks above it, so it must pass a copy.
pub(super) async fn scan<T: Pod>(
    comm: Native<'_>,
    send: Option<&[T]>,
    recv: &mut [T],
    op: &dyn Op<T>,
    exscan: bool,
) -> Result<()> {
    let (me, np) = (comm.rank(), comm.size());
    if send.is_none() && me != 0 && me + 1 != np {
        return Err(Error::InvalidArgument(format!(
            "native scan in place: rank {me} of {np} needs a copy of its input"
        )));
    }
    let len = send.map_or_else(|| reducible_len(&*recv), reducible_len);
    let bytes = size_of_val(recv);
    // In place peers read our buffer through this pointer; every access goes through it.
    let recv_ptr: *mut u8 = recv.as_mut_ptr().cast();
    let send_ptr = send.map_or(recv_ptr.cast_const(), |send| send.as_ptr().cast());
    let buffers = Buffers { send: send_ptr, send_len: send.map_or(bytes, size_of_val), ..Buffers::default() };
    let inputs = if exscan { 0..me } else { 0..me + 1 };
    collective(comm, kind(Collective::Scan, size_of::<T>()), buffers, inputs.clone(), me + 1..np, |s| {
        for p in inputs.clone().filter(|&p| p != me) {
            check_len(s, p, "send buffer", s.peer(p)?.send_len, buffers.send_len)?;
        }
        if send.is_none() && me == 0 {
            return Ok(()); // its result is its input (exscan: left unchanged)
        }
        // SAFETY: our own receive buffer; peers read it only in place, and then only when we
        // returned above (a last rank has no readers).
        let dest = typed_mut(unsafe { exclusive(s, recv_ptr, bytes, 0..len * size_of::<T>()) }?)?;
        let input = |j| send_of(s, send.unwrap_or(&[]), j, 0..len);
        match send {
            None if !exscan => fold_into_own(op, dest, me, inputs, input),
            _ => fold_in_rank_order(op, dest, inputs, input),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use crate::coll::{Algorithm, Collective, Tuning};
    use crate::op::{Op, Sum, UserOp};
    use crate::{Comm, Config, Error, Result};

    fn native_tuning() -> Tuning {
        Collective::ALL.iter().fold(Tuning::defaults(), |t, &c| t.force(c, Algorithm::Native).expect("native"))
    }

    fn job<R: Send>(np: usize, f: impl Fn(Comm) -> Result<R> + Sync) -> Result<Vec<R>> {
        Config::new().np(np).tuning(native_tuning()).run(f)
    }

    fn val(rank: usize, i: usize) -> u64 {
        (rank as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64).wrapping_mul(0xD1B5_4A32_D192_ED03)
    }

    fn data(rank: usize, n: usize) -> Vec<u64> {
        (0..n).map(|i| val(rank, i)).collect()
    }

    /// Affine maps x ↦ a·x + b composed: associative, not commutative.
    fn compose(l: [u64; 2], r: [u64; 2]) -> [u64; 2] {
        [l[0].wrapping_mul(r[0]), l[0].wrapping_mul(r[1]).wrapping_add(l[1])]
    }

    fn affine(rank: usize, n: usize) -> Vec<[u64; 2]> {
        (0..n).map(|i| [val(rank, i) | 1, val(rank + 100, i)]).collect()
    }

    /// Left fold of `affine` over `ranks`, or `None` for no ranks.
    fn affine_prefix(ranks: std::ops::Range<usize>, n: usize) -> Option<Vec<[u64; 2]>> {
        ranks.map(|r| affine(r, n)).reduce(|acc, x| acc.iter().zip(&x).map(|(&a, &b)| compose(a, b)).collect())
    }

    fn sum_over(ranks: std::ops::Range<usize>, n: usize) -> Vec<u64> {
        (0..n).map(|i| ranks.clone().fold(0u64, |s, r| s.wrapping_add(val(r, i)))).collect()
    }

    /// Every collective with `n` elements per rank (blocks of `n`, or about `n / np` when large),
    /// checked against locally computed expectations.
    fn check_all(comm: &Comm, n: usize) -> Result<()> {
        let (me, np) = (comm.rank(), comm.size());
        let root = (n + 1) % np;
        let block = if n <= 64 { n } else { n / np + 1 };
        let matmul = UserOp::non_commutative(|input: &[[u64; 2]], inout: &mut [[u64; 2]]| {
            for (l, r) in input.iter().zip(inout.iter_mut()) {
                *r = compose(*l, *r);
            }
        });
        comm.barrier()?;

        let mut buf = if me == root { data(root, n) } else { vec![0; n] };
        comm.bcast(&mut buf, root)?;
        assert_eq!(buf, data(root, n), "bcast");

        let blocks: Vec<u64> = (0..np).flat_map(|r| data(r, block)).collect();
        let mut recv = vec![0; block];
        comm.scatter(if me == root { &blocks[..] } else { &[] }, &mut recv, root)?;
        assert_eq!(recv, data(me, block), "scatter");

        let mut all = vec![0; if me == root { block * np } else { 0 }];
        comm.gather(&data(me, block), &mut all, root)?;
        if me == root {
            assert_eq!(all, blocks, "gather");
        }
        let mut all = vec![0; block * np];
        comm.allgather(&data(me, block), &mut all)?;
        assert_eq!(all, blocks, "allgather");

        // v-variants: uneven counts, blocks stored in reverse rank order with gaps.
        let counts: Vec<usize> = (0..np).map(|r| if r % 2 == 0 { block } else { block / 2 }).collect();
        let mut displs = vec![0; np];
        let mut at = 0;
        for r in (0..np).rev() {
            displs[r] = at;
            at += counts[r] + 1;
        }
        let mut vbuf = vec![0u64; at];
        for r in 0..np {
            vbuf[displs[r]..displs[r] + counts[r]].copy_from_slice(&data(r, counts[r]));
        }
        let mut recv = vec![0; counts[me]];
        comm.scatterv(if me == root { &vbuf[..] } else { &[] }, &counts, &displs, &mut recv, root)?;
        assert_eq!(recv, data(me, counts[me]), "scatterv");
        let mut gathered = vec![0; if me == root { at } else { 0 }];
        comm.gatherv(&data(me, counts[me]), &mut gathered, &counts, &displs, root)?;
        if me == root {
            assert_eq!(gathered, vbuf, "gatherv");
        }
        let mut gathered = vec![0; at];
        comm.allgatherv(&data(me, counts[me]), &mut gathered, &counts, &displs)?;
        assert_eq!(gathered, vbuf, "allgatherv");

        let send: Vec<u64> = (0..np).flat_map(|j| data(me * np + j, block)).collect();
        let mut recv = vec![0; block * np];
        comm.alltoall(&send, &mut recv)?;
        let expected: Vec<u64> = (0..np).flat_map(|j| data(j * np + me, block)).collect();
        assert_eq!(recv, expected, "alltoall");

        let count = |from: usize, to: usize| (block + from + 2 * to) % (block + 1);
        let send_counts: Vec<usize> = (0..np).map(|j| count(me, j)).collect();
        let recv_counts: Vec<usize> = (0..np).map(|j| count(j, me)).collect();
        let send_displs: Vec<usize> =
            (0..np).scan(0, |at, j| Some(std::mem::replace(at, *at + send_counts[j]))).collect();
        // Receive blocks in reverse order.
        let mut recv_displs = vec![0; np];
        let mut at = 0;
        for j in (0..np).rev() {
            recv_displs[j] = at;
            at += recv_counts[j];
        }
        let send: Vec<u64> = (0..np).flat_map(|j| data(me * np + j, send_counts[j])).collect();
        let mut recv = vec![0; at];
        comm.alltoallv(&send, &send_counts, &send_displs, &mut recv, &recv_counts, &recv_displs)?;
        for j in 0..np {
            assert_eq!(recv[recv_displs[j]..][..recv_counts[j]], data(j * np + me, recv_counts[j]), "alltoallv");
        }

        let mut total = vec![0; if me == root { n } else { 0 }];
        comm.reduce(&data(me, n), &mut total, Sum, root)?;
        if me == root {
            assert_eq!(total, sum_over(0..np, n), "reduce");
        }
        let mut total = vec![0; n];
        comm.allreduce(&data(me, n), &mut total, Sum)?;
        assert_eq!(total, sum_over(0..np, n), "allreduce");

        let mut product = vec![[0; 2]; if me == root { n } else { 0 }];
        comm.reduce(&affine(me, n), &mut product, &matmul, root)?;
        if me == root {
            assert_eq!(Some(product), affine_prefix(0..np, n), "non-commutative reduce");
        }
        let mut product = vec![[0; 2]; n];
        comm.allreduce(&affine(me, n), &mut product, &matmul)?;
        assert_eq!(Some(product), affine_prefix(0..np, n), "non-commutative allreduce");

        let mut part = vec![0; block];
        comm.reduce_scatter_block(&data(me, block * np), &mut part, Sum)?;
        assert_eq!(part, sum_over(0..np, block * np)[block * me..][..block], "reduce_scatter_block");
        let offset: usize = counts[..me].iter().sum();
        let total: usize = counts.iter().sum();
        let mut part = vec![[0; 2]; counts[me]];
        comm.reduce_scatter(&affine(me, total), &mut part, &counts, &matmul)?;
        let expected = affine_prefix(0..np, total).expect("np >= 1");
        assert_eq!(part, expected[offset..][..counts[me]], "reduce_scatter");

        let mut prefix = vec![[0; 2]; n];
        comm.scan(&affine(me, n), &mut prefix, &matmul)?;
        assert_eq!(Some(prefix), affine_prefix(0..me + 1, n), "scan");
        let mut prefix = vec![[7; 2]; n];
        comm.exscan(&affine(me, n), &mut prefix, &matmul)?;
        assert_eq!(prefix, affine_prefix(0..me, n).unwrap_or_else(|| vec![[7; 2]; n]), "exscan");
        Ok(())
    }

    #[test]
    fn every_collective_small_sizes() {
        for np in [1, 2, 3, 4, 7, 8, 16] {
            job(np, |world| {
                for n in [0, 1, 3] {
                    check_all(&world, n)?;
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("np {np}: {e}"));
        }
    }

    #[test]
    fn every_collective_one_mebibyte() {
        for np in [1, 3, 8, 16] {
            job(np, |world| check_all(&world, (1 << 17) + 5)).unwrap_or_else(|e| panic!("np {np}: {e}"));
        }
    }

    #[test]
    fn back_to_back_on_split_and_dup() {
        job(7, |world| {
            let half = world.split(Some((world.rank() % 2) as u32), -(world.rank() as i32))?.expect("member");
            let dup = world.dup()?;
            for round in 0..50 {
                let comm = [&world, &half, &dup][round % 3];
                let mut v = [comm.rank() as u64 + round as u64];
                comm.allreduce(&[comm.rank() as u64 + round as u64], &mut v, Sum)?;
                let np = comm.size() as u64;
                assert_eq!(v[0], np * (np - 1) / 2 + np * round as u64);
                let mut b = [round as u8; 5];
                comm.bcast(&mut b, round % comm.size())?;
                comm.barrier()?;
                if round % 10 == 0 {
                    check_all(comm, 3)?;
                }
            }
            Ok(())
        })
        .expect("job");
    }

    #[test]
    fn panic_in_user_op_fails_the_job() {
        for np in [2, 4, 7] {
            let outcome = job(np, |world| {
                let me = world.rank();
                let op = UserOp::commutative(move |input: &[u64], inout: &mut [u64]| {
                    assert!(me != 1, "user op fails on rank 1");
                    Sum.combine(input, inout);
                });
                let mut v = vec![0u64; 100];
                world.allreduce(&data(me, 100), &mut v, &op)?;
                let mut r = vec![0u64; 100];
                world.reduce(&data(me, 100), &mut r, &op, 0)?;
                world.barrier()
            });
            assert!(outcome.is_err(), "np {np}");
        }
    }

    #[test]
    fn peer_gone_before_entering_fails_the_others() {
        for np in [2, 3, 8] {
            for fails in [true, false] {
                let outcome = job(np, |world| {
                    if world.rank() == np - 1 {
                        return if fails { Err(Error::other("left early")) } else { Ok(()) };
                    }
                    let mut b = [0u8; 4];
                    let bcast = world.bcast(&mut b, 0);
                    assert!(bcast.is_err() || np > 2 && world.rank() != 0, "bcast");
                    assert!(world.barrier().is_err());
                    let mut v = [0u64];
                    assert!(world.allreduce(&[1], &mut v, Sum).is_err());
                    Ok(())
                });
                // A rank that exits normally fails nobody else's job by itself.
                assert_eq!(outcome.is_err(), fails, "np {np} fails {fails}");
            }
        }
    }

    #[test]
    fn mismatched_arguments_are_errors() {
        let outcome = job(3, |world| {
            let mut b = vec![0u8; 4 + world.rank()];
            // The root hears of its peers' failures when it leaves.
            assert!(world.bcast(&mut b, 0).is_err(), "bcast lengths");
            let mut v = vec![0u64; 2 + world.rank()];
            assert!(world.allreduce(&vec![1; 2 + world.rank()], &mut v, Sum).is_err(), "allreduce lengths");
            // Same byte length, different element types: refused, never overlapping writes.
            let mut total = [0u8; 8];
            let outcome = if world.rank() == 0 {
                world.reduce(&[1u8; 8], &mut total, Sum, 0)
            } else {
                world.reduce(&[1u64], &mut [], Sum, 0)
            };
            assert!(outcome.is_err(), "element types");
            // Still in step afterwards.
            let mut v = [0u64];
            world.allreduce(&[1], &mut v, Sum)?;
            assert_eq!(v, [3]);
            Ok(())
        });
        outcome.expect("job");
    }
}
