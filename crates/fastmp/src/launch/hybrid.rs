//! Running a job on the hybrid device: as process `p` of a launcher's job (its thread ranks
//! `p*T ..`), or every process's thread group inside this one process over loopback TCP (no
//! launcher: tests and single-process use). Between processes the ranks talk over tcp, or over
//! the system MPI with `FASTMP_INTERPROCESS=mpi` (feature `mpi`; the job is then `mpirun`'s).

use std::sync::{Arc, Mutex};

use super::affinity;
use super::config::{Config, DEFAULT_EAGER_LIMIT, Pin, ProcessPlace};
use super::tcp::{FirstFailure, Place, RankEnd, run_loopback_mesh, run_rank};
use crate::comm::Comm;
use crate::device::hybrid::Remote;
use crate::device::{Device, Failure, HybridEndpoint, Placement, ShmWorld, lock_ignoring_poison};
use crate::error::{Error, Result};
use crate::machine::MachineTopology;

/// Names the hybrid device's inter-process transport: `tcp` (the default) or `mpi`.
pub(crate) const INTERPROCESS_VAR: &str = "FASTMP_INTERPROCESS";

/// What carries a hybrid job's messages between its processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Interprocess {
    Tcp,
    #[cfg(feature = "mpi")]
    Mpi,
}

/// [`INTERPROCESS_VAR`], or why it names nothing this program can use.
fn interprocess_from_env() -> Result<Interprocess> {
    match std::env::var(INTERPROCESS_VAR).as_deref() {
        Err(_) | Ok("tcp") => Ok(Interprocess::Tcp),
        #[cfg(feature = "mpi")]
        Ok("mpi") => Ok(Interprocess::Mpi),
        #[cfg(not(feature = "mpi"))]
        Ok("mpi") => Err(Error::InvalidArgument(format!(
            "{INTERPROCESS_VAR}=mpi: the mpi transport is not built into this program: build fastmp with \
             `--features mpi` (it needs an MPI installation with mpicc)"
        ))),
        Ok(other) => Err(Error::InvalidArgument(format!("{INTERPROCESS_VAR}={other}: expected 'tcp' or 'mpi'"))),
    }
}

impl<R: Remote> RankEnd for HybridEndpoint<R> {
    /// Leaves the shm world (thread peers see it exited), then the remote side.
    fn finish(&self) -> Result<()> {
        let (world, local) = self.local();
        world.mark_exited(local);
        self.remote().shutdown()
    }

    /// `abort_job` put the failure on record in the shm world already; tell the network.
    fn fail(&self, job: Failure) {
        self.remote().abort(job);
    }
}

/// How a hybrid job's ranks fall into processes: `per_process` thread ranks each, block-wise.
#[derive(Clone, Copy, Debug)]
struct Blocks {
    np: usize,
    per_process: usize,
}

impl Blocks {
    fn processes(self) -> usize {
        self.np.div_ceil(self.per_process)
    }

    fn ranks_of(self, process: usize) -> std::ops::Range<usize> {
        process * self.per_process..((process + 1) * self.per_process).min(self.np)
    }

    /// The NUMA node of every rank that `ours` says this process runs, on `machine`: each is
    /// its process's thread `rank % per_process`, pinned by `pin` over the allowed `cpus` (as
    /// `Config::pin_hybrid_rank` and the loopback mesh pin them); `None` for other processes'
    /// ranks (only a process's own members form its NUMA level) and for unpinned ranks.
    fn numa_of_ranks(
        self,
        machine: &MachineTopology,
        pin: Pin,
        cpus: &[usize],
        ours: impl Fn(usize) -> bool,
    ) -> Vec<Option<usize>> {
        (0..self.np)
            .map(|rank| {
                let cpu = ours(rank)
                    .then(|| affinity::cpu_for_in(machine, pin, rank % self.per_process, self.per_process, cpus));
                cpu.flatten().and_then(|cpu| machine.numa_of(cpu))
            })
            .collect()
    }
}

impl Config {
    /// Thread ranks per process of this hybrid job: as configured, else two processes' worth.
    /// Thread ranks in each process of a hybrid job.
    pub(super) fn hybrid_threads(&self) -> usize {
        self.hybrid_blocks().per_process
    }

    fn hybrid_blocks(&self) -> Blocks {
        Blocks { np: self.np, per_process: self.threads_per_process.unwrap_or(self.np.div_ceil(2)).max(1) }
    }

    /// One shm world per process's thread group (local numbering `0..T`); `competing` ranks
    /// share its cores ([`affinity::competing_ranks`]), which sets its wait policy: spinning while
    /// the awaited rank of another process has no core starves it (2 processes x 2 threads on 2
    /// cores took 400 µs instead of 50 µs per 64 KiB bcast).
    fn hybrid_world(&self, blocks: Blocks, process: usize, competing: usize) -> Arc<ShmWorld> {
        let n = blocks.ranks_of(process).len();
        let eager = self.eager_limit.unwrap_or(DEFAULT_EAGER_LIMIT);
        ShmWorld::with_placement(n, eager, Placement::single_process(n), competing)
    }

    /// Pins the calling thread (world rank `rank`) by its place among its process's threads.
    fn pin_hybrid_rank(&self, blocks: Blocks, rank: usize, cpus: &[usize]) -> Result<()> {
        let local = rank % blocks.per_process;
        if let Some(cpu) = affinity::cpu_for(self.pin, local, blocks.per_process, cpus) {
            affinity::pin_current_thread(cpu)?;
        }
        Ok(())
    }

    /// Every process's thread group as threads of this process, joined over loopback TCP.
    pub(super) fn run_hybrid_threads<F, R>(&self, f: &F) -> Result<Vec<R>>
    where
        F: Fn(Comm) -> Result<R> + Sync,
        R: Send,
    {
        if interprocess_from_env()? != Interprocess::Tcp {
            return Err(Error::InvalidArgument(format!(
                "{INTERPROCESS_VAR}=mpi: a hybrid job over MPI runs one MPI process per hybrid process: start it \
                 with mpirun -np P -x FASTMP_DEVICE=hybrid -x {INTERPROCESS_VAR}=mpi -x FASTMP_THREADS_PER_PROCESS=T \
                 (or fastmprun --device hybrid --interprocess mpi)"
            )));
        }
        let tuning = Arc::new(self.resolved_tuning()?);
        let blocks = self.hybrid_blocks();
        let worlds: Vec<Arc<ShmWorld>> =
            (0..blocks.processes()).map(|p| self.hybrid_world(blocks, p, self.np)).collect();
        let placement = Placement::blocks(self.np, blocks.per_process);
        let cpus = if self.pin == Pin::None { Vec::new() } else { affinity::allowed_cpus() };
        let numa = self
            .simulated_numa(&placement)
            .unwrap_or_else(|| blocks.numa_of_ranks(crate::topology(), self.pin, &cpus, |_| true));
        let placement = placement.with_numa(numa);
        let cpu_of = |rank: usize| affinity::cpu_for(self.pin, rank % blocks.per_process, blocks.per_process, &cpus);
        run_loopback_mesh(self, &cpu_of, &|place, tcp| {
            let world = &worlds[place.rank / blocks.per_process];
            let endpoint = hybrid_endpoint(blocks, place.rank, world, tcp, placement.clone(), &place)?;
            run_rank(place, endpoint, tuning.clone(), f)
        })
    }

    /// This process is process `place.rank` of `place.size` of a launcher's hybrid job: it runs
    /// its thread ranks, each with its own tcp endpoint joined through the environment's
    /// rendezvous, and returns their results in rank order.
    pub(super) fn run_hybrid_process<F, R>(&self, place: ProcessPlace, f: &F) -> Result<Vec<R>>
    where
        F: Fn(Comm) -> Result<R> + Sync,
        R: Send,
    {
        match interprocess_from_env()? {
            Interprocess::Tcp => {}
            #[cfg(feature = "mpi")]
            Interprocess::Mpi => return self.run_hybrid_mpi_process(f),
        }
        let tuning = Arc::new(self.resolved_tuning()?);
        let blocks = self.hybrid_blocks();
        if blocks.processes() != place.size {
            return Err(Error::InvalidArgument(format!(
                "hybrid device: {} ranks at {} threads per process need {} processes, but the launcher started {}",
                self.np,
                blocks.per_process,
                blocks.processes(),
                place.size
            )));
        }
        let competing = affinity::competing_ranks(blocks.per_process, place.size)?;
        let world = self.hybrid_world(blocks, place.rank, competing);
        // The remote endpoint's waits are the rank's waits: the same policy as its world's.
        let options = self.tcp_options(competing);
        let cpus = if self.pin == Pin::None { Vec::new() } else { affinity::allowed_cpus() };
        let ours = blocks.ranks_of(place.rank);
        let numa = blocks.numa_of_ranks(crate::topology(), self.pin, &cpus, |rank| ours.contains(&rank));
        let first: FirstFailure = Mutex::new(None);
        super::ONE_RANK_PER_PROCESS.store(true, std::sync::atomic::Ordering::Release);
        let rank_main = |rank: usize| -> Result<R> {
            let place = Place { rank, first: &first };
            let connected = self
                .pin_hybrid_rank(blocks, rank, &cpus)
                .and_then(|()| self.tcp_endpoint_from_env(ProcessPlace { rank, size: self.np }, options));
            let tcp = match connected {
                Ok(tcp) => tcp,
                Err(e) => {
                    lock_ignoring_poison(&first).get_or_insert_with(|| Failure::of_error(rank, &e));
                    return Err(e);
                }
            };
            // Processes block-wise; nodes as the tcp sites reported them.
            let nodes: Vec<usize> = (0..self.np).map(|r| tcp.placement().node_of(r)).collect();
            let processes: Vec<usize> = (0..self.np).map(|r| r / blocks.per_process).collect();
            let placement = Placement::from_keys(&processes, &nodes);
            let numa_of_ranks = self.simulated_numa(&placement).unwrap_or_else(|| numa.clone());
            let placement = placement.with_numa(numa_of_ranks);
            let endpoint = hybrid_endpoint(blocks, rank, &world, tcp, placement, &place)?;
            run_rank(place, endpoint, tuning.clone(), f)
        };
        let results = self.run_threads_of(blocks.ranks_of(place.rank), &rank_main, |rank, cause| {
            lock_ignoring_poison(&first).get_or_insert(Failure { rank, cause, code: None });
        });
        if let Some(failure) = lock_ignoring_poison(&first).take() {
            return Err(failure.job_error());
        }
        results.into_iter().collect()
    }

    /// This process is one MPI process of a hybrid job over MPI (`mpirun` started it): it makes
    /// the job's MPI communicators, runs its thread ranks, and returns their results in rank
    /// order. A failing rank aborts the MPI job (every process ends; see `device::mpi::lanes`).
    #[cfg(feature = "mpi")]
    fn run_hybrid_mpi_process<F, R>(&self, f: &F) -> Result<Vec<R>>
    where
        F: Fn(Comm) -> Result<R> + Sync,
        R: Send,
    {
        use crate::device::mpi::lanes::Lanes;
        let tuning = Arc::new(self.resolved_tuning()?);
        let blocks = self.hybrid_blocks();
        let lanes = Arc::new(Lanes::new(self.np, blocks.per_process, self.effective_eager_limit())?);
        let process = lanes.process();
        let world =
            self.hybrid_world(blocks, process, affinity::competing_ranks(blocks.per_process, blocks.processes())?);
        let cpus = if self.pin == Pin::None { Vec::new() } else { affinity::allowed_cpus() };
        let first: FirstFailure = Mutex::new(None);
        super::ONE_RANK_PER_PROCESS.store(true, std::sync::atomic::Ordering::Release);
        let rank_main = |rank: usize| -> Result<R> {
            let place = Place { rank, first: &first };
            let remote = lanes.endpoint(rank);
            if let Err(e) = self.pin_hybrid_rank(blocks, rank, &cpus) {
                // Ends the MPI job: the other ranks must not wait for this one.
                remote.abort_job(Failure::of_error(rank, &e));
                return Err(e);
            }
            let endpoint = hybrid_endpoint(blocks, rank, &world, remote, lanes.placement().clone(), &place)?;
            run_rank(place, endpoint, tuning.clone(), f)
        };
        let results = self.run_threads_of(blocks.ranks_of(process), &rank_main, |rank, cause| {
            lock_ignoring_poison(&first).get_or_insert(Failure { rank, cause, code: None });
        });
        if let Some(failure) = lock_ignoring_poison(&first).take() {
            return Err(failure.job_error());
        }
        results.into_iter().collect()
    }
}

/// World rank `rank`'s hybrid endpoint (on its own thread: the shm endpoint binds its parker
/// to it). A rank that cannot take its shm endpoint fails the job through its remote endpoint.
fn hybrid_endpoint<R: Remote>(
    blocks: Blocks,
    rank: usize,
    world: &Arc<ShmWorld>,
    remote: R,
    placement: Placement,
    place: &Place<'_>,
) -> Result<HybridEndpoint<R>> {
    let base = rank - rank % blocks.per_process;
    match world.endpoint(rank - base) {
        Ok(shm) => Ok(HybridEndpoint::new(rank, base, shm, remote, placement)),
        Err(e) => {
            let job = remote.abort_job(Failure::of_error(rank, &e));
            lock_ignoring_poison(place.first).get_or_insert_with(|| job.clone());
            world.mark_failed(rank - base, job.clone());
            remote.abort(job);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The constructed 2-socket tree (node 0: CPUs 0-3 and 8-11, node 1: 4-7 and 12-15), two
    /// processes of 4 thread ranks, this process the second.
    #[test]
    fn pinned_thread_ranks_record_their_numa_nodes() {
        let tree = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/sysfs/numa-2socket");
        let machine = MachineTopology::from_sysfs(std::path::Path::new(tree)).expect("sysfs tree");
        let blocks = Blocks { np: 8, per_process: 4 };
        let cpus: Vec<usize> = (0..16).collect();
        let ours = |rank: usize| rank >= 4;
        let (n0, n1) = (Some(0), Some(1));
        assert_eq!(blocks.numa_of_ranks(&machine, Pin::Numa, &cpus, ours), [None, None, None, None, n0, n0, n1, n1]);
        assert_eq!(blocks.numa_of_ranks(&machine, Pin::Scatter, &cpus, |_| true), [n0, n1, n0, n1, n0, n1, n0, n1]);
        assert_eq!(blocks.numa_of_ranks(&machine, Pin::None, &cpus, |_| true), [None; 8]);
        // Bound to one socket's CPUs (as `mpirun --bind-to socket` does): every rank on it.
        let socket1 = [4, 5, 6, 7, 12, 13, 14, 15];
        assert_eq!(blocks.numa_of_ranks(&machine, Pin::Compact, &socket1, ours)[4..], [n1; 4]);
    }
}
