//! Creating communicators: dup, split, create from a group. Each new communicator gets a fresh
//! pair of contexts agreed on by its parent's ranks, so its traffic never matches another's.

use crate::coll::op::Max;
use crate::comm::Comm;
use crate::device::{ContextId, Locality};
use crate::error::{Error, Result};
use crate::group::Group;

/// Which ranks [`Comm::split_type`] puts together (MPI_Comm_split_type's split types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SplitType {
    /// Ranks in the same process: thread ranks sharing one address space.
    SharedProcess,
    /// Ranks on the same node, which can share memory (MPI_COMM_TYPE_SHARED).
    SharedNode,
}

impl Comm {
    /// A context pair unused by every rank of this communicator: the maximum of the ranks' next
    /// free context. Two communicators that share a process therefore never share a context;
    /// disjoint ones may, which is harmless because their messages cannot meet.
    fn agree_context(&self) -> Result<ContextId> {
        let mut agreed = [0 as ContextId];
        self.allreduce(&[self.process.next_context.get()], &mut agreed, Max)?;
        let next =
            agreed[0].checked_add(2).ok_or_else(|| Error::InvalidArgument("communicator contexts exhausted".into()))?;
        self.process.next_context.set(next);
        Ok(agreed[0])
    }

    fn derived(&self, context: ContextId, group: Group) -> Comm {
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
        Ok(self.derived(context, self.group.clone()))
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

    /// Splits into one communicator per process or per node ([`Comm::placement`]), ordering
    /// ranks by `key` and then by rank (MPI_Comm_split_type); returns this rank's. Collective;
    /// every rank must pass the same `split`, or every rank gets `Err`.
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
        };
        let color = u32::try_from(index)
            .map_err(|_| Error::InvalidArgument(format!("split_type: process or node index {index} exceeds u32")))?;
        let comm = self.split(Some(color), key)?;
        Ok(comm.expect("every rank passed a colour"))
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

    /// A communicator over `group`, which must be a subset of this communicator's group and the
    /// same on every rank (MPI_Comm_create). Ranks outside `group` get `None`. Collective.
    pub fn create(&self, group: &Group) -> Result<Option<Comm>> {
        self.check_live()?;
        if let Some(&outsider) = group.members().iter().find(|&&w| self.group.group_rank_of(w).is_none()) {
            return Err(Error::InvalidArgument(format!(
                "create: process {outsider} of the group is not in the communicator"
            )));
        }
        self.check_same_group(group)?;
        let context = self.agree_context()?;
        Ok(group.rank().map(|_| self.derived(context, group.clone())))
    }

    /// Fails on every rank unless all ranks passed the same group: one allreduce of a digest
    /// of the member list (and its complement, so the maximum also yields the minimum).
    fn check_same_group(&self, group: &Group) -> Result<()> {
        let digest = group
            .members()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, &w| (h ^ w as u64).wrapping_mul(0x0000_0100_0000_01b3))
            ^ group.size() as u64;
        let mut extremes = [0u64; 2];
        self.allreduce(&[digest, !digest], &mut extremes, Max)?;
        if extremes[0] != digest || !extremes[1] != digest {
            return Err(Error::InvalidArgument("create: the ranks passed different groups".into()));
        }
        Ok(())
    }

    /// Releases this handle to the communicator (MPI_Comm_free). Pending operations started on
    /// it are unaffected; its contexts are never reused.
    pub fn free(self) {}
}
