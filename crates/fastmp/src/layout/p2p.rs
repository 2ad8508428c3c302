//! Point-to-point with layouts: the selected elements travel packed, in layout order.
//!
//! A strided message is packed on the sender into the rank's staging buffer and unpacked on the
//! receiver from its own (both reused, no allocation once warm); a layout that selects one
//! contiguous range is sent or received in place. On shm the packed message then moves with the
//! device's usual single copy, so a strided transfer reads and writes the strided elements once
//! each plus one contiguous copy; docs/ARCHITECTURE.md has the measurement that kept it so.

use bytemuck::{NoUninit, Pod};

use super::{Layout, check, contiguous, gather_bytes, scatter_bytes};
use crate::comm::{Comm, Status};
use crate::device::{SendMode, Source};
use crate::error::Result;
use crate::values::with_scratch;

impl Comm {
    /// Sends the elements of `buf` that `layout` selects (MPI_Send with a derived datatype). The
    /// message is the selected elements in layout order, so any receive of that many elements
    /// matches it: contiguous, or strided with another layout.
    ///
    /// ```
    /// use fastmp::layout::Vector;
    /// // Column 2 of a 4×3 row-major matrix, received as a contiguous vector.
    /// fastmp::run(2, |world| {
    ///     if world.rank() == 0 {
    ///         let matrix: Vec<u32> = (0..12).collect();
    ///         let column = Vector { count: 4, blocklength: 1, stride: 3 };
    ///         world.send_strided(&matrix[2..], &column, 1, 0)?;
    ///     } else {
    ///         let mut col = [0u32; 4];
    ///         world.recv(&mut col, 0, 0)?;
    ///         assert_eq!(col, [2, 5, 8, 11]);
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn send_strided<T: NoUninit, L: Layout>(&self, buf: &[T], layout: &L, dest: usize, tag: i32) -> Result<()> {
        let n = check("send_strided", layout, buf.len(), false)?;
        let size = size_of::<T>();
        let bytes: &[u8] = bytemuck::cast_slice(buf);
        if let Some((offset, len)) = contiguous(layout) {
            return self.send_bytes(&bytes[offset * size..(offset + len) * size], dest, tag, SendMode::Standard);
        }
        self.dest_or_null(dest, tag)?;
        with_scratch(n * size, |packed| {
            gather_bytes(layout, size, bytes, packed, n);
            self.send_bytes(packed, dest, tag, SendMode::Standard)
        })
    }

    /// Receives into the elements of `buf` that `layout` selects (MPI_Recv with a derived
    /// datatype), in layout order; a shorter message fills the first selected elements
    /// ([`Status::count`] says how many), a longer one is [`crate::Error::Truncated`].
    /// Elements the layout does not select are never written.
    ///
    /// ```
    /// use fastmp::layout::{Order, Subarray};
    /// // Rank 0 sends 4 values; rank 1 puts them in the middle 2×2 block of a 4×4 grid.
    /// fastmp::run(2, |world| {
    ///     if world.rank() == 0 {
    ///         world.send(&[1i32, 2, 3, 4], 1, 0)?;
    ///     } else {
    ///         let mut grid = [0i32; 16];
    ///         let inner = Subarray { sizes: vec![4, 4], subsizes: vec![2, 2], starts: vec![1, 1], order: Order::RowMajor };
    ///         let status = world.recv_strided(&mut grid, &inner, 0, 0)?;
    ///         assert_eq!(status.count::<i32>(), 4);
    ///         assert_eq!(grid[4..12], [0, 1, 2, 0, 0, 3, 4, 0]);
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn recv_strided<T: Pod, L: Layout>(
        &self,
        buf: &mut [T],
        layout: &L,
        source: impl Into<Source>,
        tag: i32,
    ) -> Result<Status> {
        let n = check("recv_strided", layout, buf.len(), true)?;
        let size = size_of::<T>();
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(buf);
        let source = source.into();
        if let Some((offset, len)) = contiguous(layout) {
            let raw = self.recv_bytes(&mut bytes[offset * size..(offset + len) * size], source, tag)?;
            return self.status(raw, size);
        }
        self.spec_or_null(source, tag)?;
        with_scratch(n * size, |packed| {
            let raw = self.recv_bytes(packed, source, tag)?;
            let status = self.status(raw, size)?;
            scatter_bytes(layout, size, packed, bytes, status.count::<T>());
            Ok(status)
        })
    }
}
