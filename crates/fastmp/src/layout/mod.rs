//! Strided layouts (MPI derived datatypes): which elements of a buffer a message carries.
//!
//! A layout selects elements of a slice, in element units: [`Vector`] (MPI_Type_vector: equal
//! blocks at a fixed stride, e.g. a matrix column), [`Subarray`] (MPI_Type_create_subarray: an
//! n-dimensional block of an n-dimensional array) and [`Indexed`] (MPI_Type_indexed: blocks
//! of any lengths at any displacements). Whatever the layout, the message is its selected
//! elements in layout order (MPI's type signature is the element count), so a strided send
//! matches a contiguous receive of the same number of elements and vice versa.
//!
//! Every layer sees a layout the same way: as [`Layout::runs`], the contiguous `(offset, len)`
//! runs it selects, in order. Point-to-point is [`Comm::send_strided`](crate::Comm::send_strided)
//! / [`Comm::recv_strided`](crate::Comm::recv_strided). Collectives take contiguous buffers:
//! [`pack`] the strided data, run the collective on the packed vector, [`unpack`] the result
//! (see [`pack`] for a strided broadcast).
//!
//! Layouts are checked where they are used, against the buffer they are used with: an `Err`
//! names the call, the layout and the buffer length.

mod p2p;

use std::fmt::Debug;

use crate::error::{Error, Result};

/// A selection of buffer elements; implemented by [`Vector`], [`Subarray`] and [`Indexed`].
pub trait Layout: Debug + sealed::Sealed {
    /// Number of elements the layout selects: the length of the message it sends, and of the
    /// contiguous buffer it matches.
    fn elements(&self) -> Result<usize> {
        self.shape().map(|s| s.elements).map_err(|why| invalid("Layout::elements", self, &why))
    }

    /// The shortest buffer (in elements) the layout can be used with.
    fn extent(&self) -> Result<usize> {
        self.shape().map(|s| s.extent).map_err(|why| invalid("Layout::extent", self, &why))
    }

    /// The contiguous runs the layout selects, as `(offset, len)` in elements, in message order
    /// (empty runs left out). Meaningful for a layout whose [`Layout::elements`] is `Ok`.
    ///
    /// ```
    /// use fastmp::layout::{Layout, Vector};
    /// let column = Vector { count: 3, blocklength: 1, stride: 4 };
    /// assert_eq!(column.runs().collect::<Vec<_>>(), [(0, 1), (4, 1), (8, 1)]);
    /// ```
    fn runs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.run_iter()
    }
}

mod sealed {
    /// What a layout must compute; private so that the set of layouts (and their invariants)
    /// stays the crate's.
    pub trait Sealed {
        /// Element count and extent, with checked arithmetic; `Err` says what is wrong with the
        /// layout itself.
        fn shape(&self) -> Result<Shape, String>;
        /// Whether some element is selected twice (fine to send, ambiguous to receive into).
        /// Asked only of receive layouts whose `shape` is `Ok`.
        fn overlapping(&self) -> bool;
        /// The runs, as [`super::Layout::runs`] documents them.
        fn run_iter(&self) -> impl Iterator<Item = (usize, usize)> + '_;
    }

    /// A layout's size facts (unnameable outside the crate, like the trait).
    #[derive(Clone, Copy, Debug)]
    pub struct Shape {
        pub elements: usize,
        pub extent: usize,
    }
}

use sealed::Shape;

fn invalid(call: &str, layout: &(impl Debug + ?Sized), why: &str) -> Error {
    Error::InvalidArgument(format!("{call}: {layout:?} is not a valid layout: {why}"))
}

/// Checks `layout` for use by `call` on a buffer of `buf_len` elements (`writing`: as a
/// receive buffer, where overlapping runs are an error); returns its element count.
pub(crate) fn check<L: Layout>(call: &str, layout: &L, buf_len: usize, writing: bool) -> Result<usize> {
    let shape = layout.shape().map_err(|why| invalid(call, layout, &why))?;
    if shape.extent > buf_len {
        return Err(Error::InvalidArgument(format!(
            "{call}: {layout:?} needs a buffer of at least {} elements, the buffer has {buf_len}",
            shape.extent
        )));
    }
    if writing && layout.overlapping() {
        return Err(invalid(call, layout, "its blocks overlap, so a receive into it is ambiguous"));
    }
    Ok(shape.elements)
}

/// Walks the first `limit` selected elements of `layout` as `(buffer offset, packed offset,
/// len)` runs, in elements.
fn walk<L: Layout>(layout: &L, limit: usize, mut f: impl FnMut(usize, usize, usize)) {
    let mut packed = 0;
    for (offset, len) in layout.runs() {
        if packed == limit {
            break;
        }
        let len = len.min(limit - packed);
        f(offset, packed, len);
        packed += len;
    }
}

/// Copies the first `limit` selected elements between a buffer's bytes and packed bytes
/// (`gather`: buffer → packed). `S` is the element size when fixed at compile time (so a
/// column's one-element runs are single moves), 0 for the others (`size` then says).
fn copy_runs<const S: usize, L: Layout>(
    layout: &L,
    size: usize,
    from: &[u8],
    to: &mut [u8],
    limit: usize,
    gather: bool,
) {
    walk(layout, limit, |b, p, n| {
        let (src, dst) = if gather { (b, p) } else { (p, b) };
        if S != 0 && n == 1 {
            to[dst * S..][..S].copy_from_slice(&from[src * S..][..S]);
        } else {
            to[dst * size..(dst + n) * size].copy_from_slice(&from[src * size..(src + n) * size]);
        }
    });
}

fn copy_layout<L: Layout>(layout: &L, size: usize, from: &[u8], to: &mut [u8], limit: usize, gather: bool) {
    match size {
        1 => copy_runs::<1, L>(layout, size, from, to, limit, gather),
        2 => copy_runs::<2, L>(layout, size, from, to, limit, gather),
        4 => copy_runs::<4, L>(layout, size, from, to, limit, gather),
        8 => copy_runs::<8, L>(layout, size, from, to, limit, gather),
        16 => copy_runs::<16, L>(layout, size, from, to, limit, gather),
        _ => copy_runs::<0, L>(layout, size, from, to, limit, gather),
    }
}

/// Packs the first `limit` selected elements of a buffer (`src`: its bytes, `size`-byte
/// elements) into `packed`. The layout must have been checked against the buffer.
pub(crate) fn gather_bytes<L: Layout>(layout: &L, size: usize, src: &[u8], packed: &mut [u8], limit: usize) {
    copy_layout(layout, size, src, packed, limit, true);
}

/// Unpacks `limit` elements from `packed` into their places in a buffer (`dst`: its bytes).
pub(crate) fn scatter_bytes<L: Layout>(layout: &L, size: usize, packed: &[u8], dst: &mut [u8], limit: usize) {
    copy_layout(layout, size, packed, dst, limit, false);
}

/// The one run of a layout that selects a contiguous range, if it does (sent and received in
/// place, without packing).
pub(crate) fn contiguous<L: Layout>(layout: &L) -> Option<(usize, usize)> {
    let mut runs = layout.runs();
    let first = runs.next().unwrap_or((0, 0));
    runs.next().is_none().then_some(first)
}

/// The selected elements of `buf`, in layout order (MPI_Pack): the contiguous side of the
/// generic route for collectives with layouts — pack, run the collective on the packed vector,
/// [`unpack`] the result.
///
/// ```
/// use fastmp::layout::{Vector, pack, unpack};
/// // Broadcast column 1 of a 3×4 row-major matrix from rank 0.
/// let column = Vector { count: 3, blocklength: 1, stride: 4 };
/// fastmp::run(3, |world| {
///     let mut matrix = [0.0f64; 12];
///     if world.rank() == 0 {
///         matrix.iter_mut().enumerate().for_each(|(i, x)| *x = i as f64);
///     }
///     let mut packed = pack(&column, &matrix[1..])?;
///     world.bcast(&mut packed, 0)?;
///     unpack(&column, &packed, &mut matrix[1..])?;
///     assert_eq!([matrix[1], matrix[5], matrix[9]], [1.0, 5.0, 9.0]);
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub fn pack<T: bytemuck::Pod, L: Layout>(layout: &L, buf: &[T]) -> Result<Vec<T>> {
    let n = check("pack", layout, buf.len(), false)?;
    let mut packed = vec![T::zeroed(); n];
    gather_bytes(layout, size_of::<T>(), bytemuck::cast_slice(buf), bytemuck::cast_slice_mut(&mut packed), n);
    Ok(packed)
}

/// Writes `packed` (exactly the layout's element count) into the selected elements of `buf`
/// (MPI_Unpack); the other elements are untouched.
pub fn unpack<T: bytemuck::Pod, L: Layout>(layout: &L, packed: &[T], buf: &mut [T]) -> Result<()> {
    let n = check("unpack", layout, buf.len(), true)?;
    if packed.len() != n {
        return Err(Error::InvalidArgument(format!(
            "unpack: {layout:?} selects {n} elements, the packed data has {}",
            packed.len()
        )));
    }
    scatter_bytes(layout, size_of::<T>(), bytemuck::cast_slice(packed), bytemuck::cast_slice_mut(buf), n);
    Ok(())
}

/// `count` blocks of `blocklength` elements, block `i` starting at element `i * stride`
/// (MPI_Type_vector). A column of a row-major `rows × cols` matrix is
/// `Vector { count: rows, blocklength: 1, stride: cols }` on the slice starting at the column.
/// `stride < blocklength` (overlapping blocks) may be sent, not received into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vector {
    pub count: usize,
    pub blocklength: usize,
    pub stride: usize,
}

impl sealed::Sealed for Vector {
    fn shape(&self) -> Result<Shape, String> {
        let overflow = || "its size overflows usize".to_string();
        let elements = self.count.checked_mul(self.blocklength).ok_or_else(overflow)?;
        let extent = match elements {
            0 => 0,
            _ => (self.count - 1)
                .checked_mul(self.stride)
                .and_then(|x| x.checked_add(self.blocklength))
                .ok_or_else(overflow)?,
        };
        Ok(Shape { elements, extent })
    }

    fn overlapping(&self) -> bool {
        self.count > 1 && self.stride < self.blocklength
    }

    fn run_iter(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let Vector { count, blocklength, stride } = *self;
        // Adjacent blocks are one run.
        let (count, blocklength) = match blocklength {
            0 => (0, 0),
            _ if stride == blocklength => (count.min(1), count * blocklength),
            _ => (count, blocklength),
        };
        (0..count).map(move |i| (i * stride, blocklength))
    }
}
impl Layout for Vector {}

/// Element order of a [`Subarray`]'s array.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Order {
    /// The last index varies fastest (C, MPI_ORDER_C).
    #[default]
    RowMajor,
    /// The first index varies fastest (Fortran, MPI_ORDER_FORTRAN).
    ColumnMajor,
}

/// The block `starts[d] .. starts[d] + subsizes[d]` in every dimension `d` of an array of
/// `sizes` elements, stored in `order` (MPI_Type_create_subarray). Used on a buffer that holds
/// the whole array (`sizes` multiplied).
///
/// ```
/// use fastmp::layout::{Layout, Order, Subarray};
/// // The 2×2 block at (1, 1) of a 3×4 row-major array.
/// let block = Subarray { sizes: vec![3, 4], subsizes: vec![2, 2], starts: vec![1, 1], order: Order::RowMajor };
/// assert_eq!(block.runs().collect::<Vec<_>>(), [(5, 2), (9, 2)]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subarray {
    pub sizes: Vec<usize>,
    pub subsizes: Vec<usize>,
    pub starts: Vec<usize>,
    pub order: Order,
}

impl Subarray {
    /// Dimension `k` counted from the fastest-varying one.
    fn dim(&self, k: usize) -> usize {
        match self.order {
            Order::RowMajor => self.sizes.len() - 1 - k,
            Order::ColumnMajor => k,
        }
    }

    /// How many fastest dimensions one run spans: the next dimension joins while the one
    /// inside it is taken whole.
    fn run_dims(&self) -> usize {
        let n = self.sizes.len();
        let mut k = 1;
        while k < n && self.subsizes[self.dim(k - 1)] == self.sizes[self.dim(k - 1)] {
            k += 1;
        }
        k
    }
}

impl sealed::Sealed for Subarray {
    fn shape(&self) -> Result<Shape, String> {
        let n = self.sizes.len();
        if n == 0 || self.subsizes.len() != n || self.starts.len() != n {
            return Err(format!(
                "sizes, subsizes and starts must have the same, nonzero number of dimensions (have {}, {}, {})",
                n,
                self.subsizes.len(),
                self.starts.len()
            ));
        }
        for d in 0..n {
            if self.starts[d].checked_add(self.subsizes[d]).is_none_or(|end| end > self.sizes[d]) {
                return Err(format!(
                    "dimension {d}: starts {} + subsizes {} exceeds sizes {}",
                    self.starts[d], self.subsizes[d], self.sizes[d]
                ));
            }
        }
        let product = |v: &[usize]| v.iter().try_fold(1usize, |acc, &x| acc.checked_mul(x));
        let overflow = || "its size overflows usize".to_string();
        Ok(Shape {
            elements: product(&self.subsizes).ok_or_else(overflow)?,
            extent: product(&self.sizes).ok_or_else(overflow)?,
        })
    }

    fn overlapping(&self) -> bool {
        false
    }

    fn run_iter(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let n = self.sizes.len();
        let k = self.run_dims();
        let empty = self.subsizes.contains(&0);
        // Run length, and the offset of the first run (the block's corner).
        let (mut len, mut stride, mut corner) = (1, 1, 0);
        for j in 0..n {
            let d = self.dim(j);
            if j < k {
                len *= self.subsizes[d];
            }
            corner += self.starts[d] * stride;
            stride *= self.sizes[d];
        }
        let runs = if empty { 0 } else { (k..n).map(|j| self.subsizes[self.dim(j)]).product() };
        // Run r's offset: its index split into the outer dimensions' coordinates (no state to
        // allocate; a few divisions per run).
        (0..runs).map(move |mut r| {
            let (mut offset, mut stride) = (corner, 1);
            for j in 0..n {
                let d = self.dim(j);
                if j >= k {
                    let sub = self.subsizes[d];
                    offset += (r % sub) * stride;
                    r /= sub;
                }
                stride *= self.sizes[d];
            }
            (offset, len)
        })
    }
}
impl Layout for Subarray {}

/// Blocks of `blocklengths[i]` elements at `displacements[i]` (MPI_Type_indexed), sent in
/// the order given. Blocks may overlap in a send, not in a receive.
///
/// ```
/// use fastmp::layout::{Indexed, Layout};
/// let picks = Indexed { blocklengths: vec![2, 1], displacements: vec![6, 1] };
/// assert_eq!(picks.runs().collect::<Vec<_>>(), [(6, 2), (1, 1)]);
/// assert_eq!((picks.elements()?, picks.extent()?), (3, 8));
/// # Ok::<(), fastmp::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Indexed {
    pub blocklengths: Vec<usize>,
    pub displacements: Vec<usize>,
}

impl Indexed {
    /// Whether two nonempty blocks share an element. Linear for blocks in increasing order (the
    /// usual case); otherwise on a sorted copy.
    fn blocks_overlap(&self) -> bool {
        let blocks = || {
            self.displacements
                .iter()
                .zip(&self.blocklengths)
                .filter(|b| *b.1 > 0)
                .map(|(&d, &l)| (d, d.saturating_add(l)))
        };
        if blocks().is_sorted_by_key(|b| b.0) {
            return overlaps_in_order(blocks());
        }
        let mut sorted: Vec<_> = blocks().collect();
        sorted.sort_unstable();
        overlaps_in_order(sorted.into_iter())
    }
}

/// Whether blocks `(start, end)` given in order of start overlap: one does iff it starts
/// before an earlier one ends.
fn overlaps_in_order(blocks: impl Iterator<Item = (usize, usize)>) -> bool {
    let mut end = 0;
    for (start, stop) in blocks {
        if start < end {
            return true;
        }
        end = end.max(stop);
    }
    false
}

impl sealed::Sealed for Indexed {
    fn shape(&self) -> Result<Shape, String> {
        if self.blocklengths.len() != self.displacements.len() {
            return Err(format!(
                "{} blocklengths for {} displacements",
                self.blocklengths.len(),
                self.displacements.len()
            ));
        }
        let (mut elements, mut extent) = (0usize, 0usize);
        for (&d, &l) in self.displacements.iter().zip(&self.blocklengths) {
            let end = d.checked_add(l).ok_or("its size overflows usize")?;
            elements = elements.checked_add(l).ok_or("its size overflows usize")?;
            if l > 0 {
                extent = extent.max(end);
            }
        }
        Ok(Shape { elements, extent })
    }

    /// Linear for blocks in increasing order (the usual case); otherwise on a sorted copy, the
    /// one allocation a layout may make (only when receiving into it).
    fn overlapping(&self) -> bool {
        self.blocks_overlap()
    }

    fn run_iter(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.displacements.iter().copied().zip(self.blocklengths.iter().copied()).filter(|&(_, l)| l > 0)
    }
}
impl Layout for Indexed {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_whole_dimensions() {
        let whole_rows =
            Subarray { sizes: vec![4, 3], subsizes: vec![2, 3], starts: vec![1, 0], order: Order::RowMajor };
        assert_eq!(whole_rows.runs().collect::<Vec<_>>(), [(3, 6)]);
        let f = Subarray { sizes: vec![3, 4], subsizes: vec![2, 2], starts: vec![1, 1], order: Order::ColumnMajor };
        assert_eq!(f.runs().collect::<Vec<_>>(), [(4, 2), (7, 2)]);
        let dense = Vector { count: 3, blocklength: 2, stride: 2 };
        assert_eq!(dense.runs().collect::<Vec<_>>(), [(0, 6)]);
        assert_eq!(contiguous(&dense), Some((0, 6)));
        assert_eq!(contiguous(&Vector { count: 2, blocklength: 1, stride: 2 }), None);
    }

    #[test]
    fn overlap_is_found_in_any_order() {
        let ix = |d: &[usize], l: &[usize]| Indexed { displacements: d.to_vec(), blocklengths: l.to_vec() };
        assert!(!ix(&[0, 2, 5], &[2, 3, 1]).blocks_overlap());
        assert!(ix(&[0, 1], &[2, 1]).blocks_overlap());
        assert!(ix(&[5, 0, 3], &[1, 3, 3]).blocks_overlap());
        assert!(!ix(&[5, 0, 3], &[1, 3, 2]).blocks_overlap());
        assert!(!ix(&[1, 1], &[0, 2]).blocks_overlap(), "empty blocks select nothing");
    }
}
