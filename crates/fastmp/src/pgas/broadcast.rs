//! `upc_all_broadcast`.

use bytemuck::Pod;

use super::{SharedArray, Sync};
use crate::error::{Error, Result};

/// Copies elements `0..len` of `root`'s block of `src` into elements `0..len` of every rank's
/// block of `dst` (UPC `upc_all_broadcast`). Collective over the arrays' ranks, with the same
/// arguments everywhere.
pub fn broadcast<T: Pod>(
    dst: &SharedArray<T>,
    src: &SharedArray<T>,
    root: usize,
    len: usize,
    sync: Sync,
) -> Result<()> {
    let _ = (dst, src, root, len, sync);
    Err(Error::other("pgas::broadcast: not built yet"))
}
