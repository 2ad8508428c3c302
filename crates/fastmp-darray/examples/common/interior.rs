//! Where a 5-point stencil with a fixed boundary updates a stored block: the stored rows and
//! columns whose global indices lie inside the grid (not on its boundary) and in the block's
//! physical segment. The distributed examples take it from a [`DArray`]; the serial ones take
//! the whole grid as one block, so both run the same update code.

use std::ops::Range;

use fastmp_darray::DArray;
use fastmp_darray::ndarray::Ix2;

/// The part of a stored block a stencil updates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interior {
    /// Stored rows to update.
    pub rows: Range<usize>,
    /// Stored columns to update.
    pub cols: Range<usize>,
    /// Parity of `global row + global column` at stored position `(0, 0)`, so the colour of
    /// stored `(a, b)` in red-black ordering is `(parity + a + b) % 2`.
    pub parity: usize,
}

impl Interior {
    /// This rank's part of a `rows × cols` grid held in `array` (its block may be empty).
    pub fn of(array: &DArray<f64, Ix2>) -> Interior {
        let ranges = array.ranges();
        let (len_r, len_c) = array.local().dim();
        let (first_r, first_c) = array.local_to_global((0, 0)).unwrap_or((0, 0));
        let (ghost_r, ghost_c) = (ranges[0].ghosts().0, ranges[1].ghosts().0);
        Interior {
            rows: along(first_r, len_r, ranges[0].extent(), ghost_r),
            cols: along(first_c, len_c, ranges[1].extent(), ghost_c),
            // Stored (0, 0) is global (first_r - ghost_r, first_c - ghost_c).
            parity: (first_r + first_c + ghost_r + ghost_c) % 2,
        }
    }

    /// The whole `rows × cols` grid as one block without ghosts (the serial computation).
    pub fn serial(rows: usize, cols: usize) -> Interior {
        Interior { rows: along(0, rows, rows, 0), cols: along(0, cols, cols, 0), parity: 0 }
    }

    /// Whether there is nothing to update.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() || self.cols.is_empty()
    }
}

/// Along one dimension: the stored positions of a block whose physical local indices
/// `0..len` are global `first..first + len` (stored at `ghost + local`), kept to the global
/// interior `1..extent - 1`.
fn along(first: usize, len: usize, extent: usize, ghost: usize) -> Range<usize> {
    let lo = 1usize.saturating_sub(first).min(len);
    let hi = extent.saturating_sub(1).saturating_sub(first).min(len).max(lo);
    ghost + lo..ghost + hi
}
