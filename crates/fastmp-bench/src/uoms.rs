//! `fastmp-bench uoms <benchmark>`: the PGAS collectives and shared-array copies measured as
//! UOMS does (the UPC Operations Microbenchmarking Suite, seed 004 chapter 3 and its manual), so
//! that its tables read like the thesis's and bench/mpi_uoms.c prints the MPI twins beside them.
//!
//! Method (UOMS's):
//! - sizes step ×2 from `--min-size` (default 4) to `--max-size` (default 16 MiB); a size is the
//!   bytes per block (scatter, gather, gather_all, exchange: the piece one rank sends to or gets
//!   from one other rank, as UOMS); data moves as `u8`; reduce and prefix_reduce combine
//!   `size / 8` elements of `i64` (`--reduce-type f64`) per rank with `--reduce-op` and skip
//!   sizes that are not whole elements; barrier has the one size 0;
//! - per size, warm-up iterations then [`repetitions`] timed ones; every iteration is
//!   `upc_barrier` ([`SharedArray::barrier`]), then the call timed alone on every rank; an
//!   iteration's time is the **maximum over ranks** (the per-rank times are collected and reduced
//!   once per size); t_min, t_max and t_avg are over iterations;
//! - the variability filter: a size's reported t_min never drops below the previous (smaller)
//!   size's reported t_min (t_max and t_avg are left as measured, as UOMS does);
//! - BW_aggregated = factor · #bytes / **t_min** (MB = 10^6 B; chapter 3's choice: the best
//!   bandwidth of the repetitions; the manual's appendix uses t_max), factor = THREADS (np),
//!   THREADS² for exchange and gather_all, 1 for memget/memput/memcpy; none for reduce,
//!   prefix_reduce and barrier (printed as `-`, 0 in JSON);
//! - root 0, or with `--rotate-root` root = iteration mod np (the thesis's future work);
//!   permute sends block i to rank (i + 1) mod np;
//! - memget/memput/memcpy are UOMS's remote tests: rank 0 gets from / puts to the block of rank
//!   np−1 (memcpy: from the source array's block on rank np−1 into the destination's block on
//!   rank 0, a shared-to-shared copy made by rank 0); the other ranks only take part in the
//!   barriers.

use std::time::Instant;

use bytemuck::Pod;
use clap::ValueEnum;
use fastmp::op::{Band, Bor, Bxor, Land, Lor, Max, Min, Op, Prod, Sum};
use fastmp::pgas::{self, Algorithm, Collective, SharedArray, Sync};
use fastmp::{Comm, Error, Result};

use crate::report::{Cell, Reporter};
use crate::support::{Sizes, gather_f64s};

/// The suite whose method and layout we follow.
pub const SUITE: &str = "UPC Operations Microbenchmark Suite V1.1";
/// Default size range (UOMS's MINSIZE and MAXSIZE).
pub const DEFAULT_MIN_SIZE: usize = 4;
pub const DEFAULT_MAX_SIZE: usize = 16 << 20;
/// Bytes of a reduction element (`i64` or `f64`).
const REDUCE_ELEM: usize = 8;

/// One UOMS benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Uoms {
    Coll(Collective),
    Memget,
    Memput,
    Memcpy,
    Barrier,
}

/// Every benchmark, in UOMS's order of units.
pub const ALL: [Uoms; 12] = [
    Uoms::Coll(Collective::Broadcast),
    Uoms::Coll(Collective::Scatter),
    Uoms::Coll(Collective::Gather),
    Uoms::Coll(Collective::GatherAll),
    Uoms::Coll(Collective::Exchange),
    Uoms::Coll(Collective::Permute),
    Uoms::Coll(Collective::Reduce),
    Uoms::Coll(Collective::PrefixReduce),
    Uoms::Memget,
    Uoms::Memput,
    Uoms::Memcpy,
    Uoms::Barrier,
];

impl Uoms {
    pub fn name(self) -> &'static str {
        match self {
            Uoms::Coll(c) => c.name(),
            Uoms::Memget => "memget",
            Uoms::Memput => "memput",
            Uoms::Memcpy => "memcpy",
            Uoms::Barrier => "barrier",
        }
    }

    /// Parses [`Uoms::name`]; the error lists the names.
    pub fn from_name(name: &str) -> std::result::Result<Uoms, String> {
        ALL.into_iter().find(|b| b.name() == name).ok_or_else(|| {
            format!("unknown uoms benchmark {name:?} (expected one of: {})", ALL.map(Uoms::name).join(", "))
        })
    }

    /// The UPC function it measures, as UOMS names its sections.
    pub fn upc_name(self) -> String {
        match self {
            Uoms::Coll(c) => format!("upc_all_{}", c.name()),
            other => format!("upc_{}", other.name()),
        }
    }

    pub fn collective(self) -> Option<Collective> {
        match self {
            Uoms::Coll(c) => Some(c),
            _ => None,
        }
    }

    /// Whether the call has a root (`--rotate-root` applies).
    pub fn is_rooted(self) -> bool {
        matches!(
            self,
            Uoms::Coll(Collective::Broadcast | Collective::Scatter | Collective::Gather | Collective::Reduce)
        )
    }

    pub fn is_reduction(self) -> bool {
        matches!(self, Uoms::Coll(Collective::Reduce | Collective::PrefixReduce))
    }

    /// UOMS's bandwidth factor; `None` where it reports no bandwidth.
    pub fn bandwidth_factor(self, np: usize) -> Option<f64> {
        let np = np as f64;
        match self {
            Uoms::Coll(Collective::Exchange | Collective::GatherAll) => Some(np * np),
            Uoms::Coll(Collective::Reduce | Collective::PrefixReduce) | Uoms::Barrier => None,
            Uoms::Coll(_) => Some(np),
            Uoms::Memget | Uoms::Memput | Uoms::Memcpy => Some(1.0),
        }
    }

    /// The sizes measured: barrier has the one size 0, reductions whole elements only.
    pub fn sizes(self, sizes: &Sizes) -> Vec<usize> {
        if self == Uoms::Barrier {
            return vec![0];
        }
        sizes.iter().filter(|s| !self.is_reduction() || s.is_multiple_of(REDUCE_ELEM)).collect()
    }

    /// Elements of (source, destination) blocks for `max` bytes per block of `elem`-byte elements.
    fn block_lens(self, np: usize, max: usize, elem: usize) -> Option<(usize, usize)> {
        let one = max / elem;
        let all = one.checked_mul(np)?;
        Some(match self {
            Uoms::Coll(Collective::Scatter) => (all, one),
            Uoms::Coll(Collective::Gather | Collective::GatherAll) => (one, all),
            Uoms::Coll(Collective::Exchange) => (all, all),
            Uoms::Barrier => (1, 1),
            _ => (one, one),
        })
    }
}

/// UPC's reduction operations (`upc_op_t`), with MPI's spellings as aliases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReduceOp {
    #[value(name = "sum", alias = "add")]
    Add,
    #[value(name = "prod", alias = "mult")]
    Mult,
    Min,
    Max,
    #[value(name = "band", alias = "and")]
    And,
    #[value(name = "bor", alias = "or")]
    Or,
    #[value(name = "bxor", alias = "xor")]
    Xor,
    #[value(name = "land", alias = "logand")]
    LogAnd,
    #[value(name = "lor", alias = "logor")]
    LogOr,
}

impl ReduceOp {
    /// UOMS's header spelling (`UPC_ADD`, ...).
    pub fn upc_name(self) -> &'static str {
        match self {
            ReduceOp::Add => "UPC_ADD",
            ReduceOp::Mult => "UPC_MULT",
            ReduceOp::Min => "UPC_MIN",
            ReduceOp::Max => "UPC_MAX",
            ReduceOp::And => "UPC_AND",
            ReduceOp::Or => "UPC_OR",
            ReduceOp::Xor => "UPC_XOR",
            ReduceOp::LogAnd => "UPC_LOGAND",
            ReduceOp::LogOr => "UPC_LOGOR",
        }
    }

    /// `Err` unless the operation applies to `ty` (the bitwise and logical ones need integers).
    fn check(self, ty: ReduceType) -> std::result::Result<(), String> {
        match (self, ty) {
            (ReduceOp::Add | ReduceOp::Mult | ReduceOp::Min | ReduceOp::Max, _) | (_, ReduceType::I64) => Ok(()),
            (other, ReduceType::F64) => {
                Err(format!("--reduce-op {} needs integers (--reduce-type i64)", other.upc_name()))
            }
        }
    }
}

/// The element type of reduce and prefix_reduce (UOMS's L and D variants).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReduceType {
    I64,
    F64,
}

/// What to measure, from the command line.
pub struct Spec<'a> {
    pub bench: Uoms,
    pub sync: Sync,
    pub op: ReduceOp,
    pub reduce_type: ReduceType,
    pub sizes: &'a Sizes,
    /// `--iterations`: this many at every size (default: [`repetitions`]).
    pub iterations: Option<usize>,
    /// `--algorithm`, forced on the destination array.
    pub algorithm: Option<Algorithm>,
    pub rotate_root: bool,
}

impl Spec<'_> {
    /// Rejects combinations that cannot run (checked before any rank starts).
    pub fn check(&self) -> std::result::Result<(), String> {
        if self.bench.is_reduction() {
            self.op.check(self.reduce_type)?;
        }
        if let (Some(a), Some(c)) = (self.algorithm, self.bench.collective())
            && !c.supports(a)
        {
            let valid: Vec<String> = c.algorithms().iter().map(Algorithm::to_string).collect();
            return Err(format!("{} has no algorithm {a}; valid: {}", c.name(), valid.join(", ")));
        }
        Ok(())
    }

    fn repetitions(&self, size: usize) -> (usize, usize) {
        match self.iterations {
            Some(n) => (n, (n / 10).max(1)),
            None => repetitions(size),
        }
    }
}

/// Timed and warm-up repetitions at `size`: 1000 / 100 up to 8 KiB, then halving as the size
/// doubles, down to 20 / 2 (UOMS bounds its runs by time; this keeps the 16 MiB default quick).
pub fn repetitions(size: usize) -> (usize, usize) {
    let timed = if size <= 8192 { 1000 } else { (1000 * 8192 / size).max(20) };
    (timed, timed / 10)
}

/// The arrays and buffers of one benchmark, made once for the largest size.
pub struct Workload<T: 'static> {
    bench: Uoms,
    pub src: SharedArray<T>,
    pub dst: SharedArray<T>,
    /// memget's destination and memput's source.
    private: Vec<T>,
    perm: Vec<usize>,
    /// The algorithm forced on the destination, kept for arrays remade by [`Workload::fit`].
    forced: Option<(Collective, Algorithm)>,
}

impl<T: Pod> Workload<T> {
    pub fn new(world: &Comm, bench: Uoms, max_bytes: usize) -> Result<Workload<T>> {
        let np = world.size();
        let elem = size_of::<T>();
        let (src_len, dst_len) = bench
            .block_lens(np, max_bytes, elem)
            .filter(|&(s, d)| s.saturating_add(d).saturating_mul(elem) <= isize::MAX as usize / 2)
            .ok_or_else(|| Error::other(format!("{np} ranks x --max-size {max_bytes} do not fit in memory")))?;
        let src = world.shared_array::<T>(src_len)?;
        let dst = world.shared_array::<T>(dst_len)?;
        let private =
            if matches!(bench, Uoms::Memget | Uoms::Memput) { vec![T::zeroed(); max_bytes / elem] } else { vec![] };
        let perm = (0..np).map(|i| (i + 1) % np).collect();
        Ok(Workload { bench, src, dst, private, perm, forced: None })
    }

    /// Uses `algorithm` for `coll` on the destination, now and after [`Workload::fit`].
    pub fn force_algorithm(&mut self, coll: Collective, algorithm: Algorithm) -> Result<()> {
        self.forced = Some((coll, algorithm));
        self.dst.force_algorithm(coll, algorithm)
    }

    /// Makes the arrays right for `size` (collective). A reduction covers the first `np × len`
    /// elements of the whole array, which spread over every rank only if the block is exactly
    /// `len` long: reductions get arrays of that block length for each size; the others keep the
    /// arrays made for the largest size.
    pub fn fit(&mut self, world: &Comm, size: usize) -> Result<()> {
        let len = size / size_of::<T>();
        if !self.bench.is_reduction() || self.src.block_len() == len {
            return Ok(());
        }
        let src = world.shared_array::<T>(len)?;
        let dst = world.shared_array::<T>(len)?;
        if let Some((coll, algorithm)) = self.forced {
            dst.force_algorithm(coll, algorithm)?;
        }
        let old_src = std::mem::replace(&mut self.src, src);
        let old_dst = std::mem::replace(&mut self.dst, dst);
        let freed = old_src.free();
        old_dst.free().and(freed)
    }

    /// One call at `size` bytes per block (`op` is used by the reductions only; it is a type
    /// parameter so that the library's per-element combines inline, as in an application).
    pub fn call<O: Op<T>>(&mut self, root: usize, size: usize, sync: Sync, op: &O) -> Result<()> {
        let (src, dst) = (&self.src, &self.dst);
        let len = size / size_of::<T>();
        let np = src.comm().size();
        let me = src.comm().rank();
        match self.bench {
            Uoms::Coll(Collective::Broadcast) => pgas::broadcast(dst, src, root, len, sync),
            Uoms::Coll(Collective::Scatter) => pgas::scatter(dst, src, root, len, sync),
            Uoms::Coll(Collective::Gather) => pgas::gather(dst, src, root, len, sync),
            Uoms::Coll(Collective::GatherAll) => pgas::gather_all(dst, src, len, sync),
            Uoms::Coll(Collective::Exchange) => pgas::exchange(dst, src, len, sync),
            Uoms::Coll(Collective::Permute) => pgas::permute(dst, src, &self.perm, len, sync),
            Uoms::Coll(Collective::Reduce) => pgas::reduce(dst, src, root, len * np, op, sync),
            Uoms::Coll(Collective::PrefixReduce) => pgas::prefix_reduce(dst, src, len * np, op, sync),
            Uoms::Memget if me == 0 => src.memget(&mut self.private[..len], np - 1, 0),
            Uoms::Memput if me == 0 => dst.memput(&self.private[..len], np - 1, 0),
            Uoms::Memcpy if me == 0 => dst.memcpy(0, 0, src, np - 1, 0, len),
            Uoms::Memget | Uoms::Memput | Uoms::Memcpy => Ok(()),
            Uoms::Barrier => dst.barrier(),
        }
    }

    /// Frees both arrays collectively: an idle rank (memget's targets) must not close its blocks
    /// while rank 0 may still be copying from them, as dropping them alone would.
    pub fn free(self) -> Result<()> {
        let src = self.src.free();
        self.dst.free().and(src)
    }

    /// The algorithm the destination array uses at `size` (`-` for the non-collectives).
    pub fn algorithm(&self, size: usize) -> String {
        match self.bench.collective() {
            Some(c) => self.dst.algorithm(c, size).to_string(),
            None => "-".to_string(),
        }
    }
}

/// One size's times over the iterations (each the maximum over ranks), in nanoseconds.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub repetitions: usize,
    pub t_min_ns: f64,
    pub t_max_ns: f64,
    pub t_avg_ns: f64,
    /// The median iteration (what the tuner ranks algorithms by).
    pub t_median_ns: f64,
}

/// What one measurement does besides the size.
pub struct Run<'o, O> {
    pub sync: Sync,
    pub op: &'o O,
    pub rotate_root: bool,
    /// (timed, warm-up) iterations.
    pub repetitions: (usize, usize),
}

/// Measures `work` at `size`: UOMS's loop of barrier + timed call; the times at rank 0 (`None`
/// elsewhere). `times` is reused across sizes.
pub fn measure<T: Pod, O: Op<T>>(
    world: &Comm,
    work: &mut Workload<T>,
    size: usize,
    run: &Run<'_, O>,
    times: &mut Vec<f64>,
) -> Result<Option<Timing>> {
    let np = world.size();
    let (timed, warm) = run.repetitions;
    times.clear();
    work.fit(world, size)?;
    for i in 0..warm + timed {
        let root = if run.rotate_root { i % np } else { 0 };
        work.dst.barrier()?;
        let start = Instant::now();
        work.call(root, size, run.sync, run.op)?;
        let ns = start.elapsed().as_nanos() as f64;
        if i >= warm {
            times.push(ns);
        }
    }
    let all = gather_f64s(world, times)?;
    if world.rank() != 0 {
        return Ok(None);
    }
    let mut per_iteration: Vec<f64> = (0..timed).map(|i| all.iter().map(|rank| rank[i]).fold(0.0, f64::max)).collect();
    let t_avg_ns = per_iteration.iter().sum::<f64>() / timed as f64;
    per_iteration.sort_unstable_by(f64::total_cmp);
    Ok(Some(Timing {
        repetitions: timed,
        t_min_ns: per_iteration[0],
        t_max_ns: per_iteration[timed - 1],
        t_avg_ns,
        t_median_ns: per_iteration[timed / 2],
    }))
}

/// The `fastmp-bench uoms <benchmark>` run.
pub fn bench(world: &Comm, spec: &Spec, out: &Reporter) -> Result<()> {
    use ReduceOp as R;
    use ReduceType::{F64, I64};
    if !spec.bench.is_reduction() {
        // The operation goes unused: any will do.
        return run_typed::<u8, _>(world, spec, out, &Sum);
    }
    match (spec.reduce_type, spec.op) {
        (I64, R::Add) => run_typed::<i64, _>(world, spec, out, &Sum),
        (I64, R::Mult) => run_typed::<i64, _>(world, spec, out, &Prod),
        (I64, R::Min) => run_typed::<i64, _>(world, spec, out, &Min),
        (I64, R::Max) => run_typed::<i64, _>(world, spec, out, &Max),
        (I64, R::And) => run_typed::<i64, _>(world, spec, out, &Band),
        (I64, R::Or) => run_typed::<i64, _>(world, spec, out, &Bor),
        (I64, R::Xor) => run_typed::<i64, _>(world, spec, out, &Bxor),
        (I64, R::LogAnd) => run_typed::<i64, _>(world, spec, out, &Land),
        (I64, R::LogOr) => run_typed::<i64, _>(world, spec, out, &Lor),
        (F64, R::Add) => run_typed::<f64, _>(world, spec, out, &Sum),
        (F64, R::Mult) => run_typed::<f64, _>(world, spec, out, &Prod),
        (F64, R::Min) => run_typed::<f64, _>(world, spec, out, &Min),
        (F64, R::Max) => run_typed::<f64, _>(world, spec, out, &Max),
        (F64, op) => Err(Error::InvalidArgument(op.check(F64).unwrap_err())),
    }
}

fn run_typed<T: Pod, O: Op<T>>(world: &Comm, spec: &Spec, out: &Reporter, op: &O) -> Result<()> {
    let np = world.size();
    let sizes = spec.bench.sizes(spec.sizes);
    let max = sizes.last().copied().unwrap_or(0);
    let mut work = Workload::<T>::new(world, spec.bench, max)?;
    if let (Some(algorithm), Some(coll)) = (spec.algorithm, spec.bench.collective()) {
        work.force_algorithm(coll, algorithm)?;
    }
    let out = Reporter { bench: spec.bench.name(), ..*out };
    let factor = spec.bench.bandwidth_factor(np);
    if out.printer && !out.json {
        print_header(spec, &sizes, out.device, np);
    }
    let mut times = Vec::with_capacity(spec.repetitions(0).0.max(spec.repetitions(max).0));
    let mut floor = 0.0f64;
    let sync = spec.sync.to_string();
    for size in sizes {
        let run = Run { sync: spec.sync, op, rotate_root: spec.rotate_root, repetitions: spec.repetitions(size) };
        let Some(t) = measure(world, &mut work, size, &run, &mut times)? else { continue };
        // UOMS's variability filter.
        let t_min = t.t_min_ns.max(floor);
        floor = t_min;
        let bw = factor.map(|f| if t_min > 0.0 { f * size as f64 * 1e3 / t_min } else { 0.0 });
        let algorithm = work.algorithm(size);
        if out.json {
            out.row_cells(
                size,
                &[
                    ("t_min_ns", Cell::Num(t_min)),
                    ("t_max_ns", Cell::Num(t.t_max_ns)),
                    ("t_avg_ns", Cell::Num(t.t_avg_ns)),
                    ("bw_mb_s", Cell::Num(bw.unwrap_or(0.0))),
                    ("repetitions", Cell::Int(t.repetitions as u64)),
                    ("sync", Cell::Text(&sync)),
                    ("algorithm", Cell::Text(&algorithm)),
                ],
            );
        } else {
            let bw = bw.map_or_else(|| "-".to_string(), |b| format!("{b:.2}"));
            println!(
                "{size:>12} {:>12} {t_min:>14.0} {:>14.0} {:>14.2} {bw:>22}",
                t.repetitions, t.t_max_ns, t.t_avg_ns
            );
        }
    }
    work.free()
}

/// The column titles of a UOMS table.
pub fn column_line() -> String {
    format!(
        "{:>12} {:>12} {:>14} {:>14} {:>14} {:>22}",
        "#bytes", "#repetitions", "t_min[nsec]", "t_max[nsec]", "t_avg[nsec]", "BW_aggregated[MB/sec]"
    )
}

/// UOMS's header: suite, date, system, sizes, sync mode, reduce op, the benchmark list, then
/// the benchmark's section title and the column titles.
fn print_header(spec: &Spec, sizes: &[usize], device: &str, np: usize) {
    let field = |name: &str, value: &str| println!("# {name:<26}: {value}");
    println!("# fastmp {SUITE} (UOMS methodology)");
    field("Date", &utc_now());
    field("Machine", std::env::consts::ARCH);
    field("System", std::env::consts::OS);
    field("Device", device);
    field("Warmup iteration", "Enabled");
    println!("# Problem sizes:");
    for size in sizes {
        println!("# {size}");
    }
    let mode = spec.sync.to_string().to_ascii_uppercase().replace(',', "|").replace("IN_", "UPC_IN_");
    field("Synchronization mode", &mode.replace("OUT_", "UPC_OUT_"));
    let elem = match spec.reduce_type {
        ReduceType::I64 => "i64 (UPC_L)",
        ReduceType::F64 => "f64 (UPC_D)",
    };
    field("Reduce Op", &format!("{} on {elem}", spec.op.upc_name()));
    field("Root", if spec.rotate_root { "rotating (iteration mod THREADS)" } else { "0" });
    let algorithm = match (spec.algorithm, spec.bench.collective()) {
        (Some(a), Some(_)) => format!("{a} (forced)"),
        (None, Some(_)) => "chosen per size by the tuning rules".to_string(),
        _ => "-".to_string(),
    };
    field("Algorithm", &algorithm);
    println!("# Time: per iteration the maximum over threads; t_min/t_max/t_avg over iterations;");
    println!("#   t_min never below the previous size's (UOMS's variability filter)");
    println!("# BW_aggregated: factor x #bytes / t_min (MB = 10^6 B); factor THREADS, THREADS^2 for");
    println!("#   exchange and gather_all, 1 for memget/memput/memcpy, none for reductions and barrier");
    println!("# List of Benchmarks to run:");
    println!("# {}", spec.bench.upc_name());
    println!();
    println!("# Benchmarking {}", spec.bench.upc_name());
    println!("# #processes = {np}");
    println!("{}", column_line());
}

/// The current time as `YYYY-MM-DD HH:MM:SS UTC` (UOMS prints the date of the run).
fn utc_now() -> String {
    utc(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()))
}

/// `secs` after the Unix epoch as `YYYY-MM-DD HH:MM:SS UTC`.
fn utc(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem / 60 % 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_factors_follow_uoms() {
        for b in ALL {
            assert_eq!(Uoms::from_name(b.name()).unwrap(), b);
        }
        assert!(Uoms::from_name("allreduce").unwrap_err().contains("broadcast, scatter"));
        assert_eq!(Uoms::Coll(Collective::Exchange).bandwidth_factor(4), Some(16.0));
        assert_eq!(Uoms::Coll(Collective::Scatter).bandwidth_factor(4), Some(4.0));
        assert_eq!(Uoms::Memput.bandwidth_factor(4), Some(1.0));
        assert_eq!(Uoms::Coll(Collective::Reduce).bandwidth_factor(4), None);
        let sizes = Sizes { min: 4, max: 64 };
        assert_eq!(Uoms::Coll(Collective::Reduce).sizes(&sizes), [8, 16, 32, 64]);
        assert_eq!(Uoms::Barrier.sizes(&sizes), [0]);
        assert_eq!(repetitions(16 << 20), (20, 2));
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_868_799), "2000-02-29 23:59:59 UTC");
        assert_eq!(utc(1_767_225_600), "2026-01-01 00:00:00 UTC");
    }
}
