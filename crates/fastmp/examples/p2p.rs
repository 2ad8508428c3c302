//! Blocking point-to-point messages (MPI_Send / MPI_Recv and their relatives): slices, single
//! values, messages of unknown length (`recv_vec`, probe, matched probe), `ANY_SOURCE` and
//! `ANY_TAG`, serde objects, `sendrecv_replace`, the synchronous, buffered and ready send modes,
//! and `PROC_NULL`.
//!
//! Needs at least 2 ranks. Run it with thread ranks (shm device) or one process per rank (tcp):
//!
//! ```text
//! FASTMP_NP=4 cargo run --example p2p
//! fastmprun -np 4 --device tcp target/debug/examples/p2p
//! ```

use fastmp::{ANY_SOURCE, ANY_TAG, Error, PROC_NULL};

fn main() {
    fastmp::main(|world| {
        let (rank, size) = (world.rank(), world.size());
        if size < 2 {
            return Err(Error::InvalidArgument(format!("the p2p example needs at least 2 ranks, not {size}")));
        }
        let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);

        // A token goes once around the ring: [sum of the ranks passed, hops]. Rank 0 sends first,
        // so no two ranks wait on each other.
        let mut token = [0u64; 2];
        if rank == 0 {
            world.send(&[0u64, 1], next, 0)?;
            world.recv(&mut token, prev, 0)?;
            assert_eq!(token, [(size * (size - 1) / 2) as u64, size as u64]);
        } else {
            world.recv(&mut token, prev, 0)?;
            world.send(&[token[0] + rank as u64, token[1] + 1], next, 0)?;
        }

        // Single values: rank 0 hands each rank a number, which comes back doubled.
        if rank == 0 {
            for r in 1..size {
                world.send_value(&(r as f64 * 1.5), r, 1)?;
                let (doubled, status) = world.recv_value::<f64>(r, 1)?;
                assert_eq!((doubled, status.source), (r as f64 * 3.0, r));
            }
        } else {
            let (x, _) = world.recv_value::<f64>(0, 1)?;
            world.send_value(&(2.0 * x), 0, 1)?;
        }

        // Messages of unknown length, taken in arrival order: rank r sends r + 1 copies of r.
        // `recv_vec` probes, allocates exactly and receives (rsmpi's `receive_vec`).
        if rank == 0 {
            let mut seen = vec![false; size];
            for _ in 1..size {
                let (v, status) = world.recv_vec::<u32>(ANY_SOURCE, 2)?;
                assert_eq!(v, vec![status.source as u32; status.source + 1]);
                seen[status.source] = true;
            }
            assert!(seen[1..].iter().all(|&s| s), "every other rank sent once");
        } else {
            world.send(&vec![rank as u32; rank + 1], 0, 2)?;
        }

        // Probe first, then size the buffer (MPI_Probe + MPI_Get_count). With ANY_TAG the status
        // tells the tag; messages from one source arrive in order, so this is the tag-7 one.
        if rank == size - 1 {
            world.send(&[7i32; 5], 0, 7)?;
        } else if rank == 0 {
            let probed = world.probe(size - 1, ANY_TAG)?;
            assert_eq!((probed.source, probed.tag), (size - 1, 7));
            let mut buf = vec![0i32; probed.count::<i32>()];
            let status = world.recv(&mut buf, probed.source, probed.tag)?;
            assert_eq!((buf, status.bytes), (vec![7; 5], 5 * size_of::<i32>()));
        }

        // Matched probe (MPI_Mprobe / MPI_Mrecv): the probed message leaves matching, so no other
        // receive can take it between the probe and the receive.
        if rank == 0 {
            for i in 1..size {
                let (message, status) = world.mprobe(ANY_SOURCE, 3)?;
                let got = if i % 2 == 0 {
                    message.recv_vec::<u16>()?.0
                } else {
                    let mut buf = vec![0u16; status.count::<u16>()];
                    world.mrecv(&mut buf, message)?;
                    buf
                };
                assert_eq!(got, vec![status.source as u16; 2 * status.source]);
            }
        } else {
            world.send(&vec![rank as u16; 2 * rank], 0, 3)?;
        }

        // Polling (MPI_Iprobe) until the message is there.
        if rank == 1 {
            world.send(&[42u8], 0, 4)?;
        } else if rank == 0 {
            let status = loop {
                match world.iprobe(1, 4)? {
                    Some(status) => break status,
                    None => std::thread::yield_now(),
                }
            };
            assert_eq!(status.bytes, 1);
            assert_eq!(world.recv_value::<u8>(1, 4)?.0, 42);
        }

        // Anything serde encodes moves as an object.
        if rank == 0 {
            for r in 1..size {
                world.send_obj(&format!("hello, rank {r}"), r, 5)?;
            }
        } else {
            let (text, _) = world.recv_obj::<String>(0, 5)?;
            assert_eq!(text, format!("hello, rank {rank}"));
        }

        // One buffer sent to the next rank and refilled from the previous one.
        let mut shifted = [rank as i64, -(rank as i64)];
        world.sendrecv_replace(&mut shifted, next, 6, prev, 6)?;
        assert_eq!(shifted, [prev as i64, -(prev as i64)]);

        // Synchronous send (MPI_Ssend): returns once the receive has started.
        if rank == 0 {
            world.ssend(&[1.0f32, 2.0], 1, 8)?;
        } else if rank == 1 {
            let mut got = [0f32; 2];
            world.recv(&mut got, 0, 8)?;
            assert_eq!(got, [1.0, 2.0]);
        }

        // Buffered send (MPI_Bsend): returns at once whatever the size (fastmp copies the data
        // when it cannot leave yet), so every rank may send before it receives.
        let big = vec![rank as u8; 1 << 18];
        world.bsend(&big, next, 9)?;
        let mut inc = vec![0u8; 1 << 18];
        world.recv(&mut inc, prev, 9)?;
        assert!(inc.iter().all(|&b| b == prev as u8));

        // Ready send (MPI_Rsend): only correct once the receive is posted; the barrier orders it.
        let mut ready = [0u32];
        world.scope(|s| {
            let posted = if rank == 1 { Some(s.irecv(&mut ready, 0, 10)?) } else { None };
            world.barrier()?;
            if rank == 0 {
                world.rsend(&[5u32], 1, 10)?;
            }
            posted.map(|r| r.wait()).transpose()
        })?;
        assert_eq!(ready[0], if rank == 1 { 5 } else { 0 });

        // PROC_NULL (a missing neighbour): a send to it does nothing, a receive from it returns
        // at once with an empty status and leaves the buffer as it was.
        world.send(&[1u8], PROC_NULL, 11)?;
        let mut untouched = [7u8];
        let status = world.recv(&mut untouched, PROC_NULL, 11)?;
        assert_eq!((untouched, status.source, status.bytes), ([7], PROC_NULL, 0));

        println!("p2p: rank {rank}/{size} ok (ring token {token:?}, shifted {shifted:?})");
        Ok(())
    });
}
