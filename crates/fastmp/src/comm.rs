//! Communicators: a device endpoint plus a context that keeps their traffic apart.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use crate::coll::select::Tuning;
use crate::device::collectives::Collectives;
use crate::device::requests::Pending;
use crate::device::{ANY_TAG, ContextId, Device, MatchSpec, PROC_NULL, RawStatus, Source, TAG_UB};
use crate::error::{Error, Result};
use crate::group::Group;
use crate::owned::Orphans;
use crate::progress::{Engine, Progressing};

/// Context of the world communicator's point-to-point traffic. Every communicator owns two
/// consecutive contexts: an even one for point-to-point and the next for collective traffic.
pub(crate) const WORLD_CONTEXT: ContextId = 0;

/// Contexts each communicator takes at creation: its own pair (point-to-point, collectives),
/// then one pair per level of its hierarchical collectives (`coll::hierarchy`). Reserving the
/// levels' pairs up front lets every member build them later, locally, without communicating
/// (a nonblocking collective's start must not block).
pub(crate) const CONTEXTS_PER_COMM: ContextId = 2 + crate::coll::hierarchy::LEVEL_CONTEXTS;

/// A communicator: the ranks of a job plus a private matching context (MPI's `MPI_Comm`).
///
/// Cheap to clone (clones share the rank's endpoint). Not `Send`: a communicator belongs to the
/// thread of its rank.
///
/// ```
/// let sums = fastmp::run(2, |world| {
///     let peer = 1 - world.rank();
///     let mut got = [0u64; 1];
///     world.sendrecv(&[world.rank() as u64], peer, 0, &mut got, peer, 0)?;
///     Ok(got[0])
/// })?;
/// assert_eq!(sums, vec![1, 0]);
/// # Ok::<(), fastmp::Error>(())
/// ```
#[derive(Clone)]
pub struct Comm {
    pub(crate) dev: Rc<dyn Device>,
    /// Point-to-point context; collective traffic uses `context + 1`.
    pub(crate) context: ContextId,
    pub(crate) group: Group,
    /// This process's rank in `group`.
    pub(crate) rank: usize,
    /// Algorithm selection for this communicator's collectives.
    pub(crate) tuning: Arc<Tuning>,
    pub(crate) process: Rc<ProcessState>,
    /// The device's own collectives for this communicator (`Device::collectives`), if any: the
    /// `native` algorithm.
    pub(crate) collectives: Option<Rc<Collectives>>,
    /// Collectives this rank has issued on the communicator (shared by its clones); numbers
    /// each operation's messages so outstanding nonblocking ones never match each other's.
    pub(crate) coll_seq: Rc<Cell<u64>>,
    /// Name and attributes of this handle (shared by its clones).
    pub(crate) info: Rc<crate::attributes::Info>,
    /// Where the members run and the levels of hierarchical collectives, computed on first use
    /// (shared by its clones).
    pub(crate) spread: Rc<crate::coll::hierarchy::LevelCache>,
}

/// State of one process (rank thread) shared by all its communicators.
pub(crate) struct ProcessState {
    /// Lowest context id this process has not used yet; new communicators agree on the maximum
    /// over their members, so two communicators sharing a process never share a context.
    pub(crate) next_context: Cell<ContextId>,
    /// The rank's outstanding nonblocking collectives.
    pub(crate) engine: Rc<Engine>,
    /// Last token given to a `Comm::scope` (names its collectives in the engine).
    last_scope: Cell<u64>,
    /// Emptied request lists of ended scopes, reused so a scope allocates nothing once warm.
    pub(crate) request_lists: RefCell<Vec<Vec<Pending>>>,
    /// Owned-buffer operations dropped before they finished, with their buffers.
    pub(crate) orphans: Orphans,
    /// Temporaries of the in-place collectives, reused so they allocate nothing once warm.
    pub(crate) scratch: crate::coll::scratch::ScratchPool,
}

impl ProcessState {
    /// A token for a new `Comm::scope`, unique within the rank.
    pub(crate) fn new_scope_token(&self) -> u64 {
        let token = self.last_scope.get() + 1;
        self.last_scope.set(token);
        token
    }
}

/// What a completed receive or probe reports (MPI's `MPI_Status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    /// Rank that sent the message.
    pub source: usize,
    /// Tag of the message.
    pub tag: i32,
    /// Number of bytes in the message (the one size every receive, probe and object message
    /// reports alike; [`Status::count`] converts it to elements).
    pub bytes: usize,
    /// Whether the request was cancelled instead of completing.
    pub cancelled: bool,
}

impl Status {
    /// A receive's status with `source` in the communicator's numbering; the message must be
    /// whole elements of `elem_size` bytes (0: any).
    pub(crate) fn of(raw: RawStatus, source: usize, elem_size: usize) -> Result<Status> {
        if elem_size != 0 && !raw.bytes.is_multiple_of(elem_size) {
            return Err(Error::ElementSize { bytes: raw.bytes, elem_size });
        }
        Ok(Status { source, tag: raw.tag, bytes: raw.bytes, cancelled: raw.cancelled })
    }

    /// Number of whole `T` elements in the message (MPI_Get_count). After a typed receive of
    /// `T` it is exact (a receive fails unless the bytes divide); after a probe, name the type
    /// you will receive, so the count is never a byte count by accident:
    ///
    /// ```
    /// fastmp::run(2, |world| {
    ///     if world.rank() == 0 {
    ///         world.send(&[7u64; 5], 1, 0)?;
    ///     } else {
    ///         let probed = world.probe(0, 0)?;
    ///         let mut buf = vec![0u64; probed.count::<u64>()];
    ///         let status = world.recv(&mut buf, 0, 0)?;
    ///         assert_eq!((buf.len(), status.count::<u64>(), status.bytes), (5, 5, 40));
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    ///
    /// A zero-sized `T` counts 0; bytes that do not divide are rounded down (see
    /// [`Status::count_of`] to tell).
    pub fn count<T>(&self) -> usize {
        self.bytes.checked_div(size_of::<T>()).unwrap_or(0)
    }

    /// Element count for `T`, or `None` if the byte count does not divide evenly (MPI_Get_count
    /// returning MPI_UNDEFINED) or `T` is zero-sized.
    pub fn count_of<T>(&self) -> Option<usize> {
        let size = size_of::<T>();
        (size != 0 && self.bytes.is_multiple_of(size)).then(|| self.bytes / size)
    }
}

impl Comm {
    /// The world communicator of the rank whose endpoint is `dev`.
    pub(crate) fn world<D: Device + ?Sized + 'static>(dev: Rc<D>, tuning: Arc<Tuning>) -> Self {
        let group = Group::world(dev.size(), dev.rank());
        let engine = Rc::new(Engine::default());
        let dev: Rc<dyn Device> = Rc::new(Progressing::new(dev, engine.clone()));
        let process = Rc::new(ProcessState {
            next_context: Cell::new(WORLD_CONTEXT + CONTEXTS_PER_COMM),
            engine,
            last_scope: Cell::new(0),
            request_lists: RefCell::default(),
            orphans: Orphans::default(),
            scratch: Default::default(),
        });
        let world = Comm::with_context(dev, WORLD_CONTEXT, group, tuning, process);
        Comm { info: Rc::new(crate::attributes::Info::named("WORLD")), ..world }
    }

    /// A communicator on `context` over `group`, which must contain this process.
    pub(crate) fn with_context(
        dev: Rc<dyn Device>,
        context: ContextId,
        group: Group,
        tuning: Arc<Tuning>,
        process: Rc<ProcessState>,
    ) -> Self {
        let rank = group.rank().expect("a communicator's group contains its process");
        let collectives = dev.collectives(context, group.members()).map(Rc::new);
        Comm {
            dev,
            context,
            group,
            rank,
            tuning,
            process,
            collectives,
            coll_seq: Rc::default(),
            info: Rc::default(),
            spread: Rc::default(),
        }
    }

    /// This rank's number, `0..size()`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Number of ranks in the communicator.
    pub fn size(&self) -> usize {
        self.group.size()
    }

    /// The ranks of this communicator (MPI_Comm_group).
    pub fn group(&self) -> Group {
        self.group.clone()
    }

    /// Context of this communicator's collective traffic, kept apart from its point-to-point.
    pub(crate) fn coll_context(&self) -> ContextId {
        self.context + 1
    }

    /// Converts a device status (world source rank) into this communicator's terms; a message
    /// that is not a whole number of `elem_size`-byte elements is an error.
    #[inline]
    pub(crate) fn status(&self, raw: RawStatus, elem_size: usize) -> Result<Status> {
        let source = self.group.group_rank_of(raw.source).unwrap_or(raw.source);
        Status::of(raw, source, elem_size)
    }

    /// Name of the device carrying this communicator ("shm", ...).
    pub fn device_name(&self) -> &'static str {
        self.dev.name()
    }

    /// The process and node of every rank of the job, indexed by world rank.
    pub fn placement(&self) -> &crate::Placement {
        self.dev.placement()
    }

    /// Ends this rank's use of fastmp: every later call on any communicator of this rank fails
    /// with [`Error::Finalized`]. Unlike `MPI_Finalize` it is local (no synchronization); a
    /// rank's resources are released when its closure returns in any case.
    pub fn finalize(&self) -> Result<()> {
        self.check_live()?;
        self.dev.finalize();
        Ok(())
    }

    #[inline]
    pub(crate) fn check_live(&self) -> Result<()> {
        if self.dev.is_finalized() { Err(Error::Finalized("communicator")) } else { Ok(()) }
    }

    /// Validates a destination and tag; returns the destination's world rank, or `None` for
    /// [`PROC_NULL`] (a send to it is a no-op).
    #[inline]
    pub(crate) fn dest_or_null(&self, dest: usize, tag: i32) -> Result<Option<usize>> {
        self.check_live()?;
        if !(0..=TAG_UB).contains(&tag) {
            return Err(Error::TagOutOfRange { tag, max: TAG_UB });
        }
        match dest {
            PROC_NULL => Ok(None),
            dest if dest >= self.size() => Err(Error::RankOutOfRange { rank: dest, size: self.size() }),
            dest => Ok(Some(self.group.world_rank(dest))),
        }
    }

    /// Validates a source and tag; returns the device match spec on the point-to-point context.
    /// Rejects [`PROC_NULL`] (point-to-point uses `spec_or_null`).
    pub(crate) fn recv_spec(&self, source: Source, tag: i32) -> Result<MatchSpec> {
        let rank = match source {
            Source::Rank(rank) => rank,
            Source::Any => 0,
        };
        self.spec_or_null(source, tag)?.ok_or(Error::RankOutOfRange { rank, size: self.size() })
    }

    /// [`Comm::recv_spec`] that also accepts [`PROC_NULL`] (as `None`): the point-to-point
    /// calls, for which a receive from it completes at once with an empty status.
    #[inline]
    pub(crate) fn spec_or_null(&self, source: Source, tag: i32) -> Result<Option<MatchSpec>> {
        self.check_live()?;
        if tag != ANY_TAG && !(0..=TAG_UB).contains(&tag) {
            return Err(Error::TagOutOfRange { tag, max: TAG_UB });
        }
        let source = match source {
            Source::Rank(PROC_NULL) => return Ok(None),
            Source::Rank(rank) if rank >= self.size() => {
                return Err(Error::RankOutOfRange { rank, size: self.size() });
            }
            Source::Rank(rank) => Source::Rank(self.group.world_rank(rank)),
            Source::Any => Source::Any,
        };
        Ok(Some(MatchSpec { context: self.context, source, tag }))
    }
}
