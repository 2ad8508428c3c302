//! Ranks exchange messages, run collectives, and report what each one got.
//!
//! Run: `cargo run --release --example quickstart` (ranks from `FASTMP_NP`, default 4).

use fastmp::ANY_SOURCE;
use fastmp::op::{Max, Sum};

fn main() {
    // The launch environment may set FASTMP_NP etc.; default to four thread ranks.
    let config = fastmp::init().map(|c| if std::env::var_os("FASTMP_NP").is_none() { c.np(4) } else { c });
    let config = match config {
        Ok(c) => c,
        Err(e) => {
            eprintln!("quickstart: {e}");
            std::process::exit(2);
        }
    };
    let reports = config.run(|world| {
        let (rank, size) = (world.rank(), world.size());
        let right = (rank + 1) % size;
        let left = (rank + size - 1) % size;

        // 1. A ring shift of plain data (Pod slices move without serialization).
        let mut from_left = [0u64; 3];
        world.sendrecv(&[rank as u64; 3], right, 1, &mut from_left, left, 1)?;

        // 2. Everyone sends a greeting object to rank 0, which takes them in arrival order.
        let mut greetings = Vec::new();
        if rank != 0 {
            world.send_obj(&format!("hello from rank {rank}"), 0, 2)?;
        } else {
            for _ in 1..size {
                let (text, status): (String, _) = world.recv_obj(ANY_SOURCE, 2)?;
                greetings.push(format!("{text} (source {}, tag {})", status.source, status.tag));
            }
            greetings.sort();
        }

        // 3. Nonblocking exchange with both neighbours, completed with waitall.
        let mut got = [[0i32; 2]; 2];
        let [from_l, from_r] = &mut got;
        let mine = [rank as i32, -(rank as i32)];
        world.scope(|s| {
            let mut reqs = vec![
                s.irecv(from_l, left, 3)?,
                s.irecv(from_r, right, 3)?,
                s.isend(&mine, left, 3)?,
                s.isend(&mine, right, 3)?,
            ];
            fastmp::waitall(&mut reqs)
        })?;

        // 4. Collectives: a sum and a maximum over all ranks, a broadcast object, and a split
        //    into even and odd ranks that each sum their own ranks.
        let mut totals = [0u64; 2];
        world.allreduce(&[rank as u64, 1], &mut totals, Sum)?;
        let mut largest = [0u64];
        world.allreduce(&[(rank * rank) as u64], &mut largest, Max)?;
        let mut motto = if rank == 0 { "one program, many ranks".to_string() } else { String::new() };
        world.bcast_obj(&mut motto, 0)?;
        let half = world.split(Some((rank % 2) as u32), rank as i32)?.expect("every rank has a colour");
        let mut half_sum = [0u64];
        half.allreduce(&[rank as u64], &mut half_sum, Sum)?;

        let mut report = format!(
            "rank {rank}/{size}: ring got {:?} from rank {left}; neighbours sent {:?} (left) and {:?} (right)\n  \
             allreduce: sum of ranks {} over {} ranks, largest square {}; bcast_obj: {motto:?}; \
             {} half (rank {} of {}) sums to {}",
            from_left,
            got[0],
            got[1],
            totals[0],
            totals[1],
            largest[0],
            if rank % 2 == 0 { "even" } else { "odd" },
            half.rank(),
            half.size(),
            half_sum[0]
        );
        for g in greetings {
            report.push_str(&format!("\n  rank 0 received: {g}"));
        }
        Ok(report)
    });
    match reports {
        Ok(lines) => lines.iter().for_each(|l| println!("{l}")),
        Err(e) => {
            eprintln!("quickstart failed: {e}");
            std::process::exit(1);
        }
    }
}
