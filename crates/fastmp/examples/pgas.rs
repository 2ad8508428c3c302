//! PGAS collectives on shared arrays, UPC style: every rank fills its block of a shared array,
//! then a broadcast, a gather_all and a reduction move and combine the blocks.
//!
//! Run with `cargo run --release --example pgas` (4 thread ranks on the shm device; set
//! `FASTMP_NP` or `FASTMP_DEVICE=tcp` to change that, or start it under `fastmprun`).

use fastmp::op::Sum;
use fastmp::pgas::{self, Collective, Sync};

const B: usize = 4;

fn main() -> fastmp::Result<()> {
    let config = fastmp::Config::from_env()?;
    let chosen = ["FASTMP_NP", "FASTMP_SIZE"].iter().any(|v| std::env::var_os(v).is_some());
    let config = if chosen { config } else { config.np(4) };
    config.run(|world| {
        let (me, np) = (world.rank(), world.size());
        // UPC: shared [B] u64 src[B*THREADS], and destinations big enough for a gather_all.
        let src = world.shared_array::<u64>(B)?;
        let copy = world.shared_array::<u64>(B)?;
        let all = world.shared_array::<u64>(B * np)?;
        let total = world.shared_array::<u64>(1)?;

        // Each rank fills its own block: rank r holds 10r, 10r+1, ...
        for (i, v) in src.local()?.iter_mut().enumerate() {
            *v = (10 * me + i) as u64;
        }

        // upc_all_broadcast(copy, &src[B*(np-1)], B, UPC_IN_ALLSYNC | UPC_OUT_MYSYNC): the
        // entry barrier makes every rank's filling visible; MYSYNC on exit lets a rank go on as
        // soon as nobody needs its blocks any more.
        pgas::broadcast(&copy, &src, np - 1, B, Sync::IN_ALLSYNC | Sync::OUT_MYSYNC)?;

        // upc_all_gather_all with point-to-point synchronisation on both sides.
        let algorithm = all.algorithm(Collective::GatherAll, B * 8);
        pgas::gather_all(&all, &src, B, Sync::MY)?;

        // upc_all_reduceUL(total, src, UPC_ADD, np*B, B, NULL, UPC_IN_MYSYNC | UPC_OUT_NOSYNC): with
        // OUT_NOSYNC the root's result is safe to read after a barrier.
        pgas::reduce(&total, &src, 0, np * B, Sum, Sync::IN_MYSYNC | Sync::OUT_NOSYNC)?;
        total.barrier()?;

        // Every rank checks what it got; a wrong result ends the job with an error.
        let got_copy = copy.local()?.to_vec();
        let want_copy: Vec<u64> = (0..B).map(|i| (10 * (np - 1) + i) as u64).collect();
        let got_all = all.local()?.to_vec();
        let want_all: Vec<u64> = (0..np * B).map(|g| (10 * (g / B) + g % B) as u64).collect();
        if got_copy != want_copy || got_all != want_all {
            return Err(fastmp::Error::other(format!("rank {me}: broadcast {got_copy:?}, gather_all {got_all:?}")));
        }
        let mut reduced = String::new();
        if me == 0 {
            let want: u64 = want_all.iter().sum();
            let got = total.local()?[0];
            if got != want {
                return Err(fastmp::Error::other(format!("reduce gave {got}, expected {want}")));
            }
            reduced = format!(", reduce of the whole array = {got}");
        }
        println!("pgas: rank {me}/{np} ok (broadcast {got_copy:?}, gather_all by {algorithm}{reduced})");
        total.free()?;
        all.free()?;
        copy.free()?;
        src.free()
    })?;
    Ok(())
}
