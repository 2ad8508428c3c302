//! `Comm::abort` (MPI_Abort): ends the whole job from any rank.

use crate::comm::Comm;
use crate::device::Failure;

use super::AbortUnwind;

impl Comm {
    /// Ends the whole job with exit status `code` (MPI_Abort): every other rank's pending and
    /// later operations fail with [`crate::Error::PeerFailed`] naming this rank, and this rank
    /// stops at once (it unwinds, so destructors run). [`crate::run`] then returns
    /// [`crate::Error::Aborted`] with this rank and `code`; [`crate::main`] and `fastmprun` exit
    /// with `code` (under a process launcher every rank's `run` returns the same error).
    ///
    /// As in MPI, the whole job ends whichever communicator this is called on. If the job had
    /// already failed (another rank first), that earlier failure is the one reported.
    ///
    /// ```
    /// let result = fastmp::run(2, |world| {
    ///     if world.rank() == 1 {
    ///         world.abort(3);
    ///     }
    ///     world.barrier()
    /// });
    /// assert!(matches!(result, Err(fastmp::Error::Aborted { rank: 1, code: 3 })));
    /// ```
    pub fn abort(&self, code: i32) -> ! {
        let job = super::abort_job(&*self.dev, Failure::aborted(self.dev.rank(), code));
        // Not a panic: no panic hook runs, `run` recognises the payload.
        std::panic::resume_unwind(Box::new(AbortUnwind(job)))
    }
}
