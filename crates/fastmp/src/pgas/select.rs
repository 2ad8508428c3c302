//! Algorithm selection for the PGAS collectives, as validated data (like `coll::select` for the
//! two-sided ones): an [`Algorithm`] is a tree [`Shape`], a [`Transfer`] direction and a
//! [`Pipeline`], named `shape_transfer[_pipeline]` (`binomial_pull_static`, `flat_push`,
//! `ring_pull`, ...). Per collective, rules on (ranks, bytes per block) pick one; defaults differ
//! per device, a JSON tuning file (`FASTMP_PGAS_TUNING_FILE`) and `FASTMP_PGAS_<COLLECTIVE>`
//! variables (an algorithm name) override them when an array is created, and
//! [`super::SharedArray::force_algorithm`] overrides them for one array.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The eight UPC collectives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    Broadcast,
    Scatter,
    Gather,
    GatherAll,
    Exchange,
    Permute,
    Reduce,
    PrefixReduce,
}

impl Collective {
    /// Every collective.
    pub const ALL: [Collective; 8] = [
        Collective::Broadcast,
        Collective::Scatter,
        Collective::Gather,
        Collective::GatherAll,
        Collective::Exchange,
        Collective::Permute,
        Collective::Reduce,
        Collective::PrefixReduce,
    ];

    /// Its UPC name without the `upc_all_` prefix (`gather_all`, `prefix_reduce`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Collective::Broadcast => "broadcast",
            Collective::Scatter => "scatter",
            Collective::Gather => "gather",
            Collective::GatherAll => "gather_all",
            Collective::Exchange => "exchange",
            Collective::Permute => "permute",
            Collective::Reduce => "reduce",
            Collective::PrefixReduce => "prefix_reduce",
        }
    }

    /// Parses [`Collective::name`].
    pub fn from_name(name: &str) -> Result<Collective> {
        Collective::ALL.into_iter().find(|c| c.name() == name).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "unknown PGAS collective {name:?} (expected one of: {})",
                Collective::ALL.map(Collective::name).join(", ")
            ))
        })
    }

    /// The algorithms this collective implements.
    pub fn algorithms(self) -> Vec<Algorithm> {
        use Pipeline::{Dynamic, None as Whole, Static};
        use Shape::*;
        use Transfer::{Pull, Push};
        let trees = [Flat, Binomial, BinomialFlat, Hierarchical];
        let mut out = Vec::new();
        let mut add = |shape, transfer, pipeline| out.push(Algorithm { shape, transfer, pipeline });
        match self {
            Collective::Broadcast => {
                for shape in trees {
                    for transfer in [Pull, Push] {
                        for pipeline in [Whole, Static, Dynamic] {
                            add(shape, transfer, pipeline);
                        }
                    }
                }
            }
            Collective::Scatter | Collective::Gather => {
                for transfer in [Pull, Push] {
                    add(Flat, transfer, Whole);
                    add(Binomial, transfer, Whole);
                    add(Binomial, transfer, Static);
                }
                // The token's holders move their own piece: they get it from the root's source
                // (scatter) or put it into the root's destination (gather); the other direction
                // would leave every copy to the root, which is the flat algorithm.
                add(Ring, if self == Collective::Scatter { Pull } else { Push }, Whole);
                if self == Collective::Scatter {
                    add(Binomial, Pull, Dynamic);
                }
            }
            Collective::GatherAll => {
                for shape in trees {
                    add(shape, Pull, Whole);
                    add(shape, Pull, Static);
                }
                add(Flat, Push, Whole);
            }
            Collective::Exchange | Collective::Permute => {
                add(Flat, Push, Whole);
                add(Flat, Pull, Whole);
            }
            Collective::Reduce => {
                for shape in trees {
                    add(shape, Push, Whole);
                }
            }
            Collective::PrefixReduce => {
                add(Chain, Push, Whole);
                add(Dissemination, Pull, Whole);
                add(Hierarchical, Pull, Whole);
            }
        }
        out
    }

    /// Whether `algorithm` implements this collective.
    pub fn supports(self, algorithm: Algorithm) -> bool {
        self.algorithms().contains(&algorithm)
    }

    fn check(self, algorithm: Algorithm) -> Result<Algorithm> {
        if self.supports(algorithm) {
            Ok(algorithm)
        } else {
            Err(Error::InvalidArgument(format!(
                "{}: algorithm {algorithm} is not implemented for it (available: {})",
                self.name(),
                self.algorithms().iter().map(Algorithm::to_string).collect::<Vec<_>>().join(", ")
            )))
        }
    }
}

/// The shape of the communication (the thesis's trees, and the non-tree patterns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Shape {
    /// The root talks to every rank directly (MTU's reference collectives).
    Flat,
    /// Binomial tree in rank order relative to the root.
    Binomial,
    /// Binomial tree between (node, NUMA region) leaders, flat inside each region.
    BinomialFlat,
    /// Node leaders, then NUMA leaders, then a binomial tree inside each region.
    Hierarchical,
    /// A token passes around the ranks (scatter, gather).
    Ring,
    /// A chain of ranks, each passing its prefix to the next (prefix reduce).
    Chain,
    /// Mellor-Crummey and Scott's dissemination: round `j` pulls from rank − 2^j (prefix reduce).
    Dissemination,
}

impl Shape {
    const NAMES: [(Shape, &'static str); 7] = [
        (Shape::Flat, "flat"),
        (Shape::Binomial, "binomial"),
        (Shape::BinomialFlat, "binomial_flat"),
        (Shape::Hierarchical, "hierarchical"),
        (Shape::Ring, "ring"),
        (Shape::Chain, "chain"),
        (Shape::Dissemination, "dissemination"),
    ];

    /// Whether building the tree needs every rank's node and NUMA region.
    pub(crate) fn needs_regions(self) -> bool {
        matches!(self, Shape::BinomialFlat | Shape::Hierarchical)
    }
}

/// Who moves the data across a tree edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Transfer {
    /// The receiver gets from the sender's block (broadcast and scatter in the thesis).
    Pull,
    /// The sender puts into the receiver's block (gather and reduce in the thesis).
    Push,
}

/// How a block is cut on its way down or up a tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pipeline {
    /// Whole blocks.
    None,
    /// Chunks of [`STATIC_CHUNK`] bytes: a rank forwards chunk k while chunk k+1 arrives.
    Static,
    /// Blocks above [`DYNAMIC_THRESHOLD`] bytes go as two halves.
    Dynamic,
}

/// The chunk of static pipelining (the thesis's 32 KiB).
pub const STATIC_CHUNK: usize = 32 << 10;
/// Dynamic pipelining splits blocks larger than this in two (the thesis's 8 KiB).
pub const DYNAMIC_THRESHOLD: usize = 8 << 10;

impl Pipeline {
    /// The byte ranges `bytes` is moved in.
    pub fn chunks(self, bytes: usize) -> Vec<std::ops::Range<usize>> {
        let step = self.step(bytes);
        (0..bytes.max(1)).step_by(step).map(|lo| lo..(lo + step).min(bytes)).collect()
    }

    /// The length of every chunk of `bytes` but the last (never 0), so that the collectives can
    /// walk [`Pipeline::chunks`] without building the list.
    pub fn step(self, bytes: usize) -> usize {
        match self {
            Pipeline::None => bytes.max(1),
            Pipeline::Static => STATIC_CHUNK,
            Pipeline::Dynamic if bytes > DYNAMIC_THRESHOLD => bytes.div_ceil(2),
            Pipeline::Dynamic => bytes.max(1),
        }
    }
}

/// One algorithm of one collective: shape, direction and pipelining.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Algorithm {
    pub shape: Shape,
    pub transfer: Transfer,
    pub pipeline: Pipeline,
}

impl Algorithm {
    /// Parses `shape_transfer[_pipeline]`: `binomial_pull`, `hierarchical_pull_static`,
    /// `flat_push`, `ring_pull`, `binomial_flat_push_dynamic`, ...
    pub fn from_name(name: &str) -> Result<Algorithm> {
        let bad = || {
            Error::InvalidArgument(format!(
                "unknown PGAS algorithm {name:?}: expected SHAPE_TRANSFER[_PIPELINE] with SHAPE one of flat, \
                 binomial, binomial_flat, hierarchical, ring, chain, dissemination; TRANSFER pull or push; \
                 PIPELINE static or dynamic (e.g. binomial_pull_static)"
            ))
        };
        let (rest, pipeline) = if let Some(r) = name.strip_suffix("_static") {
            (r, Pipeline::Static)
        } else if let Some(r) = name.strip_suffix("_dynamic") {
            (r, Pipeline::Dynamic)
        } else {
            (name, Pipeline::None)
        };
        let (shape, transfer) = if let Some(s) = rest.strip_suffix("_pull") {
            (s, Transfer::Pull)
        } else if let Some(s) = rest.strip_suffix("_push") {
            (s, Transfer::Push)
        } else {
            return Err(bad());
        };
        let shape = Shape::NAMES.iter().find(|(_, n)| *n == shape).map(|(s, _)| *s).ok_or_else(bad)?;
        Ok(Algorithm { shape, transfer, pipeline })
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape = Shape::NAMES.iter().find(|(s, _)| *s == self.shape).map_or("?", |(_, n)| n);
        let transfer = match self.transfer {
            Transfer::Pull => "pull",
            Transfer::Push => "push",
        };
        write!(f, "{shape}_{transfer}")?;
        match self.pipeline {
            Pipeline::None => Ok(()),
            Pipeline::Static => f.write_str("_static"),
            Pipeline::Dynamic => f.write_str("_dynamic"),
        }
    }
}

impl Serialize for Algorithm {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Algorithm {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Algorithm, D::Error> {
        let name = String::deserialize(d)?;
        Algorithm::from_name(&name).map_err(serde::de::Error::custom)
    }
}

/// A rule: with at most `max_ranks` ranks and at most `max_bytes` bytes per block (`None`: no
/// limit), use `algorithm`. The first rule that applies decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ranks: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<usize>,
    pub algorithm: Algorithm,
}

impl Rule {
    /// A rule that always applies.
    pub fn always(algorithm: Algorithm) -> Rule {
        Rule { max_ranks: None, max_bytes: None, algorithm }
    }

    fn applies(&self, ranks: usize, bytes: usize) -> bool {
        self.max_ranks.is_none_or(|m| ranks <= m) && self.max_bytes.is_none_or(|m| bytes <= m)
    }
}

/// Rules for every collective.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tuning {
    rules: BTreeMap<Collective, Vec<Rule>>,
}

/// The variable naming a tuning file (JSON, as [`Tuning::to_json`] writes).
pub const TUNING_FILE_VAR: &str = "FASTMP_PGAS_TUNING_FILE";

fn named(name: &str) -> Algorithm {
    Algorithm::from_name(name).expect("built-in algorithm names parse")
}

impl Tuning {
    /// The built-in defaults for `device` (`"shm"`, `"tcp"`, ...): direct-copy devices favour
    /// flat trees with pipelining for large blocks; network devices binomial trees.
    pub fn defaults_for(device: &str) -> Tuning {
        let direct = device != "tcp";
        let mut rules = BTreeMap::new();
        let tree = if direct { "flat" } else { "binomial" };
        for coll in Collective::ALL {
            let list = match coll {
                // Over tcp a get waits for the target to serve it, so large blocks go faster
                // pushed (measured at np=2: 1 MiB in ~0.35 ms pushed, ~0.45-0.9 ms pulled).
                Collective::Broadcast if !direct => vec![
                    Rule { max_ranks: Some(4), max_bytes: Some(8 << 10), algorithm: named("flat_pull") },
                    Rule { max_ranks: Some(4), max_bytes: None, algorithm: named("flat_push") },
                    Rule { max_ranks: None, max_bytes: Some(8 << 10), algorithm: named("binomial_pull") },
                    Rule::always(named("binomial_pull_static")),
                ],
                Collective::Scatter if !direct => vec![
                    Rule { max_ranks: None, max_bytes: Some(8 << 10), algorithm: named("flat_pull") },
                    Rule::always(named("flat_push")),
                ],
                Collective::Broadcast => vec![
                    Rule { max_ranks: Some(4), max_bytes: None, algorithm: named("flat_pull") },
                    Rule { max_ranks: None, max_bytes: Some(8 << 10), algorithm: named(&format!("{tree}_pull")) },
                    Rule::always(named("binomial_pull_static")),
                ],
                Collective::Scatter => vec![Rule::always(named("flat_pull"))],
                Collective::Gather => vec![Rule::always(named("flat_push"))],
                Collective::GatherAll => vec![Rule::always(named("flat_push"))],
                Collective::Exchange | Collective::Permute => vec![Rule::always(named("flat_push"))],
                Collective::Reduce => vec![
                    Rule { max_ranks: Some(4), max_bytes: None, algorithm: named("flat_push") },
                    Rule::always(named("binomial_push")),
                ],
                Collective::PrefixReduce => vec![
                    Rule { max_ranks: Some(4), max_bytes: None, algorithm: named("chain_push") },
                    Rule::always(named("dissemination_pull")),
                ],
            };
            rules.insert(coll, list);
        }
        Tuning { rules }
    }

    /// The defaults for `device`, then the tuning file and `FASTMP_PGAS_<COLLECTIVE>` variables.
    pub fn for_device(device: &str) -> Result<Tuning> {
        let mut tuning = Tuning::defaults_for(device);
        if let Some(path) = std::env::var_os(TUNING_FILE_VAR) {
            let text = std::fs::read_to_string(&path).map_err(|e| {
                Error::InvalidArgument(format!("{TUNING_FILE_VAR}={}: {e}", std::path::Path::new(&path).display()))
            })?;
            tuning = tuning.with_json(&text)?;
        }
        for coll in Collective::ALL {
            let var = format!("FASTMP_PGAS_{}", coll.name().to_ascii_uppercase());
            if let Ok(name) = std::env::var(&var) {
                let algorithm =
                    Algorithm::from_name(name.trim()).map_err(|e| Error::InvalidArgument(format!("{var}: {e}")))?;
                tuning.force(coll, algorithm)?;
            }
        }
        Ok(tuning)
    }

    /// Overrides the rules of the collectives the JSON names (`{"rules":{"broadcast":[...]}}`).
    pub fn with_json(mut self, text: &str) -> Result<Tuning> {
        let file: Tuning =
            serde_json::from_str(text).map_err(|e| Error::InvalidArgument(format!("PGAS tuning file: {e}")))?;
        for (coll, rules) in file.rules {
            self.set_rules(coll, rules)?;
        }
        Ok(self)
    }

    /// The rules as JSON (what `fastmp-bench tune --pgas` writes).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("tuning serialises")
    }

    /// Replaces `coll`'s rules; every algorithm must implement `coll`, and the last rule must
    /// always apply.
    pub fn set_rules(&mut self, coll: Collective, rules: Vec<Rule>) -> Result<()> {
        for rule in &rules {
            coll.check(rule.algorithm)?;
        }
        if rules.last().is_none_or(|r| r.max_ranks.is_some() || r.max_bytes.is_some()) {
            return Err(Error::InvalidArgument(format!(
                "{}: the last rule must have no limits, so that every call has an algorithm",
                coll.name()
            )));
        }
        self.rules.insert(coll, rules);
        Ok(())
    }

    /// Uses `algorithm` for every call of `coll`.
    pub fn force(&mut self, coll: Collective, algorithm: Algorithm) -> Result<()> {
        self.set_rules(coll, vec![Rule::always(coll.check(algorithm)?)])
    }

    /// `coll`'s rules.
    pub fn rules(&self, coll: Collective) -> &[Rule] {
        self.rules.get(&coll).map_or(&[], Vec::as_slice)
    }

    /// The algorithm for `coll` on `ranks` ranks moving `bytes` per block.
    pub fn select(&self, coll: Collective, ranks: usize, bytes: usize) -> Algorithm {
        self.rules(coll)
            .iter()
            .find(|r| r.applies(ranks, bytes))
            .map(|r| r.algorithm)
            .expect("the last rule always applies (checked by set_rules)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_name_round_trips() {
        for coll in Collective::ALL {
            assert_eq!(Collective::from_name(coll.name()).unwrap(), coll);
            for alg in coll.algorithms() {
                assert_eq!(Algorithm::from_name(&alg.to_string()).unwrap(), alg);
            }
        }
        assert!(Algorithm::from_name("binomial").is_err());
        assert!(Algorithm::from_name("star_pull").is_err());
    }

    #[test]
    fn defaults_are_valid_and_overridable() {
        for device in ["shm", "tcp"] {
            let tuning = Tuning::defaults_for(device);
            for coll in Collective::ALL {
                for bytes in [0, 8, 1 << 20] {
                    for np in [1, 2, 16] {
                        assert!(coll.supports(tuning.select(coll, np, bytes)));
                    }
                }
            }
            let json = tuning.to_json();
            assert_eq!(Tuning::defaults_for(device).with_json(&json).unwrap(), tuning);
        }
        let mut tuning = Tuning::defaults_for("shm");
        assert!(tuning.force(Collective::Exchange, named("binomial_pull")).is_err());
        tuning.force(Collective::Broadcast, named("hierarchical_push_dynamic")).unwrap();
        assert_eq!(tuning.select(Collective::Broadcast, 3, 5), named("hierarchical_push_dynamic"));
    }

    #[test]
    fn pipelines_cut_blocks_as_the_thesis_does() {
        assert_eq!(Pipeline::None.chunks(100), vec![0..100]);
        assert_eq!(Pipeline::Static.chunks(STATIC_CHUNK * 2 + 1).len(), 3);
        assert_eq!(Pipeline::Dynamic.chunks(DYNAMIC_THRESHOLD), vec![0..DYNAMIC_THRESHOLD]);
        assert_eq!(Pipeline::Dynamic.chunks(20_001), vec![0..10_001, 10_001..20_001]);
        assert_eq!(Pipeline::Static.chunks(0), vec![0..0]);
    }
}
