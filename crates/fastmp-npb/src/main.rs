//! `fastmp-npb <ep|is|cg|mg|ft> --class S|W|A|B`: runs one NAS Parallel Benchmarks kernel on
//! fastmp, prints NPB's report (or `--json`: one line) and exits non-zero unless the result
//! verifies.
//!
//! Without a launcher the ranks are `--np` threads (the shm device, or `--device tcp` over
//! loopback). Under `fastmprun`, `mpirun` or `srun` each process is one rank of the launcher's
//! job, and the same binary runs unchanged.

use std::process::ExitCode;

use clap::Parser;
use fastmp::{Config, DeviceKind, Pin};
use fastmp_npb::{Class, Kernel, Outcome};

#[derive(Parser, Debug)]
#[command(version, about = "The NAS Parallel Benchmarks kernels on fastmp, verified against NPB's official values")]
struct Args {
    /// The kernel: ep, is, cg, mg or ft.
    kernel: Kernel,
    /// Problem class: S, W, A, B (C where the kernel and the machine allow).
    #[arg(long, short)]
    class: Class,
    /// Thread ranks (default FASTMP_NP, else 1). Under a launcher its job size applies.
    #[arg(long)]
    np: Option<usize>,
    /// Device of the thread ranks (default FASTMP_DEVICE, else shm). Under a launcher its
    /// device applies.
    #[arg(long, value_name = "shm|tcp")]
    device: Option<DeviceKind>,
    /// Pinning of ranks to cores: compact, scatter or none (default FASTMP_PIN, else compact).
    #[arg(long, value_name = "compact|scatter|none")]
    pin: Option<Pin>,
    /// Print one JSON line instead of NPB's report.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(outcome) if outcome.verified() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(message) => {
            eprintln!("fastmp-npb: {message}");
            ExitCode::from(2)
        }
    }
}

/// The job's configuration: the launcher's, else `--np` thread ranks.
fn config(args: &Args) -> Result<Config, String> {
    let mut config = fastmp::init().map_err(|e| e.to_string())?;
    if std::env::var_os("FASTMP_NP").is_none() || args.np.is_some() {
        config = config.np(args.np.unwrap_or(1));
    }
    if let Some(device) = args.device {
        config = config.device(device);
    }
    if args.pin.is_some() || std::env::var_os("FASTMP_PIN").is_none() {
        config = config.pin(args.pin.unwrap_or(Pin::Compact));
    }
    Ok(config)
}

/// Runs the kernel on every rank; rank 0 prints. Returns this process's view of the outcome.
fn run(args: &Args) -> Result<Outcome, String> {
    let config = config(args)?;
    args.kernel
        .check(args.class, config.get_np())
        .map_err(|why| format!("{} class {}: {why}", args.kernel, args.class))?;
    let (kernel, class, json) = (args.kernel, args.class, args.json);
    let outcomes = config
        .run(move |world| {
            if world.rank() == 0 && !json {
                println!(
                    "\n\n NAS Parallel Benchmarks (fastmp) -- {kernel} Benchmark\n\n Class {class}, {} ranks on the {} device\n",
                    world.size(),
                    world.device_name()
                );
            }
            let outcome = kernel.run(&world, class)?;
            if world.rank() == 0 {
                if json {
                    println!("{}", outcome.json());
                } else {
                    print!("{}", outcome.report());
                }
            }
            Ok(outcome)
        })
        .map_err(|e| e.to_string())?;
    outcomes.into_iter().next().ok_or_else(|| "the job returned no outcome".to_string())
}
