//! Communicators and groups: `dup`, `split`, `split_type`, group set operations, `create` (several
//! disjoint groups in one call), `create_group` (collective over the members only), `compare`,
//! names and attributes, and an intercommunicator between the even and the odd ranks
//! (point-to-point, broadcast and allreduce across it, then `merge`).
//!
//! Needs at least 2 ranks. Run it with thread ranks (shm device) or one process per rank (tcp):
//!
//! ```text
//! FASTMP_NP=4 cargo run --example communicators
//! fastmprun -np 4 --device tcp target/debug/examples/communicators
//! ```

use fastmp::op::Sum;
use fastmp::{AttrKey, Comparison, Error, GroupOrdering, InterRoot, SplitType};

fn main() {
    fastmp::main(|world| {
        let (rank, size) = (world.rank(), world.size());
        if size < 2 {
            return Err(Error::InvalidArgument(format!(
                "the communicators example needs at least 2 ranks, not {size}"
            )));
        }
        let even = rank % 2 == 0;
        let (n_even, n_odd) = (size.div_ceil(2), size / 2);

        // A library gets its own communicator: same ranks, traffic of its own, no name.
        let library = world.dup()?;
        assert_eq!((world.name(), library.name()), ("WORLD".to_string(), String::new()));
        library.set_name("library");
        assert_eq!(world.compare(&library), Comparison::Congruent);
        assert_eq!(world.compare(&world.clone()), Comparison::Ident);

        // Split by parity, highest world rank first (key = -rank).
        let parity = world.split(Some((rank % 2) as u32), -(rank as i32))?.expect("every rank has a colour");
        assert_eq!(parity.size(), if even { n_even } else { n_odd });
        assert_eq!(parity.rank(), (rank + 2..size).step_by(2).count());
        let mut rank_sum = [0usize];
        parity.allreduce(&[rank], &mut rank_sum, Sum)?;
        assert_eq!(rank_sum[0], (rank % 2..size).step_by(2).sum::<usize>());
        assert_eq!(world.compare(&parity), Comparison::Unequal);

        // The ranks sharing this rank's node (all of them, for thread ranks or one machine).
        let node = world.split_type(SplitType::SharedNode, 0)?;
        let placement = world.placement();
        assert_eq!(node.size(), (0..size).filter(|&r| placement.node_of(r) == placement.node_of(rank)).count());

        // Groups are local sets of ranks: no communication until a communicator is made.
        let all = world.group();
        let evens = all.incl(&(0..size).step_by(2).collect::<Vec<_>>())?;
        let odds = all.excl(&(0..size).step_by(2).collect::<Vec<_>>())?;
        assert_eq!((evens.size(), odds.size()), (n_even, n_odd));
        assert_eq!(evens.intersection(&odds)?.size(), 0);
        assert_eq!(all.difference(&evens)?.compare(&odds), GroupOrdering::Identical);
        let reunited = evens.union(&odds)?;
        assert_eq!(reunited.compare(&all), if size > 2 { GroupOrdering::Similar } else { GroupOrdering::Identical });
        let in_world = evens.translate_ranks(&(0..n_even).collect::<Vec<_>>(), &all)?;
        assert_eq!(in_world, (0..size).step_by(2).map(Some).collect::<Vec<_>>());
        assert_eq!(evens.rank(), even.then_some(rank / 2));

        // One call, two communicators: each rank passes the group it belongs to.
        let half = world.create(if even { &evens } else { &odds })?.expect("every rank is in its group");
        let expected = if half.size() > 1 { Comparison::Similar } else { Comparison::Congruent };
        assert_eq!(half.compare(&parity), expected); // same ranks, other order

        // Only the members call create_group: the other ranks go on meanwhile.
        let lower = all.incl(&(0..n_even).collect::<Vec<_>>())?;
        if rank < n_even {
            let low = world.create_group(&lower, 7)?;
            let mut count = [0u32];
            low.allreduce(&[1u32], &mut count, Sum)?;
            assert_eq!(count[0] as usize, n_even);
        }

        // Attributes: typed keys whose values `dup` clones, or leaves behind.
        let history = AttrKey::<Vec<u32>>::cloned_on_dup();
        let scratch = AttrKey::<String>::new();
        world.set_attr(&history, vec![rank as u32]);
        world.set_attr(&scratch, "this handle only".to_string());
        let copy = world.dup()?;
        assert_eq!(copy.attr(&history).as_deref(), Some(&vec![rank as u32]));
        assert!(copy.attr(&scratch).is_none());
        assert_eq!(world.delete_attr(&scratch).as_deref().map(String::as_str), Some("this handle only"));

        // An intercommunicator between the halves; the leaders (half rank 0) are world ranks 0
        // and 1, and `world` carries their handshake.
        let inter = half.intercomm_create(0, &world, if even { 1 } else { 0 }, 99)?;
        assert_eq!(inter.remote_size(), if even { n_odd } else { n_even });
        // Ranks are the remote group's: the leaders swap a message.
        if half.rank() == 0 {
            let mut got = [0u32];
            inter.sendrecv(&[rank as u32], 0, 1, &mut got, 0, 1)?;
            assert_eq!(got[0], if even { 1 } else { 0 });
        }
        // The even leader broadcasts to every odd rank; the other evens take no part.
        let mut news = [0u64];
        let root = match (even, half.rank()) {
            (true, 0) => {
                news[0] = 77;
                InterRoot::Root
            }
            (true, _) => InterRoot::Null,
            (false, _) => InterRoot::Remote(0),
        };
        inter.bcast(&mut news, root)?;
        assert_eq!(news[0], if even && half.rank() != 0 { 0 } else { 77 });
        // Each half gets the sum over the other half.
        let mut other = [0usize];
        inter.allreduce(&[rank], &mut other, Sum)?;
        assert_eq!(other[0], (usize::from(even)..size).step_by(2).sum::<usize>());
        // Merged back into one communicator: the evens (high = false) first.
        let merged = inter.merge(!even)?;
        assert_eq!(merged.rank(), if even { rank / 2 } else { n_even + rank / 2 });

        println!("communicators: rank {rank}/{size} ok (parity rank {}, merged rank {})", parity.rank(), merged.rank());
        Ok(())
    });
}
