//! MPI_IN_PLACE variants against their out-of-place twins: every collective that has one, every
//! algorithm forced in turn, blocking and nonblocking, on shm (thread ranks) and tcp (loopback).

mod coll_common;

use coll_common::{job, val};
use fastmp::coll::{Collective, Tuning};
use fastmp::op::{Sum, UserOp};
use fastmp::{Comm, Config, DeviceKind, Result};

/// Affine maps x ↦ a·x + b composed: associative, not commutative, so any change of the
/// combining order shows.
fn compose(l: [u64; 2], r: [u64; 2]) -> [u64; 2] {
    [l[0].wrapping_mul(r[0]), l[0].wrapping_mul(r[1]).wrapping_add(l[1])]
}

fn data(seed: u32, rank: usize, n: usize) -> Vec<u64> {
    (0..n).map(|i| u64::from(val(seed, rank, i)) << 8 | 1).collect()
}

fn affine(rank: usize, n: usize) -> Vec<[u64; 2]> {
    (0..n).map(|i| [u64::from(val(7, rank, i)) | 1, u64::from(val(9, rank, i))]).collect()
}

/// Runs `body(comm_forced, n)` for every algorithm of `coll` and a few sizes.
fn each_algorithm(world: &Comm, coll: Collective, body: impl Fn(&Comm, usize) -> Result<()>) -> Result<()> {
    for &algorithm in coll.algorithms() {
        let comm = world.with_tuning(Tuning::defaults_for(DeviceKind::Shm).force(coll, algorithm)?);
        for n in [1, 6, 700] {
            body(&comm, n).map_err(|e| fastmp::Error::other(format!("{coll:?} {algorithm} n={n}: {e}")))?;
        }
    }
    Ok(())
}

fn all_in_place(world: Comm) -> Result<()> {
    let (me, np) = (world.rank(), world.size());
    let root = np - 1;
    let matmul = UserOp::non_commutative(|input: &[[u64; 2]], inout: &mut [[u64; 2]]| {
        for (l, r) in input.iter().zip(inout.iter_mut()) {
            *r = compose(*l, *r);
        }
    });
    each_algorithm(&world, Collective::Allreduce, |c, n| {
        let mine = data(1, me, n);
        let mut want = vec![0; n];
        c.allreduce(&mine, &mut want, Sum)?;
        let mut buf = mine.clone();
        c.allreduce_in_place(&mut buf, Sum)?;
        assert_eq!(buf, want, "allreduce_in_place");
        let mut buf = mine.clone();
        c.scope(|s| s.iallreduce_in_place(&mut buf, Sum)?.wait().map(drop))?;
        assert_eq!(buf, want, "iallreduce_in_place");
        let mine = affine(me, n);
        let mut want = vec![[0; 2]; n];
        c.allreduce(&mine, &mut want, &matmul)?;
        let mut buf = mine.clone();
        c.allreduce_in_place(&mut buf, &matmul)?;
        assert_eq!(buf, want, "non-commutative allreduce_in_place");
        Ok(())
    })?;
    each_algorithm(&world, Collective::Reduce, |c, n| {
        let mine = affine(me, n);
        let mut want = vec![[0; 2]; if me == root { n } else { 0 }];
        c.reduce(&mine, &mut want, &matmul, root)?;
        let mut buf = mine.clone();
        c.reduce_in_place(&mut buf, &matmul, root)?;
        assert_eq!(if me == root { buf } else { want.clone() }, want, "reduce_in_place");
        let mut buf = mine.clone();
        c.scope(|s| s.ireduce_in_place(&mut buf, &matmul, root)?.wait().map(drop))?;
        assert_eq!(if me == root { buf } else { mine }, if me == root { want } else { affine(me, n) });
        Ok(())
    })?;
    each_algorithm(&world, Collective::Allgather, |c, n| {
        let mut want = vec![0; n * np];
        c.allgather(&data(2, me, n), &mut want)?;
        let mut buf = vec![0; n * np];
        buf[me * n..][..n].copy_from_slice(&data(2, me, n));
        let start = buf.clone();
        c.allgather_in_place(&mut buf)?;
        assert_eq!(buf, want, "allgather_in_place");
        let mut buf = start;
        c.scope(|s| s.iallgather_in_place(&mut buf)?.wait().map(drop))?;
        assert_eq!(buf, want, "iallgather_in_place");
        Ok(())
    })?;
    // v layouts: uneven counts, blocks in reverse rank order with a gap before each.
    let layout = |n: usize| {
        let counts: Vec<usize> = (0..np).map(|r| if r % 2 == 0 { n } else { n / 2 }).collect();
        let mut displs = vec![0; np];
        let mut at = 0;
        for r in (0..np).rev() {
            displs[r] = at + 1;
            at += counts[r] + 1;
        }
        (counts, displs, at)
    };
    each_algorithm(&world, Collective::Allgatherv, |c, n| {
        let (counts, displs, len) = layout(n);
        let mut want = vec![0; len];
        c.allgatherv(&data(3, me, counts[me]), &mut want, &counts, &displs)?;
        let mut buf = vec![0; len];
        buf[displs[me]..][..counts[me]].copy_from_slice(&data(3, me, counts[me]));
        c.allgatherv_in_place(&mut buf, &counts, &displs)?;
        assert_eq!(buf, want, "allgatherv_in_place");
        Ok(())
    })?;
    each_algorithm(&world, Collective::Gather, |c, n| {
        let mut want = vec![0; if me == root { n * np } else { 0 }];
        c.gather(&data(4, me, n), &mut want, root)?;
        let mut buf = if me == root { vec![0; n * np] } else { data(4, me, n) };
        if me == root {
            buf[me * n..][..n].copy_from_slice(&data(4, me, n));
        }
        c.scope(|s| s.igather_in_place(&mut buf, root)?.wait().map(drop))?;
        if me == root {
            assert_eq!(buf, want, "igather_in_place");
        }
        c.gather_in_place(&mut buf, root)?;
        assert_eq!(buf, if me == root { want } else { data(4, me, n) }, "gather_in_place");
        Ok(())
    })?;
    each_algorithm(&world, Collective::Gatherv, |c, n| {
        let (counts, displs, len) = layout(n);
        let mut want = vec![0; if me == root { len } else { 0 }];
        c.gatherv(&data(5, me, counts[me]), &mut want, &counts, &displs, root)?;
        let mut buf = if me == root { vec![0; len] } else { data(5, me, counts[me]) };
        if me == root {
            buf[displs[me]..][..counts[me]].copy_from_slice(&data(5, me, counts[me]));
        }
        c.gatherv_in_place(&mut buf, &counts, &displs, root)?;
        if me == root {
            assert_eq!(buf, want, "gatherv_in_place");
        }
        Ok(())
    })?;
    each_algorithm(&world, Collective::Scatter, |c, n| {
        let all: Vec<u64> = (0..np).flat_map(|r| data(6, r, n)).collect();
        let mut buf = if me == root { all.clone() } else { vec![0; n] };
        c.scatter_in_place(&mut buf, root)?;
        assert_eq!(buf, if me == root { all.clone() } else { data(6, me, n) }, "scatter_in_place");
        let mut buf = if me == root { all.clone() } else { vec![0; n] };
        c.scope(|s| s.iscatter_in_place(&mut buf, root)?.wait().map(drop))?;
        assert_eq!(buf, if me == root { all } else { data(6, me, n) }, "iscatter_in_place");
        Ok(())
    })?;
    each_algorithm(&world, Collective::Scatterv, |c, n| {
        let (counts, displs, len) = layout(n);
        let mut all = vec![0; len];
        (0..np).for_each(|r| all[displs[r]..][..counts[r]].copy_from_slice(&data(7, r, counts[r])));
        let mut buf = if me == root { all.clone() } else { vec![0; counts[me]] };
        c.scatterv_in_place(&mut buf, &counts, &displs, root)?;
        assert_eq!(buf, if me == root { all } else { data(7, me, counts[me]) }, "scatterv_in_place");
        Ok(())
    })?;
    each_algorithm(&world, Collective::Alltoall, |c, n| {
        let mine: Vec<u64> = (0..np).flat_map(|j| data(8, me * np + j, n)).collect();
        let mut want = vec![0; n * np];
        c.alltoall(&mine, &mut want)?;
        let mut buf = mine.clone();
        c.alltoall_in_place(&mut buf)?;
        assert_eq!(buf, want, "alltoall_in_place");
        let mut buf = mine;
        c.scope(|s| s.ialltoall_in_place(&mut buf)?.wait().map(drop))?;
        assert_eq!(buf, want, "ialltoall_in_place");
        Ok(())
    })?;
    each_algorithm(&world, Collective::Alltoallv, |c, n| {
        // Symmetric counts (what i sends j equals what j sends i), as one layout requires.
        let counts: Vec<usize> = (0..np).map(|j| (n + me + j) % (n + 1)).collect();
        let displs: Vec<usize> = (0..np).scan(0, |at, j| Some(std::mem::replace(at, *at + counts[j] + 1))).collect();
        let len = displs[np - 1] + counts[np - 1];
        let mut mine = vec![0; len];
        (0..np).for_each(|j| mine[displs[j]..][..counts[j]].copy_from_slice(&data(9, me * np + j, counts[j])));
        let mut want = mine.clone();
        c.alltoallv(&mine, &counts, &displs, &mut want, &counts, &displs)?;
        let mut buf = mine;
        c.alltoallv_in_place(&mut buf, &counts, &displs)?;
        assert_eq!(buf, want, "alltoallv_in_place");
        Ok(())
    })?;
    each_algorithm(&world, Collective::ReduceScatter, |c, n| {
        let counts: Vec<usize> = (0..np).map(|r| n + r % 2).collect();
        let total = counts.iter().sum();
        let mine = affine(me, total);
        let mut want = vec![[0; 2]; counts[me]];
        c.reduce_scatter(&mine, &mut want, &counts, &matmul)?;
        let mut buf = mine.clone();
        c.reduce_scatter_in_place(&mut buf, &counts, &matmul)?;
        assert_eq!(buf[..counts[me]], want, "reduce_scatter_in_place");
        let mine = data(10, me, n * np);
        let mut want = vec![0; n];
        c.reduce_scatter_block(&mine, &mut want, Sum)?;
        let mut buf = mine;
        c.scope(|s| s.ireduce_scatter_block_in_place(&mut buf, Sum)?.wait().map(drop))?;
        assert_eq!(buf[..n], want, "ireduce_scatter_block_in_place");
        Ok(())
    })?;
    each_algorithm(&world, Collective::Scan, |c, n| {
        let mine = affine(me, n);
        let mut want = vec![[0; 2]; n];
        c.scan(&mine, &mut want, &matmul)?;
        let mut buf = mine.clone();
        c.scan_in_place(&mut buf, &matmul)?;
        assert_eq!(buf, want, "scan_in_place");
        let mut want = mine.clone();
        c.exscan(&mine, &mut want, &matmul)?;
        let mut buf = mine;
        c.scope(|s| s.iexscan_in_place(&mut buf, &matmul)?.wait().map(drop))?;
        assert_eq!(buf, want, "iexscan_in_place");
        Ok(())
    })
}

fn on(device: DeviceKind) {
    let nps: &[usize] = if device == DeviceKind::Hybrid { &[1, 2, 3, 4, 5] } else { &[1, 2, 3, 4] };
    for &np in nps {
        let config = Config::new().device(device).np(np);
        job(config, &format!("in place {device:?} np {np}"), all_in_place)
            .unwrap_or_else(|e| panic!("{device:?} np {np}: {e}"));
    }
}

#[test]
fn in_place_matches_out_of_place_on_shm() {
    on(DeviceKind::Shm);
}

#[test]
fn in_place_matches_out_of_place_on_tcp() {
    on(DeviceKind::Tcp);
}

/// Hybrid at np 1 to 5 (one process, 1 + 1, 2 + 1, 2 × 2, 3 + 2).
#[test]
fn in_place_matches_out_of_place_on_hybrid() {
    on(DeviceKind::Hybrid);
}

#[test]
fn in_place_argument_errors_name_the_call() {
    let outcome = job(Config::new().np(2), "in place errors", |world| {
        let err = world.allgather_in_place(&mut [0u32; 3]).expect_err("3 elements for 2 ranks");
        assert!(err.to_string().contains("allgather_in_place: buf has 3 elements"), "{err}");
        let err = world.reduce_scatter_block_in_place(&mut [0u32; 5], Sum).expect_err("5 for 2");
        assert!(err.to_string().contains("reduce_scatter_block_in_place"), "{err}");
        Ok(())
    });
    outcome.expect("job");
}
