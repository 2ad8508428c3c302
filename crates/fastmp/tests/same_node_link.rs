//! Shared-memory links between processes of one node (`SameNodeLink::SharedMemory`, the hybrid
//! device's default, opt-in on tcp):
//! the tcp device's byte streams through rings beside each socket. In one test process every rank is on
//! this node, so every connection takes a ring: messages of every protocol, rings filled by
//! sends nobody receives yet, wildcards, threads and collectives must behave as over sockets.

mod common;

use common::{check_pattern, mix, pattern};
use fastmp::op::Sum;
use fastmp::{ANY_SOURCE, Config, DeviceKind, SameNodeLink};

/// The tests look at this process's mappings, so they run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn tcp_over(link: SameNodeLink, np: usize) -> Config {
    Config::new().device(DeviceKind::Tcp).np(np).same_node_link(link)
}

/// Ring segments this process has mapped (their files are unlinked once both ends map them).
fn mapped_rings() -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    maps.lines().filter(|line| line.contains("/dev/shm/fastmp-ring-")).count()
}

/// Eager, rendezvous and ring-overflowing sizes (rings hold at most 256 KiB).
const SIZES: [usize; 8] = [0, 1, 7, 4096, 65_536, 65_537, 300_000, 3 << 20];

#[test]
fn messages_of_every_protocol_cross_shared_memory_links() {
    messages_of_every_protocol_cross(SameNodeLink::SharedMemory);
}

/// The same without single-copy reads: every payload through the rings.
#[test]
fn messages_of_every_protocol_cross_rings_alone() {
    messages_of_every_protocol_cross(SameNodeLink::Rings);
}

fn messages_of_every_protocol_cross(link: SameNodeLink) {
    let _serial = serial();
    let np = 3;
    tcp_over(link, np)
        .run(|world| {
            let me = world.rank();
            assert!(mapped_rings() > 0, "rank {me}: no ring segment is mapped");
            for (tag, &len) in SIZES.iter().enumerate() {
                let tag = tag as i32;
                for peer in (0..np).filter(|&p| p != me) {
                    let data = pattern(mix(&[me as u64, peer as u64, len as u64]), len);
                    let mut got = vec![0u8; len];
                    let status = world.sendrecv(&data, peer, tag, &mut got, peer, tag)?;
                    assert_eq!((status.source, status.bytes), (peer, len));
                    check_pattern(&got, mix(&[peer as u64, me as u64, len as u64]), "sendrecv");
                }
                // Wildcard receives of every peer's message, in any order.
                // (Nonblocking sends: blocking ones above the eager limit would wait for the
                // peers' receives, and the peers for ours.)
                let sends: Vec<_> = (0..np)
                    .filter(|&p| p != me)
                    .map(|peer| world.isend_owned(pattern(mix(&[me as u64, len as u64, 9]), len), peer, 100 + tag))
                    .collect::<fastmp::Result<_>>()?;
                let mut got = vec![0u8; len];
                for _ in 1..np {
                    let status = world.recv(&mut got, ANY_SOURCE, 100 + tag)?;
                    assert_eq!(status.bytes, len);
                    check_pattern(&got, mix(&[status.source as u64, len as u64, 9]), "wildcard");
                }
                for send in sends {
                    send.wait()?;
                }
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(mapped_rings(), 0, "ring segments outlived their job");
}

/// Rendezvous sends dropped at once, at varying moments of the handshake (before the receiver
/// answered, or while it reads the buffer): the buffer is overwritten as soon as the scope
/// ends, yet every message arrives as it was when sent, truncated ones included.
#[test]
fn sends_dropped_during_the_handshake_deliver_what_was_sent() {
    let _serial = serial();
    tcp_over(SameNodeLink::SharedMemory, 2)
        .run(|world| {
            const ROUNDS: u64 = 48;
            const LEN: usize = 3 << 20;
            if world.rank() == 0 {
                let mut buf = vec![0u8; LEN];
                for round in 0..ROUNDS {
                    buf.copy_from_slice(&pattern(round, LEN));
                    // The receive is posted: the answer comes at once.
                    world.recv(&mut [0u8; 1], 1, 6)?;
                    world.scope(|s| {
                        let mut send = s.isend(&buf[..], 1, 5)?;
                        // Progress for 0 to 700 us (or until done), so that the drop meets
                        // different phases: no answer yet, the receiver reading, done.
                        let until = std::time::Instant::now() + std::time::Duration::from_micros(round % 8 * 100);
                        while std::time::Instant::now() < until && send.test()?.is_none() {}
                        drop(send);
                        Ok::<_, fastmp::Error>(())
                    })?;
                    buf.fill(0xEE);
                }
                world.barrier()?;
            } else {
                let mut got = vec![0u8; LEN];
                let mut short = vec![0u8; LEN / 2];
                for round in 0..ROUNDS {
                    let into = if round % 5 == 4 { &mut short[..] } else { &mut got[..] };
                    let received = world.scope(|s| {
                        let recv = s.irecv(&mut *into, 0, 5)?;
                        world.send(&[1u8], 0, 6)?;
                        recv.wait().map(|_| ())
                    });
                    if round % 5 == 4 {
                        let err = received.expect_err("a message into half the room it needs");
                        assert!(err.to_string().contains("trunc"), "round {round}: {err}");
                        check_pattern(&short, round, "truncated send");
                    } else {
                        received?;
                        check_pattern(&got, round, "dropped send");
                    }
                }
                world.barrier()?;
            }
            Ok(())
        })
        .unwrap();
}

/// 400 sends of 8 KiB (3.2 MiB, far beyond a ring) started before the receiver posts anything:
/// the rest waits in the sender's queue until the receiver drains the ring; order per sender
/// holds.
#[test]
fn sends_beyond_a_full_ring_wait_and_arrive_in_order() {
    let _serial = serial();
    tcp_over(SameNodeLink::SharedMemory, 2)
        .run(|world| {
            const COUNT: usize = 400;
            const LEN: usize = 8192;
            if world.rank() == 0 {
                let requests: Vec<_> = (0..COUNT)
                    .map(|i| world.isend_owned(pattern(i as u64, LEN), 1, 7))
                    .collect::<fastmp::Result<_>>()?;
                world.send(&[1u8], 1, 8)?;
                for request in requests {
                    request.wait()?;
                }
            } else {
                world.recv(&mut [0u8; 1], 0, 8)?;
                let mut got = vec![0u8; LEN];
                for i in 0..COUNT {
                    world.recv(&mut got, 0, 7)?;
                    check_pattern(&got, i as u64, "queued send");
                }
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn collectives_and_threads_run_over_shared_memory_links() {
    let _serial = serial();
    let np = 4;
    tcp_over(SameNodeLink::SharedMemory, np)
        .run(|world| {
            for len in [1usize, 1000, 200_000] {
                let mine: Vec<u64> = (0..len as u64).map(|k| k * (world.rank() as u64 + 1)).collect();
                let mut sum = vec![0u64; len];
                world.allreduce(&mine, &mut sum, Sum)?;
                let factor = (np * (np + 1) / 2) as u64;
                assert!(sum.iter().enumerate().all(|(k, &s)| s == k as u64 * factor), "allreduce of {len}");
                let mut data = if world.rank() == 2 { pattern(len as u64, len) } else { vec![0u8; len] };
                world.bcast(&mut data, 2)?;
                check_pattern(&data, len as u64, "bcast");
            }
            // A helper thread and the rank's own thread talk to the neighbours at once.
            let handle = world.threaded()?;
            let (me, next, prev) = (world.rank(), (world.rank() + 1) % np, (world.rank() + np - 1) % np);
            std::thread::scope(|s| {
                let helper = s.spawn(|| -> fastmp::Result<()> {
                    let mut got = vec![0u8; 100_000];
                    for round in 0..20u64 {
                        let data = pattern(mix(&[me as u64, round, 1]), got.len());
                        handle.sendrecv(&data, next, 1, &mut got, prev, 1)?;
                        check_pattern(&got, mix(&[prev as u64, round, 1]), "helper thread");
                    }
                    Ok(())
                });
                let mut got = vec![0u8; 5000];
                for round in 0..20u64 {
                    let data = pattern(mix(&[me as u64, round, 2]), got.len());
                    world.sendrecv(&data, prev, 2, &mut got, next, 2)?;
                    check_pattern(&got, mix(&[next as u64, round, 2]), "own thread");
                }
                helper.join().expect("helper thread")
            })
        })
        .unwrap();
}

/// Rings are the hybrid device's default and the tcp device's option; `Socket` turns them off.
#[test]
fn rings_are_taken_where_they_are_the_default_or_asked_for() {
    let _serial = serial();
    let maps = |config: Config| config.run(|_| Ok(mapped_rings() > 0)).unwrap();
    let hybrid = || Config::new().device(DeviceKind::Hybrid).np(4).threads_per_process(2);
    assert!(maps(hybrid()).iter().all(|&m| m));
    assert!(!maps(hybrid().same_node_link(SameNodeLink::Socket)).iter().any(|&m| m));
    assert!(!maps(Config::new().device(DeviceKind::Tcp).np(2)).iter().any(|&m| m));
    assert!(maps(tcp_over(SameNodeLink::SharedMemory, 2)).iter().all(|&m| m));
    assert!(maps(tcp_over(SameNodeLink::Rings, 2)).iter().all(|&m| m));
}
