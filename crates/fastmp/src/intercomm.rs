//! Intercommunicators (MPI_Intercomm_create): two disjoint groups, where point-to-point calls
//! name ranks of the other group and collectives move data from one group to the other.
//!
//! Built on what exists: the local group is an intracommunicator of its own, point-to-point
//! is an internal [`Comm`] whose group is the remote one (so ranks translate, statuses report
//! remote ranks, and requests work as on any communicator), and every collective is a local
//! collective plus one exchange between the groups' leaders (rank 0 of each group) on the
//! intercommunicator's collective context.

use bytemuck::Pod;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::coll::op::{Max, Op};
use crate::comm::{CONTEXTS_PER_COMM, Comm, Status};
use crate::communicators::{Reserved, exchange, expect_bytes, reserved_tag};
use crate::device::{MatchSpec, SendMode, Source, requests};
use crate::error::{Error, Result};
use crate::group::Group;
use crate::scope::{Request, Scope};

/// An intercommunicator (MPI's intercommunicator `MPI_Comm`): this rank's group and a disjoint
/// remote group. Point-to-point ranks are the remote group's; [`InterComm::rank`] and
/// [`InterComm::size`] are the local group's.
///
/// ```
/// use fastmp::{InterRoot, op::Sum};
/// fastmp::run(5, |world| {
///     // Ranks 0-1 and 2-4 form two groups; their leaders are world ranks 0 and 2.
///     let left = world.rank() < 2;
///     let half = world.split(Some(left as u32), 0)?.unwrap();
///     let inter = half.intercomm_create(0, &world, if left { 2 } else { 0 }, 99)?;
///     assert_eq!(inter.remote_size(), if left { 3 } else { 2 });
///
///     // Each group receives the sum over the other group.
///     let mut sum = [0u64];
///     inter.allreduce(&[world.rank() as u64], &mut sum, Sum)?;
///     assert_eq!(sum[0], if left { 2 + 3 + 4 } else { 0 + 1 });
///
///     // World rank 1 (left rank 1) broadcasts to the right group.
///     let mut word = [if world.rank() == 1 { 42u32 } else { 0 }];
///     let root = match world.rank() {
///         1 => InterRoot::Root,
///         0 => InterRoot::Null,
///         _ => InterRoot::Remote(1),
///     };
///     inter.bcast(&mut word, root)?;
///     assert_eq!(word[0], if world.rank() == 0 { 0 } else { 42 });
///
///     // One intracommunicator again: the `high = false` group's ranks first.
///     let merged = inter.merge(!left)?;
///     assert_eq!(merged.rank(), world.rank());
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
#[derive(Clone)]
pub struct InterComm {
    /// This rank's group, with contexts of its own: the local parts of the collectives.
    local: Comm,
    /// Point-to-point towards the remote group: the intercommunicator's context pair and the
    /// remote group, so ranks and statuses are the remote group's. Internal only (its `size`
    /// is the remote group's); its collective context carries the exchanges between the
    /// groups, numbered by its collective counter.
    remote: Comm,
}

/// The root argument of an intercommunicator broadcast (MPI_Bcast on an intercommunicator):
/// one group holds the root, whose other ranks take no part, and the other group receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterRoot {
    /// This rank is the root: its buffer goes to every rank of the remote group (MPI_ROOT).
    Root,
    /// This rank is in the root's group but is not the root: nothing happens (MPI_PROC_NULL).
    Null,
    /// The root is rank `r` of the remote group: this rank receives.
    Remote(usize),
}

/// Nonblocking point-to-point on an intercommunicator: the [`Scope`] calls, with ranks of the
/// remote group. See [`InterComm::scope`].
pub struct InterScope<'scope, 'env> {
    inner: &'scope Scope<'scope, 'env>,
}

impl Comm {
    /// An intercommunicator between this communicator's group and a disjoint remote group
    /// (MPI_Intercomm_create). Collective over this communicator and, through the two
    /// leaders, the remote group's. `local_leader` is a rank of this communicator;
    /// `peer_comm`, `remote_leader` (the remote leader's rank in `peer_comm`) and `tag` are
    /// used at the local leader only. The leaders' messages use `peer_comm`'s collective
    /// context, so they never meet its point-to-point traffic; concurrent calls between the
    /// same leaders need tags that differ modulo 2^25.
    pub fn intercomm_create(
        &self,
        local_leader: usize,
        peer_comm: &Comm,
        remote_leader: usize,
        tag: i32,
    ) -> Result<InterComm> {
        self.check_live()?;
        if local_leader >= self.size() {
            return Err(Error::InvalidArgument(format!(
                "intercomm_create: local_leader {local_leader} is out of range for a communicator of size {}",
                self.size()
            )));
        }
        let mut next = [0u64];
        self.allreduce(&[u64::from(self.process.next_context.get())], &mut next, Max)?;
        // The leader tells the others the agreed context and the remote members, or why not.
        let mut outcome: std::result::Result<(u64, Vec<usize>), String> = Ok((0, Vec::new()));
        let mut failure = None;
        if self.rank() == local_leader {
            outcome = self.handshake(peer_comm, remote_leader, tag, next[0]).map_err(|e| {
                let message = e.to_string();
                failure = Some(e);
                message
            });
        }
        self.bcast_obj(&mut outcome, local_leader)?;
        let (agreed, members) = match (outcome, failure) {
            (Ok(agreed), _) => agreed,
            (Err(_), Some(e)) => return Err(e),
            (Err(message), None) => {
                return Err(Error::InvalidArgument(format!("intercomm_create failed at the local leader: {message}")));
            }
        };
        let remote_group = Group::from_members(members, self.dev.size(), self.dev.rank())?;
        // Two communicators' contexts: the intercommunicator's, then the local group's own (the
        // remote group uses the same numbers for its own; disjoint, so they never meet).
        let base = self.take_contexts(agreed, 2)?;
        let local = self.derived(base + CONTEXTS_PER_COMM, self.group.clone());
        let mut both: Vec<usize> = self.group.members().iter().chain(remote_group.members()).copied().collect();
        both.sort_unstable();
        self.dev.open_context(base, &both)?;
        let remote = Comm {
            context: base,
            group: remote_group,
            collectives: None,
            coll_seq: Default::default(),
            info: Default::default(),
            spread: Default::default(),
            ..local.clone()
        };
        Ok(InterComm { local, remote })
    }

    /// The local leader's part of `intercomm_create`: swaps (next free context, size) and then
    /// the member lists with the remote leader; returns the agreed context and the remote
    /// members.
    fn handshake(&self, peer_comm: &Comm, remote_leader: usize, tag: i32, next: u64) -> Result<(u64, Vec<usize>)> {
        peer_comm.check_live()?;
        if remote_leader >= peer_comm.size() {
            return Err(Error::InvalidArgument(format!(
                "intercomm_create: remote_leader {remote_leader} is out of range for peer_comm of size {}",
                peer_comm.size()
            )));
        }
        if !(0..=crate::TAG_UB).contains(&tag) {
            return Err(Error::TagOutOfRange { tag, max: crate::TAG_UB });
        }
        let peer = peer_comm.group.world_rank(remote_leader);
        if self.group.group_rank_of(peer).is_some() {
            return Err(Error::InvalidArgument(format!(
                "intercomm_create: the remote leader (world rank {peer}) is in the local group; the groups must be disjoint"
            )));
        }
        let spec = MatchSpec {
            context: peer_comm.coll_context(),
            source: Source::Rank(peer),
            tag: reserved_tag(Reserved::IntercommCreate, tag),
        };
        let call = "intercomm_create";
        let mut header = [0u64; 2];
        exchange(
            call,
            &*self.dev,
            bytemuck::cast_slice(&[next, self.size() as u64]),
            peer,
            bytemuck::cast_slice_mut(&mut header),
            spec,
        )?;
        let [remote_next, remote_size] = header;
        if remote_size == 0 || remote_size > self.dev.size() as u64 {
            return Err(Error::InvalidArgument(format!(
                "intercomm_create: the remote leader announced a group of {remote_size} ranks"
            )));
        }
        let ours: Vec<u64> = self.group.members().iter().map(|&w| w as u64).collect();
        let mut theirs = vec![0u64; remote_size as usize];
        exchange(call, &*self.dev, bytemuck::cast_slice(&ours), peer, bytemuck::cast_slice_mut(&mut theirs), spec)?;
        let theirs: Vec<usize> = theirs.into_iter().map(|w| w as usize).collect();
        if let Some(&both) = theirs.iter().find(|&&w| self.group.group_rank_of(w).is_some()) {
            return Err(Error::InvalidArgument(format!(
                "intercomm_create: world rank {both} is in both groups; the groups must be disjoint"
            )));
        }
        Ok((next.max(remote_next), theirs))
    }
}

impl InterComm {
    /// This rank's number in the local group.
    pub fn rank(&self) -> usize {
        self.local.rank()
    }

    /// Number of ranks in the local group (MPI_Comm_size on an intercommunicator).
    pub fn size(&self) -> usize {
        self.local.size()
    }

    /// Number of ranks in the remote group (MPI_Comm_remote_size).
    pub fn remote_size(&self) -> usize {
        self.remote.group.size()
    }

    /// The local group (MPI_Comm_group).
    pub fn group(&self) -> Group {
        self.local.group()
    }

    /// The remote group (MPI_Comm_remote_group).
    pub fn remote_group(&self) -> Group {
        self.remote.group()
    }

    /// Sends `buf` to rank `dest` of the remote group (MPI_Send).
    pub fn send<T: Pod>(&self, buf: &[T], dest: usize, tag: i32) -> Result<()> {
        self.remote.send(buf, dest, tag)
    }

    /// Synchronous send to rank `dest` of the remote group (MPI_Ssend).
    pub fn ssend<T: Pod>(&self, buf: &[T], dest: usize, tag: i32) -> Result<()> {
        self.remote.ssend(buf, dest, tag)
    }

    /// Receives from rank `source` of the remote group (or [`crate::ANY_SOURCE`]) (MPI_Recv);
    /// `Status::source` is a remote rank.
    pub fn recv<T: Pod>(&self, buf: &mut [T], source: impl Into<Source>, tag: i32) -> Result<Status> {
        self.remote.recv(buf, source, tag)
    }

    /// Sends to and receives from remote ranks at once (MPI_Sendrecv).
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv<S: Pod, R: Pod>(
        &self,
        sendbuf: &[S],
        dest: usize,
        sendtag: i32,
        recvbuf: &mut [R],
        source: impl Into<Source>,
        recvtag: i32,
    ) -> Result<Status> {
        self.remote.sendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag)
    }

    /// Waits for a message from the remote group and reports it (MPI_Probe).
    pub fn probe(&self, source: impl Into<Source>, tag: i32) -> Result<Status> {
        self.remote.probe(source, tag)
    }

    /// Reports a message from the remote group if one has arrived (MPI_Iprobe).
    pub fn iprobe(&self, source: impl Into<Source>, tag: i32) -> Result<Option<Status>> {
        self.remote.iprobe(source, tag)
    }

    /// Sends any serde value to rank `dest` of the remote group (see [`Comm::send_obj`]).
    pub fn send_obj<T: Serialize + ?Sized>(&self, value: &T, dest: usize, tag: i32) -> Result<()> {
        self.remote.send_obj(value, dest, tag)
    }

    /// Receives a value sent with [`InterComm::send_obj`] from the remote group.
    pub fn recv_obj<T: DeserializeOwned>(&self, source: impl Into<Source>, tag: i32) -> Result<(T, Status)> {
        self.remote.recv_obj(source, tag)
    }

    /// Runs `f` with an [`InterScope`] for nonblocking point-to-point with the remote group;
    /// returns once all of its requests are finished or released (see [`Comm::scope`]).
    ///
    /// ```
    /// # fn f(inter: &fastmp::InterComm) -> fastmp::Result<()> {
    /// let out = [inter.rank() as u32];
    /// let mut inc = [0u32];
    /// inter.scope(|s| {
    ///     let mut reqs = vec![s.irecv(&mut inc, 0, 5)?, s.isend(&out, 0, 5)?];
    ///     fastmp::waitall(&mut reqs)
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn scope<'env, F, R>(&'env self, f: F) -> R
    where
        F: for<'scope> FnOnce(&InterScope<'scope, 'env>) -> R,
    {
        self.remote.scope(|inner| f(&InterScope { inner }))
    }

    /// Blocks until every rank of both groups has called it (MPI_Barrier on an
    /// intercommunicator).
    pub fn barrier(&self) -> Result<()> {
        self.max_across("barrier", [0u64]).map(drop)
    }

    /// Broadcasts from one rank of one group to every rank of the other (MPI_Bcast on an
    /// intercommunicator): the root passes [`InterRoot::Root`], the rest of its group
    /// [`InterRoot::Null`] (their `buf` is untouched), and the other group `Remote(root)`.
    pub fn bcast<T: Pod>(&self, buf: &mut [T], root: InterRoot) -> Result<()> {
        if let InterRoot::Remote(r) = root
            && r >= self.remote_size()
        {
            return Err(Error::InvalidArgument(format!(
                "bcast: root Remote({r}) is out of range for a remote group of size {}",
                self.remote_size()
            )));
        }
        let tag = self.next_tag();
        match root {
            InterRoot::Null => Ok(()),
            // The remote leader receives and broadcasts in its group.
            InterRoot::Root => self.send_remote(bytemuck::cast_slice(buf), 0, tag),
            InterRoot::Remote(r) => {
                if self.rank() == 0 {
                    self.recv_remote("bcast", bytemuck::cast_slice_mut(buf), r, tag)?;
                }
                self.local.bcast(buf, 0)
            }
        }
    }

    /// Combines the remote group's `send` buffers element-wise with `op` into `recv` on every
    /// rank (MPI_Allreduce on an intercommunicator): each group gets the other's reduction.
    /// Both groups pass the same length.
    pub fn allreduce<T: Pod, O: Op<T>>(&self, send: &[T], recv: &mut [T], op: O) -> Result<()> {
        if send.len() != recv.len() {
            return Err(Error::InvalidArgument(format!(
                "allreduce: send has {} elements but recv {}",
                send.len(),
                recv.len()
            )));
        }
        let tag = self.next_tag();
        // The local leader holds this group's reduction, swaps it for the remote one, and
        // broadcasts that.
        self.local.reduce(send, recv, op, 0)?;
        if self.rank() == 0 {
            let ours = recv.to_vec();
            self.swap_leaders("allreduce", tag, bytemuck::cast_slice(&ours), bytemuck::cast_slice_mut(recv))?;
        }
        self.local.bcast(recv, 0)
    }

    /// Gathers the remote group's `send` buffers into `recv` on every rank, in remote rank
    /// order (MPI_Allgather on an intercommunicator). `recv` holds `remote_size()` blocks of
    /// the remote group's send length, which may differ from this group's.
    pub fn allgather<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        if !recv.len().is_multiple_of(self.remote_size()) {
            return Err(Error::InvalidArgument(format!(
                "allgather: recv has {} elements, not a multiple of the remote group's {} ranks",
                recv.len(),
                self.remote_size()
            )));
        }
        let tag = self.next_tag();
        let mut ours = vec![T::zeroed(); if self.rank() == 0 { send.len() * self.size() } else { 0 }];
        self.local.gather(send, &mut ours, 0)?;
        if self.rank() == 0 {
            self.swap_leaders("allgather", tag, bytemuck::cast_slice(&ours), bytemuck::cast_slice_mut(recv))?;
        }
        self.local.bcast(recv, 0)
    }

    /// One intracommunicator over both groups (MPI_Intercomm_merge). Collective over both
    /// groups; every rank of a group passes the same `high`. The group passing `false` comes
    /// first; if both pass the same, the group holding the lower world rank as its rank 0 does.
    pub fn merge(&self, high: bool) -> Result<Comm> {
        let next = u64::from(self.local.process.next_context.get());
        let (ours, theirs) = self.max_across("merge", [u64::from(high), u64::from(!high), next])?;
        // Both flags set: the group's ranks passed both values.
        if ours[0] == ours[1] || theirs[0] == theirs[1] {
            let which = if ours[0] == ours[1] { "this" } else { "the remote" };
            return Err(Error::InvalidArgument(format!(
                "merge: the ranks of {which} group passed different `high` values"
            )));
        }
        let (our_high, their_high) = (ours[0] == 1, theirs[0] == 1);
        let we_first = if our_high == their_high {
            self.local.group.world_rank(0) < self.remote.group.world_rank(0)
        } else {
            !our_high
        };
        let (first, second) =
            if we_first { (&self.local.group, &self.remote.group) } else { (&self.remote.group, &self.local.group) };
        let members = first.members().iter().chain(second.members()).copied().collect();
        let context = self.local.take_contexts(ours[2].max(theirs[2]), 1)?;
        let group = Group::from_members(members, self.local.dev.size(), self.local.dev.rank())?;
        Ok(self.local.derived(context, group))
    }

    /// Releases this handle (MPI_Comm_free); its contexts are never reused.
    pub fn free(self) {}

    /// Tag of the next collective's messages between the groups: every rank of both groups
    /// issues the intercommunicator's collectives in the same order.
    fn next_tag(&self) -> i32 {
        let seq = self.remote.coll_seq.get();
        self.remote.coll_seq.set(seq + 1);
        (seq & crate::TAG_UB as u64) as i32
    }

    fn send_remote(&self, bytes: &[u8], dest: usize, tag: i32) -> Result<()> {
        let dest = self.remote.group.world_rank(dest);
        self.remote.dev.send(bytes, dest, tag, self.remote.coll_context(), SendMode::Standard)
    }

    fn spec_from(&self, source: usize, tag: i32) -> MatchSpec {
        let source = Source::Rank(self.remote.group.world_rank(source));
        MatchSpec { context: self.remote.coll_context(), source, tag }
    }

    fn recv_remote(&self, call: &str, bytes: &mut [u8], source: usize, tag: i32) -> Result<()> {
        let expected = bytes.len();
        let raw = requests::recv(&*self.remote.dev, bytes, self.spec_from(source, tag))?;
        expect_bytes(call, raw, expected).map(drop)
    }

    /// The leaders (rank 0 of each group) swap `out` for the remote leader's `inc`.
    fn swap_leaders(&self, call: &str, tag: i32, out: &[u8], inc: &mut [u8]) -> Result<()> {
        let to = self.remote.group.world_rank(0);
        exchange(call, &*self.remote.dev, out, to, inc, self.spec_from(0, tag)).map(drop)
    }

    /// The maximum of `values` over the local group and over the remote group, on every rank;
    /// no rank returns before every rank of both groups has called it.
    fn max_across<const N: usize>(&self, call: &str, values: [u64; N]) -> Result<([u64; N], [u64; N])> {
        let tag = self.next_tag();
        let mut ours = [0u64; N];
        self.local.allreduce(&values, &mut ours, Max)?;
        let mut theirs = [0u64; N];
        if self.rank() == 0 {
            self.swap_leaders(call, tag, bytemuck::cast_slice(&ours), bytemuck::cast_slice_mut(&mut theirs))?;
        }
        self.local.bcast(&mut theirs, 0)?;
        Ok((ours, theirs))
    }
}

impl<'scope> InterScope<'scope, '_> {
    /// Starts a send to rank `dest` of the remote group (MPI_Isend).
    pub fn isend<T: Pod>(&self, buf: &'scope [T], dest: usize, tag: i32) -> Result<Request<'scope>> {
        self.inner.isend(buf, dest, tag)
    }

    /// Starts a synchronous send to rank `dest` of the remote group (MPI_Issend).
    pub fn issend<T: Pod>(&self, buf: &'scope [T], dest: usize, tag: i32) -> Result<Request<'scope>> {
        self.inner.issend(buf, dest, tag)
    }

    /// Starts a receive from rank `source` of the remote group (MPI_Irecv).
    pub fn irecv<T: Pod>(&self, buf: &'scope mut [T], source: impl Into<Source>, tag: i32) -> Result<Request<'scope>> {
        self.inner.irecv(buf, source, tag)
    }
}
