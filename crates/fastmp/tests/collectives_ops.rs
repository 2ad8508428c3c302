//! Reduction ops and element types against a sequential fold in rank order: the predefined ops
//! on their types, elements of 3, 12 and 24 bytes, and a non-commutative user op, through every
//! algorithm of the reductions; and the serde object collectives over every algorithm of the
//! byte collectives they are built on.
//!
//! Every job runs under a watchdog (`FASTMP_TEST_TIMEOUT_S`, default 120 s) so a hang fails the
//! test instead of blocking.

mod coll_common;
mod collectives_common;

use std::fmt;

use bytemuck::Pod;
use coll_common::{Context, NPS, algorithms, check_each, forced, roots, run_ok_on, val};
use collectives_common::{SENTINEL, v_counts};
use fastmp::coll::{Collective, Tuning};
use fastmp::op::{Band, Bor, Bxor, Land, Loc, Lor, Max, MaxLoc, Min, MinLoc, Op, Prod, Sum, UserOp};
use fastmp::{Comm, DeviceKind, Result};
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------- ops, types, combining order

/// `x0 ∘ x1 ∘ … ∘ x(k-1)` element-wise, combined strictly in rank order with `op` itself: the
/// sequential reference for any op, commutative or not. Empty for `k == 0`.
fn fold_ranks<T: Pod, O: Op<T>>(op: &O, input: &dyn Fn(usize, usize) -> T, k: usize, n: usize) -> Vec<T> {
    let mut acc: Vec<T> = Vec::new();
    for r in 0..k {
        let mut next: Vec<T> = (0..n).map(|i| input(r, i)).collect();
        if r > 0 {
            op.combine(&acc, &mut next);
        }
        acc = next;
    }
    acc
}

/// Checks reduce (every root), allreduce, reduce_scatter (uneven counts), reduce_scatter_block,
/// scan and exscan with every algorithm of each, for `op` on data `input(rank, index)`, against
/// [`fold_ranks`]. `sentinel` fills receive space that must stay untouched.
fn check_reductions<T, O>(
    world: &Comm,
    label: &str,
    op: &O,
    input: &dyn Fn(usize, usize) -> T,
    sizes: &[usize],
    sentinel: T,
) -> Result<()>
where
    T: Pod + PartialEq + fmt::Debug,
    O: Op<T>,
{
    let (me, np) = (world.rank(), world.size());
    for &n in sizes {
        let total = fold_ranks(op, input, np, n);
        let mine: Vec<T> = (0..n).map(|i| input(me, i)).collect();
        let prefix = fold_ranks(op, input, me + 1, n);
        let exclusive = fold_ranks(op, input, me, n);
        let counts = v_counts(np, n.div_ceil(np));
        let scattered_len: usize = counts.iter().sum();
        let scattered_total = fold_ranks(op, input, np, scattered_len);
        let scattered_start: usize = counts[..me].iter().sum();
        let block = n.div_ceil(np);
        let block_total = fold_ranks(op, input, np, block * np);
        for coll in [Collective::Reduce, Collective::Allreduce, Collective::ReduceScatter, Collective::Scan] {
            for alg in algorithms(coll) {
                let comm = forced(world, coll, alg)?;
                let what = |detail: &str| {
                    let detail = detail.to_string();
                    move || format!("{label}: {coll} with algorithm {alg}, np={np}, n={n}: {detail}")
                };
                match coll {
                    Collective::Reduce => {
                        for root in roots(np) {
                            let mut recv = vec![sentinel; if me == root { n } else { 0 }];
                            comm.reduce(&mine, &mut recv, op, root).ctx(what(&format!("reduce to root {root}")))?;
                            check_each(&recv, |i| total[i], &what(&format!("reduce result at root {root}")));
                        }
                    }
                    Collective::Allreduce => {
                        let mut recv = vec![sentinel; n];
                        comm.allreduce(&mine, &mut recv, op).ctx(what("allreduce"))?;
                        check_each(&recv, |i| total[i], &what(&format!("allreduce result on rank {me}")));
                    }
                    Collective::ReduceScatter => {
                        let send: Vec<T> = (0..scattered_len).map(|i| input(me, i)).collect();
                        let mut recv = vec![sentinel; counts[me]];
                        comm.reduce_scatter(&send, &mut recv, &counts, op).ctx(what("reduce_scatter"))?;
                        let w = what(&format!("reduce_scatter block on rank {me}, counts {counts:?}"));
                        check_each(&recv, |i| scattered_total[scattered_start + i], &w);

                        let send: Vec<T> = (0..block * np).map(|i| input(me, i)).collect();
                        let mut recv = vec![sentinel; block];
                        comm.reduce_scatter_block(&send, &mut recv, op).ctx(what("reduce_scatter_block"))?;
                        let w = what(&format!("reduce_scatter_block result on rank {me}"));
                        check_each(&recv, |i| block_total[me * block + i], &w);
                    }
                    _ => {
                        let mut recv = vec![sentinel; n];
                        comm.scan(&mine, &mut recv, op).ctx(what("scan"))?;
                        check_each(&recv, |i| prefix[i], &what(&format!("scan result on rank {me}")));
                        let mut recv = vec![sentinel; n];
                        comm.exscan(&mine, &mut recv, op).ctx(what("exscan"))?;
                        let w = what(&format!("exscan result on rank {me}"));
                        check_each(&recv, |i| if me == 0 { sentinel } else { exclusive[i] }, &w);
                    }
                }
            }
        }
    }
    Ok(())
}

/// 2x2 matrices of wrapping u32 (row-major): associative, not commutative.
type Mat = [u32; 4];

fn mat_mul(a: &Mat, b: &Mat) -> Mat {
    let m = |x: u32, y: u32| x.wrapping_mul(y);
    [
        m(a[0], b[0]).wrapping_add(m(a[1], b[2])),
        m(a[0], b[1]).wrapping_add(m(a[1], b[3])),
        m(a[2], b[0]).wrapping_add(m(a[3], b[2])),
        m(a[2], b[1]).wrapping_add(m(a[3], b[3])),
    ]
}

/// A matrix that differs per rank and element, so products in any other order differ.
fn rank_matrix(r: usize, i: usize) -> Mat {
    [val(1, r, i) | 1, val(2, r, i), val(3, r, i), val(4, r, i) | 1]
}

#[test]
fn non_commutative_op_combines_in_rank_order() {
    non_commutative_op_combines_in_rank_order_on(DeviceKind::Shm, &NPS);
}

/// Hybrid: rank order across processes (hierarchical reductions included).
#[test]
fn non_commutative_op_combines_in_rank_order_on_hybrid() {
    non_commutative_op_combines_in_rank_order_on(DeviceKind::Hybrid, &[5, 6]);
}

fn non_commutative_op_combines_in_rank_order_on(device: DeviceKind, nps: &[usize]) {
    // The product of rank 0's and rank 1's matrices differs from the reverse product.
    assert_ne!(mat_mul(&rank_matrix(0, 0), &rank_matrix(1, 0)), mat_mul(&rank_matrix(1, 0), &rank_matrix(0, 0)));
    for &np in nps {
        run_ok_on(device, np, "non-commutative matrix product", |world| {
            // `inout = input · inout`, where `input` comes from lower ranks.
            let matmul = UserOp::non_commutative(|input: &[Mat], inout: &mut [Mat]| {
                for (a, b) in input.iter().zip(inout.iter_mut()) {
                    *b = mat_mul(a, b);
                }
            });
            assert!(!matmul.is_commutative());
            check_reductions(&world, "2x2 matrix product", &matmul, &rank_matrix, &[0, 1, 3, 4099], [SENTINEL; 4])
        });
    }
}

#[test]
fn predefined_ops_and_types() {
    predefined_ops_and_types_on(DeviceKind::Shm, &NPS);
}

/// Hybrid, 2 × 3.
#[test]
fn predefined_ops_and_types_on_hybrid() {
    predefined_ops_and_types_on(DeviceKind::Hybrid, &[6]);
}

fn predefined_ops_and_types_on(device: DeviceKind, nps: &[usize]) {
    for &np in nps {
        run_ok_on(device, np, "predefined ops", move |world| {
            let sizes = [1, 3, 1000];
            // Multiples of 1/4 below 2^20: every sum is exact in any order.
            let f64_gen = |r: usize, i: usize| (r as f64) * 0.5 + (i % 7) as f64 * 0.25 - 1.0;
            check_reductions(&world, "f64 sum", &Sum, &f64_gen, &sizes, -7.5)?;
            check_reductions(&world, "f64 max", &Max, &|r, i| ((r * 7 + i) % 11) as f64 - 5.0, &sizes, -99.0)?;
            check_reductions(&world, "f32 min", &Min, &|r, i| ((r * 3 + i) % 5) as f32, &sizes, -99.0)?;
            // Bits set in all / some ranks.
            let bits = |r: usize, i: usize| !((1u8 << (r % 8)) & (i as u8)) | (val(9, r, i) as u8 & 0x81);
            check_reductions(&world, "u8 band", &Band, &bits, &sizes, 0xA5)?;
            check_reductions(
                &world,
                "u8 bor",
                &Bor,
                &|r, i| (1u8 << ((r + i) % 8)) & val(8, r, i) as u8,
                &sizes,
                0xA5,
            )?;
            check_reductions(&world, "u16 bxor", &Bxor, &|r, i| val(7, r, i) as u16, &sizes, 0xA5A5)?;
            check_reductions(&world, "i32 min", &Min, &|r, i| val(6, r, i) as i32, &sizes, 12345)?;
            check_reductions(&world, "i64 max", &Max, &|r, i| val(5, r, i) as i64 - (1 << 31), &sizes, 12345)?;
            check_reductions(&world, "u64 prod", &Prod, &|r, i| u64::from(val(4, r, i)) | 1, &sizes, 12345)?;
            check_reductions(&world, "u8 land", &Land, &|r, i| u8::from((r + i) % 5 != 0), &sizes, 7)?;
            check_reductions(&world, "i32 lor", &Lor, &|r, i| i32::from((r * i) % 7 == 3), &sizes, 7)?;
            // Ties on the value: the smallest index must win.
            let loc = |r: usize, i: usize| Loc { value: ((r * 3 + i) % 4) as f64, index: r as i64 };
            let sentinel = Loc { value: -1.0, index: -1 };
            check_reductions(&world, "f64 minloc", &MinLoc, &loc, &sizes, sentinel)?;
            check_reductions(&world, "f64 maxloc", &MaxLoc, &loc, &sizes, sentinel)?;
            let iloc = |r: usize, i: usize| Loc { value: (val(3, r, i) % 3) as i32, index: (np - 1 - r) as i32 };
            check_reductions(&world, "i32 maxloc", &MaxLoc, &iloc, &sizes, Loc { value: -1, index: -1 })?;
            // Elements of 3, 12 and 24 bytes: chunked algorithms must split on element borders.
            let add3 = UserOp::commutative(|input: &[[u8; 3]], inout: &mut [[u8; 3]]| {
                for (a, b) in input.iter().zip(inout.iter_mut()) {
                    *b = [a[0].wrapping_add(b[0]), a[1] ^ b[1], a[2].max(b[2])];
                }
            });
            check_reductions(
                &world,
                "[u8; 3] user op",
                &add3,
                &|r, i| val(r as u32, i, 3).to_le_bytes()[..3].try_into().unwrap(),
                &[1, 3, 1001],
                [0xA5; 3],
            )?;
            let add12 = UserOp::commutative(|input: &[[u32; 3]], inout: &mut [[u32; 3]]| {
                for (a, b) in input.iter().zip(inout.iter_mut()) {
                    *b = [a[0].wrapping_add(b[0]), a[1] | b[1], a[2].min(b[2])];
                }
            });
            check_reductions(
                &world,
                "[u32; 3] user op",
                &add12,
                &|r, i| [val(1, r, i), val(2, r, i) & 0x0101_0101, val(3, r, i)],
                &[1, 3, 1001],
                [SENTINEL; 3],
            )?;
            let add24 = UserOp::commutative(|input: &[[u64; 3]], inout: &mut [[u64; 3]]| {
                for (a, b) in input.iter().zip(inout.iter_mut()) {
                    *b = [a[0].wrapping_add(b[0]), a[1].wrapping_mul(b[1]), a[2] ^ b[2]];
                }
            });
            check_reductions(
                &world,
                "[u64; 3] user op",
                &add24,
                &|r, i| [u64::from(val(1, r, i)), u64::from(val(2, r, i)) | 1, i as u64 * 31 + r as u64],
                &[1, 3, 1001],
                [7; 3],
            )?;
            Ok(())
        });
    }
}

// ---------------------------------------------------------------- serde objects

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Record {
    rank: usize,
    name: String,
    data: Vec<u32>,
    nested: Option<Box<Record>>,
}

/// A value that differs per rank and `variant`, sometimes empty and sometimes large (~400 KiB).
fn record(rank: usize, variant: usize) -> Record {
    let len = match (rank + variant) % 4 {
        0 => 0,
        1 => 3,
        2 => 100_000 + rank,
        _ => 17,
    };
    Record {
        rank,
        name: "é".repeat(rank % 3) + &format!("rank {rank} variant {variant}"),
        data: (0..len).map(|i| val(variant as u32, rank, i)).collect(),
        nested: (rank % 2 == 1).then(|| Box::new(Record { rank, name: String::new(), data: vec![1], nested: None })),
    }
}

/// The byte collectives that the object collectives are built on.
const OBJECT_CARRIERS: [Collective; 5] =
    [Collective::Bcast, Collective::Gather, Collective::Gatherv, Collective::Scatter, Collective::Scatterv];

#[test]
fn object_collectives() {
    object_collectives_on(DeviceKind::Shm, &NPS);
}

/// Hybrid, 3 + 2.
#[test]
fn object_collectives_on_hybrid() {
    object_collectives_on(DeviceKind::Hybrid, &[5]);
}

fn object_collectives_on(device: DeviceKind, nps: &[usize]) {
    for &np in nps {
        run_ok_on(device, np, "serde object collectives", move |world| {
            let me = world.rank();
            // Rotate the underlying algorithms so every one of them carries objects.
            let rounds = OBJECT_CARRIERS.iter().map(|&c| algorithms(c).len()).max().unwrap_or(1);
            for round in 0..rounds {
                let mut tuning = Tuning::defaults();
                for coll in OBJECT_CARRIERS {
                    let algs = algorithms(coll);
                    tuning = tuning.force(coll, algs[round % algs.len()])?;
                }
                let comm = world.with_tuning(tuning);
                for root in roots(np) {
                    let what = || format!("objects, round {round}, np={np}, root={root}");
                    let mut value = if me == root { record(root, round) } else { record(usize::MAX / 2, 0) };
                    comm.bcast_obj(&mut value, root).ctx(|| format!("{}: bcast_obj", what()))?;
                    assert_eq!(value, record(root, round), "{}: bcast_obj on rank {me}", what());

                    let mut names: Vec<String> =
                        if me == root { (0..3).map(|k| format!("{k}")).collect() } else { vec!["stale".into()] };
                    comm.bcast_obj(&mut names, root)?;
                    assert_eq!(names, ["0", "1", "2"], "{}: bcast_obj of a Vec<String>", what());

                    let gathered =
                        comm.gather_obj(&record(me, round), root).ctx(|| format!("{}: gather_obj", what()))?;
                    if me == root {
                        let want: Vec<Record> = (0..np).map(|r| record(r, round)).collect();
                        assert!(gathered == Some(want), "{}: gather_obj result differs", what());
                    } else {
                        assert!(gathered.is_none(), "{}: gather_obj gave a value off the root", what());
                    }

                    let values: Vec<Record> =
                        if me == root { (0..np).map(|r| record(r, round + 1)).collect() } else { vec![] };
                    let mine = comm.scatter_obj(&values, root).ctx(|| format!("{}: scatter_obj", what()))?;
                    assert!(mine == record(me, round + 1), "{}: scatter_obj on rank {me}", what());
                }
            }
            Ok(())
        });
    }
}
