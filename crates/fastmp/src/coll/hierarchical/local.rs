//! The local level's bcasts, reduces and barriers, NUMA-local first where this process's
//! members span several NUMA nodes: a bcast crosses between nodes once per node (node leaders,
//! then each node from its leader) instead of once per member, a reduce combines inside each
//! node before one partial per node crosses. Where the process sits on one NUMA node (or the
//! placement does not know), they are the flat local level's collectives.
//!
//! Gathers, scatters and alltoalls keep the flat local level: every block must reach its one
//! destination anyway, so a tree of NUMA leaders adds a copy without saving a crossing.

use std::sync::Arc;

use bytemuck::Pod;

use super::super::fold::zeroed;
use super::super::hierarchy::{Grouping, Levels};
use super::super::op::Op;
use super::super::select::{Pick, Tuning};
use super::super::transport::LevelRuns;
use crate::comm::Comm;
use crate::error::Result;

/// The local level of one hierarchical operation: the members in this process, and its NUMA
/// split where there is one.
pub(super) struct LocalLevel<'l> {
    flat: Comm,
    numa: Option<NumaSplit<'l>>,
    /// This rank's place in `flat`.
    local_rank: usize,
}

struct NumaSplit<'l> {
    /// The local ranks grouped by NUMA node.
    nodes: &'l Grouping,
    /// The members on this rank's node.
    node: Comm,
    /// One leader per node, on node leaders.
    node_leaders: Option<Comm>,
}

impl<'l> LocalLevel<'l> {
    /// The local level of `levels`, selecting algorithms from `tuning` (the parent operation's).
    pub(super) fn new(levels: &'l Levels, tuning: &Arc<Tuning>) -> Self {
        let flat = levels.local(tuning);
        let numa = levels.numa.as_ref().map(|numa| NumaSplit {
            nodes: &numa.nodes,
            node: numa.node(tuning),
            node_leaders: numa.node_leaders(tuning),
        });
        LocalLevel { local_rank: flat.rank(), flat, numa }
    }

    /// The members in this process (for the steps that keep the flat level).
    pub(super) fn flat(&self) -> &Comm {
        &self.flat
    }

    /// `count` local steps of one kind, numbered now (see [`LevelRuns`]). They go through the
    /// NUMA split where there is one, unless `in_any_order` is false (a non-commutative
    /// reduce) and the nodes interleave in rank order: then combining node by node would
    /// reorder the operands.
    pub(super) fn runs(&self, count: u64, blocking: bool, in_any_order: bool) -> LocalRuns<'_> {
        let steps = match &self.numa {
            _ if self.flat.size() == 1 => Steps::Alone,
            Some(numa) if in_any_order || numa.nodes.is_contiguous() => Steps::Numa {
                nodes: numa.nodes,
                node: (numa.node.size() > 1).then(|| LevelRuns::take(&numa.node, count, blocking)),
                across: numa.node_leaders.as_ref().map(|leaders| LevelRuns::take(leaders, count, blocking)),
            },
            _ => Steps::Flat(LevelRuns::take(&self.flat, count, blocking)),
        };
        LocalRuns { steps, local_rank: self.local_rank }
    }
}

/// Local steps of one hierarchical operation, numbered when it started.
pub(super) struct LocalRuns<'c> {
    steps: Steps<'c>,
    local_rank: usize,
}

enum Steps<'c> {
    /// The only member in this process: nothing to do.
    Alone,
    Flat(LevelRuns<'c>),
    Numa {
        nodes: &'c Grouping,
        /// `None` alone on the node.
        node: Option<LevelRuns<'c>>,
        /// On node leaders.
        across: Option<LevelRuns<'c>>,
    },
}

impl LocalRuns<'_> {
    /// The next step: `buf` of local rank `root` to every member.
    pub(super) async fn bcast(&self, buf: &mut [u8], root: usize) -> Result<()> {
        match &self.steps {
            Steps::Alone => Ok(()),
            Steps::Flat(runs) => runs.next()?.dispatch_bcast(buf, root, Pick::Tuned).await,
            Steps::Numa { nodes, node, across } => {
                let root_node = nodes.group_of(root);
                let in_root_node = nodes.group_of(self.local_rank) == root_node;
                let node_root = if in_root_node { nodes.rank_in_group(root) } else { 0 };
                let node_step = async |buf: &mut [u8]| match node {
                    Some(runs) => runs.next()?.dispatch_bcast(buf, node_root, Pick::Tuned).await,
                    None => Ok(()),
                };
                let across_step = async |buf: &mut [u8]| match across {
                    Some(runs) => runs.next()?.dispatch_bcast(buf, root_node, Pick::Tuned).await,
                    None => Ok(()),
                };
                if in_root_node {
                    node_step(buf).await?;
                    across_step(buf).await
                } else {
                    across_step(buf).await?;
                    node_step(buf).await
                }
            }
        }
    }

    /// The next step: every member's `send` combined into `recv` on local rank 0 (the process's
    /// leader), in local rank order; `recv` is not written elsewhere.
    pub(super) async fn reduce<T: Pod>(&self, send: &[T], recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
        match &self.steps {
            Steps::Alone => {
                recv.copy_from_slice(send);
                Ok(())
            }
            Steps::Flat(runs) => runs.next()?.dispatch_reduce(send, recv, op, 0, Pick::Tuned).await,
            Steps::Numa { node, across: None, .. } => {
                let runs = node.as_ref().expect("a member that leads no node shares it");
                runs.next()?.dispatch_reduce(send, &mut [], op, 0, Pick::Tuned).await
            }
            Steps::Numa { node, across: Some(across), .. } => {
                let mut partial = zeroed::<T>(send.len());
                match node {
                    Some(runs) => runs.next()?.dispatch_reduce(send, &mut partial, op, 0, Pick::Tuned).await?,
                    None => partial.copy_from_slice(send),
                }
                across.next()?.dispatch_reduce(&partial, recv, op, 0, Pick::Tuned).await
            }
        }
    }

    /// The next step: the first half of a barrier; when it ends on local rank 0, every member
    /// has arrived.
    pub(super) async fn arrive(&self) -> Result<()> {
        self.barrier_in(false).await
    }

    /// The next step: the second half of a barrier; it ends on a member only after local
    /// rank 0 started it.
    pub(super) async fn depart(&self) -> Result<()> {
        self.barrier_in(true).await
    }

    /// A barrier on the node and one among the node leaders, in that order or (`leaders_first`)
    /// the other.
    async fn barrier_in(&self, leaders_first: bool) -> Result<()> {
        let (node, across) = match &self.steps {
            Steps::Alone => return Ok(()),
            Steps::Flat(runs) => return runs.next()?.barrier().await,
            Steps::Numa { node, across, .. } => (node, across),
        };
        let (first, second) = if leaders_first { (across, node) } else { (node, across) };
        for runs in [first, second].into_iter().flatten() {
            runs.next()?.barrier().await?;
        }
        Ok(())
    }
}
