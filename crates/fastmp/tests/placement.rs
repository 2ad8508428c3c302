//! Where ranks run, as `Comm::placement` reports it: thread ranks started without a launcher are
//! one process on one node, on tcp (over loopback, through the bootstrap's exchange) as on shm.
//! One process per rank under `fastmprun`: `crates/fastmprun/tests/processes.rs`.

use fastmp::{Config, DeviceKind, Locality};

/// What one rank sees: the number of processes and nodes, and its locality to every rank.
fn seen_by_every_rank(device: DeviceKind, np: usize) -> Vec<(usize, usize, Vec<Locality>)> {
    Config::new()
        .device(device)
        .np(np)
        .run(|world| {
            let placement = world.placement();
            assert_eq!(placement.size(), world.size());
            let localities = (0..world.size()).map(|peer| placement.locality(world.rank(), peer)).collect();
            Ok((placement.processes(), placement.nodes(), localities))
        })
        .unwrap()
}

#[test]
fn thread_ranks_are_one_process_on_one_node() {
    for device in [DeviceKind::Tcp, DeviceKind::Shm] {
        for np in [1, 3] {
            for (rank, (processes, nodes, localities)) in seen_by_every_rank(device, np).into_iter().enumerate() {
                assert_eq!((processes, nodes), (1, 1), "{device:?}, np {np}, rank {rank}");
                assert!(
                    localities.iter().all(|&l| l == Locality::SameProcess),
                    "{device:?}, rank {rank}: {localities:?}"
                );
            }
        }
    }
}
