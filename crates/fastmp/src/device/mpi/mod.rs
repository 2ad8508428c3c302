//! The `mpi` device: fastmp's point-to-point over the system MPI (every fabric it reaches), through
//! a small C shim with a fixed ABI (`csrc/fastmp_mpi.h`, built by `build.rs` with `mpicc`).
//!
//! Each fastmp context is carried by its own MPI communicator: a communicator's point-to-point
//! context `c` and collective context `c + 1` map to two communicators created over its members
//! when it is created ([`Device::collectives`]); the world's two are `MPI_Comm_dup`s of
//! `MPI_COMM_WORLD` made when a job starts. Device ranks are world ranks, translated to and from
//! the communicator's ranks by its [`Route`].
//!
//! Requests live in a generation-checked slab of opaque MPI request slots; the slab's lock is
//! never held across an MPI call, so a completing receive copies its data without it.
//! Errors: every communicator has `MPI_ERRORS_RETURN`, and an MPI error code becomes a
//! [`crate::Error`] carrying `MPI_Error_string`'s text ([`check`]).

pub(crate) mod collectives;
mod ffi;
pub(crate) mod one_sided;

use std::collections::HashMap;
use std::ffi::{c_int, c_longlong};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use super::slab::Slab;
use super::wait::{Backoff, Pause, WaitPolicy};
use super::{
    ContextId, Device, Failure, MatchSpec, MessageId, Placement, RawStatus, ReqId, SendMode, SharedDevice, Source,
    Started, lock_ignoring_poison,
};
use crate::error::{Error, Result};
use ffi::Slot;

/// Maps an MPI error code to a fastmp error naming the call, with MPI's own description.
pub(crate) fn check(code: c_int, call: &'static str) -> Result<()> {
    if code == 0 { Ok(()) } else { Err(Error::other(format!("{call}: MPI error {code}: {}", error_string(code)))) }
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

/// Whether `code` is of class MPI_ERR_TRUNCATE.
fn is_truncation(code: c_int) -> bool {
    let mut class: c_int = 0;
    // SAFETY: the shim writes one int.
    let ok = unsafe { ffi::fastmp_mpi_error_class(code, &mut class) } == 0;
    // SAFETY: a constant of the MPI library.
    ok && class == unsafe { ffi::fastmp_mpi_err_truncate() }
}

/// The thread support MPI granted this process (initialised once, on first use).
fn init_mpi() -> Result<bool> {
    static PROVIDED: OnceLock<std::result::Result<c_int, String>> = OnceLock::new();
    let provided = PROVIDED.get_or_init(|| {
        let mut provided: c_int = 0;
        // SAFETY: the shim writes one int; it initialises MPI at most once per process.
        let rc = unsafe { ffi::fastmp_mpi_init(&mut provided) };
        check(rc, "MPI_Init_thread").map(|()| provided).map_err(|e| e.to_string())
    });
    match provided {
        // MPI_THREAD_MULTIPLE is the highest level, 3, in every MPI.
        Ok(level) => Ok(*level >= 3),
        Err(e) => Err(Error::other(e.clone())),
    }
}

/// The MPI communicator of one fastmp context and how its ranks relate to world ranks.
struct Route {
    handle: c_int,
    /// World rank of each communicator rank; `None` for the world itself (identity).
    members: Option<Vec<usize>>,
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
    Send {
        tag: i32,
        bytes: usize,
    },
    Recv {
        route: Arc<Route>,
        capacity: usize,
        tag: i32,
    },
    /// A message taken by `improbe`, not yet received.
    Message {
        route: Arc<Route>,
        status: RawStatus,
    },
}

struct Entry {
    slot: Slot,
    pending: Pending,
}

/// One job's state on this process, shared by the rank's thread handles.
struct Job {
    rank: usize,
    size: usize,
    /// World communicator handles: point-to-point (also the parent of every other) and collective.
    world_p2p: Arc<Route>,
    world_coll: Arc<Route>,
    /// Routes of every other context, created by `collectives`.
    routes: RwLock<HashMap<ContextId, Arc<Route>>>,
    requests: Mutex<Slab<Entry>>,
    finalized: AtomicBool,
    placement: Placement,
    policy: WaitPolicy,
    thread_multiple: bool,
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
    #[allow(dead_code, reason = "served by `one_sided` once MPI windows are wired in")]
    rma: one_sided::MpiRma,
}

impl MpiEndpoint {
    /// Joins a new job: initialises MPI if needed and duplicates `MPI_COMM_WORLD` (collective
    /// over every process), so each job's traffic is its own.
    pub(crate) fn new() -> Result<MpiEndpoint> {
        let thread_multiple = init_mpi()?;
        let p2p = world_dup()?;
        let coll = world_dup()?;
        let (mut rank, mut size) = (0, 0);
        // SAFETY: the shim writes one int each.
        check(unsafe { ffi::fastmp_mpi_comm_rank(p2p, &mut rank) }, "MPI_Comm_rank")?;
        // SAFETY: as above.
        check(unsafe { ffi::fastmp_mpi_comm_size(p2p, &mut size) }, "MPI_Comm_size")?;
        let (rank, size) = (rank as usize, size as usize);
        let placement = placement(p2p, size)?;
        let on_node = (0..size).filter(|&r| placement.node_of(r) == placement.node_of(rank)).count();
        let job = Job {
            rank,
            size,
            world_p2p: Arc::new(Route { handle: p2p, members: None }),
            world_coll: Arc::new(Route { handle: coll, members: None }),
            routes: RwLock::default(),
            requests: Mutex::new(Slab::with_capacity(64)),
            finalized: AtomicBool::new(false),
            placement,
            policy: WaitPolicy::for_ranks(on_node),
            thread_multiple,
        };
        Ok(MpiEndpoint { job: Arc::new(job), rma: one_sided::MpiRma::new() })
    }

    /// The handle of the MPI communicator carrying `context` (for the shim's other parts).
    #[allow(dead_code, reason = "used by the collective and one-sided parts of the device")]
    pub(crate) fn comm_handle(&self, context: ContextId) -> Result<c_int> {
        self.route(context).map(|r| r.handle)
    }

    fn route(&self, context: ContextId) -> Result<Arc<Route>> {
        let job = &*self.job;
        match context {
            0 => Ok(job.world_p2p.clone()),
            1 => Ok(job.world_coll.clone()),
            _ => {
                job.routes.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(&context).cloned().ok_or_else(
                    || {
                        Error::InvalidArgument(format!(
                            "mpi device: no MPI communicator carries context {context} (only communicators created \
                         from the world by dup/split/create have one)"
                        ))
                    },
                )
            }
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
            created.push((ctx, Arc::new(Route { handle, members: Some(members.to_vec()) })));
        }
        self.job.routes.write().unwrap_or_else(std::sync::PoisonError::into_inner).extend(created);
        Ok(())
    }

    /// Turns a completed request's MPI outcome into fastmp's status or error.
    fn finish(&self, pending: &Pending, rc: c_int, out: (c_int, c_int, c_longlong, c_int)) -> Result<RawStatus> {
        let (source, tag, bytes, cancelled) = out;
        match pending {
            Pending::Send { tag, bytes, .. } => {
                check(rc, "MPI_Test (send)")?;
                Ok(RawStatus { source: self.job.rank, tag: *tag, bytes: *bytes, cancelled: cancelled != 0 })
            }
            Pending::Recv { route, capacity, tag: wanted } => {
                let source = route.world_of(source);
                if rc != 0 && is_truncation(rc) {
                    // MPI reports at most the capacity; the message was longer.
                    let tag = if *wanted >= 0 { *wanted } else { tag };
                    return Err(Error::Truncated {
                        message_bytes: (bytes.max(0) as usize).max(capacity + 1),
                        capacity: *capacity,
                        source_rank: source,
                        tag,
                    });
                }
                check(rc, "MPI_Test (receive)")?;
                Ok(RawStatus { source, tag, bytes: bytes.max(0) as usize, cancelled: cancelled != 0 })
            }
            Pending::Message { .. } => Err(Error::InvalidArgument("a matched message is not a request".into())),
        }
    }

    /// Tests an MPI request slot once: `Some((rc, status))` when it completed.
    fn test_slot(slot: &mut Slot) -> Option<(c_int, (c_int, c_int, c_longlong, c_int))> {
        let (mut done, mut source, mut tag, mut bytes, mut cancelled) = (0, 0, 0, 0, 0);
        // SAFETY: `slot` holds a live MPI request of this process; the shim writes the outputs.
        let rc = unsafe { ffi::fastmp_mpi_test(slot, &mut done, &mut source, &mut tag, &mut bytes, &mut cancelled) };
        (done != 0 || rc != 0).then_some((rc, (source, tag, bytes, cancelled)))
    }

    /// Blocks (spin → yield → short sleeps, testing the request) until `slot` completes.
    fn wait_slot(&self, slot: &mut Slot) -> (c_int, (c_int, c_int, c_longlong, c_int)) {
        let mut backoff = Backoff::new(self.job.policy);
        loop {
            if let Some(done) = Self::test_slot(slot) {
                return done;
            }
            pause(&mut backoff);
        }
    }

    fn track(&self, slot: Slot, pending: Pending) -> ReqId {
        lock_ignoring_poison(&self.job.requests).insert(Entry { slot, pending })
    }
}

/// One step of the waiting policy. MPI progresses only inside MPI calls and nobody wakes a parked
/// rank, so "park" is a short sleep between tests.
fn pause(backoff: &mut Backoff) {
    match backoff.next() {
        Pause::Spin => std::hint::spin_loop(),
        Pause::Yield => std::thread::yield_now(),
        Pause::Park => std::thread::sleep(std::time::Duration::from_micros(50)),
    }
}

fn world_dup() -> Result<c_int> {
    let mut handle: c_int = -1;
    // SAFETY: the shim writes one handle.
    check(unsafe { ffi::fastmp_mpi_world_dup(&mut handle) }, "MPI_Comm_dup")?;
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

fn mpi_tag(tag: i32) -> c_int {
    if tag < 0 { -1 } else { tag }
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
        let route = self.route(context)?;
        let local = self.local_rank(&route, dest)?;
        let (mut slot, mut done): (Slot, c_int) = (0, 0);
        let sync = c_int::from(mode == SendMode::Synchronous);
        // SAFETY: the caller keeps `buf..buf+len` readable until the request completes or is
        // released (the device's buffer contract); the shim writes the slot and the flag.
        let rc =
            unsafe { ffi::fastmp_mpi_isend(buf.cast(), len, local, tag, route.handle, sync, &mut slot, &mut done) };
        check(rc, "MPI_Isend")?;
        if done != 0 {
            return Ok(Started::Complete(Ok(RawStatus { source: self.job.rank, tag, bytes: len, cancelled: false })));
        }
        Ok(Started::Pending(self.track(slot, Pending::Send { tag, bytes: len })))
    }

    unsafe fn irecv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Result<Started> {
        self.check_live()?;
        let route = self.route(spec.context)?;
        let source = self.source_of(&route, spec.source)?;
        let mut slot: Slot = 0;
        // SAFETY: the caller keeps `buf..buf+capacity` writable and otherwise untouched until the
        // request completes or is released; the shim writes the slot.
        let rc =
            unsafe { ffi::fastmp_mpi_irecv(buf.cast(), capacity, source, mpi_tag(spec.tag), route.handle, &mut slot) };
        check(rc, "MPI_Irecv")?;
        Ok(Started::Pending(self.track(slot, Pending::Recv { route, capacity, tag: spec.tag })))
    }

    unsafe fn recv(&self, buf: *mut u8, capacity: usize, spec: MatchSpec) -> Result<RawStatus> {
        self.check_live()?;
        let route = self.route(spec.context)?;
        let source = self.source_of(&route, spec.source)?;
        let mut slot: Slot = 0;
        // SAFETY: as for `irecv`; this call waits for completion before returning.
        let rc =
            unsafe { ffi::fastmp_mpi_irecv(buf.cast(), capacity, source, mpi_tag(spec.tag), route.handle, &mut slot) };
        check(rc, "MPI_Irecv")?;
        let (rc, out) = self.wait_slot(&mut slot);
        self.finish(&Pending::Recv { route, capacity, tag: spec.tag }, rc, out)
    }

    fn iprobe(&self, spec: MatchSpec) -> Result<Option<RawStatus>> {
        self.check_live()?;
        let route = self.route(spec.context)?;
        let source = self.source_of(&route, spec.source)?;
        let (mut found, mut src, mut tag, mut bytes) = (0, 0, 0, 0);
        // SAFETY: the shim writes the four outputs.
        let rc = unsafe {
            ffi::fastmp_mpi_iprobe(source, mpi_tag(spec.tag), route.handle, &mut found, &mut src, &mut tag, &mut bytes)
        };
        check(rc, "MPI_Iprobe")?;
        Ok((found != 0).then(|| RawStatus {
            source: route.world_of(src),
            tag,
            bytes: bytes as usize,
            cancelled: false,
        }))
    }

    fn test(&self, req: ReqId) -> Result<Option<RawStatus>> {
        self.check_live()?;
        let mut slot = match lock_ignoring_poison(&self.job.requests).get(req) {
            Some(Entry { slot, pending: Pending::Send { .. } | Pending::Recv { .. } }) => *slot,
            _ => return Err(Error::InvalidArgument("request handle is stale (already completed or released)".into())),
        };
        // Outside the lock: a completing receive may copy its data here.
        let Some((rc, out)) = Self::test_slot(&mut slot) else { return Ok(None) };
        let entry = lock_ignoring_poison(&self.job.requests).remove(req).expect("tested request is live");
        self.finish(&entry.pending, rc, out).map(Some)
    }

    fn cancel(&self, req: ReqId) -> Result<()> {
        self.check_live()?;
        let mut slot = match lock_ignoring_poison(&self.job.requests).get(req) {
            Some(Entry { slot, pending: Pending::Send { .. } | Pending::Recv { .. } }) => *slot,
            _ => return Err(Error::InvalidArgument("request handle is stale (already completed or released)".into())),
        };
        // SAFETY: `slot` holds a live request of this process.
        check(unsafe { ffi::fastmp_mpi_cancel(&mut slot) }, "MPI_Cancel")
    }

    /// A pending receive is cancelled and then completed; a pending send is waited for until MPI
    /// has finished with its buffer (MPI owns it from `MPI_Isend` on, so it cannot be copied out
    /// afterwards). Sends MPI takes eagerly complete inside `isend`, so this only waits on large or
    /// synchronous sends whose receive is not posted yet.
    fn release(&self, req: ReqId) {
        let Some(mut entry) = lock_ignoring_poison(&self.job.requests).remove(req) else { return };
        match entry.pending {
            Pending::Recv { .. } => {
                // SAFETY: the slot holds a live receive request.
                unsafe { ffi::fastmp_mpi_cancel(&mut entry.slot) };
                self.wait_slot(&mut entry.slot);
            }
            Pending::Send { .. } => {
                self.wait_slot(&mut entry.slot);
            }
            Pending::Message { .. } => {
                // A matched message must be received to leave MPI: receive its bytes nowhere.
                let sink = std::ptr::NonNull::<u8>::dangling().as_ptr();
                let mut request: Slot = 0;
                // SAFETY: a zero-byte receive never touches `sink`; the message is live.
                if unsafe { ffi::fastmp_mpi_imrecv(sink.cast(), 0, &mut entry.slot, &mut request) } == 0 {
                    self.wait_slot(&mut request);
                }
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
            if !matches!(backoff.next(), Pause::Spin) {
                self.progress();
                pause(&mut Backoff::new(WaitPolicy { spins: 0, yields: 1 }));
            }
        }
    }

    /// One `MPI_Iprobe` on the world: MPI progresses inside its calls.
    fn progress(&self) {
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

    fn thread_level(&self) -> crate::ThreadLevel {
        if self.job.thread_multiple { crate::ThreadLevel::Multiple } else { crate::ThreadLevel::Funneled }
    }

    fn thread_shared(&self) -> Result<SharedDevice> {
        self.check_live()?;
        if !self.job.thread_multiple {
            return Err(Error::InvalidArgument(
                "Comm::threaded: this MPI library did not grant MPI_THREAD_MULTIPLE, so the mpi device runs \
                 funnelled (only the rank's thread calls MPI); use an MPI built with thread support"
                    .into(),
            ));
        }
        Ok(Arc::new(MpiEndpoint { job: self.job.clone(), rma: one_sided::MpiRma::new() }))
    }

    fn improbe(&self, spec: MatchSpec) -> Result<Option<(MessageId, RawStatus)>> {
        self.check_live()?;
        let route = self.route(spec.context)?;
        let source = self.source_of(&route, spec.source)?;
        let (mut found, mut slot, mut src, mut tag, mut bytes) = (0, 0, 0, 0, 0);
        // SAFETY: the shim writes the outputs.
        let rc = unsafe {
            ffi::fastmp_mpi_improbe(
                source,
                mpi_tag(spec.tag),
                route.handle,
                &mut found,
                &mut slot,
                &mut src,
                &mut tag,
                &mut bytes,
            )
        };
        check(rc, "MPI_Improbe")?;
        if found == 0 {
            return Ok(None);
        }
        let status = RawStatus { source: route.world_of(src), tag, bytes: bytes as usize, cancelled: false };
        let id = self.track(slot, Pending::Message { route, status });
        Ok(Some((MessageId(id), status)))
    }

    unsafe fn mrecv(&self, msg: MessageId, buf: *mut u8, capacity: usize) -> Result<Started> {
        self.check_live()?;
        let entry = {
            let mut requests = lock_ignoring_poison(&self.job.requests);
            match requests.get(msg.0) {
                Some(Entry { pending: Pending::Message { .. }, .. }) => requests.remove(msg.0),
                _ => None,
            }
        };
        let Some(Entry { mut slot, pending: Pending::Message { route, status } }) = entry else {
            return Err(Error::InvalidArgument("message handle is stale (already received or discarded)".into()));
        };
        let mut request: Slot = 0;
        // SAFETY: forwarded buffer contract; the message slot is live and used up here.
        let rc = unsafe { ffi::fastmp_mpi_imrecv(buf.cast(), capacity, &mut slot, &mut request) };
        check(rc, "MPI_Imrecv")?;
        if status.bytes > capacity {
            // Truncated: MPI completes the receive with an error; finish it here.
            self.wait_slot(&mut request);
            return Ok(Started::Complete(crate::device::receive_result(
                status.source,
                status.tag,
                status.bytes,
                capacity,
            )));
        }
        Ok(Started::Pending(self.track(request, Pending::Recv { route, capacity, tag: status.tag })))
    }
}
