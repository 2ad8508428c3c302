//! Nonblocking collectives (MPI_Ibarrier, MPI_Ibcast, ...): started in a scope like nonblocking
//! point-to-point, several in flight at once, completed with `wait`, `test` or `waitall` while
//! the rank computes. Every blocking collective has its `i` twin, `_in_place` ones included.
//!
//! Runs on any number of ranks (1 too). Thread ranks (shm device) or one process per rank (tcp):
//!
//! ```text
//! FASTMP_NP=4 cargo run --example immediate_collectives
//! fastmprun -np 4 --device tcp target/debug/examples/immediate_collectives
//! ```

use fastmp::op::{Max, Sum, UserOp};
use fastmp::{Error, Request};

fn main() {
    fastmp::main(|world| {
        let (rank, size) = (world.rank(), world.size());
        let root = size / 2;
        let at_root = |n: usize| if rank == root { n } else { 0 };

        // Buffers outlive the scope, which lends them to the operations until they complete.
        let mut field = if rank == root { vec![0.25f64; 4096] } else { vec![0.0; 4096] };
        let table: Vec<i32> = (0..at_root(size) as i32 * 3).collect();
        let mut slice = [0i32; 3];
        let mine = [rank as u64 * 2, 1];
        let mut gathered = vec![0u64; at_root(2 * size)];
        let (mut everyone, mut at_root_sum, mut maximum) = (vec![0u64; 2 * size], vec![0u64; at_root(2)], [0u64; 2]);
        let send: Vec<usize> = (0..size).map(|j| rank * size + j).collect();
        let mut transposed = vec![0usize; size];
        let (mut prefix, mut before) = ([0u32], [0u32]);

        let overlapped = world.scope(|s| {
            let arrived = s.ibarrier()?;
            let mut bcast = s.ibcast(&mut field, root)?;
            // Work that needs no data from the others runs while the broadcast moves; the loop
            // also polls it (MPI_Test), which makes progress on every started collective.
            let mut local = 0u64;
            while bcast.test()?.is_none() {
                local += 1;
            }
            let mut reqs: Vec<Request<'_>> = vec![
                arrived,
                s.iscatter(&table, &mut slice, root)?,
                s.igather(&mine, &mut gathered, root)?,
                s.iallgather(&mine, &mut everyone)?,
                s.ireduce(&mine, &mut at_root_sum, Sum, root)?,
                s.iallreduce(&mine, &mut maximum, Max)?,
                s.ialltoall(&send, &mut transposed)?,
                s.iscan(&[1u32], &mut prefix, Sum)?,
                s.iexscan(&[1u32], &mut before, Sum)?,
            ];
            fastmp::waitall(&mut reqs)?;
            Ok::<_, Error>(local)
        })?;
        assert!(field.iter().all(|&x| x == 0.25));
        assert_eq!(slice, [3 * rank as i32, 3 * rank as i32 + 1, 3 * rank as i32 + 2]);
        assert!(everyone.chunks(2).enumerate().all(|(r, pair)| pair == [r as u64 * 2, 1]));
        assert!(rank != root || gathered == everyone);
        assert!(rank != root || at_root_sum == [(size * (size - 1)) as u64, size as u64]);
        assert_eq!(maximum, [(size as u64 - 1) * 2, 1]);
        assert!(transposed.iter().enumerate().all(|(i, &x)| x == i * size + rank));
        assert_eq!((prefix[0], before[0]), (rank as u32 + 1, rank as u32));

        // The v-forms, reduce-scatter, a user operation and MPI_IN_PLACE, waited one by one.
        let counts: Vec<usize> = (0..size).map(|r| r % 2 + 1).collect();
        let displs: Vec<usize> = counts.iter().scan(0, |end, &c| Some(std::mem::replace(end, *end + c))).collect();
        let total: usize = counts.iter().sum();
        let mine_v = vec![rank as u8; counts[rank]];
        let mut ragged = vec![0u8; total];
        let mut reduced = [0i64];
        let mut squares = [rank as u64 * rank as u64];
        let mut all_in_place: Vec<u32> = (0..size).map(|r| if r == rank { r as u32 * 10 } else { 0 }).collect();
        let biggest_magnitude = UserOp::commutative(|input: &[i64], inout: &mut [i64]| {
            for (&a, b) in input.iter().zip(inout.iter_mut()) {
                if a.abs() > b.abs() {
                    *b = a;
                }
            }
        });
        let signed = [if rank % 2 == 0 { rank as i64 } else { -(rank as i64) }];
        let block: Vec<u32> = (0..size as u32).collect();
        let mut my_block = [0u32];
        world.scope(|s| {
            s.iallgatherv(&mine_v, &mut ragged, &counts, &displs)?.wait()?;
            s.iallreduce(&signed, &mut reduced, &biggest_magnitude)?.wait()?;
            s.ireduce_scatter_block(&block, &mut my_block, Sum)?.wait()?;
            s.iallreduce_in_place(&mut squares, Sum)?.wait()?;
            s.iallgather_in_place(&mut all_in_place)?.wait()?;
            Ok::<_, Error>(())
        })?;
        let expected: Vec<u8> = (0..size).flat_map(|r| vec![r as u8; r % 2 + 1]).collect();
        assert_eq!(ragged, expected);
        let last = size as i64 - 1;
        assert_eq!(reduced[0], if last % 2 == 0 { last } else { -last });
        assert_eq!(my_block[0], (rank * size) as u32);
        assert_eq!(squares[0], (0..size as u64).map(|r| r * r).sum::<u64>());
        assert_eq!(all_in_place, (0..size as u32).map(|r| r * 10).collect::<Vec<_>>());

        println!("immediate_collectives: rank {rank}/{size} ok ({overlapped} polls overlapped the broadcast)");
        Ok(())
    });
}
