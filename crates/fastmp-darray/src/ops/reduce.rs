//! Reductions: over the whole array (`sum`, `product`, `maxval`, `minval`, `any`, `all`,
//! `count`, result on every member of the grid) and along one dimension (a lower-rank array).
//!
//! TODO(helper): implement; see the issue and docs/ARCHITECTURE.md.

/// Element types the numeric reductions accept.
pub trait Reducible: bytemuck::Pod + PartialOrd {}
