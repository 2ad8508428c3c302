//! Launch configuration: which device, how many ranks, protocol limits, pinning.

use std::str::FromStr;

use super::affinity;
use crate::coll::{Cores, Tuning};
use crate::device::tcp::bootstrap::SocketOptions;

use crate::error::{Error, Result};

/// Default eager/rendezvous switch point of the shm device, in bytes. Open MPI's shared-memory
/// eager limit too, so programs that rely on small sends being buffered behave alike; above it
/// a single-copy rendezvous (about 0.55 µs at 8 KiB on the development VM) beats an eager
/// message's two copies (about 1.9 µs).
pub const DEFAULT_EAGER_LIMIT: usize = 4096;

/// Default eager/rendezvous switch point of the tcp device: a rendezvous costs a round trip
/// (~9 µs on loopback), which only pays once the payload's own transfer time dominates; the
/// socket buffers absorb eager messages this size (Open MPI's tcp BTL uses 64 KiB too).
pub const DEFAULT_TCP_EAGER_LIMIT: usize = 64 * 1024;

/// The transport carrying a job's messages, chosen at launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// Ranks are threads of this process; messages move by a single copy.
    Shm,
    /// Ranks are processes joined by TCP connections (started by `fastmprun`, `mpirun`, `srun`,
    /// ...). Without a launcher's environment, [`Config::run`] starts its ranks as threads that
    /// still talk over loopback TCP, which is how the device is tested in one process.
    Tcp,
    /// Ranks are the processes of an MPI job (`mpirun -x FASTMP_DEVICE=mpi`, `srun`), talking
    /// through the system MPI library; needs the `mpi` cargo feature.
    #[cfg(feature = "mpi")]
    Mpi,
    /// Processes of thread ranks: ranks of one process talk through shared memory (the shm
    /// protocols), ranks of different processes over TCP. Ranks are numbered block-wise by
    /// process ([`Config::threads_per_process`]). Without a launcher, [`Config::run`] starts
    /// every process's thread group inside this one process, joined over loopback TCP.
    Hybrid,
}

impl FromStr for DeviceKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "shm" => Ok(DeviceKind::Shm),
            "tcp" => Ok(DeviceKind::Tcp),
            "hybrid" => Ok(DeviceKind::Hybrid),
            #[cfg(feature = "mpi")]
            "mpi" => Ok(DeviceKind::Mpi),
            #[cfg(not(feature = "mpi"))]
            "mpi" => Err(Error::InvalidArgument(
                "device 'mpi' is not built into this program: build fastmp with `--features mpi` (it needs an \
                 MPI installation with mpicc)"
                    .into(),
            )),
            other => Err(Error::InvalidArgument(format!(
                "unknown device '{other}' (expected 'shm', 'tcp', 'hybrid' or 'mpi')"
            ))),
        }
    }
}

/// How ranks are pinned to cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pin {
    /// Leave placement to the OS scheduler.
    None,
    /// Fill physical cores first, one hardware thread each in package/core order; SMT siblings
    /// only once every core has a rank. Neighbouring ranks share caches.
    Compact,
    /// Round-robin over NUMA nodes (packages), then over cores: neighbouring ranks on different
    /// nodes, spreading memory bandwidth.
    Scatter,
    /// Contiguous blocks of ranks per NUMA node (rank r of np on node `r * nodes / np`), compact
    /// inside the node (`FASTMP_PIN=numa`).
    Numa,
}

impl FromStr for Pin {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(Pin::None),
            "compact" => Ok(Pin::Compact),
            "scatter" => Ok(Pin::Scatter),
            "numa" => Ok(Pin::Numa),
            other => Err(Error::InvalidArgument(format!(
                "unknown pinning '{other}' (expected compact, scatter, numa or none)"
            ))),
        }
    }
}

/// What carries the messages between processes of one node on the tcp and hybrid devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SameNodeLink {
    /// Shared-memory rings beside each connection (the socket then carries only wake-ups and
    /// the end of the connection): no system call per message while the receiver polls, two
    /// copies per byte; rendezvous payloads (above the eager limit) in one copy instead, read
    /// straight from the sender's buffer where the kernel lets processes of one user read each
    /// other (`process_vm_readv`; `FASTMP_SAME_NODE=shm`). The hybrid device's default.
    SharedMemory,
    /// As [`SameNodeLink::SharedMemory`], but every payload crosses the rings: no process reads
    /// another's memory (`FASTMP_SAME_NODE=rings`).
    Rings,
    /// The loopback socket itself (`FASTMP_SAME_NODE=socket`): the tcp device's default, so
    /// that it measures and behaves as TCP does.
    Socket,
}

impl FromStr for SameNodeLink {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "shm" => Ok(SameNodeLink::SharedMemory),
            "rings" => Ok(SameNodeLink::Rings),
            "socket" => Ok(SameNodeLink::Socket),
            other => {
                Err(Error::InvalidArgument(format!("FASTMP_SAME_NODE={other}: expected 'shm', 'rings' or 'socket'")))
            }
        }
    }
}

/// Builder for a job's launch settings.
///
/// ```
/// use fastmp::{Config, Pin};
/// let ranks = Config::new().np(3).eager_limit(4096).pin(Pin::None).run(|world| Ok(world.rank()))?;
/// assert_eq!(ranks, vec![0, 1, 2]);
/// # Ok::<(), fastmp::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    pub(crate) device: DeviceKind,
    pub(crate) np: usize,
    /// `None`: the device's own default ([`DEFAULT_EAGER_LIMIT`] on shm,
    /// [`DEFAULT_TCP_EAGER_LIMIT`] on tcp).
    pub(crate) eager_limit: Option<usize>,
    pub(crate) pin: Pin,
    pub(crate) stack_size: Option<usize>,
    /// Collective algorithm selection; `None` reads it from the environment at run time.
    pub(crate) tuning: Option<Tuning>,
    /// This process's place in a multi-process job (tcp), from the launcher's environment.
    pub(crate) process: Option<ProcessPlace>,
    pub(crate) sockets: SocketOptions,
    /// Between processes of one node (`None`: the device's default, see
    /// [`Config::same_node_link`]).
    pub(crate) same_node: Option<SameNodeLink>,
    /// Whether the tcp device runs a progress thread (see [`Config::progress_thread`]).
    pub(crate) progress_thread: bool,
    /// Whether nonblocking collectives hand bulk copies to the process's progress agent
    /// (`None`: where a core is left idle, see [`Config::progress_agent_auto`]).
    pub(crate) progress_agent: Option<bool>,
    /// Thread ranks per process of the hybrid device (`None`: its default), or the block size
    /// of the processes a shm world simulates ([`Config::simulate_processes`]).
    pub(crate) threads_per_process: Option<usize>,
    /// Whether a shm world reports block-wise simulated processes.
    pub(crate) simulate_processes: bool,
    /// NUMA nodes a shm world reports inside each (simulated) process
    /// ([`Config::simulate_numa`]); `None`: the ranks' real nodes where they are pinned.
    pub(crate) simulate_numa: Option<usize>,
    /// Trace file ([`Config::trace`]); `None` reads `FASTMP_TRACE` at run time.
    pub(crate) trace: Option<std::path::PathBuf>,
}

/// Rank and size of this process, as a launcher told it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcessPlace {
    pub rank: usize,
    pub size: usize,
}

/// Rank/size variable pairs of the launchers fastmp understands, in order of preference. Slurm
/// comes last: an `mpirun` inside an `sbatch` script inherits the batch step's `SLURM_PROCID`.
const LAUNCHER_VARS: [(&str, &str); 4] = [
    ("FASTMP_RANK", "FASTMP_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
];

/// Finds this process's rank and size in the environment of `fastmprun`, Slurm, Open MPI or
/// MPICH's hydra.
fn process_place_from_env() -> Result<Option<ProcessPlace>> {
    Ok(launcher_place()?.map(|(place, _)| place))
}

/// This process's place and the variable that gave its rank, if a launcher started it.
fn launcher_place() -> Result<Option<(ProcessPlace, &'static str)>> {
    for (rank_var, size_var) in LAUNCHER_VARS {
        let Some(rank) = env_parse::<usize>(rank_var)? else { continue };
        let size = env_parse::<usize>(size_var)?
            .ok_or_else(|| Error::InvalidArgument(format!("{rank_var} is set but {size_var} is not")))?;
        if rank >= size {
            return Err(Error::InvalidArgument(format!("{rank_var}={rank} is not below {size_var}={size}")));
        }
        return Ok(Some((ProcessPlace { rank, size }, rank_var)));
    }
    Ok(None)
}

/// `FASTMP_THREADS_PER_PROCESS`: a number, or `auto` (the CPUs this process may run on).
fn threads_per_process_from_env() -> Result<Option<usize>> {
    match std::env::var("FASTMP_THREADS_PER_PROCESS") {
        Ok(v) if v.trim() == "auto" => Ok(Some(affinity::allowed_cpus().len().max(1))),
        Ok(_) => env_parse::<usize>("FASTMP_THREADS_PER_PROCESS"),
        Err(_) => Ok(None),
    }
}

/// `FASTMP_PROGRESS_AGENT`: `1` or `0` (`Some(Some(on))`), or `auto` (`Some(None)`); `None` when
/// unset.
fn progress_agent_from_env() -> Result<Option<Option<bool>>> {
    match std::env::var("FASTMP_PROGRESS_AGENT") {
        Ok(v) if v.trim() == "auto" => Ok(Some(None)),
        Ok(_) => Ok(env_parse::<u8>("FASTMP_PROGRESS_AGENT")?.map(|on| Some(on != 0))),
        Err(_) => Ok(None),
    }
}

/// Total ranks of a launcher's hybrid job in which this process is process `place.rank` of
/// `place.size`: `FASTMP_NP`, or every process full. Processes must match the ranks exactly.
fn hybrid_job_size(place: ProcessPlace, threads: Option<usize>) -> Result<usize> {
    let t = threads.ok_or_else(|| {
        Error::InvalidArgument(
            "FASTMP_DEVICE=hybrid under a launcher needs FASTMP_THREADS_PER_PROCESS (a number, or auto)".into(),
        )
    })?;
    if t == 0 {
        return Err(Error::InvalidArgument("FASTMP_THREADS_PER_PROCESS must be at least 1".into()));
    }
    let np = env_parse::<usize>("FASTMP_NP")?.unwrap_or(place.size * t);
    if np.div_ceil(t) != place.size {
        return Err(Error::InvalidArgument(format!(
            "hybrid job of FASTMP_NP={np} ranks at {t} threads per process needs {} processes, but the launcher \
             started {}",
            np.div_ceil(t),
            place.size
        )));
    }
    Ok(np)
}

/// Set by `fastmprun` for the one process of a `--device shm` job (whose ranks are its threads).
const LAUNCHER_MARK: &str = "FASTMP_LAUNCHER";

/// The configuration `fastmp::run(np, ..)` starts: `np` thread ranks on the shm device, unless a
/// launcher started this process, whose job `run` then joins if `np` is its size (or refuses
/// with a message saying what to do). Slurm's variables count only for steps of several tasks:
/// a batch script (one task) is not a launcher that expects this program to join anything.
pub(crate) fn for_run(np: usize) -> Result<Config> {
    let place = launcher_place()?;
    let (size, started_as) = match place {
        Some((place, "SLURM_PROCID")) if place.size == 1 => return Ok(Config::new().np(np)),
        Some((place, rank_var)) if std::env::var("FASTMP_DEVICE").is_ok_and(|d| d == "hybrid") => {
            let size = hybrid_job_size(place, threads_per_process_from_env()?)?;
            let how = format!(
                "as process {} of a {}-process hybrid job of {size} ranks ({rank_var})",
                place.rank, place.size
            );
            (size, how)
        }
        Some((place, rank_var)) => {
            (place.size, format!("as rank {} of a {}-process job ({rank_var})", place.rank, place.size))
        }
        None if std::env::var_os(LAUNCHER_MARK).is_some() => match env_parse::<usize>("FASTMP_NP")? {
            Some(size) => (size, format!("by fastmprun for a {size}-rank shm job (FASTMP_NP={size})")),
            None => return Err(Error::InvalidArgument(format!("{LAUNCHER_MARK} is set but FASTMP_NP is not"))),
        },
        None => return Ok(Config::new().np(np)),
    };
    if np != size {
        return Err(Error::InvalidArgument(format!(
            "fastmp::run({np}, ..): this process was started {started_as}, so it cannot run a job of {np} \
             ranks: start it with {np} ranks (e.g. fastmprun -np {np}), pass the launcher's size, or use \
             fastmp::main / fastmp::init()?.run(..), which take the size from the launcher"
        )));
    }
    Config::from_env()
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}

pub(crate) fn env_parse<T: FromStr>(name: &str) -> Result<Option<T>>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(name) {
        Ok(v) => v.trim().parse().map(Some).map_err(|e| Error::InvalidArgument(format!("{name}={v}: {e}"))),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e) => Err(Error::InvalidArgument(format!("{name}: {e}"))),
    }
}

impl Config {
    /// One rank on the shm device, default eager limit, no pinning.
    pub fn new() -> Self {
        Config {
            device: DeviceKind::Shm,
            np: 1,
            eager_limit: None,
            pin: Pin::None,
            stack_size: None,
            tuning: None,
            process: None,
            sockets: SocketOptions::default(),
            same_node: None,
            progress_thread: false,
            progress_agent: Some(false),
            threads_per_process: None,
            simulate_processes: false,
            simulate_numa: None,
            trace: None,
        }
    }

    /// Reads the launch environment: `FASTMP_NP` (without it and without a launcher, one rank
    /// per CPU this process may run on, as `mpiexec` without `-n` fills the machine),
    /// `FASTMP_DEVICE` (`shm`/`tcp`/`hybrid`, with `FASTMP_THREADS_PER_PROCESS`: a number or
    /// `auto`; under a launcher each process is one process of the hybrid job, whose size is
    /// `FASTMP_NP` or processes × threads),
    /// `FASTMP_EAGER_LIMIT` (bytes), `FASTMP_PIN` (`compact`/`scatter`/`numa`/`none`),
    /// `FASTMP_STACK_SIZE` (bytes per rank thread), `FASTMP_TCP_SNDBUF`/`FASTMP_TCP_RCVBUF`
    /// (socket buffer bytes), `FASTMP_TCP_PACE` (tcp: long payloads handed to the kernel in
    /// fragments of this many bytes, at least 16384; 0 or unset: off), `FASTMP_PROGRESS_THREAD` (`1`: see [`Config::progress_thread`]),
    /// `FASTMP_PROGRESS_AGENT` (`1`, `0`, the default, or `auto`: see [`Config::progress_agent`]),
    /// `FASTMP_SAME_NODE` (`shm`, `rings` or `socket`: see [`SameNodeLink`]).
    /// Unset variables keep the defaults of [`Config::new`].
    ///
    /// A process started by a launcher is one rank of a multi-process job: its rank and size come
    /// from `FASTMP_RANK`/`FASTMP_SIZE` (fastmprun), `OMPI_COMM_WORLD_RANK`/`OMPI_COMM_WORLD_SIZE`,
    /// `PMI_RANK`/`PMI_SIZE` or `SLURM_PROCID`/`SLURM_NTASKS` (first found wins), and the device
    /// defaults to `tcp` (see the README for the rendezvous variables). Collective algorithm
    /// overrides (`FASTMP_TUNING_FILE`, `FASTMP_<COLLECTIVE>_ALGORITHM`) are read by
    /// [`Tuning::from_env_for`] the device when the job starts, unless [`Config::tuning`] set a
    /// table.
    pub fn from_env() -> Result<Self> {
        let mut c = Config::new();
        match env_parse::<usize>("FASTMP_NP")? {
            Some(np) => c = c.np(np),
            None => c = c.np(affinity::allowed_cpus().len().max(1)),
        }
        c.process = process_place_from_env()?;
        if let Some(place) = c.process {
            c.device = DeviceKind::Tcp;
            c.np = place.size;
        }
        if let Ok(device) = std::env::var("FASTMP_DEVICE") {
            c.device = device.parse()?;
        }
        if c.device == DeviceKind::Hybrid {
            c.threads_per_process = threads_per_process_from_env()?;
            if let Some(place) = c.process {
                c.np = hybrid_job_size(place, c.threads_per_process)?;
            }
        }
        if c.device == DeviceKind::Shm && c.process.is_some_and(|p| p.size > 1) {
            return Err(Error::InvalidArgument(
                "FASTMP_DEVICE=shm in a process started as one rank of a multi-process job: use --device shm \
                 with fastmprun (one process, thread ranks) or the tcp device"
                    .into(),
            ));
        }
        c.sockets.send_buffer = env_parse::<usize>("FASTMP_TCP_SNDBUF")?;
        c.sockets.recv_buffer = env_parse::<usize>("FASTMP_TCP_RCVBUF")?;
        c.sockets.pace = env_parse::<usize>("FASTMP_TCP_PACE")?;
        c.sockets.check_pace()?;
        if let Some(link) = env_parse::<SameNodeLink>("FASTMP_SAME_NODE")? {
            c.same_node = Some(link);
        }
        if let Some(limit) = env_parse::<usize>("FASTMP_EAGER_LIMIT")? {
            c.eager_limit = Some(limit);
        }
        if let Some(pin) = env_parse::<Pin>("FASTMP_PIN")? {
            c.pin = pin;
        }
        c.stack_size = env_parse::<usize>("FASTMP_STACK_SIZE")?;
        if let Some(on) = env_parse::<u8>("FASTMP_PROGRESS_THREAD")? {
            c.progress_thread = on != 0;
        }
        if let Some(mode) = progress_agent_from_env()? {
            c.progress_agent = mode;
        }
        // Undocumented, like `simulate_processes`: measuring locality-driven algorithms on shm.
        if c.device == DeviceKind::Shm
            && let Some(t) = env_parse::<usize>("FASTMP_SIMULATE_PROCESSES")?
        {
            c = c.simulate_processes(t);
        }
        if c.device == DeviceKind::Shm
            && let Some(k) = env_parse::<usize>("FASTMP_SIMULATE_NUMA")?
        {
            c = c.simulate_numa(k);
        }
        c.validate()?;
        Ok(c)
    }

    /// Gives each rank of the tcp device a progress thread that moves data as soon as it
    /// arrives, so nonblocking operations (point-to-point and the transfers of nonblocking
    /// collectives) advance while the rank computes without calling fastmp. Off by default
    /// (`FASTMP_PROGRESS_THREAD=1` in [`Config::from_env`]): the thread costs a share of a core.
    /// Stages of a nonblocking collective that depend on earlier ones still start only when the
    /// rank calls fastmp. No effect on the shm device, whose transfers are single copies made
    /// by the ranks themselves.
    pub fn progress_thread(mut self, on: bool) -> Self {
        self.progress_thread = on;
        self
    }

    /// Starts the process's progress agent (`true`), or not (`false`, the default): threads
    /// that make the bulk copies and reductions of nonblocking collectives from 64 KiB while
    /// the ranks compute, on the CPUs the job's pinned ranks leave; a rank that waits makes its
    /// own copies if the agent has not started them, so nothing depends on the agent getting a
    /// core. Off by default because it did not pay where measured: on 16 cores with idle ones,
    /// iallreduce's exposed communication (OSU's overall minus compute time) grew 1.4-3x at
    /// 64 KiB-1 MiB, ibcast and ialltoall's stayed about the same (README, issue 19).
    /// Process-wide: once a job of the process switched it on, it stays on.
    ///
    /// ```
    /// let sums = fastmp::Config::new().np(2).progress_agent(true).run(|world| {
    ///     let send = vec![world.rank() as u8; 1 << 17];
    ///     let mut recv = vec![0u8; 1 << 17];
    ///     world.scope(|s| s.ialltoall(&send, &mut recv)?.wait().map(drop))?;
    ///     Ok(recv.iter().map(|&b| u64::from(b)).sum::<u64>())
    /// })?;
    /// assert_eq!(sums, [1 << 16, 1 << 16]);
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn progress_agent(mut self, on: bool) -> Self {
        self.progress_agent = Some(on);
        self
    }

    /// Starts the progress agent where this process's ranks leave one of its CPUs idle (more
    /// allowed CPUs than ranks competing for them, counting the other processes of the job on
    /// this node unless the process is bound), not elsewhere, where its threads would take
    /// time from the ranks (`FASTMP_PROGRESS_AGENT=auto`); see [`Config::progress_agent`].
    pub fn progress_agent_auto(mut self) -> Self {
        self.progress_agent = None;
        self
    }

    /// What carries messages between processes of one node on the tcp and hybrid devices
    /// (default: shared memory on hybrid, the socket on tcp). Nodes without a usable
    /// `/dev/shm`, and pairs whose settings differ, fall back to the socket.
    ///
    /// ```
    /// use fastmp::{Config, DeviceKind, SameNodeLink};
    /// let config = Config::new().device(DeviceKind::Tcp).np(2).same_node_link(SameNodeLink::SharedMemory);
    /// let sums = config.run(|world| {
    ///     let mut sum = [0u64];
    ///     world.allreduce(&[world.rank() as u64 + 1], &mut sum, fastmp::op::Sum)?;
    ///     Ok(sum[0])
    /// })?;
    /// assert_eq!(sums, vec![3, 3]);
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn same_node_link(mut self, link: SameNodeLink) -> Self {
        self.same_node = Some(link);
        self
    }

    /// The socket options of the tcp mesh, with this job's same-node link.
    pub(crate) fn mesh_sockets(&self) -> SocketOptions {
        let link = self.same_node.unwrap_or(match self.device {
            DeviceKind::Hybrid => SameNodeLink::SharedMemory,
            _ => SameNodeLink::Socket,
        });
        SocketOptions { shm_rings: link != SameNodeLink::Socket, ..self.sockets }
    }

    /// Options of the tcp device's endpoints for `competing` ranks sharing this process's CPUs.
    /// Call it before pinning any thread: the wait policy compares `competing` with the CPUs
    /// the calling thread may run on.
    pub(crate) fn tcp_options(&self, competing: usize) -> crate::device::tcp::TcpOptions {
        crate::device::tcp::TcpOptions {
            eager_limit: self.effective_eager_limit(),
            progress_thread: self.progress_thread,
            pace: self.sockets.pace_fragment(),
            peer_reads: self.same_node != Some(SameNodeLink::Rings),
            policy: crate::device::wait::WaitPolicy::for_ranks(competing),
        }
    }

    /// Thread ranks per process on the hybrid device: ranks `p * t .. (p + 1) * t` run as
    /// threads of process `p` (the last process may hold fewer).
    pub fn threads_per_process(mut self, t: usize) -> Self {
        self.threads_per_process = Some(t);
        self
    }

    /// Testing and tuning aid: a shm job whose `placement()` reports processes of `t` thread
    /// ranks each (block-wise), so locality-driven code (`split_type`, hierarchical
    /// collectives) can be exercised inside one shm world. Messages still move by shared memory.
    #[doc(hidden)]
    pub fn simulate_processes(mut self, t: usize) -> Self {
        self.threads_per_process = Some(t);
        self.simulate_processes = true;
        self
    }

    /// Testing and tuning aid, beside [`Config::simulate_processes`]: a shm job whose
    /// `placement()` reports `k` NUMA nodes inside each process, its members split block-wise
    /// (process members `i` of `t` on node `i * k / t`, so uneven where `k` does not divide
    /// `t`), so the NUMA level of hierarchical collectives runs on a machine with one node.
    #[doc(hidden)]
    pub fn simulate_numa(mut self, k: usize) -> Self {
        self.simulate_numa = Some(k);
        self
    }

    /// The NUMA node of every rank of `placement` that [`Config::simulate_numa`] asks for.
    pub(crate) fn simulated_numa(&self, placement: &crate::Placement) -> Option<Vec<Option<usize>>> {
        let k = self.simulate_numa?;
        let members = |p| (0..placement.size()).filter(move |&r| placement.process_of(r) == p);
        let numa = (0..placement.size())
            .map(|rank| {
                let process = members(placement.process_of(rank));
                let (index, count) = process.clone().fold((0, 0), |(i, n), r| (i + usize::from(r < rank), n + 1));
                Some(index * k / count)
            })
            .collect();
        Some(numa)
    }

    pub fn device(mut self, device: DeviceKind) -> Self {
        self.device = device;
        self
    }

    /// Socket send buffer size (`SO_SNDBUF`) of every tcp connection (default 256 KiB, which
    /// keeps loopback transfers in order; 0 leaves the kernel's autotuned buffer, which a
    /// long-distance link with a large bandwidth-delay product may need).
    pub fn tcp_send_buffer(mut self, bytes: usize) -> Self {
        self.sockets.send_buffer = Some(bytes);
        self
    }

    /// Socket receive buffer size (`SO_RCVBUF`) of every tcp connection.
    pub fn tcp_recv_buffer(mut self, bytes: usize) -> Self {
        self.sockets.recv_buffer = Some(bytes);
        self
    }

    /// Number of ranks. In a process started as one rank of a multi-process job the
    /// launcher's size wins and this is ignored, so one program text serves both cases.
    pub fn np(mut self, np: usize) -> Self {
        if self.process.is_none() {
            self.np = np;
        }
        self
    }

    /// Largest message (bytes) sent eagerly; larger ones use rendezvous / direct copy. The
    /// default depends on the device (8 KiB on shm, 64 KiB on tcp).
    pub fn eager_limit(mut self, bytes: usize) -> Self {
        self.eager_limit = Some(bytes);
        self
    }

    pub fn pin(mut self, pin: Pin) -> Self {
        self.pin = pin;
        self
    }

    /// Writes a Chrome/Perfetto trace of every rank's operations to `path` (as `FASTMP_TRACE`
    /// does): point-to-point calls, collectives with the algorithm chosen, and waits. Thread
    /// ranks write `path` when the job ends; ranks that are processes of a launched job write
    /// `path.<rank>.json` each, which `fastmprun` merges into `path`.
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("fastmp-doc-trace-{}.json", std::process::id()));
    /// fastmp::Config::new().np(2).trace(&path).run(|world| world.barrier())?;
    /// assert!(std::fs::read_to_string(&path).unwrap().contains("\"barrier\""));
    /// # std::fs::remove_file(&path).ok();
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn trace(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.trace = Some(path.into());
        self
    }

    /// Stack size of each rank thread (shm device).
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// Collective algorithm selection for the job, instead of the device's defaults and the
    /// environment's overrides ([`Tuning::from_env_for`]).
    pub fn tuning(mut self, tuning: Tuning) -> Self {
        self.tuning = Some(tuning);
        self
    }

    /// The selection table a job started from this configuration uses: the one given, or the
    /// device's defaults overlaid with the environment's overrides; told whether the ranks
    /// have cores of their own unless the table given already says.
    pub(crate) fn resolved_tuning(&self) -> Result<Tuning> {
        let tuning = match &self.tuning {
            Some(tuning) => tuning.clone(),
            None => Tuning::from_env_for(self.device)?,
        };
        if tuning.cores().is_some() {
            return Ok(tuning);
        }
        let (cpus, competing) = self.cpus_and_competing_ranks()?;
        Ok(tuning.with_cores(Cores::for_ranks(competing, cpus)))
    }

    pub fn get_np(&self) -> usize {
        self.np
    }

    /// The eager limit in force for this configuration's device.
    pub(crate) fn effective_eager_limit(&self) -> usize {
        self.eager_limit.unwrap_or(match self.device {
            DeviceKind::Shm => DEFAULT_EAGER_LIMIT,
            DeviceKind::Tcp => DEFAULT_TCP_EAGER_LIMIT,
            // MPI chooses its own protocols; the value only matters to layers that ask.
            #[cfg(feature = "mpi")]
            DeviceKind::Mpi => DEFAULT_TCP_EAGER_LIMIT,
            // Between processes; thread peers use the shm protocols' own limit.
            DeviceKind::Hybrid => DEFAULT_TCP_EAGER_LIMIT,
        })
    }

    pub fn get_device(&self) -> DeviceKind {
        self.device
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.np == 0 {
            return Err(Error::InvalidArgument("np must be at least 1".into()));
        }
        if self.np > 4096 {
            return Err(Error::InvalidArgument(format!("np = {} exceeds fastmp's limit of 4096 ranks", self.np)));
        }
        if self.simulate_numa == Some(0) {
            return Err(Error::InvalidArgument("a simulated process needs at least 1 NUMA node".into()));
        }
        if self.threads_per_process == Some(0) {
            return Err(Error::InvalidArgument("threads per process must be at least 1".into()));
        }
        if let Some(limit) = self.eager_limit
            && limit > (1 << 30)
        {
            return Err(Error::InvalidArgument(format!("eager limit {limit} bytes is larger than 1 GiB")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::DeviceKind;

    #[cfg(not(feature = "mpi"))]
    #[test]
    fn the_mpi_device_needs_the_feature() {
        let message = "mpi".parse::<DeviceKind>().expect_err("not built in").to_string();
        assert!(message.contains("--features mpi"), "{message}");
    }

    #[cfg(feature = "mpi")]
    #[test]
    fn the_mpi_device_is_named_mpi() {
        assert_eq!("mpi".parse::<DeviceKind>().expect("built in"), DeviceKind::Mpi);
    }

    #[test]
    fn unknown_devices_list_the_choices() {
        let message = "ib".parse::<DeviceKind>().expect_err("no such device").to_string();
        assert!(message.contains("'shm', 'tcp', 'hybrid' or 'mpi'"), "{message}");
    }
}
