//! `upc_all_scatter`, `upc_all_gather` and `upc_all_gather_all`.

use bytemuck::Pod;

use super::{SharedArray, Sync};
use crate::error::{Error, Result};

/// Copies elements `i*len..(i+1)*len` of `root`'s block of `src` into elements `0..len` of rank
/// `i`'s block of `dst`, for every rank `i` (UPC `upc_all_scatter`).
pub fn scatter<T: Pod>(dst: &SharedArray<T>, src: &SharedArray<T>, root: usize, len: usize, sync: Sync) -> Result<()> {
    let _ = (dst, src, root, len, sync);
    Err(Error::other("pgas::scatter: not built yet"))
}

/// Copies elements `0..len` of rank `i`'s block of `src` into elements `i*len..(i+1)*len` of
/// `root`'s block of `dst`, for every rank `i` (UPC `upc_all_gather`).
pub fn gather<T: Pod>(dst: &SharedArray<T>, src: &SharedArray<T>, root: usize, len: usize, sync: Sync) -> Result<()> {
    let _ = (dst, src, root, len, sync);
    Err(Error::other("pgas::gather: not built yet"))
}

/// Copies elements `0..len` of rank `i`'s block of `src` into elements `i*len..(i+1)*len` of
/// every rank's block of `dst` (UPC `upc_all_gather_all`).
pub fn gather_all<T: Pod>(dst: &SharedArray<T>, src: &SharedArray<T>, len: usize, sync: Sync) -> Result<()> {
    let _ = (dst, src, len, sync);
    Err(Error::other("pgas::gather_all: not built yet"))
}
