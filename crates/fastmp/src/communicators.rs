//! Creating communicators: dup, split, create from a group. Each new communicator gets a fresh
//! pair of contexts agreed on by its parent's ranks, so its traffic never matches another's.

use std::rc::Rc;

use crate::coll::op::Max;
use crate::comm::{CONTEXTS_PER_COMM, Comm};
use crate::device::requests::InFlight;
use crate::device::{ContextId, Device, Locality, MatchSpec, RawStatus, SendMode, Source, TAG_UB};
use crate::error::{Error, Result};
use crate::group::{Group, GroupOrdering};

/// Which ranks [`Comm::split_type`] puts together (MPI_Comm_split_type's split types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SplitType {
    /// Process level: ranks in the same process, thread ranks sharing one address space.
    SharedProcess,
    /// NUMA-node level: ranks on the same node whose threads are bound inside the same NUMA node
    /// (their allowed CPUs all lie in it, on [`topology`](crate::topology)), whichever process
    /// they belong to. A rank whose allowed CPUs span several NUMA nodes (an unbound thread) is
    /// grouped with the other such ranks of its own process, as MPI implementations treat an
    /// unbound process as a group of its own. On a machine with one NUMA node every rank of a
    /// node is inside it, so this is [`SharedNode`](Self::SharedNode)'s split.
    SharedNuma,
    /// Node level: ranks on the same node, which can share memory (MPI_COMM_TYPE_SHARED).
    SharedNode,
}

/// Where a rank stands for [`SplitType::SharedNuma`], besides its node: bound inside one NUMA
/// node, or unbound and grouped by its process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NumaGroup {
    Bound { numa: usize },
    Unbound { process: usize },
}

impl NumaGroup {
    /// The group of a thread allowed to run on `allowed` CPUs of `machine`, in `process`.
    fn of(machine: &crate::MachineTopology, allowed: &[usize], process: usize) -> Self {
        match machine.numa_of_cpus(allowed) {
            Some(numa) => NumaGroup::Bound { numa },
            None => NumaGroup::Unbound { process },
        }
    }

    fn words(self) -> [u64; 2] {
        match self {
            NumaGroup::Bound { numa } => [0, numa as u64],
            NumaGroup::Unbound { process } => [1, process as u64],
        }
    }
}

/// How two communicators relate (MPI_Comm_compare's results).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Comparison {
    /// The same communicator: handles cloned from one another (MPI_IDENT).
    Ident,
    /// Same ranks in the same order, different contexts, e.g. a `dup` (MPI_CONGRUENT).
    Congruent,
    /// Same ranks in another order (MPI_SIMILAR).
    Similar,
    /// Different ranks (MPI_UNEQUAL).
    Unequal,
}

/// Setup traffic that uses a communicator's collective context next to its collectives, under
/// tags whose low 5 bits are zero (every collective's tag has them non-zero).
#[derive(Clone, Copy)]
pub(crate) enum Reserved {
    CreateGroup = 0,
    IntercommCreate = 1,
}

/// The reserved collective-context tag for `kind` and the user's `tag` (modulo 2^25).
pub(crate) fn reserved_tag(kind: Reserved, tag: i32) -> i32 {
    const USER_BITS: u32 = 25;
    let user = tag as u32 & ((1 << USER_BITS) - 1);
    (((kind as u32) << USER_BITS | user) << 5) as i32
}

/// A digest of a group's member list (FNV-1a over the world ranks, then the size).
fn group_digest(group: &Group) -> u64 {
    group.members().iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &w| (h ^ w as u64).wrapping_mul(0x0000_0100_0000_01b3))
        ^ group.size() as u64
}

/// Sends `out` to world rank `to` and receives into `inc` what `spec` matches, at once: the
/// receive is posted first, so two ranks exchanging never wait for each other whatever the
/// sizes. Setup and intercommunicator traffic on internal contexts and tags; `inc` must be
/// filled exactly.
pub(crate) fn exchange(
    call: &str,
    dev: &dyn Device,
    out: &[u8],
    to: usize,
    inc: &mut [u8],
    spec: MatchSpec,
) -> Result<RawStatus> {
    let expected = inc.len();
    // SAFETY: the receive is waited for below or, on an early return, dropped, which releases
    // it before `inc`'s borrow ends; it is never leaked.
    let recv = unsafe { InFlight::recv(dev, inc, spec) }?;
    dev.send(out, to, spec.tag, spec.context, SendMode::Standard)?;
    let raw = recv.wait()?;
    expect_bytes(call, raw, expected)
}

/// `raw` if it carried exactly `expected` bytes; a shorter message means the ranks' arguments
/// differ (a longer one already failed as truncated).
pub(crate) fn expect_bytes(call: &str, raw: RawStatus, expected: usize) -> Result<RawStatus> {
    if raw.bytes == expected {
        return Ok(raw);
    }
    Err(Error::InvalidArgument(format!(
        "{call}: expected {expected} bytes from world rank {}, got {} (the ranks' arguments differ)",
        raw.source, raw.bytes
    )))
}

impl Comm {
    /// A context pair unused by every rank of this communicator: the maximum of the ranks' next
    /// free context. Two communicators that share a process therefore never share a context;
    /// disjoint ones may, which is harmless because their messages cannot meet.
    fn agree_context(&self) -> Result<ContextId> {
        self.agree_context_vetoed(0).map(|(context, _)| context)
    }

    /// [`Comm::agree_context`] plus the maximum of every rank's `veto` in the same allreduce, so
    /// an argument error one rank sees reaches all of them at no extra cost.
    fn agree_context_vetoed(&self, veto: u64) -> Result<(ContextId, u64)> {
        let mut agreed = [0u64; 2];
        self.allreduce(&[u64::from(self.process.next_context.get()), veto], &mut agreed, Max)?;
        Ok((self.take_contexts(agreed[0], 1)?, agreed[1]))
    }

    /// Claims the contexts of `comms` communicators ([`CONTEXTS_PER_COMM`] each) from `agreed`
    /// (a maximum of next free contexts) for this process; the first is returned.
    pub(crate) fn take_contexts(&self, agreed: u64, comms: u64) -> Result<ContextId> {
        let exhausted = || Error::InvalidArgument("communicator contexts exhausted".into());
        let next = comms
            .checked_mul(u64::from(CONTEXTS_PER_COMM))
            .and_then(|count| agreed.checked_add(count))
            .and_then(|n| ContextId::try_from(n).ok())
            .ok_or_else(exhausted)?;
        self.process.next_context.set(next);
        Ok(agreed as ContextId)
    }

    pub(crate) fn derived(&self, context: ContextId, group: Group) -> Comm {
        Comm::with_context(self.dev.clone(), context, group, self.tuning.clone(), self.process.clone())
    }

    /// A communicator with the same ranks but its own contexts (MPI_Comm_dup). Collective.
    ///
    /// ```
    /// fastmp::run(2, |world| {
    ///     let library = world.dup()?;
    ///     // Same ranks, separate traffic: this message cannot be received on `world`.
    ///     if world.rank() == 0 {
    ///         library.send(&[1u8], 1, 0)?;
    ///     } else {
    ///         let mut b = [0u8];
    ///         library.recv(&mut b, 0, 0)?;
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn dup(&self) -> Result<Comm> {
        self.check_live()?;
        let context = self.agree_context()?;
        let copy = self.derived(context, self.group.clone());
        Ok(Comm { info: Rc::new(self.info.for_dup()), ..copy })
    }

    /// Splits into one communicator per `color`, ordering ranks by `key` and then by rank
    /// (MPI_Comm_split). Ranks passing `None` (MPI_UNDEFINED) get `None`. Collective.
    ///
    /// ```
    /// fastmp::run(4, |world| {
    ///     let half = world.split(Some((world.rank() % 2) as u32), 0)?.unwrap();
    ///     assert_eq!((half.size(), half.rank()), (2, world.rank() / 2));
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Comm>> {
        self.check_live()?;
        let mine = [color.map_or(-1, i64::from), i64::from(key)];
        let mut all = vec![0i64; 2 * self.size()];
        self.allgather(&mine, &mut all)?;
        let context = self.agree_context()?;
        let Some(color) = color else { return Ok(None) };
        let mut chosen: Vec<(i64, usize)> =
            (0..self.size()).filter(|&r| all[2 * r] == i64::from(color)).map(|r| (all[2 * r + 1], r)).collect();
        chosen.sort_unstable();
        let members = chosen.iter().map(|&(_, r)| self.group.world_rank(r)).collect();
        let group = Group::from_members(members, self.dev.size(), self.dev.rank())?;
        Ok(Some(self.derived(context, group)))
    }

    /// Splits into one communicator per process, NUMA node or node ([`Comm::placement`],
    /// [`SplitType`]), ordering ranks by `key` and then by rank (MPI_Comm_split_type); returns
    /// this rank's. Collective; every rank must pass the same `split`, or every rank gets `Err`.
    ///
    /// ```
    /// use fastmp::SplitType;
    /// fastmp::run(4, |world| {
    ///     // Thread ranks of one process (the shm device): one communicator holds them all.
    ///     let local = world.split_type(SplitType::SharedProcess, 0)?;
    ///     assert_eq!(local.size(), world.size());
    ///     // Keys order the new ranks: here the reverse of the world's.
    ///     let node = world.split_type(SplitType::SharedNode, -(world.rank() as i32))?;
    ///     assert_eq!(node.rank(), world.size() - 1 - world.rank());
    ///     // Unpinned threads on one NUMA node, or grouped per process where they span several:
    ///     // either way, one communicator here.
    ///     let numa = world.split_type(SplitType::SharedNuma, 0)?;
    ///     assert_eq!(numa.size(), world.size());
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn split_type(&self, split: SplitType, key: i32) -> Result<Comm> {
        self.check_live()?;
        let kind = split as u64;
        let mut extremes = [0u64; 2];
        self.allreduce(&[kind, !kind], &mut extremes, Max)?;
        if extremes[0] != kind || !extremes[1] != kind {
            return Err(Error::InvalidArgument("split_type: the ranks passed different split types".into()));
        }
        let me = self.group.world_rank(self.rank);
        let index = match split {
            SplitType::SharedProcess => self.placement().process_of(me),
            SplitType::SharedNode => self.placement().node_of(me),
            SplitType::SharedNuma => self.numa_group_index(me)?,
        };
        let color = u32::try_from(index)
            .map_err(|_| Error::InvalidArgument(format!("split_type: process or node index {index} exceeds u32")))?;
        let comm = self.split(Some(color), key)?;
        Ok(comm.expect("every rank passed a colour"))
    }

    /// The lowest rank of this communicator in world rank `me`'s [`SplitType::SharedNuma`] group
    /// (same node and [`NumaGroup`]), agreed by an allgather of every rank's group.
    fn numa_group_index(&self, me: usize) -> Result<usize> {
        let placement = self.placement();
        let allowed = crate::launch::affinity::allowed_cpus();
        let group = NumaGroup::of(crate::topology(), &allowed, placement.process_of(me));
        let [kind, id] = group.words();
        let mine = [placement.node_of(me) as u64, kind, id];
        let mut all = vec![0u64; 3 * self.size()];
        self.allgather(&mine, &mut all)?;
        Ok(all.chunks_exact(3).position(|other| other == mine).expect("this rank's own entry"))
    }

    /// Where rank `rank` of this communicator runs, seen from this rank: same process, same node
    /// or another node.
    pub fn locality(&self, rank: usize) -> Result<Locality> {
        if rank >= self.size() {
            return Err(Error::RankOutOfRange { rank, size: self.size() });
        }
        let (me, peer) = (self.group.world_rank(self.rank), self.group.world_rank(rank));
        Ok(self.placement().locality(me, peer))
    }

    /// A communicator over `group` (MPI_Comm_create). Collective over this communicator.
    ///
    /// Every rank passes the group it belongs to, the same as the other members of that group
    /// pass; the groups must be subsets of this communicator and disjoint, so one call can make
    /// several communicators at once (MPI-2.2). A rank in none of them passes an empty group,
    /// or, as in MPI-1, the one group every rank passes. Ranks outside their group get `None`.
    /// Other arguments are an `Err` on every rank.
    ///
    /// ```
    /// fastmp::run(5, |world| {
    ///     // Ranks 0-1 and 2-3 make a communicator each; rank 4 makes none.
    ///     let mine = match world.rank() {
    ///         0 | 1 => world.group().incl(&[0, 1])?,
    ///         2 | 3 => world.group().incl(&[3, 2])?,
    ///         _ => world.group().incl(&[])?,
    ///     };
    ///     let pair = world.create(&mine)?;
    ///     assert_eq!(pair.map(|c| c.rank()), [Some(0), Some(1), Some(1), Some(0), None][world.rank()]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn create(&self, group: &Group) -> Result<Option<Comm>> {
        self.check_live()?;
        let n = self.size();
        // Every rank learns what every rank passed: its group's digest, and a member of it
        // outside this communicator (world rank + 1), if any.
        let outsider = group.members().iter().copied().find(|&w| self.group.group_rank_of(w).is_none());
        let digest = group_digest(group);
        let mut all = vec![0u64; 2 * n];
        self.allgather(&[digest, outsider.map_or(0, |w| w as u64 + 1)], &mut all)?;
        if let Some(r) = (0..n).find(|&r| all[2 * r + 1] != 0) {
            return Err(Error::InvalidArgument(format!(
                "create: process {} of the group is not in the communicator (the group rank {r} passed)",
                all[2 * r + 1] - 1
            )));
        }
        // Every member of the group this rank passed must have passed the same group; the
        // smallest (rank, member) pair that did not wins the veto, so every rank reports it.
        let differs =
            group.members().iter().filter_map(|&w| self.group.group_rank_of(w)).find(|&m| all[2 * m] != digest);
        let veto = differs.map_or(0, |m| u64::MAX - (self.rank * n + m) as u64);
        let (context, veto) = self.agree_context_vetoed(veto)?;
        if veto != 0 {
            let pair = (u64::MAX - veto) as usize;
            return Err(Error::InvalidArgument(format!(
                "create: the ranks passed different groups: rank {} passed a group containing rank {}, which \
                 passed another (each rank passes the group it belongs to, or an empty group; the groups \
                 must be disjoint)",
                pair / n,
                pair % n
            )));
        }
        Ok(group.rank().map(|_| self.derived(context, group.clone())))
    }

    /// A communicator over `group`, collective only over the group's members: ranks outside it
    /// do not call it (MPI_Comm_create_group). `group` must be a subset of this communicator,
    /// the same on every member. `tag` tells apart concurrent calls whose groups share ranks;
    /// it does not meet point-to-point messages, and tags equal modulo 2^25 count as equal.
    ///
    /// ```
    /// fastmp::run(4, |world| {
    ///     if world.rank() >= 1 {
    ///         let upper = world.create_group(&world.group().incl(&[1, 2, 3])?, 7)?;
    ///         assert_eq!(upper.rank(), world.rank() - 1);
    ///         upper.barrier()?;
    ///     }
    ///     // Rank 0 is free to do something else meanwhile.
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn create_group(&self, group: &Group, tag: i32) -> Result<Comm> {
        self.check_live()?;
        if !(0..=TAG_UB).contains(&tag) {
            return Err(Error::TagOutOfRange { tag, max: TAG_UB });
        }
        let Some(me) = group.rank() else {
            return Err(Error::InvalidArgument(
                "create_group: this rank is not in the group (only the group's members call create_group)".into(),
            ));
        };
        if let Some(&outsider) = group.members().iter().find(|&&w| self.group.group_rank_of(w).is_none()) {
            return Err(Error::InvalidArgument(format!(
                "create_group: world rank {outsider} of the group is not in the communicator"
            )));
        }
        // Max of (next context, digest, !digest) over the members: a dissemination, which gives
        // every member the maximum of an idempotent operation after ceil(log2 n) rounds.
        let digest = group_digest(group);
        let mut agreed = [u64::from(self.process.next_context.get()), digest, !digest];
        let (n, tag) = (group.size(), reserved_tag(Reserved::CreateGroup, tag));
        let mut step = 1;
        while step < n {
            let (to, from) = (group.world_rank((me + step) % n), group.world_rank((me + n - step) % n));
            let mut got = [0u64; 3];
            let spec = MatchSpec { context: self.coll_context(), source: Source::Rank(from), tag };
            let got_bytes = bytemuck::cast_slice_mut(&mut got);
            exchange("create_group", &*self.dev, bytemuck::cast_slice(&agreed), to, got_bytes, spec)?;
            agreed.iter_mut().zip(got).for_each(|(a, g)| *a = (*a).max(g));
            step *= 2;
        }
        if agreed[1] != digest || !agreed[2] != digest {
            return Err(Error::InvalidArgument("create_group: the members passed different groups".into()));
        }
        let context = self.take_contexts(agreed[0], 1)?;
        Ok(self.derived(context, group.clone()))
    }

    /// How this communicator relates to `other` (MPI_Comm_compare). Local.
    ///
    /// ```
    /// use fastmp::Comparison;
    /// fastmp::run(2, |world| {
    ///     assert_eq!(world.compare(&world.clone()), Comparison::Ident);
    ///     assert_eq!(world.compare(&world.dup()?), Comparison::Congruent);
    ///     let reversed = world.split(Some(0), -(world.rank() as i32))?.unwrap();
    ///     assert_eq!(world.compare(&reversed), Comparison::Similar);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn compare(&self, other: &Comm) -> Comparison {
        // Communicators of one process never share a context, so an equal context is the same
        // communicator (a clone of the handle).
        match self.group.compare(&other.group) {
            GroupOrdering::Identical if self.context == other.context => Comparison::Ident,
            GroupOrdering::Identical => Comparison::Congruent,
            GroupOrdering::Similar => Comparison::Similar,
            GroupOrdering::Unequal => Comparison::Unequal,
        }
    }

    /// Releases this handle to the communicator (MPI_Comm_free). Pending operations started on
    /// it are unaffected; its contexts are never reused.
    pub fn free(self) {}
}

#[cfg(test)]
mod tests {
    use super::NumaGroup;
    use crate::MachineTopology;

    #[test]
    fn numa_group_is_the_bound_node_or_the_process() {
        let tree = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/sysfs/numa-2socket");
        let machine = MachineTopology::from_sysfs(std::path::Path::new(tree)).expect("sysfs tree");
        assert_eq!(NumaGroup::of(&machine, &[0, 1, 8], 3), NumaGroup::Bound { numa: 0 });
        assert_eq!(NumaGroup::of(&machine, &[13], 3), NumaGroup::Bound { numa: 1 });
        let all: Vec<usize> = (0..16).collect();
        assert_eq!(NumaGroup::of(&machine, &all, 3), NumaGroup::Unbound { process: 3 });
        assert_eq!(NumaGroup::of(&machine, &[3, 4], 5), NumaGroup::Unbound { process: 5 });
        assert_eq!(NumaGroup::of(&machine, &[], 5), NumaGroup::Unbound { process: 5 });
        assert_ne!(NumaGroup::Bound { numa: 1 }.words(), NumaGroup::Unbound { process: 1 }.words());
    }
}
