//! The environment of a job: the clock (MPI_Wtime / MPI_Wtick), the processor name
//! (MPI_Get_processor_name), the device, where each rank runs (process and node), and how a
//! job ends early: `world.abort(code)` (MPI_Abort) stops every rank and the job exits with
//! `code`. Pass `--abort CODE` to see it: rank 0 aborts after the checks.
//!
//! Runs on any number of ranks (1 too). Thread ranks (shm device) or one process per rank (tcp):
//!
//! ```text
//! FASTMP_NP=4 cargo run --example environment
//! fastmprun -np 4 --device tcp target/debug/examples/environment
//! fastmprun -np 4 --device tcp target/debug/examples/environment --abort 3; echo $?   # 3
//! ```

use fastmp::op::Max;
use fastmp::{Error, Locality};

fn main() {
    let abort_code = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => None,
        [flag, code] if flag == "--abort" => Some(code.parse::<i32>().unwrap_or_else(|e| {
            eprintln!("environment: --abort needs an integer exit code ({e})");
            std::process::exit(2)
        })),
        _ => {
            eprintln!("usage: environment [--abort CODE]");
            std::process::exit(2)
        }
    };
    fastmp::main(|world| {
        let (rank, size) = (world.rank(), world.size());
        let start = fastmp::wtime();
        let tick = fastmp::wtick();
        assert!(tick > 0.0 && tick < 1.0, "wtick {tick}");

        // Where everyone runs: host names, and the process/node map every rank agrees on.
        let host = fastmp::processor_name();
        let hosts = world.allgather_obj(&host)?;
        let placement = world.placement();
        assert_eq!((placement.size(), hosts.len()), (size, size));
        let mut same_process = 0;
        for (r, name) in hosts.iter().enumerate() {
            let locality = world.locality(r)?;
            assert_eq!(locality, placement.locality(rank, r));
            // Ranks on one node share a host name.
            assert!(locality == Locality::Remote || *name == host);
            same_process += usize::from(locality == Locality::SameProcess);
        }
        match world.device_name() {
            "shm" => assert_eq!(same_process, size), // thread ranks of one process
            "tcp" => assert!(same_process >= 1),
            other => return Err(Error::InvalidArgument(format!("unexpected device {other}"))),
        }

        // Timing a collective: the slowest rank's time is the collective's.
        world.barrier()?;
        let t0 = fastmp::wtime();
        world.barrier()?;
        let mut slowest = [0f64];
        world.allreduce(&[fastmp::wtime() - t0], &mut slowest, Max)?;
        assert!(slowest[0] >= 0.0 && fastmp::wtime() >= start);

        println!(
            "environment: rank {rank}/{size} on {host} ({} device, process {} of {}, node {} of {}): \
             barrier took at most {:.1} us, clock tick {tick:e} s",
            world.device_name(),
            placement.process_of(rank),
            placement.processes(),
            placement.node_of(rank),
            placement.nodes(),
            slowest[0] * 1e6,
        );
        if let Some(code) = abort_code {
            world.barrier()?; // every rank has printed
            if rank == 0 {
                world.abort(code);
            }
            // The others wait for a message that never comes; the abort ends their wait.
            world.recv_value::<u8>(0, 0)?;
            unreachable!("rank 0 aborts the job");
        }
        Ok(())
    });
}
