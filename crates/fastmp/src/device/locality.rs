//! Where the ranks of a job run: which process and which node holds each world rank.
//!
//! Routing (a hybrid device sends to a thread peer by shared memory and to a remote one over the
//! network) and hierarchical collectives (leaders per process and per node) are both decisions on
//! this map, so every device answers it the same way.

/// Where a rank runs, seen from another rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Locality {
    /// Same process: the ranks are threads sharing one address space.
    SameProcess,
    /// Another process on the same node (shared memory between processes is possible).
    SameNode,
    /// Another node: only the network connects them.
    Remote,
}

/// The process and node of every world rank. Processes and nodes are numbered densely, in the
/// order of their lowest rank, so every rank computes the same numbers from the same map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    process: Vec<usize>,
    node: Vec<usize>,
    /// NUMA node of each rank where the launcher knows it (thread ranks pinned to one node's
    /// CPUs); empty when it knows none.
    numa: Vec<Option<usize>>,
}

impl Placement {
    /// Every rank a thread of one process on one node (the shm device).
    pub(crate) fn single_process(size: usize) -> Self {
        Placement { process: vec![0; size], node: vec![0; size], numa: Vec::new() }
    }

    /// `size` ranks numbered block-wise by process: ranks `p * per_process ..` share process `p`
    /// (the last block may be shorter), all on one node. The hybrid device's placement inside one
    /// node, and what `Config::simulate_processes` makes a shm world report.
    pub(crate) fn blocks(size: usize, per_process: usize) -> Self {
        let per_process = per_process.max(1);
        Placement { process: (0..size).map(|r| r / per_process).collect(), node: vec![0; size], numa: Vec::new() }
    }

    /// From any per-rank keys of process and node (pid, host name, ...): equal keys are the same
    /// process or node. Keys are renumbered densely in rank order.
    pub(crate) fn from_keys<P: PartialEq, N: PartialEq>(processes: &[P], nodes: &[N]) -> Self {
        assert_eq!(processes.len(), nodes.len(), "one process key and one node key per rank");
        Placement { process: dense(processes), node: dense(nodes), numa: Vec::new() }
    }

    /// The same placement with the NUMA node of each rank (`None` where unknown), as the
    /// launcher derives it from pinning and the machine's topology.
    pub(crate) fn with_numa(mut self, numa: Vec<Option<usize>>) -> Self {
        assert_eq!(numa.len(), self.size(), "one NUMA entry per rank");
        self.numa = numa;
        self
    }

    /// NUMA node of world rank `rank`, when known (the rank is pinned inside one NUMA node).
    pub fn numa_of(&self, rank: usize) -> Option<usize> {
        self.numa.get(rank).copied().flatten()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.process.len()
    }

    /// Process index of world rank `rank`.
    pub fn process_of(&self, rank: usize) -> usize {
        self.process[rank]
    }

    /// Node index of world rank `rank`.
    pub fn node_of(&self, rank: usize) -> usize {
        self.node[rank]
    }

    /// Number of distinct processes.
    pub fn processes(&self) -> usize {
        self.process.iter().max().map_or(0, |&p| p + 1)
    }

    /// Number of distinct nodes.
    pub fn nodes(&self) -> usize {
        self.node.iter().max().map_or(0, |&n| n + 1)
    }

    /// Where `peer` runs, seen from `me`.
    pub fn locality(&self, me: usize, peer: usize) -> Locality {
        if self.process[me] == self.process[peer] {
            Locality::SameProcess
        } else if self.node[me] == self.node[peer] {
            Locality::SameNode
        } else {
            Locality::Remote
        }
    }
}

/// Replaces each key by the index of its first occurrence among the distinct keys.
fn dense<K: PartialEq>(keys: &[K]) -> Vec<usize> {
    let mut firsts: Vec<&K> = Vec::new();
    keys.iter()
        .map(|k| match firsts.iter().position(|f| *f == k) {
            Some(i) => i,
            None => {
                firsts.push(k);
                firsts.len() - 1
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_numbered_in_rank_order() {
        let p = Placement::from_keys(&[7, 7, 3, 3, 9], &["b", "b", "b", "b", "a"]);
        assert_eq!((0..5).map(|r| p.process_of(r)).collect::<Vec<_>>(), [0, 0, 1, 1, 2]);
        assert_eq!((0..5).map(|r| p.node_of(r)).collect::<Vec<_>>(), [0, 0, 0, 0, 1]);
        assert_eq!((p.processes(), p.nodes()), (3, 2));
        assert_eq!(p.locality(0, 1), Locality::SameProcess);
        assert_eq!(p.locality(0, 2), Locality::SameNode);
        assert_eq!(p.locality(0, 4), Locality::Remote);
    }

    #[test]
    fn blocks_number_processes_block_wise() {
        let p = Placement::blocks(5, 2);
        assert_eq!((0..5).map(|r| p.process_of(r)).collect::<Vec<_>>(), [0, 0, 1, 1, 2]);
        assert_eq!((p.processes(), p.nodes()), (3, 1));
    }
}
