//! Allgather(v) algorithms: flat, binomial, recursive doubling, ring, gather+bcast.

use super::Layout;
use super::select::Algorithm;
use crate::comm::Comm;
use crate::error::{Error, Result};

pub(super) fn allgather(comm: &Comm, send: &[u8], recv: &mut [u8], algorithm: Algorithm) -> Result<()> {
    let _ = (comm, send, recv);
    Err(Error::other(format!("allgather {algorithm}: not implemented yet")))
}

pub(super) fn allgatherv(
    comm: &Comm,
    send: &[u8],
    recv: &mut [u8],
    layout: &Layout,
    algorithm: Algorithm,
) -> Result<()> {
    let _ = (comm, send, recv, layout);
    Err(Error::other(format!("allgatherv {algorithm}: not implemented yet")))
}
