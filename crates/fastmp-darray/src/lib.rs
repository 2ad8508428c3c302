//! Distributed arrays on fastmp, after HPJava's distributed arrays and their Adlib collectives
//! (seed 003): process [`Grid`]s, [`Range`]s that say how each dimension is spread (block,
//! cyclic, block-cyclic, collapsed, block with ghost cells), [`DArray`]s with `ndarray` local
//! blocks, and the collective operations on them — [`remap`](ops::remap),
//! [`write_halo`](DArray::write_halo), [`shift`](ops::shift)/[`cshift`](ops::cshift),
//! reductions, irregular gather/scatter — each with a reusable schedule.
//!
//! The crate uses fastmp's public API only: it names no device.
//!
//! # Model
//! - A [`Grid`] arranges the ranks of a communicator as a Cartesian grid; [`Grid::restrict`]
//!   fixes one grid dimension at one coordinate (a sub-grid, local to compute).
//! - Each dimension of an array has a [`Range`]: its extent, its format, and the grid dimension
//!   it is spread over. A grid dimension that no range targets holds a full copy of the array at
//!   each of its coordinates (the array is *replicated* there).
//! - Array metadata (grid shape, ranges) is the same on every rank, so every rank can compute
//!   who owns what without asking: creating an array is local, and an operation checks its
//!   arguments before any message moves, so a mistake is the same `Err` on every rank.
//! - Collective operations are collective over the members of the grids of the arrays involved;
//!   other ranks may call them too (they return at once) or not call them.
//! - Format knowledge lives only in [`Range`]; the schedule builder (`plan`) works from what a
//!   range answers (owner, local index, global index) and never branches on a format.
//!
//! ```
//! use fastmp_darray::{DArray, Grid, Range};
//! fastmp::run(4, |world| {
//!     let grid = Grid::new(&world, &[2, 2])?;
//!     let rows = Range::ghost_block(8, &grid, 0, 1, 1)?;
//!     let cols = Range::ghost_block(6, &grid, 1, 1, 1)?;
//!     let mut a = DArray::from_fn(&grid, [rows, cols], |(i, j)| (10 * i + j) as f64)?;
//!     a.write_halo()?;
//!     // Every ghost cell now holds its neighbour's value.
//!     for ((i, j), x) in a.overall() {
//!         assert_eq!(*x, (10 * i + j) as f64);
//!     }
//!     // A reduction's result is returned on every member of the grid.
//!     assert_eq!(a.sum()?, 1800.0);
//!     Ok(())
//! })?;
//! # Ok::<(), fastmp::Error>(())
//! ```

#![deny(unsafe_code)]

pub mod array;
pub mod grid;
pub mod ops;
mod plan;
pub mod range;
pub mod section;

pub use array::DArray;
pub use fastmp::{Error, Result};
pub use grid::Grid;
/// `ndarray`, whose views are the local blocks.
pub use ndarray;
pub use ops::Reducible;
pub use ops::{
    GatherSchedule, Halo, HaloSchedule, RemapSchedule, ScatterSchedule, ShiftSchedule, copy, cshift, cshift_obj,
    gather, gather_obj, remap, remap_obj, scatter, scatter_obj, shift, shift_obj,
};
pub use range::{Format, Range, Ranges};
pub use section::{AsSection, AsSectionMut, Section, SectionMut, Triplet};

/// Element types the fast (`Pod`) paths move as bytes. Serde types use the `_obj` forms.
pub use bytemuck::Pod;

/// A precise `InvalidArgument` error naming the call.
pub(crate) fn invalid(call: &str, what: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{call}: {what}"))
}
