//! Process topologies: a balanced Cartesian grid (`dims_create`, `cart_create` with reorder,
//! `cart_map`, coordinates, `shift` with `PROC_NULL` past a non-periodic edge, `sub`), a halo
//! exchange that needs no edge cases, distributed graphs (`dist_graph_create_adjacent`,
//! `dist_graph_create`) and neighbourhood collectives, blocking and nonblocking.
//!
//! Runs on any number of ranks (1 too). Thread ranks (shm device) or one process per rank (tcp):
//!
//! ```text
//! FASTMP_NP=6 cargo run --example topologies
//! fastmprun -np 6 --device tcp target/debug/examples/topologies
//! ```

use fastmp::{Error, NeighborTopology, PROC_NULL, dims_create};

fn main() {
    fastmp::main(|world| {
        let (rank, size) = (world.rank(), world.size());

        // A 2-D grid as square as the rank count allows, periodic along dimension 0 only.
        let (dims, periods) = (dims_create(size, &[0, 0])?, [true, false]);
        assert_eq!(dims.iter().product::<usize>(), size);
        let grid = world.cart_create(&dims, &periods, true)?.expect("the grid has a cell for every rank");
        // With reorder, grid ranks are what cart_map computes for this machine.
        assert_eq!(world.cart_map(&dims, &periods)?, Some(grid.rank()));
        let here = grid.coords(grid.rank())?;
        assert_eq!(grid.rank_of(&[here[0] as isize, here[1] as isize])?, grid.rank());
        // Coordinates wrap along the periodic dimension.
        assert_eq!(grid.rank_of(&[here[0] as isize - dims[0] as isize, here[1] as isize])?, grid.rank());

        // Neighbours: (source, destination) one step down and up each dimension.
        let (below0, above0) = grid.shift(0, 1)?;
        let (left, right) = grid.shift(1, 1)?;
        assert_eq!((left == PROC_NULL, right == PROC_NULL), (here[1] == 0, here[1] + 1 == dims[1]));
        // Halo exchange along dimension 1: the edges talk to PROC_NULL, which completes at once
        // and leaves the receive buffer as it was.
        let mut halo = [u64::MAX];
        grid.sendrecv(&[grid.rank() as u64], right, 0, &mut halo, left, 0)?;
        assert_eq!(halo[0], if left == PROC_NULL { u64::MAX } else { left as u64 });

        // Every neighbour at once: blocks in the order below0, above0, left, right.
        let mut around = [u32::MAX; 4];
        grid.neighbor_allgather(&[grid.rank() as u32], &mut around)?;
        for (got, neighbour) in around.into_iter().zip([below0, above0, left, right]) {
            assert_eq!(got, if neighbour == PROC_NULL { u32::MAX } else { neighbour as u32 });
        }

        // The row through this rank (dimension 1 kept): a grid of its own.
        let row = grid.sub(&[false, true])?;
        assert_eq!((row.size(), row.rank()), (dims[1], here[1]));

        // A bidirectional ring as a graph: receive from prev and next, send to next and prev,
        // with weights (MPI_Dist_graph_create_adjacent). Two ranks make the edges repeat.
        let (prev, next) = ((rank + size - 1) % size, (rank + 1) % size);
        let ring =
            world.dist_graph_create_adjacent(&[prev, next], Some(&[1, 2]), &[next, prev], Some(&[2, 1]), false)?;
        assert_eq!(ring.neighbors(), (&[prev, next][..], &[next, prev][..]));
        assert!(ring.is_weighted());
        // Block 0 goes to next, block 1 to prev.
        let mut heard = [0usize; 2];
        ring.neighbor_alltoall(&[10 * rank, 10 * rank + 1], &mut heard)?;
        assert_eq!(heard, [10 * prev, 10 * next + 1]);
        // The v-form: prev sends its rank once, next sends it twice.
        let mut ragged = [0usize; 3];
        ring.neighbor_alltoallv(&[rank, rank, rank], &[1, 2], &[0, 1], &mut ragged, &[1, 2], &[0, 1])?;
        assert_eq!(ragged, [prev, next, next]);

        // Any rank may describe any edges (MPI_Dist_graph_create): rank 0 alone declares a star
        // of edges from every other rank to itself.
        let others: Vec<usize> = (1..size).collect();
        let star = if rank == 0 {
            world.dist_graph_create(&others, &vec![1; size - 1], &vec![0; size - 1], None, false)?
        } else {
            world.dist_graph_create(&[], &[], &[], None, false)?
        };
        let (sources, destinations) = star.neighbors_count();
        assert_eq!((sources, destinations), if rank == 0 { (size - 1, 0) } else { (0, 1) });

        // Nonblocking neighbourhood collectives run in a scope like the others.
        let mine = [rank as u64 * rank as u64];
        let mut squares = vec![0u64; sources];
        let mut neighbours = [0u64; 2];
        world.scope(|s| {
            let gather = s.ineighbor_allgather(&star, &mine, &mut squares)?;
            let swap = s.ineighbor_allgather(&ring, &mine, &mut neighbours)?;
            fastmp::waitall(&mut [gather, swap])?;
            Ok::<_, Error>(())
        })?;
        let expected: Vec<u64> = if rank == 0 { others.iter().map(|&r| (r * r) as u64).collect() } else { Vec::new() };
        assert_eq!(squares, expected);
        assert_eq!(neighbours, [(prev * prev) as u64, (next * next) as u64]);

        println!("topologies: rank {rank}/{size} ok (grid {dims:?}, coordinates {here:?}, halo {halo:?})");
        Ok(())
    });
}
