//! Blocking collectives: barrier, broadcast, (all)gather(v), scatter(v), alltoall(v), reductions
//! with predefined and user operations (including MINLOC/MAXLOC and MPI_Reduce_local),
//! reduce-scatter, prefix scans, MPI_IN_PLACE variants, and the `_obj` forms for serde values.
//! `bool`s travel as bytes and are viewed as `bool` with a validating cast.
//!
//! Runs on any number of ranks (1 too). Thread ranks (shm device) or one process per rank (tcp):
//!
//! ```text
//! FASTMP_NP=4 cargo run --example collectives
//! fastmprun -np 4 --device tcp target/debug/examples/collectives
//! ```

use fastmp::bytemuck::checked;
use fastmp::op::{Bor, Land, Loc, Lor, Max, MaxLoc, MinLoc, Op, Prod, Sum, UserOp};

/// Element offsets of consecutive blocks of `counts` (the usual v-collective layout).
fn displs(counts: &[usize]) -> Vec<usize> {
    counts.iter().scan(0, |end, &c| Some(std::mem::replace(end, *end + c))).collect()
}

fn main() {
    fastmp::main(|world| {
        let (rank, size) = (world.rank(), world.size());
        let root = size - 1; // any rank can be the root
        let at_root = |n: usize| if rank == root { n } else { 0 };
        world.barrier()?;

        let mut params = if rank == root { [1.5f64, -2.0] } else { [0.0; 2] };
        world.bcast(&mut params, root)?;
        let mut names = if rank == 0 { vec!["alpha".to_string(), "beta".into()] } else { Vec::new() };
        world.bcast_obj(&mut names, 0)?;
        assert_eq!((params, names), ([1.5, -2.0], vec!["alpha".to_string(), "beta".into()]));

        // Scatter two elements to each rank, gather them back at the root.
        let table: Vec<u32> = if rank == root { (0..2 * size as u32).collect() } else { Vec::new() };
        let mut pair = [0u32; 2];
        world.scatter(&table, &mut pair, root)?;
        assert_eq!(pair, [2 * rank as u32, 2 * rank as u32 + 1]);
        let mut back = vec![0u32; at_root(2 * size)];
        world.gather(&pair, &mut back, root)?;
        assert_eq!(back, table);

        // Rank r gets r + 1 elements (scatterv), and sends r + 1 copies of r (gatherv, allgatherv).
        let counts: Vec<usize> = (1..=size).collect();
        let offsets = displs(&counts);
        let total = counts.iter().sum::<usize>();
        let mut part = vec![0u32; rank + 1];
        world.scatterv(&(0..at_root(total) as u32).collect::<Vec<_>>(), &counts, &offsets, &mut part, root)?;
        assert_eq!(part, (offsets[rank] as u32..(offsets[rank] + rank + 1) as u32).collect::<Vec<_>>());
        let expected: Vec<u32> = (0..size).flat_map(|r| vec![r as u32; r + 1]).collect();
        let mut ragged = vec![0u32; at_root(total)];
        world.gatherv(&vec![rank as u32; rank + 1], &mut ragged, &counts, &offsets, root)?;
        assert!(rank != root || ragged == expected);
        let mut everyone = vec![0u32; total];
        world.allgatherv(&vec![rank as u32; rank + 1], &mut everyone, &counts, &offsets)?;
        assert_eq!(everyone, expected);

        // bool is not Pod (not every byte is a bool): gather bytes, then view them checked.
        let mut bytes = vec![0u8; size];
        world.allgather(&[u8::from(rank % 2 == 0)], &mut bytes)?;
        let evens: &[bool] = checked::try_cast_slice(&bytes).expect("every byte is 0 or 1");
        assert!(evens.iter().enumerate().all(|(r, &even)| even == (r % 2 == 0)));

        // Block j goes to rank j (alltoall); rank i sends (i + j) % 3 + 1 elements to j (alltoallv).
        let mut swapped = vec![0usize; size];
        world.alltoall(&(0..size).map(|j| 100 * rank + j).collect::<Vec<_>>(), &mut swapped)?;
        assert!(swapped.iter().enumerate().all(|(i, &x)| x == 100 * i + rank));
        let sizes: Vec<usize> = (0..size).map(|j| (rank + j) % 3 + 1).collect();
        let send: Vec<usize> = (0..size).flat_map(|j| vec![100 * rank + j; sizes[j]]).collect();
        let mut recv = vec![0usize; sizes.iter().sum()];
        world.alltoallv(&send, &sizes, &displs(&sizes), &mut recv, &sizes, &displs(&sizes))?;
        assert_eq!(recv, (0..size).flat_map(|i| vec![100 * i + rank; sizes[i]]).collect::<Vec<_>>());

        // Reductions with predefined operations.
        let mut sums = vec![0u64; at_root(2)];
        world.reduce(&[rank as u64, 1], &mut sums, Sum, root)?;
        assert!(rank != root || sums == [(size * (size - 1) / 2) as u64, size as u64]);
        // Integer products wrap and bits repeat past 64 ranks, as the expected values do.
        let bit = |r: usize| 1u64 << (r % 64);
        let (mut top, mut product, mut bits) = ([0i32], [0u64], [0u64]);
        world.allreduce(&[rank as i32], &mut top, Max)?;
        world.allreduce(&[rank as u64 + 1], &mut product, Prod)?;
        world.allreduce(&[bit(rank)], &mut bits, Bor)?;
        let expected_product = (1..=size as u64).fold(1u64, u64::wrapping_mul);
        assert_eq!((top[0], product[0]), (root as i32, expected_product));
        assert_eq!(bits[0], (0..size).fold(0, |acc, r| acc | bit(r)));
        let (mut all_even, mut any_even) = ([0u8], [0u8]);
        world.allreduce(&[u8::from(rank % 2 == 0)], &mut all_even, Land)?;
        world.allreduce(&[u8::from(rank % 2 == 0)], &mut any_even, Lor)?;
        assert_eq!((all_even[0], any_even[0]), (u8::from(size == 1), 1));

        // Where the extremes are (MPI_MINLOC / MPI_MAXLOC): value and rank pairs.
        let value = |r: usize| (r as f64 - 1.0).powi(2);
        let mine = [Loc { value: value(rank), index: rank as i64 }];
        let (mut lowest, mut highest) = ([Loc::default()], [Loc::default()]);
        world.allreduce(&mine, &mut lowest, MinLoc)?;
        world.allreduce(&mine, &mut highest, MaxLoc)?;
        let argmax = (0..size).max_by(|&a, &b| value(a).total_cmp(&value(b)).then(b.cmp(&a))).unwrap();
        assert_eq!(lowest[0].index, if size > 1 { 1 } else { 0 });
        assert_eq!((highest[0].index, highest[0].value), (argmax as i64, value(argmax)));

        // A user operation (MPI_Op_create): greatest common divisor of 12 (r + 1).
        let gcd = UserOp::commutative(|input: &[u64], inout: &mut [u64]| {
            for (&a, b) in input.iter().zip(inout.iter_mut()) {
                let (mut x, mut y) = (a, *b);
                while y != 0 {
                    (x, y) = (y, x % y);
                }
                *b = x;
            }
        });
        let mut divisor = [0u64];
        world.allreduce(&[12 * (rank as u64 + 1)], &mut divisor, &gcd)?;
        assert_eq!(divisor, [12]);

        // Every operation also combines two local buffers (MPI_Reduce_local).
        let mut local = [1u64, 2];
        Sum.combine(&[10, 20], &mut local);
        assert_eq!(local, [11, 22]);

        // Reduce, then scatter blocks of the result; prefix sums.
        let mut block = [0usize];
        world.reduce_scatter_block(&(0..size).map(|j| j + rank).collect::<Vec<_>>(), &mut block, Sum)?;
        assert_eq!(block[0], size * rank + size * (size - 1) / 2);
        let (mut inclusive, mut exclusive) = ([0u32], [0u32]);
        world.scan(&[rank as u32 + 1], &mut inclusive, Sum)?;
        world.exscan(&[rank as u32 + 1], &mut exclusive, Sum)?;
        assert_eq!(
            (inclusive[0], exclusive[0]),
            ((rank + 1) as u32 * (rank + 2) as u32 / 2, (rank * (rank + 1) / 2) as u32)
        );

        // MPI_IN_PLACE: one buffer is both input and output.
        let mut acc = [rank as u64, 1];
        world.allreduce_in_place(&mut acc, Sum)?;
        assert_eq!(acc, [(size * (size - 1) / 2) as u64, size as u64]);
        let mut slots = if rank == root { vec![u32::MAX; size] } else { vec![rank as u32] };
        if rank == root {
            slots[root] = root as u32; // the root's own block is already in place
        }
        world.gather_in_place(&mut slots, root)?;
        assert!(rank != root || slots == (0..size as u32).collect::<Vec<_>>());

        // Serde values: gathered at the root, combined in rank order by a user function.
        let labels = world.gather_obj(&format!("r{rank}"), root)?;
        assert_eq!(labels.map(|l| l.len()), (rank == root).then_some(size));
        let joined = world.allreduce_obj(&rank.to_string(), |a, b| a + &b)?;
        assert_eq!(joined, (0..size).map(|r| r.to_string()).collect::<String>());

        println!("collectives: rank {rank}/{size} ok (gcd {}, joined {joined:?})", divisor[0]);
        Ok(())
    });
}
