//! One-sided communication (MPI RMA): windows, put/get/accumulate under the three kinds of
//! synchronisation (fence, post/start/complete/wait, passive-target locks), a shared counter
//! with fetch_and_op, and the owner's plain access to its part through `Window::local`.
//!
//! Runs on any number of ranks (1 too). Thread ranks (shm device) or one process per rank (tcp):
//!
//! ```text
//! FASTMP_NP=4 cargo run --example one_sided
//! fastmprun -np 4 --device tcp target/debug/examples/one_sided
//! ```

use fastmp::op::Sum;
use fastmp::window::{Assert, LockKind};

fn main() {
    fastmp::main(|world| {
        let (rank, size) = (world.rank(), world.size());
        let (next, prev) = ((rank + 1) % size, (rank + size - 1) % size);

        // Fence: every rank writes its number into slot `rank` of every part (MPI_Win_fence
        // around MPI_Put), then reads its right neighbour's part back.
        let win = world.win_allocate::<u64>(size)?;
        win.fence(Assert::NOPRECEDE)?;
        for target in 0..size {
            win.put(&[rank as u64 * 10], target, rank)?;
        }
        win.fence(Assert::NONE)?;
        let mut seen = vec![0u64; size];
        win.get(&mut seen, next, 0)?;
        win.fence(Assert::NOSUCCEED)?;
        let expected: Vec<u64> = (0..size as u64).map(|r| r * 10).collect();
        assert_eq!(seen, expected);
        // Between epochs the owner reads (and may write) its part as a plain slice.
        assert_eq!(*win.local()?, expected[..]);

        // PSCW: each rank exposes its part to its left neighbour only and accumulates into its
        // right neighbour's: an epoch between neighbours, no collective.
        let group = win.comm().group();
        win.post(&group.incl(&[prev])?, Assert::NONE)?;
        win.start(&group.incl(&[next])?, Assert::NONE)?;
        win.accumulate(&[1], next, rank, Sum)?;
        win.complete()?;
        win.wait()?;
        assert_eq!(win.local()?[prev], prev as u64 * 10 + 1);
        win.free()?;

        // Passive target: a ticket counter on rank 0 that every rank draws from with
        // fetch_and_op, and an exclusive lock around a read-modify-write nobody else interleaves.
        let counter = world.win_allocate::<u64>(if rank == 0 { 2 } else { 0 })?;
        counter.lock(LockKind::Shared, 0, Assert::NONE)?;
        let mut tickets = Vec::new();
        for _ in 0..3 {
            tickets.push(counter.fetch_and_op(1, 0, 0, Sum)?);
        }
        counter.unlock(0)?;
        assert!(tickets.windows(2).all(|t| t[0] < t[1]));
        counter.lock(LockKind::Exclusive, 0, Assert::NONE)?;
        let mut value = [0u64];
        counter.get(&mut value, 0, 1)?;
        counter.flush(0)?;
        counter.put(&[value[0] + rank as u64 + 1], 0, 1)?;
        counter.unlock(0)?;
        world.barrier()?;
        if rank == 0 {
            let total = counter.local()?;
            assert_eq!(total[..], [3 * size as u64, (size * (size + 1) / 2) as u64]);
        }
        counter.free()?;

        // win_create exposes memory the caller owns for the duration of a closure.
        let mut mine = [0i32; 2];
        world.win_create(&mut mine, |win| {
            win.fence(Assert::NONE)?;
            win.put(&[rank as i32 + 1], prev, 0)?;
            win.fence(Assert::NOSUCCEED)
        })?;
        assert_eq!(mine, [next as i32 + 1, 0]);
        println!("one_sided: rank {rank}/{size} ok (tickets {tickets:?}, neighbour's slot {})", seen[next]);
        Ok(())
    })
}
