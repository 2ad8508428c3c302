//! Scatter(v) and gather(v) algorithms: flat trees and MST.

use super::Layout;
use super::select::Algorithm;
use crate::comm::Comm;
use crate::error::{Error, Result};

pub(super) fn scatter(comm: &Comm, send: &[u8], recv: &mut [u8], root: usize, algorithm: Algorithm) -> Result<()> {
    let _ = (comm, send, recv, root);
    Err(Error::other(format!("scatter {algorithm}: not implemented yet")))
}

pub(super) fn scatterv(
    comm: &Comm,
    send: &[u8],
    layout: Option<&Layout>,
    recv: &mut [u8],
    root: usize,
    algorithm: Algorithm,
) -> Result<()> {
    let _ = (comm, send, layout, recv, root);
    Err(Error::other(format!("scatterv {algorithm}: not implemented yet")))
}

pub(super) fn gather(comm: &Comm, send: &[u8], recv: &mut [u8], root: usize, algorithm: Algorithm) -> Result<()> {
    let _ = (comm, send, recv, root);
    Err(Error::other(format!("gather {algorithm}: not implemented yet")))
}

pub(super) fn gatherv(
    comm: &Comm,
    send: &[u8],
    recv: &mut [u8],
    layout: Option<&Layout>,
    root: usize,
    algorithm: Algorithm,
) -> Result<()> {
    let _ = (comm, send, layout, recv, root);
    Err(Error::other(format!("gatherv {algorithm}: not implemented yet")))
}
