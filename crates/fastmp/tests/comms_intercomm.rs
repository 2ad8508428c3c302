//! Intercommunicators on both devices: creation between two halves of the world (sizes 2 and
//! 3) and between interleaved groups with leaders other than rank 0, point-to-point across
//! (blocking, scoped, objects, statuses in remote ranks), bcast / allreduce / allgather /
//! barrier across, merge's ordering, and argument errors reported on every rank.

mod comms_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use comms_common::{invalid, on_both};
use fastmp::op::Sum;
use fastmp::{ANY_SOURCE, Comm, Error, InterComm, InterRoot, Result};

/// World ranks `0, 2, 4` and `1, 3`, each group's leader its rank 1 (world ranks 2 and 3).
fn interleaved(world: &Comm) -> Result<(bool, InterComm)> {
    let even = world.rank().is_multiple_of(2);
    let local = world.split(Some(u32::from(even)), 0)?.expect("every rank has a colour");
    let inter = local.intercomm_create(1, world, if even { 3 } else { 2 }, 5)?;
    Ok((even, inter))
}

/// The world rank of each rank of `group`.
fn world_ranks(group: &fastmp::Group, world: &Comm) -> Result<Vec<usize>> {
    let all: Vec<usize> = (0..group.size()).collect();
    Ok(group.translate_ranks(&all, &world.group())?.into_iter().map(|r| r.expect("in the world")).collect())
}

#[test]
fn halves_of_the_world_talk_point_to_point() {
    on_both(5, "intercomm p2p", |world| {
        let me = world.rank();
        let low = me < 2;
        let half = world.split(Some(u32::from(low)), 0)?.expect("every rank has a colour");
        let inter = half.intercomm_create(0, &world, if low { 2 } else { 0 }, 77)?;
        let (rank, size, remote) = (inter.rank(), inter.size(), inter.remote_size());
        assert_eq!((rank, size, remote), if low { (me, 2, 3) } else { (me - 2, 3, 2) });
        assert_eq!(world_ranks(&inter.remote_group(), &world)?, if low { vec![2, 3, 4] } else { vec![0, 1] });
        assert_eq!(world_ranks(&inter.group(), &world)?, if low { vec![0, 1] } else { vec![2, 3, 4] });

        // Each rank sends its world rank to remote rank `rank % remote`; receives name the
        // sender's remote rank.
        inter.send(&[me as u32], rank % remote, 1)?;
        let expected: Vec<usize> = (0..remote).filter(|q| q % size == rank).collect();
        let mut seen = Vec::new();
        for _ in &expected {
            let mut got = [0u32];
            let status = inter.recv(&mut got, ANY_SOURCE, 1)?;
            let sender_world = world_ranks(&inter.remote_group(), &world)?[status.source];
            assert_eq!(got[0] as usize, sender_world, "status.source is the sender's remote rank");
            seen.push(status.source);
        }
        seen.sort_unstable();
        assert_eq!(seen, expected);

        // Nonblocking pairs: rank r with remote rank r, where both exist.
        if rank < 2 {
            let out = [me as u64; 3];
            let mut inc = [0u64; 3];
            let statuses = inter.scope(|s| {
                let mut reqs = vec![s.irecv(&mut inc, rank, 2)?, s.isend(&out, rank, 2)?];
                fastmp::waitall(&mut reqs)
            })?;
            assert_eq!(statuses[0].source, rank);
            let partner = if low { me + 2 } else { me - 2 };
            assert_eq!(inc, [partner as u64; 3]);
        }

        // Objects and probes between the leaders.
        if rank == 0 {
            inter.send_obj(&format!("from {me}"), 0, 3)?;
            let probed = inter.probe(0, 3)?;
            assert_eq!(probed.source, 0);
            let (text, _): (String, _) = inter.recv_obj(0, 3)?;
            assert_eq!(text, format!("from {}", if low { 2 } else { 0 }));
            assert!(inter.iprobe(ANY_SOURCE, 3)?.is_none());
        }
        // Ranks are remote ranks: the low half has 3 peers, the high half 2.
        assert!(matches!(
            inter.send(&[0u8], remote, 4),
            Err(Error::RankOutOfRange { rank: r, size: s }) if (r, s) == (remote, remote)
        ));
        // The intercommunicator's traffic never meets the world's.
        assert!(world.iprobe(ANY_SOURCE, fastmp::ANY_TAG)?.is_none());
        inter.barrier()
    });
}

#[test]
fn collectives_move_data_between_the_groups() {
    let arrived = Arc::new(AtomicUsize::new(0));
    on_both(5, "intercomm collectives", move |world| {
        let me = world.rank();
        let (even, inter) = interleaved(&world)?;
        let remote_worlds: Vec<u64> = if even { vec![1, 3] } else { vec![0, 2, 4] };

        // bcast from world rank 4 (even rank 2), then from world rank 1 (odd rank 0).
        for (root_world, root_local) in [(4usize, 2usize), (1, 0)] {
            let mut buf = [if me == root_world { 1000 + root_world as u32 } else { 7 }; 2];
            let root = match (me == root_world, even == root_world.is_multiple_of(2)) {
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
        let want: Vec<u64> = if even { vec![1, 10, 3, 30] } else { vec![0, 2, 4] };
        assert_eq!(all, want);

        // barrier: nobody leaves before every rank of both groups arrived.
        arrived.fetch_add(1, Ordering::SeqCst);
        inter.barrier()?;
        let count = arrived.load(Ordering::SeqCst);
        assert!(count >= 5 && count.is_multiple_of(5), "left the barrier having seen {count} arrivals");
        inter.barrier()?;

        // Argument errors are local and precise.
        let msg = invalid(inter.bcast(&mut [0u8], InterRoot::Remote(3)));
        assert!(msg.starts_with("bcast: root Remote(3) is out of range"), "{msg}");
        let msg = invalid(inter.allreduce(&[1u8], &mut [0u8; 2], Sum));
        assert!(msg.starts_with("allreduce: send has 1 elements but recv 2"), "{msg}");
        Ok(())
    });
}

#[test]
fn merge_orders_the_low_group_first() {
    on_both(5, "intercomm merge", |world| {
        let me = world.rank();
        let (even, inter) = interleaved(&world)?;
        let position = |order: &[usize]| order.iter().position(|&w| w == me).unwrap();

        // The odds pass high = false: they come first.
        let merged = inter.merge(even)?;
        assert_eq!((merged.size(), merged.rank()), (5, position(&[1, 3, 0, 2, 4])));
        let mut sum = [0u64];
        merged.allreduce(&[me as u64], &mut sum, Sum)?;
        assert_eq!(sum[0], 10);

        // Reversed.
        assert_eq!(inter.merge(!even)?.rank(), position(&[0, 2, 4, 1, 3]));
        // Both the same: the group whose rank 0 has the lower world rank (world rank 0) first.
        for high in [false, true] {
            assert_eq!(inter.merge(high)?.rank(), position(&[0, 2, 4, 1, 3]));
        }

        // A group that disagrees on `high` fails the merge on every rank of both groups.
        let msg = invalid(inter.merge(even && me == 0).map(|c| c.size()));
        let which = if even { "this" } else { "the remote" };
        assert!(msg.contains(&format!("merge: the ranks of {which} group passed different `high` values")), "{msg}");
        inter.barrier()
    });
}

#[test]
fn intercomm_create_errors_reach_every_rank() {
    on_both(4, "intercomm errors", |world| {
        let low = world.rank() < 2;
        let half = world.split(Some(u32::from(low)), 0)?.expect("every rank has a colour");
        // Each leader names its own group's rank as the remote leader.
        let own_leader = if low { 0 } else { 2 };
        let msg = invalid(half.intercomm_create(0, &world, own_leader, 1).map(|i| i.size()));
        assert!(msg.contains("is in the local group; the groups must be disjoint"), "{msg}");
        let msg = invalid(half.intercomm_create(2, &world, 0, 1).map(|i| i.size()));
        assert!(msg.contains("intercomm_create: local_leader 2 is out of range"), "{msg}");
        // A bad remote leader: refused at each leader before any message goes out.
        let msg = invalid(half.intercomm_create(0, &world, 9, 1).map(|i| i.size()));
        assert!(msg.contains("remote_leader 9 is out of range for peer_comm of size 4"), "{msg}");
        // After the failures, a correct call still works.
        let inter = half.intercomm_create(1, &world, if low { 3 } else { 1 }, 2)?;
        assert_eq!(inter.remote_size(), 2);
        inter.barrier()
    });
}
