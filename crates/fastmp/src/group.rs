//! Process groups (MPI_Group): ordered sets of world ranks, and the set algebra that builds
//! new communicators.

use std::rc::Rc;

use crate::error::{Error, Result};

/// Marks a world rank that is not in the group, in [`Group`]'s inverse table.
const NOT_MEMBER: u32 = u32::MAX;

/// An ordered set of ranks of the job (MPI_Group). Rank `i` of the group is the process
/// `world_rank(i)`; groups are cheap to clone.
///
/// ```
/// fastmp::run(4, |world| {
///     let evens = world.group().incl(&[0, 2])?;
///     assert_eq!(evens.size(), 2);
///     assert_eq!(evens.rank(), if world.rank() % 2 == 0 { Some(world.rank() / 2) } else { None });
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Group {
    inner: Rc<GroupInner>,
}

#[derive(Debug)]
struct GroupInner {
    /// World rank of each group rank.
    members: Box<[usize]>,
    /// Group rank of each world rank, or [`NOT_MEMBER`]; makes incoming sources O(1) to translate.
    index: Box<[u32]>,
    /// The calling process's world rank.
    me: usize,
}

/// How two groups relate (MPI_Group_compare).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupOrdering {
    /// Same members in the same order (MPI_IDENT).
    Identical,
    /// Same members, different order (MPI_SIMILAR).
    Similar,
    /// Different members (MPI_UNEQUAL).
    Unequal,
}

impl Group {
    /// A group of `members` (world ranks, distinct, each `< world_size`) seen from world rank `me`.
    pub(crate) fn from_members(members: Vec<usize>, world_size: usize, me: usize) -> Result<Self> {
        let mut index = vec![NOT_MEMBER; world_size].into_boxed_slice();
        for (rank, &world) in members.iter().enumerate() {
            let slot = index.get_mut(world).ok_or(Error::RankOutOfRange { rank: world, size: world_size })?;
            if *slot != NOT_MEMBER {
                return Err(Error::InvalidArgument(format!("rank {world} appears twice in a group")));
            }
            *slot = rank as u32;
        }
        Ok(Group { inner: Rc::new(GroupInner { members: members.into_boxed_slice(), index, me }) })
    }

    /// The group of every rank of the job, in order.
    pub(crate) fn world(world_size: usize, me: usize) -> Self {
        Self::from_members((0..world_size).collect(), world_size, me).expect("identity group is valid")
    }

    /// Number of ranks in the group.
    pub fn size(&self) -> usize {
        self.inner.members.len()
    }

    /// The calling process's rank in the group, or `None` if it is not a member (MPI_UNDEFINED).
    pub fn rank(&self) -> Option<usize> {
        self.group_rank_of(self.inner.me)
    }

    /// World rank of group rank `rank`. Panics if `rank >= size()`: callers check ranks first.
    pub(crate) fn world_rank(&self, rank: usize) -> usize {
        self.inner.members[rank]
    }

    /// Group rank of world rank `world`, if it is a member.
    pub(crate) fn group_rank_of(&self, world: usize) -> Option<usize> {
        match self.inner.index.get(world) {
            Some(&r) if r != NOT_MEMBER => Some(r as usize),
            _ => None,
        }
    }

    /// World ranks of the members, in group order.
    pub(crate) fn members(&self) -> &[usize] {
        &self.inner.members
    }

    fn world_size(&self) -> usize {
        self.inner.index.len()
    }

    fn derive(&self, members: Vec<usize>) -> Result<Group> {
        Group::from_members(members, self.world_size(), self.inner.me)
    }

    fn check_ranks(&self, ranks: &[usize]) -> Result<()> {
        match ranks.iter().find(|&&r| r >= self.size()) {
            Some(&rank) => Err(Error::RankOutOfRange { rank, size: self.size() }),
            None => Ok(()),
        }
    }

    /// The group of `ranks` of this group, in that order (MPI_Group_incl).
    pub fn incl(&self, ranks: &[usize]) -> Result<Group> {
        self.check_ranks(ranks)?;
        self.derive(ranks.iter().map(|&r| self.world_rank(r)).collect())
    }

    /// This group without `ranks`, order kept (MPI_Group_excl).
    pub fn excl(&self, ranks: &[usize]) -> Result<Group> {
        self.check_ranks(ranks)?;
        let mut drop = vec![false; self.size()];
        for &r in ranks {
            if std::mem::replace(&mut drop[r], true) {
                return Err(Error::InvalidArgument(format!("rank {r} excluded twice")));
            }
        }
        self.derive(self.members().iter().zip(&drop).filter(|(_, d)| !**d).map(|(&w, _)| w).collect())
    }

    /// Members of `self`, then members of `other` not in `self` (MPI_Group_union).
    pub fn union(&self, other: &Group) -> Result<Group> {
        let mut members = self.members().to_vec();
        members.extend(other.members().iter().filter(|&&w| self.group_rank_of(w).is_none()));
        self.derive(members)
    }

    /// Members of `self` that are also in `other`, in `self`'s order (MPI_Group_intersection).
    pub fn intersection(&self, other: &Group) -> Result<Group> {
        self.derive(self.members().iter().copied().filter(|&w| other.group_rank_of(w).is_some()).collect())
    }

    /// Members of `self` that are not in `other`, in `self`'s order (MPI_Group_difference).
    pub fn difference(&self, other: &Group) -> Result<Group> {
        self.derive(self.members().iter().copied().filter(|&w| other.group_rank_of(w).is_none()).collect())
    }

    /// The rank in `other` of each of `ranks` of this group, `None` where it is not a member
    /// (MPI_Group_translate_ranks).
    pub fn translate_ranks(&self, ranks: &[usize], other: &Group) -> Result<Vec<Option<usize>>> {
        self.check_ranks(ranks)?;
        Ok(ranks.iter().map(|&r| other.group_rank_of(self.world_rank(r))).collect())
    }

    /// Compares membership and order (MPI_Group_compare).
    pub fn compare(&self, other: &Group) -> GroupOrdering {
        if self.members() == other.members() {
            GroupOrdering::Identical
        } else if self.size() == other.size() && self.members().iter().all(|&w| other.group_rank_of(w).is_some()) {
            GroupOrdering::Similar
        } else {
            GroupOrdering::Unequal
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world(n: usize, me: usize) -> Group {
        Group::world(n, me)
    }

    #[test]
    fn set_algebra_keeps_mpi_order() {
        let w = world(6, 3);
        let a = w.incl(&[5, 1, 3]).unwrap();
        let b = w.incl(&[3, 4]).unwrap();
        assert_eq!(a.members(), [5, 1, 3]);
        assert_eq!(a.rank(), Some(2));
        assert_eq!(a.union(&b).unwrap().members(), [5, 1, 3, 4]);
        assert_eq!(a.intersection(&b).unwrap().members(), [3]);
        assert_eq!(a.difference(&b).unwrap().members(), [5, 1]);
        assert_eq!(w.excl(&[0, 5]).unwrap().members(), [1, 2, 3, 4]);
        assert_eq!(a.translate_ranks(&[0, 1, 2], &b).unwrap(), [None, None, Some(0)]);
        assert_eq!(a.compare(&a.clone()), GroupOrdering::Identical);
        assert_eq!(a.compare(&w.incl(&[1, 3, 5]).unwrap()), GroupOrdering::Similar);
        assert_eq!(a.compare(&b), GroupOrdering::Unequal);
        assert_eq!(b.difference(&b).unwrap().size(), 0);
        assert_eq!(w.difference(&a).unwrap().rank(), None);
    }

    #[test]
    fn bad_ranks_are_errors() {
        let w = world(4, 0);
        assert!(matches!(w.incl(&[4]), Err(Error::RankOutOfRange { rank: 4, size: 4 })));
        assert!(matches!(w.incl(&[1, 1]), Err(Error::InvalidArgument(_))));
        assert!(matches!(w.excl(&[2, 2]), Err(Error::InvalidArgument(_))));
        assert!(w.translate_ranks(&[9], &w).is_err());
    }
}
