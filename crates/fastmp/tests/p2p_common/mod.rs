//! Helpers shared by the point-to-point suites (`p2p_*.rs`).
//!
//! One suite for every device: each test body takes the device, and `device_suite!` (bottom of
//! each file) generates `shm::<name>` and `tcp::<name>`. On tcp the ranks are threads of this
//! process joined by loopback TCP connections, so the whole tcp protocol stack is exercised.
//!
//! Tests never depend on timing for their verdict: where an ordering matters (a send posted before
//! its receive, a receive posted before its send) it is enforced with messages, probes or shared
//! flags; sleeps only make the interesting interleaving likely, never required.

#![allow(dead_code)]

use std::time::Duration;

use fastmp::{Comm, Config, DEFAULT_EAGER_LIMIT, DeviceKind, Result, Status};

/// Tag of the control messages that sequence the interesting traffic.
pub const GO: i32 = 999_999;
/// Fill byte of receive-buffer space that must not be written.
pub const SENTINEL: u8 = 0xC3;
pub const MIB: usize = 1 << 20;
/// The largest message of the suite.
pub const BIG: usize = 3 * MIB + 5;

/// A job of `np` ranks on `dev` with the given eager limit.
pub fn cfg(dev: DeviceKind, np: usize, eager_limit: usize) -> Config {
    Config::new().device(dev).np(np).eager_limit(eager_limit)
}

/// `fastmp::run` on `dev`: `np` ranks, default settings.
pub fn run<F, R>(dev: DeviceKind, np: usize, f: F) -> Result<Vec<R>>
where
    F: Fn(Comm) -> Result<R> + Sync,
    R: Send,
{
    cfg(dev, np, DEFAULT_EAGER_LIMIT).run(f)
}

pub fn pause() {
    std::thread::sleep(Duration::from_millis(20));
}

/// Sends an empty control message.
pub fn go(world: &fastmp::Comm, dest: usize) -> Result<()> {
    world.send::<u8>(&[], dest, GO)
}

/// Waits for an empty control message.
pub fn wait_go(world: &fastmp::Comm, source: usize) -> Result<()> {
    let st = world.recv::<u8>(&mut [], source, GO)?;
    assert_eq!((st.source, st.tag, st.bytes), (source, GO, 0));
    Ok(())
}

pub fn assert_untouched(tail: &[u8], what: &str) {
    if let Some(i) = tail.iter().position(|&b| b != SENTINEL) {
        panic!("{what}: byte {i} past the message was overwritten ({:#04x})", tail[i]);
    }
}

pub fn assert_status(st: &Status, source: usize, tag: i32, bytes: usize) {
    assert_eq!((st.source, st.tag, st.bytes, st.cancelled), (source, tag, bytes, false), "status {st:?}");
}
