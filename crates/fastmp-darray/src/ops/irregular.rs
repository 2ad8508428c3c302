//! Irregular access: `gather` (`dst[i] = src[subscripts[i]]`) and `scatter`
//! (`dst[subscripts[i]] = src[i]`), with schedules negotiated once at build.
//!
//! TODO(helper): implement.

/// A built gather.
#[derive(Debug)]
pub struct GatherSchedule;

/// A built scatter.
#[derive(Debug)]
pub struct ScatterSchedule;

pub fn gather() {}
pub fn gather_obj() {}
pub fn scatter() {}
pub fn scatter_obj() {}
