//! Chrome/Perfetto traces of a job's operations (`FASTMP_TRACE=path.json` or
//! [`crate::Config::trace`]), so a user can see which rank waited on which.
//!
//! Off, every hook is one relaxed load of [`ACTIVE`] and nothing else. On, each rank records
//! into its own buffer, allocated once when the rank starts and bounded ([`DEFAULT_CAPACITY`]
//! events, `FASTMP_TRACE_EVENTS` to change it): a full buffer keeps its first events and counts
//! the rest, reported by a final `trace buffer full` event. No lock is taken per event; a rank
//! hands its buffer to the job once, when it ends.
//!
//! Output: a JSON object `{"traceEvents": [...]}` of complete events (`"ph": "X"`, `ts` and
//! `dur` in µs of the host's monotonic clock), `pid` the OS process, `tid` the world rank, and
//! `args` naming the peer (world rank), tag, bytes, root and the collective algorithm chosen.
//! Thread ranks of one process (shm, or tcp/hybrid without a launcher) write one file when the
//! job ends; ranks of a launched job write `path.<rank>.json` each, which `fastmprun` merges
//! into `path` ([`merge_rank_files`]).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::error::{Error, Result};

/// The environment variable naming the trace file.
pub const TRACE_VAR: &str = "FASTMP_TRACE";
/// The environment variable bounding the events a rank keeps.
pub const TRACE_EVENTS_VAR: &str = "FASTMP_TRACE_EVENTS";
/// Events a rank keeps by default (about 80 bytes each).
pub const DEFAULT_CAPACITY: usize = 1 << 16;

/// Jobs of this process that are tracing; the hooks' only cost when zero.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// Whether any job of this process traces.
#[inline(always)]
pub(crate) fn on() -> bool {
    ACTIVE.load(Ordering::Relaxed) != 0
}

/// A point in time (ns of `CLOCK_MONOTONIC`, shared by the processes of a host).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stamp(u64);

fn now() -> Stamp {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Stamp(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// The current time if tracing is on: the start of an operation a hook will record.
#[inline(always)]
pub(crate) fn start() -> Option<Stamp> {
    if on() { Some(now()) } else { None }
}

/// What an event describes; its name in the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Send,
    Recv,
    Isend,
    Irecv,
    /// A blocking wait on a request, or a blocking receive whose message had not arrived.
    Wait,
    /// A collective, by name.
    Collective(&'static str),
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Send => "send",
            Kind::Recv => "recv",
            Kind::Isend => "isend",
            Kind::Irecv => "irecv",
            Kind::Wait => "wait",
            Kind::Collective(name) => name,
        }
    }

    fn category(self) -> &'static str {
        match self {
            Kind::Send | Kind::Recv | Kind::Isend | Kind::Irecv => "p2p",
            Kind::Wait => "wait",
            Kind::Collective(_) => "collective",
        }
    }
}

/// One recorded operation. Peers are world ranks; `None` fields are left out of the trace.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    pub kind: Kind,
    pub peer: Option<usize>,
    pub tag: Option<i32>,
    pub bytes: Option<usize>,
    pub root: Option<usize>,
    pub algorithm: Option<&'static str>,
    /// What a wait waited for (`recv`, `request`, `collective`, ...).
    pub on: Option<&'static str>,
}

impl Event {
    /// An event of `kind` with no arguments yet.
    pub const fn of(kind: Kind) -> Self {
        Event { kind, peer: None, tag: None, bytes: None, root: None, algorithm: None, on: None }
    }

    /// A point-to-point event with its peer, tag and bytes.
    pub const fn p2p(kind: Kind, peer: usize, tag: i32, bytes: usize) -> Self {
        Event { peer: Some(peer), tag: Some(tag), bytes: Some(bytes), ..Event::of(kind) }
    }
}

/// A recorded event with its time.
#[derive(Clone, Copy, Debug)]
struct Timed {
    event: Event,
    start: u64,
    end: u64,
}

/// One tracing job: where its output goes and the rank buffers handed in so far.
pub(crate) struct Job {
    path: PathBuf,
    /// Ranks are processes of a launched job: one file per rank.
    per_rank_files: bool,
    capacity: usize,
    finished: Mutex<Vec<RankLog>>,
}

/// A rank's buffer; `rank` is learned from its first event.
struct RankLog {
    job: Arc<Job>,
    rank: Option<usize>,
    events: Vec<Timed>,
    dropped: u64,
    last_end: u64,
}

thread_local! {
    /// The buffer of the rank running on this thread, if its job traces.
    static LOG: RefCell<Option<RankLog>> = const { RefCell::new(None) };
}

/// Records the event `what` gives (with the world rank running on this thread), started at
/// `start` (from [`start`]) and ending now. Nothing, `what` not even called, when `start` is
/// `None` (tracing off).
#[inline(always)]
pub(crate) fn record(start: Option<Stamp>, what: impl FnOnce() -> (usize, Event)) {
    if let Some(start) = start {
        let (rank, event) = what();
        record_slow(start, rank, event);
    }
}

#[cold]
fn record_slow(start: Stamp, rank: usize, event: Event) {
    let end = now().0;
    LOG.with_borrow_mut(|log| {
        let Some(log) = log else { return };
        log.rank.get_or_insert(rank);
        log.last_end = end;
        if log.events.len() < log.job.capacity {
            log.events.push(Timed { event, start: start.0, end });
        } else {
            log.dropped += 1;
        }
    });
}

/// The trace file of a job configured with `configured` (else `FASTMP_TRACE`), if any.
pub(crate) fn path_for(configured: Option<&Path>) -> Option<PathBuf> {
    configured
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os(TRACE_VAR).filter(|p| !p.is_empty()).map(PathBuf::from))
}

fn capacity_from_env() -> Result<usize> {
    match std::env::var(TRACE_EVENTS_VAR) {
        Err(_) => Ok(DEFAULT_CAPACITY),
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|_| Error::InvalidArgument(format!("{TRACE_EVENTS_VAR}={text:?} is not a number of events"))),
    }
}

/// A tracing job started by the launch code; it writes the trace when finished.
pub(crate) struct Tracing {
    job: Arc<Job>,
}

impl Tracing {
    /// Starts tracing a job into `path`; the calling thread records too (it is a rank in
    /// launched jobs). `per_rank_files`: the ranks are processes of a launched job.
    pub(crate) fn start(path: PathBuf, per_rank_files: bool) -> Result<Tracing> {
        let job =
            Arc::new(Job { path, per_rank_files, capacity: capacity_from_env()?, finished: Mutex::new(Vec::new()) });
        ACTIVE.fetch_add(1, Ordering::Relaxed);
        enter(Some(job.clone()));
        Ok(Tracing { job })
    }

    /// Collects the calling thread's events and writes the trace (every rank thread has ended).
    pub(crate) fn finish(self) -> Result<()> {
        leave();
        let logs = std::mem::take(&mut *self.job.finished.lock().unwrap_or_else(|e| e.into_inner()));
        let job = &self.job;
        if job.per_rank_files {
            for log in &logs {
                let path = rank_file(&job.path, log.rank.unwrap_or(0));
                std::fs::write(&path, document(std::slice::from_ref(log))).map_err(|e| write_failed(&path, e))?;
            }
            Ok(())
        } else {
            std::fs::write(&job.path, document(&logs)).map_err(|e| write_failed(&job.path, e))
        }
    }
}

impl Drop for Tracing {
    fn drop(&mut self) {
        ACTIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The job the calling thread traces for, to hand to the rank threads it starts.
pub(crate) fn current_job() -> Option<Arc<Job>> {
    if !on() {
        return None;
    }
    LOG.with_borrow(|log| log.as_ref().map(|log| log.job.clone()))
}

/// Makes the calling thread a rank of `job` (nothing for `None`) with its buffer allocated now.
pub(crate) fn enter(job: Option<Arc<Job>>) {
    let Some(job) = job else { return };
    let events = Vec::with_capacity(job.capacity);
    LOG.set(Some(RankLog { job, rank: None, events, dropped: 0, last_end: 0 }));
}

/// Ends the calling thread's part: its events go to the job (a rank that recorded nothing, such
/// as the thread that started thread ranks, leaves nothing).
pub(crate) fn leave() {
    if let Some(log) = LOG.take()
        && log.rank.is_some()
    {
        let job = log.job.clone();
        job.finished.lock().unwrap_or_else(|e| e.into_inner()).push(log);
    }
}

fn write_failed(path: &Path, e: std::io::Error) -> Error {
    Error::Other(Box::new(std::io::Error::new(e.kind(), format!("writing the trace {}: {e}", path.display()))))
}

/// `path.<rank>.json`: a launched rank's own file.
pub fn rank_file(path: &Path, rank: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{rank}.json"));
    PathBuf::from(name)
}

fn micros(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The trace events of `logs`: a name row per rank, its events, and a `trace buffer full`
/// event where some were dropped.
fn events_of(logs: &[RankLog]) -> Vec<Value> {
    let pid = std::process::id();
    let mut out = Vec::new();
    for log in logs {
        let rank = log.rank.unwrap_or(0);
        out.push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": rank, "args": {"name": format!("rank {rank}")}}));
        out.push(
            json!({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": rank, "args": {"sort_index": rank}}),
        );
        for timed in &log.events {
            let e = &timed.event;
            let mut args = serde_json::Map::new();
            let mut put = |key: &str, value: Option<Value>| {
                if let Some(value) = value {
                    args.insert(key.into(), value);
                }
            };
            put("peer", e.peer.map(Value::from));
            put("tag", e.tag.map(Value::from));
            put("bytes", e.bytes.map(Value::from));
            put("root", e.root.map(Value::from));
            put("algorithm", e.algorithm.map(Value::from));
            put("on", e.on.map(Value::from));
            out.push(json!({
                "name": e.kind.name(), "cat": e.kind.category(), "ph": "X", "pid": pid, "tid": rank,
                "ts": micros(timed.start), "dur": micros(timed.end.saturating_sub(timed.start)), "args": args,
            }));
        }
        if log.dropped > 0 {
            out.push(json!({
                "name": "trace buffer full", "cat": "trace", "ph": "i", "s": "t", "pid": pid, "tid": rank,
                "ts": micros(log.last_end), "args": {"kept": log.events.len(), "dropped": log.dropped},
            }));
        }
    }
    out
}

fn document(logs: &[RankLog]) -> String {
    json!({"traceEvents": events_of(logs), "displayTimeUnit": "ns"}).to_string()
}

/// Merges the per-rank files `path.<rank>.json` of ranks `0..np` into `path` and removes them;
/// a rank whose file is missing (it failed before writing, or recorded nothing) is named in the
/// error, after the others were merged. `fastmprun` calls this when a traced job ends.
///
/// ```no_run
/// fastmp::merge_trace_files(std::path::Path::new("job.json"), 4)?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub fn merge_trace_files(path: &Path, np: usize) -> Result<()> {
    let mut events = Vec::new();
    let mut missing = Vec::new();
    let mut read = Vec::new();
    for rank in 0..np {
        let file = rank_file(path, rank);
        let Ok(text) = std::fs::read_to_string(&file) else {
            missing.push(rank);
            continue;
        };
        let doc: Value = serde_json::from_str(&text)
            .map_err(|e| Error::InvalidArgument(format!("trace file {} is not JSON: {e}", file.display())))?;
        match doc.get("traceEvents") {
            Some(Value::Array(list)) => events.extend(list.iter().cloned()),
            _ => return Err(Error::InvalidArgument(format!("trace file {} has no traceEvents list", file.display()))),
        }
        read.push(file);
    }
    let merged = json!({"traceEvents": events, "displayTimeUnit": "ns"}).to_string();
    std::fs::write(path, merged).map_err(|e| write_failed(path, e))?;
    for file in read {
        let _ = std::fs::remove_file(file);
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "trace {}: merged, but ranks {missing:?} wrote no file {}",
            path.display(),
            rank_file(Path::new("<path>"), missing[0]).display()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full buffer keeps its first events and reports how many it dropped.
    #[test]
    fn a_full_buffer_keeps_the_first_events_and_counts_the_rest() {
        let job = Arc::new(Job {
            path: PathBuf::new(),
            per_rank_files: false,
            capacity: 2,
            finished: Mutex::new(Vec::new()),
        });
        enter(Some(job.clone()));
        for tag in 0..5 {
            record_slow(now(), 3, Event::p2p(Kind::Send, 1, tag, 8));
        }
        leave();
        let logs = std::mem::take(&mut *job.finished.lock().unwrap());
        let events = events_of(&logs);
        let tags: Vec<_> = events.iter().filter(|e| e["name"] == "send").map(|e| e["args"]["tag"].as_i64()).collect();
        assert_eq!(tags, [Some(0), Some(1)]);
        let full = events.iter().find(|e| e["name"] == "trace buffer full").expect("a final event");
        assert_eq!((full["tid"].as_u64(), full["args"]["dropped"].as_u64()), (Some(3), Some(3)));
    }
}
