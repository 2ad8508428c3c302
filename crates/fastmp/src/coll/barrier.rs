//! Barrier algorithms: gather+bcast of empty messages, binomial tree, dissemination (BDE).

use super::select::Algorithm;
use crate::comm::Comm;
use crate::error::{Error, Result};

pub(super) fn barrier(comm: &Comm, algorithm: Algorithm) -> Result<()> {
    let _ = comm;
    Err(Error::other(format!("barrier {algorithm}: not implemented yet")))
}
