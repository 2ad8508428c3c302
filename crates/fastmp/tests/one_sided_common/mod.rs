//! Helpers shared by the one-sided suites (`one_sided_*.rs`).
//!
//! Every test body takes the device; `device_suite!` (from `common`) generates `shm::<name>` and
//! `tcp::<name>`. On tcp the ranks are threads of this process joined by loopback sockets, so
//! the tcp device's active-message path is exercised.
//!
//! Verdicts never depend on timing: where an interleaving matters (an origin's operation issued
//! while the owner holds its local guard) it is enforced with messages, and sleeps only make the
//! interesting interleaving likely.

#![allow(dead_code)]

use std::fmt::Debug;
use std::time::Duration;

use fastmp::{Comm, Config, DeviceKind, Error, Result};

/// Tag of the control messages that sequence the interesting traffic.
pub const GO: i32 = 4242;

#[path = "../watchdog/mod.rs"]
mod watchdog;
#[allow(unused_imports)] // not every suite uses both
pub use watchdog::{HANG, watchdog};

/// `np` thread ranks on `dev`, under a [`watchdog`].
#[track_caller]
pub fn run<F, R>(dev: DeviceKind, np: usize, f: F) -> Result<Vec<R>>
where
    F: Fn(Comm) -> Result<R> + Sync,
    R: Send,
{
    let _watchdog = watchdog(format!("a job of {np} ranks on {dev:?} started at {}", std::panic::Location::caller()));
    Config::new().device(dev).np(np).run(f)
}

/// Sends an empty control message.
pub fn go(comm: &Comm, dest: usize) -> Result<()> {
    comm.send::<u8>(&[], dest, GO)
}

/// Waits for an empty control message.
pub fn wait_go(comm: &Comm, source: usize) -> Result<()> {
    comm.recv::<u8>(&mut [], source, GO).map(drop)
}

/// Makes the interleaving a test wants likely (never required for its verdict).
pub fn pause() {
    std::thread::sleep(Duration::from_millis(20));
}

fn message_names(msg: &str, call: &str, what: &str) {
    assert!(msg.contains(call), "{what}: the message {msg:?} does not name `{call}`");
}

/// Asserts `r` is `Error::RmaSync` whose message names `call`.
#[track_caller]
pub fn expect_sync<T: Debug>(r: Result<T>, call: &str) {
    match r {
        Err(Error::RmaSync(msg)) => message_names(&msg, call, call),
        other => panic!("{call}: expected Error::RmaSync, got {other:?}"),
    }
}

/// Asserts `r` is `Error::InvalidArgument` whose message names `call`.
#[track_caller]
pub fn expect_invalid<T: Debug>(r: Result<T>, call: &str) {
    match r {
        Err(Error::InvalidArgument(msg)) => message_names(&msg, call, call),
        other => panic!("{call}: expected Error::InvalidArgument, got {other:?}"),
    }
}

/// Asserts `r` is an error for a bad target rank: `Error::RankOutOfRange` naming `rank`, or
/// `Error::InvalidArgument` naming `call` (the library uses the former for point-to-point; the
/// one-sided skeleton does not fix which).
#[track_caller]
pub fn expect_bad_rank<T: Debug>(r: Result<T>, call: &str, rank: usize) {
    match r {
        Err(Error::RankOutOfRange { rank: got, .. }) => assert_eq!(got, rank, "{call}"),
        Err(Error::InvalidArgument(msg)) => message_names(&msg, call, call),
        other => panic!("{call}: expected an error for target rank {rank}, got {other:?}"),
    }
}

/// Asserts `r` is `Error::RmaSync` or `Error::InvalidArgument` naming `call` (for misuse the
/// issue allows either for, e.g. a group with ranks outside the window).
#[track_caller]
pub fn expect_sync_or_invalid<T: Debug>(r: Result<T>, call: &str) {
    match r {
        Err(Error::RmaSync(msg) | Error::InvalidArgument(msg)) => message_names(&msg, call, call),
        other => panic!("{call}: expected Error::RmaSync or InvalidArgument, got {other:?}"),
    }
}
