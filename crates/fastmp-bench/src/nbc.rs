//! Nonblocking collective benchmarks following OSU 7.4's osu_ibarrier, osu_ibcast, ...
//!
//! Per size, on every rank: (1) the pure communication time, the mean of start + wait with no
//! compute (each followed by a barrier, except for ibarrier); (2) per iteration, start, busy
//! compute for this rank's pure communication time, wait, barrier: Overall is the mean of
//! start..wait, Compute the mean of the compute part. Each is averaged over the ranks (OSU's
//! MPI_Reduce sum / np), and Overlap = max(0, 100 - (Overall - Compute) / Pure Comm. · 100).
//! The blocking twin is measured at the same size too (as `fastmp-bench <collective>` does), for
//! the JSON key `blocking_us`. Warm-ups and iterations as the collective benchmarks (ibarrier
//! uses OSU's large-message counts, 100 and 10). Compute is a wall-clock busy loop that calls
//! nothing in fastmp, like OSU's dummy_compute without probes (the default). Each call runs in
//! its own `Comm::scope`, opened and closed outside the timed part (one scope can hold many
//! operations, so its cost is not part of a collective's).

use std::hint::black_box;
use std::time::{Duration, Instant};

use fastmp::coll::Collective;
use fastmp::{Comm, Result};

use crate::coll::{self, Spec, Workload, is_reduction, measure, sizes_for};
use crate::report::{Cell, Reporter};
use crate::support::mean_over_ranks;

/// The collectives with a nonblocking benchmark, in `fastmp-bench --help` order.
pub const NONBLOCKING: [Collective; 8] = [
    Collective::Barrier,
    Collective::Bcast,
    Collective::Scatter,
    Collective::Gather,
    Collective::Allgather,
    Collective::Alltoall,
    Collective::Reduce,
    Collective::Allreduce,
];

/// Benchmark name of the nonblocking twin of `coll` (one of [`NONBLOCKING`]).
pub fn name(coll: Collective) -> &'static str {
    match coll {
        Collective::Barrier => "ibarrier",
        Collective::Bcast => "ibcast",
        Collective::Scatter => "iscatter",
        Collective::Gather => "igather",
        Collective::Allgather => "iallgather",
        Collective::Alltoall => "ialltoall",
        Collective::Reduce => "ireduce",
        Collective::Allreduce => "iallreduce",
        _ => "unsupported-nonblocking",
    }
}

/// Whether the table has a size column (osu_ibarrier has none).
pub fn has_size(coll: Collective) -> bool {
    coll != Collective::Barrier
}

/// Floating-point steps between two reads of the clock in [`compute_for`]: some tens of
/// nanoseconds, so the compute overshoots its target by about that much.
const COMPUTE_STEPS: usize = 8;

/// Busy-computes until `target` of wall-clock time has passed and returns the time spent; calls
/// nothing in fastmp, so no communication progresses on this thread meanwhile (OSU's
/// dummy_compute without MPI_Test probes).
fn compute_for(target: Duration) -> Duration {
    let start = Instant::now();
    let mut x = 1.0f64;
    while start.elapsed() < target {
        for _ in 0..COMPUTE_STEPS {
            x = black_box(x) * 1.000_000_1 + 1e-9;
        }
    }
    black_box(x);
    start.elapsed()
}

/// One iteration: start the collective, compute for `compute` (none: go straight to the wait),
/// wait. Returns the µs from start to completion and of the compute part.
fn round(comm: &Comm, work: &mut Workload, compute: Option<Duration>) -> Result<(f64, f64)> {
    comm.scope(|s| {
        let start = Instant::now();
        let request = work.start(s)?;
        let computed = compute.map_or(Duration::ZERO, compute_for);
        request.wait()?;
        Ok((start.elapsed().as_secs_f64() * 1e6, computed.as_secs_f64() * 1e6))
    })
}

/// Mean times (µs) of one size on this rank.
struct Timing {
    overall: f64,
    compute: f64,
    pure_comm: f64,
}

/// OSU's two loops at `size`: pure communication, then with compute. `pure_barriers`: a barrier
/// after each pure-communication call (all but osu_ibarrier have one).
fn time_overlap(
    world: &Comm,
    comm: &Comm,
    work: &mut Workload,
    size: usize,
    (iters, skip): (usize, usize),
    pure_barriers: bool,
) -> Result<Timing> {
    work.set_size(size);
    world.barrier()?;
    let mut pure = 0.0;
    for i in 0..iters + skip {
        let (elapsed, _) = round(comm, work, None)?;
        if i >= skip {
            pure += elapsed;
        }
        if pure_barriers {
            world.barrier()?;
        }
    }
    let pure_comm = pure / iters as f64;
    // The same with compute as long as this rank's pure communication.
    world.barrier()?;
    let (mut overall, mut compute) = (0.0, 0.0);
    for i in 0..iters + skip {
        let (elapsed, computed) = round(comm, work, Some(Duration::from_secs_f64(pure_comm / 1e6)))?;
        if i >= skip {
            overall += elapsed;
            compute += computed;
        }
        world.barrier()?;
    }
    Ok(Timing { overall: overall / iters as f64, compute: compute / iters as f64, pure_comm })
}

/// The `fastmp-bench i<collective>` benchmark.
pub fn bench(world: &Comm, spec: &Spec, out: &Reporter) -> Result<()> {
    let Spec { coll, sizes, iterations, .. } = *spec;
    let comm = spec.comm(world)?;
    // osu_ibarrier runs the large-message counts; so does its blocking twin here.
    let iterations = if coll == Collective::Barrier { iterations.large_only() } else { iterations };
    let mut work = Workload::new(coll, world.size(), world.rank(), sizes.max)?;
    let datatype = if is_reduction(coll) { "f32 (MPI_FLOAT), op Sum" } else { "u8 (MPI_CHAR)" };
    let mut extra = vec![
        format!("# Datatype: {datatype}; root {}", coll::ROOT),
        "# Overall = start + compute + wait; Compute = busy loop as long as Pure Comm., no probes".to_string(),
        "# Overlap = max(0, 100 - (Overall - Compute) / Pure Comm. x 100); JSON adds blocking_us".to_string(),
    ];
    extra.push(spec.algorithm_line());
    let columns = ["Overall(us)", "Compute(us)", "Pure Comm.(us)", "Overlap(%)"];
    out.header(&format!("Non-blocking {}", coll::title(coll)), &extra, &columns);
    for size in sizes_for(coll, sizes) {
        let blocking = measure(world, &comm, &mut work, size, iterations)?;
        let mine = time_overlap(world, &comm, &mut work, size, iterations.at(size), coll != Collective::Barrier)?;
        let means = mean_over_ranks(world, &[mine.overall, mine.compute, mine.pure_comm])?;
        let (Some(&[overall, compute, pure_comm]), Some(blocking)) = (means.as_deref(), blocking) else { continue };
        let overlap = if pure_comm > 0.0 { (100.0 - (overall - compute) / pure_comm * 100.0).max(0.0) } else { 0.0 };
        out.row_cells(
            size,
            &[
                ("overall_us", Cell::Num(overall)),
                ("compute_us", Cell::Num(compute)),
                ("pure_comm_us", Cell::Num(pure_comm)),
                ("overlap_pct", Cell::Num(overlap)),
                ("blocking_us", Cell::JsonNum(blocking.avg_us)),
            ],
        );
    }
    Ok(())
}
