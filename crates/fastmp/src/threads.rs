//! Thread support: the thread level of each device (MPI_Query_thread) and [`ThreadComm`], the
//! communicator handle that any thread of a rank may use at once (MPI_THREAD_MULTIPLE) where the
//! device allows it.
//!
//! A [`Comm`] is not `Send`: it shares the rank's progress engine, nonblocking-collective state
//! and (on shm) the rank's single-threaded endpoint through `Rc`s, so that the rank's own thread
//! pays no synchronization. Making it `Send` would put every one of those behind atomics and
//! locks on shm's hot path, for a device (shm) whose endpoint could still not be shared. Instead,
//! `Comm::threaded` hands out a separate `Send + Sync` handle over the device's thread-safe
//! endpoint, carrying only what point-to-point needs (the context and the rank translation).

use std::sync::Arc;

use bytemuck::Pod;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::comm::{Comm, Status};
use crate::device::requests::{self, InFlight};
use crate::device::{
    ANY_TAG, ContextId, Device, MatchSpec, PROC_NULL, RawStatus, SendMode, SharedDevice, Source, TAG_UB,
};
use crate::error::{Error, Result};
use crate::mprobe::{Holder, Message, Prober};

/// How far a rank may use fastmp from several threads (MPI's thread levels, in their order).
///
/// | device | level | why |
/// |---|---|---|
/// | shm | `Funneled` | each rank's endpoint belongs to its thread; `Comm` is not `Send`, so only the rank's thread calls |
/// | tcp | `Multiple` | the endpoint is thread-safe: other threads use [`Comm::threaded`] handles |
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ThreadLevel {
    /// One thread only (MPI_THREAD_SINGLE).
    Single,
    /// Only the rank's main thread calls (MPI_THREAD_FUNNELED).
    Funneled,
    /// Any thread, one at a time (MPI_THREAD_SERIALIZED).
    Serialized,
    /// Any thread, at any time (MPI_THREAD_MULTIPLE).
    Multiple,
}

impl Comm {
    /// The thread level this rank's device provides (MPI_Query_thread): `Multiple` on tcp
    /// (through [`Comm::threaded`]), `Funneled` on shm.
    #[doc(alias = "query_thread")]
    pub fn thread_level(&self) -> ThreadLevel {
        self.dev.thread_level()
    }

    /// A handle of this communicator that other threads of the rank can use at the same time as
    /// this one (MPI_THREAD_MULTIPLE): point-to-point and matched probe on the same context,
    /// matching together with the rank's own traffic. Collectives stay on the rank's thread.
    ///
    /// Fails on devices whose endpoint belongs to its rank's thread (shm, thread level
    /// `Funneled`); the error says what to do instead.
    ///
    /// ```
    /// use fastmp::{Config, DeviceKind};
    /// Config::new().device(DeviceKind::Tcp).np(2).run(|world| {
    ///     let peer = 1 - world.rank();
    ///     let handle = world.threaded()?;
    ///     std::thread::scope(|s| {
    ///         // A helper thread exchanges on tag 1 while the rank's thread uses tag 0.
    ///         let helper = s.spawn(|| -> fastmp::Result<u32> {
    ///             let mut got = [0u32];
    ///             handle.sendrecv(&[10u32], peer, 1, &mut got, peer, 1)?;
    ///             Ok(got[0])
    ///         });
    ///         let mut got = [0u32];
    ///         world.sendrecv(&[20u32], peer, 0, &mut got, peer, 0)?;
    ///         assert_eq!((got[0], helper.join().unwrap()?), (20, 10));
    ///         Ok(())
    ///     })
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn threaded(&self) -> Result<ThreadComm> {
        self.check_live()?;
        let dev = self.dev.thread_shared()?;
        let comm_rank = (0..dev.size()).map(|world| self.group.group_rank_of(world)).collect();
        Ok(ThreadComm {
            inner: Arc::new(Inner {
                dev,
                context: self.context,
                rank: self.rank,
                members: self.group.members().into(),
                comm_rank,
            }),
        })
    }
}

/// A communicator handle for any thread of its rank (from [`Comm::threaded`]): `Send + Sync`,
/// cheap to clone. Its point-to-point traffic is the communicator's, so a message the rank's
/// thread sends can be received here and the other way round, with MPI's matching order.
///
/// Blocking waits in a `ThreadComm` progress the device but not the rank's nonblocking
/// collectives (those move in the rank's own calls). Once the rank's program has returned,
/// every call fails with [`Error::Finalized`].
#[derive(Clone)]
pub struct ThreadComm {
    inner: Arc<Inner>,
}

struct Inner {
    dev: SharedDevice,
    context: ContextId,
    rank: usize,
    /// World rank of each communicator rank.
    members: Box<[usize]>,
    /// Communicator rank of each world rank (`None`: not a member).
    comm_rank: Box<[Option<usize>]>,
}

impl std::fmt::Debug for ThreadComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadComm").field("rank", &self.rank()).field("size", &self.size()).finish()
    }
}

impl ThreadComm {
    /// This rank's number in the communicator.
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// Number of ranks in the communicator.
    pub fn size(&self) -> usize {
        self.inner.members.len()
    }

    /// The device's thread level (always `Multiple`: only such devices give handles).
    pub fn thread_level(&self) -> ThreadLevel {
        self.dev().thread_level()
    }

    fn dev(&self) -> &dyn Device {
        &*self.inner.dev
    }

    /// The world rank of `dest`, or `None` for `PROC_NULL` (nothing to send).
    fn dest(&self, call: &str, dest: usize, tag: i32) -> Result<Option<usize>> {
        if !(0..=TAG_UB).contains(&tag) {
            return Err(Error::InvalidArgument(format!("{call}: tag {tag} is out of range (0..={TAG_UB})")));
        }
        match dest {
            PROC_NULL => Ok(None),
            d if d >= self.size() => Err(Error::InvalidArgument(format!(
                "{call}: destination rank {d} is out of range for a communicator of size {}",
                self.size()
            ))),
            d => Ok(Some(self.inner.members[d])),
        }
    }

    /// The device match spec, or `None` for `PROC_NULL` (completes at once with no data).
    fn spec(&self, call: &str, source: Source, tag: i32) -> Result<Option<MatchSpec>> {
        if tag != ANY_TAG && !(0..=TAG_UB).contains(&tag) {
            return Err(Error::InvalidArgument(format!(
                "{call}: tag {tag} is out of range (0..={TAG_UB}, or ANY_TAG)"
            )));
        }
        let source = match source {
            Source::Rank(PROC_NULL) => return Ok(None),
            Source::Rank(r) if r >= self.size() => {
                return Err(Error::InvalidArgument(format!(
                    "{call}: source rank {r} is out of range for a communicator of size {}",
                    self.size()
                )));
            }
            Source::Rank(r) => Source::Rank(self.inner.members[r]),
            Source::Any => Source::Any,
        };
        Ok(Some(MatchSpec { context: self.inner.context, source, tag }))
    }

    fn comm_rank(&self, world: usize) -> usize {
        self.inner.comm_rank.get(world).copied().flatten().unwrap_or(world)
    }

    fn status(&self, raw: RawStatus, elem_size: usize) -> Result<Status> {
        Status::of(raw, self.comm_rank(raw.source), elem_size)
    }

    fn prober(&self) -> Prober<'_, impl Fn(usize) -> usize + '_> {
        Prober { dev: self.dev(), source_of: |world| self.comm_rank(world) }
    }

    fn send_bytes(&self, call: &str, bytes: &[u8], dest: usize, tag: i32, mode: SendMode) -> Result<()> {
        match self.dest(call, dest, tag)? {
            Some(world) => self.dev().send(bytes, world, tag, self.inner.context, mode),
            None => Ok(()),
        }
    }

    /// Sends `buf` to `dest` (MPI_Send from any thread).
    pub fn send<T: Pod>(&self, buf: &[T], dest: usize, tag: i32) -> Result<()> {
        self.send_bytes("ThreadComm::send", bytemuck::cast_slice(buf), dest, tag, SendMode::Standard)
    }

    /// Synchronous send (MPI_Ssend): returns once the receiver has matched the message.
    pub fn ssend<T: Pod>(&self, buf: &[T], dest: usize, tag: i32) -> Result<()> {
        self.send_bytes("ThreadComm::ssend", bytemuck::cast_slice(buf), dest, tag, SendMode::Synchronous)
    }

    /// Receives into `buf` (MPI_Recv from any thread).
    pub fn recv<T: Pod>(&self, buf: &mut [T], source: impl Into<Source>, tag: i32) -> Result<Status> {
        let Some(spec) = self.spec("ThreadComm::recv", source.into(), tag)? else { return proc_null_status() };
        let raw = requests::recv(self.dev(), bytemuck::cast_slice_mut(buf), spec)?;
        self.status(raw, size_of::<T>())
    }

    /// Sends and receives at once (MPI_Sendrecv from any thread).
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
        const CALL: &str = "ThreadComm::sendrecv";
        let dest_world = self.dest(CALL, dest, sendtag)?;
        let Some(spec) = self.spec(CALL, source.into(), recvtag)? else {
            self.send_bytes(CALL, bytemuck::cast_slice(sendbuf), dest, sendtag, SendMode::Standard)?;
            return proc_null_status();
        };
        // SAFETY: the receive is waited for (or dropped, which releases it) in this frame.
        let receive = unsafe { InFlight::recv(self.dev(), bytemuck::cast_slice_mut(recvbuf), spec)? };
        if let Some(world) = dest_world {
            self.dev().send(bytemuck::cast_slice(sendbuf), world, sendtag, self.inner.context, SendMode::Standard)?;
        }
        let raw = receive.wait()?;
        self.status(raw, size_of::<R>())
    }

    /// Waits for a matching message and reports it without receiving it (MPI_Probe). With
    /// several threads receiving, another may take the message first: use [`ThreadComm::mprobe`].
    pub fn probe(&self, source: impl Into<Source>, tag: i32) -> Result<Status> {
        let Some(spec) = self.spec("ThreadComm::probe", source.into(), tag)? else { return proc_null_status() };
        let mut found = None;
        self.dev().wait_until(&mut || {
            found = self.dev().iprobe(spec)?;
            Ok(found.is_some())
        })?;
        self.status(found.expect("probe completed"), 1)
    }

    /// Non-blocking probe (MPI_Iprobe).
    pub fn iprobe(&self, source: impl Into<Source>, tag: i32) -> Result<Option<Status>> {
        let Some(spec) = self.spec("ThreadComm::iprobe", source.into(), tag)? else {
            return proc_null_status().map(Some);
        };
        self.dev().iprobe(spec)?.map(|raw| self.status(raw, 1)).transpose()
    }

    /// Matched probe (MPI_Mprobe): takes the message off matching, so no other thread can
    /// receive it; see [`Comm::mprobe`].
    pub fn mprobe(&self, source: impl Into<Source>, tag: i32) -> Result<(Message, Status)> {
        let spec = self.spec("ThreadComm::mprobe", source.into(), tag)?;
        self.prober().mprobe(spec, || Holder::Shared(self.inner.dev.clone()))
    }

    /// Non-blocking matched probe (MPI_Improbe).
    pub fn improbe(&self, source: impl Into<Source>, tag: i32) -> Result<Option<(Message, Status)>> {
        let spec = self.spec("ThreadComm::improbe", source.into(), tag)?;
        self.prober().improbe(spec, || Holder::Shared(self.inner.dev.clone()))
    }

    /// Receives a probed message into `buf` (MPI_Mrecv); the same as [`Message::recv`].
    pub fn mrecv<T: Pod>(&self, buf: &mut [T], message: Message) -> Result<Status> {
        message.recv(buf)
    }

    /// Sends a serde value (see [`Comm::send_obj`]).
    pub fn send_obj<T: Serialize + ?Sized>(&self, value: &T, dest: usize, tag: i32) -> Result<()> {
        const CALL: &str = "ThreadComm::send_obj";
        self.dest(CALL, dest, tag)?;
        let bytes = postcard::to_allocvec(value).map_err(|e| Error::Serialization(e.to_string()))?;
        self.send_bytes(CALL, &bytes, dest, tag, SendMode::Standard)
    }

    /// Receives a value sent with `send_obj`. Built on the matched probe, so threads receiving
    /// objects concurrently never take each other's message.
    pub fn recv_obj<T: DeserializeOwned>(&self, source: impl Into<Source>, tag: i32) -> Result<(T, Status)> {
        let (message, _) = self.mprobe(source, tag)?;
        if message.is_no_proc() {
            return Err(Error::InvalidArgument("ThreadComm::recv_obj: PROC_NULL sends no value".into()));
        }
        message.recv_obj()
    }
}

/// What a receive from `PROC_NULL` reports: at once, no data.
fn proc_null_status() -> Result<Status> {
    Ok(crate::scope::EMPTY_STATUS)
}
