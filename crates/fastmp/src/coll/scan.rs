//! Scan / exscan algorithms: flat, linear chain, recursive doubling.

use bytemuck::Pod;

use super::op::Op;
use super::select::Algorithm;
use crate::comm::Comm;
use crate::error::{Error, Result};

pub(super) fn scan<T: Pod>(
    comm: &Comm,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    exclusive: bool,
    algorithm: Algorithm,
) -> Result<()> {
    let _ = (comm, send, recv, op, exclusive);
    Err(Error::other(format!("scan {algorithm}: not implemented yet")))
}
