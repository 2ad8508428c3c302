//! Distributed graph topologies (MPI_Dist_graph_create_adjacent, MPI_Dist_graph_create): a
//! communicator whose ranks know their in- and out-neighbours, for the neighbourhood collectives
//! ([`crate::NeighborTopology`]), which the Cartesian communicator gets here too.
//!
//! Creation is collective and checks the graph across ranks before it builds anything: every
//! rank learns how many edges each rank claims to lead to it (an alltoall of counts) and one
//! allreduce makes every rank fail together on bad arguments, so a wrong graph is an `Err` on
//! all ranks instead of a neighbourhood collective that waits forever for a message nobody sends.

use std::fmt;
use std::ops::Deref;
use std::rc::Rc;

use crate::coll::op::Min;
use crate::coll::{Adjacency, Topology};
use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::topology::CartComm;

/// A communicator with a distributed graph topology (MPI's dist-graph communicator): each rank
/// knows the ranks it receives from (sources) and sends to (destinations), in the order that
/// lays out the buffers of the neighbourhood collectives. It derefs to [`Comm`], a communicator
/// of its own (the parent's ranks, in the same order: reordering is not done).
///
/// ```
/// use fastmp::NeighborTopology;
/// fastmp::run(4, |world| {
///     // A star: rank 0 sends to every other rank; the others send nothing.
///     let me = world.rank();
///     let (sources, destinations): (Vec<usize>, Vec<usize>) =
///         if me == 0 { (vec![], (1..4).collect()) } else { (vec![0], vec![]) };
///     let star = world.dist_graph_create_adjacent(&sources, None, &destinations, None, false)?;
///     assert_eq!(star.neighbors_count(), (sources.len(), destinations.len()));
///     let send: Vec<u32> = if me == 0 { vec![10, 20, 30] } else { vec![] };
///     let mut recv = vec![0u32; sources.len()];
///     star.neighbor_alltoall(&send, &mut recv)?;
///     if me > 0 {
///         assert_eq!(recv, [10 * me as u32]);
///     }
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
#[derive(Clone)]
pub struct GraphComm {
    comm: Comm,
    edges: Rc<Edges>,
}

struct Edges {
    sources: Vec<usize>,
    destinations: Vec<usize>,
    /// (source weights, destination weights), if the graph is weighted.
    weights: Option<(Vec<i32>, Vec<i32>)>,
}

impl Deref for GraphComm {
    type Target = Comm;
    fn deref(&self) -> &Comm {
        &self.comm
    }
}

impl fmt::Debug for GraphComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GraphComm")
            .field("rank", &self.comm.rank())
            .field("size", &self.comm.size())
            .field("sources", &self.edges.sources)
            .field("destinations", &self.edges.destinations)
            .field("weights", &self.edges.weights)
            .finish()
    }
}

impl GraphComm {
    /// The underlying communicator.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// This rank's sources and destinations, in the order the neighbourhood collectives use
    /// (MPI_Dist_graph_neighbors). Repeated edges appear as often as they were given.
    pub fn neighbors(&self) -> (&[usize], &[usize]) {
        (&self.edges.sources, &self.edges.destinations)
    }

    /// The number of sources and destinations: the in- and out-degree
    /// (MPI_Dist_graph_neighbors_count).
    pub fn neighbors_count(&self) -> (usize, usize) {
        (self.edges.sources.len(), self.edges.destinations.len())
    }

    /// The weights of the sources' and destinations' edges, in the order of
    /// [`GraphComm::neighbors`]; `None` for an unweighted graph (MPI_UNWEIGHTED).
    pub fn weights(&self) -> Option<(&[i32], &[i32])> {
        self.edges.weights.as_ref().map(|(s, d)| (&s[..], &d[..]))
    }

    /// Whether the graph was created with weights.
    pub fn is_weighted(&self) -> bool {
        self.edges.weights.is_some()
    }
}

impl Topology for GraphComm {
    fn topology_comm(&self) -> &Comm {
        &self.comm
    }

    fn adjacency(&self) -> Result<Adjacency<'_>> {
        Ok(Adjacency::graph(&self.edges.sources, &self.edges.destinations))
    }
}

/// The Cartesian neighbourhood of MPI: for each dimension the neighbour one step below, then the
/// one above (MPI_Cart_shift by 1), PROC_NULL off a non-periodic edge.
impl Topology for CartComm {
    fn topology_comm(&self) -> &Comm {
        self.comm()
    }

    fn adjacency(&self) -> Result<Adjacency<'_>> {
        let mut neighbors = Vec::with_capacity(2 * self.dims().len());
        for dimension in 0..self.dims().len() {
            let (below, above) = self.shift(dimension, 1)?;
            neighbors.extend([below, above]);
        }
        Ok(Adjacency::cartesian(neighbors))
    }
}

fn invalid(call: &str, message: std::fmt::Arguments<'_>) -> Error {
    Error::InvalidArgument(format!("{call}: {message}"))
}

/// Every entry of `ranks` (the argument `what`) must be a rank of a communicator of `np`.
fn check_ranks(call: &str, what: &str, ranks: &[usize], np: usize) -> Result<()> {
    match ranks.iter().enumerate().find(|&(_, &r)| r >= np) {
        Some((i, &r)) => {
            Err(invalid(call, format_args!("{what}[{i}] = {r} is out of range for a communicator of size {np}")))
        }
        None => Ok(()),
    }
}

/// `weights` (the argument `what`), if given, must have one non-negative entry per edge.
fn check_weights(call: &str, what: &str, weights: Option<&[i32]>, edges: usize, of: &str) -> Result<()> {
    let Some(weights) = weights else { return Ok(()) };
    if weights.len() != edges {
        return Err(invalid(
            call,
            format_args!("{what} has {} entries for the {edges} entries of {of}", weights.len()),
        ));
    }
    match weights.iter().enumerate().find(|&(_, &w)| w < 0) {
        Some((i, &w)) => Err(invalid(call, format_args!("{what}[{i}] = {w} is negative (weights are non-negative)"))),
        None => Ok(()),
    }
}

/// Makes the ranks agree on the outcome of creating a graph: `Err` on every rank when any rank's
/// `local` check failed (that rank keeps its own message), or when some ranks give weights and
/// others do not (MPI_UNWEIGHTED must be all or none). Returns whether the graph is weighted.
fn agree(comm: &Comm, call: &str, local: Result<()>, weighted: bool) -> Result<bool> {
    let failed = if local.is_err() { comm.rank() as u64 } else { u64::MAX };
    let mut all = [0u64; 3];
    // Minima: the first failing rank; 0 in slot 1 if anyone is unweighted, in slot 2 if anyone
    // is weighted.
    comm.allreduce(&[failed, u64::from(weighted), u64::from(!weighted)], &mut all, Min)?;
    local?;
    if all[0] != u64::MAX {
        return Err(invalid(call, format_args!("rank {} reported invalid arguments or an inconsistent graph", all[0])));
    }
    if all[1] == 0 && all[2] == 0 {
        return Err(invalid(call, format_args!("some ranks give weights and others do not (all or none must)")));
    }
    Ok(weighted)
}

impl Comm {
    /// A communicator over the same ranks whose topology is the graph each rank gives by its own
    /// neighbours: the ranks it receives from (`sources`) and sends to (`destinations`), with
    /// optional non-negative edge weights, the same on all ranks or on none
    /// (MPI_Dist_graph_create_adjacent). Edges may repeat and may be self-loops. Every edge
    /// `a → b` must be listed by both ends, as often on each: the ranks check this, and a graph
    /// they disagree on is an `Err` on every rank. `reorder` is accepted for MPI's sake, but
    /// ranks are never reordered: the new communicator numbers them as `self` does. Collective.
    ///
    /// ```
    /// fastmp::run(3, |world| {
    ///     let (me, np) = (world.rank(), world.size());
    ///     let (left, right) = ((me + np - 1) % np, (me + 1) % np);
    ///     let ring = world.dist_graph_create_adjacent(&[left], Some(&[1]), &[right], Some(&[2]), false)?;
    ///     assert_eq!(ring.neighbors(), (&[left][..], &[right][..]));
    ///     assert_eq!(ring.weights(), Some((&[1][..], &[2][..])));
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn dist_graph_create_adjacent(
        &self,
        sources: &[usize],
        source_weights: Option<&[i32]>,
        destinations: &[usize],
        dest_weights: Option<&[i32]>,
        reorder: bool,
    ) -> Result<GraphComm> {
        const CALL: &str = "dist_graph_create_adjacent";
        let _identity = reorder;
        self.check_live()?;
        let np = self.size();
        let local = (|| {
            check_ranks(CALL, "sources", sources, np)?;
            check_ranks(CALL, "destinations", destinations, np)?;
            check_weights(CALL, "source_weights", source_weights, sources.len(), "sources")?;
            check_weights(CALL, "dest_weights", dest_weights, destinations.len(), "destinations")?;
            if source_weights.is_some() != dest_weights.is_some() {
                return Err(invalid(
                    CALL,
                    format_args!("source_weights and dest_weights must both be given or both be None"),
                ));
            }
            Ok(())
        })();
        // How many edges this rank leads to each rank, and how many each rank leads here; a
        // rank with bad arguments claims `UNKNOWN`, so the others blame its arguments, not the
        // graph.
        const UNKNOWN: u64 = u64::MAX;
        let mut claims = vec![if local.is_ok() { 0 } else { UNKNOWN }; np];
        if local.is_ok() {
            destinations.iter().for_each(|&d| claims[d] += 1);
        }
        let mut claimed = vec![0u64; np];
        self.alltoall(&claims, &mut claimed)?;
        let local = local.and_then(|()| {
            let mut listed = vec![0u64; np];
            sources.iter().for_each(|&s| listed[s] += 1);
            match (0..np).find(|&r| claimed[r] != UNKNOWN && listed[r] != claimed[r]) {
                Some(r) => Err(invalid(
                    CALL,
                    format_args!(
                        "sources list rank {r} {} times, but rank {r}'s destinations list this rank ({}) {} times",
                        listed[r],
                        self.rank(),
                        claimed[r]
                    ),
                )),
                None => Ok(()),
            }
        });
        let weighted = agree(self, CALL, local, source_weights.is_some())?;
        let weights = weighted.then(|| (source_weights.unwrap_or(&[]).to_vec(), dest_weights.unwrap_or(&[]).to_vec()));
        let edges = Edges { sources: sources.to_vec(), destinations: destinations.to_vec(), weights };
        Ok(GraphComm { comm: self.dup()?, edges: Rc::new(edges) })
    }

    /// A communicator over the same ranks whose graph any rank may describe any part of
    /// (MPI_Dist_graph_create): this rank contributes, for each `sources[i]`, the edges from it
    /// to the next `degrees[i]` entries of `destinations`, with optional non-negative `weights`
    /// (one per destination entry; on all ranks or on none). Each rank's neighbours are listed
    /// ordered by the contributing rank, then in that rank's order, so the k-th repeated edge
    /// `a → b` of `a`'s destinations is the k-th of `b`'s sources. `reorder` is accepted for
    /// MPI's sake; ranks are never reordered. Collective; costs an alltoall of counts, an
    /// alltoallv of the edges and two allreduces.
    ///
    /// ```
    /// fastmp::run(3, |world| {
    ///     // Rank 0 describes the whole ring 0 → 1 → 2 → 0; the others add nothing.
    ///     let graph = if world.rank() == 0 {
    ///         world.dist_graph_create(&[0, 1, 2], &[1, 1, 1], &[1, 2, 0], None, false)?
    ///     } else {
    ///         world.dist_graph_create(&[], &[], &[], None, false)?
    ///     };
    ///     let me = world.rank();
    ///     assert_eq!(graph.neighbors(), (&[(me + 2) % 3][..], &[(me + 1) % 3][..]));
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn dist_graph_create(
        &self,
        sources: &[usize],
        degrees: &[usize],
        destinations: &[usize],
        weights: Option<&[i32]>,
        reorder: bool,
    ) -> Result<GraphComm> {
        const CALL: &str = "dist_graph_create";
        let _identity = reorder;
        self.check_live()?;
        let np = self.size();
        let local = (|| {
            if degrees.len() != sources.len() {
                return Err(invalid(CALL, format_args!("{} degrees for {} sources", degrees.len(), sources.len())));
            }
            let total = degrees.iter().try_fold(0usize, |sum, &d| sum.checked_add(d));
            if total != Some(destinations.len()) {
                return Err(invalid(
                    CALL,
                    format_args!("degrees add up to {total:?} edges but destinations has {}", destinations.len()),
                ));
            }
            check_ranks(CALL, "sources", sources, np)?;
            check_ranks(CALL, "destinations", destinations, np)?;
            check_weights(CALL, "weights", weights, destinations.len(), "destinations")
        })();
        let weighted = agree(self, CALL, local, weights.is_some())?;

        // Each edge goes to both ends as a record (direction at the receiver, the other end,
        // weight): grouped by receiving rank, in this rank's edge order.
        let from = sources.iter().zip(degrees).flat_map(|(&s, &d)| std::iter::repeat_n(s, d));
        let edges =
            || from.clone().zip(destinations).enumerate().map(|(i, (s, &d))| (s, d, weights.map_or(0, |w| w[i])));
        let mut counts = vec![0usize; np];
        for (s, d, _) in edges() {
            counts[s] += RECORD;
            counts[d] += RECORD;
        }
        let displs: Vec<usize> = counts.iter().scan(0, |end, &c| Some(std::mem::replace(end, *end + c))).collect();
        let mut records = vec![0u64; destinations.len() * 2 * RECORD];
        let mut next = displs.clone();
        let mut put = |at: usize, record: [u64; RECORD]| {
            records[next[at]..next[at] + RECORD].copy_from_slice(&record);
            next[at] += RECORD;
        };
        for (s, d, w) in edges() {
            let w = u64::from(w as u32);
            put(s, [OUTGOING, d as u64, w]);
            put(d, [INCOMING, s as u64, w]);
        }
        let mut incoming_counts = vec![0usize; np];
        self.alltoall(&counts, &mut incoming_counts)?;
        let incoming_displs: Vec<usize> =
            incoming_counts.iter().scan(0, |end, &c| Some(std::mem::replace(end, *end + c))).collect();
        let mut incoming = vec![0u64; incoming_counts.iter().sum()];
        self.alltoallv(&records, &counts, &displs, &mut incoming, &incoming_counts, &incoming_displs)?;

        let mut edges = Edges { sources: Vec::new(), destinations: Vec::new(), weights: None };
        let (mut source_weights, mut dest_weights) = (Vec::new(), Vec::new());
        for record in incoming.chunks_exact(RECORD) {
            let (peer, weight) = (record[1] as usize, record[2] as u32 as i32);
            if record[0] == INCOMING {
                edges.sources.push(peer);
                source_weights.push(weight);
            } else {
                edges.destinations.push(peer);
                dest_weights.push(weight);
            }
        }
        edges.weights = weighted.then_some((source_weights, dest_weights));
        Ok(GraphComm { comm: self.dup()?, edges: Rc::new(edges) })
    }
}

/// u64 words per edge record of `dist_graph_create`: direction, peer, weight.
const RECORD: usize = 3;
const INCOMING: u64 = 0;
const OUTGOING: u64 = 1;
