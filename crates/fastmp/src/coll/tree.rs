//! Tree shapes shared by the rooted collectives (ranks relative to the root, binomial tree,
//! four-ary tree, minimum spanning tree), and moving one buffer down a tree. Every rank derives
//! its parent and children from `(np, root, rank)` alone, so all ranks agree on the tree.

use std::ops::Range;

use super::select::Collective;
use super::transport::Run;
use crate::error::Result;

/// `rank` renumbered so that `root` becomes 0.
pub(super) fn relative(rank: usize, root: usize, np: usize) -> usize {
    (rank + np - root) % np
}

/// Inverse of [`relative`].
pub(super) fn absolute(relative: usize, root: usize, np: usize) -> usize {
    (relative + root) % np
}

/// Binomial tree over relative ranks `0..np` rooted at 0: the parent of `rel > 0` is `rel` with
/// its lowest set bit cleared, and its children are `rel + 2^k` for every `2^k` below that bit
/// (every `2^k < np` for the root).
pub(super) fn binomial_parent(rel: usize) -> Option<usize> {
    (rel > 0).then(|| rel & (rel - 1))
}

/// Children of `rel` in the binomial tree over `np` ranks, smallest subtree first (reverse it to
/// feed the largest subtree first).
pub(super) fn binomial_children(rel: usize, np: usize) -> impl DoubleEndedIterator<Item = usize> {
    let levels = if rel == 0 { np.next_power_of_two().trailing_zeros() } else { rel.trailing_zeros() };
    (0..levels).map(move |k| rel + (1 << k)).filter(move |&child| child < np)
}

/// Parent of `rel` in the `arity`-ary tree over relative ranks (children of `v` are
/// `arity·v+1..=arity·v+arity`; FaT is `arity` 4).
pub(super) fn kary_parent(rel: usize, arity: usize) -> Option<usize> {
    (rel > 0).then(|| (rel - 1) / arity)
}

/// Children of `rel` in the `arity`-ary tree over `np` relative ranks.
pub(super) fn kary_children(rel: usize, np: usize, arity: usize) -> Range<usize> {
    let first = arity.saturating_mul(rel).saturating_add(1).min(np);
    first..first.saturating_add(arity).min(np)
}

/// This rank's place in the minimum spanning tree of van de Geijn over absolute ranks `0..np`:
/// an interval's root keeps the half it lies in and hands the other half to that half's first
/// rank, recursively. Every subtree is an interval of ranks, so its blocks of a scatter or gather
/// are contiguous.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Mst {
    /// The rank that hands this rank its subtree (`None` at the root).
    pub parent: Option<usize>,
    /// The ranks of this rank's subtree, which it roots.
    pub subtree: Range<usize>,
    rank: usize,
}

impl Mst {
    pub(super) fn new(np: usize, root: usize, rank: usize) -> Mst {
        let (mut interval, mut interval_root, mut parent) = (0..np, root, None);
        while interval_root != rank {
            let (own_half, other_half) = split(&interval, interval_root);
            if other_half.contains(&rank) {
                parent = Some(interval_root);
                interval_root = other_half.start;
                interval = other_half;
            } else {
                interval = own_half;
            }
        }
        Mst { parent, subtree: interval, rank }
    }

    /// This rank's children with their subtrees, largest first; `.rev()` gives them smallest
    /// first, the order in which a reduction or gather folds them in next to what it holds.
    pub(super) fn children(&self) -> MstChildren {
        let mut count = 0;
        let mut interval = self.subtree.clone();
        while interval.len() > 1 {
            interval = split(&interval, self.rank).0;
            count += 1;
        }
        MstChildren { rank: self.rank, interval: self.subtree.clone(), count }
    }
}

/// Iterator over an [`Mst`] node's children (see [`Mst::children`]). Each child's subtree is the
/// half split off the part of the node's subtree still held after the larger children left, so
/// walking from the back re-splits from the front: `O(log² np)` in all, without allocating.
#[derive(Clone, Debug)]
pub(super) struct MstChildren {
    rank: usize,
    /// What this rank still holds after the children taken from the front.
    interval: Range<usize>,
    /// Children not yet taken from either end.
    count: usize,
}

impl MstChildren {
    /// The child split off `index` halvings below the front.
    fn nth_from_front(&self, index: usize) -> (usize, Range<usize>) {
        let mut interval = self.interval.clone();
        for _ in 0..index {
            interval = split(&interval, self.rank).0;
        }
        let other_half = split(&interval, self.rank).1;
        (other_half.start, other_half)
    }
}

impl Iterator for MstChildren {
    type Item = (usize, Range<usize>);

    fn next(&mut self) -> Option<Self::Item> {
        self.count = self.count.checked_sub(1)?;
        let child = self.nth_from_front(0);
        self.interval = split(&self.interval, self.rank).0;
        Some(child)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.count, Some(self.count))
    }
}

impl DoubleEndedIterator for MstChildren {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.count = self.count.checked_sub(1)?;
        Some(self.nth_from_front(self.count))
    }
}

impl ExactSizeIterator for MstChildren {}

/// Halves `interval` (lower half rounded up) into the half holding `root` and the other one.
fn split(interval: &Range<usize>, root: usize) -> (Range<usize>, Range<usize>) {
    let mid = interval.start + interval.len().div_ceil(2);
    let (lower, upper) = (interval.start..mid, mid..interval.end);
    if root < mid { (lower, upper) } else { (upper, lower) }
}

/// Flat tree: the root sends `message(rank)` to every other rank, one blocking send after
/// another, or all started at once so the copies can overlap.
pub(super) async fn send_from_root<'a>(
    comm: &Run<'_>,
    root: usize,
    message: impl Fn(usize) -> &'a [u8],
    nonblocking: bool,
    coll: Collective,
) -> Result<()> {
    let others = (0..comm.size()).filter(|&rank| rank != root);
    if nonblocking {
        let mut sends = comm.batch();
        for rank in others {
            sends.isend(message(rank), rank, coll)?;
        }
        sends.wait_all().await
    } else {
        for rank in others {
            comm.coll_send(message(rank), rank, coll).await?;
        }
        Ok(())
    }
}

/// Broadcast down a tree: receive `buf` from `parent` (if any), then forward it to each child in
/// turn with blocking sends. Ranks are communicator ranks.
pub(super) async fn send_down(
    comm: &Run<'_>,
    buf: &mut [u8],
    parent: Option<usize>,
    children: impl Iterator<Item = usize>,
    coll: Collective,
) -> Result<()> {
    if let Some(parent) = parent {
        comm.coll_recv(buf, parent, coll).await?;
    }
    for child in children {
        comm.coll_send(buf, child, coll).await?;
    }
    Ok(())
}

/// The ranks of `rel`'s subtree in the binomial tree over `np` ranks ([`binomial_children`]):
/// `rel..rel + lowbit(rel)` clipped to `np` (all ranks for the root), an interval, so its blocks
/// of a gather in rank order are one contiguous range.
pub(super) fn binomial_subtree(rel: usize, np: usize) -> Range<usize> {
    rel..if rel == 0 { np } else { (rel + (rel & rel.wrapping_neg())).min(np) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every non-root rank has exactly one parent, and the parent lists it as a child.
    fn check_tree(np: usize, parent: impl Fn(usize) -> Option<usize>, children: impl Fn(usize) -> Vec<usize>) {
        for rank in 0..np {
            for child in children(rank) {
                assert_eq!(parent(child), Some(rank), "np {np}: child {child} of {rank}");
            }
            match parent(rank) {
                None => assert_eq!(rank, 0),
                Some(p) => assert!(children(p).contains(&rank), "np {np}: {rank} missing under {p}"),
            }
        }
    }

    #[test]
    fn binomial_and_k_ary_trees_are_consistent() {
        for np in 1..40 {
            check_tree(np, binomial_parent, |r| binomial_children(r, np).collect());
            for arity in [1, 2, 4, 7] {
                check_tree(np, |r| kary_parent(r, arity), |r| kary_children(r, np, arity).collect());
            }
        }
        assert_eq!(binomial_children(0, 5).rev().collect::<Vec<_>>(), [4, 2, 1]);
        assert_eq!(binomial_children(4, 7).collect::<Vec<_>>(), [5, 6]);
    }

    #[test]
    fn mst_subtrees_are_intervals_covering_every_rank_once() {
        for np in 1..40 {
            for root in [0, np / 2, np - 1] {
                let nodes: Vec<Mst> = (0..np).map(|r| Mst::new(np, root, r)).collect();
                assert_eq!(nodes[root].parent, None);
                assert_eq!(nodes[root].subtree, 0..np);
                for (rank, node) in nodes.iter().enumerate() {
                    assert!(node.subtree.contains(&rank));
                    // The children's subtrees plus this rank partition this rank's subtree.
                    let mut covered = vec![rank];
                    for (child, ranks) in node.children() {
                        assert_eq!(nodes[child].parent, Some(rank));
                        assert_eq!(nodes[child].subtree, ranks);
                        covered.extend(ranks);
                    }
                    let smallest_first: Vec<_> = node.children().rev().collect();
                    let mut largest_first: Vec<_> = node.children().collect();
                    largest_first.reverse();
                    assert_eq!(smallest_first, largest_first);
                    assert_eq!(node.children().len(), largest_first.len());
                    // Taking alternately from both ends meets in the middle.
                    let (mut both_ends, mut fronts, mut backs) = (node.children(), Vec::new(), Vec::new());
                    while let Some(front) = both_ends.next() {
                        fronts.push(front);
                        backs.extend(both_ends.next_back());
                    }
                    fronts.extend(backs.into_iter().rev());
                    largest_first.reverse();
                    assert_eq!(fronts, largest_first);
                    covered.sort_unstable();
                    assert_eq!(covered, node.subtree.clone().collect::<Vec<_>>(), "np {np} root {root} rank {rank}");
                }
            }
        }
    }
}
