//! `fastmp-bench`: OSU-format micro-benchmarks for fastmp.
//!
//! With no launcher environment, `--np` starts that many thread ranks on the shm device.

mod pt2pt;
mod report;
mod support;

use clap::{Parser, ValueEnum};
use fastmp::{Comm, Pin};

use report::Reporter;
use support::Sizes;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Bench {
    Latency,
    Bw,
    Bibw,
    #[value(name = "mbw_mr")]
    MbwMr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PinArg {
    Compact,
    Scatter,
    None,
}

#[derive(Parser, Debug)]
#[command(name = "fastmp-bench", about = "OSU-style micro-benchmarks for fastmp")]
struct Args {
    /// Benchmark to run.
    bench: Bench,
    /// Ranks (thread ranks on the shm device unless a launcher set FASTMP_NP).
    #[arg(long, default_value_t = 2)]
    np: usize,
    /// Pin ranks to cores.
    #[arg(long, value_enum, default_value_t = PinArg::Compact)]
    pin: PinArg,
    /// Smallest message size in bytes (default: 0 for latency, 1 otherwise).
    #[arg(long)]
    min_size: Option<usize>,
    /// Largest message size in bytes.
    #[arg(long, default_value_t = 1 << 22)]
    max_size: usize,
    /// One JSON object per line instead of the OSU table.
    #[arg(long)]
    json: bool,
    /// Eager/rendezvous switch point in bytes (default: the library's).
    #[arg(long)]
    eager_limit: Option<usize>,
}

impl Bench {
    fn name(self) -> &'static str {
        match self {
            Bench::Latency => "latency",
            Bench::Bw => "bw",
            Bench::Bibw => "bibw",
            Bench::MbwMr => "mbw_mr",
        }
    }

    fn check_np(self, np: usize) -> Result<(), String> {
        match self {
            Bench::MbwMr if np < 2 || !np.is_multiple_of(2) => {
                Err(format!("mbw_mr needs an even number of ranks, got {np}"))
            }
            Bench::Latency | Bench::Bw | Bench::Bibw if np != 2 => {
                Err(format!("{} needs exactly 2 ranks, got {np}", self.name()))
            }
            _ => Ok(()),
        }
    }
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("fastmp-bench: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Result<(), String> {
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
    let np = config.get_np();
    args.bench.check_np(np)?;
    let min = args.min_size.unwrap_or(if args.bench == Bench::Latency { 0 } else { 1 });
    if min > args.max_size {
        return Err(format!("--min-size {min} is larger than --max-size {}", args.max_size));
    }
    let sizes = Sizes { min, max: args.max_size };
    let bench = args.bench;
    let json = args.json;
    config
        .run(|world: Comm| {
            let out = Reporter {
                bench: bench.name(),
                device: world.device_name(),
                np: world.size(),
                json,
                printer: world.rank() == 0,
            };
            match bench {
                Bench::Latency => pt2pt::latency(&world, &sizes, &out),
                Bench::Bw => pt2pt::bw(&world, &sizes, &out),
                Bench::Bibw => pt2pt::bibw(&world, &sizes, &out),
                Bench::MbwMr => pt2pt::mbw_mr(&world, &sizes, &out),
            }
        })
        .map(drop)
        .map_err(|e| e.to_string())
}
