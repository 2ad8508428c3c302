//! Threads inside a rank: the thread level the device provides (MPI_Query_thread) and, on the
//! tcp device (`Multiple`), a `ThreadComm` handle that helper threads use while the rank's own
//! thread communicates too. Two helper threads take messages from the same tag with matched
//! probe (MPI_Mprobe / MPI_Mrecv), which never hands one message to both, unlike probe + recv.
//! On the shm device (`Funneled`: only the rank's thread communicates) `threaded()` is an `Err`;
//! the example says so and shows the funneled pattern instead.
//!
//! Needs at least 2 ranks. The `ThreadComm` part runs on tcp:
//!
//! ```text
//! fastmprun -np 3 --device tcp target/debug/examples/threads
//! FASTMP_NP=3 FASTMP_DEVICE=tcp cargo run --example threads   # thread ranks over loopback TCP
//! FASTMP_NP=3 cargo run --example threads                     # shm: funneled only
//! ```

use fastmp::op::Sum;
use fastmp::{ANY_SOURCE, Error, ThreadLevel};

/// Messages each rank sends to every other rank; message `k` holds `k + 1` copies of the sender.
const PER_PEER: usize = 4;

fn main() {
    fastmp::main(|world| {
        let (rank, size) = (world.rank(), world.size());
        if size < 2 {
            return Err(Error::InvalidArgument(format!("the threads example needs at least 2 ranks, not {size}")));
        }
        let level = world.thread_level();
        let handle = match world.threaded() {
            Ok(handle) => handle,
            Err(why) => {
                assert_eq!(level, ThreadLevel::Funneled);
                // Helper threads compute; the rank's own thread does all the communication.
                let partial: u64 = std::thread::scope(|t| {
                    let parts: Vec<_> =
                        (0..4u64).map(|k| t.spawn(move || (k * 250..(k + 1) * 250).sum::<u64>())).collect();
                    parts.into_iter().map(|p| p.join().expect("a helper thread panicked")).sum()
                });
                let mut total = [0u64];
                world.allreduce(&[partial], &mut total, Sum)?;
                assert_eq!(total[0], size as u64 * 999 * 1000 / 2);
                println!(
                    "threads: rank {rank}/{size} on {}: level {level:?}, ThreadComm not available ({why})",
                    world.device_name()
                );
                return Ok(());
            }
        };
        assert_eq!(level, ThreadLevel::Multiple);
        let peers: Vec<usize> = (0..size).filter(|&r| r != rank).collect();
        let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);

        let (mut taken, ring) = std::thread::scope(|t| {
            let sender = t.spawn(|| -> fastmp::Result<()> {
                for k in 0..PER_PEER {
                    for &peer in &peers {
                        handle.send(&vec![rank as u32; k + 1], peer, 1)?;
                    }
                }
                Ok(())
            });
            // Two receivers share the tag: each takes half the messages, whatever their source.
            let receivers: Vec<_> = (0..2)
                .map(|_| {
                    let handle = handle.clone();
                    let count = PER_PEER * peers.len() / 2;
                    t.spawn(move || -> fastmp::Result<Vec<(usize, usize)>> {
                        let mut taken = Vec::with_capacity(count);
                        for _ in 0..count {
                            let (message, status) = handle.mprobe(ANY_SOURCE, 1)?;
                            let mut buf = vec![0u32; status.count::<u32>()];
                            handle.mrecv(&mut buf, message)?;
                            assert!(buf.iter().all(|&x| x as usize == status.source));
                            taken.push((status.source, buf.len()));
                        }
                        Ok(taken)
                    })
                })
                .collect();
            // Meanwhile the rank's own thread uses the communicator as usual (another tag).
            let mut from_prev = [0u64];
            let ring = world.sendrecv(&[rank as u64], next, 2, &mut from_prev, prev, 2).map(|_| from_prev[0]);
            sender.join().expect("the sender panicked")?;
            let mut taken = Vec::new();
            for receiver in receivers {
                taken.extend(receiver.join().expect("a receiver panicked")?);
            }
            Ok::<_, Error>((taken, ring?))
        })?;
        assert_eq!(ring, prev as u64);
        // Every message was taken exactly once.
        taken.sort_unstable();
        let expected: Vec<(usize, usize)> =
            peers.iter().flat_map(|&p| (1..=PER_PEER).map(move |len| (p, len))).collect();
        assert_eq!(taken, expected);

        println!(
            "threads: rank {rank}/{size} on {}: level {level:?}, 2 threads took {} messages",
            world.device_name(),
            taken.len()
        );
        Ok(())
    });
}
