//! The segmented ring allreduce (`ring_segmented`) against sequential references, on both
//! devices: every process count 1..=5; vectors empty, shorter than the process count, not a
//! multiple of it, and just below, at and above the sizes where a block gains its second and
//! third segment (512 KiB per segment); predefined and user operations, a 12-byte element;
//! blocking and nonblocking. A non-commutative operation must never run it.

mod coll_common;

use coll_common::{Context, check_each, job, seed_of, val};
use fastmp::coll::{Algorithm, Collective, Tuning};
use fastmp::op::{Max, Sum, UserOp};
use fastmp::{Comm, Config, DeviceKind, Result};

const ALG: Algorithm = Algorithm::RingSegmented;
const COLL: Collective = Collective::Allreduce;
/// `u32`s in one segment's worth of bytes (the algorithm aims at 512 KiB segments).
const SEGMENT: usize = 512 * 1024 / 4;

/// Vector lengths (`u32`s) around the segment boundaries of `np` ranks.
fn lengths(np: usize) -> Vec<usize> {
    let per_block = |segments: usize| segments * SEGMENT * np;
    let mut lengths = vec![0, 1, np.saturating_sub(1), np + 1, 1000 * np + 7];
    for segments in [1, 2] {
        let n = per_block(segments);
        lengths.extend([n - 1, n, n + 1]);
    }
    lengths.push(per_block(3) - np + 1);
    lengths.sort_unstable();
    lengths.dedup();
    lengths
}

/// `world` with `ring_segmented` forced for allreduce.
fn forced(world: &Comm) -> Result<Comm> {
    Ok(world.with_tuning(world.tuning().clone().force(COLL, ALG)?))
}

/// Runs `body` on every np in 1..=5 on `device`.
fn each_np(device: DeviceKind, what: &str, body: fn(&Comm) -> Result<()>) {
    for np in 1..=5 {
        let name = format!("{what} on {device:?}, np={np}");
        job(Config::new().device(device).np(np), &name, move |world| body(&world))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// Sums and maxima of `u32`s and element-wise sums of `[u32; 3]` with a user op, each length
/// of [`lengths`], checked against the sequential result.
fn sums_and_user_ops(world: &Comm) -> Result<()> {
    let comm = forced(world)?;
    let (np, me) = (comm.size(), comm.rank());
    assert_eq!(comm.algorithm_for(COLL, 1 << 20, true), ALG);
    for n in lengths(np) {
        let seed = seed_of(&[np, n]);
        let send: Vec<u32> = (0..n).map(|i| val(seed, me, i)).collect();
        let mut recv = vec![0u32; n];
        comm.allreduce(&send, &mut recv, Sum).ctx(|| format!("sum of {n}"))?;
        let sum = |i| (0..np).fold(0u32, |acc, r| acc.wrapping_add(val(seed, r, i)));
        check_each(&recv, sum, &|| format!("sum of {n} u32, np={np}"));
        comm.allreduce(&send, &mut recv, Max).ctx(|| format!("max of {n}"))?;
        check_each(&recv, |i| (0..np).map(|r| val(seed, r, i)).max().unwrap_or(0), &|| format!("max of {n}"));
    }
    let add3 = UserOp::commutative(|input: &[[u32; 3]], inout: &mut [[u32; 3]]| {
        for (a, b) in input.iter().zip(inout) {
            *b = [0, 1, 2].map(|j| a[j].wrapping_add(b[j]));
        }
    });
    for n in [0, 2, SEGMENT * np + 1] {
        let send: Vec<[u32; 3]> = (0..n).map(|i| [me as u32, i as u32, 1]).collect();
        let mut recv = vec![[0u32; 3]; n];
        comm.allreduce(&send, &mut recv, &add3).ctx(|| format!("user op on {n} triples"))?;
        let ranks = (np * (np - 1) / 2) as u32;
        check_each(&recv, |i| [ranks, (i * np) as u32, np as u32], &|| format!("user op on {n} triples"));
    }
    Ok(())
}

/// The same calls nonblocking, two in flight at once on the same communicator.
fn nonblocking(world: &Comm) -> Result<()> {
    let comm = forced(world)?;
    let (np, me) = (comm.size(), comm.rank());
    let n = 2 * SEGMENT * np + 3;
    let a: Vec<u64> = (0..n).map(|i| (i * np + me) as u64).collect();
    let b: Vec<u64> = (0..n).map(|i| (me * i) as u64).collect();
    let (mut sum_a, mut sum_b) = (vec![0u64; n], vec![0u64; n]);
    comm.scope(|s| {
        let first = s.iallreduce(&a, &mut sum_a, Sum)?;
        let second = s.iallreduce(&b, &mut sum_b, Sum)?;
        second.wait()?;
        first.wait().map(drop)
    })?;
    let ranks = (np * (np - 1) / 2) as u64;
    check_each(&sum_a, |i| (i * np * np) as u64 + ranks, &|| "first iallreduce".into());
    check_each(&sum_b, |i| ranks * i as u64, &|| "second iallreduce".into());
    Ok(())
}

/// A non-commutative op never runs the ring (which folds out of rank order): forcing it falls
/// back, and the result is the rank-order product.
fn non_commutative_falls_back(world: &Comm) -> Result<()> {
    let comm = forced(world)?;
    let (np, me) = (comm.size(), comm.rank());
    for bytes in [0, 4096, 1 << 20, 1 << 24] {
        let chosen = comm.algorithm_for(COLL, bytes, false);
        assert_ne!(chosen, ALG, "{bytes} B");
    }
    // 2x2 integer matrices, applied in rank order (`combine(lower, inout)` is `lower · inout`).
    let matmul = UserOp::non_commutative(|input: &[[i64; 4]], inout: &mut [[i64; 4]]| {
        for (a, b) in input.iter().zip(inout.iter_mut()) {
            *b = [
                a[0] * b[0] + a[1] * b[2],
                a[0] * b[1] + a[1] * b[3],
                a[2] * b[0] + a[3] * b[2],
                a[2] * b[1] + a[3] * b[3],
            ];
        }
    });
    let n = 3 * np + 1;
    let mine: Vec<[i64; 4]> = (0..n).map(|i| [2, (me + i) as i64, 0, 1]).collect();
    let mut product = vec![[0i64; 4]; n];
    comm.allreduce(&mine, &mut product, &matmul)?;
    // [[2, x0], [0, 1]] · … · [[2, x(np-1)], [0, 1]] = [[2^np, Σ 2^r · x_r], [0, 1]].
    let expected = |i: usize| [1 << np, (0..np).map(|r| (1i64 << r) * (r + i) as i64).sum(), 0, 1];
    check_each(&product, expected, &|| format!("non-commutative product, np={np}"));
    Ok(())
}

#[test]
fn sums_and_user_ops_on_shm() {
    each_np(DeviceKind::Shm, "ring_segmented sums", sums_and_user_ops);
}

#[test]
fn sums_and_user_ops_on_tcp() {
    each_np(DeviceKind::Tcp, "ring_segmented sums", sums_and_user_ops);
}

#[test]
fn nonblocking_on_both_devices() {
    each_np(DeviceKind::Shm, "ring_segmented iallreduce", nonblocking);
    each_np(DeviceKind::Tcp, "ring_segmented iallreduce", nonblocking);
}

#[test]
fn non_commutative_ops_never_select_it() {
    each_np(DeviceKind::Shm, "non-commutative allreduce", non_commutative_falls_back);
    each_np(DeviceKind::Tcp, "non-commutative allreduce", non_commutative_falls_back);
    assert!(Tuning::defaults().force(COLL, ALG).is_ok());
}
