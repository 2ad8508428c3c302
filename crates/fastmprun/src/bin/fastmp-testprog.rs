//! `fastmp-testprog`: a small fastmp program the launcher tests drive
//! (`crates/fastmprun/tests/processes.rs`).
//!
//! It starts through `fastmp::init()` and `Config::run`, like any fastmp program, so it runs
//! unchanged under `fastmprun` (either device), `mpirun`, `srun`, or on its own as thread ranks.
//!
//! ```text
//! fastmp-testprog ring        sendrecv ring over eager, rendezvous and multi-MiB sizes, then an
//!                             allreduce; every rank prints `rank R of N ok CHECKSUM`
//!                             (CHECKSUM is job-wide, so it is the same on every device)
//! fastmp-testprog fail R      after a barrier rank R returns an error; the others block in a
//!                             receive from R, print the error they get and fail too
//! fastmp-testprog die R [MIB] rank R+1 sends MIB MiB (default 256) to rank R, which kills itself
//!                             with SIGKILL once part of it has arrived; the others print the
//!                             errors of their pending and later operations and fail (with
//!                             thread ranks the whole process dies: use one process per rank)
//! fastmp-testprog rma-die R   every rank opens a lock_all epoch on a window; after a barrier
//!                             rank R kills itself with SIGKILL; the others keep fetch_and_op +
//!                             flush on R's part until one fails, then print that error and a
//!                             later one-sided operation's and fail (one process per rank)
//! fastmp-testprog kill R      after a barrier rank R kills its whole process with SIGKILL (on
//!                             hybrid: with the thread ranks beside it); the others block in a
//!                             receive from R, print the error they get and fail
//! fastmp-testprog hang        every rank waits for a message nobody sends (for --timeout)
//! fastmp-testprog env         after an allreduce, every rank prints its rank, size, device and
//!                             which launcher variable its rank came from
//! fastmp-testprog placement   every rank prints where it runs, as its device reports it:
//!                             `rank R of N: process P of PS, node D of ND`
//! fastmp-testprog run NP      calls `fastmp::run(NP, ..)` (not `init`): under a launcher it
//!                             joins the launcher's job or fails; every rank prints
//!                             `run: rank R of N` after a barrier
//! fastmp-testprog abort R C   as `fail`, but rank R calls `Comm::abort(C)` instead of failing
//! fastmp-testprog size        rank 0 prints `size N`
//! ```
//!
//! `--main` before the mode runs it through `fastmp::main` (its error printing and exit status)
//! instead of `init` + `Config::run`; otherwise a failed job exits with `Error::exit_code`.
//!
//! `TESTPROG_START_GATE=PATH`: ranks other than 0 (by `FASTMP_RANK`) wait until PATH exists before
//! joining the job, so a test can keep rank 0's rendezvous open for as long as it needs.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use fastmp::op::Sum;
use fastmp::window::Assert;
use fastmp::{ANY_SOURCE, Comm, Error, Result};

const USAGE: &str = "usage: fastmp-testprog [--main] ring | fail RANK | die RANK [MIB] | rma-die RANK | kill RANK | hang | env | placement \
                     | run NP | abort RANK CODE | size";

/// Message sizes of the ring: empty, tiny, around the default 8 KiB eager limit, and a few MiB.
const RING_SIZES: [usize; 8] = [0, 1, 1000, 8192, 8193, 65_536, 1 << 20, 3 << 20];

/// Tag of messages that are never sent (`fail`, `die`, `hang`).
const NEVER_SENT: i32 = 7;
/// "I am past the barrier", from every survivor to the failing rank (`fail`, `rma-die`).
const PAST_BARRIER: i32 = 9;
/// Tag of the large transfer of `die`.
const DIE_TRANSFER: i32 = 8;

/// How much of the transfer must have arrived before the receiver of `die` kills itself: enough to
/// be sure it is under way, far from all of it.
const ARRIVED_BEFORE_DEATH: usize = 16 << 20;
/// If the transfer never shows up, the receiver of `die` dies anyway after this long.
const TRANSFER_PATIENCE: Duration = Duration::from_secs(30);
/// How long a gated rank waits for `TESTPROG_START_GATE` before giving up.
const GATE_PATIENCE: Duration = Duration::from_secs(120);
/// Polling interval for the gate file and the arrival of the `die` transfer.
const POLL: Duration = Duration::from_millis(1);

/// Launcher variables that carry a process's rank, in the library's order of preference.
const RANK_VARIABLES: [&str; 4] = ["FASTMP_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"];

#[derive(Clone, Copy, Debug)]
enum Mode {
    Ring,
    Fail { rank: usize },
    Die { rank: usize, bytes: usize },
    RmaDie { rank: usize },
    Kill { rank: usize },
    Hang,
    Env,
    Placement,
    Run { np: usize },
    Abort { rank: usize, code: i32 },
    Size,
}

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let through_main = args.first().is_some_and(|arg| arg == "--main");
    if through_main {
        args.remove(0);
    }
    let mode = match parse(args) {
        Ok(mode) => mode,
        Err(message) => {
            eprintln!("fastmp-testprog: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if through_main {
        if let Err(error) = wait_for_start_gate() {
            eprintln!("fastmp-testprog: {error}");
            return ExitCode::FAILURE;
        }
        fastmp::main(|world| mode.run(&world));
        return ExitCode::SUCCESS;
    }
    let outcome = wait_for_start_gate().and_then(|()| match mode {
        Mode::Run { np } => fastmp::run(np, |world| mode.run(&world)).map(drop),
        _ => fastmp::init().and_then(|config| config.run(|world| mode.run(&world))).map(drop),
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fastmp-testprog: {error}");
            ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(1))
        }
    }
}

fn parse(args: Vec<OsString>) -> std::result::Result<Mode, String> {
    let words: Vec<String> = args
        .into_iter()
        .map(|arg| arg.into_string().map_err(|arg| format!("argument {arg:?} is not valid UTF-8")))
        .collect::<std::result::Result<_, _>>()?;
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let number = |text: &str, what: &str| text.parse::<usize>().map_err(|e| format!("{what} `{text}`: {e}"));
    match words.as_slice() {
        ["ring"] => Ok(Mode::Ring),
        ["fail", rank] => Ok(Mode::Fail { rank: number(rank, "rank")? }),
        ["die", rank] => Ok(Mode::Die { rank: number(rank, "rank")?, bytes: 256 << 20 }),
        ["die", rank, mib] => {
            let bytes = number(mib, "MiB")?.checked_mul(1 << 20).ok_or_else(|| format!("{mib} MiB is too large"))?;
            Ok(Mode::Die { rank: number(rank, "rank")?, bytes })
        }
        ["rma-die", rank] => Ok(Mode::RmaDie { rank: number(rank, "rank")? }),
        ["kill", rank] => Ok(Mode::Kill { rank: number(rank, "rank")? }),
        ["hang"] => Ok(Mode::Hang),
        ["env"] => Ok(Mode::Env),
        ["placement"] => Ok(Mode::Placement),
        ["run", np] => Ok(Mode::Run { np: number(np, "rank count")? }),
        ["abort", rank, code] => Ok(Mode::Abort {
            rank: number(rank, "rank")?,
            code: code.parse::<i32>().map_err(|e| format!("code `{code}`: {e}"))?,
        }),
        ["size"] => Ok(Mode::Size),
        [] => Err("no mode given".into()),
        _ => Err(format!("unknown arguments {words:?}")),
    }
}

/// Holds ranks other than 0 back until the gate file exists (see the crate docs).
fn wait_for_start_gate() -> Result<()> {
    let Some(gate) = std::env::var_os("TESTPROG_START_GATE").map(PathBuf::from) else { return Ok(()) };
    if std::env::var("FASTMP_RANK").is_ok_and(|rank| rank.trim() == "0") {
        return Ok(());
    }
    let give_up = Instant::now() + GATE_PATIENCE;
    while !gate.exists() {
        if Instant::now() >= give_up {
            return Err(Error::other(format!("start gate {} did not open within {GATE_PATIENCE:?}", gate.display())));
        }
        std::thread::sleep(POLL);
    }
    Ok(())
}

impl Mode {
    fn run(self, world: &Comm) -> Result<()> {
        match self {
            Mode::Ring => ring(world),
            Mode::Fail { rank } => fail(world, checked_rank(world, rank)?),
            Mode::Die { rank, bytes } => die(world, checked_rank(world, rank)?, bytes),
            Mode::RmaDie { rank } => rma_die(world, checked_rank(world, rank)?),
            Mode::Kill { rank } => kill(world, checked_rank(world, rank)?),
            Mode::Hang => hang(world),
            Mode::Env => env(world),
            Mode::Placement => placement(world),
            Mode::Run { .. } => {
                world.barrier()?;
                say(&format!("run: rank {} of {}", world.rank(), world.size()));
                Ok(())
            }
            Mode::Abort { rank, code } => abort(world, checked_rank(world, rank)?, code),
            Mode::Size => {
                if world.rank() == 0 {
                    say(&format!("size {}", world.size()));
                }
                Ok(())
            }
        }
    }
}

/// Prints where this rank's place in the job came from, after an allreduce proves the job's
/// ranks really are connected.
fn env(world: &Comm) -> Result<()> {
    let mut counted = [0u64];
    world.allreduce(&[1u64], &mut counted, Sum)?;
    if counted[0] != world.size() as u64 {
        return Err(Error::other(format!("{} ranks took part in the allreduce, not {}", counted[0], world.size())));
    }
    let source = RANK_VARIABLES.iter().find(|name| std::env::var_os(name).is_some()).unwrap_or(&"none");
    say(&format!("rank {} of {} device {} rank-from {source}", world.rank(), world.size(), world.device_name()));
    Ok(())
}

/// Prints this rank's process and node among the job's.
fn placement(world: &Comm) -> Result<()> {
    let (rank, places) = (world.rank(), world.placement());
    say(&format!(
        "rank {rank} of {}: process {} of {}, node {} of {}",
        world.size(),
        places.process_of(rank),
        places.processes(),
        places.node_of(rank),
        places.nodes()
    ));
    Ok(())
}

fn checked_rank(world: &Comm, rank: usize) -> Result<usize> {
    if rank < world.size() { Ok(rank) } else { Err(Error::RankOutOfRange { rank, size: world.size() }) }
}

/// Prints one whole line and flushes it, so it gets out even if the process dies right after.
fn say(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

/// The bytes rank `rank` sends in ring round `round`: different for every rank and round.
fn ring_payload(rank: usize, round: usize, len: usize) -> Vec<u8> {
    let seed = (rank as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (round as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (0..len as u64).map(|i| (seed.wrapping_add(i.wrapping_mul(0x94d0_49bb_1331_11eb)) >> 56) as u8).collect()
}

/// FNV-1a, folded to 32 bits so that a sum over ranks cannot overflow.
fn checksum(bytes: &[u8]) -> u64 {
    let hash = bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |hash, &byte| (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3));
    (hash ^ (hash >> 32)) & 0xffff_ffff
}

fn ring(world: &Comm) -> Result<()> {
    let (rank, size) = (world.rank(), world.size());
    let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
    let mut local = 0u64;
    for (round, &len) in RING_SIZES.iter().enumerate() {
        let tag = i32::try_from(round).map_err(Error::other)?;
        let outgoing = ring_payload(rank, round, len);
        let mut incoming = vec![0u8; len];
        let status = world.sendrecv(&outgoing, right, tag, &mut incoming, left, tag)?;
        if status.count::<u8>() != len || incoming != ring_payload(left, round, len) {
            return Err(Error::other(format!(
                "ring round {round}: the {len} bytes from rank {left} arrived as {} bytes or corrupted",
                status.count::<u8>()
            )));
        }
        local += checksum(&incoming);
    }
    let mut job = [0u64; 2];
    world.allreduce(&[local, rank as u64], &mut job, Sum)?;
    let expected_rank_sum = (size * (size - 1) / 2) as u64;
    if job[1] != expected_rank_sum {
        return Err(Error::other(format!("allreduce of the ranks gave {}, expected {expected_rank_sum}", job[1])));
    }
    say(&format!("rank {rank} of {size} ok {:08x}", job[0]));
    Ok(())
}

/// Prints what an operation that depends on a failed rank got (it must fail), and fails.
fn report_failure(rank: usize, what: &str, outcome: Result<()>) -> Result<()> {
    let error = match outcome {
        Ok(()) => Error::other(format!("{what} succeeded although it never should have")),
        Err(error) => error,
    };
    say(&format!("rank {rank}: {what} failed: {error}"));
    Err(error)
}

/// A barrier after which rank `failing` knows that every survivor has left it: otherwise a
/// survivor still waiting there for a third rank's message could see the failure first, and
/// report the barrier instead of the receive that follows (allowed by MPI, but not what the
/// `fail`, `abort` and `rma-die` modes test).
fn barrier_all_left(world: &Comm, failing: usize) -> Result<()> {
    world.barrier()?;
    if world.rank() == failing {
        for peer in (0..world.size()).filter(|&p| p != failing) {
            world.recv(&mut [0u8; 0], peer, PAST_BARRIER)?;
        }
        Ok(())
    } else {
        world.send(&[0u8; 0], failing, PAST_BARRIER)
    }
}

fn fail(world: &Comm, failing: usize) -> Result<()> {
    let rank = world.rank();
    barrier_all_left(world, failing)?;
    if rank == failing {
        // Printed before failing: once its peers learn of the failure and exit, a launcher may
        // stop this process before its error reaches stderr.
        say(&format!("rank {rank}: failing on purpose"));
        return Err(Error::other(format!("testprog: rank {rank} fails on purpose")));
    }
    let mut never = [0u8; 1];
    let outcome = world.recv(&mut never, failing, NEVER_SENT).map(drop);
    report_failure(rank, &format!("receive from rank {failing}"), outcome)
}

/// A process killed between operations: ranks elsewhere must fail, not hang, when they wait for
/// one of its ranks.
fn kill(world: &Comm, victim: usize) -> Result<()> {
    let rank = world.rank();
    barrier_all_left(world, victim)?;
    if rank == victim {
        say(&format!("rank {rank}: killing its process with SIGKILL"));
        kill_self()
    }
    let mut never = [0u8; 1];
    let outcome = world.recv(&mut never, victim, NEVER_SENT).map(drop);
    report_failure(rank, &format!("receive from rank {victim}"), outcome)
}

fn abort(world: &Comm, aborting: usize, code: i32) -> Result<()> {
    let rank = world.rank();
    barrier_all_left(world, aborting)?;
    if rank == aborting {
        say(&format!("rank {rank}: aborting with code {code}"));
        world.abort(code);
    }
    let mut never = [0u8; 1];
    let outcome = world.recv(&mut never, aborting, NEVER_SENT).map(drop);
    report_failure(rank, &format!("receive from rank {aborting}"), outcome)
}

fn die(world: &Comm, victim: usize, bytes: usize) -> Result<()> {
    let (rank, size) = (world.rank(), world.size());
    if size < 2 {
        return Err(Error::InvalidArgument("die needs at least two ranks".into()));
    }
    let sender = (victim + 1) % size;
    world.barrier()?;
    let pending = if rank == victim {
        receive_then_die(world, sender, bytes)
    } else if rank == sender {
        let data = vec![1u8; bytes];
        let outcome = world.scope(|s| s.isend(&data, victim, DIE_TRANSFER)?.wait().map(drop));
        report_failure(rank, &format!("send of {} MiB to rank {victim}", bytes >> 20), outcome)
    } else {
        let mut never = [0u8; 1];
        let outcome = world.recv(&mut never, victim, NEVER_SENT).map(drop);
        report_failure(rank, &format!("receive from rank {victim}"), outcome)
    };
    // Whatever the pending operation got, a new one involving the dead rank must fail as well.
    let later = world.send(&[0u8; 1], victim, NEVER_SENT);
    let _ = report_failure(rank, &format!("later send to rank {victim}"), later);
    pending
}

/// A rank killed inside a passive-target epoch: its peers' one-sided operations on it must fail
/// (not succeed or hang forever) once it is gone.
fn rma_die(world: &Comm, victim: usize) -> Result<()> {
    let rank = world.rank();
    if world.size() < 2 {
        return Err(Error::InvalidArgument("rma-die needs at least two ranks".into()));
    }
    let win = world.win_allocate::<u64>(1)?;
    win.lock_all(Assert::NONE)?;
    win.fetch_and_op(1, victim, 0, Sum)?;
    win.flush(victim)?;
    // Every survivor must be past the barrier before the victim dies, or one could fail inside
    // it (the victim's last barrier message lost with its connection) instead of in the
    // one-sided operations this mode is about.
    barrier_all_left(world, victim)?;
    if rank == victim {
        say(&format!("rank {rank}: killing itself with SIGKILL inside a lock_all epoch"));
        kill_self()
    }
    let give_up = Instant::now() + TRANSFER_PATIENCE;
    let pending = loop {
        let outcome = win.fetch_and_op(1, victim, 0, Sum).and_then(|_| win.flush(victim));
        if outcome.is_err() {
            break outcome;
        }
        if Instant::now() >= give_up {
            break Err(Error::other(format!("operations on rank {victim} kept succeeding for {TRANSFER_PATIENCE:?}")));
        }
        std::thread::sleep(POLL);
    };
    let pending = report_failure(rank, &format!("fetch_and_op on rank {victim}"), pending);
    let later = win.fetch_and_op(1, victim, 0, Sum).map(drop);
    let _ = report_failure(rank, &format!("later fetch_and_op on rank {victim}"), later);
    pending
}

/// Posts the receive of the big transfer, waits until part of it has arrived, then dies the
/// hardest way there is. A watcher thread measures the arrival while this thread drives the
/// receive: on tcp the data may move only inside this rank's own calls, and one `test` may
/// take in the whole transfer, so checking between tests could miss the middle of it.
fn receive_then_die(world: &Comm, sender: usize, bytes: usize) -> Result<()> {
    let rank = world.rank();
    let before = resident_bytes()?;
    std::thread::spawn(move || {
        let give_up = Instant::now() + TRANSFER_PATIENCE;
        loop {
            let arrived = resident_bytes().unwrap_or(0).saturating_sub(before);
            if arrived >= ARRIVED_BEFORE_DEATH.min(bytes / 2) {
                say(&format!("rank {rank}: killing itself with SIGKILL, about {} MiB arrived", arrived >> 20));
                kill_self()
            }
            if Instant::now() >= give_up {
                say(&format!("rank {rank}: the transfer did not start within {TRANSFER_PATIENCE:?}; dying anyway"));
                kill_self()
            }
            std::thread::sleep(POLL);
        }
    });
    // Zeroed memory comes fresh from the OS, so it only becomes resident as the data lands in it.
    let mut buffer = vec![0u8; bytes];
    world.scope(|s| s.irecv(&mut buffer, sender, DIE_TRANSFER)?.wait().map(drop))?;
    say(&format!("rank {rank}: the transfer completed before it could die; dying anyway"));
    kill_self()
}

/// This process's resident memory in bytes (Linux `/proc/self/statm`, 4 KiB pages assumed: only
/// growth is compared, against a threshold far below the transfer size).
fn resident_bytes() -> Result<usize> {
    let statm =
        std::fs::read_to_string("/proc/self/statm").map_err(|e| Error::other(format!("/proc/self/statm: {e}")))?;
    let pages = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse::<usize>().ok())
        .ok_or_else(|| Error::other(format!("/proc/self/statm has no resident size: {statm:?}")))?;
    Ok(pages * 4096)
}

/// SIGKILL to this very process: no unwinding, no exit handlers, no goodbye to the peers
/// (`abort` or `raise` would run or signal differently).
fn kill_self() -> ! {
    let pid = libc::pid_t::try_from(std::process::id()).unwrap_or(libc::pid_t::MAX);
    // SAFETY: kill(2) only sends a signal; it touches no memory of this process.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    // SIGKILL is delivered before kill(2) returns to a process signalling itself; never reached.
    std::process::abort()
}

fn hang(world: &Comm) -> Result<()> {
    if world.size() == 1 {
        // A receive from itself alone would be reported as a deadlock, not hang.
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    let mut never = [0u8; 1];
    world.recv(&mut never, ANY_SOURCE, NEVER_SENT).map(drop)
}
