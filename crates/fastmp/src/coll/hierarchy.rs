//! The levels of a communicator's hierarchical collectives: the members inside this process
//! (the local level) and one leader per process (the leaders' level), and, where this
//! process's members span several NUMA nodes, the local level split once more: the members on
//! this NUMA node, and one leader per NUMA node inside the process. Computed from the device's
//! placement and built on first use, locally, on contexts the communicator reserved at
//! creation ([`LEVEL_CONTEXTS`]), so building them never communicates.

use std::cell::OnceCell;
use std::rc::Rc;
use std::sync::Arc;

use super::select::{CommLocality, Tuning};
use crate::comm::Comm;
use crate::device::ContextId;
use crate::group::Group;

/// Offsets, from a communicator's own context, of its levels' context pairs (the
/// communicator's own pair comes first).
const LOCAL_LEVEL_CONTEXT: ContextId = 2;
const LEADERS_LEVEL_CONTEXT: ContextId = 4;
const NUMA_NODE_LEVEL_CONTEXT: ContextId = 6;
const NUMA_LEADERS_LEVEL_CONTEXT: ContextId = 8;
const PEERS_LEVEL_CONTEXT: ContextId = 10;

/// Contexts a communicator reserves for its levels, after its own pair (`CONTEXTS_PER_COMM`
/// is built from this, so adding a level changes one place).
pub(crate) const LEVEL_CONTEXTS: ContextId = PEERS_LEVEL_CONTEXT + 2 - LOCAL_LEVEL_CONTEXT;

/// A communicator's members grouped by a key (their process, or their NUMA node inside one
/// process): groups are numbered in the order of their lowest member, members keep their order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Grouping {
    /// Group of each member.
    group_of: Box<[usize]>,
    /// Members of each group, ascending; the first is the group's leader.
    members: Box<[Box<[usize]>]>,
    /// Whether every group's members are consecutive ranks, so that concatenating the groups in
    /// leader order is rank order (what non-commutative reductions over the levels need).
    contiguous: bool,
}

impl Grouping {
    /// Groups members `0..keys.len()` by `keys[member]`; `None` unless that gives a hierarchy:
    /// at least two groups, and some group with at least two members.
    pub(crate) fn by_key(keys: &[usize]) -> Option<Grouping> {
        let mut firsts: Vec<usize> = Vec::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        let group_of: Box<[usize]> = keys
            .iter()
            .enumerate()
            .map(|(member, key)| {
                let group = firsts.iter().position(|&f| keys[f] == *key).unwrap_or_else(|| {
                    firsts.push(member);
                    members.push(Vec::new());
                    firsts.len() - 1
                });
                members[group].push(member);
                group
            })
            .collect();
        if members.len() < 2 || members.iter().all(|m| m.len() < 2) {
            return None;
        }
        let contiguous = members.iter().all(|m| m.windows(2).all(|w| w[1] == w[0] + 1));
        Some(Grouping { group_of, members: members.into_iter().map(Vec::into_boxed_slice).collect(), contiguous })
    }

    /// The group of `member`.
    pub(crate) fn group_of(&self, member: usize) -> usize {
        self.group_of[member]
    }

    /// Members of `group`, ascending.
    pub(crate) fn members(&self, group: usize) -> &[usize] {
        &self.members[group]
    }

    /// The groups' leaders (lowest members), in group order.
    pub(crate) fn leaders(&self) -> Vec<usize> {
        self.members.iter().map(|m| m[0]).collect()
    }

    /// Number of groups.
    pub(crate) fn groups(&self) -> usize {
        self.members.len()
    }

    /// `member`'s position inside its group (0 for the leader).
    pub(crate) fn rank_in_group(&self, member: usize) -> usize {
        let members = self.members(self.group_of(member));
        members.iter().position(|&m| m == member).expect("a member is in its group")
    }

    /// Whether every group is a run of consecutive members.
    pub(crate) fn is_contiguous(&self) -> bool {
        self.contiguous
    }

    /// The member at position `place` of every group, in group order, where all groups have
    /// as many members (else `None`).
    pub(crate) fn peers_at(&self, place: usize) -> Option<Vec<usize>> {
        let size = self.members[0].len();
        self.members.iter().all(|m| m.len() == size).then(|| self.members.iter().map(|m| m[place]).collect())
    }
}

/// The levels of one communicator, as seen from this rank.
pub(crate) struct Levels {
    /// The communicator's members grouped by process.
    pub(crate) processes: Grouping,
    /// The members in this process, in communicator order (the device's native collectives).
    local: Comm,
    /// One leader per process, in process order; only on leaders.
    leaders: Option<Comm>,
    /// The members at this rank's place in their process, one per process, in process order;
    /// where every process holds as many members (each member then owns a slice of a vector).
    peers: Option<Comm>,
    /// The local level split by NUMA node, where this process's members span several.
    pub(crate) numa: Option<NumaLevels>,
}

/// The local level of a process whose members span several NUMA nodes, as seen from this rank.
pub(crate) struct NumaLevels {
    /// The local level's members (local ranks) grouped by NUMA node.
    pub(crate) nodes: Grouping,
    /// The members of this process on this rank's NUMA node, in communicator order.
    node: Comm,
    /// One leader per NUMA node of this process, in node order; only on node leaders. The
    /// first is the process's leader (local rank 0, the lowest member of the first node).
    node_leaders: Option<Comm>,
}

impl NumaLevels {
    /// The members on this rank's NUMA node, selecting algorithms from `tuning`.
    pub(crate) fn node(&self, tuning: &Arc<Tuning>) -> Comm {
        Comm { tuning: tuning.clone(), ..self.node.clone() }
    }

    /// The NUMA nodes' leaders, selecting algorithms from `tuning`; `None` on other members.
    pub(crate) fn node_leaders(&self, tuning: &Arc<Tuning>) -> Option<Comm> {
        self.node_leaders.as_ref().map(|leaders| Comm { tuning: tuning.clone(), ..leaders.clone() })
    }
}

impl Levels {
    /// The local level, selecting algorithms from `tuning` (the parent operation's).
    pub(crate) fn local(&self, tuning: &Arc<Tuning>) -> Comm {
        Comm { tuning: tuning.clone(), ..self.local.clone() }
    }

    /// The leaders' level, selecting algorithms from `tuning`; `None` on a non-leader.
    pub(crate) fn leaders(&self, tuning: &Arc<Tuning>) -> Option<Comm> {
        self.leaders.as_ref().map(|leaders| Comm { tuning: tuning.clone(), ..leaders.clone() })
    }

    /// The peers' level, selecting algorithms from `tuning`; `None` where processes hold
    /// different numbers of members.
    pub(crate) fn peers(&self, tuning: &Arc<Tuning>) -> Option<Comm> {
        self.peers.as_ref().map(|peers| Comm { tuning: tuning.clone(), ..peers.clone() })
    }

    /// Runs `f` on every level communicator this rank belongs to (the local level, the
    /// leaders' level on a leader, the peers' level, its NUMA node's and the node leaders'
    /// levels where there are some), as they are: for bookkeeping, not for running collectives.
    pub(crate) fn each_level(&self, f: impl Fn(&Comm)) {
        f(&self.local);
        let numa = self.numa.as_ref();
        let (leaders, peers) = (self.leaders.as_ref(), self.peers.as_ref());
        [leaders, peers, numa.map(|n| &n.node), numa.and_then(|n| n.node_leaders.as_ref())]
            .into_iter()
            .flatten()
            .for_each(f);
    }
}

/// What a communicator computes once about its spread, and the algorithm choices that follow
/// from it (shared by its clones).
#[derive(Default)]
pub(crate) struct LevelCache {
    locality: OnceCell<CommLocality>,
    levels: OnceCell<Option<Rc<Levels>>>,
    pub(crate) choices: super::select::LastChoices,
}

impl Comm {
    /// Where this communicator's members run (for the selection rules' `locality`).
    pub(crate) fn spread_locality(&self) -> CommLocality {
        *self.spread.locality.get_or_init(|| CommLocality::of(self.placement(), self.group.members()))
    }

    /// The levels of this communicator's hierarchical collectives, if its members span several
    /// processes and some process holds several of them. Built on first use without
    /// communicating: every member derives the same levels from the placement.
    pub(crate) fn levels(&self) -> Option<&Rc<Levels>> {
        self.spread.levels.get_or_init(|| self.build_levels().map(Rc::new)).as_ref()
    }

    fn build_levels(&self) -> Option<Levels> {
        let placement = self.placement();
        let keys: Vec<usize> = self.group.members().iter().map(|&w| placement.process_of(w)).collect();
        let processes = Grouping::by_key(&keys)?;
        let world = |ranks: &[usize]| ranks.iter().map(|&r| self.group.world_rank(r)).collect::<Vec<_>>();
        let group = |members: Vec<usize>| {
            Group::from_members(members, self.dev.size(), self.dev.rank()).expect("level members are distinct ranks")
        };
        let level = |members: &[usize], offset: ContextId| self.derived(self.context + offset, group(world(members)));
        let ours = processes.members(processes.group_of(self.rank));
        let local_rank = processes.rank_in_group(self.rank);
        let local = level(ours, LOCAL_LEVEL_CONTEXT);
        let leaders = (local_rank == 0).then(|| level(&processes.leaders(), LEADERS_LEVEL_CONTEXT));
        let peers = processes.peers_at(local_rank).map(|peers| level(&peers, PEERS_LEVEL_CONTEXT));
        let numa_keys: Option<Vec<usize>> = ours.iter().map(|&r| placement.numa_of(self.group.world_rank(r))).collect();
        let numa = numa_keys.and_then(|keys| Grouping::by_key(&keys)).map(|nodes| {
            let in_comm = |locals: &[usize]| locals.iter().map(|&l| ours[l]).collect::<Vec<_>>();
            let node = level(&in_comm(nodes.members(nodes.group_of(local_rank))), NUMA_NODE_LEVEL_CONTEXT);
            let node_leaders = (nodes.rank_in_group(local_rank) == 0)
                .then(|| level(&in_comm(&nodes.leaders()), NUMA_LEADERS_LEVEL_CONTEXT));
            NumaLevels { nodes, node, node_leaders }
        });
        Some(Levels { processes, local, leaders, peers, numa })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_group_by_key_in_order_of_their_lowest_member() {
        let g = Grouping::by_key(&[0, 0, 0, 1, 1, 1]).unwrap();
        assert_eq!((g.groups(), g.members(1), g.group_of(4), g.rank_in_group(4)), (2, &[3, 4, 5][..], 1, 1));
        assert!(g.is_contiguous());
        let g = Grouping::by_key(&[7, 3, 7, 3, 9]).unwrap();
        assert_eq!((g.groups(), g.members(0), g.members(1), g.members(2)), (3, &[0, 2][..], &[1, 3][..], &[4][..]));
        assert!(!g.is_contiguous(), "interleaved processes are not in rank order");
    }

    #[test]
    fn no_hierarchy_without_two_groups_and_a_shared_one() {
        assert_eq!(Grouping::by_key(&[4, 4, 4]), None, "one process");
        assert_eq!(Grouping::by_key(&[0, 1, 2]), None, "one member per process");
        assert_eq!(Grouping::by_key(&[]), None);
        assert!(Grouping::by_key(&[0, 1, 1]).is_some());
    }

    /// 9 ranks in processes of 4, 4 and 1, with 3 simulated NUMA nodes per process: nodes of
    /// 2, 1 and 1 members in the first two processes, and none split in the last.
    #[test]
    fn processes_spanning_numa_nodes_get_a_numa_level() {
        let seen = crate::Config::new()
            .np(9)
            .simulate_processes(4)
            .simulate_numa(3)
            .run(|world| {
                let levels = world.levels().expect("several processes").clone();
                let numa = levels.numa.as_ref().map(|numa| {
                    let tuning = world.tuning.clone();
                    let nodes: Vec<Vec<usize>> =
                        (0..numa.nodes.groups()).map(|g| numa.nodes.members(g).to_vec()).collect();
                    (nodes, numa.node(&tuning).size(), numa.node_leaders(&tuning).map(|l| l.size()))
                });
                Ok(numa)
            })
            .unwrap();
        let split = vec![vec![0, 1], vec![2], vec![3]];
        for (rank, numa) in seen[..8].iter().enumerate() {
            let (nodes, node_size, leaders) = numa.clone().expect("a NUMA level");
            assert_eq!(nodes, split, "rank {rank}");
            assert_eq!(node_size, if rank % 4 < 2 { 2 } else { 1 }, "rank {rank}");
            assert_eq!(leaders, (rank % 4 != 1).then_some(3), "rank {rank}");
        }
        assert!(seen[8].is_none(), "a process of one member has no NUMA level");
        let flat =
            crate::Config::new().np(6).simulate_processes(3).run(|world| Ok(world.levels().unwrap().numa.is_none()));
        assert_eq!(flat.unwrap(), [true; 6], "one NUMA node: no NUMA level");
    }

    #[test]
    fn a_numa_level_groups_one_process_by_node() {
        // The same computation splits a process's members by NUMA node (2 sockets, 2 + 3 ranks).
        let g = Grouping::by_key(&[0, 0, 1, 1, 1]).unwrap();
        assert_eq!((g.groups(), g.rank_in_group(2), g.members(0)), (2, 0, &[0, 1][..]));
    }
}
