//! Reduce algorithms: flat trees and MST, combining in rank order.

use bytemuck::Pod;

use super::op::Op;
use super::select::Algorithm;
use crate::comm::Comm;
use crate::error::{Error, Result};

pub(super) fn reduce<T: Pod>(
    comm: &Comm,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    root: usize,
    algorithm: Algorithm,
) -> Result<()> {
    let _ = (comm, send, recv, op, root);
    Err(Error::other(format!("reduce {algorithm}: not implemented yet")))
}
