//! The NAS Parallel Benchmarks kernels EP, IS, CG, MG and FT, written for fastmp from the NPB
//! specification (NAS reports RNR-91-002, NAS-95-020), and verified against NPB's official
//! values for each class.
//!
//! Every kernel is an SPMD function of the world communicator, so one program runs on every
//! device: thread ranks on shm, processes on tcp.
//!
//! ```
//! use fastmp_npb::{Class, Kernel};
//! let outcomes = fastmp::run(2, |world| Kernel::Ep.run(&world, Class::S))?;
//! assert!(outcomes.iter().all(|o| o.verified()));
//! # Ok::<(), fastmp::Error>(())
//! ```

pub mod cg;
pub mod class;
pub mod ep;
pub mod ft;
pub mod is;
pub mod mg;
pub mod random;
pub mod report;

use std::fmt;
use std::str::FromStr;

use fastmp::{Comm, Error};

pub use class::Class;
pub use report::{Check, Outcome};

/// One of the five kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// Embarrassingly parallel: Gaussian pairs by the Marsaglia polar method.
    Ep,
    /// Integer sort: bucket sort of uniformly distributed keys.
    Is,
    /// Conjugate gradient: the smallest eigenvalue of a sparse symmetric matrix.
    Cg,
    /// Multigrid: V-cycles on a 3-D Poisson problem.
    Mg,
    /// 3-D FFT: a PDE solved spectrally.
    Ft,
}

impl Kernel {
    pub const ALL: [Kernel; 5] = [Kernel::Ep, Kernel::Is, Kernel::Cg, Kernel::Mg, Kernel::Ft];

    /// The kernel's lower-case name, as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Ep => "ep",
            Kernel::Is => "is",
            Kernel::Cg => "cg",
            Kernel::Mg => "mg",
            Kernel::Ft => "ft",
        }
    }

    /// Whether the kernel runs `class` on `np` ranks; the error says why not.
    pub fn check(self, class: Class, np: usize) -> Result<(), String> {
        if np == 0 {
            return Err("a job needs at least one rank".into());
        }
        match self {
            Kernel::Ep => ep::check(class, np),
            Kernel::Is => is::check(class, np),
            Kernel::Cg => cg::check(class, np),
            Kernel::Mg => mg::check(class, np),
            Kernel::Ft => ft::check(class, np),
        }
    }

    /// Runs the kernel on every rank of `world` (collective) and verifies its result. A class
    /// or rank count the kernel does not support is an [`Error::InvalidArgument`] on every
    /// rank, before any communication.
    pub fn run(self, world: &Comm, class: Class) -> fastmp::Result<Outcome> {
        self.check(class, world.size())
            .map_err(|why| Error::InvalidArgument(format!("{self} class {class}: {why}")))?;
        match self {
            Kernel::Ep => ep::run(world, class),
            Kernel::Is => is::run(world, class),
            Kernel::Cg => cg::run(world, class),
            Kernel::Mg => mg::run(world, class),
            Kernel::Ft => ft::run(world, class),
        }
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name().to_uppercase())
    }
}

impl FromStr for Kernel {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Kernel::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(text))
            .ok_or_else(|| format!("unknown NPB kernel {text:?}: one of ep, is, cg, mg, ft"))
    }
}

/// The check every kernel whose decomposition halves the problem shares: `np` a power of two.
pub(crate) fn power_of_two(np: usize) -> Result<(), String> {
    if np.is_power_of_two() { Ok(()) } else { Err(format!("needs a power-of-two number of ranks, got {np}")) }
}
