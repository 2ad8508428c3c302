//! Nonblocking point-to-point (MPI_Isend / MPI_Irecv and MPI_Wait*): requests started in a
//! scope (`Comm::scope`; its end completes any request not waited for), completed with
//! `waitall`, `waitany`, `wait_some`, `test_some`, `testall` or `test`; the synchronous,
//! buffered and ready modes; requests that own their buffers and outlive any scope; persistent
//! requests.
//!
//! Needs at least 2 ranks. Run it with thread ranks (shm device) or one process per rank (tcp):
//!
//! ```text
//! FASTMP_NP=4 cargo run --example immediate
//! fastmprun -np 4 --device tcp target/debug/examples/immediate
//! ```

use fastmp::{Error, Result};

fn main() {
    fastmp::main(|world| {
        let (rank, size) = (world.rank(), world.size());
        if size < 2 {
            return Err(Error::InvalidArgument(format!("the immediate example needs at least 2 ranks, not {size}")));
        }
        let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);

        // Both neighbours at once: post every receive and send, then wait for all (MPI_Waitall).
        let mine = [rank as i32; 3];
        let (mut from_prev, mut from_next) = ([0i32; 3], [0i32; 3]);
        world.scope(|s| {
            let mut reqs =
                vec![s.irecv(&mut from_prev, prev, 0)?, s.irecv(&mut from_next, next, 0)?, s.isend(&mine, next, 0)?];
            reqs.push(s.isend(&mine, prev, 0)?);
            let statuses = fastmp::waitall(&mut reqs)?;
            assert_eq!((statuses[0].source, statuses[1].source), (prev, next));
            Ok::<_, Error>(())
        })?;
        assert_eq!((from_prev, from_next), ([prev as i32; 3], [next as i32; 3]));

        // Rank 0 takes one reply from every rank, in whatever order they come (MPI_Waitany).
        if rank == 0 {
            let mut replies = vec![[0u64]; size - 1];
            world.scope(|s| {
                let mut reqs: Vec<_> =
                    replies.iter_mut().zip(1..).map(|(buf, r)| s.irecv(buf, r, 1)).collect::<Result<_>>()?;
                let mut completed = 0;
                while let Some((index, status)) = fastmp::waitany(&mut reqs)? {
                    assert_eq!(status.source, index + 1);
                    completed += 1;
                }
                assert_eq!(completed, size - 1);
                Ok::<_, Error>(())
            })?;
            assert!(replies.iter().zip(1..).all(|(got, r)| got[0] == r * r));
        } else {
            world.send(&[(rank * rank) as u64], 0, 1)?;
        }

        // Overlap: compute while testing the receive (MPI_Test); `irecv_buf`'s completion hands
        // the buffer back, so it can be read before the scope ends.
        let out: Vec<f64> = (0..1000).map(|i| (rank * 1000 + i) as f64).collect();
        let mut inc = vec![0f64; 1000];
        let (polls, received) = world.scope(|s| {
            let mut recv = s.irecv_buf(&mut inc, prev, 2)?;
            let send = s.issend(&out, next, 2)?; // synchronous mode (MPI_Issend)
            let mut polls = 0u64;
            let (got, _status) = loop {
                if let Some(done) = recv.test()? {
                    break done;
                }
                polls += 1; // stands for work overlapped with the transfer
            };
            send.wait()?;
            Ok::<_, Error>((polls, got.iter().sum::<f64>()))
        })?;
        assert_eq!(received, (prev * 1000 * 1000 + 999 * 1000 / 2) as f64);

        // Rank 0 handles replies in batches of whatever has arrived (MPI_Waitsome); the senders
        // poll theirs (MPI_Testsome).
        if rank == 0 {
            let mut bufs = vec![[0u32; 2]; size - 1];
            world.scope(|s| {
                let mut reqs: Vec<_> =
                    bufs.iter_mut().zip(1..).map(|(buf, r)| s.irecv_buf(buf, r, 3)).collect::<Result<_>>()?;
                let mut handled = 0;
                while handled < size - 1 {
                    for (index, (got, status)) in fastmp::wait_some(&mut reqs)? {
                        assert_eq!((&*got, status.source), (&[index as u32 + 1; 2][..], index + 1));
                        handled += 1;
                    }
                }
                Ok::<_, Error>(())
            })?;
        } else {
            let payload = [rank as u32; 2];
            world.scope(|s| {
                let mut reqs = [s.isend(&payload, 0, 3)?];
                while fastmp::test_some(&mut reqs)?.is_empty() {
                    std::thread::yield_now();
                }
                Ok::<_, Error>(())
            })?;
        }

        // Buffered mode (MPI_Ibsend): the data is copied, so the buffer is free at once. Ready
        // mode (MPI_Irsend) is only correct once the receive is posted: the barrier sees to it.
        let mut scratch = [rank as u16; 8];
        let mut from_left = [0u16; 8];
        let mut ready = [0u8; 4];
        world.scope(|s| {
            let mut buffered = [s.ibsend(&scratch, next, 4)?];
            scratch.fill(u16::MAX);
            assert!(fastmp::testall(&mut buffered)?.is_some(), "a buffered send is complete at once");
            world.recv(&mut from_left, prev, 4)?;
            let posted = if rank == 1 { Some(s.irecv(&mut ready, 0, 5)?) } else { None };
            world.barrier()?;
            if rank == 0 {
                s.irsend(&b"gone"[..], 1, 5)?.wait()?;
            }
            posted.map(|r| r.wait()).transpose()?;
            Ok::<_, Error>(())
        })?;
        assert_eq!(from_left, [prev as u16; 8]);
        assert!(rank != 1 || &ready == b"gone");

        // Requests that own their buffer (no scope): a receive kept across loop iterations, its
        // Vec reused. The last one is cancelled (MPI_Cancel), as no message will come.
        let mut pending = world.irecv_owned(vec![0i64; 4], prev, 6)?;
        for step in 0..3 {
            let send = world.isend_owned(vec![(rank * 10 + step) as i64; 4], next, 6)?;
            let (buf, _) = pending.wait()?;
            assert_eq!(buf, [(prev * 10 + step) as i64; 4]);
            pending = world.irecv_owned(buf, prev, 6)?;
            send.wait()?;
        }
        pending.cancel()?;
        assert!(pending.wait()?.1.cancelled);

        // Persistent requests (MPI_Send_init / MPI_Recv_init / MPI_Startall): bound once,
        // started every step.
        let mut exchange = [world.recv_init(vec![0u32; 2], prev, 7)?, world.send_init(vec![0u32; 2], next, 7)?];
        for step in 0..3 {
            exchange[1].buf_mut()?.copy_from_slice(&[rank as u32, step]);
            fastmp::startall(&mut exchange)?;
            fastmp::waitall(&mut exchange)?;
            assert_eq!(exchange[0].buf()?, [prev as u32, step]);
        }

        println!("immediate: rank {rank}/{size} ok ({polls} polls overlapped the receive)");
        Ok(())
    });
}
