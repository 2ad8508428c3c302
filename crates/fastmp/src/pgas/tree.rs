//! The trees of the thesis (flat, binomial, binomial between regions with flat inside, and the
//! hierarchical tree: node leaders, then NUMA leaders, then a binomial tree inside each region),
//! built once per (shape, root) from the ranks' placement and cached by the team. Every rank
//! builds the whole tree, so all agree on it. Trees are rooted at the collective's root
//! directly (cached per root), so no extra copy to a fixed tree root is needed.

use super::select::Shape;

/// A spanning tree over the ranks `0..np` of a team.
#[derive(Debug)]
pub(super) struct Tree {
    root: usize,
    parent: Vec<Option<usize>>,
    /// Children of each rank, in the order to serve them: leaders of other nodes and regions
    /// first, then the largest subtree first.
    children: Vec<Vec<usize>>,
}

impl Tree {
    /// Builds `shape` over `np` ranks rooted at `root`; `regions[r]` is rank `r`'s (node, NUMA
    /// region), needed by the shapes that group ranks ([`Shape::needs_regions`]).
    pub(super) fn build(shape: Shape, np: usize, root: usize, regions: Option<&[(usize, usize)]>) -> Tree {
        assert!(root < np, "tree root {root} outside {np} ranks");
        let mut tree = Tree { root, parent: vec![None; np], children: vec![Vec::new(); np] };
        // Ranks in order relative to the root: the root first, then root+1, ... (wrapping).
        let order: Vec<usize> = (0..np).map(|i| (root + i) % np).collect();
        let region = |r: usize| regions.map_or((0, 0), |g| g[r]);
        match shape {
            Shape::Flat | Shape::Ring | Shape::Dissemination | Shape::Chain => tree.flat(&order),
            Shape::Binomial => tree.binomial(&order),
            Shape::BinomialFlat => tree.grouped(&order, &[&|r| region(r)], true),
            Shape::Hierarchical => tree.grouped(&order, &[&|r| (region(r).0, 0), &|r| region(r)], false),
        }
        tree
    }

    /// The root every edge leads to.
    pub(super) fn root(&self) -> usize {
        self.root
    }

    /// `rank`'s parent (`None` for the root).
    pub(super) fn parent(&self, rank: usize) -> Option<usize> {
        self.parent[rank]
    }

    /// `rank`'s children, in serving order.
    pub(super) fn children(&self, rank: usize) -> &[usize] {
        &self.children[rank]
    }

    #[cfg(test)]
    /// The ranks of `rank`'s subtree, `rank` first, in depth-first serving order.
    pub(super) fn subtree(&self, rank: usize) -> Vec<usize> {
        let mut out = Vec::new();
        self.depth_first(rank, &mut out);
        out
    }

    #[cfg(test)]
    fn depth_first(&self, rank: usize, out: &mut Vec<usize>) {
        out.push(rank);
        for &child in &self.children[rank] {
            self.depth_first(child, out);
        }
    }

    #[cfg(test)]
    /// Number of edges from the root to `rank`.
    pub(super) fn depth(&self, mut rank: usize) -> usize {
        let mut depth = 0;
        while let Some(p) = self.parent[rank] {
            rank = p;
            depth += 1;
        }
        depth
    }

    fn link(&mut self, parent: usize, child: usize) {
        self.parent[child] = Some(parent);
        self.children[parent].push(child);
    }

    /// `ranks[0]` is the parent of every other rank.
    fn flat(&mut self, ranks: &[usize]) {
        for &r in &ranks[1..] {
            self.link(ranks[0], r);
        }
    }

    /// Binomial tree over the positions of `ranks` (position 0 the root): the parent of position
    /// `i` is `i` with its lowest set bit cleared; children are linked largest subtree first.
    fn binomial(&mut self, ranks: &[usize]) {
        let n = ranks.len();
        for (i, &r) in ranks.iter().enumerate() {
            let levels = if i == 0 { n.next_power_of_two().trailing_zeros() } else { i.trailing_zeros() };
            for k in (0..levels).rev() {
                let child = i + (1 << k);
                if child < n {
                    self.link(r, ranks[child]);
                }
            }
        }
    }

    /// Groups `ranks` by the first key (groups in order of first appearance, so the root's group
    /// comes first and each group's first rank leads it), links the leaders by a binomial tree,
    /// and builds each group by the remaining keys; the last level is flat or binomial.
    fn grouped<K: PartialEq>(&mut self, ranks: &[usize], keys: &[&dyn Fn(usize) -> K], flat_leaves: bool) {
        let Some((key, rest)) = keys.split_first() else {
            if flat_leaves {
                self.flat(ranks)
            } else {
                self.binomial(ranks)
            }
            return;
        };
        let mut groups: Vec<(K, Vec<usize>)> = Vec::new();
        for &r in ranks {
            let k = key(r);
            match groups.iter_mut().find(|(g, _)| *g == k) {
                Some((_, members)) => members.push(r),
                None => groups.push((k, vec![r])),
            }
        }
        let leaders: Vec<usize> = groups.iter().map(|(_, m)| m[0]).collect();
        // Leaders first: a leader forwards to other groups before its own group.
        self.binomial(&leaders);
        for (_, members) in &groups {
            self.grouped(members, rest, flat_leaves);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_spanning(tree: &Tree, np: usize) {
        let mut seen = tree.subtree(tree.root());
        seen.sort_unstable();
        assert_eq!(seen, (0..np).collect::<Vec<_>>());
        for r in 0..np {
            for &c in tree.children(r) {
                assert_eq!(tree.parent(c), Some(r));
            }
        }
    }

    #[test]
    fn every_shape_spans_every_rank_from_any_root() {
        let shapes = [Shape::Flat, Shape::Binomial, Shape::BinomialFlat, Shape::Hierarchical];
        for np in 1..=17 {
            let regions: Vec<(usize, usize)> = (0..np).map(|r| (r / 8, (r / 4) % 2)).collect();
            for root in [0, np / 2, np - 1] {
                for shape in shapes {
                    let tree = Tree::build(shape, np, root, Some(&regions));
                    assert_eq!(tree.parent(root), None);
                    check_spanning(&tree, np);
                }
            }
        }
    }

    #[test]
    fn binomial_depth_is_logarithmic_and_hierarchy_leads_across_nodes_first() {
        let tree = Tree::build(Shape::Binomial, 16, 0, None);
        assert_eq!((0..16).map(|r| tree.depth(r)).max(), Some(4));
        assert_eq!(tree.children(0), &[8, 4, 2, 1]);
        let regions: Vec<(usize, usize)> = (0..16).map(|r| (r / 8, (r / 4) % 2)).collect();
        let tree = Tree::build(Shape::Hierarchical, 16, 0, Some(&regions));
        // Rank 0 serves the other node's leader, then its NUMA peer leader, then its region.
        assert_eq!(tree.children(0)[0], 8);
        assert_eq!(tree.children(0)[1], 4);
        assert_eq!(tree.parent(12), Some(8));
        let flat = Tree::build(Shape::BinomialFlat, 16, 0, Some(&regions));
        assert_eq!(flat.parent(5), Some(4));
        assert_eq!(flat.children(4), &[5, 6, 7]);
    }
}
