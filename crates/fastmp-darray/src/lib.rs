//! Distributed arrays on fastmp, after HPJava's distributed arrays and their Adlib collectives
//! (seed 003): process [`Grid`]s, [`Range`]s that say how each dimension is spread (block,
//! cyclic, block-cyclic, collapsed, block with ghost cells), [`DArray`]s with `ndarray` local
//! blocks, and the collective operations on them — [`remap`], [`write_halo`](DArray::write_halo),
//! [`shift`]/[`cshift`], reductions, irregular gather/scatter — each with a reusable schedule.
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
//!
//! # Local computation
//! A rank computes on its block through `ndarray` views: [`DArray::local`] (the elements it
//! owns), [`DArray::local_with_ghosts`] (with the ghost cells around them, for stencils), or
//! element by element with their global indices in [`DArray::overall`] (HPJava's `overall`
//! loop). A [`Section`] (one [`Triplet`] `lo..hi` by `stride` per dimension) aliases its parent
//! and can be the source or destination of an operation. Since the same program runs on every
//! rank and ranks share nothing but messages, the same code serves thread ranks (shm) and
//! processes (tcp, under `fastmprun`).
//!
//! # Schedules
//! Every operation is a schedule object ([`RemapSchedule`], [`ShiftSchedule`],
//! [`HaloSchedule`], ...) built once and executed as often as needed; the one-shot functions
//! ([`remap`], [`shift`], [`DArray::write_halo`], ...) build, execute and drop one. For the
//! regular operations building is local: each rank derives its messages from the shared
//! metadata, both ends of a message in the same order, agglomerated into one message per peer.
//! A built schedule keeps its packing space, and checks at every execution that it is given
//! arrays with the grid, ranges and section it was built for:
//!
//! ```
//! use fastmp_darray::{DArray, Grid, Range, RemapSchedule};
//! fastmp::run(4, |world| {
//!     let grid = Grid::new(&world, &[2, 2])?;
//!     // A 6 × 8 matrix by blocks of rows and of columns, one ghost cell on every side.
//!     let rows = Range::ghost_block(6, &grid, 0, 1, 1)?;
//!     let cols = Range::ghost_block(8, &grid, 1, 1, 1)?;
//!     let mut a = DArray::from_fn(&grid, [rows, cols], |(i, j)| (10 * i + j) as f64)?;
//!     a.write_halo()?; // ghost cells ← the neighbours' elements
//!     // Locally the block is an ndarray view, with the ghost cells around it.
//!     let (m, n) = a.local().dim();
//!     assert_eq!(a.local_with_ghosts().dim(), (m + 2, n + 2));
//!
//!     // The same matrix cyclic by rows and whole along columns: no range targets grid
//!     // dimension 1, so each of its two columns of ranks holds a copy, and remap fills both.
//!     let mut b = DArray::from_elem(&grid, [Range::cyclic(6, &grid, 0)?, Range::collapsed(8)], 0.0)?;
//!     let mut remap = RemapSchedule::build(&b, &a)?; // built once (local: no messages) ...
//!     for _ in 0..3 {
//!         remap.execute(&mut b, &a)?; // ... executed as often as needed
//!     }
//!     for ((i, j), &x) in b.overall() {
//!         assert_eq!(x, (10 * i + j) as f64);
//!     }
//!     Ok(())
//! })?;
//! # Ok::<(), fastmp::Error>(())
//! ```
//!
//! # Element types
//! [`Pod`] elements move as bytes: a message that is one contiguous range of a stored block is
//! sent from or received into it in place, any other is packed one contiguous run at a time.
//! Other types that implement serde's traits use the `_obj` forms ([`remap_obj`],
//! [`DArray::write_halo_obj`], ...): each peer's elements travel as one postcard-encoded vector.
//!
//! # Errors
//! Arguments that do not fit — shapes that differ, ranges that do not match the grid, grids
//! over different communicators, a halo wider than the ghost cells, a schedule given other
//! arrays than it was built for — are an [`Error::InvalidArgument`] naming the call. The check
//! uses only metadata every rank holds, so every rank returns the same `Err`, before any
//! communication.
//!
//! # Example programs
//! `examples/` holds three programs, each checked against a serial computation and runnable
//! as thread ranks or launched processes:
//!
//! ```sh
//! cargo run --release -p fastmp-darray --example heat -- --np 4       # Jacobi heat diffusion, write_halo
//! cargo run --release -p fastmp-darray --example redblack -- --np 4   # red-black relaxation, 512 × 512
//! cargo run --release -p fastmp-darray --example transpose -- --np 4  # a transpose built on remap
//! fastmprun -np 2 --device tcp target/release/examples/heat
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
