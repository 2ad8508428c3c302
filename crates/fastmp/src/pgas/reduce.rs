//! `upc_all_reduce` and `upc_all_prefix_reduce`.

use bytemuck::Pod;

use super::{SharedArray, Sync};
use crate::coll::op::Op;
use crate::error::{Error, Result};

/// Reduces the first `nelems` elements of the whole of `src` (its blocks in rank order: element
/// `g` is element `g % B` of rank `g / B`'s block) with `op` into element 0 of `root`'s block of
/// `dst` (UPC `upc_all_reduce`): one value, `src[0] ∘ src[1] ∘ … ∘ src[nelems-1]`, in that order
/// for non-commutative operations.
pub fn reduce<T: Pod, O: Op<T>>(
    dst: &SharedArray<T>,
    src: &SharedArray<T>,
    root: usize,
    nelems: usize,
    op: O,
    sync: Sync,
) -> Result<()> {
    let _ = (dst, src, root, nelems, op, sync);
    Err(Error::other("pgas::reduce: not built yet"))
}

/// Writes `dst[k] = src[0] ∘ … ∘ src[k]` for every global index `k < nelems` (UPC
/// `upc_all_prefix_reduce`); `dst` and `src` must have the same block length.
pub fn prefix_reduce<T: Pod, O: Op<T>>(
    dst: &SharedArray<T>,
    src: &SharedArray<T>,
    nelems: usize,
    op: O,
    sync: Sync,
) -> Result<()> {
    let _ = (dst, src, nelems, op, sync);
    Err(Error::other("pgas::prefix_reduce: not built yet"))
}
