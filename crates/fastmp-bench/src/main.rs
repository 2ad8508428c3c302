//! `fastmp-bench`: OSU-format micro-benchmarks for fastmp, `fastmp-bench uoms <benchmark>`
//! for the PGAS collectives in the format of UOMS (the UPC Operations Microbenchmarking Suite),
//! and `fastmp-bench halo` / `remap` for the distributed arrays of `fastmp-darray`;
//! `fastmp-bench plot --input F --out DIR` draws saved series as SVGs (see `plot.rs`).
//!
//! With no launcher environment, `--np` starts that many thread ranks on the shm device (uoms
//! and `tune --pgas`: on `--device`).

mod coll;
mod darray;
mod halo;
mod nbc;
mod pgas_tune;
mod plot;
mod pt2pt;
mod report;
mod ring_p2p;
mod rma;
mod scaling;
mod support;
mod tune;
mod uoms;

use std::path::PathBuf;

use clap::builder::PossibleValue;
use clap::{Parser, ValueEnum};
use fastmp::coll::{Algorithm, Collective};
use fastmp::{Comm, Config, DeviceKind, Pin};

use coll::Iterations;
use report::Reporter;
use support::Sizes;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pt2pt {
    Latency,
    Bw,
    Bibw,
    MbwMr,
    Strided,
}

/// What to run: a point-to-point benchmark, a collective benchmark, the nonblocking twin of a
/// collective (one of `nbc::NONBLOCKING`), the hand-written ring allreduce the library is
/// compared with, a distributed-array collective, start-up and memory by rank count, or the tuner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bench {
    Pt2pt(Pt2pt),
    Coll(Collective),
    Nbc(Collective),
    AllreduceRingP2p,
    HaloPersistent,
    Darray(darray::Op),
    Rma(rma::Rma),
    Uoms,
    Scaling,
    Tune,
}

const PT2PT: [Pt2pt; 5] = [Pt2pt::Latency, Pt2pt::Bw, Pt2pt::Bibw, Pt2pt::MbwMr, Pt2pt::Strided];
const BENCH_COUNT: usize = PT2PT.len() + rma::ALL.len() + Collective::ALL.len() + nbc::NONBLOCKING.len() + 7;

/// Every benchmark name, in the order `--help` lists them.
const BENCHES: [Bench; BENCH_COUNT] = {
    let mut all = [Bench::Tune; BENCH_COUNT];
    let mut i = 0;
    while i < PT2PT.len() {
        all[i] = Bench::Pt2pt(PT2PT[i]);
        i += 1;
    }
    let mut j = 0;
    while j < rma::ALL.len() {
        all[i] = Bench::Rma(rma::ALL[j]);
        (i, j) = (i + 1, j + 1);
    }
    j = 0;
    while j < Collective::ALL.len() {
        all[i] = Bench::Coll(Collective::ALL[j]);
        (i, j) = (i + 1, j + 1);
    }
    j = 0;
    while j < nbc::NONBLOCKING.len() {
        all[i] = Bench::Nbc(nbc::NONBLOCKING[j]);
        (i, j) = (i + 1, j + 1);
    }
    all[i] = Bench::AllreduceRingP2p;
    all[i + 1] = Bench::HaloPersistent;
    all[i + 2] = Bench::Darray(darray::Op::Halo);
    all[i + 3] = Bench::Darray(darray::Op::Remap);
    all[i + 4] = Bench::Uoms;
    all[i + 5] = Bench::Scaling;
    all
};

impl ValueEnum for Bench {
    fn value_variants<'a>() -> &'a [Self] {
        &BENCHES
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.name()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PinArg {
    Compact,
    Scatter,
    None,
}

#[derive(Parser, Debug)]
#[command(name = "fastmp-bench", about = "OSU-style micro-benchmarks for fastmp, and the collective tuner")]
struct Args {
    /// Benchmark to run (`tune` measures every collective algorithm and writes a tuning file;
    /// `uoms` runs one benchmark of the UPC Operations Microbenchmarking Suite on the PGAS
    /// collectives).
    bench: Bench,
    /// uoms: the benchmark (broadcast, scatter, gather, gather_all, exchange, permute, reduce,
    /// prefix_reduce, memget, memput, memcpy or barrier).
    #[arg(value_name = "UOMS_BENCHMARK")]
    uoms: Option<String>,
    /// Ranks (thread ranks on the shm device unless a launcher set FASTMP_NP).
    #[arg(long, default_value_t = 2)]
    np: usize,
    /// Device of the thread ranks (default: FASTMP_DEVICE, else shm; tcp ranks talk over
    /// loopback sockets). Under a launcher the launcher's device applies.
    #[arg(long, value_parser = parse_device, value_name = "shm|tcp")]
    device: Option<DeviceKind>,
    /// Pin ranks to cores.
    #[arg(long, value_enum, default_value_t = PinArg::Compact)]
    pin: PinArg,
    /// One-sided benchmarks: how each window is made.
    #[arg(long, value_enum, value_name = "KIND")]
    win: Option<rma::WinKind>,
    /// One-sided benchmarks: synchronisation (default flush: lock shared once, then op + flush;
    /// put_bibw: pscw).
    #[arg(long, value_enum, value_name = "MODE")]
    sync: Option<rma::SyncMode>,
    /// Smallest message size in bytes (default: 0 for latency, 4 for reductions and
    /// acc_latency, 1 otherwise; fop_latency and cas_latency have the one size 8).
    #[arg(long)]
    min_size: Option<usize>,
    /// Largest message size in bytes (default: 4 MiB point-to-point and one-sided latency, 1 MiB
    /// collectives and one-sided bandwidth).
    #[arg(long)]
    max_size: Option<usize>,
    /// halo and remap: N of the N×N f64 array (default: the sweep 256, 512, ..., 4096).
    #[arg(long, value_name = "N")]
    size: Option<usize>,
    /// halo: ghost cells on each side of both dimensions (default 1).
    #[arg(long, value_name = "W")]
    width: Option<usize>,
    /// One JSON object per line instead of the OSU table.
    #[arg(long)]
    json: bool,
    /// Eager/rendezvous switch point in bytes (default: the library's).
    #[arg(long)]
    eager_limit: Option<usize>,
    /// Collectives (blocking and nonblocking): force this algorithm (default: the tuning rules
    /// choose per size).
    #[arg(long, value_name = "NAME")]
    algorithm: Option<String>,
    /// Blocking allreduce, allgather, alltoall, reduce, scan: call the MPI_IN_PLACE variant.
    #[arg(long)]
    in_place: bool,
    /// allreduce_ring_p2p: messages per ring block.
    #[arg(long, value_name = "S")]
    segments: Option<usize>,
    /// Timed iterations per size (default: OSU's; point-to-point latency and strided 10000 /
    /// 1000 above 8 KiB, bw, bibw and mbw_mr 100 / 20 windows of 64 messages; collectives
    /// 1000 / 100; ibarrier 100; one-sided latency 10000 / 1000,
    /// bandwidth 100 / 20; halo 1000; remap about 1 GiB moved, 5 to 1000; tune uses a tenth of
    /// the collectives' counts; scaling: child processes per rank count, default 3).
    #[arg(long, value_name = "N")]
    iterations: Option<usize>,
    /// Tune: process counts to measure with thread ranks (default 2,4,8; under a launcher its
    /// process count is measured). Scaling: rank counts (default 16,64,256,512).
    #[arg(long, value_delimiter = ',')]
    np_list: Option<Vec<usize>>,
    /// Tune: a file of measured points (JSON lines) that accumulates across runs; the tuning
    /// file is made from all of them.
    #[arg(long, value_name = "FILE")]
    points: Option<PathBuf>,
    /// Tune: only these collectives (default: all).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    collectives: Vec<String>,
    /// Tune: where to write the JSON tuning file (default fastmp-tuning.json;
    /// with --pgas fastmp-pgas-tuning.json).
    #[arg(long, visible_alias = "out")]
    output: Option<PathBuf>,
    /// Tune: time the PGAS collectives' algorithms (on --np thread ranks) and write a file for
    /// FASTMP_PGAS_TUNING_FILE instead.
    #[arg(long)]
    pgas: bool,
    /// uoms: UPC sync flags, e.g. in_allsync,out_allsync (default) or in_nosync,out_mysync.
    #[arg(long, value_name = "FLAGS")]
    sync_mode: Option<String>,
    /// uoms reduce and prefix_reduce: the operation (UPC_ADD by default).
    #[arg(long, value_enum, value_name = "OP")]
    reduce_op: Option<uoms::ReduceOp>,
    /// uoms reduce and prefix_reduce: the element type (default i64).
    #[arg(long, value_enum, value_name = "TYPE")]
    reduce_type: Option<uoms::ReduceType>,
    /// uoms broadcast, scatter, gather, reduce: the root changes every iteration.
    #[arg(long)]
    rotate_root: bool,
}

fn parse_device(text: &str) -> Result<DeviceKind, String> {
    text.parse().map_err(|e: fastmp::Error| e.to_string())
}

impl Pt2pt {
    fn name(self) -> &'static str {
        match self {
            Pt2pt::Latency => "latency",
            Pt2pt::Bw => "bw",
            Pt2pt::Bibw => "bibw",
            Pt2pt::MbwMr => "mbw_mr",
            Pt2pt::Strided => "strided",
        }
    }

    fn check_np(self, np: usize) -> Result<(), String> {
        match self {
            Pt2pt::MbwMr if np < 2 || !np.is_multiple_of(2) => {
                Err(format!("mbw_mr needs an even number of ranks, got {np}"))
            }
            Pt2pt::Latency | Pt2pt::Bw | Pt2pt::Bibw | Pt2pt::Strided => check_two_ranks(self.name(), np),
            _ => Ok(()),
        }
    }
}

fn check_two_ranks(bench: &str, np: usize) -> Result<(), String> {
    if np == 2 { Ok(()) } else { Err(format!("{bench} needs exactly 2 ranks, got {np}")) }
}

impl Bench {
    fn name(self) -> &'static str {
        match self {
            Bench::Pt2pt(p) => p.name(),
            Bench::Coll(c) => c.name(),
            Bench::Nbc(c) => nbc::name(c),
            Bench::AllreduceRingP2p => "allreduce_ring_p2p",
            Bench::HaloPersistent => "halo_persistent",
            Bench::Darray(op) => op.name(),
            Bench::Rma(r) => r.name(),
            Bench::Uoms => "uoms",
            Bench::Scaling => "scaling",
            Bench::Tune => "tune",
        }
    }
}

impl Args {
    /// The size range, with each benchmark's OSU defaults.
    fn sizes(&self) -> Result<Sizes, String> {
        let min = self.min_size.unwrap_or(match self.bench {
            Bench::Uoms => uoms::DEFAULT_MIN_SIZE,
            Bench::Tune if self.pgas => pgas_tune::DEFAULT_MIN_SIZE,
            Bench::Pt2pt(Pt2pt::Latency) => 0,
            Bench::Pt2pt(Pt2pt::Strided) => 8,
            Bench::Coll(c) | Bench::Nbc(c) if coll::is_reduction(c) => 4,
            Bench::AllreduceRingP2p => 4,
            Bench::HaloPersistent => 8,
            Bench::Rma(r) => r.default_sizes().0,
            _ => 1,
        });
        let max = self.max_size.unwrap_or(match self.bench {
            Bench::Pt2pt(Pt2pt::Strided) => pt2pt::STRIDED_MAX_SIZE,
            Bench::Pt2pt(_) => 1 << 22,
            Bench::Rma(r) => r.default_sizes().1,
            Bench::Uoms => uoms::DEFAULT_MAX_SIZE,
            _ => 1 << 20,
        });
        if min > max {
            return Err(format!("--min-size {min} is larger than --max-size {max}"));
        }
        Ok(Sizes { min, max })
    }

    fn iterations(&self, default: Iterations) -> Result<Iterations, String> {
        match self.iterations {
            Some(0) => Err("--iterations must be at least 1".into()),
            Some(n) => Ok(Iterations::fixed(n)),
            None => Ok(default),
        }
    }

    /// Rejects options that do not apply to the chosen benchmark.
    fn check_options(&self) -> Result<(), String> {
        let name = self.bench.name();
        let given = |flag: &str, set: bool, applies: bool| {
            if set && !applies { Err(format!("{flag} does not apply to {name}")) } else { Ok(()) }
        };
        let is_coll = matches!(self.bench, Bench::Coll(_) | Bench::Nbc(_));
        let is_tune = self.bench == Bench::Tune;
        let is_scaling = self.bench == Bench::Scaling;
        let is_ring = self.bench == Bench::AllreduceRingP2p;
        let is_halo = self.bench == Bench::HaloPersistent;
        let darray = match self.bench {
            Bench::Darray(op) => Some(op),
            _ => None,
        };
        let uoms = match self.bench {
            Bench::Uoms => Some(self.uoms_bench()?),
            _ => None,
        };
        given("UOMS_BENCHMARK", self.uoms.is_some(), uoms.is_some())?;
        let uoms_coll = uoms.is_some_and(|b| b.collective().is_some());
        given("--algorithm", self.algorithm.is_some(), is_coll || uoms_coll)?;
        given("--sync-mode", self.sync_mode.is_some(), uoms_coll)?;
        let uoms_reduction = uoms.is_some_and(uoms::Uoms::is_reduction);
        given("--reduce-op", self.reduce_op.is_some(), uoms_reduction)?;
        given("--reduce-type", self.reduce_type.is_some(), uoms_reduction)?;
        given("--rotate-root", self.rotate_root, uoms.is_some_and(uoms::Uoms::is_rooted))?;
        given("--pgas", self.pgas, is_tune)?;
        given("--device", self.device.is_some(), uoms.is_some() || (is_tune && self.pgas))?;
        let rma = match self.bench {
            Bench::Rma(r) => Some(r),
            _ => None,
        };
        let timed = is_coll
            || matches!(self.bench, Bench::Pt2pt(_))
            || is_tune
            || is_scaling
            || is_ring
            || is_halo
            || darray.is_some()
            || rma.is_some()
            || uoms.is_some();
        given("--iterations", self.iterations.is_some(), timed)?;
        given("--win", self.win.is_some(), rma.is_some())?;
        given("--sync", self.sync.is_some(), rma.is_some())?;
        let one_size = rma.is_some_and(rma::Rma::is_single_element);
        given("--min-size", self.min_size.is_some(), !one_size && darray.is_none())?;
        given("--max-size", self.max_size.is_some(), !one_size && darray.is_none())?;
        given("--size", self.size.is_some(), darray.is_some())?;
        given("--width", self.width.is_some(), darray == Some(darray::Op::Halo))?;
        if self.size == Some(0) {
            return Err("--size must be at least 1".into());
        }
        if self.width == Some(0) {
            return Err("--width must be at least 1".into());
        }
        given("--segments", self.segments.is_some(), is_ring)?;
        let in_place = matches!(self.bench, Bench::Coll(c) if coll::IN_PLACE.contains(&c));
        given("--in-place", self.in_place, in_place)?;
        if self.segments == Some(0) {
            return Err("--segments must be at least 1".into());
        }
        given("--collectives", !self.collectives.is_empty(), is_tune)?;
        given("--np-list", self.np_list.is_some(), (is_tune && !self.pgas) || is_scaling)?;
        given("--points", self.points.is_some(), is_tune && !self.pgas)?;
        given("--json", self.json, !is_tune)
    }

    /// The UOMS benchmark named after `uoms`.
    fn uoms_bench(&self) -> Result<uoms::Uoms, String> {
        let name = self
            .uoms
            .as_deref()
            .ok_or_else(|| format!("uoms needs a benchmark: one of {}", uoms::ALL.map(uoms::Uoms::name).join(", ")))?;
        uoms::Uoms::from_name(name)
    }
}

/// Parses `--algorithm` for `coll`; the error lists the valid names.
fn parse_algorithm(coll: Collective, name: &str) -> Result<Algorithm, String> {
    let valid = || coll.algorithms().iter().map(|a| a.name()).collect::<Vec<_>>().join(", ");
    let algorithm =
        Algorithm::from_name(name).map_err(|_| format!("unknown algorithm {name:?} for {coll}; valid: {}", valid()))?;
    if !coll.algorithms().contains(&algorithm) {
        return Err(format!("{coll} has no algorithm {:?}; valid: {}", algorithm.name(), valid()));
    }
    Ok(algorithm)
}

fn main() {
    scaling::child_main_if_requested();
    let mut words = std::env::args().skip(1);
    if words.next().as_deref() == Some("plot") {
        if let Err(e) = plot::main(words.collect()) {
            eprintln!("fastmp-bench plot: {e}");
            std::process::exit(1);
        }
        return;
    }
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("fastmp-bench: {e}");
        std::process::exit(1);
    }
}

/// The launch configuration from the environment and the command line: `--np` thread ranks
/// unless a launcher set FASTMP_NP (tune sets its own counts).
fn base_config(args: &Args) -> Result<Config, String> {
    let mut config = fastmp::init().map_err(|e| e.to_string())?;
    if std::env::var_os("FASTMP_NP").is_none() {
        config = config.np(args.np);
    }
    config = config.pin(match args.pin {
        PinArg::Compact => Pin::Compact,
        PinArg::Scatter => Pin::Scatter,
        PinArg::None => Pin::None,
    });
    if let Some(limit) = args.eager_limit {
        config = config.eager_limit(limit);
    }
    if let Some(device) = args.device {
        config = config.device(device);
    }
    Ok(config)
}

fn run(args: &Args) -> Result<(), String> {
    args.check_options()?;
    let sizes = args.sizes()?;
    let config = base_config(args)?;
    let bench = match args.bench {
        Bench::Scaling => {
            let np_list = args.np_list.clone().unwrap_or(scaling::DEFAULT_NP.to_vec());
            let repeats = match args.iterations {
                Some(0) => return Err("--iterations must be at least 1".into()),
                n => n.unwrap_or(scaling::DEFAULT_REPEATS),
            };
            return scaling::run(&np_list, repeats, args.json);
        }
        Bench::Tune if args.pgas => {
            let collectives = args
                .collectives
                .iter()
                .map(|c| fastmp::pgas::Collective::from_name(c).map_err(|e| e.to_string()))
                .collect::<Result<_, _>>()?;
            let plan = pgas_tune::Plan { collectives, sizes, iterations: args.iterations };
            let output = args.output.clone().unwrap_or_else(|| "fastmp-pgas-tuning.json".into());
            return pgas_tune::run(config, &plan, &output);
        }
        Bench::Uoms => {
            let bench = args.uoms_bench()?;
            let sync = match &args.sync_mode {
                Some(flags) => fastmp::pgas::Sync::from_names(flags).map_err(|e| format!("--sync-mode: {e}"))?,
                None => fastmp::pgas::Sync::default(),
            };
            let algorithm = args
                .algorithm
                .as_deref()
                .map(|name| fastmp::pgas::Algorithm::from_name(name).map_err(|e| format!("--algorithm: {e}")))
                .transpose()?;
            let spec = uoms::Spec {
                bench,
                sync,
                op: args.reduce_op.unwrap_or(uoms::ReduceOp::Add),
                reduce_type: args.reduce_type.unwrap_or(uoms::ReduceType::I64),
                sizes: &sizes,
                iterations: match args.iterations {
                    Some(0) => return Err("--iterations must be at least 1".into()),
                    n => n,
                },
                algorithm,
                rotate_root: args.rotate_root,
            };
            spec.check()?;
            return launch(config, args, |world, out| uoms::bench(world, &spec, out));
        }
        Bench::Tune => {
            let collectives = args
                .collectives
                .iter()
                .map(|c| Collective::from_name(c).map_err(|e| e.to_string()))
                .collect::<Result<_, _>>()?;
            let plan = tune::Plan {
                np_list: args.np_list.clone(),
                points: args.points.clone(),
                collectives,
                sizes,
                iterations: args.iterations(Iterations::TUNE)?,
            };
            let output = args.output.clone().unwrap_or_else(|| "fastmp-tuning.json".into());
            return tune::run(&config, &plan, &output);
        }
        Bench::Pt2pt(p) => p,
        Bench::AllreduceRingP2p => {
            let iterations = args.iterations(Iterations::OSU)?;
            let segments = args.segments.unwrap_or(ring_p2p::DEFAULT_SEGMENTS);
            return launch(config, args, |world, out| ring_p2p::bench(world, &sizes, iterations, segments, out));
        }
        Bench::HaloPersistent => {
            let iterations = args.iterations(Iterations::OSU)?;
            return launch(config, args, |world, out| halo::bench(world, &sizes, iterations, out));
        }
        Bench::Darray(op) => {
            let spec = darray::Spec {
                op,
                sizes: args.size.map_or(darray::DEFAULT_SIZES.to_vec(), |n| vec![n]),
                width: args.width.unwrap_or(1),
                iterations: match args.iterations {
                    Some(0) => return Err("--iterations must be at least 1".into()),
                    n => n,
                },
            };
            return launch(config, args, |world, out| darray::bench(world, &spec, out));
        }
        Bench::Rma(bench) => {
            let sync = args.sync.unwrap_or(bench.default_sync());
            bench.check(sync, &sizes)?;
            check_two_ranks(bench.name(), config.get_np())?;
            let spec = rma::Spec {
                bench,
                win: args.win.unwrap_or(rma::WinKind::Allocate),
                sync,
                sizes: &sizes,
                iterations: args.iterations.map(|_| args.iterations(Iterations::OSU)).transpose()?,
            };
            return launch(config, args, |world, out| rma::bench(world, &spec, out));
        }
        Bench::Coll(c) | Bench::Nbc(c) => {
            let spec = coll::Spec {
                coll: c,
                forced: args.algorithm.as_deref().map(|name| parse_algorithm(c, name)).transpose()?,
                sizes: &sizes,
                iterations: args.iterations(Iterations::OSU)?,
                in_place: args.in_place,
            };
            let nonblocking = matches!(args.bench, Bench::Nbc(_));
            return launch(config, args, |world, out| {
                if nonblocking { nbc::bench(world, &spec, out) } else { coll::bench(world, &spec, out) }
            });
        }
    };
    bench.check_np(config.get_np())?;
    let iterations = args.iterations(match bench {
        Pt2pt::Latency | Pt2pt::Strided => pt2pt::LATENCY_ITERATIONS,
        Pt2pt::Bw | Pt2pt::Bibw | Pt2pt::MbwMr => pt2pt::BW_ITERATIONS,
    })?;
    launch(config, args, |world, out| match bench {
        Pt2pt::Latency => pt2pt::latency(world, &sizes, iterations, out),
        Pt2pt::Bw => pt2pt::bw(world, &sizes, iterations, out),
        Pt2pt::Bibw => pt2pt::bibw(world, &sizes, iterations, out),
        Pt2pt::MbwMr => pt2pt::mbw_mr(world, &sizes, iterations, out),
        Pt2pt::Strided => pt2pt::strided(world, &sizes, iterations, out),
    })
}

/// Runs `body` on every rank; rank 0 prints.
fn launch<F>(config: Config, args: &Args, body: F) -> Result<(), String>
where
    F: Fn(&Comm, &Reporter) -> fastmp::Result<()> + Sync,
{
    config
        .run(|world: Comm| {
            let out = Reporter {
                bench: args.bench.name(),
                device: world.device_name(),
                np: world.size(),
                json: args.json,
                printer: world.rank() == 0,
                sized: !matches!(args.bench, Bench::Nbc(c) if !nbc::has_size(c)),
            };
            body(&world, &out)
        })
        .map(drop)
        .map_err(|e| e.to_string())
}
