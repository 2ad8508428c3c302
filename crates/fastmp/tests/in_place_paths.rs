//! The in-place paths that do not copy their input (issue 12, "IN_PLACE collectives are no
//! slower than their out-of-place forms"), against the out-of-place operations: the native
//! reduce folding into the root's own buffer (any root, so ranks on both sides of it), the
//! native scan on the first, middle and last ranks, alltoall(v) swapping blocks where they lie
//! (odd byte counts split between a pair's two ranks; two operations in flight at once) and the
//! pairwise message exchange, each call repeated so reused temporaries are exercised. Every
//! algorithm, shm and tcp.

mod coll_common;

use coll_common::{Context, job, roots, val};
use fastmp::coll::{Collective, Tuning};
use fastmp::op::{Sum, UserOp};
use fastmp::{Comm, Config, DeviceKind, Result};

/// Affine maps x ↦ a·x + b composed: associative, not commutative, so any change of the
/// combining order shows.
fn compose(l: [u64; 2], r: [u64; 2]) -> [u64; 2] {
    [l[0].wrapping_mul(r[0]), l[0].wrapping_mul(r[1]).wrapping_add(l[1])]
}

fn affine(seed: u32, rank: usize, n: usize) -> Vec<[u64; 2]> {
    (0..n).map(|i| [u64::from(val(seed, rank, i)) | 1, u64::from(val(seed + 1, rank, i))]).collect()
}

fn bytes(seed: u32, stream: usize, n: usize) -> Vec<u8> {
    (0..n).map(|i| val(seed, stream, i) as u8).collect()
}

/// `world` with every algorithm of `coll` forced in turn.
fn each_algorithm(world: &Comm, coll: Collective, body: impl Fn(&Comm) -> Result<()>) -> Result<()> {
    for &algorithm in coll.algorithms() {
        let comm = world.with_tuning(Tuning::defaults_for(DeviceKind::Shm).force(coll, algorithm)?);
        body(&comm).ctx(|| format!("{coll:?} {algorithm}"))?;
    }
    Ok(())
}

fn reductions(world: &Comm) -> Result<()> {
    let (me, np) = (world.rank(), world.size());
    let matmul = UserOp::non_commutative(|input: &[[u64; 2]], inout: &mut [[u64; 2]]| {
        for (l, r) in input.iter().zip(inout.iter_mut()) {
            *r = compose(*l, *r);
        }
    });
    each_algorithm(world, Collective::Reduce, |c| {
        for root in roots(np) {
            for (round, n) in [(0, 5), (1, 300), (2, 300)] {
                let mine = affine(round, me, n);
                let mut want = vec![[0; 2]; n];
                c.reduce(&mine, &mut want, &matmul, root)?;
                let mut buf = mine.clone();
                c.reduce_in_place(&mut buf, &matmul, root)?;
                let what = format!("reduce_in_place root {root} n {n}");
                assert_eq!(buf, if me == root { want } else { mine }, "{what}");
                let mut sum = vec![u64::from(val(round, me, 0)); n];
                c.reduce_in_place(&mut sum, Sum, root)?;
                if me == root {
                    let total = (0..np).map(|r| u64::from(val(round, r, 0))).sum::<u64>();
                    assert_eq!(sum, vec![total; n], "{what} (sum)");
                }
            }
        }
        Ok(())
    })?;
    each_algorithm(world, Collective::Scan, |c| {
        for (round, n) in [(0, 5), (1, 300), (2, 300)] {
            let mine = affine(round + 10, me, n);
            for exclusive in [false, true] {
                let mut want = vec![[0; 2]; n];
                let mut buf = mine.clone();
                if exclusive {
                    want.clone_from(&mine); // rank 0's result: left unchanged
                    c.exscan(&mine, &mut want, &matmul)?;
                    c.exscan_in_place(&mut buf, &matmul)?;
                } else {
                    c.scan(&mine, &mut want, &matmul)?;
                    c.scan_in_place(&mut buf, &matmul)?;
                }
                let what = if exclusive { "exscan_in_place" } else { "scan_in_place" };
                assert_eq!(buf, want, "{what} n {n}");
            }
        }
        Ok(())
    })
}

fn exchanges(world: &Comm) -> Result<()> {
    let (me, np) = (world.rank(), world.size());
    each_algorithm(world, Collective::Alltoall, |c| {
        for (round, block) in [(0, 1), (1, 7), (2, 7), (3, 1000)] {
            let mine = |seed: u32| bytes(seed, me, block * np);
            let theirs = |seed: u32| -> Vec<u8> {
                (0..np).flat_map(|p| bytes(seed, p, block * np)[me * block..][..block].to_vec()).collect()
            };
            let mut buf = mine(round);
            c.alltoall_in_place(&mut buf)?;
            assert_eq!(buf, theirs(round), "alltoall_in_place block {block}");
            // Two in flight at once: each keeps its own blocks (and temporaries).
            let (mut a, mut b) = (mine(round + 20), mine(round + 40));
            c.scope(|s| {
                let ra = s.ialltoall_in_place(&mut a)?;
                let rb = s.ialltoall_in_place(&mut b)?;
                rb.wait()?;
                ra.wait().map(drop)
            })?;
            assert_eq!(a, theirs(round + 20), "first of two ialltoall_in_place, block {block}");
            assert_eq!(b, theirs(round + 40), "second of two ialltoall_in_place, block {block}");
        }
        Ok(())
    })?;
    each_algorithm(world, Collective::Alltoallv, |c| {
        for round in 0..3 {
            // counts[j] (what goes to and comes from j) must equal j's counts[me]: symmetric,
            // odd, some empty, with gaps between blocks that must stay untouched.
            let count = |i: usize, j: usize| (i + j + round) % 4 * 3;
            let counts: Vec<usize> = (0..np).map(|j| count(me, j)).collect();
            let displs: Vec<usize> =
                (0..np).scan(0, |at, j| Some(std::mem::replace(at, *at + counts[j] + 2))).collect();
            let len = displs[np - 1] + counts[np - 1] + 2;
            let mut buf = bytes(round as u32 + 60, me, len);
            let before = buf.clone();
            c.alltoallv_in_place(&mut buf, &counts, &displs)?;
            for j in 0..np {
                // Rank j's block for us lies at j's displacement for us.
                let at: usize = (0..me).map(|k| count(j, k) + 2).sum();
                let want: Vec<u8> = (0..counts[j]).map(|i| val(round as u32 + 60, j, at + i) as u8).collect();
                assert_eq!(buf[displs[j]..][..counts[j]], want, "alltoallv_in_place from {j}");
                let gap = displs[j] + counts[j]..displs[j] + counts[j] + 2;
                assert_eq!(buf[gap.clone()], before[gap], "gap after block {j}");
            }
        }
        Ok(())
    })
}

fn on(device: DeviceKind, body: fn(&Comm) -> Result<()>, what: &str) {
    for np in [2, 3, 4] {
        job(Config::new().device(device).np(np), &format!("{what} {device:?} np {np}"), move |w| body(&w))
            .unwrap_or_else(|e| panic!("{what} {device:?} np {np}: {e}"));
    }
}

#[test]
fn in_place_reductions_match_out_of_place_on_shm() {
    on(DeviceKind::Shm, reductions, "reductions");
}

#[test]
fn in_place_reductions_match_out_of_place_on_tcp() {
    on(DeviceKind::Tcp, reductions, "reductions");
}

#[test]
fn in_place_alltoall_matches_its_definition_on_shm() {
    on(DeviceKind::Shm, exchanges, "alltoall");
}

#[test]
fn in_place_alltoall_matches_its_definition_on_tcp() {
    on(DeviceKind::Tcp, exchanges, "alltoall");
}
