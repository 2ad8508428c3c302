//! Running a job on the tcp device: as this process's one rank (under a launcher), or as thread
//! ranks joined over loopback TCP (no launcher: tests and single-process use).

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::config::{Config, Pin, ProcessPlace};
use super::{affinity, rank_failure};
use crate::coll::Tuning;
use crate::comm::Comm;
use crate::device::tcp::bootstrap::{Bootstrap, Rendezvous, Site};
use crate::device::tcp::handshake::JobSecret;
use crate::device::tcp::{TcpEndpoint, TcpOptions};
use crate::device::{Device, Failure, lock_ignoring_poison};
use crate::error::{Error, Result};

/// Start-up timeout unless `FASTMP_CONNECT_TIMEOUT` (seconds) says otherwise.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// The first failure of a job, as `run` reports it.
pub(super) type FirstFailure = Mutex<Option<Failure>>;

/// Which rank runs, and where its job records failures.
pub(super) struct Place<'a> {
    pub rank: usize,
    pub first: &'a FirstFailure,
}

/// How a rank's endpoint ends: after success (`finish`: a clean shutdown) or after a failure
/// already recorded with `abort_job` (`fail`: the peers are told, the connections closed).
pub(super) trait RankEnd: Device {
    fn finish(&self) -> Result<()>;
    fn fail(&self, job: Failure);
}

impl RankEnd for TcpEndpoint {
    fn finish(&self) -> Result<()> {
        self.shutdown()
    }

    fn fail(&self, job: Failure) {
        self.abort(job);
    }
}

/// Runs one rank's program on its endpoint and ends the rank: a clean shutdown after success,
/// an abort (telling every peer about the job's failure) after an error, a panic or
/// `Comm::abort`. A failed rank returns the job's error: its own failure, or the earlier one
/// of another rank that it ran into.
pub(super) fn run_rank<D, F, R>(place: Place<'_>, endpoint: D, tuning: Arc<Tuning>, f: &F) -> Result<R>
where
    D: RankEnd + 'static,
    F: Fn(Comm) -> Result<R>,
{
    let Place { rank, first } = place;
    let endpoint = Rc::new(endpoint);
    let outcome = catch_unwind(AssertUnwindSafe(|| f(Comm::world(endpoint.clone(), tuning))));
    let own = match outcome {
        Ok(Ok(value)) => {
            endpoint.finish()?;
            return Ok(value);
        }
        Ok(Err(e)) => rank_failure(rank, Ok(e)),
        Err(payload) => rank_failure(rank, Err(payload)),
    };
    let job = super::abort_job(&*endpoint, own);
    lock_ignoring_poison(first).get_or_insert_with(|| job.clone());
    endpoint.fail(job.clone());
    Err(job.job_error())
}

/// Ranks `0..np` as threads of this process joined over loopback TCP: one rendezvous, each
/// thread pinned to `cpu_of(rank)` (before its endpoint's input thread starts, which inherits
/// it) and connected, then handed to `rank_main` with its endpoint. Results in rank order, or
/// the job's first failure.
pub(super) fn run_loopback_mesh<R: Send>(
    config: &Config,
    cpu_of: &(dyn Fn(usize) -> Option<usize> + Sync),
    rank_main: &(dyn Fn(Place<'_>, TcpEndpoint) -> Result<R> + Sync),
) -> Result<Vec<R>> {
    let secret = JobSecret::random()?;
    // Every thread rank is in this process, so they all report its site.
    let site = Site::of_this_process()?;
    let listener =
        TcpListener::bind(("127.0.0.1", 0)).map_err(|e| Error::other(format!("tcp: binding the rendezvous: {e}")))?;
    let address = listener.local_addr().map_err(|e| Error::other(format!("tcp: rendezvous address: {e}")))?;
    let rank0_listener = Mutex::new(Some(listener));
    let deadline = Instant::now() + connect_timeout()?;
    let first: FirstFailure = Mutex::new(None);
    // Every rank is a thread of this process; decided before the threads pin themselves.
    let options = config.tcp_options(config.np);
    let thread_main = |rank: usize| -> Result<R> {
        if let Some(cpu) = cpu_of(rank) {
            affinity::pin_current_thread(cpu)?;
        }
        let listener = if rank == 0 { lock_ignoring_poison(&rank0_listener).take() } else { None };
        let rendezvous = match listener {
            Some(l) => Rendezvous::Listen(l),
            None => Rendezvous::Connect(address),
        };
        let bootstrap = Bootstrap {
            rank,
            size: config.np,
            rendezvous,
            secret: secret.clone(),
            deadline,
            sockets: config.mesh_sockets(),
            site: site.clone(),
        };
        let endpoint = bootstrap.connect().and_then(|mesh| TcpEndpoint::new(rank, mesh, options));
        match endpoint {
            Ok(endpoint) => rank_main(Place { rank, first: &first }, endpoint),
            Err(e) => {
                lock_ignoring_poison(&first).get_or_insert_with(|| Failure::of_error(rank, &e));
                Err(e)
            }
        }
    };
    let results = config.run_rank_threads(&thread_main, |rank, cause| {
        lock_ignoring_poison(&first).get_or_insert(Failure { rank, cause, code: None });
    });
    if let Some(failure) = lock_ignoring_poison(&first).take() {
        return Err(failure.job_error());
    }
    results.into_iter().collect()
}

impl Config {
    /// Thread ranks over loopback TCP: the device's full protocol stack inside one process.
    pub(super) fn run_tcp_threads<F, R>(&self, f: &F) -> Result<Vec<R>>
    where
        F: Fn(Comm) -> Result<R> + Sync,
        R: Send,
    {
        let tuning = Arc::new(self.resolved_tuning()?);
        let cpus = if self.pin == Pin::None { Vec::new() } else { affinity::allowed_cpus() };
        let cpu_of = |rank: usize| affinity::cpu_for(self.pin, rank, self.np, &cpus);
        run_loopback_mesh(self, &cpu_of, &|place, endpoint| run_rank(place, endpoint, tuning.clone(), f))
    }

    /// This process is rank `place.rank` of a multi-process job: join the mesh through the
    /// rendezvous named in the environment, run `f` once, and return its result alone.
    pub(super) fn run_tcp_process<F, R>(&self, place: ProcessPlace, f: &F) -> Result<Vec<R>>
    where
        F: Fn(Comm) -> Result<R>,
    {
        let tuning = Arc::new(self.resolved_tuning()?);
        let options = self.tcp_options(affinity::competing_ranks(1, place.size)?);
        if self.pin != Pin::None {
            let cpus = affinity::allowed_cpus();
            if let Some(cpu) = affinity::cpu_for(self.pin, place.rank, place.size, &cpus) {
                // Before the input thread starts, so it inherits the placement.
                affinity::pin_current_thread(cpu)?;
            }
        }
        let endpoint = self.tcp_endpoint_from_env(place, options)?;
        let first = Mutex::new(None);
        super::ONE_RANK_PER_PROCESS.store(true, std::sync::atomic::Ordering::Release);
        run_rank(Place { rank: place.rank, first: &first }, endpoint, tuning, f).map(|value| vec![value])
    }
}

impl Config {
    /// The tcp endpoint of rank `place.rank` of `place.size`, joined through the rendezvous the
    /// launcher's environment names (call it on the thread that will run the rank: its input
    /// thread inherits the thread's pinning).
    pub(super) fn tcp_endpoint_from_env(&self, place: ProcessPlace, options: TcpOptions) -> Result<TcpEndpoint> {
        let bootstrap = Bootstrap {
            rank: place.rank,
            size: place.size,
            rendezvous: rendezvous_from_env(place)?,
            secret: secret_from_env(place)?,
            deadline: Instant::now() + connect_timeout()?,
            sockets: self.mesh_sockets(),
            site: Site::of_this_process()?,
        };
        let mesh = bootstrap.connect()?;
        TcpEndpoint::new(place.rank, mesh, options)
    }
}

fn connect_timeout() -> Result<Duration> {
    Ok(super::config::env_parse::<f64>("FASTMP_CONNECT_TIMEOUT")?
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(DEFAULT_CONNECT_TIMEOUT, Duration::from_secs_f64))
}

fn secret_from_env(place: ProcessPlace) -> Result<JobSecret> {
    match std::env::var("FASTMP_JOB_SECRET") {
        Ok(hex) => JobSecret::from_hex(hex.trim()),
        // A one-rank job has no connections to protect.
        Err(_) if place.size == 1 => JobSecret::random(),
        Err(_) => Err(Error::InvalidArgument(
            "FASTMP_JOB_SECRET is not set: every rank of a tcp job needs the same 64-hex-digit secret \
             (fastmprun sets it; under mpirun/srun export e.g. FASTMP_JOB_SECRET=$(openssl rand -hex 32))"
                .into(),
        )),
    }
}

/// Rank 0 listens (on the launcher's inherited socket, or on `FASTMP_RENDEZVOUS` itself);
/// every other rank connects to `FASTMP_RENDEZVOUS`.
fn rendezvous_from_env(place: ProcessPlace) -> Result<Rendezvous> {
    if place.rank == 0
        && let Some(fd) = super::config::env_parse::<i32>("FASTMP_RENDEZVOUS_FD")?
    {
        return listener_from_fd(fd).map(Rendezvous::Listen);
    }
    let text = std::env::var("FASTMP_RENDEZVOUS").map_err(|_| {
        Error::InvalidArgument(
            "FASTMP_RENDEZVOUS is not set: every rank of a tcp job needs rank 0's rendezvous address as HOST:PORT \
             (fastmprun sets it; under mpirun/srun export it, e.g. FASTMP_RENDEZVOUS=node01:47000)"
                .into(),
        )
    })?;
    let address = resolve(&text)?;
    if place.rank == 0 {
        let bind = match std::env::var("FASTMP_TCP_ADDRESS") {
            Ok(ip) => resolve(&format!("{ip}:{}", address.port()))?,
            Err(_) => address,
        };
        return bind_listener(bind).map(Rendezvous::Listen);
    }
    Ok(Rendezvous::Connect(address))
}

fn resolve(text: &str) -> Result<SocketAddr> {
    text.to_socket_addrs()
        .map_err(|e| Error::InvalidArgument(format!("rendezvous address '{text}': {e}")))?
        .next()
        .ok_or_else(|| Error::InvalidArgument(format!("rendezvous address '{text}' resolves to nothing")))
}

/// Binds the rendezvous with `SO_REUSEADDR`, so a job can restart on the same port at once.
fn bind_listener(address: SocketAddr) -> Result<TcpListener> {
    let fail = |e: std::io::Error| Error::other(format!("tcp: rank 0 cannot listen on {address}: {e}"));
    let socket =
        socket2::Socket::new(socket2::Domain::for_address(address), socket2::Type::STREAM, None).map_err(fail)?;
    socket.set_reuse_address(true).map_err(fail)?;
    socket.bind(&address.into()).map_err(fail)?;
    socket.listen(1024).map_err(fail)?;
    Ok(socket.into())
}

/// The listening socket the launcher bound for rank 0 and passed down as descriptor `fd`.
fn listener_from_fd(fd: i32) -> Result<TcpListener> {
    use std::os::fd::FromRawFd;
    let bad = |why: &str| Error::InvalidArgument(format!("FASTMP_RENDEZVOUS_FD={fd}: {why}"));
    let mut kind: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `kind`; an invalid fd just fails.
    let rc = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN, (&raw mut kind).cast(), &mut len) };
    if rc != 0 {
        return Err(bad(&format!("not a socket: {}", std::io::Error::last_os_error())));
    }
    if kind == 0 {
        return Err(bad("the socket is not listening"));
    }
    // SAFETY: `fd` is an open listening socket (checked above) that the launcher handed to this
    // process for exactly this use; nothing else in the process owns it.
    Ok(unsafe { TcpListener::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wait policy is decided before the rank threads pin themselves: judged from a pinned
    /// thread (one CPU) every rank looked oversubscribed, and tcp waits yielded at once.
    #[test]
    fn pinned_thread_ranks_spin_when_every_rank_has_a_core() {
        let cpus = affinity::allowed_cpus();
        for (np, pin) in [(1, Pin::Compact), (cpus.len(), Pin::Compact), (cpus.len() + 2, Pin::Compact)] {
            let config = Config::new().np(np).pin(pin);
            let cpu_of = |rank: usize| affinity::cpu_for(pin, rank, np, &cpus);
            let shared = run_loopback_mesh(&config, &cpu_of, &|_, endpoint| {
                let time_shared = endpoint.policy().time_shared();
                endpoint.shutdown()?;
                Ok(time_shared)
            })
            .unwrap();
            assert_eq!(shared, vec![np > cpus.len(); np], "np {np} on {} CPUs", cpus.len());
        }
    }
}
