//! `SharedArray` on its own (UPC's shared arrays and `upc_memget`/`upc_memput`/`upc_memcpy`):
//! sizes, the owner's slice, remote get/put (blocking and as requests), third-party copies
//! between arrays, fence and barrier, the algorithm override, and range errors. Both devices.

mod pgas_common;

use fastmp::{DeviceKind, Error, Result};
use pgas_common::{Algorithm, Collective, run, value};

const NP: usize = 4;
const B: usize = 10;

fn val(rank: usize, i: usize) -> u64 {
    value(17, rank, i)
}

fn memput_memget_and_the_owners_slice(dev: DeviceKind) {
    run(dev, NP, |world| {
        let me = world.rank();
        let a = world.shared_array::<u64>(B)?;
        assert_eq!((a.block_len(), a.len(), a.is_empty()), (B, NP * B, false));
        assert_eq!((a.comm().rank(), a.comm().size()), (me, NP));
        assert_eq!(*a.local()?, [0; B], "a new array is zeroed");
        a.barrier()?;
        // Everyone writes one element of every block (element `me` of block t gets val(t, me)).
        for t in 0..NP {
            a.memput(&[val(t, me)], t, me)?;
        }
        // The owner writes the tail of its own block through its slice.
        a.local()?[NP..].iter_mut().enumerate().for_each(|(i, v)| *v = val(me, NP + i));
        a.barrier()?;
        let want: Vec<u64> = (0..B).map(|i| val(me, i)).collect();
        assert_eq!(*a.local()?, want, "rank {me}: its block after the barrier");
        // Any rank reads any block at any offset.
        for t in 0..NP {
            let mut got = vec![0u64; B - 3];
            a.memget(&mut got, t, 3)?;
            assert_eq!(got, (3..B).map(|i| val(t, i)).collect::<Vec<_>>(), "rank {me}: memget from {t}");
        }
        a.memget(&mut [], (me + 1) % NP, B)?;
        a.memput(&[], (me + 1) % NP, B)?;
        a.barrier()?;
        a.free()
    })
    .unwrap();
}

fn async_requests_fence_and_barrier(dev: DeviceKind) {
    run(dev, NP, |world| {
        let me = world.rank();
        let a = world.shared_array::<u64>(B)?;
        let data: Vec<u64> = (0..NP).map(|t| val(t, me)).collect();
        world.scope(|s| {
            let mut reqs = Vec::new();
            for t in 0..NP {
                reqs.push(a.memput_async(s, &data[t..t + 1], t, me)?);
            }
            fastmp::waitall(&mut reqs).map(drop)
        })?;
        a.fence()?;
        a.barrier()?;
        let mut got = vec![vec![0u64; NP]; NP];
        world.scope(|s| {
            let mut reqs = Vec::new();
            for (t, into) in got.iter_mut().enumerate() {
                reqs.push(a.memget_async(s, into, t, 0)?);
            }
            fastmp::waitall(&mut reqs).map(drop)
        })?;
        for (t, g) in got.iter().enumerate() {
            assert_eq!(*g, (0..NP).map(|i| val(t, i)).collect::<Vec<_>>(), "rank {me}: memget_async from {t}");
        }
        a.barrier()?;
        a.free()
    })
    .unwrap();
}

fn memcpy_between_and_within_arrays(dev: DeviceKind) {
    run(dev, NP, |world| {
        let me = world.rank();
        let src = world.shared_array::<u64>(B)?;
        let dst = world.shared_array::<u64>(B)?;
        src.local()?.iter_mut().enumerate().for_each(|(i, v)| *v = val(me, i));
        src.barrier()?;
        // Third-party copies: rank `me` copies elements 2..5 of rank me+1's source block into
        // elements 4..7 of rank me+2's destination block.
        let (from, to) = ((me + 1) % NP, (me + 2) % NP);
        dst.memcpy(to, 4, &src, from, 2, 3)?;
        // Within one array, non-overlapping: the source block's 0..2 into its own 8..10.
        src.memcpy(me, 8, &src, me, 0, 2)?;
        dst.barrier()?;
        let from_of_mine = (me + NP - 1) % NP;
        let mut want = vec![0u64; B];
        want[4..7].copy_from_slice(&(2..5).map(|i| val(from_of_mine, i)).collect::<Vec<_>>());
        assert_eq!(*dst.local()?, want, "rank {me}: memcpy into its destination block");
        assert_eq!(src.local()?[8..], [val(me, 0), val(me, 1)], "rank {me}: memcpy within the array");
        // Overlapping ranges of one block are refused; a zero-length copy is fine.
        expect_names(src.memcpy(me, 1, &src, me, 0, 3), "memcpy");
        dst.memcpy(me, B, &src, from, 0, 0)?;
        src.barrier()?;
        dst.free()?;
        src.free()
    })
    .unwrap();
}

fn range_and_creation_errors(dev: DeviceKind) {
    run(dev, NP, |world| {
        let me = world.rank();
        let a = world.shared_array::<u32>(B)?;
        let b = world.shared_array::<u32>(B)?;
        let mut buf = [0u32; 4];
        assert!(a.memget(&mut buf, NP, 0).is_err(), "memget from rank NP");
        assert!(a.memget(&mut buf, 0, B - 3).is_err(), "memget past the block");
        assert!(a.memput(&buf, 0, B - 3).is_err(), "memput past the block");
        assert!(a.memput(&buf, NP + 1, 0).is_err(), "memput to rank NP+1");
        expect_names(a.memcpy(0, B - 1, &b, 0, 0, 2), "memcpy");
        expect_names(a.memcpy(0, 0, &b, 1, B, 1), "memcpy");
        expect_names(a.memcpy(0, usize::MAX, &b, 1, 0, 2), "memcpy");
        assert!(matches!(a.memcpy(NP, 0, &b, 0, 0, 1), Err(Error::RankOutOfRange { rank: NP, .. })));
        a.barrier()?;
        // Different block lengths on different ranks: an error everywhere, and no array.
        match world.shared_array::<u32>(B + me % 2) {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("shared_array"), "{m}"),
            other => panic!("rank {me}: shared_array with unequal blocks gave {:?}", other.map(|a| a.block_len())),
        }
        // An empty array works.
        let empty = world.shared_array::<u32>(0)?;
        assert!(empty.is_empty());
        assert!(empty.local()?.is_empty());
        empty.barrier()?;
        empty.free()?;
        b.free()?;
        a.free()
    })
    .unwrap();
}

/// `force_algorithm` changes what `algorithm` reports, for every listed algorithm.
fn forced_algorithms_are_reported(dev: DeviceKind) {
    run(dev, 3, |world| {
        let a = world.shared_array::<u8>(4)?;
        for coll in Collective::ALL {
            for algorithm in coll.algorithms() {
                a.force_algorithm(coll, algorithm)?;
                for bytes in [0, 1, 1 << 20] {
                    assert_eq!(a.algorithm(coll, bytes), algorithm, "{coll:?} at {bytes} bytes");
                }
                assert_eq!(Algorithm::from_name(&algorithm.to_string())?, algorithm);
            }
        }
        a.free()
    })
    .unwrap();
}

#[track_caller]
fn expect_names<T: std::fmt::Debug>(r: Result<T>, call: &str) {
    match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(call), "{m:?} does not name {call}"),
        other => panic!("expected InvalidArgument naming {call}, got {other:?}"),
    }
}

mod shm {
    use fastmp::DeviceKind::Shm;
    #[test]
    fn memput_memget_and_the_owners_slice() {
        super::memput_memget_and_the_owners_slice(Shm)
    }
    #[test]
    fn async_requests_fence_and_barrier() {
        super::async_requests_fence_and_barrier(Shm)
    }
    #[test]
    fn memcpy_between_and_within_arrays() {
        super::memcpy_between_and_within_arrays(Shm)
    }
    #[test]
    fn range_and_creation_errors() {
        super::range_and_creation_errors(Shm)
    }
    #[test]
    fn forced_algorithms_are_reported() {
        super::forced_algorithms_are_reported(Shm)
    }
}

mod tcp {
    use fastmp::DeviceKind::Tcp;
    #[test]
    fn memput_memget_and_the_owners_slice() {
        super::memput_memget_and_the_owners_slice(Tcp)
    }
    #[test]
    fn async_requests_fence_and_barrier() {
        super::async_requests_fence_and_barrier(Tcp)
    }
    #[test]
    fn memcpy_between_and_within_arrays() {
        super::memcpy_between_and_within_arrays(Tcp)
    }
    #[test]
    fn range_and_creation_errors() {
        super::range_and_creation_errors(Tcp)
    }
    #[test]
    fn forced_algorithms_are_reported() {
        super::forced_algorithms_are_reported(Tcp)
    }
}

mod hybrid {
    use fastmp::DeviceKind::Hybrid;
    #[test]
    fn memput_memget_and_the_owners_slice() {
        super::memput_memget_and_the_owners_slice(Hybrid)
    }
    #[test]
    fn async_requests_fence_and_barrier() {
        super::async_requests_fence_and_barrier(Hybrid)
    }
    #[test]
    fn memcpy_between_and_within_arrays() {
        super::memcpy_between_and_within_arrays(Hybrid)
    }
    #[test]
    fn range_and_creation_errors() {
        super::range_and_creation_errors(Hybrid)
    }
    #[test]
    fn forced_algorithms_are_reported() {
        super::forced_algorithms_are_reported(Hybrid)
    }
}
