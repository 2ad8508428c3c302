//! Helpers of the communicator suites (`comms_*.rs`): a job on both devices, and the message
//! of an expected argument error.

#![allow(dead_code)]

#[path = "../coll_common/mod.rs"]
mod coll_common;

use fastmp::{Comm, Config, DeviceKind, Error, Result};

/// Runs `f` on `np` ranks on the shm and the tcp device (with the hang watchdog of
/// `coll_common::job`); every rank must succeed.
pub fn on_both<F>(np: usize, what: &str, f: F)
where
    F: Fn(Comm) -> Result<()> + Send + Sync + Clone + 'static,
{
    for device in [DeviceKind::Shm, DeviceKind::Tcp] {
        coll_common::job(Config::new().device(device).np(np), what, f.clone())
            .unwrap_or_else(|e| panic!("{what} on {device:?} (np={np}): {e}"));
    }
}

/// The message of an `InvalidArgument`, or a panic naming what came instead.
pub fn invalid<T: std::fmt::Debug>(result: Result<T>) -> String {
    match result {
        Err(Error::InvalidArgument(msg)) => msg,
        other => panic!("expected an invalid-argument error, got {other:?}"),
    }
}
