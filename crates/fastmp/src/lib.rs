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
//! ## Launchers, failures, abort
//! [`run`] starts `np` thread ranks, unless a launcher (`fastmprun`, `mpirun`, `srun`) started
//! this process: then it joins the launcher's job if `np` is the launcher's size and is an `Err`
//! otherwise. [`main`] always takes the job from the launcher, or runs `FASTMP_NP` thread ranks
//! (one per allowed CPU when unset). A failing rank (error, panic, [`Comm::abort`]) aborts the
//! job: peers' operations fail with [`Error::PeerFailed`] naming the rank that failed first, and
//! `run` returns [`Error::RankFailed`] (or [`Error::Aborted`]) for it. [`wtime`], [`wtick`] and
//! [`processor_name`] are MPI_Wtime, MPI_Wtick and MPI_Get_processor_name.
//!
//! ## Layers
//! [`Comm`] (typed point-to-point, [`Comm::scope`] for nonblocking requests, whose buffer
//! borrows the compiler checks: see [`Scope`]) sits on the narrow [`device::Device`] trait; the
//! `shm` and `tcp` devices implement it.
//!
//! ## Data
//! Slices of `Pod` types move as raw bytes (sends take any `bytemuck::NoUninit` type, so `bool`
//! and fieldless enums too); [`Comm::recv_checked`], [`Comm::recv_value`] and [`Comm::recv_vec`]
//! validate types with invalid bit patterns. Strided data (MPI derived datatypes) is described
//! by the layouts of [`layout`]; anything else moves as a serde object ([`Comm::send_obj`]).

mod attributes;
pub mod coll;
mod comm;
mod communicators;
mod completion;
pub mod device;
mod error;
mod future_pool;
mod graph;
mod group;
mod intercomm;
mod launch;
pub mod layout;
mod machine;
mod mprobe;
mod owned;
mod p2p;
pub mod pgas;
mod progress;
mod progress_agent;
mod raw;
mod scope;
mod sync;
mod threads;
mod topology;
mod trace;
mod values;
pub mod window;

pub use attributes::AttrKey;
pub use coll::NeighborTopology;
pub use comm::{Comm, Status};
pub use communicators::{Comparison, SplitType};
pub use completion::{Completable, test_some, testall, testany, wait_some, waitall, waitany};
pub use device::{ANY_SOURCE, ANY_TAG, Locality, PROC_NULL, Placement, Source, TAG_UB};
pub use error::{Error, Result};
pub use graph::GraphComm;
pub use group::{Group, GroupOrdering};
pub use intercomm::{InterComm, InterRoot, InterScope};
pub use launch::config::{Config, DEFAULT_EAGER_LIMIT, DEFAULT_TCP_EAGER_LIMIT, DeviceKind, Pin, SameNodeLink};
pub use launch::{init, main, processor_name, run, wtick, wtime};
pub use machine::{Core, MachineTopology, NumaNode, topology};
pub use mprobe::Message;
pub use owned::{OwnedRequest, PersistentRequest, startall};
pub use scope::{RecvRequest, Request, Scope};
pub use threads::{ThreadComm, ThreadLevel};
pub use topology::{CartComm, dims_create};
pub use trace::{TRACE_VAR, merge_trace_files, rank_file as trace_rank_file};
pub use window::Window;

/// The `bytemuck` fastmp builds on, so element types can derive its traits without a
/// dependency of their own. The derive macros name `::bytemuck` unless told otherwise, so say
/// where the crate is:
///
/// ```
/// use fastmp::bytemuck::{Pod, Zeroable};
///
/// // A struct with padding is not `Pod`: make the padding an explicit field.
/// #[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
/// #[bytemuck(crate = "fastmp::bytemuck")]
/// #[repr(C)]
/// struct Particle {
///     id: u32,
///     _pad: u32,
///     pos: [f64; 3],
/// }
///
/// // A fieldless enum can be sent (`NoUninit`) and received with validation (`CheckedBitPattern`).
/// #[derive(Clone, Copy, Debug, PartialEq, fastmp::bytemuck::NoUninit, fastmp::bytemuck::CheckedBitPattern)]
/// #[bytemuck(crate = "fastmp::bytemuck")]
/// #[repr(u8)]
/// enum Phase { Start = 1, Stop = 2 }
///
/// fastmp::run(2, |world| {
///     let p = Particle { id: 7, _pad: 0, pos: [1.0, 2.0, 3.0] };
///     if world.rank() == 0 {
///         world.send(&[p], 1, 0)?;
///         world.send_value(&Phase::Stop, 1, 1)?;
///     } else {
///         let mut got = [Particle::zeroed()];
///         world.recv(&mut got, 0, 0)?;
///         assert_eq!(got[0], p);
///         assert_eq!(world.recv_value::<Phase>(0, 1)?.0, Phase::Stop);
///     }
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
///
/// Nested structs work the same way when every field is `Pod`; for anything else (pointers,
/// `String`, `Vec`), use serde and [`Comm::send_obj`].
pub use bytemuck;

/// The `serde` fastmp's object messages use. Its derives need `#[serde(crate = "fastmp::serde")]`
/// when serde is reached through this re-export:
///
/// ```
/// #[derive(fastmp::serde::Serialize, fastmp::serde::Deserialize, Debug, PartialEq)]
/// #[serde(crate = "fastmp::serde")]
/// struct Job { name: String, steps: Vec<u32> }
///
/// fastmp::run(2, |world| {
///     if world.rank() == 0 {
///         world.send_obj(&Job { name: "relax".into(), steps: vec![1, 2] }, 1, 0)?;
///     } else {
///         let (job, _) = world.recv_obj::<Job>(0, 0)?;
///         assert_eq!(job.steps, [1, 2]);
///     }
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub use serde;

/// Reduction operations for `reduce`, `allreduce`, `scan`, ...: MPI's predefined ops as unit
/// structs, plus [`op::UserOp`] for closures.
pub mod op {
    #[doc(hidden)]
    pub use crate::coll::op::Predefined;
    pub use crate::coll::op::{Band, Bor, Bxor, Land, Loc, Lor, Lxor, Max, MaxLoc, Min, MinLoc, Op, Prod, Sum, UserOp};
    pub use crate::window::{NoOp, Replace};
}

/// Testing aid: what this thread (a shm rank) handed to the progress agent.
#[doc(hidden)]
pub use progress_agent::{AgentCounts, agent_counts};

/// Pinning helpers used by the launcher and benchmarks.
pub mod affinity {
    pub use crate::launch::affinity::{
        allowed_cpus, cpu_for, cpu_for_in, numa_node_of_current_thread, pin_current_thread,
    };
}

/// Compiles and runs the README's example as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// Compiles and runs the examples of the MPI → fastmp table (docs/MPI_TO_FASTMP.md).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/MPI_TO_FASTMP.md")]
pub struct MpiToFastmpDoctests;
