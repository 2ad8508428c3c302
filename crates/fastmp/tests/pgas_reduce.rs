//! `reduce` and `prefix_reduce` beyond the u32 sums of `pgas_collectives`: the predefined
//! operations on several element types, and a non-commutative user operation (2×2 integer
//! matrix product) that must be applied in global index order, for every algorithm, with
//! element counts of 0, 1, ending inside a block (partial last blocks) and the whole array.
//! Both devices.

mod pgas_common;

use fastmp::DeviceKind;
use fastmp::op::{Band, Bor, Bxor, Max, Min, Op, Prod, Sum};
use pgas_common::{Call, Case, Collective, Sync, Value, matmul, matmul_op, run_cases};

/// Element counts for blocks of `block` on `np` ranks: none, one, into the second block, one
/// short of the whole array, the whole array.
fn counts(np: usize, block: usize) -> Vec<usize> {
    let whole = np * block;
    let mut counts = vec![0, 1, (block + 2).min(whole), whole - 1, whole];
    counts.dedup();
    counts
}

/// Every algorithm of both reductions × `counts`, the sync mode rotating (or every one of
/// them when `every_sync`).
fn reduction_cases(np: usize, block: usize, every_sync: bool) -> Vec<Case> {
    let mut cases = Vec::new();
    for coll in [Collective::Reduce, Collective::PrefixReduce] {
        for algorithm in coll.algorithms() {
            for n in counts(np, block) {
                let syncs: Vec<Sync> =
                    if every_sync { Sync::EVERY.to_vec() } else { vec![Sync::EVERY[(cases.len() * 4) % 9]] };
                for sync in syncs {
                    let call = Call::of(coll, np, n, cases.len() * 3 + 1);
                    cases.push(Case { call, algorithm: Some(algorithm), sync });
                }
            }
        }
    }
    cases
}

fn with_op<T: Value, O: Op<T> + Sync2>(dev: DeviceKind, nps: &[usize], block: usize, every_sync: bool, op: O) {
    for &np in nps {
        run_cases::<T, &O>(dev, np, block, &reduction_cases(np, block, every_sync), &op);
    }
}

/// `std::marker::Sync` under another name (`Sync` here is the PGAS sync mode).
trait Sync2: std::marker::Sync {}
impl<T: std::marker::Sync> Sync2 for T {}

fn predefined_operations_on_several_types(dev: DeviceKind) {
    let nps: &[usize] = if dev != DeviceKind::Shm { &[3] } else { &[3, 5] };
    with_op::<u32, _>(dev, nps, 7, false, Max);
    with_op::<u64, _>(dev, nps, 5, false, Bxor);
    with_op::<u8, _>(dev, nps, 9, false, Bor);
    with_op::<u8, _>(dev, nps, 9, false, Band);
    with_op::<i32, _>(dev, nps, 4, false, Prod);
    with_op::<i32, _>(dev, nps, 4, false, Min);
    with_op::<f64, _>(dev, nps, 6, false, Sum);
    with_op::<f64, _>(dev, nps, 6, false, Min);
}

fn non_commutative_matrix_product(dev: DeviceKind) {
    let nps: &[usize] = if dev != DeviceKind::Shm { &[2, 3, 5] } else { &[1, 2, 3, 5, 8] };
    for &np in nps {
        run_cases::<[i64; 4], _>(dev, np, 3, &reduction_cases(np, 3, np <= 3), matmul_op());
    }
}

/// The reference itself: the matrix product does not commute on the values the suites use, so
/// a reduction in the wrong order would be caught.
#[test]
fn the_matrix_product_is_associative_and_not_commutative() {
    let m: Vec<[i64; 4]> = (0..40).map(|i| pgas_common::value(3, i % 4, i)).collect();
    let mut differ = 0;
    for w in m.windows(3) {
        assert_eq!(matmul(matmul(w[0], w[1]), w[2]), matmul(w[0], matmul(w[1], w[2])));
        differ += usize::from(matmul(w[0], w[1]) != matmul(w[1], w[0]));
    }
    assert!(differ > 30, "only {differ} of 38 pairs do not commute");
}

mod shm {
    use fastmp::DeviceKind::Shm;
    #[test]
    fn predefined_operations_on_several_types() {
        super::predefined_operations_on_several_types(Shm)
    }
    #[test]
    fn non_commutative_matrix_product() {
        super::non_commutative_matrix_product(Shm)
    }
}

mod tcp {
    use fastmp::DeviceKind::Tcp;
    #[test]
    fn predefined_operations_on_several_types() {
        super::predefined_operations_on_several_types(Tcp)
    }
    #[test]
    fn non_commutative_matrix_product() {
        super::non_commutative_matrix_product(Tcp)
    }
}

mod hybrid {
    use fastmp::DeviceKind::Hybrid;
    #[test]
    fn predefined_operations_on_several_types() {
        super::predefined_operations_on_several_types(Hybrid)
    }
    #[test]
    fn non_commutative_matrix_product() {
        super::non_commutative_matrix_product(Hybrid)
    }
}
