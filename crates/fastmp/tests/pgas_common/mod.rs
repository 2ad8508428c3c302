//! Helpers shared by the PGAS collective suites (`pgas_*.rs`): jobs under a watchdog, values
//! that name their origin, one description of a collective call ([`Call`]) with its sequential
//! reference (the UPC semantics documented on each `fastmp::pgas` function, computed for one
//! rank's destination block), and a driver ([`run_cases`]) that runs a list of cases in one job
//! on one pair of arrays and reports every wrong block instead of stopping at the first.
//!
//! The driver synchronises only where the sync mode says the user must: a barrier before an
//! IN_NOSYNC call (the data must be ready everywhere at entry) and after an OUT_NOSYNC call
//! (others may still touch this rank's blocks). Otherwise a rank rewrites its blocks for the next
//! case right after the call returns and checks its result without waiting for anybody, so a
//! collective that returns too early under OUT_ALLSYNC/OUT_MYSYNC, or reads a block before its
//! owner entered under IN_ALLSYNC/IN_MYSYNC, corrupts some rank's result and fails the test.
//! Verdicts never depend on timing.

#![allow(dead_code)]

use std::fmt::Debug;
use std::sync::Mutex;

use fastmp::bytemuck::Pod;
use fastmp::op::Op;
pub use fastmp::pgas::{self, Algorithm, Collective, InSync, OutSync, SharedArray, Sync};
use fastmp::{Comm, Config, DeviceKind, Error, Result};

#[path = "../watchdog/mod.rs"]
mod watchdog;
pub use watchdog::watchdog;

/// `np` thread ranks on `dev` under a [`watchdog`].
#[track_caller]
pub fn run<F, R>(dev: DeviceKind, np: usize, f: F) -> Result<Vec<R>>
where
    F: Fn(Comm) -> Result<R> + std::marker::Sync,
    R: Send,
{
    let _watchdog = watchdog(format!("a job of {np} ranks on {dev:?} started at {}", std::panic::Location::caller()));
    Config::new().device(dev).np(np).run(f)
}

/// SplitMix64: spreads nearby inputs far apart.
pub fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// An element type for the suites: values made from a hash, and a sentinel no made value
/// equals (it marks destination elements the call must not write).
pub trait Value: Pod + PartialEq + Debug + Send + std::marker::Sync {
    const SENTINEL: Self;
    fn make(h: u64) -> Self;
}

impl Value for u8 {
    const SENTINEL: u8 = 0xFF;
    fn make(h: u64) -> u8 {
        (h % 255) as u8
    }
}

impl Value for u32 {
    const SENTINEL: u32 = u32::MAX;
    fn make(h: u64) -> u32 {
        (h >> 33) as u32
    }
}

impl Value for u64 {
    const SENTINEL: u64 = u64::MAX;
    fn make(h: u64) -> u64 {
        h >> 1
    }
}

impl Value for i32 {
    const SENTINEL: i32 = i32::MIN;
    fn make(h: u64) -> i32 {
        (h % 2001) as i32 - 1000
    }
}

/// Small integers, so sums and products are exact whatever order a tree adds them in.
impl Value for f64 {
    const SENTINEL: f64 = -1.0e300;
    fn make(h: u64) -> f64 {
        (h % 64) as f64 - 32.0
    }
}

/// A 3-byte element: every block boundary falls at an odd byte offset.
impl Value for [u8; 3] {
    const SENTINEL: [u8; 3] = [0xFF; 3];
    fn make(h: u64) -> [u8; 3] {
        [(h % 255) as u8, ((h >> 8) % 255) as u8, ((h >> 16) % 255) as u8]
    }
}

/// A 2×2 integer matrix, row-major (for the non-commutative matrix product).
impl Value for [i64; 4] {
    const SENTINEL: [i64; 4] = [i64::MIN; 4];
    fn make(h: u64) -> [i64; 4] {
        [(h % 7) as i64 - 3, ((h >> 8) % 7) as i64 - 3, ((h >> 16) % 7) as i64 - 3, ((h >> 24) % 7) as i64 - 3]
    }
}

/// Element `i` of `rank`'s source block in case `seed`.
pub fn value<T: Value>(seed: u64, rank: usize, i: usize) -> T {
    T::make(splitmix(splitmix(seed ^ 0x5EED) ^ ((rank as u64) << 40) ^ i as u64))
}

/// 2×2 matrix product with wrapping integers: associative, not commutative.
pub fn matmul(a: [i64; 4], b: [i64; 4]) -> [i64; 4] {
    let (m, w) = (i64::wrapping_mul, i64::wrapping_add);
    [
        w(m(a[0], b[0]), m(a[1], b[2])),
        w(m(a[0], b[1]), m(a[1], b[3])),
        w(m(a[2], b[0]), m(a[3], b[2])),
        w(m(a[2], b[1]), m(a[3], b[3])),
    ]
}

/// A 2×2 matrix, row-major.
pub type Mat = [i64; 4];

/// The matrix product as a fastmp operation (`inout = input ∘ inout`, input from lower ranks).
pub fn matmul_op() -> fastmp::op::UserOp<impl Fn(&[Mat], &mut [Mat])> {
    fastmp::op::UserOp::non_commutative(|input: &[[i64; 4]], inout: &mut [[i64; 4]]| {
        for (a, b) in input.iter().zip(inout.iter_mut()) {
            *b = matmul(*a, *b);
        }
    })
}

/// `a ∘ b` with a fastmp operation.
pub fn apply<T: Pod, O: Op<T>>(op: &O, a: T, b: T) -> T {
    let mut out = [b];
    op.combine(&[a], &mut out);
    out[0]
}

/// One collective call's arguments, the same on every rank.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    Broadcast { root: usize, len: usize },
    Scatter { root: usize, len: usize },
    Gather { root: usize, len: usize },
    GatherAll { len: usize },
    Exchange { len: usize },
    Permute { perm: Vec<usize>, len: usize },
    Reduce { root: usize, nelems: usize },
    PrefixReduce { nelems: usize },
}

impl Call {
    pub fn collective(&self) -> Collective {
        match self {
            Call::Broadcast { .. } => Collective::Broadcast,
            Call::Scatter { .. } => Collective::Scatter,
            Call::Gather { .. } => Collective::Gather,
            Call::GatherAll { .. } => Collective::GatherAll,
            Call::Exchange { .. } => Collective::Exchange,
            Call::Permute { .. } => Collective::Permute,
            Call::Reduce { .. } => Collective::Reduce,
            Call::PrefixReduce { .. } => Collective::PrefixReduce,
        }
    }

    /// A call of `coll` of "size" `n` on `np` ranks: `n` elements per rank for the data
    /// movers, `n` elements of the whole array for the reductions; `pick` varies the root and
    /// the permutation between cases.
    pub fn of(coll: Collective, np: usize, n: usize, pick: usize) -> Call {
        let root = pick % np;
        match coll {
            Collective::Broadcast => Call::Broadcast { root, len: n },
            Collective::Scatter => Call::Scatter { root, len: n },
            Collective::Gather => Call::Gather { root, len: n },
            Collective::GatherAll => Call::GatherAll { len: n },
            Collective::Exchange => Call::Exchange { len: n },
            Collective::Permute => Call::Permute { perm: permutation(np, pick as u64), len: n },
            Collective::Reduce => Call::Reduce { root, nelems: n },
            Collective::PrefixReduce => Call::PrefixReduce { nelems: n },
        }
    }

    /// Makes the call.
    pub fn invoke<T: Pod, O: Op<T>>(
        &self,
        dst: &SharedArray<T>,
        src: &SharedArray<T>,
        op: &O,
        sync: Sync,
    ) -> Result<()> {
        match *self {
            Call::Broadcast { root, len } => pgas::broadcast(dst, src, root, len, sync),
            Call::Scatter { root, len } => pgas::scatter(dst, src, root, len, sync),
            Call::Gather { root, len } => pgas::gather(dst, src, root, len, sync),
            Call::GatherAll { len } => pgas::gather_all(dst, src, len, sync),
            Call::Exchange { len } => pgas::exchange(dst, src, len, sync),
            Call::Permute { ref perm, len } => pgas::permute(dst, src, perm, len, sync),
            Call::Reduce { root, nelems } => pgas::reduce(dst, src, root, nelems, op, sync),
            Call::PrefixReduce { nelems } => pgas::prefix_reduce(dst, src, nelems, op, sync),
        }
    }

    /// The sequential reference: what rank `me`'s destination block (`dst_len` elements, all
    /// [`Value::SENTINEL`] before the call) holds after it, given every rank's source block
    /// through `src(rank, index)` (blocks of `src_len` elements). Elements the call does not
    /// name keep the sentinel.
    pub fn expected<T: Value, O: Op<T>>(
        &self,
        me: usize,
        np: usize,
        src_len: usize,
        dst_len: usize,
        src: &dyn Fn(usize, usize) -> T,
        op: &O,
    ) -> Vec<T> {
        let mut dst = vec![T::SENTINEL; dst_len];
        let copy = |dst: &mut [T], rank: usize, from: usize| {
            for (k, d) in dst.iter_mut().enumerate() {
                *d = src(rank, from + k);
            }
        };
        match *self {
            Call::Broadcast { root, len } => copy(&mut dst[..len], root, 0),
            Call::Scatter { root, len } => copy(&mut dst[..len], root, me * len),
            Call::Gather { root, len } if me == root => (0..np).for_each(|i| copy(&mut dst[i * len..][..len], i, 0)),
            Call::Gather { .. } => {}
            Call::GatherAll { len } => (0..np).for_each(|i| copy(&mut dst[i * len..][..len], i, 0)),
            Call::Exchange { len } => (0..np).for_each(|j| copy(&mut dst[j * len..][..len], j, me * len)),
            Call::Permute { ref perm, len } => {
                let from = perm.iter().position(|&p| p == me).expect("a permutation");
                copy(&mut dst[..len], from, 0)
            }
            Call::Reduce { root, nelems } => {
                // x0 ∘ (x1 ∘ (… ∘ x(n-1))), folded from the right: rank order, as documented.
                if me == root && nelems > 0 {
                    let x = |g: usize| src(g / src_len, g % src_len);
                    dst[0] = (0..nelems - 1).rev().fold(x(nelems - 1), |acc, g| apply(op, x(g), acc));
                }
            }
            Call::PrefixReduce { nelems } => {
                let x = |g: usize| src(g / src_len, g % src_len);
                let mine = me * dst_len..((me + 1) * dst_len).min(nelems);
                let mut prefix = None;
                for g in 0..mine.end {
                    let p = match prefix {
                        None => x(g),
                        Some(p) => apply(op, p, x(g)),
                    };
                    prefix = Some(p);
                    if g >= mine.start {
                        dst[g - mine.start] = p;
                    }
                }
            }
        }
        dst
    }

    /// Source and destination block lengths this call needs on `np` ranks.
    pub fn needs(&self, np: usize) -> (usize, usize) {
        match *self {
            Call::Broadcast { len, .. } | Call::Permute { len, .. } => (len, len),
            Call::Scatter { len, .. } => (np * len, len),
            Call::Gather { len, .. } | Call::GatherAll { len } => (len, np * len),
            Call::Exchange { len } => (np * len, np * len),
            Call::Reduce { nelems, .. } => (nelems.div_ceil(np), 1),
            Call::PrefixReduce { nelems } => (nelems.div_ceil(np), nelems.div_ceil(np)),
        }
    }
}

/// A pseudo-random permutation of `0..np`.
pub fn permutation(np: usize, seed: u64) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..np).collect();
    for i in (1..np).rev() {
        let j = (splitmix(seed ^ (i as u64) << 20) % (i as u64 + 1)) as usize;
        perm.swap(i, j);
    }
    perm
}

/// One case of a run: a call, the algorithm forced on the destination (or the library's
/// choice), and the sync mode.
#[derive(Clone, Debug)]
pub struct Case {
    pub call: Call,
    pub algorithm: Option<Algorithm>,
    pub sync: Sync,
}

/// Rank `me`'s mismatches against `want`, described, or `None` when `got == want`.
pub fn diff<T: Value>(got: &[T], want: &[T]) -> Option<String> {
    if got == want {
        return None;
    }
    let bad: Vec<usize> = (0..want.len()).filter(|&i| got[i] != want[i]).collect();
    let i = bad[0];
    Some(format!(
        "{} of {} elements wrong, first at {i}: got {:?}, want {:?}{}",
        bad.len(),
        want.len(),
        got[i],
        want[i],
        if got[i] == T::SENTINEL { " (never written)" } else { "" }
    ))
}

/// Runs `cases` in order in one job of `np` ranks on `dev`, on one pair of arrays with blocks of
/// `block` elements (every case must fit), each case with its own data; every rank checks its
/// own destination block against [`Call::expected`]. Panics listing every wrong (case, rank);
/// an `Err` from a call ends the job and fails the test with the case named.
#[track_caller]
pub fn run_cases<T: Value, O: Op<T> + std::marker::Sync>(
    dev: DeviceKind,
    np: usize,
    block: usize,
    cases: &[Case],
    op: O,
) {
    for case in cases {
        let (s, d) = case.call.needs(np);
        assert!(s <= block && d <= block, "test bug: {case:?} needs blocks of {s}/{d}, the arrays have {block}");
    }
    let failures = Mutex::new(Vec::new());
    let result = run(dev, np, |world| {
        let me = world.rank();
        let src = world.shared_array::<T>(block)?;
        let dst = world.shared_array::<T>(block)?;
        for (k, case) in cases.iter().enumerate() {
            let what = || {
                let alg = case.algorithm.map_or("(default)".to_string(), |a| a.to_string());
                format!("{dev:?} np {np} case {k}: {:?} {alg} {}", case.call, case.sync)
            };
            let seed = splitmix(k as u64 + 1);
            if let Some(alg) = case.algorithm {
                dst.force_algorithm(case.call.collective(), alg)?;
            }
            for (i, v) in src.local()?.iter_mut().enumerate() {
                *v = value(seed, me, i);
            }
            dst.local()?.fill(T::SENTINEL);
            let (input, output) = case.sync.modes()?;
            if input == InSync::No {
                src.barrier()?;
            }
            case.call
                .invoke(&dst, &src, &op, case.sync)
                .map_err(|e| Error::other(format!("{}: rank {me}: {e}", what())))?;
            if output == OutSync::No {
                dst.barrier()?;
            }
            let want = case.call.expected(me, np, block, block, &|r, i| value(seed, r, i), &op);
            if let Some(d) = diff(&dst.local()?, &want) {
                failures.lock().unwrap().push(format!("{}: rank {me}: {d}", what()));
            }
        }
        src.barrier()?;
        dst.free()?;
        src.free()
    });
    let failures = failures.into_inner().unwrap();
    if let Err(e) = result {
        panic!("{dev:?} np {np}: the job failed: {e}\n(wrong results before that: {failures:#?})");
    }
    if !failures.is_empty() {
        let shown: Vec<&String> = failures.iter().take(30).collect();
        panic!("{dev:?} np {np}: {} wrong blocks; the first: {shown:#?}", failures.len());
    }
}

/// Every algorithm of `coll` crossed with every sync mode and every size in `sizes`; roots and
/// permutations vary from case to case.
pub fn full_cross(coll: Collective, np: usize, sizes: &[usize]) -> Vec<Case> {
    let mut cases = Vec::new();
    for algorithm in coll.algorithms() {
        for sync in Sync::EVERY {
            for &n in sizes {
                let pick = cases.len() * 7 + 3;
                cases.push(Case { call: Call::of(coll, np, n, pick), algorithm: Some(algorithm), sync });
            }
        }
    }
    cases
}

/// Every algorithm of `coll` once at each size in `sizes`, the sync mode rotating through
/// [`Sync::EVERY`] (a sample of the cross product for the costly sizes and rank counts).
pub fn sampled(coll: Collective, np: usize, sizes: &[usize]) -> Vec<Case> {
    let mut cases = Vec::new();
    for (a, algorithm) in coll.algorithms().into_iter().enumerate() {
        for (s, &n) in sizes.iter().enumerate() {
            let sync = Sync::EVERY[(a + s * 4 + np) % Sync::EVERY.len()];
            let pick = cases.len() * 5 + np;
            cases.push(Case { call: Call::of(coll, np, n, pick), algorithm: Some(algorithm), sync });
        }
    }
    cases
}

/// Asserts `r` is `Error::InvalidArgument` (or `RankOutOfRange` when `rank` is given) naming
/// `call`.
#[track_caller]
pub fn expect_invalid<T: Debug>(r: Result<T>, call: &str) {
    match r {
        Err(Error::InvalidArgument(msg)) => {
            assert!(msg.contains(call), "{call}: message {msg:?} does not name the call")
        }
        other => panic!("{call}: expected Error::InvalidArgument, got {other:?}"),
    }
}
