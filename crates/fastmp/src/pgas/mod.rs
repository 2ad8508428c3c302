//! PGAS collectives (seed 004, the PGASCol library): UPC's shared arrays with one block per rank
//! and the eight UPC collectives on them (`upc_all_broadcast`, `scatter`, `gather`, `gather_all`,
//! `exchange`, `permute`, `reduce`, `prefix_reduce`), with UPC's synchronisation modes.
//!
//! Built on one-sided windows: a [`SharedArray`] is a window whose parts are the blocks, kept
//! in a passive access epoch for its whole life. Data moves as one-sided copies between blocks
//! (a direct copy between the two blocks where the device can address both, as thread ranks of
//! one process can; a get or put otherwise), and ranks synchronise point to point with the
//! thesis's `post`/`wait` semaphores (zero-byte messages on the array's own communicator, so a
//! failed rank fails its peers' waits instead of hanging them).
//!
//! # Synchronisation modes
//! Every collective takes a [`Sync`]: one `IN_*` and one `OUT_*` flag (UPC's `UPC_IN_ALLSYNC |
//! UPC_OUT_ALLSYNC` and friends; [`Sync::default`] is ALLSYNC on both sides, as UPC's 0).
//! - `IN_ALLSYNC`: no rank touches another's data before every rank has entered.
//! - `IN_MYSYNC`: a rank touches only the data of ranks that have entered the call.
//! - `IN_NOSYNC`: the caller promises every rank's data is ready (a previous synchronisation said
//!   so); ranks may touch each other's blocks at once.
//! - `OUT_ALLSYNC`: no rank returns before every rank has finished touching data.
//! - `OUT_MYSYNC`: a rank returns once no rank will touch its own blocks again in this call.
//! - `OUT_NOSYNC`: a rank returns once its own transfers are complete; others may still be
//!   reading or writing its blocks, so it synchronises (e.g. [`SharedArray::barrier`]) before
//!   touching the arrays again.
//!
//! ```
//! use fastmp::pgas::{self, Sync};
//! fastmp::run(4, |world| {
//!     let src = world.shared_array::<u32>(2)?;
//!     let dst = world.shared_array::<u32>(2)?;
//!     if world.rank() == 1 {
//!         src.local()?.copy_from_slice(&[7, 8]);
//!     }
//!     pgas::broadcast(&dst, &src, 1, 2, Sync::default())?;
//!     assert_eq!(*dst.local()?, [7, 8]);
//!     Ok(())
//! })?;
//! # Ok::<(), fastmp::Error>(())
//! ```

mod array;
pub mod select;
mod team;
mod transfer;
mod tree;

mod broadcast;
mod exchange;
mod reduce;
mod scatter_gather;

use crate::error::{Error, Result};

pub use array::SharedArray;
pub use broadcast::broadcast;
pub use exchange::{exchange, permute};
pub use reduce::{prefix_reduce, reduce};
pub use scatter_gather::{gather, gather_all, scatter};
pub use select::{Algorithm, Collective, Pipeline, Shape, Transfer, Tuning};

/// How a collective synchronises on entry and exit (UPC's `upc_flag_t`): one `IN_*` flag and one
/// `OUT_*` flag combined with `|`. A missing side means ALLSYNC, as in UPC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Sync(u8);

/// The entry half of a [`Sync`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InSync {
    /// Nobody touches another rank's data before every rank has entered.
    All,
    /// A rank touches only the data of ranks that have entered.
    My,
    /// Every rank's data is ready when the first rank enters.
    No,
}

/// The exit half of a [`Sync`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutSync {
    /// Nobody returns before every rank has finished.
    All,
    /// A rank returns once nobody will touch its blocks again in this call.
    My,
    /// A rank returns once its own transfers are complete.
    No,
}

impl Sync {
    /// UPC_IN_ALLSYNC.
    pub const IN_ALLSYNC: Sync = Sync(1);
    /// UPC_IN_MYSYNC.
    pub const IN_MYSYNC: Sync = Sync(2);
    /// UPC_IN_NOSYNC.
    pub const IN_NOSYNC: Sync = Sync(4);
    /// UPC_OUT_ALLSYNC.
    pub const OUT_ALLSYNC: Sync = Sync(8);
    /// UPC_OUT_MYSYNC.
    pub const OUT_MYSYNC: Sync = Sync(16);
    /// UPC_OUT_NOSYNC.
    pub const OUT_NOSYNC: Sync = Sync(32);
    /// ALLSYNC on both sides (UPC's 0).
    pub const ALL: Sync = Sync(1 | 8);
    /// MYSYNC on both sides.
    pub const MY: Sync = Sync(2 | 16);
    /// NOSYNC on both sides.
    pub const NO: Sync = Sync(4 | 32);

    /// Every valid combination, entry side first (for tests and benchmarks).
    pub const EVERY: [Sync; 9] = [
        Sync(1 | 8),
        Sync(1 | 16),
        Sync(1 | 32),
        Sync(2 | 8),
        Sync(2 | 16),
        Sync(2 | 32),
        Sync(4 | 8),
        Sync(4 | 16),
        Sync(4 | 32),
    ];

    /// The entry mode; `Err` when several `IN_*` flags are set.
    pub fn input(self) -> Result<InSync> {
        match self.0 & 7 {
            0 | 1 => Ok(InSync::All),
            2 => Ok(InSync::My),
            4 => Ok(InSync::No),
            _ => Err(Error::InvalidArgument(format!("pgas sync mode {self}: more than one IN_* flag"))),
        }
    }

    /// The exit mode; `Err` when several `OUT_*` flags are set.
    pub fn output(self) -> Result<OutSync> {
        match self.0 & 56 {
            0 | 8 => Ok(OutSync::All),
            16 => Ok(OutSync::My),
            32 => Ok(OutSync::No),
            _ => Err(Error::InvalidArgument(format!("pgas sync mode {self}: more than one OUT_* flag"))),
        }
    }

    /// Both halves, validated.
    pub fn modes(self) -> Result<(InSync, OutSync)> {
        Ok((self.input()?, self.output()?))
    }

    /// Parses UOMS's `-sync_mode` spelling: comma- or `|`-separated flag names such as
    /// `in_allsync,out_nosync` (case-insensitive, an optional `upc_` prefix).
    pub fn from_names(text: &str) -> Result<Sync> {
        let mut sync = Sync(0);
        for name in text.split([',', '|']).map(str::trim).filter(|s| !s.is_empty()) {
            let lower = name.to_ascii_lowercase();
            let flag = match lower.strip_prefix("upc_").unwrap_or(&lower) {
                "in_allsync" => Sync::IN_ALLSYNC,
                "in_mysync" => Sync::IN_MYSYNC,
                "in_nosync" => Sync::IN_NOSYNC,
                "out_allsync" => Sync::OUT_ALLSYNC,
                "out_mysync" => Sync::OUT_MYSYNC,
                "out_nosync" => Sync::OUT_NOSYNC,
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "unknown sync flag {name:?} (expected in_allsync, in_mysync, in_nosync, out_allsync, \
                         out_mysync or out_nosync)"
                    )));
                }
            };
            sync = sync | flag;
        }
        sync.modes()?;
        Ok(sync)
    }
}

impl std::ops::BitOr for Sync {
    type Output = Sync;
    fn bitor(self, rhs: Sync) -> Sync {
        Sync(self.0 | rhs.0)
    }
}

impl std::fmt::Display for Sync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = ["in_allsync", "in_mysync", "in_nosync", "out_allsync", "out_mysync", "out_nosync"];
        let set: Vec<&str> =
            names.iter().enumerate().filter(|(i, _)| self.0 & (1 << i) != 0).map(|(_, n)| *n).collect();
        if set.is_empty() { f.write_str("in_allsync,out_allsync") } else { f.write_str(&set.join(",")) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_flags_parse_print_and_validate() {
        assert_eq!(Sync::default().modes().unwrap(), (InSync::All, OutSync::All));
        assert_eq!((Sync::IN_MYSYNC | Sync::OUT_NOSYNC).modes().unwrap(), (InSync::My, OutSync::No));
        assert!((Sync::IN_MYSYNC | Sync::IN_NOSYNC).input().is_err());
        assert!((Sync::OUT_MYSYNC | Sync::OUT_ALLSYNC).output().is_err());
        for sync in Sync::EVERY {
            assert_eq!(Sync::from_names(&sync.to_string()).unwrap(), sync);
        }
        assert_eq!(Sync::from_names("UPC_IN_NOSYNC|upc_out_mysync").unwrap(), Sync::IN_NOSYNC | Sync::OUT_MYSYNC);
        assert!(Sync::from_names("in_sometimes").is_err());
    }
}
