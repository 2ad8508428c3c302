//! Adlib's collective operations on distributed arrays, each a schedule built once and
//! executed many times, with a one-shot function that builds, executes and drops it.
//!
//! Regular operations (remap, write_halo, shift, cshift) describe themselves to the plan
//! builder dimension by dimension (`crate::plan`); reductions and the irregular gather/scatter
//! have modules of their own.

mod halo;
mod irregular;
mod reduce;
mod regular;

pub use halo::{Halo, HaloSchedule};
pub use irregular::{GatherSchedule, ScatterSchedule, gather, gather_obj, scatter, scatter_obj};
pub use reduce::Reducible;
pub use regular::{RemapSchedule, ShiftSchedule, copy, cshift, cshift_obj, remap, remap_obj, shift, shift_obj};

use fastmp::Result;
use ndarray::Dimension;

use crate::array::DArray;
use crate::grid::Grid;
use crate::invalid;
use crate::range::Range;
use crate::section::Span;

/// Tag of every schedule's messages on the grid communicator. One tag suffices: a rank
/// executes collective operations in the same order as its peers, receives name their source,
/// and messages between two ranks do not overtake each other.
pub(crate) const TAG: i32 = 0x0da1;

/// What a schedule was built for, checked again when it is executed: the grid, the ranges and
/// the section of one array argument.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Signature {
    grid: Grid,
    ranges: Vec<Range>,
    spans: Vec<Span>,
}

impl Signature {
    pub(crate) fn of<T, D: Dimension>(array: &DArray<T, D>, spans: &[Span]) -> Signature {
        Signature { grid: array.grid().clone(), ranges: array.ranges().to_vec(), spans: spans.to_vec() }
    }

    /// `Err` unless `array` and `spans` are what the schedule was built for.
    pub(crate) fn check<T, D: Dimension>(
        &self,
        call: &str,
        what: &str,
        array: &DArray<T, D>,
        spans: &[Span],
    ) -> Result<()> {
        if self.grid != *array.grid() || self.ranges != array.ranges() || self.spans != spans {
            return Err(invalid(
                call,
                format!("the {what} is not the array (grid, ranges and section) the schedule was built for"),
            ));
        }
        Ok(())
    }
}
