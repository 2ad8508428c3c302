//! Communicators: a device endpoint plus a context that keeps their traffic apart.

use std::rc::Rc;

use crate::device::{ANY_TAG, ContextId, Device, RawStatus, Source, TAG_UB};
use crate::error::{Error, Result};

/// Context of the world communicator's point-to-point traffic.
pub(crate) const WORLD_CONTEXT: ContextId = 0;

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
    pub(crate) context: ContextId,
}

/// What a completed receive or probe reports (MPI's `MPI_Status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    /// Rank that sent the message.
    pub source: usize,
    /// Tag of the message.
    pub tag: i32,
    /// Number of elements received (bytes for probes and object messages).
    pub count: usize,
    /// Number of bytes in the message.
    pub bytes: usize,
    /// Whether the request was cancelled instead of completing.
    pub cancelled: bool,
}

impl Status {
    pub(crate) fn from_raw(raw: RawStatus, elem_size: usize) -> Result<Self> {
        let count = match elem_size {
            0 => 0,
            size if raw.bytes.is_multiple_of(size) => raw.bytes / size,
            size => return Err(Error::ElementSize { bytes: raw.bytes, elem_size: size }),
        };
        Ok(Status { source: raw.source, tag: raw.tag, count, bytes: raw.bytes, cancelled: raw.cancelled })
    }

    /// Element count for another element type, if the byte count divides evenly (MPI_Get_count).
    pub fn count_of<T>(&self) -> Option<usize> {
        let size = std::mem::size_of::<T>();
        (size != 0 && self.bytes.is_multiple_of(size)).then(|| self.bytes / size)
    }
}

impl Comm {
    pub(crate) fn world(dev: Rc<dyn Device>) -> Self {
        Comm { dev, context: WORLD_CONTEXT }
    }

    /// This rank's number, `0..size()`.
    pub fn rank(&self) -> usize {
        self.dev.rank()
    }

    /// Number of ranks in the communicator.
    pub fn size(&self) -> usize {
        self.dev.size()
    }

    /// Name of the device carrying this communicator ("shm", ...).
    pub fn device_name(&self) -> &'static str {
        self.dev.name()
    }

    /// Ends this rank's use of fastmp: every later call on any communicator of this rank fails
    /// with [`Error::Finalized`]. Unlike `MPI_Finalize` it is local (no synchronization); a
    /// rank's resources are released when its closure returns in any case.
    pub fn finalize(&self) -> Result<()> {
        self.check_live()?;
        self.dev.finalize();
        Ok(())
    }

    pub(crate) fn check_live(&self) -> Result<()> {
        if self.dev.is_finalized() { Err(Error::Finalized("communicator")) } else { Ok(()) }
    }

    pub(crate) fn check_dest(&self, dest: usize, tag: i32) -> Result<()> {
        self.check_live()?;
        if dest >= self.size() {
            return Err(Error::RankOutOfRange { rank: dest, size: self.size() });
        }
        if !(0..=TAG_UB).contains(&tag) {
            return Err(Error::TagOutOfRange { tag, max: TAG_UB });
        }
        Ok(())
    }

    pub(crate) fn check_source(&self, source: Source, tag: i32) -> Result<()> {
        self.check_live()?;
        if let Source::Rank(rank) = source
            && rank >= self.size()
        {
            return Err(Error::RankOutOfRange { rank, size: self.size() });
        }
        if tag != ANY_TAG && !(0..=TAG_UB).contains(&tag) {
            return Err(Error::TagOutOfRange { tag, max: TAG_UB });
        }
        Ok(())
    }
}
