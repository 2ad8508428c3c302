//! Device-native collectives for the shm device: ranks publish references to their buffers in
//! the communicator's shared area and peers copy or reduce directly from them.

use bytemuck::Pod;

use super::Layout;
use super::op::Op;
use crate::comm::Comm;
use crate::error::{Error, Result};

fn todo(what: &str) -> Result<()> {
    Err(Error::other(format!("native {what}: not implemented yet")))
}

pub(super) fn barrier(comm: &Comm) -> Result<()> {
    let _ = comm;
    todo("barrier")
}

pub(super) fn bcast(comm: &Comm, buf: &mut [u8], root: usize) -> Result<()> {
    let _ = (comm, buf, root);
    todo("bcast")
}

pub(super) fn scatter(comm: &Comm, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    let _ = (comm, send, recv, root);
    todo("scatter")
}

pub(super) fn scatterv(comm: &Comm, send: &[u8], layout: Option<&Layout>, recv: &mut [u8], root: usize) -> Result<()> {
    let _ = (comm, send, layout, recv, root);
    todo("scatterv")
}

pub(super) fn gather(comm: &Comm, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    let _ = (comm, send, recv, root);
    todo("gather")
}

pub(super) fn gatherv(comm: &Comm, send: &[u8], recv: &mut [u8], layout: Option<&Layout>, root: usize) -> Result<()> {
    let _ = (comm, send, recv, layout, root);
    todo("gatherv")
}

pub(super) fn allgather(comm: &Comm, send: &[u8], recv: &mut [u8]) -> Result<()> {
    let _ = (comm, send, recv);
    todo("allgather")
}

pub(super) fn allgatherv(comm: &Comm, send: &[u8], recv: &mut [u8], layout: &Layout) -> Result<()> {
    let _ = (comm, send, recv, layout);
    todo("allgatherv")
}

pub(super) fn alltoall(comm: &Comm, send: &[u8], recv: &mut [u8]) -> Result<()> {
    let _ = (comm, send, recv);
    todo("alltoall")
}

pub(super) fn alltoallv(
    comm: &Comm,
    send: &[u8],
    send_layout: &Layout,
    recv: &mut [u8],
    recv_layout: &Layout,
) -> Result<()> {
    let _ = (comm, send, send_layout, recv, recv_layout);
    todo("alltoallv")
}

pub(super) fn reduce<T: Pod>(comm: &Comm, send: &[T], recv: &mut [T], op: &dyn Op<T>, root: usize) -> Result<()> {
    let _ = (comm, send, recv, op, root);
    todo("reduce")
}

pub(super) fn allreduce<T: Pod>(comm: &Comm, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
    let _ = (comm, send, recv, op);
    todo("allreduce")
}

pub(super) fn reduce_scatter<T: Pod>(
    comm: &Comm,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    op: &dyn Op<T>,
) -> Result<()> {
    let _ = (comm, send, recv, counts, op);
    todo("reduce_scatter")
}

pub(super) fn scan<T: Pod>(comm: &Comm, send: &[T], recv: &mut [T], op: &dyn Op<T>, exclusive: bool) -> Result<()> {
    let _ = (comm, send, recv, op, exclusive);
    todo("scan")
}
