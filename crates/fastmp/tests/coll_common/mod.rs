//! Helpers shared by the collective and communicator suites: jobs with a hang watchdog, error
//! context naming the case, cheap deterministic per-rank data and element-wise checks.

#![allow(dead_code)]

use std::fmt::Debug;
use std::sync::mpsc;
use std::time::Duration;

use fastmp::coll::{Algorithm, Collective, Tuning};
use fastmp::{Comm, Config, DeviceKind, Error, Result};

/// Process counts every algorithm is checked on (issue 3, "Tests").
pub const NPS: [usize; 8] = [1, 2, 3, 4, 5, 7, 8, 16];

/// Seconds a job may take before the watchdog calls it a hang (override with
/// `FASTMP_TEST_TIMEOUT_S`). Generous: the machine may be heavily loaded.
fn timeout() -> Duration {
    let secs = std::env::var("FASTMP_TEST_TIMEOUT_S").ok().and_then(|s| s.parse().ok()).unwrap_or(120);
    Duration::from_secs(secs)
}

/// Runs `f` on every rank of `config` in a background thread and returns `run`'s result; panics
/// naming `what` if the job does not finish within the timeout (a hang), instead of blocking the
/// test binary forever.
pub fn job<F, R>(config: Config, what: &str, f: F) -> Result<Vec<R>>
where
    F: Fn(Comm) -> Result<R> + Send + Sync + 'static,
    R: Send + 'static,
{
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(format!("job {what}"))
        .spawn(move || {
            let _ = tx.send(config.run(f));
        })
        .expect("spawn the job thread");
    match rx.recv_timeout(timeout()) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: no result after {:?}: the job hangs", timeout()),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: the job thread died"),
    }
}

/// [`job`] on `np` ranks with the default configuration, which must succeed.
pub fn run_ok<F, R>(np: usize, what: &str, f: F) -> Vec<R>
where
    F: Fn(Comm) -> Result<R> + Send + Sync + 'static,
    R: Send + 'static,
{
    job(Config::new().np(np), what, f).unwrap_or_else(|e| panic!("{what} (np={np}): {e}"))
}

/// A job of `np` ranks on `device` (hybrid: the default `ceil(np / 2)` thread ranks per
/// process, so np 5 runs as 3 + 2 and np 6 as 2 × 3).
pub fn config_on(device: DeviceKind, np: usize) -> Config {
    Config::new().device(device).np(np)
}

/// [`run_ok`] on `device`.
pub fn run_ok_on<F, R>(device: DeviceKind, np: usize, what: &str, f: F) -> Vec<R>
where
    F: Fn(Comm) -> Result<R> + Send + Sync + 'static,
    R: Send + 'static,
{
    job(config_on(device, np), what, f).unwrap_or_else(|e| panic!("{what} ({device:?}, np={np}): {e}"))
}

/// Adds the failing case's description to an error, so `run`'s `RankFailed` names it.
pub trait Context<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for Result<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::other(format!("{}: {e}", what())))
    }
}

/// The algorithms of `coll` to check: every one it has.
/// Every algorithm of `coll` that runs in one process (`hierarchical` needs ranks in several
/// processes: `tests/collectives_hierarchical.rs` covers it).
pub fn algorithms(coll: Collective) -> Vec<Algorithm> {
    coll.algorithms().iter().copied().filter(|&a| a != Algorithm::Hierarchical).collect()
}

/// `world` with `alg` forced for `coll`.
pub fn forced(world: &Comm, coll: Collective, alg: Algorithm) -> Result<Comm> {
    Ok(world.with_tuning(Tuning::defaults().force(coll, alg)?))
}

/// Cheap, well-mixed value number `i` of stream `stream` (different streams for different ranks
/// or rank pairs) of a case identified by `seed`.
pub fn val(seed: u32, stream: usize, i: usize) -> u32 {
    let mut x = (i as u32).wrapping_mul(0x9E37_79B1) ^ (stream as u32).wrapping_mul(0x85EB_CA77) ^ seed;
    x ^= x >> 15;
    x = x.wrapping_mul(0x2C1B_3C6D);
    x ^ (x >> 12)
}

/// Distinct, reproducible seed for a case description.
pub fn seed_of(parts: &[usize]) -> u32 {
    parts.iter().fold(0x1234_5678u32, |acc, &p| val(acc, p, 0x55))
}

/// Panics naming `what` and the first index where `got[i] != want(i)`.
pub fn check_each<T: PartialEq + Debug>(got: &[T], want: impl Fn(usize) -> T, what: &dyn Fn() -> String) {
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want(i)) {
        panic!("{}: element {i} of {} is {:?}, expected {:?}", what(), got.len(), got[i], want(i));
    }
}

/// Ranks 0, the middle one and the last, without repeats: the roots of rooted collectives.
pub fn roots(np: usize) -> Vec<usize> {
    let mut roots = vec![0, np / 2, np - 1];
    roots.dedup();
    roots
}
