//! Neighbour alltoall on a periodic 2-D grid (dims from `dims_create(np, &[0, 0])`), the fastmp side of
//! `bench/neighbor_bench.c`: for each block size, 7 rounds of `iters` calls after a warm-up,
//! the median round's time per call in µs (rank 0 prints; OSU-style average within a round).
//!
//! `FASTMP_NP=2 FASTMP_PIN=compact cargo run --release -p fastmp --example neighbor_bench`
//! (shm), or under `fastmprun -np 2 --device tcp` (tcp).

use fastmp::{NeighborTopology, dims_create};

fn main() {
    fastmp::main(|world| {
        let dims = dims_create(world.size(), &[0, 0])?;
        let grid = world.cart_create(&dims, &[true, true], false)?.expect("every rank is on the grid");
        let slots = 4;
        if grid.rank() == 0 {
            println!(
                "# neighbor_alltoall, {} ranks, grid {dims:?} periodic, device {}",
                grid.size(),
                grid.device_name()
            );
            println!("# {:>8} {:>12}", "bytes", "median µs");
        }
        for block in [8usize, 64, 512, 4096, 32768, 262144] {
            let send = vec![1u8; slots * block];
            let mut recv = vec![0u8; slots * block];
            let iters = if block <= 4096 { 2000 } else { 200 };
            for _ in 0..iters / 10 {
                grid.neighbor_alltoall(&send, &mut recv)?;
            }
            let mut rounds = Vec::new();
            for _ in 0..7 {
                grid.barrier()?;
                let start = std::time::Instant::now();
                for _ in 0..iters {
                    grid.neighbor_alltoall(&send, &mut recv)?;
                }
                rounds.push(start.elapsed().as_secs_f64() * 1e6 / iters as f64);
            }
            rounds.sort_by(f64::total_cmp);
            if grid.rank() == 0 {
                println!("  {block:>8} {:>12.2}", rounds[3]);
            }
        }
        Ok(())
    });
}
