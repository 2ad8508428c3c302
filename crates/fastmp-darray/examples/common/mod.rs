//! What the three examples share: their command line, how they start (thread ranks, or one
//! rank of a launcher's job), how a distributed result is compared with the serial one, and
//! how the outcome is reported. Each example includes this file with `#[path]`, so
//! `tests/examples.rs` can include an example as a module too. (`interior.rs`, the stencil
//! bounds, is included only by the stencil examples.)

use std::fmt::Display;
use std::process::ExitCode;

use fastmp::{Comm, Config, DeviceKind, Pin, Result, op};
use fastmp_darray::DArray;
use fastmp_darray::ndarray::{ArrayView2, Ix2};

/// A numeric option of one example: `--NAME N`.
pub struct Flag {
    pub name: &'static str,
    pub default: usize,
    pub help: &'static str,
}

/// The values of an example's numeric options, in the order of its [`Flag`]s.
pub struct Values(Vec<(&'static str, usize)>);

impl Values {
    /// The value of `--name` (its default unless given).
    pub fn get(&self, name: &str) -> usize {
        self.0.iter().find(|(n, _)| *n == name).map_or(0, |&(_, v)| v)
    }
}

/// What an example's `run` returns: printed by rank 0; the program exits non-zero unless its
/// [`Check`] is exact.
pub trait Report: Display + Send {
    /// The distributed result against the serial one.
    fn check(&self) -> Check;
}

/// How a distributed array compares with the serial computation, summed over all ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Check {
    /// Elements of the array.
    pub elements: u64,
    /// Elements compared: every element once, by its owner.
    pub compared: u64,
    /// Elements that differ from the serial value (`!=`, so a NaN counts as a difference).
    pub differing: u64,
}

impl Check {
    /// Every element was compared, and none differs.
    pub fn exact(&self) -> bool {
        self.differing == 0 && self.compared == self.elements
    }

    /// The verdict in words, against "the serial `what`".
    pub fn describe(&self, what: &str) -> String {
        if self.exact() {
            format!("equal to the serial {what} ({} elements)", self.compared)
        } else {
            format!(
                "{} of {} elements differ from the serial {what} ({} compared)",
                self.differing, self.elements, self.compared
            )
        }
    }
}

/// Compares every element this rank owns with `serial` at its global index; collective over
/// `world`, and the same [`Check`] on every rank.
pub fn compare(array: &DArray<f64, Ix2>, serial: ArrayView2<'_, f64>, world: &Comm) -> Result<Check> {
    let mut mine = [0u64; 2];
    for ((i, j), &x) in array.overall() {
        mine[0] += 1;
        mine[1] += u64::from(x != serial[[i, j]]);
    }
    let mut all = [0u64; 2];
    world.allreduce(&mine, &mut all, op::Sum)?;
    let elements = array.shape().iter().product::<usize>() as u64;
    Ok(Check { elements, compared: all[0], differing: all[1] })
}

/// The slowest rank's `seconds` (what a parallel step costs), on every rank.
pub fn slowest(world: &Comm, seconds: f64) -> Result<f64> {
    let mut max = [0.0];
    world.allreduce(&[seconds], &mut max, op::Max)?;
    Ok(max[0])
}

/// `Err(InvalidArgument)` naming `call` unless every one of `sizes` is at least 1.
pub fn require_positive(call: &str, sizes: &[(&str, usize)]) -> Result<()> {
    match sizes.iter().find(|(_, n)| *n == 0) {
        Some((name, _)) => Err(fastmp::Error::InvalidArgument(format!("{call}: {name} must be at least 1"))),
        None => Ok(()),
    }
}

/// The example's `main`: parses the command line, runs `body` on every rank (thread ranks per
/// `--np`, or this process's rank of a launcher's job), prints rank 0's report, and exits 0
/// when the result is verified, 1 when it is not, 2 on a usage or runtime error.
pub fn main<R: Report>(
    program: &str,
    about: &str,
    flags: &[Flag],
    body: impl Fn(&Comm, &Values) -> Result<R> + Sync,
) -> ExitCode {
    let (config, values) = match parse(std::env::args().skip(1), flags) {
        Ok(Some(parsed)) => parsed,
        Ok(None) => {
            println!("{about}\n\n{}", usage(program, flags));
            return ExitCode::SUCCESS;
        }
        Err(why) => {
            eprintln!("{program}: {why}\n\n{}", usage(program, flags));
            return ExitCode::from(2);
        }
    };
    let outcome = config.run(|world| {
        let report = body(&world, &values)?;
        if world.rank() == 0 {
            println!("{report}");
        }
        Ok(report.check().exact())
    });
    match outcome {
        Ok(verified) if verified.iter().all(|&ok| ok) => ExitCode::SUCCESS,
        Ok(_) => {
            eprintln!("{program}: the distributed result differs from the serial one");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("{program}: {e}");
            ExitCode::from(2)
        }
    }
}

fn usage(program: &str, flags: &[Flag]) -> String {
    let mut text = format!(
        "usage: {program} [--np N] [--device shm|tcp] [--pin compact|scatter|none]{}\n\n  \
         --np N        thread ranks (default FASTMP_NP, else 1); under a launcher its job size applies\n  \
         --device D    device of the thread ranks (default FASTMP_DEVICE, else shm)\n  \
         --pin P       pinning of ranks to cores (default FASTMP_PIN, else none)",
        flags.iter().map(|f| format!(" [--{} N]", f.name)).collect::<String>()
    );
    for f in flags {
        text.push_str(&format!("\n  --{:<11} {} (default {})", format!("{} N", f.name), f.help, f.default));
    }
    text
}

/// The job's configuration (the launcher's, else `--np` thread ranks) and the numeric options;
/// `None` when help was asked for.
fn parse(
    mut args: impl Iterator<Item = String>,
    flags: &[Flag],
) -> std::result::Result<Option<(Config, Values)>, String> {
    let mut values: Vec<(&'static str, usize)> = flags.iter().map(|f| (f.name, f.default)).collect();
    let (mut np, mut device, mut pin) = (None::<usize>, None::<DeviceKind>, None::<Pin>);
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            return Ok(None);
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let Some(name) = name.strip_prefix("--") else { return Err(format!("unexpected argument '{arg}'")) };
        let value = inline.or_else(|| args.next()).ok_or_else(|| format!("--{name} needs a value"))?;
        let number = || value.parse::<usize>().map_err(|_| format!("--{name}: '{value}' is not a number"));
        match name {
            "np" => np = Some(number()?),
            "device" => device = Some(value.parse().map_err(|e: fastmp::Error| e.to_string())?),
            "pin" => pin = Some(value.parse().map_err(|e: fastmp::Error| e.to_string())?),
            _ => match values.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = number()?,
                None => return Err(format!("unknown option '--{name}'")),
            },
        }
    }
    let mut config = fastmp::init().map_err(|e| e.to_string())?;
    if std::env::var_os("FASTMP_NP").is_none() || np.is_some() {
        config = config.np(np.unwrap_or(1));
    }
    if let Some(device) = device {
        config = config.device(device);
    }
    if let Some(pin) = pin {
        config = config.pin(pin);
    }
    Ok(Some((config, Values(values))))
}
