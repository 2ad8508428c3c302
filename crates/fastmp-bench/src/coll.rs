//! Collective benchmarks following the OSU 7.4 collective tests (osu_bcast, osu_allreduce, ...).
//!
//! Per size: warm-up then timed iterations (fewer above 8 KiB); each call is timed on its own
//! and followed by a barrier (osu_barrier instead times its whole loop); every rank averages its
//! own times, and the table shows the average, minimum and maximum of those averages.
//! Root 0; reductions are `f32` sums (MPI_FLOAT, MPI_SUM); `v` variants use equal counts.

use std::time::{Duration, Instant};

use fastmp::coll::{Algorithm, Collective};
use fastmp::op::Sum;
use fastmp::{Comm, Error, Request, Result, Scope};

use crate::report::{Cell, Reporter};
use crate::support::{AlignedBuf, Sizes, gather_f64};

/// Root of the rooted collectives (OSU uses 0).
pub const ROOT: usize = 0;
/// Element type of the reductions, as OSU's MPI_FLOAT.
type Elem = f32;
const ELEM: usize = size_of::<Elem>();
const LARGE_MESSAGE_SIZE: usize = 8192;

/// Timed and warm-up iterations for small (<= 8 KiB) and large sizes.
#[derive(Clone, Copy, Debug)]
pub struct Iterations {
    pub small: (usize, usize),
    pub large: (usize, usize),
}

impl Iterations {
    /// OSU 7.4's defaults for collectives.
    pub const OSU: Iterations = Iterations { small: (1000, 100), large: (100, 10) };
    /// A tenth of OSU's, for `tune`, which measures every algorithm.
    pub const TUNE: Iterations = Iterations { small: (100, 10), large: (10, 1) };

    /// `iters` timed iterations at every size, with a tenth as many (at least one) warm-ups.
    pub fn fixed(iters: usize) -> Iterations {
        let pair = (iters, (iters / 10).max(1));
        Iterations { small: pair, large: pair }
    }

    /// The large-message counts at every size.
    pub fn large_only(self) -> Iterations {
        Iterations { small: self.large, large: self.large }
    }

    pub fn at(self, size: usize) -> (usize, usize) {
        if size <= LARGE_MESSAGE_SIZE { self.small } else { self.large }
    }
}

/// Whether the collective combines `f32` values (sizes are then multiples of 4 bytes).
pub fn is_reduction(coll: Collective) -> bool {
    matches!(coll, Collective::Reduce | Collective::Allreduce | Collective::ReduceScatter | Collective::Scan)
}

/// Whether the library selects this collective's algorithm without looking at the size (it
/// passes 0 bytes to the tuning rules: see `Comm::barrier`, `scatterv`, `gatherv`, `alltoallv`).
/// For all others the benchmark's size is exactly the byte count the rules see.
pub fn selects_by_size(coll: Collective) -> bool {
    !matches!(coll, Collective::Barrier | Collective::Scatterv | Collective::Gatherv | Collective::Alltoallv)
}

/// Aggregated bandwidth: factor · size / avg latency (MB = 10^6 B), after the UOMS metric of the
/// PGAS-collectives seed, with factor = np^power. Power 1 for one-to-all / all-to-one operations
/// (bcast, scatter, gather: np blocks of `size` leave or reach the root), 2 for all-to-all ones
/// (allgather, alltoall: np ranks each end with np blocks). UOMS has no bandwidth for reductions;
/// we use power 1 (the input bytes of all ranks combined per second). None for barrier.
fn bandwidth_power(coll: Collective) -> Option<i32> {
    match coll {
        Collective::Barrier => None,
        Collective::Allgather | Collective::Allgatherv | Collective::Alltoall | Collective::Alltoallv => Some(2),
        _ => Some(1),
    }
}

/// OSU's title of the test.
pub fn title(coll: Collective) -> &'static str {
    match coll {
        Collective::Barrier => "Barrier Latency Test",
        Collective::Bcast => "Broadcast Latency Test",
        Collective::Scatter => "Scatter Latency Test",
        Collective::Scatterv => "Scatterv Latency Test",
        Collective::Gather => "Gather Latency Test",
        Collective::Gatherv => "Gatherv Latency Test",
        Collective::Allgather => "Allgather Latency Test",
        Collective::Allgatherv => "Allgatherv Latency Test",
        Collective::Alltoall => "All-to-All Personalized Exchange Latency Test",
        Collective::Alltoallv => "All-to-Allv Personalized Exchange Latency Test",
        Collective::Reduce => "Reduce Latency Test",
        Collective::Allreduce => "Allreduce Latency Test",
        Collective::ReduceScatter => "Reduce_scatter Latency Test",
        Collective::Scan => "Scan Latency Test",
    }
}

/// The sizes measured for `coll`: barrier has one (0); reductions skip sizes that are not a
/// whole number of elements.
pub fn sizes_for(coll: Collective, sizes: &Sizes) -> Vec<usize> {
    if coll == Collective::Barrier {
        return vec![0];
    }
    sizes.iter().filter(|s| !is_reduction(coll) || s.is_multiple_of(ELEM)).collect()
}

/// Bytes of the send and receive buffers of `coll` with `size` bytes per rank and `all` = np ·
/// `size` (reduce_scatter receives only its own block: see `Workload::parts`).
fn buffer_lens(coll: Collective, size: usize, all: usize) -> (usize, usize) {
    match coll {
        Collective::Barrier => (0, 0),
        Collective::Bcast => (0, size),
        Collective::Scatter | Collective::Scatterv => (all, size),
        Collective::Gather | Collective::Gatherv | Collective::Allgather | Collective::Allgatherv => (size, all),
        Collective::Alltoall | Collective::Alltoallv => (all, all),
        Collective::Reduce | Collective::Allreduce | Collective::ReduceScatter | Collective::Scan => (size, size),
    }
}

/// Buffers and counts for one collective, allocated once for the largest size.
pub struct Workload {
    coll: Collective,
    np: usize,
    rank: usize,
    /// Bytes of `send` and `recv` one call at the current size uses, worked out once per size so the
    /// timed calls pay only for the slicing, as the C benchmark does.
    lens: (usize, usize),
    send: AlignedBuf,
    recv: AlignedBuf,
    /// Per-rank counts and displacements (elements) of the `v` variants and reduce_scatter.
    counts: Vec<usize>,
    displs: Vec<usize>,
    /// Calls the MPI_IN_PLACE variant (`--in-place`): the receive buffer is also the input.
    in_place: bool,
}

/// The collectives with an in-place benchmark (`--in-place`).
pub const IN_PLACE: [Collective; 5] =
    [Collective::Allreduce, Collective::Allgather, Collective::Alltoall, Collective::Reduce, Collective::Scan];

impl Workload {
    pub fn new(coll: Collective, np: usize, rank: usize, max_size: usize) -> Result<Workload> {
        let all = np
            .checked_mul(max_size)
            .filter(|&all| all <= isize::MAX as usize / 2)
            .ok_or_else(|| Error::other(format!("{np} ranks x --max-size {max_size} do not fit in memory")))?;
        let (send_len, recv_len) = buffer_lens(coll, max_size, all);
        let mut send = AlignedBuf::new(send_len.next_multiple_of(ELEM), b'a');
        if is_reduction(coll) {
            bytemuck::cast_slice_mut::<u8, Elem>(send.as_mut_slice()).fill(1.0);
        }
        let recv = AlignedBuf::new(recv_len.next_multiple_of(ELEM), b'b');
        Ok(Workload {
            coll,
            np,
            rank,
            lens: (0, 0),
            send,
            recv,
            counts: vec![0; np],
            displs: vec![0; np],
            in_place: false,
        })
    }

    /// Benchmarks the in-place variant from now on (only the collectives of [`IN_PLACE`]).
    pub fn set_in_place(&mut self, in_place: bool) -> Result<()> {
        if in_place && !IN_PLACE.contains(&self.coll) {
            return Err(Error::other(format!("--in-place: no in-place benchmark of {}", self.coll)));
        }
        self.in_place = in_place;
        Ok(())
    }

    /// Sets the message size of the following calls; the counts of reduce_scatter follow
    /// osu_reduce_scatter (the remainder goes to the first ranks).
    pub fn set_size(&mut self, size: usize) {
        let (elems, unit) = if is_reduction(self.coll) { (size / ELEM, self.np) } else { (size, 1) };
        let (base, extra) = (elems / unit, elems % unit);
        let mut offset = 0;
        for (i, (count, displ)) in self.counts.iter_mut().zip(&mut self.displs).enumerate() {
            *count = if unit == 1 { elems } else { base + usize::from(i < extra) };
            *displ = offset;
            offset += *count;
        }
        let (send_len, recv_len) = buffer_lens(self.coll, size, size * self.np);
        // reduce_scatter receives only this rank's block.
        let recv_len = if self.coll == Collective::ReduceScatter { self.counts[self.rank] * ELEM } else { recv_len };
        self.lens = (send_len, recv_len);
    }

    /// The parts of the buffers one call at the current size uses, as the collective takes them.
    #[inline]
    fn parts(&mut self) -> Parts<'_> {
        let (send_len, recv_len) = self.lens;
        Parts {
            send: &self.send.as_slice()[..send_len],
            recv: &mut self.recv.as_mut_slice()[..recv_len],
            counts: &self.counts,
            displs: &self.displs,
        }
    }

    /// One call of the collective on `comm` at the current size.
    pub fn call(&mut self, comm: &Comm) -> Result<()> {
        let coll = self.coll;
        let in_place = self.in_place;
        let Parts { send, recv, counts, displs } = self.parts();
        if in_place {
            // The input is in `recv`: the same buffer layout as the out-of-place call's output.
            return match coll {
                Collective::Allreduce => comm.allreduce_in_place(floats_mut(recv), Sum),
                Collective::Reduce => comm.reduce_in_place(floats_mut(recv), Sum, ROOT),
                Collective::Scan => comm.scan_in_place(floats_mut(recv), Sum),
                Collective::Allgather => comm.allgather_in_place(recv),
                Collective::Alltoall => comm.alltoall_in_place(recv),
                other => Err(Error::other(format!("--in-place: no in-place benchmark of {other}"))),
            };
        }
        match coll {
            Collective::Barrier => comm.barrier(),
            Collective::Bcast => comm.bcast(recv, ROOT),
            Collective::Scatter => comm.scatter(send, recv, ROOT),
            Collective::Scatterv => comm.scatterv(send, counts, displs, recv, ROOT),
            Collective::Gather => comm.gather(send, recv, ROOT),
            Collective::Gatherv => comm.gatherv(send, recv, counts, displs, ROOT),
            Collective::Allgather => comm.allgather(send, recv),
            Collective::Allgatherv => comm.allgatherv(send, recv, counts, displs),
            Collective::Alltoall => comm.alltoall(send, recv),
            Collective::Alltoallv => comm.alltoallv(send, counts, displs, recv, counts, displs),
            Collective::Reduce => comm.reduce(floats(send), floats_mut(recv), Sum, ROOT),
            Collective::Allreduce => comm.allreduce(floats(send), floats_mut(recv), Sum),
            Collective::ReduceScatter => comm.reduce_scatter(floats(send), floats_mut(recv), counts, Sum),
            Collective::Scan => comm.scan(floats(send), floats_mut(recv), Sum),
        }
    }

    /// Starts the nonblocking twin of the collective at the current size in scope `s`; only the
    /// collectives of [`crate::nbc::NONBLOCKING`] have a benchmark.
    pub fn start<'s>(&'s mut self, s: &'s Scope<'s, '_>) -> Result<Request<'s>> {
        let coll = self.coll;
        let Parts { send, recv, .. } = self.parts();
        match coll {
            Collective::Barrier => s.ibarrier(),
            Collective::Bcast => s.ibcast(recv, ROOT),
            Collective::Scatter => s.iscatter(send, recv, ROOT),
            Collective::Gather => s.igather(send, recv, ROOT),
            Collective::Allgather => s.iallgather(send, recv),
            Collective::Alltoall => s.ialltoall(send, recv),
            Collective::Reduce => s.ireduce(floats(send), floats_mut(recv), Sum, ROOT),
            Collective::Allreduce => s.iallreduce(floats(send), floats_mut(recv), Sum),
            other => Err(Error::other(format!("no nonblocking benchmark of {other}"))),
        }
    }
}

/// Borrowed buffers and counts of one call (see [`Workload::parts`]).
struct Parts<'a> {
    send: &'a [u8],
    recv: &'a mut [u8],
    /// Per-rank counts and displacements (elements) of the `v` variants and reduce_scatter.
    counts: &'a [usize],
    displs: &'a [usize],
}

/// The reduction elements in `bytes` (whole elements, 64-byte aligned: see `Workload::new`).
fn floats(bytes: &[u8]) -> &[Elem] {
    bytemuck::cast_slice(bytes)
}

fn floats_mut(bytes: &mut [u8]) -> &mut [Elem] {
    bytemuck::cast_slice_mut(bytes)
}

/// Latency over the ranks: the average, minimum and maximum of the ranks' own averages (µs).
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub avg_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    /// Average over ranks of each rank's median call time: unlike the OSU mean it ignores the
    /// occasional preempted call, which is what the tuner needs to rank algorithms while every
    /// rank has a core (oversubscribed, it ranks by the mean: see `tune::Ranking`).
    pub median_us: f64,
}

/// Measures `work` at `size` on `comm` (which may force an algorithm); `world` provides the
/// barriers between iterations. Returns the statistics at rank 0, `None` elsewhere.
pub fn measure(
    world: &Comm,
    comm: &Comm,
    work: &mut Workload,
    size: usize,
    iterations: Iterations,
) -> Result<Option<Stats>> {
    work.set_size(size);
    let whole_loop = work.coll == Collective::Barrier;
    measure_with(world, size, iterations, whole_loop, || work.call(comm))
}

/// Times `call` at `size` as [`measure`] does: each call on its own, followed by a barrier on
/// `world`, or (`whole_loop`, osu_barrier) the whole loop of back-to-back calls.
pub fn measure_with(
    world: &Comm,
    size: usize,
    iterations: Iterations,
    whole_loop: bool,
    mut call: impl FnMut() -> Result<()>,
) -> Result<Option<Stats>> {
    let (iters, skip) = iterations.at(size);
    world.barrier()?;
    let mut timed = Duration::ZERO;
    let mut samples = Vec::with_capacity(iters);
    if whole_loop {
        let mut start = Instant::now();
        for i in 0..iters + skip {
            if i == skip {
                start = Instant::now();
            }
            call()?;
        }
        timed = start.elapsed();
    } else {
        for i in 0..iters + skip {
            let start = Instant::now();
            call()?;
            let elapsed = start.elapsed();
            if i >= skip {
                timed += elapsed;
                samples.push(elapsed.as_secs_f64() * 1e6);
            }
            world.barrier()?;
        }
    }
    let mine = timed.as_secs_f64() * 1e6 / iters as f64;
    // A whole-loop timing has no per-call samples, so its median is its mean.
    let median = if samples.is_empty() {
        mine
    } else {
        samples.sort_unstable_by(f64::total_cmp);
        samples[samples.len() / 2]
    };
    let all = gather_f64(world, mine)?;
    let medians = gather_f64(world, median)?;
    Ok((world.rank() == 0).then(|| Stats {
        avg_us: all.iter().sum::<f64>() / all.len() as f64,
        min_us: all.iter().copied().fold(f64::INFINITY, f64::min),
        max_us: all.iter().copied().fold(0.0, f64::max),
        median_us: medians.iter().sum::<f64>() / medians.len() as f64,
    }))
}

/// `comm` with `algorithm` forced for `coll` (other collectives keep `comm`'s selection).
pub fn forcing(comm: &Comm, coll: Collective, algorithm: Algorithm) -> Result<Comm> {
    Ok(comm.with_tuning(comm.tuning().clone().force(coll, algorithm)?))
}

/// What a collective benchmark (blocking or nonblocking) measures, from the command line.
pub struct Spec<'a> {
    pub coll: Collective,
    /// `--algorithm`: force this one (default: the tuning rules choose).
    pub forced: Option<Algorithm>,
    pub sizes: &'a Sizes,
    pub iterations: Iterations,
    /// `--in-place`: the MPI_IN_PLACE variant (blocking collectives of [`IN_PLACE`]).
    pub in_place: bool,
}

impl Spec<'_> {
    /// The communicator the measured calls use: `world`, with the forced algorithm if any.
    pub fn comm(&self, world: &Comm) -> Result<Comm> {
        match self.forced {
            Some(algorithm) => forcing(world, self.coll, algorithm),
            None => Ok(world.clone()),
        }
    }

    /// The header line naming the algorithm.
    pub fn algorithm_line(&self) -> String {
        match self.forced {
            Some(a) => format!("# Algorithm: {a} (forced)"),
            None => "# Algorithm: chosen per size by the tuning rules".to_string(),
        }
    }
}

/// The `fastmp-bench <collective>` benchmark.
pub fn bench(world: &Comm, spec: &Spec, out: &Reporter) -> Result<()> {
    let Spec { coll, sizes, iterations, in_place, .. } = *spec;
    let comm = spec.comm(world)?;
    let np = world.size();
    let mut work = Workload::new(coll, np, world.rank(), sizes.max)?;
    work.set_in_place(in_place)?;
    let factor = bandwidth_power(coll).map(|p| (p, (np as f64).powi(p)));
    let datatype = if is_reduction(coll) { "f32 (MPI_FLOAT), op Sum" } else { "u8 (MPI_CHAR)" };
    let mut extra = vec![format!("# Datatype: {datatype}; root {ROOT}")];
    extra.push(spec.algorithm_line());
    if in_place {
        extra.push("# MPI_IN_PLACE: the receive buffer holds the input".to_string());
    }
    let mut columns = vec!["Avg Latency(us)", "Min Latency(us)", "Max Latency(us)"];
    if let Some((power, _)) = factor {
        let np_term = if power == 1 { "np".to_string() } else { format!("np^{power}") };
        extra.push(format!("# Bandwidth: aggregated, {np_term} x size / avg latency (MB = 10^6 B)"));
        columns.push("Bandwidth (MB/s)");
    }
    columns.push("Algorithm");
    out.header(title(coll), &extra, &columns);
    for size in sizes_for(coll, sizes) {
        let Some(stats) = measure(world, &comm, &mut work, size, iterations)? else { continue };
        let algorithm = comm.algorithm_for(coll, if selects_by_size(coll) { size } else { 0 }, true);
        let mut cells = vec![
            ("avg_us", Cell::Num(stats.avg_us)),
            ("min_us", Cell::Num(stats.min_us)),
            ("max_us", Cell::Num(stats.max_us)),
        ];
        if let Some((_, f)) = factor {
            let mb_s = if stats.avg_us > 0.0 { f * size as f64 / stats.avg_us } else { 0.0 };
            cells.push(("mb_s", Cell::Num(mb_s)));
        }
        cells.push(("algorithm", Cell::Text(algorithm.name())));
        out.row_cells(size, &cells);
    }
    Ok(())
}
