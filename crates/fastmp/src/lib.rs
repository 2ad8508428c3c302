//! # fastmp — message passing for Rust, MPI style
//!
//! The same SPMD program runs with its ranks as threads of one process (the `shm` device: plain
//! data moves with a single copy, no serialization) or as processes over TCP (the `tcp` device,
//! started by `fastmprun`, `mpirun` or `srun`); the device is chosen at launch, not in the code.
//! Without a launcher, a tcp job runs its ranks as threads that still talk over loopback sockets:
//!
//! ```
//! use fastmp::{Config, DeviceKind};
//! let sums = Config::new().device(DeviceKind::Tcp).np(3).run(|world| {
//!     let mut total = [0u64];
//!     world.allreduce(&[world.rank() as u64], &mut total, fastmp::op::Sum)?;
//!     Ok(total[0])
//! })?;
//! assert_eq!(sums, vec![3, 3, 3]);
//! # Ok::<(), fastmp::Error>(())
//! ```
//!
//! ```
//! let got = fastmp::run(4, |world| {
//!     let (rank, size) = (world.rank(), world.size());
//!     // Pass a token around the ring.
//!     let mut token = [0u32];
//!     if rank == 0 {
//!         world.send(&[1u32], 1 % size, 0)?;
//!         world.recv(&mut token, size - 1, 0)?;
//!     } else {
//!         world.recv(&mut token, rank - 1, 0)?;
//!         world.send(&[token[0] + 1], (rank + 1) % size, 0)?;
//!     }
//!     Ok(token[0])
//! })?;
//! assert_eq!(got[0], 4);
//! # Ok::<(), fastmp::Error>(())
//! ```
//!
//! ## Thread ranks and statics
//! On the shm device all ranks share one address space: a `static` (or anything reachable from
//! one) is shared by every rank, unlike MPI processes. Keep rank-local state inside the closure
//! given to [`run`] / [`main`].
//!
//! ## Layers
//! [`Comm`] (typed point-to-point, [`Comm::scope`] for nonblocking requests, whose buffer
//! borrows the compiler checks: see [`Scope`]) sits on the narrow [`device::Device`] trait; the
//! `shm` and `tcp` devices implement it.

pub mod coll;
mod comm;
mod communicators;
mod completion;
pub mod device;
mod error;
mod group;
mod launch;
mod owned;
mod p2p;
mod progress;
mod raw;
mod scope;
mod sync;
mod topology;

pub use comm::{Comm, Status};
pub use communicators::SplitType;
pub use completion::{Completable, test_some, testall, testany, wait_some, waitall, waitany};
pub use device::{ANY_SOURCE, ANY_TAG, Locality, PROC_NULL, Placement, Source, TAG_UB};
pub use error::{Error, Result};
pub use group::{Group, GroupOrdering};
pub use launch::config::{Config, DEFAULT_EAGER_LIMIT, DEFAULT_TCP_EAGER_LIMIT, DeviceKind, Pin};
pub use launch::{init, main, run};
pub use owned::{OwnedRequest, PersistentRequest, startall};
pub use scope::{RecvRequest, Request, Scope};
pub use topology::{CartComm, dims_create};

/// Reduction operations for `reduce`, `allreduce`, `scan`, ...: MPI's predefined ops as unit
/// structs, plus [`op::UserOp`] for closures.
pub mod op {
    pub use crate::coll::op::{Band, Bor, Bxor, Land, Loc, Lor, Lxor, Max, MaxLoc, Min, MinLoc, Op, Prod, Sum, UserOp};
}

/// Pinning helpers used by the launcher and benchmarks.
pub mod affinity {
    pub use crate::launch::affinity::{allowed_cpus, cpu_for, pin_current_thread};
}

/// Compiles and runs the README's example as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
