//! Reduce-scatter algorithms: recursive halving (BDE), ring (BKT), reduce+scatterv.

use bytemuck::Pod;

use super::op::Op;
use super::select::Algorithm;
use crate::comm::Comm;
use crate::error::{Error, Result};

pub(super) fn reduce_scatter<T: Pod>(
    comm: &Comm,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    op: &dyn Op<T>,
    algorithm: Algorithm,
) -> Result<()> {
    let _ = (comm, send, recv, counts, op);
    Err(Error::other(format!("reduce_scatter {algorithm}: not implemented yet")))
}
