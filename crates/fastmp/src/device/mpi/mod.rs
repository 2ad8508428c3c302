//! The `mpi` device: fastmp's point-to-point over the system MPI (every fabric it reaches), through
//! a small C shim with a fixed ABI (`csrc/fastmp_mpi.h`, built by `build.rs` with `mpicc`).
//!
//! Each fastmp context is carried by its own MPI communicator: a communicator's point-to-point
//! context `c` and collective context `c + 1` map to two communicators created over its members
//! when it is created ([`Device::collectives`]); the world's two are copies of `MPI_COMM_WORLD`
//! made when a job starts (by `MPI_Comm_create_group`: see `fastmp_mpi_world_dup`). Device ranks are world ranks, translated to and from
//! the communicator's ranks by its [`Route`].
//!
//! Requests live in a generation-checked slab of opaque MPI request slots. Under
//! `MPI_THREAD_MULTIPLE` the slab's lock is not held across `MPI_Test`, so a completing receive
//! copies its data without it; below, no other thread can wait for it, and a test holds it.
//! Errors: every communicator has `MPI_ERRORS_RETURN`, and an MPI error code becomes a
//! [`crate::Error`] carrying `MPI_Error_string`'s text ([`check`]).

mod bounce;
pub(crate) mod collectives;
mod ffi;
pub(crate) mod lanes;
pub(crate) mod one_sided;
mod tags;

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use super::slab::Slab;
use super::wait::{Backoff, Pause, WaitPolicy};
use super::{
    ContextId, Device, Failure, MatchSpec, MessageId, Placement, RawStatus, ReqId, SendMode, SharedDevice, Source,
    Started, lock_ignoring_poison,
};
use crate::error::{Error, Result};
use bounce::BounceSlot;
use ffi::Slot;
use tags::TagMap;

/// Maps an MPI error code to a fastmp error naming the call, with MPI's own description.
#[inline]
pub(crate) fn check(code: c_int, call: &'static str) -> Result<()> {
    if code == 0 { Ok(()) } else { Err(mpi_error(code, call)) }
}

#[cold]
pub(crate) fn mpi_error(code: c_int, call: &'static str) -> Error {
    Error::other(format!("{call}: MPI error {code}: {}", error_string(code)))
}

/// `MPI_Error_string` of `code`.
fn error_string(code: c_int) -> String {
    let mut buf = [0u8; 1024];
    let mut len: c_int = 0;
    // SAFETY: the shim writes at most `buf.len()` bytes into `buf` and their count into `len`.
    let rc = unsafe { ffi::fastmp_mpi_error_string(code, buf.as_mut_ptr().cast(), buf.len() as c_int, &mut len) };
    if rc != 0 {
        return "(no description)".into();
    }
    String::from_utf8_lossy(&buf[..(len.max(0) as usize).min(buf.len())]).trim_end_matches('\0').to_string()
}

/// The thread level asked of MPI: `multiple`, `serialized`, or `single`. Unset, a process whose
/// first job starts on its main thread asks for `MPI_THREAD_SINGLE`, any other for
/// `MPI_THREAD_SERIALIZED`: Open MPI 4.1 takes its locks at every level above SINGLE (FUNNELED
/// too), which cost its own C benchmark 0.35 → 0.40 µs of 8-byte ping-pong and 0.4–0.5 µs of
/// 8-byte allreduce on the development VM; under MULTIPLE it also locks its matching (0.41 →
/// 1.8–3.2 µs), so MULTIPLE is opt-in.
pub(crate) const THREADS_VAR: &str = "FASTMP_MPI_THREADS";

/// A thread level of MPI, in the shim's codes (`fastmp_mpi_init`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Level {
    /// MPI_THREAD_SINGLE (or FUNNELED): only the thread that initialised MPI may call it.
    Single = 0,
    Serialized = 1,
    Multiple = 2,
}

/// What MPI granted this process, and the thread that asked.
#[derive(Clone)]
struct Granted {
    level: Level,
    thread: std::thread::ThreadId,
}

/// Initialises MPI once per process (the first job decides the thread level); returns whether
/// MPI granted `MPI_THREAD_MULTIPLE`. `at_least` raises the level whatever the environment says
/// (the hybrid device's rank threads call MPI: SERIALIZED for one per process, MULTIPLE for
/// more). Under `MPI_THREAD_SINGLE` a job on any thread but the one that initialised MPI, or one
/// that needs more, is an `Err`: MPI would be called from two threads.
fn init_mpi(at_least: Level) -> Result<bool> {
    static GRANTED: OnceLock<std::result::Result<Granted, String>> = OnceLock::new();
    let granted = GRANTED.get_or_init(|| {
        let on_main = std::thread::current().name() == Some("main");
        let asked = match std::env::var(THREADS_VAR).as_deref() {
            Ok("multiple") => Some(Level::Multiple),
            Ok("serialized") => Some(Level::Serialized),
            Ok("single") => Some(Level::Single),
            Err(_) => None,
            Ok(other) => return Err(format!("{THREADS_VAR}={other}: expected 'multiple', 'serialized' or 'single'")),
        };
        let default = if on_main { Level::Single } else { Level::Serialized };
        let wanted = asked.unwrap_or(default).max(at_least);
        let mut level: c_int = 0;
        // SAFETY: the shim writes one int; it initialises MPI at most once per process.
        let rc = unsafe { ffi::fastmp_mpi_init(wanted as c_int, &mut level) };
        check(
            rc,
            "MPI_Init_thread (fastmp needs the level it asks for, at least MPI_THREAD_SERIALIZED off the main thread)",
        )
        .map_err(|e| e.to_string())?;
        let level = match level {
            2 => Level::Multiple,
            1 => Level::Serialized,
            _ => Level::Single,
        };
        Ok(Granted { level, thread: std::thread::current().id() })
    });
    let granted = granted.clone().map_err(Error::InvalidArgument)?;
    if granted.level == Level::Single && (granted.thread != std::thread::current().id() || at_least > Level::Single) {
        return Err(Error::InvalidArgument(format!(
            "mpi device: MPI was initialised with MPI_THREAD_SINGLE on the thread that started this process's first \
             job, and this job calls it from another thread; set {THREADS_VAR}=serialized (or multiple) before the \
             first job"
        )));
    }
    Ok(granted.level == Level::Multiple)
}

/// The MPI communicator of one fastmp context and how its ranks relate to world ranks. Cloning
/// the world's touches no reference count (every message clones its route).
#[derive(Clone)]
struct Route {
    handle: c_int,
    /// World rank of each communicator rank; `None` for the world itself (identity).
    members: Option<Arc<[usize]>>,
}

impl Route {
    /// The communicator rank of world rank `world`, or `None` if it is not a member.
    fn local_of(&self, world: usize) -> Option<c_int> {
        match &self.members {
            None => c_int::try_from(world).ok(),
            Some(members) => members.iter().position(|&m| m == world).map(|i| i as c_int),
        }
    }

    /// The world rank of communicator rank `local` (as MPI reports it in a status).
    fn world_of(&self, local: c_int) -> usize {
        let local = local.max(0) as usize;
        match &self.members {
            None => local,
            Some(members) => members.get(local).copied().unwrap_or(local),
        }
    }
}

/// What a pending request is, for turning its MPI status into fastmp's.
enum Pending {
    /// An MPI send request (in the entry's slot).
    Send { tag: i32, bytes: usize },
    /// A receive: matched by a matched probe in post order ([`Requests::match_receives`]), then an
    /// MPI receive (in the slot) of a message known to fit.
    Recv(Receive),
    /// Finished while matching (truncated, or cancelled before it matched).
    Done(Result<RawStatus>),
    /// A message taken by `improbe`, not yet received (its MPI message in the slot).
    Message { route: Route, status: RawStatus },
    /// A small receive posted to MPI at once on a bounce slot (its MPI request in the slot).
    Bounced(Bounced),
}

/// A receive posted on a bounce slot, copied to its buffer when it completes.
struct Bounced {
    route: Route,
    bounce: BounceSlot,
    /// The caller's buffer (an address: the device's buffer contract keeps it valid).
    buf: usize,
    capacity: usize,
    tag: Tag,
}

impl Bounced {
    /// Copies the completed receive out of its slot (the first `capacity` bytes of a longer
    /// message, which is then a truncation error) and frees the slot.
    ///
    /// # Safety
    /// `buf` still holds `capacity` writable bytes; the receive completed.
    unsafe fn finish(self, tested: Tested, me: usize) -> Result<RawStatus> {
        check(tested.rc, "MPI_Test (receive)")?;
        if tested.cancelled {
            // As the other devices report a cancelled receive.
            return Ok(RawStatus { source: me, tag: 0, bytes: 0, cancelled: true });
        }
        // SAFETY: forwarded caller contract.
        unsafe { self.bounce.take(self.buf as *mut u8, tested.bytes.min(self.capacity), tested.bytes) };
        let source = self.route.world_of(tested.source);
        super::receive_result(source, self.tag.reported(tested.tag), tested.bytes, self.capacity)
    }
}

struct Receive {
    route: Route,
    /// The caller's buffer (an address: the device's buffer contract keeps it valid).
    buf: usize,
    capacity: usize,
    source: c_int,
    tag: Tag,
    /// The message it matched, once it has.
    matched: Option<RawStatus>,
}

struct Entry {
    slot: Slot,
    pending: Pending,
}

/// The rank's requests, and its receives not yet matched in the order they were posted.
///
/// Receives are matched with `MPI_Improbe` and received with `MPI_Imrecv` only once the message is
/// known to fit: Open MPI 4.1 writes a truncated large message past the end of a posted
/// receive's buffer (single-copy path), so a posted `MPI_Irecv` smaller than its message is
/// never risked. Matching the unmatched receives in post order keeps MPI's matching order.
#[derive(Default)]
struct Requests {
    slab: Slab<Entry>,
    unmatched: Vec<ReqId>,
}

impl Requests {
    /// Matches every unmatched receive for which a message has arrived, oldest receive first.
    fn match_receives(&mut self) {
        let mut i = 0;
        while i < self.unmatched.len() {
            let id = self.unmatched[i];
            let Some(Entry { slot, pending: Pending::Recv(recv) }) = self.slab.get_mut(id).ok() else {
                self.unmatched.remove(i);
                continue;
            };
            let Some((mut message, status)) = improbe(&recv.route, recv.source, recv.tag).ok().flatten() else {
                i += 1;
                continue;
            };
            self.unmatched.remove(i);
            let entry_pending = if status.bytes > recv.capacity {
                // SAFETY: `buf` is the receive's buffer of `capacity` bytes (buffer contract).
                Pending::Done(unsafe { receive_truncated(&mut message, status, recv.buf as *mut u8, recv.capacity) })
            } else {
                // SAFETY: as above; the message fits.
                let rc =
                    unsafe { ffi::fastmp_mpi_imrecv((recv.buf as *mut u8).cast(), recv.capacity, &mut message, slot) };
                match check(rc, "MPI_Imrecv") {
                    Ok(()) => {
                        recv.matched = Some(status);
                        continue;
                    }
                    Err(e) => Pending::Done(Err(e)),
                }
            };
            if let Ok(entry) = self.slab.get_mut(id) {
                entry.pending = entry_pending;
            }
        }
    }
}

/// The locked [`Requests`]; unlocking publishes whether receives wait to be matched.
struct RequestsGuard<'a> {
    requests: std::sync::MutexGuard<'a, Requests>,
    waiting: &'a AtomicBool,
}

impl std::ops::Deref for RequestsGuard<'_> {
    type Target = Requests;
    fn deref(&self) -> &Requests {
        &self.requests
    }
}

impl std::ops::DerefMut for RequestsGuard<'_> {
    fn deref_mut(&mut self) -> &mut Requests {
        &mut self.requests
    }
}

impl Drop for RequestsGuard<'_> {
    fn drop(&mut self) {
        self.waiting.store(!self.requests.unmatched.is_empty(), Ordering::Release);
    }
}

/// Receives a message longer than `capacity` through a temporary buffer (an error path), delivers
/// its first `capacity` bytes as MPI would, and returns the truncation error.
///
/// # Safety
/// `buf..buf + capacity` is writable; `message` is a live matched message of `status.bytes`.
unsafe fn receive_truncated(message: &mut Slot, status: RawStatus, buf: *mut u8, capacity: usize) -> Result<RawStatus> {
    let mut whole = vec![0u8; status.bytes];
    let mut request: Slot = 0;
    // SAFETY: `whole` holds the whole message and outlives the wait below.
    let rc = unsafe { ffi::fastmp_mpi_imrecv(whole.as_mut_ptr().cast(), whole.len(), message, &mut request) };
    check(rc, "MPI_Imrecv")?;
    let (rc, _) = wait_slot(WaitPolicy { spins: 64, yields: 64 }, &mut request);
    check(rc, "MPI_Test (receive)")?;
    // SAFETY: the caller's buffer holds `capacity` bytes, fewer than `whole`'s.
    unsafe { std::ptr::copy_nonoverlapping(whole.as_ptr(), buf, capacity) };
    super::receive_result(status.source, status.tag, status.bytes, capacity)
}

/// A receive's tag: fastmp's, and the MPI tag carrying it ([`TagMap::wire`]).
#[derive(Clone, Copy)]
struct Tag {
    asked: i32,
    wire: c_int,
}

impl Tag {
    /// Any tag (`MPI_ANY_TAG`).
    const ANY: Tag = Tag { asked: -1, wire: -1 };

    /// The tag a status reports: the one asked for, or MPI's for a wildcard (where the two
    /// only differ on internal contexts, which never receive with a wildcard tag).
    fn reported(self, got: c_int) -> i32 {
        if self.asked < 0 { got } else { self.asked }
    }
}

/// One `MPI_Improbe` on `route`'s communicator (sources below 0 are wildcards).
fn improbe(route: &Route, source: c_int, tag: Tag) -> Result<Option<(Slot, RawStatus)>> {
    let (mut found, mut slot, mut src, mut got_tag, mut bytes) = (0, 0, 0, 0, 0);
    // SAFETY: the shim writes the outputs.
    let rc = unsafe {
        ffi::fastmp_mpi_improbe(
            source,
            tag.wire,
            route.handle,
            &mut found,
            &mut slot,
            &mut src,
            &mut got_tag,
            &mut bytes,
        )
    };
    check(rc, "MPI_Improbe")?;
    Ok((found != 0).then(|| {
        let tag = tag.reported(got_tag);
        (slot, RawStatus { source: route.world_of(src), tag, bytes: bytes.max(0) as usize, cancelled: false })
    }))
}

/// A completed (or failed) MPI request: its error code and MPI status.
struct Tested {
    rc: c_int,
    source: c_int,
    tag: c_int,
    bytes: usize,
    cancelled: bool,
}

/// Tests an MPI request slot once: `Some` when it completed (or failed).
fn test_once(slot: &mut Slot) -> Option<Tested> {
    let (mut done, mut source, mut tag, mut bytes, mut cancelled) = (0, 0, 0, 0, 0);
    // SAFETY: `slot` holds a live MPI request of this process; the shim writes the outputs.
    let rc = unsafe { ffi::fastmp_mpi_test(slot, &mut done, &mut source, &mut tag, &mut bytes, &mut cancelled) };
    (done != 0 || rc != 0).then(|| Tested { rc, source, tag, bytes: bytes.max(0) as usize, cancelled: cancelled != 0 })
}

/// Tests an MPI request slot once: `Some((rc, cancelled))` when it completed (or failed).
fn test_slot(slot: &mut Slot) -> Option<(c_int, bool)> {
    test_once(slot).map(|t| (t.rc, t.cancelled))
}

/// Blocks (spin → yield → short sleeps, testing the request) until `slot` completes.
fn wait_slot(policy: WaitPolicy, slot: &mut Slot) -> (c_int, bool) {
    let mut backoff = Backoff::new(policy);
    loop {
        if let Some(done) = test_slot(slot) {
            return done;
        }
        pause(backoff.next());
    }
}

/// One job's state on this process, shared by the rank's thread handles.
struct Job {
    rank: usize,
    size: usize,
    /// World communicator handles: point-to-point (also the parent of every other) and collective.
    world_p2p: Route,
    world_coll: Route,
    /// Routes of every other context, created by `collectives`.
    routes: RwLock<HashMap<ContextId, Route>>,
    requests: Mutex<Requests>,
    /// Whether any receive waits to be matched, as of the last release of `requests`' lock: a
    /// blocking receive reads it without taking the lock.
    unmatched_waiting: AtomicBool,
    finalized: AtomicBool,
    placement: Placement,
    policy: WaitPolicy,
    thread_multiple: bool,
    tags: TagMap,
}

impl Drop for Job {
    fn drop(&mut self) {
        let routes = self.routes.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        for route in routes.values().chain([&self.world_coll, &self.world_p2p]) {
            // SAFETY: the handle was created by the shim for this job and is freed once.
            unsafe { ffi::fastmp_mpi_comm_free(route.handle) };
        }
    }
}

/// A rank's endpoint on the mpi device (one process per rank).
pub(crate) struct MpiEndpoint {
    job: Arc<Job>,
    rma: one_sided::MpiRma,
}

impl MpiEndpoint {
    /// Joins a new job: initialises MPI if needed and duplicates `MPI_COMM_WORLD` (collective
    /// over every process), so each job's traffic is its own.
    pub(crate) fn new() -> Result<MpiEndpoint> {
        let thread_multiple = init_mpi(Level::Single)?;
        let p2p = world_dup()?;
        let coll = world_dup()?;
        let (mut rank, mut size) = (0, 0);
        // SAFETY: the shim writes one int each.
        check(unsafe { ffi::fastmp_mpi_comm_rank(p2p, &mut rank) }, "MPI_Comm_rank")?;
        // SAFETY: as above.
        check(unsafe { ffi::fastmp_mpi_comm_size(p2p, &mut size) }, "MPI_Comm_size")?;
        let (rank, size) = (rank as usize, size as usize);
        let placement = placement(p2p, size)?;
        let mut tag_ub: c_int = 0;
        // SAFETY: the shim writes one int.
        check(unsafe { ffi::fastmp_mpi_tag_ub(&mut tag_ub) }, "MPI_Comm_get_attr(MPI_TAG_UB)")?;
        let on_node = (0..size).filter(|&r| placement.node_of(r) == placement.node_of(rank)).count();
        let job = Job {
            rank,
            size,
            world_p2p: Route { handle: p2p, members: None },
            world_coll: Route { handle: coll, members: None },
            routes: RwLock::default(),
            requests: Mutex::new(Requests { slab: Slab::with_capacity(64), unmatched: Vec::with_capacity(64) }),
            unmatched_waiting: AtomicBool::new(false),
            finalized: AtomicBool::new(false),
            placement,
            policy: WaitPolicy::for_ranks_on(on_node, online_cpus()),
            thread_multiple,
            tags: TagMap::new(tag_ub)?,
        };
        let rma = one_sided::MpiRma::new(p2p);
        Ok(MpiEndpoint { job: Arc::new(job), rma })
    }

    /// The handle of the MPI communicator carrying `context` (for the shim's other parts).
    #[allow(dead_code, reason = "used by the collective and one-sided parts of the device")]
    pub(crate) fn comm_handle(&self, context: ContextId) -> Result<c_int> {
        self.route(context).map(|r| r.handle)
    }

    /// Inline for the world's contexts, which every message of a world communicator takes.
    #[inline]
    fn route(&self, context: ContextId) -> Result<Route> {
        match context {
            0 => Ok(self.job.world_p2p.clone()),
            1 => Ok(self.job.world_coll.clone()),
            _ => self.listed_route(context),
        }
    }

    /// The route of a context beyond the world's, from the table.
    fn listed_route(&self, context: ContextId) -> Result<Route> {
        let routes = self.job.routes.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        routes.get(&context).cloned().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "mpi device: no MPI communicator carries context {context} (only communicators created from the \
                 world by dup/split/create/merge and intercommunicators have one)"
            ))
        })
    }

    /// `f` of `context`'s route: the world's by reference (a route returned by value through a
    /// `Result` costs a small send more than its copy), any other from the table.
    fn with_route<R>(&self, context: ContextId, f: impl FnOnce(&Route) -> Result<R>) -> Result<R> {
        match context {
            0 => f(&self.job.world_p2p),
            1 => f(&self.job.world_coll),
            _ => f(&self.listed_route(context)?),
        }
    }

    fn check_live(&self) -> Result<()> {
        if self.job.finalized.load(Ordering::Acquire) { Err(Error::Finalized("mpi device")) } else { Ok(()) }
    }

    /// The world rank `rank` as a rank of `route`'s communicator.
    fn local_rank(&self, route: &Route, rank: usize) -> Result<c_int> {
        if rank >= self.job.size {
            return Err(Error::RankOutOfRange { rank, size: self.job.size });
        }
        route.local_of(rank).ok_or_else(|| {
            Error::InvalidArgument(format!("mpi device: world rank {rank} is not a member of this communicator"))
        })
    }

    /// fastmp's `tag` on `context` and the MPI tag carrying it.
    fn tag(&self, tag: i32, context: ContextId) -> Result<Tag> {
        Ok(Tag { asked: tag, wire: self.job.tags.wire(tag, context)? })
    }

    fn source_of(&self, route: &Route, source: Source) -> Result<c_int> {
        match source {
            Source::Any => Ok(-1),
            Source::Rank(r) => self.local_rank(route, r),
        }
    }

    /// Creates the two MPI communicators of a new fastmp communicator over `members`.
    fn create_routes(&self, context: ContextId, members: &[usize]) -> Result<()> {
        if context < 2
            || self.job.routes.read().unwrap_or_else(std::sync::PoisonError::into_inner).contains_key(&context)
        {
            return Ok(());
        }
        let ranks: Vec<c_int> = members.iter().map(|&m| m as c_int).collect();
        let parent = self.job.world_p2p.handle;
        let mut created = Vec::with_capacity(2);
        for ctx in [context, context + 1] {
            let mut handle: c_int = -1;
            // Tags keep concurrent creations over overlapping groups apart; contexts are unique
            // per process, and MPI's tag upper bound is at least 32767.
            let tag = (ctx % 32_768) as c_int;
            // SAFETY: `ranks` holds `n` ints; the shim writes one handle.
            let rc = unsafe {
                ffi::fastmp_mpi_comm_create_group(parent, ranks.as_ptr(), ranks.len() as c_int, tag, &mut handle)
            };
            check(rc, "MPI_Comm_create_group")?;
            created.push((ctx, Route { handle, members: Some(members.into()) }));
        }
        self.job.routes.write().unwrap_or_else(std::sync::PoisonError::into_inner).extend(created);
        Ok(())
    }

    /// Turns a completed MPI request's outcome into fastmp's status or error.
    fn finish(&self, pending: Pending, rc: c_int, cancelled: bool) -> Result<RawStatus> {
        match pending {
            Pending::Send { tag, bytes } => {
                check(rc, "MPI_Test (send)")?;
                Ok(RawStatus { source: self.job.rank, tag, bytes, cancelled })
            }
            Pending::Recv(Receive { matched: Some(status), .. }) => {
                check(rc, "MPI_Test (receive)")?;
                Ok(status)
            }
            Pending::Done(result) => result,
            Pending::Recv(_) | Pending::Message { .. } | Pending::Bounced(_) => {
                Err(Error::InvalidArgument("mpi device: request completed in an unexpected state".into()))
            }
        }
    }

    /// An MPI request of `req` that completed: removed from the table, then turned into fastmp's
    /// status (a bounced receive copied out, after the lock is released).
    fn retire(&self, mut requests: RequestsGuard<'_>, req: ReqId, tested: Tested) -> Result<Option<RawStatus>> {
        let entry = requests.slab.remove(req).ok_or_else(|| stale("request"))?;
        drop(requests);
        match entry.pending {
            // SAFETY: the buffer stays valid until its request is retired, here (buffer contract).
            Pending::Bounced(bounced) => unsafe { bounced.finish(tested, self.job.rank) }.map(Some),
            pending => self.finish(pending, tested.rc, tested.cancelled).map(Some),
        }
    }

    fn wait_slot(&self, slot: &mut Slot) -> (c_int, bool) {
        wait_slot(self.job.policy, slot)
    }

    fn requests(&self) -> RequestsGuard<'_> {
        RequestsGuard { requests: lock_ignoring_poison(&self.job.requests), waiting: &self.job.unmatched_waiting }
    }

    fn track(&self, slot: Slot, pending: Pending) -> ReqId {
        self.requests().slab.insert(Entry { slot, pending })
    }

    /// Starts a receive (matched later, in post order).
    fn post_receive(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Result<ReqId> {
        self.check_live()?;
        let route = self.route(spec.context)?;
        let source = self.source_of(&route, spec.source)?;
        let tag = self.tag(spec.tag, spec.context)?;
        let recv = Receive { route, buf: buf as usize, capacity, source, tag, matched: None };
        let mut requests = self.requests();
        let id = requests.slab.insert(Entry { slot: 0, pending: Pending::Recv(recv) });
        requests.unmatched.push(id);
        requests.match_receives();
        Ok(id)
    }

    /// Posts a small receive on `bounce` at once. Only while no earlier receive waits to be
    /// matched (its callers' condition), so MPI's matching order holds.
    fn post_bounced(
        &self,
        bounce: BounceSlot,
        buf: *mut u8,
        capacity: usize,
        route: Route,
        source: c_int,
        tag: Tag,
    ) -> Result<(Slot, Bounced)> {
        let mut slot: Slot = 0;
        // SAFETY: the shim writes the slot; the bounce slot is this receive's until it is dropped.
        let rc = unsafe { ffi::fastmp_mpi_bounce_irecv(bounce.index(), source, tag.wire, route.handle, &mut slot) };
        check(rc, "MPI_Irecv")?;
        Ok((slot, Bounced { route, bounce, buf: buf as usize, capacity, tag }))
    }

    /// A small blocking receive on `bounce`: posted at once, then copied to `buf`.
    ///
    /// # Safety
    /// As for [`Device::recv`].
    unsafe fn recv_bounced(
        &self,
        bounce: BounceSlot,
        buf: *mut u8,
        capacity: usize,
        route: Route,
        source: c_int,
        tag: Tag,
    ) -> Result<RawStatus> {
        let (mut slot, bounced) = self.post_bounced(bounce, buf, capacity, route, source, tag)?;
        let mut tested = None;
        if let Err(e) = self.wait_until(&mut || {
            tested = test_once(&mut slot);
            Ok(tested.is_some())
        }) {
            // The job ended while waiting: MPI gives the slot back before it is freed.
            // SAFETY: `slot` holds the live receive posted above.
            unsafe { ffi::fastmp_mpi_cancel(&mut slot) };
            self.wait_slot(&mut slot);
            return Err(e);
        }
        // SAFETY: `buf` holds `capacity` writable bytes (caller contract); the receive completed.
        unsafe { bounced.finish(tested.expect("wait_until returns once tested"), self.job.rank) }
    }

    /// Receives a message taken off matching into `buf` (truncating through a temporary buffer).
    ///
    /// # Safety
    /// As for [`Device::irecv`].
    unsafe fn receive_message(
        &self,
        mut message: Slot,
        route: Route,
        status: RawStatus,
        buf: *mut u8,
        capacity: usize,
    ) -> Result<Started> {
        if status.bytes > capacity {
            // SAFETY: forwarded caller contract.
            return Ok(Started::Complete(unsafe { receive_truncated(&mut message, status, buf, capacity) }));
        }
        let mut request: Slot = 0;
        // SAFETY: forwarded buffer contract; the message is live and used up here.
        let rc = unsafe { ffi::fastmp_mpi_imrecv(buf.cast(), capacity, &mut message, &mut request) };
        check(rc, "MPI_Imrecv")?;
        let tag = Tag::ANY;
        let recv = Receive { route, buf: buf as usize, capacity, source: -1, tag, matched: Some(status) };
        Ok(Started::Pending(self.track(request, Pending::Recv(recv))))
    }
}

/// One step of the waiting policy. MPI progresses only inside MPI calls and nobody wakes a parked
/// rank, so "park" is a short sleep between tests.
fn pause(step: Pause) {
    match step {
        // Each test is an MPI call already: no pause between them.
        Pause::Spin => {}
        Pause::Yield => std::thread::yield_now(),
        // A rank exposing windows keeps calling MPI: peers' atomics are applied inside its calls.
        Pause::Park if one_sided::windows_open() => std::thread::yield_now(),
        Pause::Park => std::thread::sleep(std::time::Duration::from_micros(50)),
    }
}

/// The node's online CPUs: each rank is a process that MPI may bind to a single core, so its own
/// affinity mask says nothing about how many ranks can spin at once.
fn online_cpus() -> usize {
    // SAFETY: sysconf reads a system constant.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

fn world_dup() -> Result<c_int> {
    let mut handle: c_int = -1;
    // SAFETY: the shim writes one handle.
    check(unsafe { ffi::fastmp_mpi_world_dup(&mut handle) }, "MPI_Comm_create_group")?;
    Ok(handle)
}

/// Every rank's node from `MPI_Get_processor_name` (gathered over the world); one process per rank.
fn placement(world: c_int, size: usize) -> Result<Placement> {
    // SAFETY: a constant of the MPI library.
    let width = unsafe { ffi::fastmp_mpi_max_name() }.max(1) as usize;
    let mut names = vec![0u8; width * size];
    // SAFETY: `names` holds `size` names of `width` bytes, as the shim writes them.
    let rc = unsafe { ffi::fastmp_mpi_gather_names(world, names.as_mut_ptr().cast(), width as c_int) };
    check(rc, "MPI_Allgather (processor names)")?;
    let nodes: Vec<&[u8]> = names.chunks(width).collect();
    let processes: Vec<usize> = (0..size).collect();
    Ok(Placement::from_keys(&processes, &nodes))
}

fn stale(what: &str) -> Error {
    Error::InvalidArgument(format!("{what} handle is stale (already completed or released)"))
}

impl Device for MpiEndpoint {
    fn rank(&self) -> usize {
        self.job.rank
    }

    fn size(&self) -> usize {
        self.job.size
    }

    unsafe fn isend(
        &self,
        buf: *const u8,
        len: usize,
        dest: usize,
        tag: i32,
        context: ContextId,
        mode: SendMode,
    ) -> Result<Started> {
        self.check_live()?;
        let (handle, local) = self.with_route(context, |route| Ok((route.handle, self.local_rank(route, dest)?)))?;
        let wire = self.job.tags.wire(tag, context)?;
        bounce::check_length(len)?;
        let (mut slot, mut done): (Slot, c_int) = (0, 0);
        let sync = c_int::from(mode == SendMode::Synchronous);
        // SAFETY: the caller keeps `buf..buf+len` readable until the request completes or is
        // released (the device's buffer contract); the shim writes the slot and the flag.
        let rc = unsafe { ffi::fastmp_mpi_isend(buf.cast(), len, local, wire, handle, sync, &mut slot, &mut done) };
        check(rc, "MPI_Isend")?;
        if done != 0 {
            return Ok(Started::Complete(Ok(RawStatus::sent(self.job.rank, tag, len))));
        }
        Ok(Started::Pending(self.track(slot, Pending::Send { tag, bytes: len })))
    }

    /// A small standard send is one `MPI_Send`: MPI delivers it eagerly, so no request is
    /// allocated, tested and freed; any other starts as `isend` and is waited for.
    fn send(&self, buf: &[u8], dest: usize, tag: i32, context: ContextId, mode: SendMode) -> Result<()> {
        if mode != SendMode::Standard || buf.len() > bounce::LIMIT {
            return super::send_by_request(self, buf, dest, tag, context, mode);
        }
        self.check_live()?;
        let (handle, local) = self.with_route(context, |route| Ok((route.handle, self.local_rank(route, dest)?)))?;
        let wire = self.job.tags.wire(tag, context)?;
        // SAFETY: `buf` is borrowed for the whole (blocking) call.
        check(unsafe { ffi::fastmp_mpi_send(buf.as_ptr().cast(), buf.len(), local, wire, handle) }, "MPI_Send")
    }

    /// A small receive with no earlier one waiting to be matched is posted to MPI at once on a
    /// bounce slot; any other is matched later, in post order.
    unsafe fn irecv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Result<Started> {
        if capacity <= bounce::LIMIT
            && let Some(bounce) = BounceSlot::acquire()
        {
            self.check_live()?;
            let route = self.route(spec.context)?;
            let source = self.source_of(&route, spec.source)?;
            let tag = self.tag(spec.tag, spec.context)?;
            let mut requests = self.requests();
            if requests.unmatched.is_empty() {
                // Under the lock: no receive is queued between the check and the post.
                let (slot, bounced) = self.post_bounced(bounce, buf, capacity, route, source, tag)?;
                return Ok(Started::Pending(requests.slab.insert(Entry { slot, pending: Pending::Bounced(bounced) })));
            }
        }
        let id = self.post_receive(buf, capacity, spec)?;
        Ok(Started::Pending(id))
    }

    /// With no earlier receive waiting to be matched, a matched probe loop and a blocking
    /// `MPI_Mrecv` of the message (no request tracked); otherwise in line behind them.
    unsafe fn recv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Result<RawStatus> {
        self.check_live()?;
        if self.job.unmatched_waiting.load(Ordering::Acquire) {
            // SAFETY: forwarded caller contract; `complete` returns once the device is done.
            let started = Started::Pending(self.post_receive(buf, capacity, spec)?);
            return self.complete(started);
        }
        let route = self.route(spec.context)?;
        let source = self.source_of(&route, spec.source)?;
        let tag = self.tag(spec.tag, spec.context)?;
        if capacity <= bounce::LIMIT
            && let Some(bounce) = BounceSlot::acquire()
        {
            if self.job.thread_multiple {
                // SAFETY: forwarded caller contract.
                return unsafe { self.recv_bounced(bounce, buf, capacity, route, source, tag) };
            }
            // One thread calls MPI, nothing else to drive while waiting: one blocking MPI_Recv.
            let (mut src, mut got_tag, mut bytes) = (0, 0, 0);
            // SAFETY: `buf` holds `capacity` writable bytes (caller contract); the slot is this
            // receive's, and the shim writes the three outputs.
            let rc = unsafe {
                ffi::fastmp_mpi_bounce_recv(
                    bounce.index(),
                    source,
                    tag.wire,
                    route.handle,
                    buf.cast(),
                    capacity,
                    &mut src,
                    &mut got_tag,
                    &mut bytes,
                )
            };
            check(rc, "MPI_Recv")?;
            return super::receive_result(route.world_of(src), tag.reported(got_tag), bytes.max(0) as usize, capacity);
        }
        let mut found = None;
        self.wait_until(&mut || {
            found = improbe(&route, source, tag)?;
            Ok(found.is_some())
        })?;
        let (mut message, status) = found.expect("wait_until returns once found");
        if status.bytes > capacity {
            // SAFETY: forwarded caller contract.
            return unsafe { receive_truncated(&mut message, status, buf, capacity) };
        }
        // SAFETY: forwarded caller contract; the message fits, and is received before returning.
        let rc = unsafe { ffi::fastmp_mpi_mrecv(buf.cast(), capacity, &mut message) };
        check(rc, "MPI_Mrecv").map(|()| status)
    }

    fn iprobe(&self, spec: MatchSpec) -> Result<Option<RawStatus>> {
        self.check_live()?;
        let route = self.route(spec.context)?;
        let source = self.source_of(&route, spec.source)?;
        let wanted = self.tag(spec.tag, spec.context)?;
        let (mut found, mut src, mut tag, mut bytes) = (0, 0, 0, 0);
        // SAFETY: the shim writes the four outputs.
        let rc = unsafe {
            ffi::fastmp_mpi_iprobe(source, wanted.wire, route.handle, &mut found, &mut src, &mut tag, &mut bytes)
        };
        check(rc, "MPI_Iprobe")?;
        Ok((found != 0).then(|| RawStatus {
            source: route.world_of(src),
            tag: wanted.reported(tag),
            bytes: bytes as usize,
            cancelled: false,
        }))
    }

    fn test(&self, req: ReqId) -> Result<Option<RawStatus>> {
        self.check_live()?;
        let mut requests = self.requests();
        requests.match_receives();
        let mut slot = match requests.slab.get(req) {
            Some(Entry { pending: Pending::Done(_), .. }) => {
                let entry = requests.slab.remove(req).expect("live");
                drop(requests);
                return self.finish(entry.pending, 0, false).map(Some);
            }
            Some(Entry {
                slot,
                pending: Pending::Send { .. } | Pending::Recv(Receive { matched: Some(_), .. }) | Pending::Bounced(_),
            }) => *slot,
            Some(Entry { pending: Pending::Recv(_), .. }) => return Ok(None),
            _ => return Err(stale("request")),
        };
        // With other threads, outside the lock: a completing receive may copy its data here.
        // Without, nobody waits for it, and keeping it saves a second lock per test.
        if self.job.thread_multiple {
            drop(requests);
            let Some(tested) = test_once(&mut slot) else { return Ok(None) };
            requests = self.requests();
            return self.retire(requests, req, tested);
        }
        let Some(tested) = test_once(&mut slot) else { return Ok(None) };
        self.retire(requests, req, tested)
    }

    /// An unmatched receive is cancelled at once (it was never given to MPI); a matched one has
    /// lost the race. Sends ask MPI (`MPI_Cancel`).
    fn cancel(&self, req: ReqId) -> Result<()> {
        self.check_live()?;
        let mut requests = self.requests();
        requests.match_receives();
        let entry = requests.slab.get_mut(req).map_err(|_| stale("request"))?;
        match &entry.pending {
            Pending::Recv(Receive { matched: None, .. }) => {
                // As the other devices report a cancelled receive.
                let status = RawStatus { source: self.job.rank, tag: 0, bytes: 0, cancelled: true };
                entry.pending = Pending::Done(Ok(status));
                requests.unmatched.retain(|&id| id != req);
                Ok(())
            }
            Pending::Send { .. } | Pending::Bounced(_) => {
                let mut slot = entry.slot;
                drop(requests);
                // SAFETY: `slot` holds a live request of this process.
                check(unsafe { ffi::fastmp_mpi_cancel(&mut slot) }, "MPI_Cancel")
            }
            _ => Ok(()),
        }
    }

    /// An unmatched receive is simply dropped (MPI never saw it); a matched receive and a pending
    /// send are waited for until MPI has finished with the buffer (MPI owns it from the start
    /// of the transfer, so it cannot be copied out afterwards). Sends MPI takes eagerly complete
    /// inside `isend`, so this only waits on large or synchronous sends whose receive is not
    /// posted yet.
    fn release(&self, req: ReqId) {
        let entry = {
            let mut requests = self.requests();
            requests.unmatched.retain(|&id| id != req);
            requests.slab.remove(req)
        };
        let Some(mut entry) = entry else { return };
        match entry.pending {
            Pending::Recv(Receive { matched: None, .. }) | Pending::Done(_) => {}
            Pending::Recv(_) | Pending::Send { .. } => {
                self.wait_slot(&mut entry.slot);
            }
            Pending::Bounced(bounced) => {
                // MPI gives the slot back (cancelled or received, its data dropped) before it is freed.
                // SAFETY: the slot holds a live receive of this process.
                unsafe { ffi::fastmp_mpi_cancel(&mut entry.slot) };
                self.wait_slot(&mut entry.slot);
                drop(bounced);
            }
            Pending::Message { status, .. } => {
                // A matched message must be received to leave MPI: into a scratch buffer, as a
                // too-small buffer is not safe with every MPI (see `Requests`).
                let mut sink = [0u8; 0];
                // SAFETY: zero bytes are written to `sink`; the message is live.
                let _ = unsafe { receive_truncated(&mut entry.slot, status, sink.as_mut_ptr(), 0) };
            }
        }
    }

    fn wait_until(&self, poll: &mut dyn FnMut() -> Result<bool>) -> Result<()> {
        let mut backoff = Backoff::new(self.job.policy);
        loop {
            if poll()? {
                return Ok(());
            }
            self.check_live()?;
            let step = backoff.next();
            if !matches!(step, Pause::Spin) {
                // `poll` may test nothing of MPI's (a collective waiting on its own state).
                self.progress();
            }
            pause(step);
        }
    }

    /// Matches waiting receives (each `MPI_Improbe` also progresses MPI), or one `MPI_Iprobe` on
    /// the world when none waits.
    fn progress(&self) {
        if self.job.unmatched_waiting.load(Ordering::Acquire) {
            self.requests().match_receives();
            return;
        }
        let (mut found, mut src, mut tag, mut bytes) = (0, 0, 0, 0);
        // SAFETY: the shim writes the four outputs.
        unsafe {
            ffi::fastmp_mpi_iprobe(-1, -1, self.job.world_p2p.handle, &mut found, &mut src, &mut tag, &mut bytes)
        };
    }

    fn finalize(&self) {
        self.job.finalized.store(true, Ordering::Release);
    }

    fn is_finalized(&self) -> bool {
        self.job.finalized.load(Ordering::Acquire)
    }

    fn placement(&self) -> &Placement {
        &self.job.placement
    }

    fn name(&self) -> &'static str {
        "mpi"
    }

    /// `MPI_Abort`: MPI ends every process of the job (under Open MPI's mpirun the others are
    /// killed and mpirun reports the rank and code); this call does not return.
    fn abort_job(&self, failure: Failure) -> Failure {
        let code = failure.code.unwrap_or(1);
        // SAFETY: aborting takes no memory from Rust.
        unsafe { ffi::fastmp_mpi_abort(self.job.world_p2p.handle, code) };
        std::process::exit(code)
    }

    fn collectives(&self, context: ContextId, members: &[usize]) -> Option<super::collectives::Collectives> {
        if let Err(e) = self.create_routes(context, members) {
            // The communicator cannot carry traffic; its operations report the missing route.
            eprintln!("fastmp: mpi device: creating the communicator of context {context}: {e}");
            return None;
        }
        collectives::provider(self, context + 1, members)
    }

    /// An intercommunicator's pair: MPI communicators over both groups' members.
    fn open_context(&self, context: ContextId, members: &[usize]) -> Result<()> {
        self.create_routes(context, members)
    }

    fn one_sided(&self) -> Option<&dyn super::one_sided::OneSided> {
        Some(&self.rma)
    }

    fn thread_level(&self) -> crate::ThreadLevel {
        if self.job.thread_multiple { crate::ThreadLevel::Multiple } else { crate::ThreadLevel::Funneled }
    }

    fn thread_shared(&self) -> Result<SharedDevice> {
        self.check_live()?;
        if !self.job.thread_multiple {
            return Err(Error::InvalidArgument(format!(
                "Comm::threaded: MPI was not initialised with MPI_THREAD_MULTIPLE, so the mpi device runs \
                 funnelled (one thread of the rank calls MPI at a time); set {THREADS_VAR}=multiple before the \
                 first job (MPI must also grant it)"
            )));
        }
        Ok(Arc::new(MpiEndpoint { job: self.job.clone(), rma: one_sided::MpiRma::new(self.job.world_p2p.handle) }))
    }

    fn improbe(&self, spec: MatchSpec) -> Result<Option<(MessageId, RawStatus)>> {
        self.check_live()?;
        let route = self.route(spec.context)?;
        let source = self.source_of(&route, spec.source)?;
        let tag = self.tag(spec.tag, spec.context)?;
        let Some((slot, status)) = improbe(&route, source, tag)? else { return Ok(None) };
        let id = self.track(slot, Pending::Message { route, status });
        Ok(Some((MessageId(id), status)))
    }

    unsafe fn mrecv(&self, msg: MessageId, buf: *mut u8, capacity: usize) -> Result<Started> {
        self.check_live()?;
        let entry = {
            let mut requests = self.requests();
            match requests.slab.get(msg.0) {
                Some(Entry { pending: Pending::Message { .. }, .. }) => requests.slab.remove(msg.0),
                _ => None,
            }
        };
        let Some(Entry { slot, pending: Pending::Message { route, status } }) = entry else {
            return Err(stale("message"));
        };
        // SAFETY: forwarded caller contract.
        unsafe { self.receive_message(slot, route, status, buf, capacity) }
    }

    fn discard(&self, msg: MessageId) {
        self.release(msg.0);
    }
}

#[cfg(test)]
mod tests {
    //! Error mapping through MPI itself (a singleton MPI process: `cargo test --features mpi --lib
    //! device::mpi`, run by `scripts/mpi-device.sh`).

    use super::*;

    #[test]
    fn mpi_errors_carry_the_call_and_mpis_description() {
        let ep = MpiEndpoint::new().expect("a singleton MPI job");
        assert_eq!((ep.rank(), ep.size()), (0, 1));
        // A rank only MPI checks (the device's own check is bypassed here).
        let (mut slot, mut done) = (0, 0);
        let sink = [0u8; 1];
        // SAFETY: one readable byte; MPI rejects the rank before touching it.
        let rc = unsafe {
            ffi::fastmp_mpi_isend(sink.as_ptr().cast(), 1, 5, 0, ep.job.world_p2p.handle, 0, &mut slot, &mut done)
        };
        let message = check(rc, "MPI_Isend").expect_err("rank 5 of 1").to_string();
        assert!(message.starts_with("MPI_Isend: MPI error"), "{message}");
        assert!(message.to_lowercase().contains("rank"), "MPI's description names the rank: {message}");
        // A communicator handle the shim never gave out.
        let message =
            improbe(&Route { handle: 9999, members: None }, -1, Tag::ANY).expect_err("no such comm").to_string();
        assert!(message.starts_with("MPI_Improbe: MPI error"), "{message}");
        // The device's own checks come first and are fastmp's errors.
        // SAFETY: as above.
        let err = unsafe { ep.isend(sink.as_ptr(), 1, 5, 0, 0, SendMode::Standard) }.expect_err("rank 5 of 1");
        assert!(matches!(err, Error::RankOutOfRange { rank: 5, size: 1 }), "{err:?}");
        assert!(ep.route(40).is_err(), "an unknown context has no communicator");
    }
}
