//! Run-time algorithm selection: per collective, rules on (process count, message size) pick an
//! algorithm. Each device has its own defaults (`default_tuning_shm.json`,
//! `default_tuning_tcp.json`, measured with `fastmp-bench tune` on that device;
//! `default_tuning_hybrid.json`, composed from those two plus `hierarchical` across processes;
//! `default_tuning_mpi.json`, the MPI library's own collectives throughout); a tuning file
//! and `FASTMP_<COLLECTIVE>_ALGORITHM` variables override them at init. A rule whose algorithm
//! cannot run (no native support on the device, a commutative-only algorithm with a
//! non-commutative operation, or the choice a composite excludes) is skipped, so the next rule
//! that applies decides.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::launch::config::DeviceKind;

/// The collective operations that have selectable algorithms. `ReduceScatter` also covers
/// `reduce_scatter_block`, and `Scan` covers `exscan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Collective {
    Barrier,
    Bcast,
    Scatter,
    Scatterv,
    Gather,
    Gatherv,
    Allgather,
    Allgatherv,
    Alltoall,
    Alltoallv,
    Reduce,
    Allreduce,
    ReduceScatter,
    Scan,
}

/// A collective algorithm, named as in the FastMPJ thesis (Table 4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// Flat tree over blocking point-to-point.
    Bft,
    /// Flat tree over nonblocking point-to-point.
    Nbft,
    /// Alltoall: nonblocking receives, blocking sends.
    Nb1ft,
    /// Alltoall: nonblocking sends, blocking receives.
    Nb2ft,
    /// Four-ary tree (FaT).
    Fat,
    /// Minimum spanning tree (recursive interval halving).
    Mst,
    /// Binomial tree.
    Bt,
    /// Recursive doubling (BDE); handles any process count.
    Bde,
    /// Ring / bucket (BKT).
    Bkt,
    /// Bcast as scatter + allgather.
    ScatterAllgather,
    /// Gather to the root, then bcast.
    GatherBcast,
    /// Reduce to the root, then bcast.
    ReduceBcast,
    /// Allreduce as reduce_scatter + allgather (Rabenseifner).
    Rabenseifner,
    /// Allreduce as a ring reduce-scatter + ring allgather whose blocks travel as several
    /// segments, pipelined: a segment moves on as soon as it arrived (and was folded in).
    RingSegmented,
    /// Reduce-scatter as reduce + scatterv.
    ReduceScatter,
    /// Scan along the ranks one after another.
    Linear,
    /// The device's own collectives: shared-memory copies on the shm device, the MPI library's
    /// collectives on the mpi device.
    Native,
    /// Two levels: the members inside each process (the device's native collectives there),
    /// and one leader per process over the network, pipelined in chunks; inside a process
    /// whose members span several NUMA nodes, bcasts and reduces go NUMA-local first. Only for
    /// communicators spanning several processes with several members in some process.
    Hierarchical,
}

/// Where a communicator's members run, as a selection rule's optional `"locality"` field
/// names it: a rule with one applies only to communicators of that locality.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommLocality {
    /// Every member is a thread of one process.
    Process,
    /// Several processes, all on one node.
    Node,
    /// Several nodes.
    Network,
}

/// Whether each thread rank of a process has a CPU of its own, as a selection rule's optional
/// `"cores"` field names it. The best algorithms differ: ranks that share cores wait for
/// descheduled peers, so message-based trees win there, while ranks with cores of their own
/// spin on shared flags, where the `native` algorithms win (measured on 2 and 16 cores).
/// The job decides it once when it starts (see [`Tuning::with_cores`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cores {
    /// The process may run on at least as many CPUs as it holds thread ranks.
    Dedicated,
    /// More thread ranks than CPUs: ranks take turns on the cores (oversubscribed).
    Shared,
}

impl Cores {
    /// The fact for a process that may run on `cpus` CPUs and whose ranks compete with
    /// `competing` ranks for them.
    pub fn for_ranks(competing: usize, cpus: usize) -> Cores {
        if competing <= cpus { Cores::Dedicated } else { Cores::Shared }
    }
}

impl CommLocality {
    /// The locality of a communicator whose members are the world ranks `members`.
    pub(crate) fn of(placement: &crate::Placement, members: &[usize]) -> CommLocality {
        let Some(&first) = members.first() else { return CommLocality::Process };
        let (process, node) = (placement.process_of(first), placement.node_of(first));
        if members.iter().any(|&m| placement.node_of(m) != node) {
            CommLocality::Network
        } else if members.iter().any(|&m| placement.process_of(m) != process) {
            CommLocality::Node
        } else {
            CommLocality::Process
        }
    }
}

impl Collective {
    /// Every collective, in declaration order.
    pub const ALL: [Collective; 14] = [
        Collective::Barrier,
        Collective::Bcast,
        Collective::Scatter,
        Collective::Scatterv,
        Collective::Gather,
        Collective::Gatherv,
        Collective::Allgather,
        Collective::Allgatherv,
        Collective::Alltoall,
        Collective::Alltoallv,
        Collective::Reduce,
        Collective::Allreduce,
        Collective::ReduceScatter,
        Collective::Scan,
    ];

    /// Lower-case name, as in environment variables (upper-cased) and tuning files.
    pub fn name(self) -> &'static str {
        match self {
            Collective::Barrier => "barrier",
            Collective::Bcast => "bcast",
            Collective::Scatter => "scatter",
            Collective::Scatterv => "scatterv",
            Collective::Gather => "gather",
            Collective::Gatherv => "gatherv",
            Collective::Allgather => "allgather",
            Collective::Allgatherv => "allgatherv",
            Collective::Alltoall => "alltoall",
            Collective::Alltoallv => "alltoallv",
            Collective::Reduce => "reduce",
            Collective::Allreduce => "allreduce",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Scan => "scan",
        }
    }

    /// Parses [`Collective::name`].
    pub fn from_name(name: &str) -> Result<Collective> {
        Collective::ALL
            .into_iter()
            .find(|c| c.name() == name)
            .ok_or_else(|| Error::InvalidArgument(format!("unknown collective {name:?}")))
    }

    /// The algorithms implemented for this collective.
    pub fn algorithms(self) -> &'static [Algorithm] {
        use Algorithm::*;
        match self {
            Collective::Barrier => &[GatherBcast, Bt, Bde, Native, Hierarchical],
            Collective::Bcast => &[Bft, Nbft, Fat, Mst, Bt, ScatterAllgather, Native, Hierarchical],
            Collective::Scatter => &[Bft, Nbft, Mst, Native, Hierarchical],
            Collective::Gather => &[Bft, Nbft, Mst, Native, Hierarchical],
            Collective::Scatterv | Collective::Gatherv => &[Bft, Nbft, Mst, Native, Hierarchical],
            Collective::Allgather => &[Nbft, Bt, Bde, Bkt, GatherBcast, Native, Hierarchical],
            Collective::Allgatherv => &[Nbft, Bt, Bde, Bkt, GatherBcast, Native, Hierarchical],
            Collective::Alltoall => &[Bft, Nbft, Nb1ft, Nb2ft, Native, Hierarchical],
            Collective::Alltoallv => &[Bft, Nbft, Nb1ft, Nb2ft, Native, Hierarchical],
            Collective::Reduce => &[Bft, Nbft, Mst, Native, Hierarchical],
            Collective::Allreduce => {
                &[Nbft, Bt, Bde, Bkt, ReduceBcast, Rabenseifner, RingSegmented, Native, Hierarchical]
            }
            Collective::ReduceScatter => &[Bde, Bkt, ReduceScatter, Native, Hierarchical],
            Collective::Scan => &[Nbft, Linear, Bde, Native, Hierarchical],
        }
    }

    /// A scalable, message-based algorithm that works for every operation and is no composite's
    /// excluded choice: used when no rule that applies names an algorithm that can run (see
    /// [`Tuning::select_usable`]), and by `fastmp-bench tune` beyond the largest process count
    /// it measured.
    pub fn fallback(self) -> Algorithm {
        match self {
            Collective::Barrier => Algorithm::Bde,
            Collective::Bcast | Collective::Scatter | Collective::Gather | Collective::Reduce => Algorithm::Mst,
            Collective::Scatterv | Collective::Gatherv | Collective::Alltoall | Collective::Alltoallv => {
                Algorithm::Nbft
            }
            Collective::Allgather | Collective::Allgatherv => Algorithm::Bkt,
            Collective::Allreduce | Collective::Scan => Algorithm::Bde,
            Collective::ReduceScatter => Algorithm::ReduceScatter,
        }
    }

    /// Whether `algorithm` combines partial results out of rank order, so it may only be used
    /// with commutative operations.
    pub(crate) fn needs_commutative(self, algorithm: Algorithm) -> bool {
        matches!(
            (self, algorithm),
            (Collective::Allreduce, Algorithm::Bkt | Algorithm::Rabenseifner | Algorithm::RingSegmented)
                | (Collective::ReduceScatter, Algorithm::Bde | Algorithm::Bkt)
        )
    }
}

impl Collective {
    /// The error of an algorithm module asked for an algorithm this collective does not have
    /// (unreachable through a validated `Tuning`, but never a panic).
    pub(crate) fn unsupported(self, algorithm: Algorithm) -> Error {
        Error::InvalidArgument(format!("{self} has no algorithm {algorithm}"))
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Algorithm {
    /// Lower-case name, as accepted by [`Algorithm::from_name`].
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Bft => "bft",
            Algorithm::Nbft => "nbft",
            Algorithm::Nb1ft => "nb1ft",
            Algorithm::Nb2ft => "nb2ft",
            Algorithm::Fat => "fat",
            Algorithm::Mst => "mst",
            Algorithm::Bt => "bt",
            Algorithm::Bde => "bde",
            Algorithm::Bkt => "bkt",
            Algorithm::ScatterAllgather => "scatter_allgather",
            Algorithm::GatherBcast => "gather_bcast",
            Algorithm::ReduceBcast => "reduce_bcast",
            Algorithm::Rabenseifner => "rabenseifner",
            Algorithm::RingSegmented => "ring_segmented",
            Algorithm::ReduceScatter => "reduce_scatter",
            Algorithm::Linear => "linear",
            Algorithm::Native => "native",
            Algorithm::Hierarchical => "hierarchical",
        }
    }

    /// Parses a name (case-insensitive); the thesis' long names are accepted too.
    pub fn from_name(name: &str) -> Result<Algorithm> {
        const ALL: [Algorithm; 18] = [
            Algorithm::Bft,
            Algorithm::Nbft,
            Algorithm::Nb1ft,
            Algorithm::Nb2ft,
            Algorithm::Fat,
            Algorithm::Mst,
            Algorithm::Bt,
            Algorithm::Bde,
            Algorithm::Bkt,
            Algorithm::ScatterAllgather,
            Algorithm::GatherBcast,
            Algorithm::ReduceBcast,
            Algorithm::Rabenseifner,
            Algorithm::RingSegmented,
            Algorithm::ReduceScatter,
            Algorithm::Linear,
            Algorithm::Native,
            Algorithm::Hierarchical,
        ];
        let lower = name.trim().to_ascii_lowercase().replace(['-', '+'], "_");
        let canonical = match lower.as_str() {
            "kary" | "four_ary" | "4ary" => "fat",
            "binomial" => "bt",
            "recursive_doubling" => "bde",
            "ring" | "bucket" => "bkt",
            "segmented_ring" | "pipelined_ring" => "ring_segmented",
            "flat" => "bft",
            "hier" | "hierarchy" | "two_level" => "hierarchical",
            other => other,
        };
        ALL.into_iter()
            .find(|a| a.name() == canonical)
            .ok_or_else(|| Error::InvalidArgument(format!("unknown collective algorithm {name:?}")))
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One selection rule: used when the process count is at most `max_np`, the message size
/// (bytes per rank, see the collective's docs) at most `max_bytes`, the communicator's
/// members are spread as `locality` says, and its ranks have CPUs as `cores` says. `None`
/// means unbounded (any locality, any cores). A rule that names `cores` applies only to
/// communicators inside one process (locality `process`), whose members all share the fact;
/// the ranks of several processes could disagree about it, and every rank must pick alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_np: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locality: Option<CommLocality>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<Cores>,
    pub algorithm: Algorithm,
}

impl Rule {
    /// A rule that always applies.
    pub fn always(algorithm: Algorithm) -> Rule {
        Rule { max_np: None, max_bytes: None, locality: None, cores: None, algorithm }
    }

    /// Whether the rule has no limits at all (a collective's last rule must have none).
    fn is_unbounded(&self) -> bool {
        self.max_np.is_none() && self.max_bytes.is_none() && self.locality.is_none() && self.cores.is_none()
    }

    #[inline]
    fn applies(&self, np: usize, bytes: usize, locality: CommLocality, cores: Option<Cores>) -> bool {
        self.max_np.is_none_or(|m| np <= m)
            && self.max_bytes.is_none_or(|m| bytes <= m)
            && self.locality.is_none_or(|l| l == locality)
            && self.cores.is_none_or(|c| locality == CommLocality::Process && cores == Some(c))
    }
}

/// The algorithm-selection table of a communicator: for each collective, rules tried in order
/// (the first that applies wins; the last should be unbounded).
///
/// Tuning files are JSON maps from collective name to rules, for example
/// `{"bcast": [{"max_bytes": 8192, "algorithm": "bt"}, {"algorithm": "native"}]}`, plus an
/// optional `"kary_arity"` (children per node of the `fat` tree, 4 by default) and
/// `"hierarchical_chunk"` (bytes per chunk of the `hierarchical` pipeline, 64 KiB by default;
/// the hybrid device's table sets 1 MiB, measured on 2 cores);
/// collectives not named keep their defaults. A rule may name a `"locality"` (`"process"`,
/// `"node"`, `"network"`: see [`CommLocality`]) to apply only to communicators spread so.
///
/// ```
/// use fastmp::coll::{Algorithm, Collective, Tuning};
/// let tuning = Tuning::defaults().force(Collective::Bcast, Algorithm::Mst)?;
/// assert_eq!(tuning.select(Collective::Bcast, 8, 1 << 20), Algorithm::Mst);
/// fastmp::run(3, |world| {
///     let world = world.with_tuning(tuning.clone());
///     let mut data = [world.rank() as u8; 5];
///     world.bcast(&mut data, 1)?;
///     assert_eq!(data, [1; 5]);
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tuning {
    rules: [Vec<Rule>; Collective::ALL.len()],
    /// Children per node of the k-ary tree (`fat`): four by default, as in the thesis.
    kary_arity: usize,
    /// Bytes per chunk of the `hierarchical` algorithms' pipeline between the levels.
    hierarchical_chunk: usize,
    /// Whether the job's thread ranks have CPUs of their own; `None` (a table not yet given to
    /// a job) leaves out the rules that name `cores`.
    cores: Option<Cores>,
}

/// Tuning-file key (and `FASTMP_KARY_ARITY`) for the arity of the k-ary tree.
const KARY_ARITY_KEY: &str = "kary_arity";

/// Tuning-file key (and `FASTMP_HIERARCHICAL_CHUNK`) for the chunk size of the `hierarchical`
/// algorithms' pipeline.
const HIERARCHICAL_CHUNK_KEY: &str = "hierarchical_chunk";

/// Default chunk of the hierarchical pipeline: large enough that a chunk's per-message costs
/// are small beside its transfer, small enough that a 1 MiB bcast has 16 chunks to overlap.
const DEFAULT_HIERARCHICAL_CHUNK: usize = 64 << 10;

/// Tuning-file key of free text saying how the table was made; ignored when loading.
const COMMENT_KEY: &str = "comment";

/// Measured defaults of the shm device, produced by `fastmp-bench tune` (thread ranks).
const SHM_DEFAULTS: &str = include_str!("default_tuning_shm.json");

/// Measured defaults of the tcp device (see its `comment` for how they were measured).
const TCP_DEFAULTS: &str = include_str!("default_tuning_tcp.json");

/// Defaults of the hybrid device: shm's rules inside a process, `hierarchical` across
/// processes, tcp's for the leaders (see its `comment`).
const HYBRID_DEFAULTS: &str = include_str!("default_tuning_hybrid.json");

/// Defaults of the mpi device: every collective is the MPI library's (`native`).
#[cfg(feature = "mpi")]
const MPI_DEFAULTS: &str = include_str!("default_tuning_mpi.json");

/// Environment variable naming a tuning file to load at init.
pub const TUNING_FILE_VAR: &str = "FASTMP_TUNING_FILE";

impl Tuning {
    /// The built-in rules of the shm device ([`Tuning::defaults_for`] gives any device's).
    pub fn defaults() -> Tuning {
        Tuning::defaults_for(DeviceKind::Shm)
    }

    /// The built-in rules measured on `device`; a job starts with its device's (overlaid with
    /// the environment's, see [`Tuning::from_env_for`]).
    pub fn defaults_for(device: DeviceKind) -> Tuning {
        // Parsed once per process: every job starts from its device's table.
        static PARSED: [OnceLock<Tuning>; 4] = [const { OnceLock::new() }; 4];
        let (text, slot) = match device {
            DeviceKind::Shm => (SHM_DEFAULTS, 0),
            DeviceKind::Tcp => (TCP_DEFAULTS, 1),
            #[cfg(feature = "mpi")]
            DeviceKind::Mpi => (MPI_DEFAULTS, 2),
            DeviceKind::Hybrid => (HYBRID_DEFAULTS, 3),
        };
        PARSED[slot]
            .get_or_init(|| {
                let empty = Tuning {
                    rules: Collective::ALL.map(|c| vec![Rule::always(c.fallback())]),
                    kary_arity: 4,
                    hierarchical_chunk: DEFAULT_HIERARCHICAL_CHUNK,
                    cores: None,
                };
                empty.with_json(text).expect("built-in default tuning files are valid")
            })
            .clone()
    }

    /// [`Tuning::from_env_for`] the shm device.
    pub fn from_env() -> Result<Tuning> {
        Tuning::from_env_for(DeviceKind::Shm)
    }

    /// `device`'s defaults, overlaid with the file named by `FASTMP_TUNING_FILE` and then with
    /// `FASTMP_KARY_ARITY` and any `FASTMP_<COLLECTIVE>_ALGORITHM=<name>` variables (for
    /// example `FASTMP_BCAST_ALGORITHM=mst`). This is the table a job on `device` starts with
    /// unless `Config::tuning` gives one.
    pub fn from_env_for(device: DeviceKind) -> Result<Tuning> {
        let mut tuning = Tuning::defaults_for(device);
        if let Some(path) = std::env::var_os(TUNING_FILE_VAR) {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| Error::InvalidArgument(format!("{TUNING_FILE_VAR}={}: {e}", path.to_string_lossy())))?;
            tuning = tuning
                .with_json(&text)
                .map_err(|e| Error::InvalidArgument(format!("{TUNING_FILE_VAR}={}: {e}", path.to_string_lossy())))?;
        }
        if let Ok(value) = std::env::var("FASTMP_KARY_ARITY") {
            let arity =
                value.trim().parse().map_err(|e| Error::InvalidArgument(format!("FASTMP_KARY_ARITY={value}: {e}")))?;
            tuning = tuning.with_kary_arity(arity)?;
        }
        if let Ok(value) = std::env::var("FASTMP_HIERARCHICAL_CHUNK") {
            let bytes = value
                .trim()
                .parse()
                .map_err(|e| Error::InvalidArgument(format!("FASTMP_HIERARCHICAL_CHUNK={value}: {e}")))?;
            tuning = tuning.with_hierarchical_chunk(bytes)?;
        }
        for coll in Collective::ALL {
            let var = format!("FASTMP_{}_ALGORITHM", coll.name().to_ascii_uppercase());
            if let Ok(name) = std::env::var(&var) {
                let algorithm =
                    Algorithm::from_name(&name).map_err(|e| Error::InvalidArgument(format!("{var}: {e}")))?;
                tuning = tuning.force(coll, algorithm).map_err(|e| Error::InvalidArgument(format!("{var}: {e}")))?;
            }
        }
        Ok(tuning)
    }

    /// The shm defaults overlaid with a JSON tuning file's contents.
    pub fn from_json(text: &str) -> Result<Tuning> {
        Tuning::defaults().with_json(text)
    }

    /// This table overlaid with a JSON tuning file's contents: the collectives it names get its
    /// rules, the others keep theirs (for example `Tuning::defaults_for(DeviceKind::Tcp)`'s).
    pub fn with_json(mut self, text: &str) -> Result<Tuning> {
        let bad = |e: serde_json::Error| Error::InvalidArgument(format!("tuning file: {e}"));
        let parsed: BTreeMap<String, serde_json::Value> = serde_json::from_str(text).map_err(bad)?;
        for (name, value) in parsed {
            if name == KARY_ARITY_KEY {
                self = self.with_kary_arity(serde_json::from_value(value).map_err(bad)?)?;
            } else if name == HIERARCHICAL_CHUNK_KEY {
                self = self.with_hierarchical_chunk(serde_json::from_value(value).map_err(bad)?)?;
            } else if name != COMMENT_KEY {
                self.set_rules(Collective::from_name(&name)?, serde_json::from_value(value).map_err(bad)?)?;
            }
        }
        Ok(self)
    }

    /// The table as a JSON tuning file.
    pub fn to_json(&self) -> String {
        let mut map: BTreeMap<&str, serde_json::Value> = Collective::ALL
            .iter()
            .map(|c| (c.name(), serde_json::to_value(self.rules(*c)).expect("rules serialize")))
            .collect();
        map.insert(KARY_ARITY_KEY, self.kary_arity.into());
        map.insert(HIERARCHICAL_CHUNK_KEY, self.hierarchical_chunk.into());
        serde_json::to_string_pretty(&map).expect("rules serialize")
    }

    /// Uses `arity` children per node in the k-ary tree (`fat`); at least 1.
    pub fn with_kary_arity(self, arity: usize) -> Result<Tuning> {
        if arity == 0 {
            return Err(Error::InvalidArgument("the k-ary tree needs an arity of at least 1".into()));
        }
        Ok(Tuning { kary_arity: arity, ..self })
    }

    /// Children per node of the k-ary tree (`fat`).
    pub fn kary_arity(&self) -> usize {
        self.kary_arity
    }

    /// Uses chunks of `bytes` (at least 1) in the `hierarchical` algorithms' pipeline between
    /// the levels (64 KiB by default).
    pub fn with_hierarchical_chunk(self, bytes: usize) -> Result<Tuning> {
        if bytes == 0 {
            return Err(Error::InvalidArgument("the hierarchical chunk needs at least 1 byte".into()));
        }
        Ok(Tuning { hierarchical_chunk: bytes, ..self })
    }

    /// Bytes per chunk of the `hierarchical` algorithms' pipeline.
    pub fn hierarchical_chunk(&self) -> usize {
        self.hierarchical_chunk
    }

    /// Applies the rules that name `cores` as this fact says (a job sets it when it starts,
    /// unless the table given to it already has one).
    ///
    /// ```
    /// use fastmp::coll::{Algorithm, Collective, Cores, Tuning};
    /// let rules = r#"{"allreduce": [{"cores": "dedicated", "algorithm": "native"}, {"algorithm": "bde"}]}"#;
    /// let tuning = Tuning::from_json(rules)?;
    /// assert_eq!(tuning.select(Collective::Allreduce, 8, 8), Algorithm::Bde, "no fact: the rule is left out");
    /// let dedicated = tuning.clone().with_cores(Cores::Dedicated);
    /// assert_eq!(dedicated.select(Collective::Allreduce, 8, 8), Algorithm::Native);
    /// assert_eq!(tuning.with_cores(Cores::Shared).select(Collective::Allreduce, 8, 8), Algorithm::Bde);
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn with_cores(self, cores: Cores) -> Tuning {
        Tuning { cores: Some(cores), ..self }
    }

    /// The job's fact about its cores, if it has been given one.
    pub fn cores(&self) -> Option<Cores> {
        self.cores
    }

    /// Uses `algorithm` for every call of `coll`.
    pub fn force(self, coll: Collective, algorithm: Algorithm) -> Result<Tuning> {
        let mut tuning = self;
        tuning.set_rules(coll, vec![Rule::always(algorithm)])?;
        Ok(tuning)
    }

    /// Replaces the rules of `coll`. Every algorithm must be implemented for `coll`, and the last
    /// rule must be unbounded so that every call has an algorithm.
    pub fn set_rules(&mut self, coll: Collective, rules: Vec<Rule>) -> Result<()> {
        if let Some(bad) = rules.iter().find(|r| !coll.algorithms().contains(&r.algorithm)) {
            return Err(Error::InvalidArgument(format!(
                "{} has no algorithm {:?} (it has {})",
                coll,
                bad.algorithm.name(),
                coll.algorithms().iter().map(|a| a.name()).collect::<Vec<_>>().join(", ")
            )));
        }
        match rules.last() {
            Some(last) if last.is_unbounded() => {}
            _ => return Err(Error::InvalidArgument(format!("the last {coll} rule must have no limits"))),
        }
        self.rules[coll as usize] = rules;
        Ok(())
    }

    /// The rules of `coll`, in the order they are tried.
    #[inline]
    pub fn rules(&self, coll: Collective) -> &Vec<Rule> {
        &self.rules[coll as usize]
    }

    /// The algorithm the rules give for `np` processes and `bytes` per rank on a communicator
    /// inside one process, whether or not it can run. Allocation-free.
    pub fn select(&self, coll: Collective, np: usize, bytes: usize) -> Algorithm {
        self.select_where(coll, np, bytes, CommLocality::Process)
    }

    /// [`Tuning::select`] for a communicator of `locality`.
    pub fn select_where(&self, coll: Collective, np: usize, bytes: usize, locality: CommLocality) -> Algorithm {
        self.select_usable(coll, np, bytes, locality, |_| true)
    }

    /// The algorithm of the first rule that applies to `np` processes, `bytes` per rank and a
    /// communicator of `locality`, and names an algorithm `usable` accepts; the collective's
    /// [`Collective::fallback`] if there is none. So a rule for an algorithm the device lacks
    /// (`native` on tcp) or the operation rules out (a commutative-only one) passes the call on
    /// to the next rule that applies. Allocation-free.
    pub fn select_usable(
        &self,
        coll: Collective,
        np: usize,
        bytes: usize,
        locality: CommLocality,
        usable: impl Fn(Algorithm) -> bool,
    ) -> Algorithm {
        self.select_rule(coll, np, bytes, locality, usable).unwrap_or(coll.fallback())
    }

    /// [`Tuning::select_usable`] without the fallback: `None` when no usable rule applies.
    #[inline]
    pub(crate) fn select_rule(
        &self,
        coll: Collective,
        np: usize,
        bytes: usize,
        locality: CommLocality,
        usable: impl Fn(Algorithm) -> bool,
    ) -> Option<Algorithm> {
        let rules = self.rules(coll);
        rules.iter().find(|r| r.applies(np, bytes, locality, self.cores) && usable(r.algorithm)).map(|r| r.algorithm)
    }
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning::defaults()
    }
}

/// The last tuned choice per collective on one communicator (shared by its clones). Programs
/// call the same collective at the same size again and again, and scanning the rules costs a
/// small call more than looking the answer up: everything else the choice depends on (the
/// communicator's size, spread and device) is fixed for the communicator's life.
#[derive(Default)]
pub(crate) struct LastChoices([Slot; Collective::ALL.len()]);

#[derive(Default)]
struct Slot {
    last: Cell<Option<LastChoice>>,
    /// The table `last` came from, held so that its address (the key) cannot be reused by a
    /// later table while `last` names it: clones made by `Comm::with_tuning` share the
    /// communicator's choices, each with its own table.
    table: Cell<Option<Arc<Tuning>>>,
}

#[derive(Clone, Copy)]
struct LastChoice {
    tuning: *const Tuning,
    bytes: usize,
    commutative: bool,
    algorithm: Algorithm,
}

impl LastChoices {
    /// The choice for this call: the remembered one if the last call of `coll` asked the same,
    /// else `choose()`'s, remembered.
    #[inline]
    pub(crate) fn get_or(
        &self,
        coll: Collective,
        tuning: &Arc<Tuning>,
        bytes: usize,
        commutative: bool,
        choose: impl FnOnce() -> Algorithm,
    ) -> Algorithm {
        let slot = &self.0[coll as usize];
        let key = Arc::as_ptr(tuning);
        let last = slot.last.get();
        if let Some(last) = last
            && last.tuning == key
            && last.bytes == bytes
            && last.commutative == commutative
        {
            return last.algorithm;
        }
        let algorithm = choose();
        if last.is_none_or(|last| last.tuning != key) {
            slot.table.set(Some(Arc::clone(tuning)));
        }
        slot.last.set(Some(LastChoice { tuning: key, bytes, commutative, algorithm }));
        algorithm
    }
}

/// How a dispatch picks its algorithm. The public entry points use the tuning rules; a
/// composite algorithm that runs another collective passes what it must not come back to, or
/// the fixed part it is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pick {
    /// The tuning rules' choice among the algorithms this call can run.
    Tuned,
    /// As `Tuned`, never this algorithm: the choice that would lead back into the composite
    /// asking (allgather `gather_bcast`'s bcast is never `scatter_allgather`, whose allgatherv
    /// could be `gather_bcast` again).
    Excluding(Algorithm),
    /// Exactly this algorithm, a fixed part of a composite (allreduce `bt` is an MST reduce
    /// then a binomial bcast).
    Fixed(Algorithm),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_cover_every_collective_with_valid_algorithms() {
        let t = Tuning::defaults();
        for coll in Collective::ALL {
            for np in [1, 2, 3, 8, 64] {
                for bytes in [0, 1, 4096, 1 << 20, usize::MAX] {
                    assert!(coll.algorithms().contains(&t.select(coll, np, bytes)));
                }
            }
            assert!(coll.algorithms().contains(&coll.fallback()));
            assert!(!coll.needs_commutative(coll.fallback()));
        }
    }

    #[test]
    fn rules_apply_in_order_and_round_trip_through_json() {
        let mut t = Tuning::defaults();
        t.set_rules(
            Collective::Bcast,
            vec![
                Rule { max_np: Some(4), max_bytes: Some(1024), locality: None, cores: None, algorithm: Algorithm::Bt },
                Rule { max_np: None, max_bytes: Some(1 << 16), locality: None, cores: None, algorithm: Algorithm::Fat },
                Rule::always(Algorithm::ScatterAllgather),
            ],
        )
        .unwrap();
        assert_eq!(t.select(Collective::Bcast, 4, 1024), Algorithm::Bt);
        assert_eq!(t.select(Collective::Bcast, 5, 1024), Algorithm::Fat);
        assert_eq!(t.select(Collective::Bcast, 2, 1 << 20), Algorithm::ScatterAllgather);
        assert_eq!(Tuning::from_json(&t.to_json()).unwrap(), t);
        let t = t.with_kary_arity(3).unwrap();
        assert_eq!(Tuning::from_json(&t.to_json()).unwrap().kary_arity(), 3);
        assert!(Tuning::from_json(r#"{"kary_arity": 0}"#).is_err());
    }

    #[test]
    fn an_unusable_rule_passes_the_call_to_the_next_rule_that_applies() {
        let mut t = Tuning::defaults();
        let rule = |max_np, max_bytes, algorithm| Rule { max_np, max_bytes, locality: None, cores: None, algorithm };
        t.set_rules(
            Collective::Allreduce,
            vec![
                rule(Some(2), None, Algorithm::Native),
                rule(None, Some(64), Algorithm::Nbft),
                rule(Some(2), None, Algorithm::Bkt),
                Rule::always(Algorithm::Native),
            ],
        )
        .unwrap();
        let coll = Collective::Allreduce;
        let no_native = |a| a != Algorithm::Native;
        assert_eq!(t.select(coll, 2, 1 << 20), Algorithm::Native);
        assert_eq!(t.select_usable(coll, 2, 1 << 20, CommLocality::Process, no_native), Algorithm::Bkt);
        assert_eq!(
            t.select_usable(coll, 2, 8, CommLocality::Process, no_native),
            Algorithm::Nbft,
            "the first usable rule wins"
        );
        assert_eq!(
            t.select_usable(coll, 4, 1 << 20, CommLocality::Process, no_native),
            coll.fallback(),
            "no usable rule applies"
        );
        let no_ring = |a| no_native(a) && !coll.needs_commutative(a);
        assert_eq!(t.select_usable(coll, 2, 1 << 20, CommLocality::Process, no_ring), coll.fallback());
    }

    #[test]
    fn each_device_has_its_own_defaults_and_tcp_never_picks_native() {
        let tcp = Tuning::defaults_for(DeviceKind::Tcp);
        assert_eq!(Tuning::defaults_for(DeviceKind::Shm), Tuning::defaults());
        assert_ne!(tcp, Tuning::defaults());
        for coll in Collective::ALL {
            assert!(tcp.rules(coll).iter().all(|r| r.algorithm != Algorithm::Native), "{coll}");
        }
        let with_comment = r#"{"comment": "made by hand", "scan": [{"algorithm": "linear"}]}"#;
        let overlaid = tcp.clone().with_json(with_comment).unwrap();
        assert_eq!(overlaid.rules(Collective::Scan), &vec![Rule::always(Algorithm::Linear)]);
        assert_eq!(overlaid.rules(Collective::Bcast), tcp.rules(Collective::Bcast), "others keep tcp's");
    }

    #[cfg(feature = "mpi")]
    #[test]
    fn the_mpi_device_defaults_to_the_libraries_collectives_at_every_size() {
        let mpi = Tuning::defaults_for(DeviceKind::Mpi);
        for coll in Collective::ALL {
            assert_eq!(mpi.rules(coll), &vec![Rule::always(Algorithm::Native)], "{coll}");
        }
        let forced = mpi.force(Collective::Bcast, Algorithm::Bt).unwrap();
        assert_eq!(forced.select(Collective::Bcast, 4, 1 << 20), Algorithm::Bt, "fastmp algorithms stay selectable");
        let no_native = |a| a != Algorithm::Native;
        assert_eq!(
            forced.select_usable(Collective::Allreduce, 4, 8, CommLocality::Node, no_native),
            Collective::Allreduce.fallback()
        );
    }

    #[test]
    fn locality_rules_apply_only_to_communicators_of_that_locality() {
        let t = Tuning::defaults()
            .with_json(
                r#"{"bcast": [{"locality": "process", "algorithm": "native"},
                              {"locality": "network", "max_bytes": 64, "algorithm": "bt"},
                              {"locality": "node", "algorithm": "hierarchical"},
                              {"algorithm": "mst"}]}"#,
            )
            .unwrap();
        let select = |locality, bytes| t.select_where(Collective::Bcast, 8, bytes, locality);
        assert_eq!(select(CommLocality::Process, 1 << 20), Algorithm::Native);
        assert_eq!(select(CommLocality::Node, 8), Algorithm::Hierarchical);
        assert_eq!(select(CommLocality::Network, 8), Algorithm::Bt);
        assert_eq!(select(CommLocality::Network, 1 << 20), Algorithm::Mst);
        assert_eq!(t.select(Collective::Bcast, 8, 8), Algorithm::Native, "plain select: one process");
        let no_hierarchy = |a| a != Algorithm::Hierarchical;
        assert_eq!(t.select_usable(Collective::Bcast, 8, 8, CommLocality::Node, no_hierarchy), Algorithm::Mst);
        assert_eq!(Tuning::from_json(&t.to_json()).unwrap(), t, "locality round-trips through JSON");
    }

    #[test]
    fn bad_locality_rules_are_clear_errors() {
        let err = Tuning::from_json(r#"{"bcast": [{"locality": "rack", "algorithm": "bt"}, {"algorithm": "bt"}]}"#)
            .unwrap_err();
        assert!(err.to_string().contains("rack"), "{err}");
        let err = Tuning::from_json(r#"{"bcast": [{"localty": "node", "algorithm": "bt"}, {"algorithm": "bt"}]}"#)
            .unwrap_err();
        assert!(err.to_string().contains("localty"), "{err}");
        let err = Tuning::from_json(r#"{"bcast": [{"locality": "node", "algorithm": "bt"}]}"#).unwrap_err();
        assert!(err.to_string().contains("last bcast rule must have no limits"), "{err}");
        assert!(Tuning::defaults().force(Collective::Alltoallv, Algorithm::Hierarchical).is_ok());
        assert!(Tuning::defaults().force(Collective::Alltoallv, Algorithm::RingSegmented).is_err());
        assert!(Tuning::defaults().with_hierarchical_chunk(0).is_err());
        assert_eq!(Tuning::from_json(r#"{"hierarchical_chunk": 4096}"#).unwrap().hierarchical_chunk(), 4096);
    }

    #[test]
    fn cores_rules_apply_only_with_that_fact_and_inside_one_process() {
        let t = Tuning::defaults()
            .with_json(
                r#"{"allreduce": [{"max_np": 8, "cores": "dedicated", "algorithm": "native"},
                                  {"max_np": 8, "cores": "shared", "algorithm": "nbft"},
                                  {"algorithm": "bde"}]}"#,
            )
            .unwrap();
        let pick = |t: &Tuning, np, locality| t.select_where(Collective::Allreduce, np, 8, locality);
        assert_eq!(pick(&t, 4, CommLocality::Process), Algorithm::Bde, "no fact: both rules left out");
        let dedicated = t.clone().with_cores(Cores::Dedicated);
        let shared = t.clone().with_cores(Cores::Shared);
        assert_eq!(pick(&dedicated, 4, CommLocality::Process), Algorithm::Native);
        assert_eq!(pick(&shared, 4, CommLocality::Process), Algorithm::Nbft);
        assert_eq!(pick(&dedicated, 9, CommLocality::Process), Algorithm::Bde, "other limits still hold");
        for across in [CommLocality::Node, CommLocality::Network] {
            assert_eq!(pick(&dedicated, 4, across), Algorithm::Bde, "processes could disagree about cores");
        }
        assert_eq!(Tuning::from_json(&dedicated.to_json()).unwrap(), t, "the fact is the job's, not the file's");
        let err = Tuning::from_json(r#"{"bcast": [{"cores": "dedicated", "algorithm": "bt"}]}"#).unwrap_err();
        assert!(err.to_string().contains("the last bcast rule must have no limits"), "{err}");
        let err =
            Tuning::from_json(r#"{"bcast": [{"cores": "many", "algorithm": "bt"}, {"algorithm": "bt"}]}"#).unwrap_err();
        assert!(err.to_string().contains("unknown variant `many`"), "{err}");
        assert_eq!(Cores::for_ranks(16, 16), Cores::Dedicated);
        assert_eq!(Cores::for_ranks(4, 2), Cores::Shared);
    }

    #[test]
    fn the_shm_defaults_pick_native_algorithms_for_ranks_with_cores_of_their_own() {
        // Measured on 16 cores (default_tuning_shm.json's comment): at np 16 the shared-core
        // rules' reduce (nbft) took 1.4-1.7x Open MPI's time from 16 KiB, native 0.2-0.8x.
        let shm = Tuning::defaults();
        let at = |cores, coll, np, bytes| shm.clone().with_cores(cores).select(coll, np, bytes);
        assert_eq!(at(Cores::Dedicated, Collective::Reduce, 16, 1 << 20), Algorithm::Native);
        assert_eq!(at(Cores::Shared, Collective::Reduce, 16, 1 << 20), shm.select(Collective::Reduce, 16, 1 << 20));
        // (The barrier moves no data: its rules for many ranks sharing cores have no size bound.)
        for coll in Collective::ALL.into_iter().filter(|&c| c != Collective::Barrier) {
            for (np, bytes) in [(2, 1), (2, 1 << 10), (2, 1 << 20), (17, 1 << 20), (64, 1 << 20)] {
                let (dedicated, shared) = (at(Cores::Dedicated, coll, np, bytes), at(Cores::Shared, coll, np, bytes));
                assert_eq!(dedicated, shared, "{coll} np {np} {bytes} B: measured apart only at np 3-16, or to 64 KiB");
            }
        }
    }

    #[test]
    fn the_shm_defaults_for_many_ranks_sharing_cores_were_measured_so() {
        // Measured with 32 and 64 ranks on 2 cores (default_tuning_shm.json's comment): the
        // message-based algorithms of the rules beyond np 16 took 4-20x longer (barrier at np
        // 128: bde 969 us, native 115).
        let shm = Tuning::defaults();
        let at = |cores, coll, np, bytes| shm.clone().with_cores(cores).select(coll, np, bytes);
        for np in [17, 64, 256] {
            assert_eq!(at(Cores::Shared, Collective::Barrier, np, 0), Algorithm::Native, "np {np}");
            assert_eq!(at(Cores::Shared, Collective::Bcast, np, 8), Algorithm::Native, "np {np}");
            assert_eq!(at(Cores::Shared, Collective::Allgather, np, 8), Algorithm::Native, "np {np}");
            assert_eq!(at(Cores::Dedicated, Collective::Barrier, np, 0), Algorithm::Bde, "np {np}: not measured");
        }
        assert_eq!(at(Cores::Shared, Collective::Reduce, 32, 8), Algorithm::Bft);
    }

    #[test]
    fn the_hybrid_table_is_shm_inside_a_process_and_hierarchical_across() {
        let (hybrid, shm, tcp) =
            (Tuning::defaults_for(DeviceKind::Hybrid), Tuning::defaults(), Tuning::defaults_for(DeviceKind::Tcp));
        let no_hierarchy = |a| a != Algorithm::Hierarchical;
        for coll in Collective::ALL {
            for np in [2, 4, 16, 64] {
                for bytes in [0, 64, 1024, 1 << 16, 1 << 20] {
                    let inside = hybrid.select_where(coll, np, bytes, CommLocality::Process);
                    assert_eq!(inside, shm.select(coll, np, bytes), "{coll} np {np} {bytes} B");
                    for cores in [Cores::Dedicated, Cores::Shared] {
                        let (hybrid, shm) = (hybrid.clone().with_cores(cores), shm.clone().with_cores(cores));
                        let inside = hybrid.select_where(coll, np, bytes, CommLocality::Process);
                        assert_eq!(inside, shm.select(coll, np, bytes), "{coll} np {np} {bytes} B {cores:?}");
                    }
                    for across in [CommLocality::Node, CommLocality::Network] {
                        // Measured on one node at np 4 (the table's comment): flat algorithms
                        // for allreduce up to 256 KiB, and for bcast up to 64 KiB.
                        let measured_flat = across == CommLocality::Node
                            && np <= 4
                            && ((coll == Collective::Allreduce && bytes <= 1 << 18)
                                || (coll == Collective::Bcast && bytes <= 1 << 16));
                        let picked = hybrid.select_where(coll, np, bytes, across);
                        // Alltoallv's selection sees no block size: not hierarchical by default.
                        let hierarchical = coll.algorithms().contains(&Algorithm::Hierarchical)
                            && coll != Collective::Alltoallv
                            && (coll != Collective::Alltoall || bytes <= 256)
                            && !measured_flat;
                        assert_eq!(picked == Algorithm::Hierarchical, hierarchical, "{coll} np {np} {bytes} B");
                        if !measured_flat {
                            let leaders = hybrid.select_usable(coll, np, bytes, across, no_hierarchy);
                            assert_eq!(leaders, tcp.select_where(coll, np, bytes, across), "{coll} np {np} {bytes} B");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn bad_tuning_is_a_clear_error() {
        let err = Tuning::defaults().force(Collective::Barrier, Algorithm::Bkt).unwrap_err();
        assert!(err.to_string().contains("barrier has no algorithm \"bkt\""), "{err}");
        assert!(Tuning::from_json(r#"{"bcast": [{"max_np": 2, "algorithm": "mst"}]}"#).is_err());
        assert!(Tuning::from_json(r#"{"bcats": [{"algorithm": "mst"}]}"#).is_err());
        assert!(Tuning::from_json("not json").is_err());
        assert_eq!(Algorithm::from_name("Recursive-Doubling").unwrap(), Algorithm::Bde);
        assert!(Algorithm::from_name("magic").is_err());
    }
}
