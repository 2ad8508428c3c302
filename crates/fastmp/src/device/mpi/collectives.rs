//! The mpi device's collective provider: every collective runs as the MPI library's own
//! (`MPI_Bcast`, `MPI_Allreduce`, ..., `MPI_Ibcast`, ... for the nonblocking ones) on the MPI
//! communicator behind the fastmp communicator's collective context, through `csrc/mpi_coll.c`.
//!
//! - Bytes travel as `MPI_BYTE`. MPI 4.1 counts are C ints: a count or displacement beyond
//!   `i32::MAX` (bytes, or elements for reductions) is an `Err`, not split.
//! - Reductions of a primitive MPI knows (i8..i64, u8..u64, isize/usize, f32, f64) with a
//!   predefined operation ([`Op::predefined`]) become `MPI_SUM`, ... on that type. Everything else
//!   (user closures, `Loc` pairs, i128, float `Min`/`Max`, whose NaN rule differs from C's) gathers
//!   the contributions with the matching MPI collective and folds them here in rank order with
//!   the user's op: MPI never calls back into Rust, so no panic can unwind through C and no
//!   non-`Sync` closure runs on a thread MPI picks. It costs `size()` vectors of memory and traffic.
//! - A blocking collective calls the blocking MPI function, a nonblocking one the nonblocking
//!   function and polls `MPI_Test` once per engine poll: MPI never matches a blocking collective
//!   with a nonblocking one, so the choice may only depend on what every rank agrees on (the
//!   user's call), never on this rank's state (whether its engine is busy). As in MPI, a rank
//!   must not call `bcast` where its peers call `ibcast` on this device.
//! - While a blocking MPI call waits, this rank's engine does not run: an earlier nonblocking
//!   operation on the same communicator is never behind it (see the order rule below), but one
//!   on another communicator that runs a forced fastmp algorithm (stages over point-to-point)
//!   does not advance until the call returns; a peer that waits for it before joining the
//!   blocking collective deadlocks, where the MPI library's own nonblocking collectives progress.
//! - An unfinished MPI request cannot be cancelled: a dropped operation waits for it
//!   ([`InFlight`]'s `Drop`), so MPI never touches a buffer after its borrow ended.
//! - MPI matches collectives on a communicator by the order each rank calls them, so this rank's
//!   MPI calls follow the operations' numbers: an operation calls MPI only once every earlier
//!   operation has made its last MPI call. A collective that runs on MPI itself (its first
//!   choice) makes exactly one call; one that chose a fastmp algorithm may still run MPI parts
//!   (a composite's), so it counts as done calling only when it is over.

use std::any::TypeId;
use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void};
use std::future::poll_fn;
use std::ptr::{null, null_mut};
use std::task::Poll;

use bytemuck::Pod;

use super::{MpiEndpoint, check, mpi_error};
use crate::coll::op::{Op, Predefined, fold_in_rank_order};
use crate::coll::{Blocks, Layout};
use crate::device::collectives::{ByteCall, Call, CalledNow, CollectiveProvider, Collectives, Operation};
use crate::device::{ContextId, Device};
use crate::error::{Error, Result};

// The entries of `csrc/mpi_coll.c`: `comm` is a communicator handle, `req` null for the blocking
// collective or room for the nonblocking one's request, a null send buffer MPI_IN_PLACE; each
// returns an MPI error code.
unsafe extern "C" {
    fn fastmp_coll_test(req: *mut c_void, done: *mut c_int) -> c_int;
    fn fastmp_coll_wait(req: *mut c_void) -> c_int;
    fn fastmp_coll_barrier(comm: c_int, req: *mut c_void) -> c_int;
    fn fastmp_coll_bcast(comm: c_int, buf: *mut c_void, count: c_int, root: c_int, req: *mut c_void) -> c_int;
    fn fastmp_coll_scatter(
        comm: c_int,
        send: *const c_void,
        recv: *mut c_void,
        count: c_int,
        root: c_int,
        req: *mut c_void,
    ) -> c_int;
    fn fastmp_coll_scatterv(
        comm: c_int,
        send: *const c_void,
        counts: *const c_int,
        displs: *const c_int,
        recv: *mut c_void,
        recv_count: c_int,
        root: c_int,
        req: *mut c_void,
    ) -> c_int;
    fn fastmp_coll_gather(
        comm: c_int,
        send: *const c_void,
        recv: *mut c_void,
        count: c_int,
        root: c_int,
        req: *mut c_void,
    ) -> c_int;
    fn fastmp_coll_gatherv(
        comm: c_int,
        send: *const c_void,
        send_count: c_int,
        recv: *mut c_void,
        counts: *const c_int,
        displs: *const c_int,
        root: c_int,
        req: *mut c_void,
    ) -> c_int;
    fn fastmp_coll_allgather(
        comm: c_int,
        send: *const c_void,
        recv: *mut c_void,
        count: c_int,
        req: *mut c_void,
    ) -> c_int;
    fn fastmp_coll_allgatherv(
        comm: c_int,
        send: *const c_void,
        send_count: c_int,
        recv: *mut c_void,
        counts: *const c_int,
        displs: *const c_int,
        req: *mut c_void,
    ) -> c_int;
    fn fastmp_coll_alltoall(
        comm: c_int,
        send: *const c_void,
        recv: *mut c_void,
        count: c_int,
        req: *mut c_void,
    ) -> c_int;
    fn fastmp_coll_alltoallv(
        comm: c_int,
        send: *const c_void,
        send_counts: *const c_int,
        send_displs: *const c_int,
        recv: *mut c_void,
        recv_counts: *const c_int,
        recv_displs: *const c_int,
        req: *mut c_void,
    ) -> c_int;
    fn fastmp_coll_reduce(
        comm: c_int,
        send: *const c_void,
        recv: *mut c_void,
        count: c_int,
        element: c_int,
        op: c_int,
        root: c_int,
        req: *mut c_void,
    ) -> c_int;
    fn fastmp_coll_allreduce(
        comm: c_int,
        send: *const c_void,
        recv: *mut c_void,
        count: c_int,
        element: c_int,
        op: c_int,
        req: *mut c_void,
    ) -> c_int;
    fn fastmp_coll_reduce_scatter(
        comm: c_int,
        send: *const c_void,
        recv: *mut c_void,
        counts: *const c_int,
        element: c_int,
        op: c_int,
        req: *mut c_void,
    ) -> c_int;
    fn fastmp_coll_scan(
        comm: c_int,
        send: *const c_void,
        recv: *mut c_void,
        count: c_int,
        element: c_int,
        op: c_int,
        exclusive: c_int,
        req: *mut c_void,
    ) -> c_int;
}

/// The provider of the communicator whose collective context is `coll_context` over `members`
/// (world ranks in communicator order); `None` if this rank is not a member or the endpoint has
/// no MPI communicator for the context (the message-based algorithms serve it then).
pub(crate) fn provider(ep: &MpiEndpoint, coll_context: ContextId, members: &[usize]) -> Option<Collectives> {
    let me = members.iter().position(|&w| w == ep.rank())?;
    let comm = ep.comm_handle(coll_context).ok()?;
    Some(Collectives::mpi(MpiCollectives::new(comm, me, members.len())))
}

/// One rank's view of a communicator's MPI collectives.
pub(crate) struct MpiCollectives {
    /// Handle of the MPI communicator (see `fastmp_mpi_comm`).
    comm: c_int,
    /// This rank in the communicator.
    me: usize,
    /// Ranks in the communicator.
    size: usize,
    /// The lowest operation that may still call MPI: operations call MPI in number order.
    call_turn: Cell<u64>,
    /// Operations above `call_turn` that made their last MPI call already.
    called_early: RefCell<Vec<u64>>,
    /// A user reduction op of this rank is folding (see [`CollectiveProvider::may_start`]).
    busy: Cell<bool>,
    /// Int arrays of finished calls too long for [`Ints`]' inline room, for the next ones (see
    /// [`KEPT_INT_ARRAYS`]).
    int_arrays: RefCell<Vec<Vec<c_int>>>,
}

/// Room for one `MPI_Request` (the shim asserts that it fits).
#[repr(C, align(8))]
struct RequestSlot([u8; 16]);

/// A started nonblocking MPI collective. MPI cannot cancel one, so dropping it unfinished waits
/// for it: whatever drops the operation, MPI is done with its buffers before their borrows end.
struct InFlight {
    slot: RequestSlot,
    active: bool,
    call: &'static str,
}

impl InFlight {
    fn new(call: &'static str) -> Self {
        InFlight { slot: RequestSlot([0; 16]), active: false, call }
    }

    fn slot(&mut self) -> *mut c_void {
        (&raw mut self.slot).cast()
    }

    /// Whether the request finished (`MPI_Test`); a failure ends it too.
    fn test(&mut self) -> Result<bool> {
        let mut done: c_int = 0;
        // SAFETY: the slot holds the request the shim stored there; `done` is a valid int.
        let code = unsafe { fastmp_coll_test(self.slot(), &mut done) };
        if code != 0 || done != 0 {
            self.active = false;
        }
        check(code, self.call)?;
        Ok(done != 0)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.active {
            // SAFETY: the slot holds an active request. Its outcome is not reported: the
            // operation was abandoned (its future dropped), so nobody waits for it.
            unsafe { fastmp_coll_wait(self.slot()) };
        }
    }
}

/// An MPI count or displacement: counts beyond C's int are an error (MPI 4.1 has no large-count
/// collectives in the libraries this builds against).
fn int(n: usize, call: &'static str) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| {
        Error::InvalidArgument(format!(
            "{call}: a count or displacement of {n} exceeds MPI's int limit ({}); the mpi device does not split collectives",
            c_int::MAX
        ))
    })
}

/// Int arrays a provider keeps between calls: a warm rank's `v` collectives and reduce-scatters
/// allocate none.
const KEPT_INT_ARRAYS: usize = 8;

/// Ints a call keeps inline: an alltoallv's four arrays up to 16 ranks.
const INLINE_INTS: usize = 64;

/// Room for one call's MPI int arrays (a `v` layout's counts and displacements, a
/// reduce-scatter's counts), living as long as the call: inline where they fit, else in a
/// vector from the provider's pool, which gets it back from [`Ints::recycle`] (an abandoned
/// call's is freed).
struct Ints<'p> {
    provider: &'p MpiCollectives,
    inline: Option<[c_int; INLINE_INTS]>,
    heap: Vec<c_int>,
}

impl<'p> Ints<'p> {
    fn new(provider: &'p MpiCollectives) -> Self {
        Ints { provider, inline: None, heap: Vec::new() }
    }

    /// `n` zeroed ints.
    fn room(&mut self, n: usize) -> &mut [c_int] {
        if n <= INLINE_INTS {
            return &mut self.inline.insert([0; INLINE_INTS])[..n];
        }
        self.heap = self.provider.int_arrays.borrow_mut().pop().unwrap_or_default();
        self.heap.clear();
        self.heap.resize(n, 0);
        &mut self.heap
    }

    /// Gives the vector (if the call needed one) back to the pool, once MPI is done with it.
    #[inline]
    fn recycle(&mut self) {
        if self.heap.capacity() > 0 {
            let mut kept = self.provider.int_arrays.borrow_mut();
            if kept.len() < KEPT_INT_ARRAYS {
                kept.push(std::mem::take(&mut self.heap));
            }
        }
    }
}

/// The `N` layouts (each with the byte length of the buffer it divides) as MPI ints in `ints`.
fn int_layouts<'i, const N: usize>(
    ints: &'i mut Ints<'_>,
    layouts: [(Blocks<'_>, usize); N],
    call: &'static str,
) -> Result<[IntLayout<'i>; N]> {
    let np = ints.provider.size;
    let room: &'i [c_int] = {
        let room = ints.room(2 * np * N);
        for (k, &(layout, buffer)) in layouts.iter().enumerate() {
            let (counts, displs) = room[2 * np * k..2 * np * (k + 1)].split_at_mut(np);
            write_layout(layout, buffer, counts, displs, call)?;
        }
        room
    };
    Ok(std::array::from_fn(|k| {
        let (counts, displs) = room[2 * np * k..2 * np * (k + 1)].split_at(np);
        IntLayout { counts, displs }
    }))
}

/// A layout's byte counts and displacements in MPI ints, written into `counts` and `displs`
/// (one per rank). `buffer` is the byte length of the buffer it divides.
fn write_layout(
    layout: Blocks<'_>,
    buffer: usize,
    counts: &mut [c_int],
    displs: &mut [c_int],
    call: &'static str,
) -> Result<()> {
    match layout {
        // Checked blocks lie inside the buffer, so a buffer within MPI's int keeps every byte
        // count and displacement within it: the conversion cannot fail.
        Blocks::Checked { counts: c, displs: d, elem } if c_int::try_from(buffer).is_ok() => {
            debug_assert!(c.iter().zip(d).all(|(c, d)| (c + d) * elem <= buffer));
            for (to, &count) in counts.iter_mut().zip(c) {
                *to = (count * elem) as c_int;
            }
            for (to, &displ) in displs.iter_mut().zip(d) {
                *to = (displ * elem) as c_int;
            }
        }
        _ => {
            for (rank, (count, displ)) in counts.iter_mut().zip(displs).enumerate() {
                let block = layout.block(rank);
                (*count, *displ) = (int(block.len(), call)?, int(block.start, call)?);
            }
        }
    }
    Ok(())
}

/// The shim's code of `T` (`element_type` in `mpi_coll.c`), if MPI has the type.
fn element_code<T: Pod>() -> Option<c_int> {
    let id = TypeId::of::<T>();
    let signed = [TypeId::of::<i8>(), TypeId::of::<i16>(), TypeId::of::<i32>(), TypeId::of::<i64>()];
    let unsigned = [TypeId::of::<u8>(), TypeId::of::<u16>(), TypeId::of::<u32>(), TypeId::of::<u64>()];
    let same_as = |t: TypeId| if cfg!(target_pointer_width = "64") { t == id } else { false };
    if let Some(i) = signed.iter().position(|&t| t == id) {
        Some(i as c_int)
    } else if let Some(i) = unsigned.iter().position(|&t| t == id) {
        Some(4 + i as c_int)
    } else if id == TypeId::of::<f32>() {
        Some(8)
    } else if id == TypeId::of::<f64>() {
        Some(9)
    } else if same_as(TypeId::of::<isize>()) {
        Some(3)
    } else if same_as(TypeId::of::<usize>()) {
        Some(7)
    } else {
        None
    }
}

/// The shim's (element type, op) codes of a reduction MPI computes exactly as `reduction` does.
fn mpi_reduction<T: Pod>(reduction: &dyn Op<T>) -> Option<(c_int, c_int)> {
    let element = element_code::<T>()?;
    let op = reduction.predefined()?;
    let float = element >= 8;
    if float && matches!(op, Predefined::Min | Predefined::Max) {
        return None; // Rust's min/max skip a NaN operand; C's comparisons do not.
    }
    let code = [
        Predefined::Sum,
        Predefined::Prod,
        Predefined::Min,
        Predefined::Max,
        Predefined::Land,
        Predefined::Lor,
        Predefined::Lxor,
        Predefined::Band,
        Predefined::Bor,
        Predefined::Bxor,
    ]
    .iter()
    .position(|&p| p == op)?;
    Some((element, code as c_int))
}

/// Where an empty buffer points instead of its dangling address: an empty `[u8]` lies at
/// address 1, which is Open MPI's `MPI_IN_PLACE`. MPI never touches it (the count is 0).
static EMPTY: u64 = 0;

/// A buffer's address for MPI (see [`EMPTY`]).
fn at<T>(buf: &[T]) -> *const c_void {
    if buf.is_empty() { (&raw const EMPTY).cast() } else { buf.as_ptr().cast() }
}

/// A writable buffer's address for MPI (see [`EMPTY`], which MPI never writes: the count is 0).
fn at_mut<T>(buf: &mut [T]) -> *mut c_void {
    if buf.is_empty() { (&raw const EMPTY).cast_mut().cast() } else { buf.as_mut_ptr().cast() }
}

/// A send buffer's address, null (the shim's MPI_IN_PLACE) for `None`.
fn send_ptr<T>(send: Option<&[T]>) -> *const c_void {
    send.map_or(null(), at)
}

/// The error of a collective started from inside a user op's fold on the same communicator.
fn nested_call() -> Error {
    Error::InvalidArgument(
        "a collective was called on a communicator from inside another collective on it (for example in a user op)"
            .into(),
    )
}

/// See [`MpiCollectives::hold_busy`].
struct Busy<'a>(&'a Cell<bool>);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

impl MpiCollectives {
    fn new(comm: c_int, me: usize, size: usize) -> Self {
        MpiCollectives {
            comm,
            me,
            size,
            call_turn: Cell::new(0),
            called_early: RefCell::default(),
            int_arrays: RefCell::default(),
            busy: Cell::new(false),
        }
    }

    /// Operation `seq` made its last MPI call (idempotent). Inline for the usual case, the
    /// operation whose turn it is with none done early.
    #[inline]
    fn done_calling(&self, seq: u64) {
        let turn = self.call_turn.get();
        if seq == turn && self.called_early.borrow().is_empty() {
            self.call_turn.set(turn + 1);
        } else if seq >= turn {
            self.done_out_of_turn(seq, turn);
        }
    }

    /// [`Self::done_calling`] of an operation ahead of its turn, or whose turn came while later
    /// ones were done early.
    #[cold]
    fn done_out_of_turn(&self, seq: u64, turn: u64) {
        let mut early = self.called_early.borrow_mut();
        if seq > turn {
            if !early.contains(&seq) {
                early.push(seq);
            }
            return;
        }
        let mut next = turn + 1;
        while let Some(i) = early.iter().position(|&s| s == next) {
            early.swap_remove(i);
            next += 1;
        }
        self.call_turn.set(next);
    }

    /// Waits until every earlier operation made its last MPI call. A blocking operation's
    /// caller waits in the device, which drives them, except from inside an engine poll.
    async fn await_call_turn(&self, op: &Operation<'_>) -> Result<()> {
        if self.call_turn.get() < op.seq {
            if op.blocking && op.engine_polling {
                return Err(nested_call());
            }
            poll_fn(|_| if self.call_turn.get() >= op.seq { Poll::Ready(()) } else { Poll::Pending }).await;
        }
        Ok(())
    }

    /// Runs one MPI collective: the blocking one for a blocking operation, else the nonblocking
    /// one, polled. Every buffer `shim` points into must stay borrowed until this returns or is
    /// dropped: the caller's `async` body owns those borrows.
    async fn delegate(&self, op: &Operation<'_>, shim: Shim<'_>) -> Result<()> {
        self.await_call_turn(op).await?;
        let call = shim.name();
        if op.blocking {
            // SAFETY: the buffers stay borrowed (above) until the blocking call returns.
            let code = unsafe { shim.start(self.comm, null_mut()) };
            self.called(op);
            return check(code, call);
        }
        let mut flight = InFlight::new(call);
        // SAFETY: the buffers and `shim`'s arrays stay alive until the request finishes:
        // `flight` waits for it if this future is dropped first.
        let code = unsafe { shim.start(self.comm, flight.slot()) };
        self.called(op);
        check(code, call)?;
        flight.active = true;
        poll_fn(|_| match flight.test() {
            Ok(false) => Poll::Pending,
            Ok(true) => Poll::Ready(Ok(())),
            Err(e) => Poll::Ready(Err(e)),
        })
        .await
    }

    /// `op` made an MPI call: its last if it is the collective's first choice (see the module
    /// docs).
    #[inline]
    fn called(&self, op: &Operation<'_>) {
        if op.dispatch == 0 {
            self.done_calling(op.seq);
        }
    }

    /// Marks a user op's fold until dropped, also while unwinding.
    fn hold_busy(&self) -> Busy<'_> {
        self.busy.set(true);
        Busy(&self.busy)
    }
}

/// Folds the gathered contributions (block `j` of `gathered`, `dest.len()` elements each, is
/// rank `j`'s) over `ranks` into `dest` in rank order, marking the provider busy meanwhile.
fn fold_gathered<T: Pod>(
    provider: &MpiCollectives,
    reduction: &dyn Op<T>,
    dest: &mut [T],
    gathered: &[T],
    ranks: std::ops::Range<usize>,
) -> Result<()> {
    let n = dest.len();
    let _busy = provider.hold_busy();
    fold_in_rank_order(reduction, dest, ranks, |j| Ok(&gathered[j * n..(j + 1) * n]))
}

/// One MPI collective as its shim entry takes it: counts as C ints and the raw addresses of
/// buffers that whoever built it keeps borrowed until MPI is done with them (see
/// [`Shim::start`]); `v` layouts as int arrays in the call's [`Ints`].
enum Shim<'i> {
    Barrier,
    Bcast {
        buf: *mut c_void,
        count: c_int,
        root: c_int,
    },
    Scatter {
        send: *const c_void,
        recv: *mut c_void,
        count: c_int,
        root: c_int,
    },
    /// `blocks`: the root's layout (empty elsewhere).
    Scatterv {
        send: *const c_void,
        blocks: IntLayout<'i>,
        recv: *mut c_void,
        recv_count: c_int,
        root: c_int,
    },
    Gather {
        send: *const c_void,
        recv: *mut c_void,
        count: c_int,
        root: c_int,
    },
    /// `blocks`: the root's layout (empty elsewhere).
    Gatherv {
        send: *const c_void,
        send_count: c_int,
        recv: *mut c_void,
        blocks: IntLayout<'i>,
        root: c_int,
    },
    Allgather {
        send: *const c_void,
        recv: *mut c_void,
        count: c_int,
    },
    Allgatherv {
        send: *const c_void,
        send_count: c_int,
        recv: *mut c_void,
        blocks: IntLayout<'i>,
    },
    Alltoall {
        send: *const c_void,
        recv: *mut c_void,
        count: c_int,
    },
    Alltoallv {
        send: *const c_void,
        send_blocks: IntLayout<'i>,
        recv: *mut c_void,
        recv_blocks: IntLayout<'i>,
    },
    Reduce {
        send: *const c_void,
        recv: *mut c_void,
        count: c_int,
        reduction: (c_int, c_int),
        root: c_int,
    },
    Allreduce {
        send: *const c_void,
        recv: *mut c_void,
        count: c_int,
        reduction: (c_int, c_int),
    },
    ReduceScatter {
        send: *const c_void,
        recv: *mut c_void,
        counts: &'i [c_int],
        reduction: (c_int, c_int),
    },
    Scan {
        send: *const c_void,
        recv: *mut c_void,
        count: c_int,
        reduction: (c_int, c_int),
        exclusive: bool,
    },
}

/// A `v` layout as MPI takes it: byte counts and byte displacements, one per rank; empty where
/// MPI does not read it (a non-root's).
#[derive(Clone, Copy, Default)]
struct IntLayout<'i> {
    counts: &'i [c_int],
    displs: &'i [c_int],
}

impl IntLayout<'_> {
    /// The arrays' addresses; null for an empty layout.
    fn pointers(&self) -> (*const c_int, *const c_int) {
        if self.counts.is_empty() { (null(), null()) } else { (self.counts.as_ptr(), self.displs.as_ptr()) }
    }
}

impl Shim<'_> {
    /// The MPI function, for errors.
    #[inline(always)]
    fn name(&self) -> &'static str {
        match self {
            Shim::Barrier => "MPI_Barrier",
            Shim::Bcast { .. } => "MPI_Bcast",
            Shim::Scatter { .. } => "MPI_Scatter",
            Shim::Scatterv { .. } => "MPI_Scatterv",
            Shim::Gather { .. } => "MPI_Gather",
            Shim::Gatherv { .. } => "MPI_Gatherv",
            Shim::Allgather { .. } => "MPI_Allgather",
            Shim::Allgatherv { .. } => "MPI_Allgatherv",
            Shim::Alltoall { .. } => "MPI_Alltoall",
            Shim::Alltoallv { .. } => "MPI_Alltoallv",
            Shim::Reduce { .. } => "MPI_Reduce",
            Shim::Allreduce { .. } => "MPI_Allreduce",
            Shim::ReduceScatter { .. } => "MPI_Reduce_scatter",
            Shim::Scan { exclusive: false, .. } => "MPI_Scan",
            Shim::Scan { exclusive: true, .. } => "MPI_Exscan",
        }
    }

    /// Calls the shim's entry on communicator `comm`: the blocking collective for a null `req`,
    /// else the nonblocking one, its request stored in `req`.
    ///
    /// # Safety
    /// Every address in `self` points into a live buffer of the size its counts give (checked
    /// by the collectives layer), and stays valid and otherwise untouched until MPI is done
    /// with it: until this returns for a blocking call, until the request finishes otherwise.
    /// `req` is null or room for a request.
    #[inline(always)]
    unsafe fn start(&self, comm: c_int, req: *mut c_void) -> c_int {
        // SAFETY (every arm): the caller's contract above. The int arrays are slices `self`
        // borrows from the call's `Ints`, so they live as long as `self`, which the caller
        // (`delegate`) keeps until the blocking call returns or the request finishes.
        unsafe {
            match *self {
                Shim::Barrier => fastmp_coll_barrier(comm, req),
                Shim::Bcast { buf, count, root } => fastmp_coll_bcast(comm, buf, count, root, req),
                Shim::Scatter { send, recv, count, root } => fastmp_coll_scatter(comm, send, recv, count, root, req),
                Shim::Scatterv { send, blocks, recv, recv_count, root } => {
                    let (counts, displs) = blocks.pointers();
                    fastmp_coll_scatterv(comm, send, counts, displs, recv, recv_count, root, req)
                }
                Shim::Gather { send, recv, count, root } => fastmp_coll_gather(comm, send, recv, count, root, req),
                Shim::Gatherv { send, send_count, recv, blocks, root } => {
                    let (counts, displs) = blocks.pointers();
                    fastmp_coll_gatherv(comm, send, send_count, recv, counts, displs, root, req)
                }
                Shim::Allgather { send, recv, count } => fastmp_coll_allgather(comm, send, recv, count, req),
                Shim::Allgatherv { send, send_count, recv, blocks } => {
                    let (counts, displs) = blocks.pointers();
                    fastmp_coll_allgatherv(comm, send, send_count, recv, counts, displs, req)
                }
                Shim::Alltoall { send, recv, count } => fastmp_coll_alltoall(comm, send, recv, count, req),
                Shim::Alltoallv { send, send_blocks, recv, recv_blocks } => {
                    let ((sc, sd), (rc, rd)) = (send_blocks.pointers(), recv_blocks.pointers());
                    fastmp_coll_alltoallv(comm, send, sc, sd, recv, rc, rd, req)
                }
                Shim::Reduce { send, recv, count, reduction: (element, op), root } => {
                    fastmp_coll_reduce(comm, send, recv, count, element, op, root, req)
                }
                Shim::Allreduce { send, recv, count, reduction: (element, op) } => {
                    fastmp_coll_allreduce(comm, send, recv, count, element, op, req)
                }
                Shim::ReduceScatter { send, recv, counts, reduction: (element, op) } => {
                    fastmp_coll_reduce_scatter(comm, send, recv, counts.as_ptr(), element, op, req)
                }
                Shim::Scan { send, recv, count, reduction: (element, op), exclusive } => {
                    fastmp_coll_scan(comm, send, recv, count, element, op, c_int::from(exclusive), req)
                }
            }
        }
    }
}

impl MpiCollectives {
    /// The MPI collective that runs `call`, or `None` for a reduction MPI cannot compute
    /// itself (see the module docs). A count beyond MPI's int is an `Err`. The returned
    /// addresses point into `call`'s buffers: the caller keeps them borrowed while MPI uses them.
    #[inline(always)]
    fn prepare<'i, T: Pod>(&self, call: Call<'_, T>, ints: &'i mut Ints<'_>) -> Result<Option<Shim<'i>>> {
        let np = self.size;
        Ok(Some(match call {
            Call::Barrier => Shim::Barrier,
            Call::Bcast { buf, root } => {
                Shim::Bcast { count: int(buf.len(), "MPI_Bcast")?, buf: at_mut(buf), root: root as c_int }
            }
            Call::Scatter { send, recv, root } => {
                int(send.len(), "MPI_Scatter")?;
                Shim::Scatter {
                    count: int(recv.len(), "MPI_Scatter")?,
                    send: at(send),
                    recv: at_mut(recv),
                    root: root as c_int,
                }
            }
            Call::Scatterv { send, layout, recv, root } => Shim::Scatterv {
                blocks: layout.map_or(Ok(IntLayout::default()), |l| {
                    int_layouts(ints, [(l, send.len())], "MPI_Scatterv").map(|[b]| b)
                })?,
                recv_count: int(recv.len(), "MPI_Scatterv")?,
                send: at(send),
                recv: at_mut(recv),
                root: root as c_int,
            },
            Call::Gather { send, recv, root } => {
                int(recv.len(), "MPI_Gather")?;
                Shim::Gather {
                    count: int(send.len(), "MPI_Gather")?,
                    send: at(send),
                    recv: at_mut(recv),
                    root: root as c_int,
                }
            }
            Call::Gatherv { send, recv, layout, root } => Shim::Gatherv {
                send_count: int(send.len(), "MPI_Gatherv")?,
                blocks: layout.map_or(Ok(IntLayout::default()), |l| {
                    int_layouts(ints, [(l, recv.len())], "MPI_Gatherv").map(|[b]| b)
                })?,
                send: at(send),
                recv: at_mut(recv),
                root: root as c_int,
            },
            Call::Allgather { send, recv } => {
                int(recv.len(), "MPI_Allgather")?;
                Shim::Allgather {
                    count: int(recv.len() / np, "MPI_Allgather")?,
                    send: send_ptr(send),
                    recv: at_mut(recv),
                }
            }
            Call::Allgatherv { send, recv, layout } => Shim::Allgatherv {
                send_count: int(layout.block(self.me).len(), "MPI_Allgatherv")?,
                blocks: int_layouts(ints, [(layout, recv.len())], "MPI_Allgatherv")?[0],
                send: send_ptr(send),
                recv: at_mut(recv),
            },
            Call::Alltoall { send, recv } => {
                int(recv.len(), "MPI_Alltoall")?;
                Shim::Alltoall {
                    count: int(recv.len() / np, "MPI_Alltoall")?,
                    send: send_ptr(send),
                    recv: at_mut(recv),
                }
            }
            Call::Alltoallv { send, send_layout, recv, recv_layout } => {
                let layouts = [(send_layout, send.map_or(recv.len(), <[u8]>::len)), (recv_layout, recv.len())];
                let [send_blocks, recv_blocks] = int_layouts(ints, layouts, "MPI_Alltoallv")?;
                Shim::Alltoallv { send: send_ptr(send), send_blocks, recv: at_mut(recv), recv_blocks }
            }
            Call::Reduce { send, recv, op, root } => {
                let Some(reduction) = mpi_reduction(op) else { return Ok(None) };
                let count = int(send.map_or(recv.len(), <[T]>::len), "MPI_Reduce")?;
                // MPI_IN_PLACE only where the standard allows it, at the root: elsewhere an
                // in-place contribution is the send buffer (MPICH 4.0 crashes on MPI_IN_PLACE at
                // a non-root).
                let (send, recv) = match send {
                    None if self.me != root => (at(recv), null_mut()),
                    send => (send_ptr(send), at_mut(recv)),
                };
                Shim::Reduce { send, recv, count, reduction, root: root as c_int }
            }
            Call::Allreduce { send, recv, op } => {
                let Some(reduction) = mpi_reduction(op) else { return Ok(None) };
                Shim::Allreduce {
                    count: int(recv.len(), "MPI_Allreduce")?,
                    send: send_ptr(send),
                    recv: at_mut(recv),
                    reduction,
                }
            }
            Call::ReduceScatter { send, recv, counts, op } => {
                let Some(reduction) = mpi_reduction(op) else { return Ok(None) };
                int(send.len(), "MPI_Reduce_scatter")?;
                let room = ints.room(counts.len());
                for (to, &count) in room.iter_mut().zip(counts) {
                    *to = int(count, "MPI_Reduce_scatter")?;
                }
                Shim::ReduceScatter { send: at(send), recv: at_mut(recv), counts: room, reduction }
            }
            Call::Scan { send, recv, op, exclusive } => {
                let Some(reduction) = mpi_reduction(op) else { return Ok(None) };
                let count = int(recv.len(), if exclusive { "MPI_Exscan" } else { "MPI_Scan" })?;
                Shim::Scan { send: send_ptr(send), recv: at_mut(recv), count, reduction, exclusive }
            }
        }))
    }

    /// Runs a collective that always goes to MPI (every one but the reductions).
    async fn delegate_call(&self, op: &Operation<'_>, call: ByteCall<'_>) -> Result<()> {
        let mut ints = Ints::new(self);
        let done = match self.prepare(call, &mut ints)? {
            Some(shim) => self.delegate(op, shim).await,
            None => unreachable!("only reductions are folded outside MPI"),
        };
        ints.recycle();
        done
    }
}

/// An error leaving [`CollectiveProvider::call_now`], boxed off the success path.
#[cold]
#[inline(never)]
fn boxed(e: Error) -> Box<Error> {
    Box::new(e)
}

/// MPI's error `code` of `call`, boxed for [`CollectiveProvider::call_now`].
#[cold]
#[inline(never)]
fn boxed_mpi_error(code: c_int, call: &'static str) -> Box<Error> {
    boxed(mpi_error(code, call))
}

impl CollectiveProvider for MpiCollectives {
    #[inline]
    fn may_start(&self) -> Result<()> {
        if self.busy.get() { Err(nested_call()) } else { Ok(()) }
    }

    #[inline]
    fn finished(&self, seq: u64) {
        self.done_calling(seq);
    }

    /// Nothing to mark: MPI cannot be told that a peer will not join a collective. On this
    /// device the default of every collective is the MPI library's whatever the sizes, so ranks
    /// of a correct program only choose differently when their tunings differ (erroneous).
    fn bypassed(&self, _seq: u64, _dispatch: u64) {}

    /// Nothing to mark, as for [`Self::bypassed`]: an abandoned MPI collective is cancelled by
    /// its request's release, and peers learn of the rank's failure from the job.
    fn abandoned(&self, _seq: u64) {}

    #[inline]
    fn calls_now(&self) -> bool {
        true
    }

    /// The blocking MPI call, when it is this operation's turn to call MPI and MPI computes the
    /// reduction itself; otherwise the operation waits its turn or folds through its future.
    #[inline(always)]
    fn call_now<T: Pod>(&self, op: &Operation<'_>, call: Call<'_, T>) -> Option<CalledNow> {
        if self.call_turn.get() < op.seq {
            return None;
        }
        let mut ints = Ints::new(self);
        let shim = match self.prepare(call, &mut ints) {
            Ok(shim) => shim?,
            Err(e) => return Some(Err(boxed(e))),
        };
        // SAFETY: the blocking call returns once MPI is done with the buffers, which `call`
        // borrowed for at least this function's duration.
        let code = unsafe { shim.start(self.comm, null_mut()) };
        let name = shim.name();
        ints.recycle();
        Some(if code == 0 { Ok(()) } else { Err(boxed_mpi_error(code, name)) })
    }

    async fn barrier<'a>(&'a self, op: &'a Operation<'a>) -> Result<()> {
        self.delegate_call(op, ByteCall::Barrier).await
    }

    async fn bcast<'a>(&'a self, op: &'a Operation<'a>, buf: &'a mut [u8], root: usize) -> Result<()> {
        self.delegate_call(op, Call::Bcast { buf, root }).await
    }

    async fn scatter<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        root: usize,
    ) -> Result<()> {
        self.delegate_call(op, Call::Scatter { send, recv, root }).await
    }

    async fn scatterv<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [u8],
        layout: Option<&'a Layout>,
        recv: &'a mut [u8],
        root: usize,
    ) -> Result<()> {
        self.delegate_call(op, Call::Scatterv { send, layout: layout.map(Blocks::Built), recv, root }).await
    }

    async fn gather<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        root: usize,
    ) -> Result<()> {
        self.delegate_call(op, Call::Gather { send, recv, root }).await
    }

    async fn gatherv<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [u8],
        recv: &'a mut [u8],
        layout: Option<&'a Layout>,
        root: usize,
    ) -> Result<()> {
        self.delegate_call(op, Call::Gatherv { send, recv, layout: layout.map(Blocks::Built), root }).await
    }

    async fn allgather<'a>(&'a self, op: &'a Operation<'a>, send: Option<&'a [u8]>, recv: &'a mut [u8]) -> Result<()> {
        self.delegate_call(op, Call::Allgather { send, recv }).await
    }

    async fn allgatherv<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [u8]>,
        recv: &'a mut [u8],
        layout: &'a Layout,
    ) -> Result<()> {
        self.delegate_call(op, Call::Allgatherv { send, recv, layout: Blocks::Built(layout) }).await
    }

    async fn alltoall<'a>(&'a self, op: &'a Operation<'a>, send: Option<&'a [u8]>, recv: &'a mut [u8]) -> Result<()> {
        self.delegate_call(op, Call::Alltoall { send, recv }).await
    }

    async fn alltoallv<'a>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [u8]>,
        send_layout: &'a Layout,
        recv: &'a mut [u8],
        recv_layout: &'a Layout,
    ) -> Result<()> {
        let (send_layout, recv_layout) = (Blocks::Built(send_layout), Blocks::Built(recv_layout));
        self.delegate_call(op, Call::Alltoallv { send, send_layout, recv, recv_layout }).await
    }

    async fn reduce<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [T]>,
        recv: &'a mut [T],
        reduction: &'a dyn Op<T>,
        root: usize,
    ) -> Result<()> {
        match self.prepare(Call::Reduce { send, recv: &mut *recv, op: reduction, root }, &mut Ints::new(self))? {
            Some(shim) => self.delegate(op, shim).await,
            None => self.reduce_by_gather(op, send, recv, reduction, root).await,
        }
    }

    async fn allreduce<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [T]>,
        recv: &'a mut [T],
        reduction: &'a dyn Op<T>,
    ) -> Result<()> {
        match self.prepare(Call::Allreduce { send, recv: &mut *recv, op: reduction }, &mut Ints::new(self))? {
            Some(shim) => self.delegate(op, shim).await,
            None => self.scan_by_gather(op, send, recv, reduction, 0..self.size).await,
        }
    }

    async fn reduce_scatter<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        send: &'a [T],
        recv: &'a mut [T],
        counts: &'a [usize],
        reduction: &'a dyn Op<T>,
    ) -> Result<()> {
        let mut ints = Ints::new(self);
        let done =
            match self.prepare(Call::ReduceScatter { send, recv: &mut *recv, counts, op: reduction }, &mut ints)? {
                Some(shim) => self.delegate(op, shim).await,
                None => self.reduce_scatter_by_alltoall(op, send, recv, counts, reduction).await,
            };
        ints.recycle();
        done
    }

    async fn scan<'a, T: Pod>(
        &'a self,
        op: &'a Operation<'a>,
        send: Option<&'a [T]>,
        recv: &'a mut [T],
        reduction: &'a dyn Op<T>,
        exclusive: bool,
    ) -> Result<()> {
        match self.prepare(Call::Scan { send, recv: &mut *recv, op: reduction, exclusive }, &mut Ints::new(self))? {
            Some(shim) => self.delegate(op, shim).await,
            None => {
                let ranks = 0..if exclusive { self.me } else { self.me + 1 };
                self.scan_by_gather(op, send, recv, reduction, ranks).await
            }
        }
    }
}

/// The reductions MPI cannot compute itself (see the module docs): the contributions are
/// gathered with an MPI collective, then folded in rank order with the user's op.
impl MpiCollectives {
    /// Reduce: the root gathers every vector, then folds them.
    async fn reduce_by_gather<T: Pod>(
        &self,
        op: &Operation<'_>,
        send: Option<&[T]>,
        recv: &mut [T],
        reduction: &dyn Op<T>,
        root: usize,
    ) -> Result<()> {
        let at_root = self.me == root;
        let n = send.map_or(recv.len(), <[T]>::len);
        let mut gathered = vec![T::zeroed(); if at_root { n * self.size } else { 0 }];
        let contribution: &[T] = match send {
            Some(send) => send,
            None => recv,
        };
        self.gather(op, bytemuck::cast_slice(contribution), bytemuck::cast_slice_mut(&mut gathered), root).await?;
        if at_root {
            fold_gathered(self, reduction, recv, &gathered, 0..self.size)?;
        }
        Ok(())
    }

    /// Allreduce (`ranks` every rank), scan (`0..=me`) and exscan (`0..me`): every rank gathers
    /// every vector, then folds those of `ranks` (nothing for none: rank 0's exscan).
    async fn scan_by_gather<T: Pod>(
        &self,
        op: &Operation<'_>,
        send: Option<&[T]>,
        recv: &mut [T],
        reduction: &dyn Op<T>,
        ranks: std::ops::Range<usize>,
    ) -> Result<()> {
        let mut gathered = vec![T::zeroed(); recv.len() * self.size];
        let contribution: &[T] = match send {
            Some(send) => send,
            None => recv,
        };
        let gathered_bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut gathered);
        let own = gathered_bytes.len() / self.size * self.me;
        gathered_bytes[own..own + size_of_val(contribution)].copy_from_slice(bytemuck::cast_slice(contribution));
        self.allgather(op, None, gathered_bytes).await?;
        if !ranks.is_empty() {
            fold_gathered(self, reduction, recv, &gathered, ranks)?;
        }
        Ok(())
    }

    /// Reduce-scatter: every rank receives its block from every rank (alltoallv), then folds.
    async fn reduce_scatter_by_alltoall<T: Pod>(
        &self,
        op: &Operation<'_>,
        send: &[T],
        recv: &mut [T],
        counts: &[usize],
        reduction: &dyn Op<T>,
    ) -> Result<()> {
        let (np, mine) = (self.size, counts[self.me]);
        let offsets = crate::coll::vector::offsets_of(counts);
        let send_displs: Vec<usize> = offsets[..np].to_vec();
        let recv_counts = vec![mine; np];
        let recv_displs: Vec<usize> = (0..np).map(|j| j * mine).collect();
        let send_layout = Layout::of_blocks::<T>("reduce_scatter", counts, &send_displs, send.len(), false)?;
        let mut gathered = vec![T::zeroed(); mine * np];
        let recv_layout = Layout::of_blocks::<T>("reduce_scatter", &recv_counts, &recv_displs, gathered.len(), true)?;
        let bytes = bytemuck::cast_slice_mut(&mut gathered);
        self.alltoallv(op, Some(bytemuck::cast_slice(send)), &send_layout, bytes, &recv_layout).await?;
        fold_gathered(self, reduction, recv, &gathered, 0..np)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::op::{Band, Land, Max, Min, MinLoc, Prod, Sum, UserOp};

    #[test]
    fn primitives_with_predefined_ops_go_to_mpi_and_the_rest_is_folded_here() {
        assert_eq!(mpi_reduction::<i8>(&Sum), Some((0, 0)));
        assert_eq!(mpi_reduction::<u32>(&Band), Some((6, 7)));
        assert_eq!(mpi_reduction::<u8>(&Land), Some((4, 4)));
        assert_eq!(mpi_reduction::<f64>(&Prod), Some((9, 1)));
        assert_eq!(mpi_reduction::<i64>(&Min), Some((3, 2)));
        assert_eq!(mpi_reduction::<usize>(&Max), Some((7, 3)));
        assert_eq!(mpi_reduction::<f32>(&Max), None, "float min/max keep Rust's NaN rule");
        assert_eq!(mpi_reduction::<i128>(&Sum), None, "no MPI type");
        assert_eq!(mpi_reduction::<crate::op::Loc<f64, i64>>(&MinLoc), None);
        let user = UserOp::commutative(|_: &[i32], _: &mut [i32]| {});
        assert_eq!(mpi_reduction::<i32>(&user), None, "user closures never reach MPI");
    }

    #[test]
    fn counts_beyond_mpis_int_are_errors_naming_the_call() {
        assert_eq!(int(c_int::MAX as usize, "MPI_Bcast").unwrap(), c_int::MAX);
        let err = int(c_int::MAX as usize + 1, "MPI_Bcast").unwrap_err().to_string();
        assert!(err.contains("MPI_Bcast") && err.contains("int limit"), "{err}");
    }

    #[test]
    fn layouts_become_byte_counts_and_displacements_inline_or_in_a_pooled_vector() {
        // 40 ranks: an alltoallv's four arrays (160 ints) exceed the inline room.
        for np in [3, 40] {
            let p = MpiCollectives::new(0, 0, np);
            let counts: Vec<usize> = (0..np).map(|r| r % 3).collect();
            let displs: Vec<usize> = (0..np).map(|r| 3 * r).collect();
            let checked = Blocks::Checked { counts: &counts, displs: &displs, elem: 4 };
            for _ in 0..2 {
                let mut ints = Ints::new(&p);
                let [send, recv] =
                    int_layouts(&mut ints, [(checked, 12 * np), (checked, 12 * np)], "MPI_Alltoallv").unwrap();
                for layout in [send, recv] {
                    assert_eq!(layout.counts, counts.iter().map(|&c| 4 * c as c_int).collect::<Vec<_>>());
                    assert_eq!(layout.displs, displs.iter().map(|&d| 4 * d as c_int).collect::<Vec<_>>());
                }
                ints.recycle();
            }
            assert_eq!(p.int_arrays.borrow().len(), usize::from(np == 40), "the vector went back to the pool");
        }
        // A buffer beyond MPI's int takes the checked conversion, which names the call.
        let p = MpiCollectives::new(0, 0, 1);
        let far = [c_int::MAX as usize / 2 + 1];
        let blocks = Blocks::Checked { counts: &[1], displs: &far, elem: 2 };
        let err = int_layouts(&mut Ints::new(&p), [(blocks, 2 * far[0] + 2)], "MPI_Gatherv").err().unwrap();
        assert!(err.to_string().contains("MPI_Gatherv"), "{err}");
    }

    #[test]
    fn operations_call_mpi_in_number_order() {
        let p = MpiCollectives::new(0, 0, 1);
        p.done_calling(1);
        p.done_calling(3);
        assert_eq!(p.call_turn.get(), 0, "operation 0 may still call MPI");
        p.done_calling(0);
        assert_eq!(p.call_turn.get(), 2, "1 had made its call already");
        p.done_calling(2);
        p.done_calling(2);
        assert_eq!(p.call_turn.get(), 4);
        assert!(p.called_early.borrow().is_empty());
    }
}
