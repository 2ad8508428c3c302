//! Communicator creation and metadata, on both devices: `create` with disjoint groups,
//! `create_group` with non-members idle, `compare`'s four outcomes, names, typed attributes and
//! what `dup` does with them, Cartesian reordering and `cart_map`, `shift` with PROC_NULL, and
//! `dims_create` against MPICH's balanced rule.

mod comms_common;

use std::cell::Cell;
use std::rc::Rc;

use comms_common::{invalid, on_both};
use fastmp::op::Sum;
use fastmp::{AttrKey, Comparison, Error, PROC_NULL, dims_create};

// ---------------------------------------------------------------- create

#[test]
fn create_with_disjoint_groups_makes_one_communicator_per_group() {
    on_both(5, "disjoint create", |world| {
        let me = world.rank();
        // {0, 1} and {3, 2} (reordered); rank 4 is in neither and passes the empty group.
        let members: &[usize] = match me {
            0 | 1 => &[0, 1],
            2 | 3 => &[3, 2],
            _ => &[],
        };
        let comm = world.create(&world.group().incl(members)?)?;
        let Some(comm) = comm else {
            assert_eq!(me, 4, "only rank 4 is left out");
            return Ok(());
        };
        assert_eq!(comm.size(), 2);
        assert_eq!(comm.rank(), members.iter().position(|&m| m == me).unwrap());
        // Collectives and point-to-point stay inside each communicator.
        let mut sum = [0u64];
        comm.allreduce(&[me as u64], &mut sum, Sum)?;
        assert_eq!(sum[0], if me < 2 { 1 } else { 5 });
        let peer = 1 - comm.rank();
        let mut got = [0u32];
        let status = comm.sendrecv(&[me as u32], peer, 4, &mut got, peer, 4)?;
        assert_eq!((got[0] as usize, status.source), (members[peer], peer));
        Ok(())
    });
}

#[test]
fn create_with_overlapping_groups_is_an_error_on_every_rank() {
    on_both(3, "overlapping create", |world| {
        // Rank 1 is in the group ranks 0 and 1 pass, and in the one rank 2 passes.
        let members: &[usize] = if world.rank() == 2 { &[1, 2] } else { &[0, 1] };
        let msg = invalid(world.create(&world.group().incl(members)?).map(|c| c.is_some()));
        assert!(msg.contains("create: the ranks passed different groups"), "{msg}");
        // Only rank 2 sees a member (rank 1) that passed another group; every rank reports it.
        assert!(msg.contains("rank 2 passed a group containing rank 1"), "{msg}");
        // The communicator still works afterwards.
        world.barrier()
    });
}

#[test]
fn create_group_involves_only_the_members() {
    on_both(4, "create_group", |world| {
        let me = world.rank();
        let w = world.group();
        let upper = w.incl(&[3, 1, 2])?;
        if me == 0 {
            // Not a member: does not call it, and would be refused if it did.
            let msg = invalid(world.create_group(&upper, 1).map(|c| c.size()));
            assert!(msg.contains("create_group: this rank is not in the group"), "{msg}");
        } else {
            let comm = world.create_group(&upper, 1)?;
            assert_eq!((comm.size(), comm.rank()), (3, [0, 1, 2, 0][me]));
            let mut all = [0u32; 3];
            comm.allgather(&[me as u32], &mut all)?;
            assert_eq!(all, [3, 1, 2]);
        }
        // Overlapping groups told apart by their tags: rank 1 is in both, and ranks 0 and 2
        // each start theirs at once.
        let (a, b) = (w.incl(&[0, 1])?, w.incl(&[1, 2])?);
        let made = match me {
            0 => vec![world.create_group(&a, 10)?],
            1 => vec![world.create_group(&a, 10)?, world.create_group(&b, 11)?],
            2 => vec![world.create_group(&b, 11)?],
            _ => vec![],
        };
        for comm in &made {
            let mut sum = [0u64];
            comm.allreduce(&[me as u64], &mut sum, Sum)?;
            assert_eq!(sum[0], if comm.group().translate_ranks(&[0], &w)?[0] == Some(0) { 1 } else { 3 });
        }
        assert!(matches!(world.create_group(&w, -1), Err(Error::TagOutOfRange { tag: -1, .. })));
        world.barrier()
    });
}

// ---------------------------------------------------------------- compare, names, attributes

#[test]
fn compare_reports_all_four_relations() {
    on_both(3, "compare", |world| {
        assert_eq!(world.compare(&world.clone()), Comparison::Ident);
        let dup = world.dup()?;
        assert_eq!(world.compare(&dup), Comparison::Congruent);
        assert_eq!(dup.compare(&dup.clone()), Comparison::Ident);
        let reversed = world.split(Some(0), -(world.rank() as i32))?.expect("one colour");
        assert_eq!(world.compare(&reversed), Comparison::Similar);
        let pair = world.split(Some((world.rank() == 2) as u32), 0)?.expect("every rank has a colour");
        assert_eq!(world.compare(&pair), Comparison::Unequal);
        Ok(())
    });
}

#[test]
fn names_belong_to_one_handle_and_its_clones() {
    on_both(2, "names", |world| {
        assert_eq!(world.name(), "WORLD");
        let dup = world.dup()?;
        assert_eq!(dup.name(), "", "a new communicator has no name");
        dup.set_name(format!("library {}", world.rank()));
        assert_eq!(dup.clone().name(), format!("library {}", world.rank()));
        assert_eq!(dup.dup()?.name(), "", "dup does not copy the name");
        assert_eq!(world.name(), "WORLD");
        Ok(())
    });
}

/// Counts drops of its values, to see when the library lets go of an attribute.
#[derive(Clone)]
struct Tracked(Rc<Cell<u32>>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

#[test]
fn attributes_follow_their_keys_copy_policy_on_dup() {
    let local = AttrKey::<String>::new();
    let cloned = AttrKey::<Cell<u32>>::cloned_on_dup();
    let shared = AttrKey::<Cell<u32>>::shared_on_dup();
    let tracked = AttrKey::<Tracked>::new();
    on_both(2, "attributes", move |world| {
        assert!(world.attr(&local).is_none());
        world.set_attr(&local, "mine".to_string());
        world.set_attr(&cloned, Cell::new(1));
        world.set_attr(&shared, Cell::new(1));
        assert_eq!(*world.clone().attr(&local).unwrap(), "mine", "clones share attributes");

        let dup = world.dup()?;
        assert!(dup.attr(&local).is_none(), "a key made with new() is not copied");
        // A cloned value is the dup's own; a shared one is the same value.
        world.attr(&cloned).unwrap().set(2);
        world.attr(&shared).unwrap().set(2);
        assert_eq!(dup.attr(&cloned).unwrap().get(), 1);
        assert_eq!(dup.attr(&shared).unwrap().get(), 2);
        // Only dup copies: split does not.
        let split = world.split(Some(0), 0)?.expect("one colour");
        assert!(split.attr(&cloned).is_none() && split.attr(&shared).is_none());

        // Replacing and deleting let go of the value (MPI's delete callback is Drop).
        let drops = Rc::new(Cell::new(0));
        world.set_attr(&tracked, Tracked(drops.clone()));
        world.set_attr(&tracked, Tracked(drops.clone()));
        assert_eq!(drops.get(), 1, "the replaced value was dropped");
        let taken = world.delete_attr(&tracked).expect("a value was set");
        assert!(world.attr(&tracked).is_none());
        drop(taken);
        assert_eq!(drops.get(), 2, "the deleted value was dropped with its last reference");
        assert!(world.delete_attr(&tracked).is_none());
        Ok(())
    });
}

// ---------------------------------------------------------------- Cartesian topology

#[test]
fn dims_create_matches_mpich_balanced_results() {
    // (nodes, dims in, dims out): the MPI standard's examples, then MPICH's rule (smallest
    // spread between the largest and smallest free dimension, non-increasing).
    let table: &[(usize, &[usize], &[usize])] = &[
        (6, &[0, 0], &[3, 2]),
        (7, &[0, 0], &[7, 1]),
        (6, &[0, 3, 0], &[2, 3, 1]),
        (72, &[0, 0], &[9, 8]),
        (72, &[0, 0, 0], &[6, 4, 3]),
        (12, &[0, 0, 0], &[3, 2, 2]),
        (16, &[0, 0, 0], &[4, 2, 2]),
        (100, &[0, 0, 0], &[5, 5, 4]),
        (24, &[0, 0, 0], &[4, 3, 2]),
        (60, &[0, 0, 0], &[5, 4, 3]),
        (64, &[0, 0, 0, 0], &[4, 4, 2, 2]),
        (30, &[0, 0], &[6, 5]),
        (1, &[0, 0], &[1, 1]),
        (5, &[0, 0, 0], &[5, 1, 1]),
        (12, &[0, 4], &[3, 4]),
        (24, &[2, 0, 0], &[2, 4, 3]),
        (8, &[2, 2, 2], &[2, 2, 2]),
        (1, &[], &[]),
    ];
    for &(nodes, dims, want) in table {
        assert_eq!(dims_create(nodes, dims).unwrap(), want, "dims_create({nodes}, {dims:?})");
    }
    for (nodes, dims, says) in [
        (7, &[0, 3, 0][..], "must divide it"),
        (8, &[2, 2][..], "must equal it"),
        (0, &[0, 0][..], "nodes must be positive"),
        (4, &[][..], "must equal it"),
        (4, &[usize::MAX, 2, 0][..], "overflows"),
    ] {
        let msg = invalid(dims_create(nodes, dims));
        assert!(msg.starts_with("dims_create") && msg.contains(says), "dims_create({nodes}, {dims:?}): {msg}");
    }
}

#[test]
fn cart_reorder_and_cart_map_on_one_node_are_the_identity() {
    on_both(5, "cart reorder", |world| {
        let me = world.rank();
        let dims = dims_create(4, &[0, 0])?;
        assert_eq!(dims, [2, 2]);
        // Thread ranks share one process: the machine-aware order is the rank order.
        assert_eq!(world.cart_map(&dims, &[true, false])?, (me < 4).then_some(me));
        let grid = world.cart_create(&dims, &[true, false], true)?;
        assert_eq!(grid.as_ref().map(|g| g.rank()), (me < 4).then_some(me));
        let msg = invalid(world.cart_map(&[3, 2], &[false, false]));
        assert!(msg.starts_with("cart_map: grid [3, 2] needs more than the 5 ranks"), "{msg}");
        let msg = invalid(world.cart_create(&[2], &[false, true], true).map(|g| g.is_some()));
        assert!(msg.contains("cart_create: 1 dimensions but 2 periodicity flags"), "{msg}");
        Ok(())
    });
}

#[test]
fn shift_gives_proc_null_past_a_non_periodic_edge() {
    on_both(6, "shift", |world| {
        let me = world.rank();
        // A 3x2 grid, periodic along the second dimension only.
        let grid = world.cart_create(&[3, 2], &[false, true], false)?.expect("all ranks fit");
        let (row, col) = (me / 2, me % 2);
        let (up, down) = grid.shift(0, 1)?;
        assert_eq!(up, if row > 0 { me - 2 } else { PROC_NULL });
        assert_eq!(down, if row < 2 { me + 2 } else { PROC_NULL });
        let (up2, down2) = grid.shift(0, -2)?;
        assert_eq!(up2, if row < 1 { me + 4 } else { PROC_NULL });
        assert_eq!(down2, if row > 1 { me - 4 } else { PROC_NULL });
        let (left, right) = grid.shift(1, 1)?;
        assert_eq!((left, right), (row * 2 + 1 - col, row * 2 + 1 - col));

        // A halo exchange down the column, sending only where there is a neighbour.
        let mut from_above = [u32::MAX];
        let out = [me as u32];
        grid.scope(|s| {
            let mut reqs = Vec::new();
            if up != PROC_NULL {
                reqs.push(s.irecv(&mut from_above, up, 8)?);
            }
            if down != PROC_NULL {
                s.isend(&out, down, 8)?.wait()?;
            }
            fastmp::waitall(&mut reqs).map(drop)
        })?;
        assert_eq!(from_above[0], if up == PROC_NULL { u32::MAX } else { up as u32 });
        Ok(())
    });
}

/// `shift`'s answers go straight into `sendrecv` (every point-to-point call accepts PROC_NULL).
#[test]
fn shift_results_go_straight_into_sendrecv() {
    on_both(4, "shift into sendrecv", |world| {
        let line = world.cart_create(&[4], &[false], false)?.expect("all ranks fit");
        let (from, to) = line.shift(0, 1)?;
        let mut got = [u32::MAX];
        line.sendrecv(&[line.rank() as u32], to, 0, &mut got, from, 0)?;
        assert_eq!(got[0], if from == PROC_NULL { u32::MAX } else { from as u32 });
        Ok(())
    });
}
