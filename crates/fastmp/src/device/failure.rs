//! The failure a job ends with, as every device records it: the rank that failed first, why,
//! and the code it aborted with (`Comm::abort`, MPI_Abort), if it did.
//!
//! Attribution rule: a job keeps its *first* failure. A rank whose own error is a consequence of
//! it (an operation that failed because a peer failed) passes the same record on, so peers that
//! hear of the failure from it still name the rank that failed first.

use crate::error::Error;

/// The failure that aborted a job (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// World rank that failed first.
    pub rank: usize,
    /// Its error or panic message.
    pub cause: String,
    /// The code it passed to `Comm::abort`, if the failure is an abort.
    pub code: Option<i32>,
}

impl Failure {
    /// An abort with `code` by `rank`.
    pub(crate) fn aborted(rank: usize, code: i32) -> Self {
        Failure { rank, cause: format!("called abort with code {code}"), code: Some(code) }
    }

    /// What the rank's own program ended with, as the job records it: a peer's failure it
    /// merely observed is that peer's (so a consequence never takes the blame).
    pub(crate) fn of_error(rank: usize, error: &Error) -> Self {
        match error {
            Error::PeerFailed { rank: origin, cause } if *origin != rank => {
                Failure { rank: *origin, cause: cause.clone(), code: None }
            }
            Error::Aborted { rank: origin, code } => Failure::aborted(*origin, *code),
            Error::RankFailed { rank: origin, cause } if *origin == rank => {
                Failure { rank, cause: cause.clone(), code: None }
            }
            other => Failure { rank, cause: other.to_string(), code: None },
        }
    }

    /// The error an operation of a peer gets once the job is aborted.
    pub(crate) fn peer_error(&self) -> Error {
        Error::PeerFailed { rank: self.rank, cause: self.cause.clone() }
    }

    /// The error `run` (and a process rank's `Config::run`) returns for the job.
    pub(crate) fn job_error(&self) -> Error {
        match self.code {
            Some(code) => Error::Aborted { rank: self.rank, code },
            None => Error::RankFailed { rank: self.rank, cause: self.cause.clone() },
        }
    }
}
