//! The intercommunicator checks shared by `comms_intercomm.rs` (shm and tcp, at the rank counts
//! it picks) and `mpi_intercomm.rs` (the mpi device, at the rank count `mpirun` gives): each
//! check takes its rank's world and holds for any world of at least 2 ranks.

#![allow(dead_code)]

use fastmp::op::Sum;
use fastmp::{ANY_SOURCE, ANY_TAG, Comm, Error, InterComm, InterRoot, Result};

/// Evens and odds, each group's leader its last rank (so not always rank 0 of the world).
pub fn interleaved(world: &Comm) -> Result<(bool, InterComm)> {
    let even = world.rank().is_multiple_of(2);
    let local = world.split(Some(u32::from(even)), 0)?.expect("every rank has a colour");
    let (evens, odds) = (world.size().div_ceil(2), world.size() / 2);
    let last_even = 2 * (evens - 1);
    let last_odd = 2 * (odds - 1) + 1;
    let inter = local.intercomm_create(local.size() - 1, world, if even { last_odd } else { last_even }, 5)?;
    Ok((even, inter))
}

/// The world ranks of `group`'s members, in order.
pub fn world_ranks(group: &fastmp::Group, world: &Comm) -> Result<Vec<usize>> {
    let all: Vec<usize> = (0..group.size()).collect();
    Ok(group.translate_ranks(&all, &world.group())?.into_iter().map(|r| r.expect("in the world")).collect())
}

/// The message of an `InvalidArgument`, or a panic naming what came instead.
pub fn invalid<T: std::fmt::Debug>(result: Result<T>) -> String {
    match result {
        Err(Error::InvalidArgument(msg)) => msg,
        other => panic!("expected an invalid-argument error, got {other:?}"),
    }
}

/// Halves of the world (the low one `size / 2` ranks): creation, point-to-point across
/// (blocking, scoped, objects, probes, statuses in remote ranks), and a bad remote rank.
pub fn halves_of_the_world_talk_point_to_point(world: Comm) -> Result<()> {
    let (me, n) = (world.rank(), world.size());
    let half_size = n / 2;
    let low = me < half_size;
    let half = world.split(Some(u32::from(low)), 0)?.expect("every rank has a colour");
    let inter = half.intercomm_create(0, &world, if low { half_size } else { 0 }, 77)?;
    let (rank, size, remote) = (inter.rank(), inter.size(), inter.remote_size());
    assert_eq!((size, remote), if low { (half_size, n - half_size) } else { (n - half_size, half_size) });
    let low_ranks: Vec<usize> = (0..half_size).collect();
    let high_ranks: Vec<usize> = (half_size..n).collect();
    let (ours, theirs) = if low { (&low_ranks, &high_ranks) } else { (&high_ranks, &low_ranks) };
    assert_eq!(&world_ranks(&inter.group(), &world)?, ours);
    assert_eq!(&world_ranks(&inter.remote_group(), &world)?, theirs);

    // Each rank sends its world rank to remote rank `rank % remote`; statuses name remote ranks.
    inter.send(&[me as u32], rank % remote, 1)?;
    let expected: Vec<usize> = (0..remote).filter(|q| q % size == rank).collect();
    let mut seen = Vec::new();
    for _ in &expected {
        let mut got = [0u32];
        let status = inter.recv(&mut got, ANY_SOURCE, 1)?;
        assert_eq!(got[0] as usize, theirs[status.source], "status.source is the sender's remote rank");
        seen.push(status.source);
    }
    seen.sort_unstable();
    assert_eq!(seen, expected);

    // Nonblocking pairs: rank r with remote rank r.
    if rank < remote {
        let out = [me as u64; 3];
        let mut inc = [0u64; 3];
        let statuses = inter.scope(|s| {
            let mut reqs = vec![s.irecv(&mut inc, rank, 2)?, s.isend(&out, rank, 2)?];
            fastmp::waitall(&mut reqs)
        })?;
        assert_eq!(statuses[0].source, rank);
        assert_eq!(inc, [theirs[rank] as u64; 3]);
    }

    // Objects and probes between the leaders.
    if rank == 0 {
        inter.send_obj(&format!("from {me}"), 0, 3)?;
        assert_eq!(inter.probe(0, 3)?.source, 0);
        let (text, _): (String, _) = inter.recv_obj(0, 3)?;
        assert_eq!(text, format!("from {}", theirs[0]));
        assert!(inter.iprobe(ANY_SOURCE, 3)?.is_none());
    }
    assert!(matches!(
        inter.send(&[0u8], remote, 4),
        Err(Error::RankOutOfRange { rank: r, size: s }) if (r, s) == (remote, remote)
    ));
    // The intercommunicator's traffic never meets the world's.
    assert!(world.iprobe(ANY_SOURCE, ANY_TAG)?.is_none());
    inter.barrier()
}

/// Interleaved groups: bcast from each group's last rank, allreduce, allgather with lengths
/// that differ per group, barrier, and a bad root.
pub fn collectives_move_data_between_the_groups(world: Comm) -> Result<()> {
    let me = world.rank();
    let (even, inter) = interleaved(&world)?;
    let remote_worlds: Vec<u64> = (0..world.size() as u64).filter(|r| (r % 2 == 0) != even).collect();

    // bcast from each group's last rank in turn.
    for root_even in [true, false] {
        let root_local = if root_even { world.size().div_ceil(2) - 1 } else { world.size() / 2 - 1 };
        let root_world = 2 * root_local + usize::from(!root_even);
        let mut buf = [if me == root_world { 1000 + root_world as u32 } else { 7 }; 2];
        let root = match (me == root_world, even == root_even) {
            (true, _) => InterRoot::Root,
            (false, true) => InterRoot::Null,
            (false, false) => InterRoot::Remote(root_local),
        };
        inter.bcast(&mut buf, root)?;
        let untouched = root == InterRoot::Null;
        assert_eq!(buf[1], if untouched { 7 } else { 1000 + root_world as u32 }, "bcast from {root_world}");
    }

    // allreduce: each group gets the other group's sum.
    let mut sum = [0u64; 2];
    inter.allreduce(&[me as u64, 1], &mut sum, Sum)?;
    assert_eq!(sum, [remote_worlds.iter().sum::<u64>(), remote_worlds.len() as u64]);

    // allgather with different lengths per group: evens send 1 element, odds 2.
    let mine: Vec<u64> = if even { vec![me as u64] } else { vec![me as u64, 10 * me as u64] };
    let per_remote = if even { 2 } else { 1 };
    let mut all = vec![0u64; per_remote * inter.remote_size()];
    inter.allgather(&mine, &mut all)?;
    let want: Vec<u64> = remote_worlds.iter().flat_map(|&w| if even { vec![w, 10 * w] } else { vec![w] }).collect();
    assert_eq!(all, want);
    inter.barrier()?;

    let remote = inter.remote_size();
    let msg = invalid(inter.bcast(&mut [0u8], InterRoot::Remote(remote)));
    assert!(msg.starts_with(&format!("bcast: root Remote({remote}) is out of range")), "{msg}");
    Ok(())
}

/// `merge(high)`: the group passing `false` first, then point-to-point on the result.
pub fn merge_orders_the_low_group_first(world: Comm) -> Result<()> {
    let (me, n) = (world.rank(), world.size());
    let (even, inter) = interleaved(&world)?;
    let evens: Vec<usize> = (0..n).step_by(2).collect();
    let odds: Vec<usize> = (1..n).step_by(2).collect();
    let odds_first: Vec<usize> = odds.iter().chain(&evens).copied().collect();
    let evens_first: Vec<usize> = evens.iter().chain(&odds).copied().collect();
    let position = |order: &[usize]| order.iter().position(|&w| w == me).unwrap();

    let merged = inter.merge(even)?;
    assert_eq!((merged.size(), merged.rank()), (n, position(&odds_first)));
    let mut sum = [0u64];
    merged.allreduce(&[me as u64], &mut sum, Sum)?;
    assert_eq!(sum[0], (0..n as u64).sum::<u64>());
    // Point-to-point on the merged communicator.
    let next = (merged.rank() + 1) % n;
    let prev = (merged.rank() + n - 1) % n;
    let mut got = [0u32];
    merged.sendrecv(&[me as u32], next, 9, &mut got, prev, 9)?;
    assert_eq!(got[0] as usize, odds_first[prev]);

    assert_eq!(inter.merge(!even)?.rank(), position(&evens_first));
    inter.barrier()
}

/// Each leader naming its own group's rank, or a rank beyond the world, fails on every rank;
/// a correct call works afterwards.
pub fn intercomm_create_errors_reach_every_rank(world: Comm) -> Result<()> {
    let half_size = world.size() / 2;
    let low = world.rank() < half_size;
    let half = world.split(Some(u32::from(low)), 0)?.expect("every rank has a colour");
    let own_leader = if low { 0 } else { half_size };
    let msg = invalid(half.intercomm_create(0, &world, own_leader, 1).map(|i| i.size()));
    assert!(msg.contains("is in the local group; the groups must be disjoint"), "{msg}");
    let msg = invalid(half.intercomm_create(0, &world, 99, 1).map(|i| i.size()));
    let expected = format!("remote_leader 99 is out of range for peer_comm of size {}", world.size());
    assert!(msg.contains(&expected), "{msg}");
    // After the failures, a correct call still works.
    let inter = half.intercomm_create(0, &world, if low { half_size } else { 0 }, 2)?;
    assert_eq!(inter.remote_size(), world.size() - half_size);
    inter.barrier()
}
