//! One-sided (RMA) benchmarks following OSU 7.4's osu_put_latency, osu_get_latency, osu_put_bw,
//! osu_get_bw, osu_put_bibw, osu_acc_latency, osu_fop_latency and osu_cas_latency, on exactly
//! two ranks, with only the public window API (bench/mpi_rma.c is the MPI twin).
//!
//! Method (OSU's):
//! - a new window per size (`--win allocate`: [`Comm::win_allocate`], `--win create`:
//!   [`Comm::win_create`] over a zeroed vector), freed after the size;
//! - latency, passive synchronisation: rank 0 alone times `iters` operations to rank 1, each
//!   followed by `flush` / `flush_local` inside one shared lock held across the loop, or wrapped
//!   in its own `lock`..`unlock` / `lock_all`..`unlock_all`; latency = time / iters;
//! - latency, active synchronisation: a ping-pong of operations (fence: three fences per
//!   iteration, rank 0 operating after the first, rank 1 after the second; pscw: rank 0
//!   start/op/complete then post/wait, rank 1 the mirror); latency = time / iters / 2;
//! - bandwidth: per iteration a window of [`WINDOW`] operations of `size` bytes at consecutive
//!   displacements, then one synchronisation (as above; fence: both ranks fence around rank 0's
//!   window; pscw: rank 0 start/ops/complete, rank 1 post/wait); put_bibw: both ranks put a
//!   window to each other (fence or pscw only, as OSU); MB/s = size · WINDOW · iters / time
//!   (twice that for bibw);
//! - acc_latency accumulates `size / 4` i32 with `Sum`; fop_latency (`fetch_and_op` of one u64
//!   with `Sum`) and cas_latency (`compare_and_swap` of one u64) have the single size 8;
//! - iterations: latency 10000 / 100 warm-up up to 8 KiB, 1000 / 10 above; bandwidth 100 / 10,
//!   20 / 2 (`--iterations N`: N / N÷10 at every size); a barrier before each size.

use std::time::Instant;

use bytemuck::Pod;
use clap::ValueEnum;
use fastmp::op::Sum;
use fastmp::window::{Assert, LockKind, Window};
use fastmp::{Comm, Error, Group, Result};

use crate::coll::Iterations;
use crate::report::{Cell, Reporter};
use crate::support::{AlignedBuf, Sizes};

/// Operations per synchronisation in the bandwidth tests (OSU's window size).
pub const WINDOW: usize = 64;

/// OSU's latency iterations (timed, warm-up) up to 8 KiB and above.
const LATENCY_ITERATIONS: Iterations = Iterations { small: (10_000, 100), large: (1_000, 10) };
/// OSU's bandwidth iterations.
const BANDWIDTH_ITERATIONS: Iterations = Iterations { small: (100, 10), large: (20, 2) };

/// The one-sided benchmarks, in the order `--help` lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rma {
    PutLatency,
    GetLatency,
    PutBw,
    GetBw,
    PutBibw,
    AccLatency,
    FopLatency,
    CasLatency,
}

pub const ALL: [Rma; 8] = [
    Rma::PutLatency,
    Rma::GetLatency,
    Rma::PutBw,
    Rma::GetBw,
    Rma::PutBibw,
    Rma::AccLatency,
    Rma::FopLatency,
    Rma::CasLatency,
];

/// How each size's window is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WinKind {
    /// Library-owned memory (MPI_Win_allocate).
    Allocate,
    /// The benchmark's own vector (MPI_Win_create).
    Create,
}

/// How operations are completed (OSU's `-s` option).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SyncMode {
    /// One shared lock for the whole loop; `flush` after each operation or window.
    Flush,
    /// As `flush`, with `flush_local` (origin-side completion only).
    #[value(name = "flush_local")]
    FlushLocal,
    /// `lock` (shared) .. `unlock` around each operation or window.
    Lock,
    /// `lock_all` .. `unlock_all` around each operation or window.
    #[value(name = "lock_all")]
    LockAll,
    /// Active target: `fence`.
    Fence,
    /// Active target: post/start/complete/wait.
    Pscw,
}

impl SyncMode {
    pub fn name(self) -> &'static str {
        match self {
            SyncMode::Flush => "flush",
            SyncMode::FlushLocal => "flush_local",
            SyncMode::Lock => "lock",
            SyncMode::LockAll => "lock_all",
            SyncMode::Fence => "fence",
            SyncMode::Pscw => "pscw",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            SyncMode::Flush => "lock(shared) once, then op + flush (MPI_Win_flush)",
            SyncMode::FlushLocal => "lock(shared) once, then op + flush_local (MPI_Win_flush_local)",
            SyncMode::Lock => "lock(shared) + op + unlock (MPI_Win_lock/unlock)",
            SyncMode::LockAll => "lock_all + op + unlock_all (MPI_Win_lock_all/unlock_all)",
            SyncMode::Fence => "fence (MPI_Win_fence)",
            SyncMode::Pscw => "post/start/complete/wait (MPI_Win_post/start/complete/wait)",
        }
    }

    fn is_active(self) -> bool {
        matches!(self, SyncMode::Fence | SyncMode::Pscw)
    }
}

impl WinKind {
    fn name(self) -> &'static str {
        match self {
            WinKind::Allocate => "allocate",
            WinKind::Create => "create",
        }
    }
}

impl Rma {
    pub fn name(self) -> &'static str {
        match self {
            Rma::PutLatency => "put_latency",
            Rma::GetLatency => "get_latency",
            Rma::PutBw => "put_bw",
            Rma::GetBw => "get_bw",
            Rma::PutBibw => "put_bibw",
            Rma::AccLatency => "acc_latency",
            Rma::FopLatency => "fop_latency",
            Rma::CasLatency => "cas_latency",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Rma::PutLatency => "MPI_Put Latency Test",
            Rma::GetLatency => "MPI_Get Latency Test",
            Rma::PutBw => "MPI_Put Bandwidth Test",
            Rma::GetBw => "MPI_Get Bandwidth Test",
            Rma::PutBibw => "MPI_Put Bi-directional Bandwidth Test",
            Rma::AccLatency => "MPI_Accumulate Latency Test (i32, Sum)",
            Rma::FopLatency => "MPI_Fetch_and_op Latency Test (u64, Sum)",
            Rma::CasLatency => "MPI_Compare_and_swap Latency Test (u64)",
        }
    }

    fn is_bandwidth(self) -> bool {
        matches!(self, Rma::PutBw | Rma::GetBw | Rma::PutBibw)
    }

    /// Whether the benchmark has the single size of one 8-byte element.
    pub fn is_single_element(self) -> bool {
        matches!(self, Rma::FopLatency | Rma::CasLatency)
    }

    /// OSU's default synchronisation: flush, except put_bibw (active target only): pscw.
    pub fn default_sync(self) -> SyncMode {
        if self == Rma::PutBibw { SyncMode::Pscw } else { SyncMode::Flush }
    }

    /// The default size range (bandwidth windows hold 64 messages, hence 1 MiB).
    pub fn default_sizes(self) -> (usize, usize) {
        match self {
            Rma::FopLatency | Rma::CasLatency => (8, 8),
            Rma::AccLatency => (4, 1 << 20),
            Rma::PutLatency | Rma::GetLatency => (1, 1 << 22),
            Rma::PutBw | Rma::GetBw | Rma::PutBibw => (1, 1 << 20),
        }
    }

    /// Rejects combinations the benchmark does not measure.
    pub fn check(self, sync: SyncMode, sizes: &Sizes) -> std::result::Result<(), String> {
        if self == Rma::PutBibw && !sync.is_active() {
            return Err(format!(
                "put_bibw needs active-target synchronisation (--sync fence|pscw, as OSU), got --sync {}",
                sync.name()
            ));
        }
        if self == Rma::AccLatency && (!sizes.min.is_multiple_of(4) || sizes.min == 0) {
            return Err(format!(
                "acc_latency sizes must be positive multiples of 4 (whole i32), got --min-size {}",
                sizes.min
            ));
        }
        // As MPI's int counts (bench/mpi_rma.c): a window of 64 messages stays below 2 GiB.
        let limit = if self.is_bandwidth() { i32::MAX as usize / WINDOW } else { i32::MAX as usize };
        if sizes.max > limit {
            return Err(format!("{}: --max-size {} is above {limit} bytes", self.name(), sizes.max));
        }
        Ok(())
    }
}

/// One run's choices.
pub struct Spec<'a> {
    pub bench: Rma,
    pub win: WinKind,
    pub sync: SyncMode,
    pub sizes: &'a Sizes,
    /// `--iterations`: that many timed iterations at every size instead of OSU's counts.
    pub iterations: Option<Iterations>,
}

impl Spec<'_> {
    fn iterations(&self, size: usize) -> (usize, usize) {
        let osu = if self.bench.is_bandwidth() { BANDWIDTH_ITERATIONS } else { LATENCY_ITERATIONS };
        self.iterations.unwrap_or(osu).at(size)
    }

    /// One row; the JSON object also names the window kind and synchronisation.
    fn report(&self, out: &Reporter, size: usize, key: &str, value: f64) {
        out.row_cells(
            size,
            &[
                (key, Cell::Num(value)),
                ("win", Cell::JsonText(self.win.name())),
                ("sync", Cell::JsonText(self.sync.name())),
            ],
        );
    }
}

/// Runs `spec.bench` on the two ranks of `world`; rank 0 prints.
pub fn bench(world: &Comm, spec: &Spec, out: &Reporter) -> Result<()> {
    if world.size() != 2 {
        return Err(Error::InvalidArgument(format!(
            "{} needs exactly 2 ranks, got {}",
            spec.bench.name(),
            world.size()
        )));
    }
    let column = if spec.bench.is_bandwidth() { "Bandwidth (MB/s)" } else { "Latency (us)" };
    out.header(
        spec.bench.title(),
        &[
            format!("# Window creation: {} (MPI_Win_{})", spec.win.name(), spec.win.name()),
            format!("# Synchronization: {}", spec.sync.describe()),
        ],
        &[column],
    );
    let max = spec.sizes.max;
    let sizes = spec.sizes.iter();
    match spec.bench {
        Rma::PutLatency => {
            let sbuf = AlignedBuf::new(max, b'a');
            sweep::<u8>(
                world,
                spec,
                out,
                sizes,
                |size| size,
                |w, size| latency_us(w, spec, size, |target| w.put(&sbuf.as_slice()[..size], target, 0)),
            )
        }
        Rma::GetLatency => {
            let mut rbuf = AlignedBuf::new(max, b'b');
            sweep::<u8>(
                world,
                spec,
                out,
                sizes,
                |size| size,
                |w, size| latency_us(w, spec, size, |target| w.get(&mut rbuf.as_mut_slice()[..size], target, 0)),
            )
        }
        Rma::AccLatency => {
            let values = vec![1i32; max / 4];
            sweep::<i32>(
                world,
                spec,
                out,
                sizes,
                |size| size / 4,
                |w, size| latency_us(w, spec, size, |target| w.accumulate(&values[..size / 4], target, 0, Sum)),
            )
        }
        Rma::FopLatency => sweep::<u64>(
            world,
            spec,
            out,
            [8].into_iter(),
            |_| 1,
            |w, size| latency_us(w, spec, size, |target| w.fetch_and_op(1, target, 0, Sum).map(drop)),
        ),
        Rma::CasLatency => sweep::<u64>(
            world,
            spec,
            out,
            [8].into_iter(),
            |_| 1,
            |w, size| latency_us(w, spec, size, |target| w.compare_and_swap(0, 1, target, 0).map(drop)),
        ),
        Rma::PutBw | Rma::PutBibw => {
            let sbuf = AlignedBuf::new(max * WINDOW, b'a');
            sweep::<u8>(
                world,
                spec,
                out,
                sizes,
                |size| size * WINDOW,
                |w, size| {
                    bandwidth_mb_s(w, spec, size, |target| {
                        (0..WINDOW).try_for_each(|j| w.put(&sbuf.as_slice()[j * size..][..size], target, j * size))
                    })
                },
            )
        }
        Rma::GetBw => {
            let mut rbuf = AlignedBuf::new(max * WINDOW, b'b');
            sweep::<u8>(
                world,
                spec,
                out,
                sizes,
                |size| size * WINDOW,
                |w, size| {
                    // A blocking get completes in the call; a burst of gets in flight together
                    // (as MPI_Get until the flush) is the request form, which the scope's end
                    // completes.
                    bandwidth_mb_s(w, spec, size, |target| {
                        w.comm().scope(|s| {
                            for (j, chunk) in rbuf.as_mut_slice()[..WINDOW * size].chunks_mut(size).enumerate() {
                                let _in_flight = s.rget(w, chunk, target, j * size)?;
                            }
                            Ok(())
                        })
                    })
                },
            )
        }
    }
}

/// Measures every size on a fresh window of `len(size)` elements (OSU makes one per size) and
/// reports it.
fn sweep<T: Pod>(
    world: &Comm,
    spec: &Spec,
    out: &Reporter,
    sizes: impl Iterator<Item = usize>,
    len: impl Fn(usize) -> usize,
    mut measure: impl FnMut(&Window<'_, T>, usize) -> Result<f64>,
) -> Result<()> {
    let key = if spec.bench.is_bandwidth() { "mb_s" } else { "avg_us" };
    for size in sizes {
        let value = with_window(world, spec.win, len(size), |w| measure(w, size))?;
        spec.report(out, size, key, value);
    }
    Ok(())
}

/// Runs `f` on a fresh window of `len` elements per rank, then frees it collectively.
fn with_window<T: Pod, R>(
    world: &Comm,
    kind: WinKind,
    len: usize,
    f: impl FnOnce(&Window<'_, T>) -> Result<R>,
) -> Result<R> {
    match kind {
        WinKind::Allocate => {
            let win = world.win_allocate::<T>(len)?;
            let result = f(&win)?;
            win.free()?;
            Ok(result)
        }
        WinKind::Create => {
            let mut memory = vec![T::zeroed(); len];
            world.win_create(&mut memory, f)
        }
    }
}

/// Elapsed seconds of `iters` calls of `round` after `skip` untimed ones.
fn timed(iters: usize, skip: usize, mut round: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut start = Instant::now();
    for i in 0..iters + skip {
        if i == skip {
            start = Instant::now();
        }
        round()?;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// The group of the other rank, for post/start.
fn peer_group<T: Pod>(win: &Window<'_, T>) -> Result<Group> {
    win.comm().group().incl(&[1 - win.rank()])
}

/// `body` (operations to `target`) completed by one passive-target synchronisation.
fn passive_round<T: Pod>(
    win: &Window<'_, T>,
    sync: SyncMode,
    target: usize,
    body: impl FnOnce() -> Result<()>,
) -> Result<()> {
    match sync {
        SyncMode::Flush => {
            body()?;
            win.flush(target)
        }
        SyncMode::FlushLocal => {
            body()?;
            win.flush_local(target)
        }
        SyncMode::Lock => {
            win.lock(LockKind::Shared, target, Assert::NONE)?;
            body()?;
            win.unlock(target)
        }
        SyncMode::LockAll => {
            win.lock_all(Assert::NONE)?;
            body()?;
            win.unlock_all()
        }
        SyncMode::Fence | SyncMode::Pscw => {
            Err(Error::InvalidArgument(format!("{} is not passive-target synchronisation", sync.name())))
        }
    }
}

/// Rank 0's timed loop of passive-target rounds to rank 1: flush modes hold one shared lock
/// across the loop (outside the timing), as OSU does.
fn passive_loop<T: Pod>(
    win: &Window<'_, T>,
    sync: SyncMode,
    (iters, skip): (usize, usize),
    mut body: impl FnMut() -> Result<()>,
) -> Result<f64> {
    let held = matches!(sync, SyncMode::Flush | SyncMode::FlushLocal);
    if held {
        win.lock(LockKind::Shared, 1, Assert::NONE)?;
    }
    let t = timed(iters, skip, || passive_round(win, sync, 1, &mut body))?;
    if held {
        win.unlock(1)?;
    }
    Ok(t)
}

/// Average latency (µs) of `op` (one operation to the given target) at `size`, at rank 0
/// (rank 1 returns 0).
fn latency_us<T: Pod>(
    win: &Window<'_, T>,
    spec: &Spec,
    size: usize,
    mut op: impl FnMut(usize) -> Result<()>,
) -> Result<f64> {
    let (iters, skip) = spec.iterations(size);
    let (me, peer) = (win.rank(), 1 - win.rank());
    win.comm().barrier()?;
    let us = match spec.sync {
        SyncMode::Fence => {
            let t = timed(iters, skip, || {
                win.fence(Assert::NONE)?;
                if me == 0 {
                    op(peer)?;
                }
                win.fence(Assert::NONE)?;
                if me == 1 {
                    op(peer)?;
                }
                win.fence(Assert::NONE)
            })?;
            win.fence(Assert::NOSUCCEED)?;
            t * 1e6 / iters as f64 / 2.0
        }
        SyncMode::Pscw => {
            let group = peer_group(win)?;
            let mut access = || {
                win.start(&group, Assert::NONE)?;
                op(peer)?;
                win.complete()
            };
            let expose = || {
                win.post(&group, Assert::NONE)?;
                win.wait()
            };
            let t = timed(iters, skip, || {
                if me == 0 { access().and_then(|()| expose()) } else { expose().and_then(|()| access()) }
            })?;
            t * 1e6 / iters as f64 / 2.0
        }
        passive if me == 0 => passive_loop(win, passive, (iters, skip), || op(1))? * 1e6 / iters as f64,
        _ => 0.0,
    };
    win.comm().barrier()?;
    Ok(us)
}

/// Bandwidth (MB/s) at rank 0 of bursts `burst(target)` of [`WINDOW`] operations of `size`
/// bytes; put_bibw: both ranks send (rank 1 returns 0).
fn bandwidth_mb_s<T: Pod>(
    win: &Window<'_, T>,
    spec: &Spec,
    size: usize,
    mut burst: impl FnMut(usize) -> Result<()>,
) -> Result<f64> {
    let (iters, skip) = spec.iterations(size);
    let (me, peer) = (win.rank(), 1 - win.rank());
    let both = spec.bench == Rma::PutBibw;
    let sends = me == 0 || both;
    let mut window = || burst(peer);
    win.comm().barrier()?;
    let t = match spec.sync {
        SyncMode::Fence => {
            let t = timed(iters, skip, || {
                win.fence(Assert::NONE)?;
                if sends {
                    window()?;
                }
                win.fence(Assert::NONE)
            })?;
            win.fence(Assert::NOSUCCEED)?;
            t
        }
        SyncMode::Pscw => {
            let group = peer_group(win)?;
            timed(iters, skip, || {
                if !sends || both {
                    win.post(&group, Assert::NONE)?;
                }
                if sends {
                    win.start(&group, Assert::NONE)?;
                    window()?;
                    win.complete()?;
                }
                if !sends || both { win.wait() } else { Ok(()) }
            })?
        }
        passive if me == 0 => passive_loop(win, passive, (iters, skip), &mut window)?,
        _ => 0.0,
    };
    win.comm().barrier()?;
    let messages = (WINDOW * iters * if both { 2 } else { 1 }) as f64;
    Ok(if me == 0 { size as f64 / 1e6 * messages / t } else { 0.0 })
}
