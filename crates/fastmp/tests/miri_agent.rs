//! The progress agent under Miri (`scripts/miri.sh`, with `-Zmiri-ignore-leaks`: the agent's
//! worker threads live as long as the process, by design; and `-Zmiri-num-cpus=4`, so that the
//! three ranks leave the agent an idle CPU): a native `ialltoall` whose copies
//! into every rank's buffer go to the agent's thread in chunks that the ranks take too. A
//! binary of its own, as the agent is process-wide once on. (Filled and compared whole: byte
//! loops over 200 KB take minutes under Miri.)

use fastmp::Config;
use fastmp::coll::{Algorithm, Collective, Tuning};

#[test]
fn native_ialltoall_through_the_progress_agent() {
    const BLOCK: usize = 64 * 1024 + 1;
    let tuning = Tuning::defaults().force(Collective::Alltoall, Algorithm::Native).expect("tuning");
    Config::new()
        .np(3)
        .tuning(tuning)
        .progress_agent(true)
        .run(|world| {
            let (me, np) = (world.rank(), world.size());
            let send = vec![me as u8 + 1; np * BLOCK];
            let mut recv = vec![0u8; np * BLOCK];
            world.scope(|s| s.ialltoall(&send, &mut recv)?.wait().map(drop))?;
            let expected: Vec<u8> = (0..np).flat_map(|j| vec![j as u8 + 1; BLOCK]).collect();
            assert!(recv == expected, "rank {me}: the alltoall's bytes differ");
            // Freed right after the call: no agent copy may touch them later.
            drop((send, recv));
            Ok(())
        })
        .expect("job");
}
