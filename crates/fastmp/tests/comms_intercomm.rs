//! Intercommunicators on both devices: the checks of `common/intercomm_checks.rs` (shared with
//! the mpi device's `mpi_intercomm.rs`) at 5 ranks (halves of sizes 2 and 3) and 4, plus what
//! needs a fixed size: every rank arriving at a barrier across, argument errors of one group,
//! and merges where both groups pass the same `high` or a group disagrees.

mod comms_common;
#[path = "common/intercomm_checks.rs"]
mod intercomm_checks;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use comms_common::on_both;
use fastmp::op::Sum;
use intercomm_checks::{interleaved, invalid};

#[test]
fn halves_of_the_world_talk_point_to_point() {
    on_both(5, "intercomm p2p", intercomm_checks::halves_of_the_world_talk_point_to_point);
}

#[test]
fn collectives_move_data_between_the_groups() {
    on_both(5, "intercomm collectives", intercomm_checks::collectives_move_data_between_the_groups);
}

#[test]
fn barrier_waits_for_both_groups_and_argument_errors_are_local() {
    let arrived = Arc::new(AtomicUsize::new(0));
    on_both(5, "intercomm barrier", move |world| {
        let (_, inter) = interleaved(&world)?;
        // Nobody leaves before every rank of both groups arrived.
        arrived.fetch_add(1, Ordering::SeqCst);
        inter.barrier()?;
        let count = arrived.load(Ordering::SeqCst);
        assert!(count >= 5 && count.is_multiple_of(5), "left the barrier having seen {count} arrivals");
        inter.barrier()?;
        let msg = invalid(inter.allreduce(&[1u8], &mut [0u8; 2], Sum));
        assert!(msg.starts_with("allreduce: send has 1 elements but recv 2"), "{msg}");
        Ok(())
    });
}

#[test]
fn merge_orders_the_low_group_first() {
    on_both(5, "intercomm merge", intercomm_checks::merge_orders_the_low_group_first);
}

#[test]
fn merges_with_equal_or_disagreeing_high_values() {
    on_both(5, "intercomm merge agreement", |world| {
        let me = world.rank();
        let (even, inter) = interleaved(&world)?;
        let position = |order: &[usize]| order.iter().position(|&w| w == me).unwrap();
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
        intercomm_checks::intercomm_create_errors_reach_every_rank(world.clone())?;
        let low = world.rank() < 2;
        let half = world.split(Some(u32::from(low)), 0)?.expect("every rank has a colour");
        let msg = invalid(half.intercomm_create(2, &world, 0, 1).map(|i| i.size()));
        assert!(msg.contains("intercomm_create: local_leader 2 is out of range"), "{msg}");
        Ok(())
    });
}
