//! The one error type every fastmp call returns.

/// Result alias used throughout fastmp.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a fastmp call.
///
/// User mistakes (bad ranks, tags, buffer sizes) are reported here instead of panicking, and a
/// failed or exited peer turns a would-be hang into [`Error::PeerFailed`] / [`Error::PeerExited`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A rank argument is not in `0..size`.
    #[error("rank {rank} is out of range for a communicator of size {size}")]
    RankOutOfRange { rank: usize, size: usize },

    /// A tag is negative (or `ANY_TAG` was given to a send).
    #[error("tag {tag} is out of range (valid tags are 0..={max}; ANY_TAG only on receives)")]
    TagOutOfRange { tag: i32, max: i32 },

    /// The matched message is longer than the receive buffer. Only the first `capacity` bytes were
    /// written; nothing past the buffer is touched.
    #[error(
        "message truncated: {message_bytes} bytes from rank {source_rank} (tag {tag}) do not fit a {capacity}-byte receive buffer"
    )]
    Truncated { message_bytes: usize, capacity: usize, source_rank: usize, tag: i32 },

    /// The received byte count is not a whole number of receive elements.
    #[error("element size mismatch: {bytes} bytes received is not a multiple of the {elem_size}-byte element type")]
    ElementSize { bytes: usize, elem_size: usize },

    /// A receive that needs a message of one exact length (a single value, a layout's worth of
    /// elements) got another (`call` names the receive).
    #[error("{call}: the message from rank {source_rank} (tag {tag}) has {bytes} bytes, expected {expected}")]
    MessageLength { call: &'static str, bytes: usize, expected: usize, source_rank: usize, tag: i32 },

    /// The received bytes are not a valid value of the receive type (a byte other than 0 or 1
    /// for `bool`, an unknown enum discriminant); nothing was written to the receive buffer.
    #[error("{call}: element {index} of the message from rank {source_rank} (tag {tag}) is not a valid {type_name}")]
    InvalidValue { call: &'static str, type_name: &'static str, index: usize, source_rank: usize, tag: i32 },

    /// The communicator (or the whole rank) has been finalized.
    #[error("{0} used after finalize")]
    Finalized(&'static str),

    /// A peer this operation depends on failed (panicked or returned an error); the job is aborted.
    #[error("rank {rank} failed: {cause}")]
    PeerFailed { rank: usize, cause: String },

    /// A peer this operation waits for has already finished its program.
    #[error("rank {rank} has exited, so this operation can never complete")]
    PeerExited { rank: usize },

    /// The rank is blocked on an operation only it could complete (e.g. a receive from itself
    /// with no matching send started), so waiting would never end.
    #[error("rank {rank} would wait forever: {reason}")]
    Deadlock { rank: usize, reason: &'static str },

    /// A one-sided operation or synchronisation call outside the epoch it needs (a put with no
    /// access epoch to its target, unlock without lock, mismatched fence assertions, ...).
    #[error("one-sided synchronisation: {0}")]
    RmaSync(String),

    /// Invalid argument or configuration (message says which).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// Serializing or deserializing an object failed.
    #[error("serialization failed: {0}")]
    Serialization(String),

    /// A TCP connection failed the job handshake (a stranger, a wrong job secret, a silent or
    /// broken peer) and was closed before any message could pass over it.
    #[error("connection rejected: {0}")]
    Rejected(String),

    /// A rank of [`crate::run`] failed; `cause` is its error or panic message.
    #[error("rank {rank} failed: {cause}")]
    RankFailed { rank: usize, cause: String },

    /// A rank called [`crate::Comm::abort`] (MPI_Abort) and so ended the whole job: [`crate::run`]
    /// returns this, [`crate::main`] and `fastmprun` exit with `code`. The other ranks' pending
    /// and later operations fail with [`Error::PeerFailed`] naming `rank`.
    #[error("rank {rank} aborted the job with code {code}")]
    Aborted { rank: usize, code: i32 },

    /// An error raised by user code inside a rank.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync + 'static>),
}

impl Error {
    /// Wraps any user error so a rank closure can return it with `?`-style ergonomics.
    pub fn other<E>(error: E) -> Self
    where
        E: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    {
        Error::Other(error.into())
    }

    /// The exit status a process ending with this error should have: the code of
    /// [`Error::Aborted`], 1 for anything else (what [`crate::main`] exits with).
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Aborted { code, .. } => *code,
            _ => 1,
        }
    }
}
