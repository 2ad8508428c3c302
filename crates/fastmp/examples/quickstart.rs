//! Ranks exchange messages and report what each one got.
//!
//! Run: `cargo run --release --example quickstart` (ranks from `FASTMP_NP`, default 4).

use fastmp::ANY_SOURCE;

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

        let mut report = format!(
            "rank {rank}/{size}: ring got {:?} from rank {left}; neighbours sent {:?} (left) and {:?} (right)",
            from_left, got[0], got[1]
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
