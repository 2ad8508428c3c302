//! NPB MG: not yet written.

use fastmp::Comm;

use crate::{Class, Outcome};

/// Whether this kernel runs `class` on `np` ranks.
pub fn check(_class: Class, _np: usize) -> Result<(), String> {
    Err("not yet written".into())
}

/// Runs the kernel (collective over `world`).
pub fn run(_world: &Comm, _class: Class) -> fastmp::Result<Outcome> {
    Err(fastmp::Error::InvalidArgument("not yet written".into()))
}
