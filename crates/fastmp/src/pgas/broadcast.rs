//! `upc_all_broadcast`, and the tree engine that broadcast, scatter, gather and gather_all share:
//! data flowing down a tree (broadcast, scatter) or up it (gather), pulled by the receiver or
//! pushed by the sender, whole or pipelined.
//!
//! Every rank keeps its *span* (the bytes it receives and forwards) in a *storage*: the root's
//! user block (its source going down, its destination going up), an inner node's scratch buffer
//! (scatter and gather, whose spans are several ranks' pieces), or the rank's own user block.
//! A span is cut into the pipeline's chunks; each chunk that lands is announced with one `Ready`
//! post (or, when the sender pushes it, written and then announced). Which posts a rank sends
//! follows from the tree, the storages and the sync modes, which every rank knows for every
//! rank, so each wait is matched by exactly one post (the rule of [`super::team`]).

use bytemuck::Pod;

use super::array::{check_fits, check_root};
use super::select::{Collective, Pipeline, Transfer};
use super::team::{Signal, Team};
use super::transfer::Block;
use super::tree::Tree;
use super::{InSync, OutSync, SharedArray, Sync};
use crate::error::Result;
use crate::window::lifecycle::Core;

/// Copies elements `0..len` of `root`'s block of `src` into elements `0..len` of every rank's
/// block of `dst` (UPC `upc_all_broadcast`). Collective over the arrays' ranks, with the same
/// arguments everywhere.
///
/// Children of the root read (pull) or receive (push) straight from the root's `src` block; the
/// root copies `src` into its own `dst` block while they do. Deeper ranks read from their
/// parent's `dst` block after its `Ready` post, one per pipeline chunk. MYSYNC is point to
/// point: under `IN_MYSYNC` a pusher waits for each child's `Entered` before writing its block
/// (a puller needs nothing: the parent's `Ready` says it entered); under `OUT_MYSYNC` a pulling
/// child posts `Done` to the parent whose block it read, and a pusher posts `Done` to each leaf
/// it wrote. Under `IN_NOSYNC` the root's children read its `src` with no semaphore at all.
///
/// ```
/// use fastmp::pgas::{self, Sync};
/// fastmp::run(3, |world| {
///     let src = world.shared_array::<u8>(4)?;
///     let dst = world.shared_array::<u8>(4)?;
///     src.local()?.copy_from_slice(b"upc!");
///     src.barrier()?; // IN_NOSYNC: the caller makes the data ready everywhere first.
///     pgas::broadcast(&dst, &src, 2, 3, Sync::IN_NOSYNC | Sync::OUT_ALLSYNC)?;
///     assert_eq!(&dst.local()?[..3], b"upc");
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub fn broadcast<T: Pod>(
    dst: &SharedArray<T>,
    src: &SharedArray<T>,
    root: usize,
    len: usize,
    sync: Sync,
) -> Result<()> {
    const CALL: &str = "broadcast";
    let (input, output) = dst.check_pair(CALL, src, sync)?;
    check_root(CALL, root, dst.team.size())?;
    check_fits(CALL, "dst", len, dst.block_len())?;
    check_fits(CALL, "src", len, src.block_len())?;
    let team = &dst.team;
    let bytes = len * size_of::<T>();
    let algorithm = team.algorithm(Collective::Broadcast, bytes);
    let tree = team.tree(algorithm.shape, root)?;
    team.enter(input)?;
    let flow = Flow {
        team,
        tree: &tree,
        np: team.size(),
        piece: bytes,
        pieces: false,
        pipeline: algorithm.pipeline,
        input,
        output,
        root_store: src.block_at(root, 0),
        root_ready: input != InSync::My,
        user: dst.win.core(),
        scratch: None,
        root_needs_data: false,
    };
    flow.down(algorithm.transfer)?;
    team.leave(output)
}

/// One call's data flow over a tree (see the module docs).
pub(super) struct Flow<'a> {
    pub(super) team: &'a Team,
    pub(super) tree: &'a Tree,
    pub(super) np: usize,
    /// Bytes per piece: one rank's share (scatter, gather), or the whole block (broadcast).
    pub(super) piece: usize,
    /// Whether spans are subtrees of pieces in rank order relative to the root (scatter and
    /// gather over flat or binomial trees), rather than the one whole block (broadcast).
    pub(super) pieces: bool,
    pub(super) pipeline: Pipeline,
    pub(super) input: InSync,
    pub(super) output: OutSync,
    /// The root's storage: all pieces in rank order (piece of rank `r` at `r * piece`).
    pub(super) root_store: Block<'a>,
    /// Whether the root's storage holds the data when the call starts (a source under ALLSYNC or
    /// NOSYNC entry), so that nobody waits for the root's `Ready`.
    pub(super) root_ready: bool,
    /// The array of the other ranks' user blocks: the destination going down, the source up.
    pub(super) user: &'a Core,
    /// The scratch window that inner non-root ranks keep their span in (scatter, gather).
    pub(super) scratch: Option<&'a Core>,
    /// Going up: whether the root must know every piece has arrived before returning whatever
    /// the exit mode (gather_all broadcasts what it gathered).
    pub(super) root_needs_data: bool,
}

impl Flow<'_> {
    fn root(&self) -> usize {
        self.tree.root()
    }

    /// `rank`'s place in rank order relative to the root.
    fn position(&self, rank: usize) -> usize {
        (rank + self.np - self.root()) % self.np
    }

    /// The first piece and the byte length of `rank`'s span.
    fn span(&self, rank: usize) -> (usize, usize) {
        if !self.pieces {
            return (0, self.piece);
        }
        let p = self.position(rank);
        let count = if p == 0 {
            self.np
        } else if self.tree.children(rank).is_empty() {
            1
        } else {
            // A binomial subtree in rank order: positions p .. p + lowest set bit of p.
            (1 << p.trailing_zeros()).min(self.np - p)
        };
        (p, count * self.piece)
    }

    /// Byte offset of `child`'s span inside its parent's.
    fn offset_in_parent(&self, child: usize, parent: usize) -> usize {
        (self.span(child).0 - self.span(parent).0) * self.piece
    }

    fn in_scratch(&self, rank: usize) -> bool {
        self.scratch.is_some() && rank != self.root() && !self.tree.children(rank).is_empty()
    }

    /// Where byte `at` of `rank`'s span lies, and how many bytes from there are contiguous.
    fn place(&self, rank: usize, at: usize) -> (Block<'_>, usize) {
        if rank == self.root() {
            if !self.pieces {
                return (self.root_store.at(at), usize::MAX);
            }
            // Positions 0.. are ranks root.., wrapping to rank 0 at position np - root.
            let wrap = (self.np - self.root()) * self.piece;
            return if at < wrap {
                (self.root_store.at(self.root() * self.piece + at), wrap - at)
            } else {
                (self.root_store.at(at - wrap), usize::MAX)
            };
        }
        let core = match self.scratch {
            Some(core) if self.in_scratch(rank) => core,
            _ => self.user,
        };
        (Block { core, rank, offset: at }, usize::MAX)
    }

    /// Copies bytes `range` of `child`'s span between the child's storage and its parent's.
    fn copy_span(&self, child: usize, parent: usize, range: std::ops::Range<usize>, down: bool) -> Result<()> {
        let base = self.offset_in_parent(child, parent);
        let mut at = range.start;
        while at < range.end {
            let (c, c_run) = self.place(child, at);
            let (p, p_run) = self.place(parent, base + at);
            let n = (range.end - at).min(c_run).min(p_run);
            if down {
                self.team.copy(c, p, n)?
            } else {
                self.team.copy(p, c, n)?
            }
            at += n;
        }
        Ok(())
    }

    /// Chunks of a span of `total` bytes, and how many of them lie within its first `avail`.
    fn chunk_count(&self, total: usize) -> usize {
        total.div_ceil(self.pipeline.step(total)).max(1)
    }

    fn covered(&self, total: usize, avail: usize) -> usize {
        if avail >= total { self.chunk_count(total) } else { avail / self.pipeline.step(total) }
    }

    fn chunk(&self, total: usize, k: usize) -> std::ops::Range<usize> {
        let step = self.pipeline.step(total);
        k * step..((k + 1) * step).min(total)
    }

    /// Whether `rank`'s storage holds its span when the call starts (no `Ready` announces it).
    fn ready_at_entry(&self, rank: usize, down: bool) -> bool {
        if rank == self.root() {
            down && self.root_ready
        } else {
            // Going up, a leaf's storage is its source block.
            !down && self.tree.children(rank).is_empty() && self.input != InSync::My
        }
    }

    /// Whether a pusher must wait for `rank`'s `Entered` before writing into its storage: a
    /// scratch buffer may still be read by the previous call's children until then, a user block
    /// under IN_MYSYNC until its owner enters.
    fn wants_entered(&self, rank: usize) -> bool {
        self.in_scratch(rank) || self.input == InSync::My
    }

    /// Broadcast or scatter: the data flows from the root to the leaves.
    pub(super) fn down(&self, transfer: Transfer) -> Result<()> {
        let me = self.team.rank();
        let push = transfer == Transfer::Push;
        let total = self.span(me).1;
        if push {
            for &child in self.tree.children(me) {
                if self.wants_entered(child) {
                    self.team.wait(child, Signal::Entered)?;
                }
            }
        }
        if let Some(parent) = self.tree.parent(me) {
            let forwards = !self.tree.children(me).is_empty();
            if push && self.wants_entered(me) {
                self.team.post(parent, Signal::Entered)?;
            }
            if push && !forwards {
                if self.output == OutSync::My {
                    self.team.wait(parent, Signal::Done)?;
                }
            } else if !push && self.ready_at_entry(parent, true) {
                self.copy_span(me, parent, 0..total, true)?;
                self.forward_down(me, None, total, push)?;
            } else {
                let mut prev = None;
                for k in 0..self.chunk_count(total) {
                    let range = self.chunk(total, k);
                    self.team.wait(parent, Signal::Ready)?;
                    if !push {
                        self.copy_span(me, parent, range.clone(), true)?;
                    }
                    self.forward_down(me, prev, range.end, push)?;
                    prev = Some(range.end);
                }
            }
            if !push && (self.in_scratch(parent) || self.output == OutSync::My) {
                self.team.post(parent, Signal::Done)?;
            }
        } else {
            self.forward_down(me, None, total, push)?;
        }
        // The root's and the inner scatter nodes' own piece is not in their destination yet.
        if me == self.root() || self.in_scratch(me) {
            let (from, _) = self.place(me, 0);
            if !(std::ptr::eq(from.core, self.user) && from.rank == me && from.offset == 0) {
                self.team.copy(Block { core: self.user, rank: me, offset: 0 }, from, self.piece)?;
            }
        }
        for &child in self.tree.children(me) {
            if push {
                if self.tree.children(child).is_empty() && self.output == OutSync::My {
                    self.team.post(child, Signal::Done)?;
                }
            } else if self.in_scratch(me) || self.output == OutSync::My {
                self.team.wait(child, Signal::Done)?;
            }
        }
        Ok(())
    }

    /// Serves the children the chunks of their spans that became complete when the bytes of
    /// `me`'s span present grew from `prev` (`None`: nothing yet) to `now`: a pusher writes and
    /// announces them, a puller's children are told they may read them.
    fn forward_down(&self, me: usize, prev: Option<usize>, now: usize, push: bool) -> Result<()> {
        let announce = !self.ready_at_entry(me, true);
        for &child in self.tree.children(me) {
            let total = self.span(child).1;
            let base = self.offset_in_parent(child, me);
            let first = prev.map_or(0, |prev| self.covered(total, prev.saturating_sub(base)));
            let last = self.covered(total, now.saturating_sub(base));
            let forwards = !self.tree.children(child).is_empty();
            for k in first..last {
                if push {
                    self.copy_span(child, me, self.chunk(total, k), true)?;
                    if forwards {
                        self.team.post(child, Signal::Ready)?;
                    }
                } else if announce {
                    self.team.post(child, Signal::Ready)?;
                }
            }
        }
        Ok(())
    }

    /// Gather: the pieces flow from every rank up to the root.
    pub(super) fn up(&self, transfer: Transfer) -> Result<()> {
        let me = self.team.rank();
        let root = self.root();
        let push = transfer == Transfer::Push;
        let children = self.tree.children(me);
        // Own piece into the storage (a leaf's storage is its source block).
        if me == root || self.in_scratch(me) {
            let (to, _) = self.place(me, 0);
            self.team.copy(to, Block { core: self.user, rank: me, offset: 0 }, self.piece)?;
        }
        if push && (self.in_scratch(me) || (me == root && self.input == InSync::My)) {
            for &child in children {
                self.team.post(child, Signal::Entered)?;
            }
        }
        // Children in rank order (binomial trees list them the other way round).
        let ascending = children.len() < 2 || self.position(children[0]) < self.position(children[1]);
        let child_at = |i: usize| if ascending { children[i] } else { children[children.len() - 1 - i] };
        let mut next = (0, 0); // (child index, chunk index) of the next chunk to collect
        let mut avail = self.piece;
        let mut collect = |until: usize, all: bool| -> Result<()> {
            while next.0 < children.len() && (avail < until || all) {
                let child = child_at(next.0);
                let total = self.span(child).1;
                let range = self.chunk(total, next.1);
                let last = next.1 + 1 == self.chunk_count(total);
                if push {
                    if me != root {
                        self.team.wait(child, Signal::Ready)?;
                    } else if last && (self.output == OutSync::My || self.root_needs_data) {
                        self.team.wait(child, Signal::Done)?;
                    }
                } else {
                    if !self.ready_at_entry(child, false) {
                        self.team.wait(child, Signal::Ready)?;
                    }
                    self.copy_span(child, me, range.clone(), false)?;
                    if last && (self.in_scratch(child) || self.output == OutSync::My) {
                        self.team.post(child, Signal::Done)?;
                    }
                }
                avail = self.offset_in_parent(child, me) + range.end;
                next = if last { (next.0 + 1, 0) } else { (next.0, next.1 + 1) };
            }
            Ok(())
        };
        let Some(parent) = self.tree.parent(me) else {
            collect(usize::MAX, true)?;
            return Ok(());
        };
        let total = self.span(me).1;
        let chunks = self.chunk_count(total);
        let to_root = parent == root;
        for k in 0..chunks {
            let range = self.chunk(total, k);
            collect(range.end, k + 1 == chunks)?;
            if push {
                if k == 0 && (self.in_scratch(parent) || (to_root && self.input == InSync::My)) {
                    self.team.wait(parent, Signal::Entered)?;
                }
                self.copy_span(me, parent, range, false)?;
                if !to_root {
                    self.team.post(parent, Signal::Ready)?;
                }
            } else if !self.ready_at_entry(me, false) {
                self.team.post(parent, Signal::Ready)?;
            }
        }
        if push {
            if to_root && (self.output == OutSync::My || self.root_needs_data) {
                self.team.post(parent, Signal::Done)?;
            }
        } else if self.in_scratch(me) || self.output == OutSync::My {
            self.team.wait(parent, Signal::Done)?;
        }
        Ok(())
    }
}
