//! Device tests of paced sends (`TcpOptions::pace`): long payloads handed to the kernel one
//! fragment at a time arrive intact at odd lengths and fragment boundaries, truncated, through a
//! wildcard receive, and a release or a peer's failure mid-transfer ends cleanly.

use std::io::{Read, Write};
use std::sync::Arc;

use super::bootstrap::Site;
use super::frame::{Accept, Frame, HEADER_LEN, Header};
use super::tests::connect_all;
use super::{TcpEndpoint, TcpOptions};
use crate::device::wait::WaitPolicy;
use crate::device::{Device, Failure, MatchSpec, SendMode, Source, Started};
use crate::error::Error;

/// The smallest fragment pacing accepts, so that tests cross many fragment boundaries.
const PACE: usize = 16 * 1024;
const EAGER: usize = 1024;

fn options() -> TcpOptions {
    TcpOptions {
        eager_limit: EAGER,
        progress_thread: false,
        pace: PACE,
        peer_reads: true,
        policy: WaitPolicy::for_ranks(2),
    }
}

/// Connected endpoints of ranks `0..n`, all pacing.
fn endpoints(n: usize) -> Vec<TcpEndpoint> {
    let here = Site::of_this_process().unwrap();
    let meshes = connect_all(&vec![here; n]);
    std::thread::scope(|s| {
        let handles: Vec<_> = meshes
            .into_iter()
            .enumerate()
            .map(|(rank, mesh)| s.spawn(move || TcpEndpoint::new(rank, mesh, options()).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn shutdown_all(endpoints: Vec<TcpEndpoint>) {
    std::thread::scope(|s| {
        for e in &endpoints {
            s.spawn(move || e.shutdown().unwrap());
        }
    });
}

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(7) ^ (i >> 11) ^ seed) as u8).collect()
}

fn send(dev: &TcpEndpoint, data: &[u8], dest: usize, tag: i32) {
    // SAFETY: `data` outlives the send, which completes inside `complete`.
    let started = unsafe { dev.isend(data.as_ptr(), data.len(), dest, tag, 0, SendMode::Standard) }.unwrap();
    dev.complete(started).unwrap();
}

fn recv(dev: &TcpEndpoint, buf: &mut [u8], source: Source, tag: i32) -> crate::Result<crate::device::RawStatus> {
    let spec = MatchSpec { context: 0, source, tag };
    // SAFETY: `buf` outlives the receive, which completes or fails inside `complete`.
    let started = unsafe { dev.irecv(buf.as_mut_ptr(), buf.len(), spec) }?;
    dev.complete(started)
}

/// Lengths around one and several fragments (the data frame's header shifts the boundaries by
/// its 40 bytes) and a long odd one arrive intact, in both directions at once.
#[test]
fn paced_transfers_at_fragment_boundaries_arrive_intact() {
    let lengths = [PACE - 1, PACE, PACE + 1, 2 * PACE - HEADER_LEN, 3 * PACE + 7, (1 << 20) + 13];
    let eps = endpoints(2);
    std::thread::scope(|s| {
        for (rank, ep) in eps.iter().enumerate() {
            s.spawn(move || {
                let peer = 1 - rank;
                for (m, &len) in lengths.iter().enumerate() {
                    let data = pattern(len, m + rank);
                    let started =
                        // SAFETY: `data` lives until the send completes below.
                        unsafe { ep.isend(data.as_ptr(), len, peer, m as i32, 0, SendMode::Standard) }.unwrap();
                    let mut buf = vec![0u8; len];
                    let status = recv(ep, &mut buf, Source::Rank(peer), m as i32).unwrap();
                    ep.complete(started).unwrap();
                    assert_eq!(status.bytes, len);
                    assert!(buf == pattern(len, m + peer), "rank {rank}: message of {len} bytes differs");
                }
            });
        }
    });
    shutdown_all(eps);
}

/// A paced message longer than its receive buffer fills the buffer, reports its real length,
/// and the connection stays in step for the next message.
#[test]
fn a_truncated_paced_message_fills_the_buffer_and_the_next_one_arrives() {
    let eps = endpoints(2);
    let long = pattern(5 * PACE + 3, 1);
    let next = pattern(2 * PACE + 1, 2);
    std::thread::scope(|s| {
        s.spawn(|| {
            send(&eps[0], &long, 1, 1);
            send(&eps[0], &next, 1, 2);
        });
        let mut small = vec![0u8; 3 * PACE];
        match recv(&eps[1], &mut small, Source::Rank(0), 1) {
            Err(Error::Truncated { message_bytes, capacity, .. }) => {
                assert_eq!((message_bytes, capacity), (long.len(), small.len()));
            }
            other => panic!("expected truncation, got {other:?}"),
        }
        assert!(small[..] == long[..small.len()], "the buffer holds the message's first bytes");
        let mut buf = vec![0u8; next.len()];
        assert_eq!(recv(&eps[1], &mut buf, Source::Rank(0), 2).unwrap().bytes, next.len());
        assert!(buf == next);
    });
    shutdown_all(eps);
}

/// Two ranks send paced messages to a third at once; its wildcard receives take both, each
/// whole and from the rank its status names.
#[test]
fn wildcard_receives_take_paced_messages_from_two_senders() {
    let len = 9 * PACE + 5;
    let eps = endpoints(3);
    std::thread::scope(|s| {
        for (sender, ep) in eps.iter().enumerate().skip(1) {
            s.spawn(move || send(ep, &pattern(len, sender), 0, 7));
        }
        let mut seen = Vec::new();
        for _ in 0..2 {
            let mut buf = vec![0u8; len];
            let status = recv(&eps[0], &mut buf, Source::Any, 7).unwrap();
            assert_eq!(status.bytes, len);
            assert!(buf == pattern(len, status.source), "message from rank {} differs", status.source);
            seen.push(status.source);
        }
        seen.sort_unstable();
        assert_eq!(seen, [1, 2]);
    });
    shutdown_all(eps);
}

/// A paced send released while its payload is still being written (the receiver reads nothing
/// yet) leaves the sender's buffer alone; the receiver still gets the whole message, and
/// released receives mid-transfer on the other side do not disturb the next message.
#[test]
fn releasing_a_paced_send_mid_transfer_still_delivers_it() {
    let len = (4 << 20) + 3;
    let eps = endpoints(2);
    let expected = pattern(len, 3);
    {
        let mut data = expected.clone();
        let spec = MatchSpec { context: 0, source: Source::Rank(0), tag: 3 };
        let mut buf = vec![0u8; len];
        // Post the receive first so the transfer starts as soon as the sender polls.
        // SAFETY: `buf` outlives the receive, completed below.
        let recv_started = unsafe { eps[1].irecv(buf.as_mut_ptr(), len, spec) }.unwrap();
        // SAFETY: `data` stays valid and unmodified until `release` returns (it detaches).
        let started = unsafe { eps[0].isend(data.as_ptr(), len, 1, 3, 0, SendMode::Standard) }.unwrap();
        let Started::Pending(id) = started else { panic!("a rendezvous send completes later") };
        // Let the handshake happen and some fragments go out, without reading on rank 1 more
        // than its handshake needs.
        for _ in 0..200 {
            let _ = eps[0].test(id);
        }
        eps[0].release(id);
        data.fill(0xEE);
        let status = eps[1].complete(recv_started).unwrap();
        assert_eq!(status.bytes, len);
        assert!(buf == expected, "a released send's message arrives as it was when sent");
    }
    shutdown_all(eps);
}

/// The receiver of a paced transfer vanishes after reading a little: the sender's request fails
/// with `PeerFailed` naming it, never hangs.
#[test]
fn a_peer_failing_mid_paced_transfer_fails_the_send() {
    let here = Site::of_this_process().unwrap();
    let mut meshes = connect_all(&[here.clone(), here]).into_iter();
    let (zero, mut one) = (meshes.next().unwrap(), meshes.next().unwrap());
    let mut raw = one.streams[0].take().unwrap();
    let endpoint = Arc::new(TcpEndpoint::new(0, zero, options()).unwrap());
    let len = 8 << 20;
    let data = pattern(len, 4);
    std::thread::scope(|s| {
        s.spawn(move || {
            // Rank 1's side by hand: read the ready-to-send, answer it, take a little data, die.
            let mut header = [0u8; HEADER_LEN];
            raw.read_exact(&mut header).unwrap();
            let send_id =
                match Header::decode(&header, Accept { max_eager: EAGER as u64, source: 0, dest: 1 }).unwrap().frame {
                    Frame::Rts { send_id, .. } => send_id,
                    other => panic!("expected a ready-to-send, got {other:?}"),
                };
            let cts = Header { source: 1, dest: 0, frame: Frame::Cts { send_id, recv_id: 1, reads: false } };
            raw.write_all(&cts.encode()).unwrap();
            let mut some = vec![0u8; 3 * PACE];
            raw.read_exact(&mut some).unwrap();
            drop(raw);
        });
        // SAFETY: `data` outlives the send, which fails inside `complete`.
        let started = unsafe { endpoint.isend(data.as_ptr(), len, 1, 0, 0, SendMode::Standard) }.unwrap();
        match endpoint.complete(started) {
            Err(Error::PeerFailed { rank: 1, .. }) => {}
            other => panic!("a send to a vanished peer must fail with PeerFailed, got {other:?}"),
        }
    });
    endpoint.abort(Failure { rank: 0, cause: "test over".into(), code: None });
}
