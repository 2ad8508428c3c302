//! Matched probe (mprobe / improbe / mrecv) on both devices: eager and rendezvous sizes, wildcards,
//! the message leaving matching at probe time, dropped messages releasing their senders,
//! PROC_NULL, truncation and argument errors.

mod common;

use common::{device_suite, mix, pattern};
use fastmp::{ANY_SOURCE, ANY_TAG, Config, DeviceKind, Error, PROC_NULL};

/// Sizes on every protocol path of both devices: empty, inline, eager, and rendezvous (above the
/// shm 4 KiB and tcp 64 KiB eager limits).
const SIZES: [usize; 5] = [0, 16, 4000, 70_000, 300_000];

fn cfg(dev: DeviceKind, np: usize) -> Config {
    Config::new().device(dev).np(np)
}

/// Every size from every other rank, received through `mprobe(ANY_SOURCE, ANY_TAG)`: the status
/// names the sender, tag and size, and every byte arrives.
fn any_source_all_sizes(dev: DeviceKind) {
    cfg(dev, 3)
        .run(|world| {
            let seed = |src: usize, i: usize| mix(&[src as u64, i as u64]);
            if world.rank() != 0 {
                for (i, &n) in SIZES.iter().enumerate() {
                    world.send(&pattern(seed(world.rank(), i), n), 0, i as i32)?;
                }
                return Ok(());
            }
            let mut next = [0usize; 3];
            for _ in 0..2 * SIZES.len() {
                let (message, status) = world.mprobe(ANY_SOURCE, ANY_TAG)?;
                let (src, i) = (status.source, next[status.source]);
                assert_eq!((status.tag, status.bytes), (i as i32, SIZES[i]), "from rank {src}");
                assert_eq!(message.bytes(), SIZES[i]);
                let mut buf = vec![0u8; SIZES[i]];
                let got = world.mrecv(&mut buf, message)?;
                assert_eq!((got.source, got.tag, got.bytes), (src, i as i32, SIZES[i]));
                assert!(buf == pattern(seed(src, i), SIZES[i]), "bytes of message {i} from rank {src}");
                next[src] += 1;
            }
            assert_eq!(next, [0, SIZES.len(), SIZES.len()]);
            Ok(())
        })
        .unwrap();
}

/// A probed message is gone from matching: probes and receives see the next one, in order.
fn taken_message_leaves_matching(dev: DeviceKind) {
    cfg(dev, 2)
        .run(|world| {
            if world.rank() == 1 {
                // Nonblocking: the rendezvous-sized second message completes only once received.
                let bufs: Vec<Vec<u64>> = [(1u64, 10usize), (2, 100_000), (3, 10)].map(|(k, n)| vec![k; n]).into();
                return world.scope(|s| {
                    let mut sends = bufs.iter().map(|b| s.isend(b, 0, 7)).collect::<fastmp::Result<Vec<_>>>()?;
                    fastmp::waitall(&mut sends).map(drop)
                });
            }
            let (first, status) = world.mprobe(1, 7)?;
            assert_eq!(status.bytes, 80);
            // The second message (rendezvous-sized) is what a plain probe sees now.
            assert_eq!(world.probe(1, 7)?.bytes, 800_000);
            let (second, _) = world.mprobe(1, 7)?;
            let mut third = [0u64; 10];
            world.recv(&mut third, 1, 7)?;
            assert_eq!(third, [3; 10]);
            assert!(world.improbe(1, 7)?.is_none());
            let (data, _) = second.recv_vec::<u64>()?;
            assert!(data.len() == 100_000 && data.iter().all(|&x| x == 2));
            let (data, _) = world.mrecv_vec::<u64>(first)?;
            assert_eq!(data, [1; 10]);
            Ok(())
        })
        .unwrap();
}

/// `improbe` finds nothing until the message is there, then takes it.
fn improbe_polls(dev: DeviceKind) {
    cfg(dev, 2)
        .run(|world| {
            if world.rank() == 1 {
                let mut go = [0u8];
                world.recv(&mut go, 0, 1)?;
                world.send(&[5u16; 3], 0, 2)?;
                return Ok(());
            }
            assert!(world.improbe(1, 2)?.is_none());
            world.send(&[1u8], 1, 1)?;
            let (message, status) = loop {
                if let Some(found) = world.improbe(ANY_SOURCE, 2)? {
                    break found;
                }
            };
            assert_eq!((status.source, status.bytes), (1, 6));
            let mut buf = [0u16; 3];
            message.recv(&mut buf)?;
            assert_eq!(buf, [5; 3]);
            Ok(())
        })
        .unwrap();
}

/// Dropping probed messages discards them and releases their senders: synchronous sends of both
/// protocols and a rendezvous standard send complete; the message after them arrives intact.
fn dropped_message_releases_sender(dev: DeviceKind) {
    cfg(dev, 2)
        .run(|world| {
            if world.rank() == 1 {
                world.ssend(&[9u8; 10], 0, 1)?;
                world.ssend(&vec![9u8; 200_000], 0, 2)?;
                world.send(&vec![9u8; 200_000], 0, 3)?;
                world.send(&[42u8; 5], 0, 4)?;
                return Ok(());
            }
            for tag in 1..=3 {
                let (message, status) = world.mprobe(1, tag)?;
                assert_eq!(status.tag, tag);
                drop(message);
            }
            let mut buf = [0u8; 5];
            let status = world.recv(&mut buf, 1, ANY_TAG)?;
            assert_eq!((status.tag, buf), (4, [42; 5]));
            Ok(())
        })
        .unwrap();
}

/// A message probed to itself (eager and rendezvous-sized) and received.
fn self_messages(dev: DeviceKind) {
    cfg(dev, 1)
        .run(|world| {
            world.send(&[1u32, 2], 0, 0)?;
            let big = vec![7u8; 100_000];
            world.scope(|s| {
                let send = s.isend(&big, 0, 1)?;
                let (message, status) = world.mprobe(0, 1)?;
                assert_eq!(status.bytes, 100_000);
                let (data, _) = message.recv_vec::<u8>()?;
                assert!(data == big);
                send.wait()?;
                Ok(())
            })?;
            let (message, _) = world.mprobe(0, 0)?;
            let mut buf = [0u32; 2];
            message.recv(&mut buf)?;
            assert_eq!(buf, [1, 2]);
            Ok(())
        })
        .unwrap();
}

/// A rendezvous-sized message to itself, probed, outlives its send request (released when the
/// scope ends): the release must not wait for the held message, and the data survives.
fn self_message_outlives_its_send(dev: DeviceKind) {
    cfg(dev, 1)
        .run(|world| {
            let big = pattern(3, 100_000);
            let message = world.scope(|s| {
                let send = s.isend(&big, 0, 1)?;
                let (message, _) = world.mprobe(0, 1)?;
                drop(send);
                Ok::<_, Error>(message)
            })?;
            let (data, status) = message.recv_vec::<u8>()?;
            assert_eq!(status.bytes, 100_000);
            assert!(data == big);
            Ok(())
        })
        .unwrap();
}

/// A probe of `PROC_NULL` gives the no-process message: no data, source `PROC_NULL`.
fn proc_null(dev: DeviceKind) {
    cfg(dev, 2)
        .run(|world| {
            let (message, status) = world.mprobe(PROC_NULL, 3)?;
            assert!(message.is_no_proc());
            assert_eq!((status.source, status.tag, status.bytes), (PROC_NULL, ANY_TAG, 0));
            let mut buf = [7u8; 4];
            let got = message.recv(&mut buf)?;
            assert_eq!((got.source, got.bytes, buf), (PROC_NULL, 0, [7; 4]));
            assert!(world.improbe(PROC_NULL, ANY_TAG)?.expect("always found").0.is_no_proc());
            Ok(())
        })
        .unwrap();
}

/// A message longer than the buffer is an error (and used up); bad arguments are errors.
fn errors(dev: DeviceKind) {
    cfg(dev, 2)
        .run(|world| {
            if world.rank() == 1 {
                world.send(&[1u8; 64], 0, 0)?;
                world.send(&[2u8; 3], 0, 0)?;
                return Ok(());
            }
            let (message, _) = world.mprobe(1, 0)?;
            let mut small = [0u8; 8];
            assert!(matches!(message.recv(&mut small), Err(Error::Truncated { message_bytes: 64, capacity: 8, .. })));
            let (message, _) = world.mprobe(1, 0)?;
            assert!(matches!(message.recv_vec::<u16>(), Err(Error::ElementSize { bytes: 3, elem_size: 2 })));
            assert!(matches!(world.improbe(5, 0), Err(Error::RankOutOfRange { rank: 5, size: 2 })));
            assert!(matches!(world.mprobe(1, -7), Err(Error::TagOutOfRange { tag: -7, .. })));
            Ok(())
        })
        .unwrap();
}

/// A probe on a split communicator reports sources in its numbering and only its traffic.
fn sub_communicator(dev: DeviceKind) {
    cfg(dev, 4)
        .run(|world| {
            let sub = world.split(Some((world.rank() % 2) as u32), 0)?.expect("every rank has a colour");
            world.send(&[world.rank() as u32], world.rank() ^ 2, 0)?;
            sub.send(&[world.rank() as u32 + 100], 1 - sub.rank(), 0)?;
            let (message, status) = sub.mprobe(ANY_SOURCE, ANY_TAG)?;
            assert_eq!(status.source, 1 - sub.rank());
            let mut got = [0u32];
            message.recv(&mut got)?;
            assert_eq!(got[0], (world.rank() ^ 2) as u32 + 100);
            let (message, status) = world.mprobe(ANY_SOURCE, ANY_TAG)?;
            assert_eq!(status.source, world.rank() ^ 2);
            message.recv(&mut got)?;
            assert_eq!(got[0], (world.rank() ^ 2) as u32);
            Ok(())
        })
        .unwrap();
}

device_suite! {
    both: [
        any_source_all_sizes,
        taken_message_leaves_matching,
        improbe_polls,
        dropped_message_releases_sender,
        self_messages,
        self_message_outlives_its_send,
        proc_null,
        errors,
        sub_communicator,
    ],
    tcp_ignored: [],
}
