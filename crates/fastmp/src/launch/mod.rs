//! Starting SPMD jobs: `run` (thread ranks), `init`/`main` (configuration from the environment).

mod abort;
pub(crate) mod affinity;
pub(crate) mod config;
mod hybrid;
mod info;
#[cfg(feature = "mpi")]
mod mpi;
mod tcp;

pub use info::{processor_name, wtick, wtime};

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::comm::Comm;
use crate::device::{Device, Failure, Placement, ShmWorld};
use crate::error::{Error, Result};
use config::{Config, DeviceKind, Pin};

/// Runs `f` on `np` ranks, each a thread of this process on the shm device, and returns their
/// results in rank order.
///
/// If a rank fails — panics, returns an error, or calls [`Comm::abort`] — the job is aborted:
/// operations other ranks are blocked in (and start later) fail with [`Error::PeerFailed`] naming
/// the rank that failed first, and `run` returns [`Error::RankFailed`] naming it and why (or
/// [`Error::Aborted`] with its code). A rank whose error is only the consequence of another's
/// failure is never blamed.
///
/// Thread ranks share the process: a `static` is one variable for all ranks of a shm job (under a
/// process launcher each rank would have its own), while a `thread_local!` is per rank. Keep
/// rank-local state in the closure.
///
/// Under a launcher (`fastmprun`, `mpirun`, `srun`, hydra: see [`Config::from_env`]) this
/// process is one rank of the launcher's job, so `run` joins that job when `np` is its size
/// (and returns this rank's result alone), and is an [`Error::InvalidArgument`] saying what
/// to do when it is not; it never starts a private job there. A Slurm job step of one task
/// is not taken for a launcher (batch scripts run in one). [`main`] always follows the
/// launcher.
///
/// ```
/// let squares = fastmp::run(4, |world| Ok(world.rank() * world.rank()))?;
/// assert_eq!(squares, vec![0, 1, 4, 9]);
/// # Ok::<(), fastmp::Error>(())
/// ```
pub fn run<F, R>(np: usize, f: F) -> Result<Vec<R>>
where
    F: Fn(Comm) -> Result<R> + Sync,
    R: Send,
{
    config::for_run(np)?.run(f)
}

/// Reads the launch configuration from the environment (see [`Config::from_env`]).
pub fn init() -> Result<Config> {
    Config::from_env()
}

/// Entry point for programs started by a launcher, or on their own: runs `f` with the
/// configuration from the environment ([`Config::from_env`]: the launcher's rank and size;
/// without a launcher `FASTMP_NP` thread ranks, or one per allowed CPU when it is unset). On
/// failure it prints the job's failure once (under a process launcher only the rank that failed
/// first prints it) and exits with status 1, or with the code given to [`Comm::abort`].
///
/// ```no_run
/// fastmp::main(|world| {
///     println!("rank {} of {}", world.rank(), world.size());
///     Ok(())
/// });
/// ```
pub fn main<F>(f: F)
where
    F: Fn(Comm) -> Result<()> + Sync,
{
    if let Err(e) = init().and_then(|config| config.run(f)) {
        if !FAILURE_REPORTED.load(Ordering::Acquire) {
            report(&e);
        }
        std::process::exit(e.exit_code());
    }
}

/// Set once this process printed the job's failure, or left it to the rank that failed first
/// (process ranks report before telling their peers), so `main` does not print it again.
static FAILURE_REPORTED: AtomicBool = AtomicBool::new(false);

/// Set when this process is one rank of a multi-process job: its failure report must be out
/// before any peer hears of the failure, because a launcher stops the rest of the job as soon as
/// one rank exits.
static ONE_RANK_PER_PROCESS: AtomicBool = AtomicBool::new(false);

/// Prints the job's failure in one write, so a launcher's kill cannot cut it in half.
fn report(error: &Error) {
    use std::io::Write as _;
    let line = format!("fastmp: {error}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Aborts the job because this rank failed with `own` (see [`Device::abort_job`]) and returns
/// the failure the job ends with. In a multi-process job only the rank that failed first reports,
/// and before its peers can hear of it; the other ranks leave the report to that rank.
pub(crate) fn abort_job(dev: &dyn Device, own: Failure) -> Failure {
    if ONE_RANK_PER_PROCESS.load(Ordering::Acquire)
        && !FAILURE_REPORTED.swap(true, Ordering::AcqRel)
        && dev.job_failure().is_none()
    {
        report(&own.job_error());
    }
    dev.abort_job(own)
}

/// The unwinding payload of [`Comm::abort`]: the job is already aborted, `run` reports it.
pub(crate) struct AbortUnwind(pub(crate) Failure);

/// The failure a rank's program ended with, from `run`'s view of its outcome: its error, its
/// panic (with the panic's message), or its abort.
pub(crate) fn rank_failure(rank: usize, outcome: std::thread::Result<Error>) -> Failure {
    match outcome {
        Ok(error) => Failure::of_error(rank, &error),
        Err(payload) => match payload.downcast::<AbortUnwind>() {
            Ok(abort) => abort.0,
            Err(payload) => {
                Failure { rank, cause: format!("panicked: {}", panic_message(payload.as_ref())), code: None }
            }
        },
    }
}

pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

impl Config {
    /// Runs `f` on every rank of this configuration; see [`run`].
    pub fn run<F, R>(&self, f: F) -> Result<Vec<R>>
    where
        F: Fn(Comm) -> Result<R> + Sync,
        R: Send,
    {
        self.validate()?;
        let (cpus, competing) = self.cpus_and_competing_ranks()?;
        // Automatic: where the ranks leave one of this process's CPUs idle.
        if self.progress_agent.unwrap_or(cpus > competing) {
            crate::progress_agent::Agent::enable(self.agent_plan(cpus, competing));
        }
        let Some(path) = crate::trace::path_for(self.trace.as_deref()) else { return self.run_untraced(&f) };
        // Ranks that are processes (a launcher's, or MPI's) write a file each.
        #[cfg(feature = "mpi")]
        let launched = self.process.is_some() || self.device == DeviceKind::Mpi;
        #[cfg(not(feature = "mpi"))]
        let launched = self.process.is_some();
        let tracing = crate::trace::Tracing::start(path, launched)?;
        let results = self.run_untraced(&f);
        tracing.finish()?;
        results
    }

    /// This process's thread ranks, and the processes of the job.
    fn ranks_per_process(&self) -> (usize, usize) {
        match (self.device, self.process) {
            (DeviceKind::Hybrid, Some(place)) => (self.hybrid_threads(), place.size),
            (_, Some(place)) => (1, place.size),
            (_, None) => (self.np, 1),
        }
    }

    /// The CPUs this process may run on, and the ranks that compete for them.
    pub(crate) fn cpus_and_competing_ranks(&self) -> Result<(usize, usize)> {
        let (per_process, processes) = self.ranks_per_process();
        Ok((affinity::allowed_cpus().len(), affinity::competing_ranks(per_process, processes)?))
    }

    /// Where the progress agent runs: on the CPUs of this process that its pinned ranks leave
    /// free (all of them where the ranks are not pinned or take every one), with a thread per
    /// idle CPU, up to one per rank.
    fn agent_plan(&self, cpus: usize, competing: usize) -> crate::progress_agent::AgentPlan {
        let allowed = affinity::allowed_cpus();
        let (per_process, _) = self.ranks_per_process();
        let taken: Vec<usize> =
            (0..per_process).filter_map(|rank| affinity::cpu_for(self.pin, rank, per_process, &allowed)).collect();
        let free: Vec<usize> = allowed.iter().copied().filter(|cpu| !taken.contains(cpu)).collect();
        let workers = cpus.saturating_sub(competing).min(per_process).max(1);
        let idle_cpus = cpus > competing;
        crate::progress_agent::AgentPlan { cpus: if free.is_empty() { allowed } else { free }, workers, idle_cpus }
    }

    fn run_untraced<F, R>(&self, f: &F) -> Result<Vec<R>>
    where
        F: Fn(Comm) -> Result<R> + Sync,
        R: Send,
    {
        match (self.device, self.process) {
            (DeviceKind::Shm, _) => self.run_shm(f).1,
            (DeviceKind::Tcp, Some(place)) => self.run_tcp_process(place, f),
            (DeviceKind::Tcp, None) => self.run_tcp_threads(f),
            #[cfg(feature = "mpi")]
            (DeviceKind::Mpi, _) => self.run_mpi_process(f),
            (DeviceKind::Hybrid, Some(place)) => self.run_hybrid_process(place, f),
            (DeviceKind::Hybrid, None) => self.run_hybrid_threads(f),
        }
    }

    /// Runs `rank_main(rank)` on one named thread per rank (with the configured stack size) and
    /// collects the results in rank order; `start_failed` hears of a thread that could not start.
    pub(crate) fn run_rank_threads<R: Send>(
        &self,
        rank_main: &(dyn Fn(usize) -> Result<R> + Sync),
        start_failed: impl Fn(usize, String),
    ) -> Vec<Result<R>> {
        self.run_threads_of(0..self.np, rank_main, start_failed)
    }

    /// As [`Config::run_rank_threads`] for the world ranks `ranks` only (this process's part of
    /// a hybrid job).
    pub(crate) fn run_threads_of<R: Send>(
        &self,
        ranks: std::ops::Range<usize>,
        rank_main: &(dyn Fn(usize) -> Result<R> + Sync),
        start_failed: impl Fn(usize, String),
    ) -> Vec<Result<R>> {
        let first = ranks.start;
        let trace = crate::trace::current_job();
        std::thread::scope(|s| {
            let handles: Vec<_> = ranks
                .map(|rank| {
                    let mut builder = std::thread::Builder::new().name(format!("fastmp-rank-{rank}"));
                    if let Some(bytes) = self.stack_size {
                        builder = builder.stack_size(bytes);
                    }
                    let trace = trace.clone();
                    builder.spawn_scoped(s, move || {
                        crate::trace::enter(trace);
                        let result = rank_main(rank);
                        crate::trace::leave();
                        result
                    })
                })
                .collect();
            handles
                .into_iter()
                .enumerate()
                .map(|(i, h)| (first + i, h))
                .map(|(rank, h)| match h {
                    Ok(h) => h.join().unwrap_or_else(|_| {
                        Err(Error::RankFailed { rank, cause: "rank thread could not be joined".into() })
                    }),
                    Err(e) => {
                        let cause = format!("could not start its thread: {e}");
                        start_failed(rank, cause.clone());
                        Err(Error::RankFailed { rank, cause })
                    }
                })
                .collect()
        })
    }

    /// Testing aid: runs `f` as [`Config::run`] does on the shm device, and also returns how
    /// many per-pair rings the job created (one per ordered pair of ranks that sent
    /// point-to-point; they are made on first use).
    #[doc(hidden)]
    pub fn run_shm_counting_rings<F, R>(&self, f: F) -> Result<(Vec<R>, usize)>
    where
        F: Fn(Comm) -> Result<R> + Sync,
        R: Send,
    {
        self.validate()?;
        if self.device != DeviceKind::Shm {
            return Err(Error::InvalidArgument(format!(
                "run_shm_counting_rings: the job runs on the {:?} device, not shm",
                self.device
            )));
        }
        let (world, results) = self.run_shm(&f);
        Ok((results?, world.map_or(0, |w| w.rings_created())))
    }

    /// Runs a shm job; also returns its world, once it was made.
    fn run_shm<F, R>(&self, f: &F) -> (Option<Arc<ShmWorld>>, Result<Vec<R>>)
    where
        F: Fn(Comm) -> Result<R> + Sync,
        R: Send,
    {
        let tuning = match self.resolved_tuning() {
            Ok(tuning) => Arc::new(tuning),
            Err(e) => return (None, Err(e)),
        };
        let placement = match self.threads_per_process {
            Some(t) if self.simulate_processes => Placement::blocks(self.np, t),
            _ => Placement::single_process(self.np),
        };
        let cpus = if self.pin == Pin::None { Vec::new() } else { affinity::allowed_cpus() };
        let numa = self.simulated_numa(&placement).unwrap_or_else(|| affinity::numa_of_ranks(self.pin, self.np, &cpus));
        let placement = placement.with_numa(numa);
        let world = ShmWorld::with_placement(self.np, self.effective_eager_limit(), placement, self.np);
        let rank_main = |rank: usize| -> Result<R> {
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                if let Some(cpu) = affinity::cpu_for(self.pin, rank, self.np, &cpus) {
                    affinity::pin_current_thread(cpu)?;
                }
                let comm = Comm::world(Rc::new(world.endpoint(rank)?), tuning.clone());
                f(comm)
            }));
            let failure = match outcome {
                Ok(Ok(value)) => {
                    world.mark_exited(rank);
                    return Ok(value);
                }
                Ok(Err(e)) => rank_failure(rank, Ok(e)),
                Err(payload) => rank_failure(rank, Err(payload)),
            };
            world.mark_failed(rank, failure.clone());
            Err(failure.job_error())
        };
        let results = self.run_rank_threads(&rank_main, |rank, cause| {
            world.mark_failed(rank, Failure { rank, cause, code: None });
        });
        if let Some(failure) = world.first_failure() {
            return (Some(world), Err(failure.job_error()));
        }
        (Some(world), results.into_iter().collect())
    }
}
