//! Bcast algorithms: flat trees, four-ary tree, MST, binomial, scatter+allgather.

use super::select::Algorithm;
use crate::comm::Comm;
use crate::error::{Error, Result};

pub(super) fn bcast(comm: &Comm, buf: &mut [u8], root: usize, algorithm: Algorithm) -> Result<()> {
    let _ = (comm, buf, root);
    Err(Error::other(format!("bcast {algorithm}: not implemented yet")))
}
