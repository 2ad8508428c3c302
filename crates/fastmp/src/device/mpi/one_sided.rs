//! One-sided operations over MPI windows (placeholder: no windows on the mpi device yet, so
//! `Device::one_sided` returns `None`).

/// The mpi device's window factory.
pub(crate) struct MpiRma;

impl MpiRma {
    pub(crate) fn new() -> MpiRma {
        MpiRma
    }
}
