//! Device-level tests of the tcp endpoint: several user threads on one endpoint at once.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::bootstrap::{Bootstrap, Rendezvous, SocketOptions};
use super::handshake::JobSecret;
use super::{TcpEndpoint, TcpOptions};
use crate::device::{Device, MatchSpec, SendMode, Source, Started};

/// A connected pair of endpoints (ranks 0 and 1) in this process.
fn pair(eager_limit: usize) -> (TcpEndpoint, TcpEndpoint) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let address = listener.local_addr().unwrap();
    let secret = JobSecret::random().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let boot = |rank, rendezvous| Bootstrap {
        rank,
        size: 2,
        rendezvous,
        secret: secret.clone(),
        deadline,
        sockets: SocketOptions::default(),
    };
    let options = TcpOptions { eager_limit, progress_thread: false };
    let zero = boot(0, Rendezvous::Listen(listener));
    let one = boot(1, Rendezvous::Connect(address));
    std::thread::scope(|s| {
        let a = s.spawn(move || TcpEndpoint::new(0, zero.connect().unwrap(), options).unwrap());
        let b = s.spawn(move || TcpEndpoint::new(1, one.connect().unwrap(), options).unwrap());
        (a.join().unwrap(), b.join().unwrap())
    })
}

fn complete(dev: &TcpEndpoint, started: Started) -> crate::device::RawStatus {
    dev.complete(started).unwrap()
}

/// Four threads per rank send and receive on their own tags through the same endpoints, with
/// eager and rendezvous sizes; every message arrives intact and in order per tag.
#[test]
fn concurrent_user_threads_share_an_endpoint() {
    const THREADS: usize = 4;
    const MESSAGES: usize = 40;
    let (zero, one) = pair(1024);
    let (zero, one) = (Arc::new(zero), Arc::new(one));
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let zero = zero.clone();
            s.spawn(move || {
                for m in 0..MESSAGES {
                    let len = [0, 7, 1024, 1025, 70_000][(m + t) % 5];
                    let data: Vec<u8> = (0..len).map(|i| (i + m * 31 + t) as u8).collect();
                    // SAFETY: `data` outlives the send, which completes before the next iteration.
                    let started =
                        unsafe { zero.isend(data.as_ptr(), len, 1, t as i32, 0, SendMode::Standard) }.unwrap();
                    complete(&zero, started);
                }
            });
        }
        for t in 0..THREADS {
            let one = one.clone();
            s.spawn(move || {
                for m in 0..MESSAGES {
                    let len = [0, 7, 1024, 1025, 70_000][(m + t) % 5];
                    let mut buf = vec![0u8; 70_000];
                    let spec = MatchSpec { context: 0, source: Source::Rank(0), tag: t as i32 };
                    // SAFETY: `buf` lives until the receive completes.
                    let started = unsafe { one.irecv(buf.as_mut_ptr(), buf.len(), spec) }.unwrap();
                    let status = complete(&one, started);
                    assert_eq!(status.bytes, len, "thread {t} message {m}");
                    assert!(
                        buf[..len].iter().enumerate().all(|(i, &b)| b == (i + m * 31 + t) as u8),
                        "thread {t} message {m}"
                    );
                }
            });
        }
    });
    let (zero, one) = (Arc::into_inner(zero).unwrap(), Arc::into_inner(one).unwrap());
    std::thread::scope(|s| {
        s.spawn(|| zero.shutdown().unwrap());
        s.spawn(|| one.shutdown().unwrap());
    });
}
