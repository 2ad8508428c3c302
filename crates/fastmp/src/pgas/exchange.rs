//! `upc_all_exchange` and `upc_all_permute`.

use bytemuck::Pod;

use super::{SharedArray, Sync};
use crate::error::{Error, Result};

/// Copies elements `i*len..(i+1)*len` of rank `j`'s block of `src` into elements
/// `j*len..(j+1)*len` of rank `i`'s block of `dst`, for all `i`, `j` (UPC `upc_all_exchange`).
pub fn exchange<T: Pod>(dst: &SharedArray<T>, src: &SharedArray<T>, len: usize, sync: Sync) -> Result<()> {
    let _ = (dst, src, len, sync);
    Err(Error::other("pgas::exchange: not built yet"))
}

/// Copies elements `0..len` of rank `i`'s block of `src` into elements `0..len` of rank
/// `perm[i]`'s block of `dst`, for every rank `i` (UPC `upc_all_permute`). `perm` must be a
/// permutation of the ranks, the same on every rank; `Err` otherwise.
pub fn permute<T: Pod>(
    dst: &SharedArray<T>,
    src: &SharedArray<T>,
    perm: &[usize],
    len: usize,
    sync: Sync,
) -> Result<()> {
    let _ = (dst, src, perm, len, sync);
    Err(Error::other("pgas::permute: not built yet"))
}
