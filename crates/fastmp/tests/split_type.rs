//! `Comm::split_type` (process, NUMA node, node), `Comm::placement` (with the NUMA nodes of
//! pinned shm ranks) and `Comm::locality` on both devices: on shm every rank is a thread of one
//! process; on tcp over loopback the expected groups are derived from the placement the device
//! reports, so the checks hold whatever it says about thread ranks.

mod coll_common;

use coll_common::job;
use fastmp::op::Sum;
use fastmp::{Comm, Config, DeviceKind, Error, Locality, Pin, Result, SplitType};

/// World ranks of every member of `comm`, in `comm`'s order.
fn world_ranks(comm: &Comm, world: &Comm) -> Result<Vec<usize>> {
    let all: Vec<usize> = (0..comm.size()).collect();
    let translated = comm.group().translate_ranks(&all, &world.group())?;
    Ok(translated.into_iter().map(|r| r.expect("a member of world")).collect())
}

/// Every world rank's `SharedNuma` key, gathered from the ranks themselves: its node, and its
/// NUMA node where its thread is bound inside one, else its process (the documented rule).
fn numa_keys(world: &Comm) -> Result<Vec<[u64; 3]>> {
    let placement = world.placement();
    let mine = match fastmp::affinity::numa_node_of_current_thread() {
        Some(numa) => [placement.node_of(world.rank()) as u64, 0, numa as u64],
        None => [placement.node_of(world.rank()) as u64, 1, placement.process_of(world.rank()) as u64],
    };
    let mut all = vec![0u64; 3 * world.size()];
    world.allgather(&mine, &mut all)?;
    Ok(all.chunks_exact(3).map(|k| [k[0], k[1], k[2]]).collect())
}

/// Splits `parent` (a communicator of `world`) by `split` with keys reversing the rank order and
/// checks the result against the placement (and, for `SharedNuma`, the ranks' NUMA keys):
/// exactly the parent's ranks that share this rank's process (NUMA group, node), ordered by key,
/// and usable for collectives.
fn check_split(world: &Comm, parent: &Comm, split: SplitType, numa: &[[u64; 3]]) -> Result<()> {
    let placement = world.placement();
    let where_of = |world_rank: usize| match split {
        SplitType::SharedProcess => [placement.process_of(world_rank) as u64, 0, 0],
        SplitType::SharedNuma => numa[world_rank],
        SplitType::SharedNode => [placement.node_of(world_rank) as u64, 0, 0],
    };
    let parent_members = world_ranks(parent, world)?;
    let mine = where_of(world.rank());
    // Keys reverse the parent's order.
    let expected: Vec<usize> = parent_members.iter().rev().copied().filter(|&w| where_of(w) == mine).collect();

    let local = parent.split_type(split, -(parent.rank() as i32))?;
    assert_eq!(world_ranks(&local, world)?, expected, "{split:?} members in key order");
    assert_eq!(local.rank(), expected.iter().position(|&w| w == world.rank()).expect("this rank is a member"));

    let mut sum = [0u64];
    local.allreduce(&[world.rank() as u64], &mut sum, Sum)?;
    assert_eq!(sum[0], expected.iter().map(|&w| w as u64).sum::<u64>(), "{split:?} allreduce");
    for (r, &peer) in expected.iter().enumerate() {
        let locality = local.locality(r)?;
        assert_eq!(locality, placement.locality(world.rank(), peer), "{split:?} locality of {r}");
        match split {
            SplitType::SharedProcess => assert_eq!(locality, Locality::SameProcess),
            SplitType::SharedNuma | SplitType::SharedNode => assert_ne!(locality, Locality::Remote),
        }
    }
    Ok(())
}

/// Every split type on the world and on a split of it (whose numbering differs from the world's).
fn check_all(world: Comm) -> Result<()> {
    let numa = numa_keys(&world)?;
    for split in [SplitType::SharedProcess, SplitType::SharedNuma, SplitType::SharedNode] {
        check_split(&world, &world, split, &numa)?;
        let half = world.split(Some((world.rank() % 2) as u32), -(world.rank() as i32))?.expect("a member");
        check_split(&world, &half, split, &numa)?;
    }
    Ok(())
}

#[test]
fn shm_ranks_share_one_process_and_node() {
    for np in 1..=5 {
        let outcome = job(Config::new().np(np), "split_type on shm", |world| {
            let placement = world.placement();
            assert_eq!((placement.size(), placement.processes(), placement.nodes()), (world.size(), 1, 1));
            for r in 0..world.size() {
                assert_eq!(world.locality(r)?, Locality::SameProcess);
            }
            let local = world.split_type(SplitType::SharedProcess, 0)?;
            assert_eq!((local.size(), local.rank()), (world.size(), world.rank()));
            check_all(world)
        });
        outcome.unwrap_or_else(|e| panic!("np {np}: {e}"));
    }
}

#[test]
fn tcp_thread_ranks_split_by_the_placement_the_device_reports() {
    for np in [1, 2, 3, 4] {
        let config = Config::new().device(DeviceKind::Tcp).np(np);
        let outcome = job(config, "split_type on tcp", |world| {
            let placement = world.placement();
            assert_eq!(placement.size(), world.size());
            assert_eq!(world.locality(world.rank())?, Locality::SameProcess);
            check_all(world)
        });
        outcome.unwrap_or_else(|e| panic!("np {np}: {e}"));
    }
}

#[test]
fn simulated_processes_split_by_process_and_by_numa_group() {
    let outcome = job(Config::new().np(5).simulate_processes(2), "split_type, simulated processes", |world| {
        let local = world.split_type(SplitType::SharedProcess, 0)?;
        assert_eq!(local.size(), if world.rank() < 4 { 2 } else { 1 });
        if fastmp::topology().numa_nodes().len() == 1 {
            // Unpinned threads on a one-node machine are all bound inside it: one group across
            // the (simulated) processes.
            assert_eq!(world.split_type(SplitType::SharedNuma, 0)?.size(), world.size());
        }
        check_all(world)
    });
    outcome.expect("job");
}

/// Pinned shm ranks: the placement knows each rank's NUMA node (from the pinning, before the
/// threads start), it is the node the rank's thread runs on, and `SharedNuma` groups by it.
#[test]
fn pinned_shm_ranks_report_their_numa_node() {
    let allowed = fastmp::affinity::allowed_cpus();
    for pin in [Pin::Compact, Pin::Scatter, Pin::Numa] {
        let allowed = allowed.clone();
        let outcome = job(Config::new().np(3).pin(pin), "numa placement", move |world| {
            let placement = world.placement();
            for r in 0..world.size() {
                let cpu = fastmp::affinity::cpu_for(pin, r, world.size(), &allowed);
                let expected = cpu.and_then(|c| fastmp::topology().numa_of(c));
                assert_eq!(placement.numa_of(r), expected, "{pin:?}: NUMA node of rank {r}");
            }
            if !allowed.is_empty() {
                assert!(placement.numa_of(world.rank()).is_some(), "{pin:?}: pinned rank's node known");
            }
            assert_eq!(fastmp::affinity::numa_node_of_current_thread(), placement.numa_of(world.rank()));
            let numa = world.split_type(SplitType::SharedNuma, 0)?;
            let members = world_ranks(&numa, &world)?;
            let same: Vec<usize> =
                (0..world.size()).filter(|&r| placement.numa_of(r) == placement.numa_of(world.rank())).collect();
            assert_eq!(members, same, "{pin:?}: SharedNuma members");
            check_all(world)
        });
        outcome.unwrap_or_else(|e| panic!("{pin:?}: {e}"));
    }
    let outcome = job(Config::new().np(2), "unpinned placement", |world| {
        assert_eq!((world.placement().numa_of(0), world.placement().numa_of(1)), (None, None));
        Ok(())
    });
    outcome.expect("job");
}

#[test]
fn different_split_types_are_an_error_on_every_rank() {
    for device in [DeviceKind::Shm, DeviceKind::Tcp] {
        let outcome = job(Config::new().device(device).np(3), "mismatched split types", |world| {
            let split = if world.rank() == 1 { SplitType::SharedNode } else { SplitType::SharedProcess };
            let result = world.split_type(split, 0);
            assert!(
                matches!(&result, Err(Error::InvalidArgument(m)) if m.contains("different split types")),
                "{:?}",
                result.map(|c| c.size())
            );
            // Still in step afterwards.
            world.barrier()
        });
        outcome.unwrap_or_else(|e| panic!("{device:?}: {e}"));
    }
}

#[test]
fn locality_of_a_rank_outside_the_communicator_is_an_error() {
    let outcome = job(Config::new().np(2), "locality out of range", |world| {
        assert!(matches!(world.locality(2), Err(Error::RankOutOfRange { rank: 2, size: 2 })));
        Ok(())
    });
    outcome.expect("job");
}
