//! Alltoall(v) algorithms: the flat variants of Table 4.1 (bFT, nbFT, nb1FT, nb2FT).

use super::Layout;
use super::select::Algorithm;
use crate::comm::Comm;
use crate::error::{Error, Result};

pub(super) fn alltoall(comm: &Comm, send: &[u8], recv: &mut [u8], algorithm: Algorithm) -> Result<()> {
    let _ = (comm, send, recv);
    Err(Error::other(format!("alltoall {algorithm}: not implemented yet")))
}

pub(super) fn alltoallv(
    comm: &Comm,
    send: &[u8],
    send_layout: &Layout,
    recv: &mut [u8],
    recv_layout: &Layout,
    algorithm: Algorithm,
) -> Result<()> {
    let _ = (comm, send, send_layout, recv, recv_layout);
    Err(Error::other(format!("alltoallv {algorithm}: not implemented yet")))
}
