//! The progress agent: threads of a process that run the bulk work (copies, reductions) of
//! nonblocking collectives while their ranks compute.
//!
//! # Design
//! An operation's future borrows its rank's `Rc` state, so no other thread may poll it: the
//! agent never sees operations, only *work items*. A nonblocking run that reaches a bulk step
//! whose inputs are ready (copy these bytes from here to there) hands the step off as an item
//! ([`Agent::submit`]) and keeps the item's [`Ticket`] in its future; the future completes the
//! step when the ticket reports it done. Stages that wait for peers still advance only in the
//! rank's own fastmp calls (and, on tcp, in the device's progress thread).
//!
//! - *Nothing depends on the agent being scheduled.* Whoever gets an item first runs it: the
//!   agent's threads, or the rank itself when it polls the operation again (`Ticket::help`, from
//!   `test`/`wait` or any other fastmp call) — so a job is correct and quick on one core and
//!   with 16 ranks on 2 cores; the agent only adds a core where one is free.
//! - *Soundness.* An item holds raw pointers into buffers the operation's scope keeps borrowed.
//!   The ticket lives in the operation's future, and the future is always dropped or finished
//!   before the scope ends (`Engine::finish_scope`; a leaked `Request` does not leak the future,
//!   which the engine owns). Dropping a ticket *revokes* an item nobody started and *waits* for
//!   one being run, so the agent never touches a buffer after its borrow ended, whatever the
//!   user drops, leaks (`mem::forget`) or unwinds. Items touch local memory only, so a waiting
//!   drop is bounded by one copy; a failed peer fails the operation's transfers, never an item.
//! - *Cost when unused.* Off by default (`Config::progress_agent`, `FASTMP_PROGRESS_AGENT=1`/`0`
//!   /`auto`: on where the ranks leave one of the process's CPUs idle); when off, nothing is
//!   spawned and runs take the inline path.
//! - *Where it runs.* On the CPUs the job's pinned ranks leave ([`AgentPlan`]), a thread per
//!   idle CPU up to one per rank, so one operation's shares run at once.
//!   Items are only made for steps of at least [`AGENT_MIN_BYTES`], so small operations pay a
//!   relaxed load at most.
//! - The queue's lock is held to push or pop an item, never while an item runs.
//! - *Wake-ups.* An item finished by the agent unparks its owner's thread, so a rank parked
//!   in a wait for it resumes at once (not at its park timeout).
//! - *Reductions* go to the agent only with a thread-safe op (`Op::shareable`: the predefined
//!   ops); a user closure may hold thread-bound state, so it always runs on its rank.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use crate::error::{Error, Result};

/// Smallest step handed to the agent: below it, running the step inline costs less than the
/// hand-off (a queue push, a wake-up, and the cache misses of another core).
pub(crate) const AGENT_MIN_BYTES: usize = 64 * 1024;

/// What an item does; runs once, on whichever thread claims it.
type Job = Box<dyn FnOnce() + Send>;

/// Item states (`Item::state`).
const QUEUED: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;
const REVOKED: u8 = 3;
const PANICKED: u8 = 4;

struct Item {
    state: AtomicU8,
    /// Taken by the thread that moved `state` from `QUEUED` (lock held only to take it).
    job: Mutex<Option<Job>>,
    /// The submitting rank's thread: woken when another thread finished the item, so a rank
    /// parked in a wait sees it at once rather than at its park timeout.
    owner: std::thread::Thread,
    /// Whether a thread other than the owner ran the job (set before `state` leaves `RUNNING`).
    ran_elsewhere: AtomicBool,
}

impl Item {
    /// Runs the job here if nobody claimed it yet; whether this call ran it.
    fn try_run(&self) -> bool {
        if self.state.compare_exchange(QUEUED, RUNNING, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return false;
        }
        let job = self.job.lock().unwrap_or_else(|e| e.into_inner()).take();
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.map(|job| job())));
        let elsewhere = std::thread::current().id() != self.owner.id();
        self.ran_elsewhere.store(elsewhere, Ordering::Relaxed);
        self.state.store(if ran.is_ok() { DONE } else { PANICKED }, Ordering::Release);
        if elsewhere {
            // A spurious wake-up at worst: waiters re-check their condition.
            self.owner.unpark();
        }
        true
    }
}

/// The submitter's handle on an item: reports completion, lets the owner run the item itself,
/// and on drop revokes the item or waits until it is no longer running.
pub(crate) struct Ticket {
    item: Arc<Item>,
}

impl Ticket {
    /// The item's outcome once it ran (`None` while queued or running).
    pub(crate) fn outcome(&self) -> Option<Result<()>> {
        match self.item.state.load(Ordering::Acquire) {
            DONE => Some(Ok(())),
            PANICKED => Some(Err(Error::Other("a progress agent work item panicked".into()))),
            _ => None,
        }
    }

    /// Runs the item on this thread if the agent has not started it.
    pub(crate) fn help(&self) {
        self.item.try_run();
    }

    /// Runs the item here or waits for the thread running it; its outcome.
    #[cfg(test)]
    fn finish(&self) -> Result<()> {
        self.help();
        wait_while_running(&self.item);
        self.outcome().expect("a claimed item is finished once no longer running")
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let revoked = self.item.state.compare_exchange(QUEUED, REVOKED, Ordering::AcqRel, Ordering::Acquire);
        if revoked.is_ok() {
            // Nobody will run it: free what it captured now rather than when the agent pops it.
            drop(self.item.job.lock().unwrap_or_else(|e| e.into_inner()).take());
        } else {
            wait_while_running(&self.item);
            // The state's acquire (above or in the wait) orders this load after the runner's store.
            if self.item.ran_elsewhere.load(Ordering::Relaxed) && std::thread::current().id() == self.item.owner.id() {
                COUNTS.with(|c| c.set(AgentCounts { run_elsewhere: c.get().run_elsewhere + 1, ..c.get() }));
            }
        }
    }
}

/// What this thread handed to the progress agent so far: a testing aid that shows the agent
/// path was taken (a rank's counts on the shm device, whose ranks are threads).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentCounts {
    /// Work items this thread queued for the agent.
    pub handed: u64,
    /// Of those, items another thread (the agent) ran, counted once their ticket was dropped.
    pub run_elsewhere: u64,
}

thread_local! {
    static COUNTS: Cell<AgentCounts> = const { Cell::new(AgentCounts { handed: 0, run_elsewhere: 0 }) };
}

/// This thread's [`AgentCounts`].
#[doc(hidden)]
pub fn agent_counts() -> AgentCounts {
    COUNTS.with(Cell::get)
}

/// Spins briefly, then yields, then sleeps until `item` is not running (it runs on another
/// thread, which makes progress without us).
fn wait_while_running(item: &Item) {
    let mut rounds = 0u32;
    while item.state.load(Ordering::Acquire) == RUNNING {
        rounds += 1;
        if rounds < 64 {
            std::hint::spin_loop();
        } else if rounds < 1024 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// Items waiting for the agent (or their owners).
#[derive(Default)]
struct Queue {
    items: Mutex<VecDeque<Arc<Item>>>,
    wake: Condvar,
    /// Items pushed and not yet popped: what a watching worker polls without the lock.
    queued: AtomicUsize,
}

/// How long a worker with an idle CPU keeps watching the queue after its last item before it
/// waits on the condition variable: a parked thread took longer to wake than a 256 KiB
/// operation's whole compute phase, so the next operation's step ran on its rank instead.
const WATCH: Duration = Duration::from_micros(500);

impl Queue {
    fn push(&self, item: Arc<Item>) {
        let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        items.push_back(item);
        // Counted under the lock, as pops are: the count never runs below the items queued.
        self.queued.fetch_add(1, Ordering::Release);
        drop(items);
        self.wake.notify_one();
    }

    /// The next item if one is queued within `WATCH` (spinning, then yielding: the CPU is
    /// idle anyway), else `None`.
    fn watch(&self) -> Option<Arc<Item>> {
        let start = std::time::Instant::now();
        let mut rounds = 0u32;
        while start.elapsed() < WATCH {
            if self.queued.load(Ordering::Acquire) > 0
                && let Some(item) = self.try_pop()
            {
                return Some(item);
            }
            rounds += 1;
            if rounds < 256 { std::hint::spin_loop() } else { std::thread::yield_now() }
        }
        None
    }

    /// The next item, waiting for one up to `idle`.
    fn pop(&self, idle: Duration) -> Option<Arc<Item>> {
        let mut items = self.items.lock().unwrap_or_else(|e| e.into_inner());
        if items.is_empty() {
            items = self.wake.wait_timeout(items, idle).unwrap_or_else(|e| e.into_inner()).0;
        }
        Self::took(&self.queued, &mut items)
    }

    /// Runs queued items until none is left (the agent's work, done by another thread).
    fn drain(&self) {
        while let Some(item) = self.try_pop() {
            item.try_run();
        }
    }

    fn try_pop(&self) -> Option<Arc<Item>> {
        Self::took(&self.queued, &mut self.items.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Pops the first of `items` (the queue's, locked) and counts it out of `queued`.
    fn took(queued: &AtomicUsize, items: &mut VecDeque<Arc<Item>>) -> Option<Arc<Item>> {
        let item = items.pop_front();
        if item.is_some() {
            queued.fetch_sub(1, Ordering::Relaxed);
        }
        item
    }
}

/// A process's progress agent: its queue and the threads that empty it.
pub(crate) struct Agent {
    queue: Arc<Queue>,
    /// [`AgentPlan::idle_cpus`].
    idle_cpus: bool,
}

/// Whether runs hand bulk steps to the agent (`Config::progress_agent`, `FASTMP_PROGRESS_AGENT`).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Where the agent's threads run and how many there are. A thread inherits the CPUs of the
/// thread that spawns it, and the agent starts at a rank's first offloaded step, on a rank
/// pinned to one core: it would then run only when that rank stops computing, which is when
/// the work is no longer worth handing off. So the job says where, before its ranks start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AgentPlan {
    /// CPUs the agent's threads may run on (empty: wherever their spawner may).
    pub cpus: Vec<usize>,
    /// Threads emptying the queue: several ranks' shares of one operation then run at once.
    pub workers: usize,
    /// Whether the process has CPUs its ranks leave idle. Only then is a step left to the agent
    /// at the start that hands it over ([`Offloaded::finish`]); elsewhere the agent would only
    /// take time from computing ranks, and the start runs the step itself.
    pub idle_cpus: bool,
}

/// The plan of the first job that switched the agent on (the agent is process-wide).
static PLAN: OnceLock<AgentPlan> = OnceLock::new();

impl Agent {
    /// Switches the process's agent on for operations started from now on; the first plan
    /// given decides where its threads run.
    pub(crate) fn enable(plan: AgentPlan) {
        let _ = PLAN.set(plan);
        ENABLED.store(true, Ordering::Relaxed);
    }

    /// The process's agent when it is on (started at the first use), else `None`.
    pub(crate) fn get() -> Option<&'static Agent> {
        if !ENABLED.load(Ordering::Relaxed) {
            return None;
        }
        static AGENT: OnceLock<Option<Agent>> = OnceLock::new();
        AGENT.get_or_init(Agent::spawn).as_ref()
    }

    /// An agent with its threads, or `None` where none could be spawned (runs then make their
    /// copies inline, and no queue fills up that nobody drains).
    fn spawn() -> Option<Agent> {
        let plan = PLAN.get().cloned().unwrap_or(AgentPlan { cpus: Vec::new(), workers: 1, idle_cpus: false });
        let queue = Arc::new(Queue::default());
        let mut spawned = 0;
        for i in 0..plan.workers.max(1) {
            let (worker, cpus, idle_cpus) = (Arc::clone(&queue), plan.cpus.clone(), plan.idle_cpus);
            let thread = std::thread::Builder::new().name(format!("fastmp-progress-agent-{i}")).spawn(move || {
                if !cpus.is_empty() {
                    // Best effort: where the CPUs cannot be set the thread still runs (where
                    // its spawner may), and ranks that wait run its items themselves.
                    let _ = crate::launch::affinity::run_current_thread_on(&cpus);
                }
                loop {
                    let watched = if idle_cpus { worker.watch() } else { None };
                    if let Some(item) = watched.or_else(|| worker.pop(Duration::from_millis(100))) {
                        item.try_run();
                    }
                }
            });
            spawned += usize::from(thread.is_ok());
        }
        (spawned > 0).then_some(Agent { queue, idle_cpus: plan.idle_cpus })
    }

    /// Queues `job`, which may borrow data for `'a`.
    ///
    /// # Safety
    /// The returned ticket must be dropped before `'a` ends (never leaked): its drop revokes the
    /// job or waits for it, so the job never runs after its borrows ended.
    unsafe fn submit_borrowing<'a>(&self, job: Box<dyn FnOnce() + Send + 'a>) -> Ticket {
        // SAFETY: only the lifetime bound changes; the caller drops the ticket before 'a ends,
        // and the ticket's drop makes sure the job is not (and will not be) running by then.
        let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + 'a>, Job>(job) };
        self.submit(job)
    }

    fn submit(&self, job: Job) -> Ticket {
        let owner = std::thread::current();
        let item = Arc::new(Item {
            state: AtomicU8::new(QUEUED),
            job: Mutex::new(Some(job)),
            owner,
            ran_elsewhere: AtomicBool::new(false),
        });
        COUNTS.with(|c| c.set(AgentCounts { handed: c.get().handed + 1, ..c.get() }));
        self.queue.push(Arc::clone(&item));
        Ticket { item }
    }
}

/// Runs the items queued for the agent, any rank's, on this thread: a rank that would only wait
/// for a step another rank handed to the agent (its allreduce share) does the agent's work
/// meanwhile. Safe for any item: its owner's ticket revokes or waits for it, whoever runs it.
pub(crate) fn help_the_agent() {
    if let Some(agent) = Agent::get() {
        agent.queue.drain();
    }
}

/// Whether a step of `bytes` of a run would go to the agent (it is on, the run is nonblocking,
/// the step is large enough): callers that must prepare a step differently for the agent (a
/// reduction with a thread-safe op) ask first.
pub(crate) fn would_offload(bytes: usize, blocking: bool) -> bool {
    !blocking && bytes >= AGENT_MIN_BYTES && Agent::get().is_some()
}

/// [`would_offload`], and the agent has CPUs the ranks leave idle: for steps that only pay off
/// there (forced on without, the native ialltoall's pure communication grew 2–3× at 64–256 KiB
/// for 16–24 % overlap at 1–4 MiB, np 2 on 2 CPUs).
pub(crate) fn would_offload_to_idle_cpus(bytes: usize, blocking: bool) -> bool {
    would_offload(bytes, blocking) && Agent::get().is_some_and(|agent| agent.idle_cpus)
}

/// A bulk step of a nonblocking run (a copy, a reduction) that borrows its buffers for `'a`:
/// started at once — handed to the agent when [`would_offload`] says so, else run inline —
/// and completed by [`Offloaded::finish`]. Its drop revokes or waits for the agent's run (see
/// [`Ticket`]).
pub(crate) struct Offloaded<'a> {
    ticket: Option<Ticket>,
    /// Whether [`Offloaded::finish`]'s first poll leaves the step to the agent.
    first_look: bool,
    _borrows: std::marker::PhantomData<&'a mut ()>,
}

impl<'a> Offloaded<'a> {
    /// Starts `step`, which touches `bytes` bytes.
    ///
    /// # Safety
    /// The returned value must be dropped or finished before `'a` ends, never leaked: keep it in
    /// the operation's future (which the engine always drops or finishes before the scope ends)
    /// or on the stack.
    pub(crate) unsafe fn start(bytes: usize, blocking: bool, step: impl FnOnce() + Send + 'a) -> Self {
        let (ticket, first_look) = match Agent::get() {
            // SAFETY: the ticket lives in `self`, which the caller drops before 'a ends.
            Some(agent) if !blocking && bytes >= AGENT_MIN_BYTES => {
                (Some(unsafe { agent.submit_borrowing(Box::new(step)) }), agent.idle_cpus)
            }
            _ => {
                step();
                (None, false)
            }
        };
        Offloaded { ticket, first_look, _borrows: std::marker::PhantomData }
    }

    /// Starts copying `src` into `dst` (same lengths: the caller checked).
    ///
    /// # Safety
    /// As for [`Offloaded::start`].
    pub(crate) unsafe fn copy(dst: &'a mut [u8], src: &'a [u8], blocking: bool) -> Self {
        assert_eq!(dst.len(), src.len(), "Offloaded::copy: lengths checked by the caller");
        // SAFETY: forwarded contract.
        unsafe { Offloaded::start(src.len(), blocking, move || dst.copy_from_slice(src)) }
    }

    /// Whether the step went to the agent (else it already ran).
    pub(crate) fn in_flight(&self) -> bool {
        self.ticket.is_some()
    }

    /// Completes once the step ran: yields while the agent runs it, and runs it here if the
    /// agent has not started it when the run is polled again (so it never waits for the agent
    /// to be scheduled). Where the agent has idle CPUs, the first poll only looks: it is
    /// usually the same poll that handed the step over (a nonblocking start), and helping there
    /// ran the step inline before a parked agent thread could wake, so the rank went back to its
    /// work with the copy done and nothing left to overlap.
    pub(crate) async fn finish(self) -> Result<()> {
        let Some(ticket) = &self.ticket else { return Ok(()) };
        let mut first_look = self.first_look;
        std::future::poll_fn(|_| {
            if !std::mem::take(&mut first_look) {
                ticket.help();
            }
            ticket.outcome().map_or(std::task::Poll::Pending, std::task::Poll::Ready)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An agent with no thread: items run only when a test drains the queue or helps.
    fn threadless() -> Agent {
        Agent { queue: Arc::new(Queue::default()), idle_cpus: false }
    }

    /// Queues a copy of `src` into `dst` on `agent`.
    ///
    /// # Safety
    /// The ticket must be dropped before the buffers are used again.
    unsafe fn copy(agent: &Agent, src: &[u8], dst: &mut [u8]) -> Ticket {
        // SAFETY: forwarded contract.
        unsafe { agent.submit_borrowing(Box::new(move || dst.copy_from_slice(src))) }
    }

    #[test]
    fn owner_runs_its_item_when_nobody_did() {
        let agent = threadless();
        let src = [7u8; 300];
        let mut dst = [0u8; 300];
        // SAFETY: both arrays outlive the ticket, which is finished before they are read.
        let ticket = unsafe { copy(&agent, &src, &mut dst) };
        assert!(ticket.outcome().is_none());
        ticket.finish().unwrap();
        drop(ticket);
        assert_eq!(dst, src);
        agent.queue.drain(); // the already-run item is skipped
    }

    #[test]
    fn the_agent_runs_items_and_the_owner_sees_them_done() {
        let agent = threadless();
        let src: Vec<u8> = (0..=255).collect();
        let mut dst = vec![0u8; 256];
        // SAFETY: both vectors outlive the ticket.
        let ticket = unsafe { copy(&agent, &src, &mut dst) };
        let queue = Arc::clone(&agent.queue);
        std::thread::spawn(move || queue.drain()).join().unwrap();
        assert!(matches!(ticket.outcome(), Some(Ok(()))));
        drop(ticket);
        assert_eq!(dst, src);
    }

    #[test]
    fn a_dropped_ticket_revokes_its_item() {
        let agent = threadless();
        let src = vec![1u8; 64];
        let mut dst = vec![0u8; 64];
        // SAFETY: the ticket is dropped before the vectors.
        let ticket = unsafe { copy(&agent, &src, &mut dst) };
        drop(ticket);
        drop(src);
        agent.queue.drain(); // must not run the revoked copy (Miri flags a use after free if it did)
        assert_eq!(dst, vec![0; 64]);
        dst.clear();
    }

    #[test]
    fn a_dropped_ticket_waits_for_its_running_item() {
        let agent = threadless();
        let src = vec![3u8; 1 << 12];
        let mut dst = vec![0u8; 1 << 12];
        for _ in 0..4 {
            // SAFETY: the ticket is dropped (and so the copy over) before the vectors are used.
            let ticket = unsafe { copy(&agent, &src, &mut dst) };
            let queue = Arc::clone(&agent.queue);
            let runner = std::thread::spawn(move || queue.drain());
            drop(ticket); // revokes or waits, depending on who came first
            runner.join().unwrap();
        }
        assert!(dst.iter().all(|&b| b == 0 || b == 3));
    }

    #[test]
    fn a_panicking_item_is_an_error_not_a_hang() {
        let agent = threadless();
        let ticket = agent.submit(Box::new(|| panic!("boom")));
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ticket.finish()));
        assert!(matches!(outcome, Ok(Err(Error::Other(_)))), "{outcome:?}");
    }
}
