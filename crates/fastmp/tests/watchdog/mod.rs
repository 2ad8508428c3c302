//! A watchdog for multi-rank test jobs: a hang becomes a clear failure naming the job instead of
//! a stuck test binary. Far beyond any test's need, so it is no timing assertion.

use std::sync::mpsc;
use std::time::Duration;

/// How long a job may run before the watchdog calls it a hang.
pub const HANG: Duration = Duration::from_secs(240);

/// Aborts the test process, naming the job, unless dropped within [`HANG`].
pub struct Watchdog(#[allow(dead_code)] mpsc::Sender<()>);

pub fn watchdog(what: String) -> Watchdog {
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(HANG) {
            eprintln!("{what}: still running after {HANG:?}: a hang; aborting the test process");
            std::process::abort();
        }
    });
    Watchdog(tx)
}
