//! Running a job on the mpi device: this process is one rank of the MPI job that `mpirun` or
//! `srun` started; rank and size come from MPI itself.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::Arc;

use super::config::Config;
use super::rank_failure;
use crate::comm::Comm;
use crate::device::Device;
use crate::device::mpi::MpiEndpoint;
use crate::error::{Error, Result};

impl Config {
    /// Runs `f` once as this process's rank of a fresh duplicate of `MPI_COMM_WORLD`, and returns
    /// its result alone. A failing rank reports and calls `MPI_Abort`, which ends the whole job.
    pub(super) fn run_mpi_process<F, R>(&self, f: &F) -> Result<Vec<R>>
    where
        F: Fn(Comm) -> Result<R>,
    {
        let tuning = Arc::new(self.resolved_tuning()?);
        let endpoint = Rc::new(MpiEndpoint::new()?);
        let (rank, size) = (endpoint.rank(), endpoint.size());
        if self.process.is_none() && self.np != size {
            return Err(Error::InvalidArgument(format!(
                "the mpi device runs one rank per MPI process, and this MPI job has {size} (asked for {}): start \
                 the program with mpirun -np {} -x FASTMP_DEVICE=mpi",
                self.np, self.np
            )));
        }
        super::ONE_RANK_PER_PROCESS.store(true, std::sync::atomic::Ordering::Release);
        let outcome = catch_unwind(AssertUnwindSafe(|| f(Comm::world(endpoint.clone(), tuning))));
        let own = match outcome {
            Ok(Ok(value)) => return Ok(vec![value]),
            Ok(Err(e)) => rank_failure(rank, Ok(e)),
            Err(payload) => rank_failure(rank, Err(payload)),
        };
        // Reports, then MPI_Abort: does not return.
        let job = super::abort_job(&*endpoint, own);
        Err(job.job_error())
    }
}
