//! The ranks of a shared array as the collectives see them: the thesis's point-to-point
//! semaphores (`post`/`wait`), the barrier of the ALLSYNC modes, the cached trees and buffers,
//! and the algorithm choice.
//!
//! Semaphores are zero-byte messages (or one small value) on the team's own communicator, one
//! tag per [`Signal`]. Messages between two ranks with one tag are matched in order, so a call's
//! posts never meet another call's waits as long as every algorithm keeps this rule: **in each
//! call, for every ordered pair of ranks and every signal, the sender posts exactly as often as
//! the receiver waits** (both derive the counts from the same arguments). A rank writes into
//! another rank's *internal* buffer only after that rank posted `Ready` for it in the same call.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use bytemuck::Pod;

use super::select::{Algorithm, Collective, Shape, Tuning};
use super::tree::Tree;
use super::{InSync, OutSync};
use crate::comm::Comm;
use crate::error::Result;

/// Every rank's (node, NUMA region).
pub(super) type Regions = Rc<[(usize, usize)]>;

/// What a semaphore post means; each is its own message tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Signal {
    /// The sender has entered the call (IN_MYSYNC: its blocks may be touched now).
    Entered = 1,
    /// Data (or a chunk of it) is in place for the receiver to use, or a buffer is free to write.
    Ready = 2,
    /// The sender has finished touching the receiver's blocks (OUT_MYSYNC).
    Done = 3,
    /// Carries a small value (a partial reduction, a prefix).
    Value = 4,
    /// The token of the ring algorithms.
    Token = 5,
}

/// Buffers above this many bytes are released after the call that needed them (the thesis's rule).
pub(super) const KEEP_BUFFER_LIMIT: usize = 16 << 20;

/// One shared array's view of its ranks (shared by nothing else: every array has its own).
pub(super) struct Team {
    /// A dup of the array's communicator: the semaphores' context, the barrier's.
    pub(super) comm: Comm,
    /// Staging for transfers the device cannot make as one direct copy.
    pub(super) staging: RefCell<Vec<u8>>,
    /// Trees built on first use, per shape and root.
    trees: RefCell<HashMap<(Shape, usize), Rc<Tree>>>,
    /// Per rank of the team: (node, NUMA region), gathered on first need.
    regions: RefCell<Option<Regions>>,
    pub(super) tuning: RefCell<Tuning>,
    /// The inner tree nodes' buffers of scatter and gather (one equal part per rank, kept in a
    /// lock_all epoch; grown collectively, released above [`KEEP_BUFFER_LIMIT`]).
    pub(super) scratch: RefCell<Option<crate::window::Window<'static, u8>>>,
}

impl Team {
    pub(super) fn new(comm: Comm) -> Result<Team> {
        let tuning = Tuning::for_device(comm.device_name())?;
        Ok(Team {
            comm,
            staging: RefCell::new(Vec::new()),
            trees: RefCell::new(HashMap::new()),
            regions: RefCell::new(None),
            tuning: RefCell::new(tuning),
            scratch: RefCell::new(None),
        })
    }

    pub(super) fn rank(&self) -> usize {
        self.comm.rank()
    }

    pub(super) fn size(&self) -> usize {
        self.comm.size()
    }

    /// The algorithm for `coll` moving `bytes` per block (every rank computes the same).
    pub(super) fn algorithm(&self, coll: Collective, bytes: usize) -> Algorithm {
        self.tuning.borrow().select(coll, self.size(), bytes)
    }

    /// Semaphore post to `to` (the thesis's `post(thread, 1)`).
    pub(super) fn post(&self, to: usize, signal: Signal) -> Result<()> {
        self.comm.send::<u8>(&[], to, signal as i32)
    }

    /// Waits for one post of `signal` from `from` (the thesis's `wait(me, 1)` on a per-sender
    /// semaphore). Fails, instead of hanging, when `from` failed.
    pub(super) fn wait(&self, from: usize, signal: Signal) -> Result<()> {
        self.comm.recv::<u8>(&mut [], from, signal as i32).map(drop)
    }

    /// A post that carries a few values (the sender's partial result).
    pub(super) fn post_values<T: Pod>(&self, to: usize, values: &[T]) -> Result<()> {
        self.comm.send(values, to, Signal::Value as i32)
    }

    /// Waits for `from`'s [`Team::post_values`] into `values` (same length as sent).
    pub(super) fn wait_values<T: Pod>(&self, from: usize, values: &mut [T]) -> Result<()> {
        self.comm.recv(values, from, Signal::Value as i32).map(drop)
    }

    /// The ALLSYNC barrier.
    pub(super) fn barrier(&self) -> Result<()> {
        self.comm.barrier()
    }

    /// The entry half of a sync mode that is the same for every algorithm: ALLSYNC is a barrier;
    /// MYSYNC and NOSYNC do nothing here (under MYSYNC an algorithm waits for `Entered` from the
    /// ranks whose blocks it touches, or for a post that implies they entered).
    pub(super) fn enter(&self, input: InSync) -> Result<()> {
        if input == InSync::All { self.barrier() } else { Ok(()) }
    }

    /// The exit half that is the same for every algorithm: ALLSYNC is a barrier after this rank's
    /// own transfers (under MYSYNC an algorithm waits for `Done` from the ranks that touch its
    /// blocks before calling this). Gives back oversized staging memory.
    pub(super) fn leave(&self, output: OutSync) -> Result<()> {
        self.trim_staging();
        if output == OutSync::All { self.barrier() } else { Ok(()) }
    }

    /// The tree of `shape` rooted at `root`, built on first use and cached.
    pub(super) fn tree(&self, shape: Shape, root: usize) -> Result<Rc<Tree>> {
        if let Some(tree) = self.trees.borrow().get(&(shape, root)) {
            return Ok(tree.clone());
        }
        let regions = if shape.needs_regions() { Some(self.regions()?) } else { None };
        let tree = Rc::new(Tree::build(shape, self.size(), root, regions.as_deref()));
        self.trees.borrow_mut().insert((shape, root), tree.clone());
        Ok(tree)
    }

    /// Every rank's (node, NUMA region): the node from the device's placement, the region from
    /// the CPUs the rank's thread may run on. Collective on first call (all ranks call it for the
    /// same tree shape at the same call).
    pub(super) fn regions(&self) -> Result<Regions> {
        if let Some(regions) = self.regions.borrow().as_ref() {
            return Ok(regions.clone());
        }
        let mine = crate::launch::affinity::numa_node_of_current_thread().unwrap_or(0) as u64;
        let mut numa = vec![0u64; self.size()];
        self.comm.allgather(&[mine], &mut numa)?;
        let placement = self.comm.dev.placement();
        let members = self.comm.group.members();
        let regions: Regions =
            members.iter().zip(&numa).map(|(&world, &n)| (placement.node_of(world), n as usize)).collect();
        *self.regions.borrow_mut() = Some(regions.clone());
        Ok(regions)
    }

    /// Gives back the staging buffer's memory when a call needed more than the thesis keeps.
    pub(super) fn trim_staging(&self) {
        let mut staging = self.staging.borrow_mut();
        if staging.capacity() > KEEP_BUFFER_LIMIT {
            *staging = Vec::new();
        }
    }
}
