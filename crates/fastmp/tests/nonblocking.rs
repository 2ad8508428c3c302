//! Nonblocking collectives (issue 5) against their blocking twins.
//!
//! Every check runs a nonblocking collective and compares everything the rank passed (send and
//! receive buffers, gaps between the blocks of the `v` variants included) with its blocking twin
//! run in the same job on the same inputs, which must in turn agree with a sequential reference
//! computed from all ranks' buffers. Reductions use a non-commutative operation (composition of
//! affine maps) as well as a sum, so a combination out of rank order shows.
//!
//! Sections:
//! 1. each of the sixteen collectives at several process counts, sizes (0, 1, 5 and a rendezvous
//!    size) and roots, under the default tuning, every collective forced to the shared-memory
//!    slot algorithm (`native`), and forced to each of its point-to-point algorithms; also at
//!    tiny and huge eager limits;
//! 2. random rounds of several outstanding collectives on the world and a dup or a split of it,
//!    mixed with point-to-point traffic and completed in random order by every completion call
//!    (16 ranks on few cores too, and tcp with its progress thread); more outstanding
//!    collectives than the slots; blocking collectives issued among nonblocking ones; native
//!    bcasts in random arrival orders;
//! 3. requests leaked with `mem::forget` or dropped, on fast and slow ranks; a panic with
//!    collectives outstanding;
//! 4. argument errors at the call, and request states after completion;
//! 5. MPI's progress rule: a rank blocked in `recv`, `probe` or a blocking barrier on a dup
//!    still forwards a collective's data (and the tcp progress thread serves a root that makes
//!    no calls).
//!
//! Every job runs under the watchdog of `coll_common::job`, so a hang fails the test.

mod coll_common;
mod common;

use std::fmt;
use std::mem;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use coll_common::{Context, job, val};
use common::{Rng, device_suite, mix};
use fastmp::coll::{Algorithm, Collective, Tuning};
use fastmp::op::Op;
use fastmp::{
    ANY_SOURCE, ANY_TAG, Comm, Config, DeviceKind, Error, Request, Result, Scope, Source, testall, testany, waitall,
    waitany,
};

/// Elements of the large case: the vector of the vector collectives, and about what all ranks'
/// blocks add up to in the block and `v` collectives. Past both devices' eager limits per block
/// at the process counts checked on each device.
const BIG: usize = 70_001;
/// Fill of receive space that must not be written (gaps, rank 0's exscan output, ...).
const SENTINEL: u32 = 0xDEAD_BEEF;
/// Point-to-point choices of [`Tunings::P2p`]: as many as the collective with the most
/// point-to-point algorithms has, so every algorithm is checked.
const P2P_VARIANTS: usize = 7;
/// First tag of the point-to-point messages mixed into the random rounds.
const P2P_TAG: i32 = 700;

// ---------------------------------------------------------------- the sixteen collectives

/// A nonblocking collective (and its blocking twin).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Barrier,
    Bcast,
    Scatter,
    Scatterv,
    Gather,
    Gatherv,
    Allgather,
    Allgatherv,
    Alltoall,
    Alltoallv,
    Reduce,
    Allreduce,
    ReduceScatter,
    ReduceScatterBlock,
    Scan,
    Exscan,
}

impl Kind {
    const ALL: [Kind; 16] = [
        Kind::Barrier,
        Kind::Bcast,
        Kind::Scatter,
        Kind::Scatterv,
        Kind::Gather,
        Kind::Gatherv,
        Kind::Allgather,
        Kind::Allgatherv,
        Kind::Alltoall,
        Kind::Alltoallv,
        Kind::Reduce,
        Kind::Allreduce,
        Kind::ReduceScatter,
        Kind::ReduceScatterBlock,
        Kind::Scan,
        Kind::Exscan,
    ];

    fn is_rooted(self) -> bool {
        matches!(self, Kind::Bcast | Kind::Scatter | Kind::Scatterv | Kind::Gather | Kind::Gatherv | Kind::Reduce)
    }

    fn reduces(self) -> bool {
        matches!(
            self,
            Kind::Reduce | Kind::Allreduce | Kind::ReduceScatter | Kind::ReduceScatterBlock | Kind::Scan | Kind::Exscan
        )
    }

    /// Whether a case's `n` is per rank (a block length, or the base of uneven counts) rather
    /// than the length of the whole vector.
    fn per_rank(self) -> bool {
        !matches!(self, Kind::Barrier | Kind::Bcast | Kind::Reduce | Kind::Allreduce | Kind::Scan | Kind::Exscan)
    }

    /// The sizes checked at `np` ranks: empty, one element, a few, and the rendezvous size.
    fn sizes(self, np: usize) -> Vec<usize> {
        match self {
            Kind::Barrier => vec![0],
            _ if self.per_rank() => vec![0, 1, 5, BIG / np],
            _ => vec![0, 1, 5, BIG],
        }
    }
}

/// A reduction of the cases: a commutative sum, or composition of affine maps `x ↦ m·x + c`
/// modulo 2^16 (`m`, forced odd, in the high half of an element and `c` in the low half), which
/// is associative but not commutative.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Red {
    Sum,
    Affine,
}

impl Op<u32> for Red {
    fn combine(&self, input: &[u32], inout: &mut [u32]) {
        for (&a, b) in input.iter().zip(inout.iter_mut()) {
            *b = match self {
                Red::Sum => a.wrapping_add(*b),
                Red::Affine => compose(a, *b),
            };
        }
    }

    fn is_commutative(&self) -> bool {
        *self == Red::Sum
    }
}

/// `f ∘ g` (`g` applied first) for affine maps packed as `m << 16 | c`.
fn compose(f: u32, g: u32) -> u32 {
    let (mf, cf) = ((f >> 16) | 1, f & 0xFFFF);
    let (mg, cg) = ((g >> 16) | 1, g & 0xFFFF);
    let m = mf.wrapping_mul(mg) & 0xFFFF;
    let c = mf.wrapping_mul(cg).wrapping_add(cf) & 0xFFFF;
    (m << 16) | c
}

/// One call: which collective, its size parameter (see [`Kind::per_rank`]), root, reduction
/// and the seed of its data and layouts.
#[derive(Clone, Copy, Debug)]
struct Case {
    kind: Kind,
    n: usize,
    root: usize,
    red: Red,
    seed: u64,
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} n={}", self.kind, self.n)?;
        if self.kind.is_rooted() {
            write!(f, " root={}", self.root)?;
        }
        if self.kind.reduces() {
            write!(f, " op={:?}", self.red)?;
        }
        Ok(())
    }
}

/// Everything one rank passes to one call, compared as a whole between a nonblocking call and
/// its twin.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Bufs {
    send: Vec<u32>,
    recv: Vec<u32>,
    /// Counts and displacements of the `v` variants (the send side of alltoallv).
    counts: Vec<usize>,
    displs: Vec<usize>,
    /// The receive side of alltoallv.
    recv_counts: Vec<usize>,
    recv_displs: Vec<usize>,
}

impl Case {
    fn new(kind: Kind, n: usize, root: usize, red: Red, salt: u64) -> Case {
        let seed = mix(&[kind as u64, n as u64, root as u64, red as u64, salt]);
        Case { kind, n, root, red, seed }
    }

    /// Rank `rank`'s input, `len` elements.
    fn data(&self, rank: usize, len: usize) -> Vec<u32> {
        (0..len).map(|i| val(self.seed as u32, rank, i)).collect()
    }

    /// Uneven count of `rank`'s block (or of the pair `rank`→`to` in alltoallv): zero for about
    /// a quarter, otherwise between `n` and `2n`.
    fn count(&self, rank: usize, to: usize) -> usize {
        let x = val(self.seed as u32 ^ 0x5A5A, rank, to) as usize;
        if self.n == 0 || x.is_multiple_of(4) { 0 } else { self.n + (x >> 2) % (self.n + 1) }
    }

    /// This rank's buffers for the call, receive space filled with [`SENTINEL`].
    fn bufs(&self, np: usize, me: usize) -> Bufs {
        let (n, at_root) = (self.n, me == self.root);
        let data = |len| self.data(me, len);
        let blank = |len| vec![SENTINEL; len];
        let mut b = Bufs {
            send: vec![],
            recv: vec![],
            counts: vec![],
            displs: vec![],
            recv_counts: vec![],
            recv_displs: vec![],
        };
        // Displacements are per rank (only the root's matter for scatterv/gatherv; MPI lets
        // every rank place the blocks of allgatherv and alltoallv as it likes).
        let mut layout_rng = Rng::new(mix(&[self.seed, me as u64]));
        match self.kind {
            Kind::Barrier => {}
            Kind::Bcast => b.recv = if at_root { data(n) } else { blank(n) },
            Kind::Scatter => {
                if at_root {
                    b.send = data(n * np);
                }
                b.recv = blank(n);
            }
            Kind::Gather | Kind::Reduce => {
                b.send = data(n);
                if at_root {
                    b.recv = blank(if self.kind == Kind::Gather { n * np } else { n });
                }
            }
            Kind::Allgather => (b.send, b.recv) = (data(n), blank(n * np)),
            Kind::Alltoall => (b.send, b.recv) = (data(n * np), blank(n * np)),
            Kind::ReduceScatterBlock => (b.send, b.recv) = (data(n * np), blank(n)),
            Kind::Allreduce | Kind::Scan | Kind::Exscan => (b.send, b.recv) = (data(n), blank(n)),
            Kind::Scatterv | Kind::Gatherv | Kind::Allgatherv => {
                b.counts = (0..np).map(|r| self.count(r, 0)).collect();
                let len;
                (b.displs, len) = layout(&b.counts, &mut layout_rng);
                let mine = b.counts[me];
                match self.kind {
                    Kind::Scatterv => {
                        if at_root {
                            b.send = data(len);
                        }
                        b.recv = blank(mine);
                    }
                    Kind::Gatherv => {
                        b.send = data(mine);
                        if at_root {
                            b.recv = blank(len);
                        }
                    }
                    _ => (b.send, b.recv) = (data(mine), blank(len)),
                }
            }
            Kind::ReduceScatter => {
                b.counts = (0..np).map(|r| self.count(r, 0)).collect();
                (b.send, b.recv) = (data(b.counts.iter().sum()), blank(b.counts[me]));
            }
            Kind::Alltoallv => {
                b.counts = (0..np).map(|to| self.count(me, to)).collect();
                b.recv_counts = (0..np).map(|from| self.count(from, me)).collect();
                let (send_len, recv_len);
                (b.displs, send_len) = layout(&b.counts, &mut layout_rng);
                (b.recv_displs, recv_len) = layout(&b.recv_counts, &mut layout_rng);
                (b.send, b.recv) = (data(send_len), blank(recv_len));
            }
        }
        b
    }
}

/// Displacements that place the blocks in a shuffled order with gaps of 0 to 2 elements, and
/// the buffer length.
fn layout(counts: &[usize], rng: &mut Rng) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..counts.len()).collect();
    shuffle(&mut order, rng);
    let mut displs = vec![0; counts.len()];
    let mut at = 0;
    for r in order {
        at += rng.range(0, 2);
        displs[r] = at;
        at += counts[r];
    }
    (displs, at + rng.range(0, 2))
}

fn shuffle<T>(items: &mut [T], rng: &mut Rng) {
    for i in (1..items.len()).rev() {
        items.swap(i, rng.below(i as u64 + 1) as usize);
    }
}

/// Calls the collective of `$case` with the buffers of `$bufs` through `$on` (a `Comm` for the
/// blocking twin, a `Scope` for the nonblocking call); the sixteen method names follow [`Kind`]'s
/// order.
macro_rules! call {
    ($on:expr, $case:expr, $bufs:expr;
     $barrier:ident $bcast:ident $scatter:ident $scatterv:ident $gather:ident $gatherv:ident
     $allgather:ident $allgatherv:ident $alltoall:ident $alltoallv:ident $reduce:ident
     $allreduce:ident $reduce_scatter:ident $reduce_scatter_block:ident $scan:ident $exscan:ident) => {{
        let Bufs { send, recv, counts, displs, recv_counts, recv_displs } = $bufs;
        let (on, root, op) = ($on, $case.root, $case.red);
        match $case.kind {
            Kind::Barrier => on.$barrier(),
            Kind::Bcast => on.$bcast(recv, root),
            Kind::Scatter => on.$scatter(send, recv, root),
            Kind::Scatterv => on.$scatterv(send, counts, displs, recv, root),
            Kind::Gather => on.$gather(send, recv, root),
            Kind::Gatherv => on.$gatherv(send, recv, counts, displs, root),
            Kind::Allgather => on.$allgather(send, recv),
            Kind::Allgatherv => on.$allgatherv(send, recv, counts, displs),
            Kind::Alltoall => on.$alltoall(send, recv),
            Kind::Alltoallv => on.$alltoallv(send, counts, displs, recv, recv_counts, recv_displs),
            Kind::Reduce => on.$reduce(send, recv, op, root),
            Kind::Allreduce => on.$allreduce(send, recv, op),
            Kind::ReduceScatter => on.$reduce_scatter(send, recv, counts, op),
            Kind::ReduceScatterBlock => on.$reduce_scatter_block(send, recv, op),
            Kind::Scan => on.$scan(send, recv, op),
            Kind::Exscan => on.$exscan(send, recv, op),
        }
    }};
}

/// Runs the blocking twin of `case`.
fn blocking(comm: &Comm, case: &Case, bufs: &mut Bufs) -> Result<()> {
    call!(comm, case, bufs;
        barrier bcast scatter scatterv gather gatherv allgather allgatherv alltoall alltoallv
        reduce allreduce reduce_scatter reduce_scatter_block scan exscan)
}

/// Starts the nonblocking collective of `case`.
fn start<'s>(s: &'s Scope<'s, '_>, case: &Case, bufs: &'s mut Bufs) -> Result<Request<'s>> {
    call!(s, case, bufs;
        ibarrier ibcast iscatter iscatterv igather igatherv iallgather iallgatherv ialltoall
        ialltoallv ireduce iallreduce ireduce_scatter ireduce_scatter_block iscan iexscan)
}

/// `case`'s result through the blocking twin on `comm`, which must agree with the sequential
/// [`reference`] (so a mistake shared by both paths shows too).
fn twin_result(comm: &Comm, case: &Case) -> Result<Bufs> {
    let (np, me) = (comm.size(), comm.rank());
    let mut want = case.bufs(np, me);
    blocking(comm, case, &mut want).ctx(|| format!("blocking {case}"))?;
    same(&want, &reference(case, np, me), || format!("blocking {case} on rank {me} against the sequential reference"))?;
    Ok(want)
}

/// `case`'s result on rank `me`, computed sequentially from every rank's buffers.
fn reference(case: &Case, np: usize, me: usize) -> Bufs {
    let all: Vec<Bufs> = (0..np).map(|r| case.bufs(np, r)).collect();
    let (mut out, root) = (all[me].clone(), &all[case.root]);
    let block = |b: &Bufs, r: usize| -> (usize, usize) {
        if b.counts.is_empty() { (r * b.send.len(), b.send.len()) } else { (b.displs[r], b.counts[r]) }
    };
    // Rank order: `x0 ∘ x1 ∘ …` over `ranks`.
    let fold = |ranks: std::ops::Range<usize>| {
        ranks.map(|r| all[r].send.clone()).reduce(|lower, mut x| {
            case.red.combine(&lower, &mut x);
            x
        })
    };
    match case.kind {
        Kind::Barrier => {}
        Kind::Bcast => out.recv.clone_from(&root.recv),
        Kind::Scatter | Kind::Scatterv => {
            let n = out.recv.len();
            let at = if case.kind == Kind::Scatter { me * n } else { root.displs[me] };
            out.recv.copy_from_slice(&root.send[at..at + n]);
        }
        Kind::Gather | Kind::Gatherv | Kind::Allgather | Kind::Allgatherv => {
            if me == case.root || matches!(case.kind, Kind::Allgather | Kind::Allgatherv) {
                for (r, from) in all.iter().enumerate() {
                    let (at, n) = block(&out, r);
                    out.recv[at..at + n].copy_from_slice(&from.send);
                }
            }
        }
        Kind::Alltoall | Kind::Alltoallv => {
            let n = out.recv.len() / np;
            for (r, from) in all.iter().enumerate() {
                let ((at, len), src) = if out.counts.is_empty() {
                    ((r * n, n), me * n)
                } else {
                    ((out.recv_displs[r], out.recv_counts[r]), from.displs[me])
                };
                out.recv[at..at + len].copy_from_slice(&from.send[src..src + len]);
            }
        }
        Kind::Reduce if me != case.root => {}
        Kind::Reduce | Kind::Allreduce => out.recv = fold(0..np).unwrap_or_default(),
        Kind::Scan => out.recv = fold(0..me + 1).unwrap_or_default(),
        Kind::Exscan => out.recv = fold(0..me).unwrap_or(out.recv),
        Kind::ReduceScatter | Kind::ReduceScatterBlock => {
            let n = out.recv.len();
            let at = if out.counts.is_empty() { me * n } else { out.counts[..me].iter().sum() };
            out.recv.copy_from_slice(&fold(0..np).unwrap_or_default()[at..at + n]);
        }
    }
    out
}

/// `Err` naming the case, the rank and the first differing element unless `got == want`.
fn same(got: &Bufs, want: &Bufs, what: impl FnOnce() -> String) -> Result<()> {
    if got == want {
        return Ok(());
    }
    let first = |a: &[u32], b: &[u32]| {
        (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)).map(|i| (i, a.get(i).copied(), b.get(i).copied()))
    };
    let detail = match (first(&got.recv, &want.recv), first(&got.send, &want.send)) {
        (Some((i, g, w)), _) => format!("receive buffer element {i} is {g:x?}, the blocking twin gives {w:x?}"),
        (None, Some((i, g, w))) => format!("send buffer element {i} is {g:x?}, the blocking twin leaves {w:x?}"),
        (None, None) => "counts or displacements were changed".to_string(),
    };
    Err(Error::other(format!("{}: {detail}", what())))
}

// ---------------------------------------------------------------- tunings

/// The algorithm choices the twins are checked under.
#[derive(Clone, Copy, Debug)]
enum Tunings {
    /// The measured defaults (a mix of slot-based and point-to-point algorithms on shm).
    Default,
    /// Every collective forced to the shared-memory slot algorithm (on tcp: the fallbacks).
    Native,
    /// Every collective forced to a point-to-point algorithm, the `k`-th (cyclically) of those
    /// it has, so that the process counts of a sweep cover different ones.
    P2p,
}

impl Tunings {
    fn tuning(self, k: usize) -> Tuning {
        let pick = |c: Collective| match self {
            Tunings::Default => None,
            Tunings::Native => Some(Algorithm::Native),
            Tunings::P2p => {
                let p2p: Vec<Algorithm> = c.algorithms().iter().copied().filter(|&a| a != Algorithm::Native).collect();
                Some(p2p[k % p2p.len()])
            }
        };
        Collective::ALL.into_iter().fold(Tuning::defaults(), |tuning, c| match pick(c) {
            Some(algorithm) => tuning.force(c, algorithm).expect("an algorithm the collective has"),
            None => tuning,
        })
    }
}

/// A tuning whose bcast is a chain `root → root+1 → …` (the k-ary tree of arity 1), so every rank
/// between the root and the last forwards the data.
fn chain_bcast() -> Tuning {
    Tuning::defaults().force(Collective::Bcast, Algorithm::Fat).and_then(|t| t.with_kary_arity(1)).expect("valid")
}

fn flat_bcast() -> Tuning {
    Tuning::defaults().force(Collective::Bcast, Algorithm::Nbft).expect("valid")
}

fn config(dev: DeviceKind, np: usize) -> Config {
    Config::new().device(dev).np(np)
}

/// Runs a job on `np` ranks of `dev` that must succeed.
fn run_job<F>(dev: DeviceKind, np: usize, what: &str, f: F)
where
    F: Fn(Comm) -> Result<()> + Send + Sync + 'static,
{
    run_config(config(dev, np), what, f);
}

/// Runs a job of `config` that must succeed.
fn run_config<F>(config: Config, what: &str, f: F)
where
    F: Fn(Comm) -> Result<()> + Send + Sync + 'static,
{
    let what = format!("{what} (np={}, {:?})", config.get_np(), config.get_device());
    if let Err(e) = job(config, &what, f) {
        panic!("{what}: {e}");
    }
}

// ---------------------------------------------------------------- 1. twins

/// How a single request is completed.
#[derive(Clone, Copy, Debug)]
enum Completion {
    Wait,
    TestLoop,
    Waitall,
    Waitany,
    Testany,
    Testall,
}

const COMPLETIONS: [Completion; 6] = [
    Completion::Wait,
    Completion::TestLoop,
    Completion::Waitall,
    Completion::Waitany,
    Completion::Testany,
    Completion::Testall,
];

fn complete(mut req: Request<'_>, how: Completion) -> Result<()> {
    let one = std::slice::from_mut(&mut req);
    match how {
        Completion::Wait => req.wait().map(drop),
        Completion::Waitall => waitall(one).map(drop),
        Completion::Waitany => match waitany(one)? {
            Some((0, _)) => Ok(()),
            other => Err(Error::other(format!("waitany on one active request gave {other:?}"))),
        },
        Completion::TestLoop => spin(|| Ok(req.test()?.is_some())),
        Completion::Testany => spin(|| Ok(testany(one)?.is_some())),
        Completion::Testall => spin(|| Ok(testall(one)?.is_some())),
    }
}

/// Calls `done` until it says so, yielding the core in between.
fn spin(mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    while !done()? {
        std::thread::yield_now();
    }
    Ok(())
}

/// The cases of the twin sweep at `np` ranks: every collective, size, reduction and the roots
/// 0, the middle rank and the last.
fn twin_cases(np: usize) -> Vec<Case> {
    let mut roots = vec![np - 1, np / 2, 0];
    roots.dedup();
    let mut cases = Vec::new();
    for kind in Kind::ALL {
        let roots: &[usize] = if kind.is_rooted() { &roots } else { &[0] };
        let reds: &[Red] = if kind.reduces() { &[Red::Affine, Red::Sum] } else { &[Red::Sum] };
        for n in kind.sizes(np) {
            for &root in roots {
                for &red in reds {
                    cases.push(Case::new(kind, n, root, red, np as u64));
                }
            }
        }
    }
    cases
}

/// Every nonblocking collective gives its blocking twin's result, under `tunings` (for
/// [`Tunings::P2p`] each of the `P2P_VARIANTS` choices in turn), at the process counts of the
/// device, completed by each completion call in turn.
fn twins(dev: DeviceKind, tunings: Tunings) {
    let nps: &[usize] = match dev {
        DeviceKind::Shm => &[1, 2, 3, 4, 7, 8],
        _ => &[1, 3, 4],
    };
    for &np in nps {
        twins_on(config(dev, np), tunings);
    }
}

/// [`twins`] on the ranks of `config`.
fn twins_on(config: Config, tunings: Tunings) {
    let np = config.get_np();
    let variants = match tunings {
        Tunings::P2p => P2P_VARIANTS,
        _ => 1,
    };
    run_config(config, &format!("twins under {tunings:?} tuning"), move |world| {
        for k in 0..variants {
            let comm = world.with_tuning(tunings.tuning(k));
            for (i, case) in twin_cases(np).iter().enumerate() {
                let how = COMPLETIONS[i % COMPLETIONS.len()];
                let what = || format!("{case} (variant {k}) completed by {how:?} on rank {}", comm.rank());
                let want = twin_result(&comm, case)?;
                let mut got = case.bufs(np, comm.rank());
                comm.scope(|s| complete(start(s, case, &mut got)?, how)).ctx(what)?;
                same(&got, &want, what)?;
            }
        }
        Ok(())
    });
}

/// With a tiny eager limit every message but the smallest goes by rendezvous, and with a large
/// one even the rendezvous-sized cases go eagerly.
fn twins_at_other_eager_limits(dev: DeviceKind) {
    for eager_limit in [16, 1 << 20] {
        for tunings in [Tunings::Default, Tunings::P2p] {
            twins_on(config(dev, 3).eager_limit(eager_limit), tunings);
        }
    }
}

fn twins_default_tuning(dev: DeviceKind) {
    twins(dev, Tunings::Default);
}

fn twins_native(dev: DeviceKind) {
    twins(dev, Tunings::Native);
}

fn twins_point_to_point(dev: DeviceKind) {
    twins(dev, Tunings::P2p);
}

#[test]
fn the_affine_op_is_associative_and_not_commutative() {
    let (f, g, h) = (0x0003_0007, 0x0010_0101, 0xFFFE_1234);
    assert_eq!(compose(compose(f, g), h), compose(f, compose(g, h)));
    assert_ne!(compose(f, g), compose(g, f));
}

#[test]
fn the_point_to_point_variants_cover_every_algorithm() {
    for c in Collective::ALL {
        let p2p = c.algorithms().iter().filter(|&&a| a != Algorithm::Native).count();
        assert!(p2p <= P2P_VARIANTS, "{c} has {p2p} point-to-point algorithms");
    }
}

// ---------------------------------------------------------------- 2. random interleavings

/// A random case at `np` ranks: mostly small, sometimes empty, sometimes past the eager limit.
fn random_case(rng: &mut Rng, np: usize, allow_big: bool) -> Case {
    let kind = *rng.pick(&Kind::ALL);
    let per_rank = if kind.per_rank() { np } else { 1 };
    let n = match rng.below(10) {
        0 => 0,
        9 if allow_big => rng.range(3000, 20_000) / per_rank,
        _ => rng.range(1, 40),
    };
    let red = if rng.chance(50) { Red::Affine } else { Red::Sum };
    Case::new(kind, n, rng.below(np as u64) as usize, red, rng.next_u64())
}

/// What rank `from` sends as its `j`-th message of a round.
fn message(seed: u64, from: usize, j: usize, len: usize) -> Vec<u32> {
    (0..len).map(|i| val(seed as u32, from * 16 + j, i)).collect()
}

/// Something started in a random round, for starting in a random order.
enum Start<'a> {
    /// Collective on communicator 0 (the world) or 1 (the second one).
    Coll(usize, &'a Case, &'a mut Bufs),
    Send(usize, &'a [u32]),
    Recv(usize, &'a mut [u32]),
}

/// Starts `comm_ops[c]` on communicator `c` (in that order) and the messages, interleaving the
/// three streams at random (differently on every rank), with tests in between; then completes
/// everything in a random order by random completion calls.
fn run_interleaved<'a>(
    comms: [&Comm; 2],
    comm_ops: [Vec<Start<'a>>; 2],
    messages: Vec<Start<'a>>,
    rng: &mut Rng,
) -> Result<()> {
    let (me, np) = (comms[0].rank(), comms[0].size());
    let (right, left) = ((me + 1) % np, (me + np - 1) % np);
    let mut streams = comm_ops.map(|ops| ops.into_iter());
    let mut messages = messages.into_iter();
    comms[0].scope(|s0| {
        comms[1].scope(|s1| {
            let mut reqs: Vec<Request<'_>> = Vec::new();
            let mut labels: Vec<String> = Vec::new();
            loop {
                let choice = rng.below(3) as usize;
                let next = if choice < 2 { streams[choice].next() } else { messages.next() };
                let Some(item) =
                    next.or_else(|| streams[0].next()).or_else(|| streams[1].next()).or_else(|| messages.next())
                else {
                    break;
                };
                let (req, label) = match item {
                    Start::Coll(0, case, bufs) => (start(s0, case, bufs), format!("{case} on world")),
                    Start::Coll(_, case, bufs) => (start(s1, case, bufs), format!("{case} on comm 1")),
                    Start::Send(j, buf) => (s0.isend(buf, right, P2P_TAG + j as i32), format!("isend {j}")),
                    Start::Recv(j, buf) => {
                        // Every message to this rank comes from `left`: half the receives name it.
                        let from = if j % 2 == 0 { Source::from(left) } else { ANY_SOURCE };
                        (s0.irecv(buf, from, P2P_TAG + j as i32), format!("irecv {j}"))
                    }
                };
                reqs.push(req.ctx(|| format!("starting {label}"))?);
                labels.push(label);
                if rng.chance(30)
                    && let Some((i, _)) = testany(&mut reqs)?
                {
                    drop(reqs.swap_remove(i));
                    labels.swap_remove(i);
                }
            }
            complete_randomly(reqs, labels, rng)
        })
    })
}

/// Completes every request, one way or another, in an order drawn from `rng`; a few sends and
/// collectives are dropped unwaited (the scopes' ends finish them).
fn complete_randomly(mut reqs: Vec<Request<'_>>, mut labels: Vec<String>, rng: &mut Rng) -> Result<()> {
    while !reqs.is_empty() {
        let i = rng.below(reqs.len() as u64) as usize;
        let done = match rng.below(14) {
            0..=3 => {
                let label = labels.swap_remove(i);
                reqs.swap_remove(i).wait().ctx(|| format!("wait for {label}"))?;
                continue;
            }
            4 | 5 => {
                spin(|| Ok(reqs[i].test().ctx(|| format!("test of {}", labels[i]))?.is_some()))?;
                Some(i)
            }
            6..=8 => waitany(&mut reqs).ctx(|| format!("waitany over {labels:?}"))?.map(|(j, _)| j),
            9 | 10 => {
                let mut found = None;
                spin(|| {
                    found = testany(&mut reqs).ctx(|| format!("testany over {labels:?}"))?.map(|(j, _)| j);
                    Ok(found.is_some())
                })?;
                found
            }
            // Dropped unwaited; not a receive, which the scope's end would cancel.
            11 if !labels[i].starts_with("irecv") => Some(i),
            11 => {
                spin(|| Ok(testall(&mut reqs[i..=i]).ctx(|| format!("testall of {}", labels[i]))?.is_some()))?;
                Some(i)
            }
            12 => {
                spin(|| Ok(testall(&mut reqs).ctx(|| format!("testall over {labels:?}"))?.is_some()))?;
                reqs.clear();
                labels.clear();
                continue;
            }
            _ => {
                waitall(&mut reqs).ctx(|| format!("waitall over {labels:?}"))?;
                reqs.clear();
                labels.clear();
                continue;
            }
        };
        let j = done.ok_or_else(|| Error::other(format!("no request of {labels:?} was active")))?;
        drop(reqs.swap_remove(j));
        labels.swap_remove(j);
    }
    Ok(())
}

/// The second communicator of the random rounds.
#[derive(Clone, Copy, Debug)]
enum Second {
    /// A dup of the world with every collective forced to a point-to-point algorithm.
    Dup,
    /// The world split into even and odd ranks (in reverse order), default tuning.
    Split,
}

/// Rounds of up to `max_ops` outstanding collectives of random kinds on the world (default
/// tuning) and a `second` communicator, plus up to three messages around a ring, all completed
/// in a random order; every result is checked against the blocking twins run afterwards in
/// issue order. The ranks of a communicator draw its collectives from the same seed, and each
/// rank draws its start interleaving and completion order from its own.
fn random_rounds(config: Config, rounds: u64, max_ops: usize, allow_big: bool, second: Second) {
    let np = config.get_np();
    run_config(config, &format!("random rounds of up to {max_ops} collectives, {second:?}"), move |world| {
        let me = world.rank();
        let left = (me + np - 1) % np;
        let (other, group) = match second {
            Second::Dup => (world.dup()?.with_tuning(Tunings::P2p.tuning(np)), 0),
            Second::Split => {
                let color = (me % 2) as u32;
                let split = world.split(Some(color), -(me as i32))?;
                (split.ok_or_else(|| Error::other("split gave no communicator"))?, u64::from(color) + 1)
            }
        };
        let comms = [&world, &other];
        for round in 0..rounds {
            let seed = mix(&[round, np as u64, max_ops as u64]);
            let mut shared = Rng::new(seed);
            let mut in_group = Rng::new(mix(&[seed, group]));
            let mut mine = Rng::new(mix(&[seed, me as u64, 1]));
            let ops: Vec<(usize, Case)> = (0..shared.range(1, max_ops))
                .map(|_| match shared.below(2) as usize {
                    0 => (0, random_case(&mut shared, np, allow_big)),
                    _ => (1, random_case(&mut in_group, other.size(), allow_big)),
                })
                .collect();
            let lens: Vec<usize> = (0..shared.range(0, 3))
                .map(|_| if shared.chance(20) && allow_big { shared.range(3000, 20_000) } else { shared.range(0, 30) })
                .collect();
            let mut bufs: Vec<Bufs> =
                ops.iter().map(|(c, case)| case.bufs(comms[*c].size(), comms[*c].rank())).collect();
            let out: Vec<Vec<u32>> = lens.iter().enumerate().map(|(j, &len)| message(seed, me, j, len)).collect();
            let mut inbox: Vec<Vec<u32>> = lens.iter().map(|&len| vec![SENTINEL; len]).collect();

            let mut comm_ops: [Vec<Start<'_>>; 2] = [Vec::new(), Vec::new()];
            for ((c, case), b) in ops.iter().zip(bufs.iter_mut()) {
                comm_ops[*c].push(Start::Coll(*c, case, b));
            }
            let mut messages: Vec<Start<'_>> = out.iter().enumerate().map(|(j, m)| Start::Send(j, m)).collect();
            messages.extend(inbox.iter_mut().enumerate().map(|(j, m)| Start::Recv(j, m)));
            shuffle(&mut messages, &mut mine);
            let plan = || {
                format!(
                    "round {round}: {:?}",
                    ops.iter().map(|(c, case)| format!("{case} on comm {c}")).collect::<Vec<_>>()
                )
            };
            run_interleaved(comms, comm_ops, messages, &mut mine).ctx(plan)?;

            for ((c, case), got) in ops.iter().zip(&bufs) {
                let want = twin_result(comms[*c], case)?;
                same(got, &want, || format!("{} on rank {me}: {case} on comm {c}", plan()))?;
            }
            for (j, got) in inbox.iter().enumerate() {
                if *got != message(seed, left, j, got.len()) {
                    return Err(Error::other(format!("{}: message {j} from rank {left} arrived wrong", plan())));
                }
            }
        }
        Ok(())
    });
}

fn random_interleavings(dev: DeviceKind) {
    let nps: &[usize] = match dev {
        DeviceKind::Shm => &[1, 2, 3, 4, 7],
        _ => &[2, 4],
    };
    let rounds = match dev {
        DeviceKind::Shm => 30,
        _ => 12,
    };
    for &np in nps {
        random_rounds(config(dev, np), rounds, 6, true, Second::Dup);
    }
}

/// Beyond the eight lanes of the shared-memory slots, on the world and a split of it.
fn random_interleavings_with_a_split(dev: DeviceKind) {
    let nps: &[usize] = match dev {
        DeviceKind::Shm => &[2, 5, 6],
        _ => &[4],
    };
    for &np in nps {
        random_rounds(config(dev, np), 20, 12, true, Second::Split);
    }
}

fn random_interleavings_on_16_ranks(dev: DeviceKind) {
    random_rounds(config(dev, 16), 6, 4, false, Second::Dup);
}

/// More collectives outstanding at once than the shared-memory device has slots (a bounded
/// number), under the slot and the default tunings, completed newest first: the ones waiting for
/// a slot must start as earlier ones finish, and the earliest must progress while the newest are
/// waited for.
fn many_outstanding_newest_first(dev: DeviceKind) {
    const OPS: usize = 80;
    let nps: &[usize] = match dev {
        DeviceKind::Shm => &[2, 4, 8],
        _ => &[3],
    };
    for &np in nps {
        run_job(dev, np, &format!("{OPS} outstanding collectives"), move |world| {
            let me = world.rank();
            for tunings in [Tunings::Native, Tunings::Default] {
                let comm = world.with_tuning(tunings.tuning(0));
                let mut shared = Rng::new(mix(&[np as u64, OPS as u64]));
                let cases: Vec<Case> = (0..OPS).map(|_| random_case(&mut shared, np, false)).collect();
                let mut bufs: Vec<Bufs> = cases.iter().map(|case| case.bufs(np, me)).collect();
                comm.scope(|s| {
                    let mut reqs = Vec::new();
                    for (case, b) in cases.iter().zip(bufs.iter_mut()) {
                        reqs.push(start(s, case, b).ctx(|| format!("starting {case}"))?);
                    }
                    while let Some(req) = reqs.pop() {
                        req.wait().ctx(|| format!("waiting for collective {}", reqs.len()))?;
                    }
                    Ok(())
                })
                .ctx(|| format!("{tunings:?} tuning"))?;
                for (case, got) in cases.iter().zip(&bufs) {
                    same(got, &twin_result(&comm, case)?, || format!("{case} under {tunings:?} on rank {me}"))?;
                }
            }
            Ok(())
        });
    }
}

/// Blocking collectives issued while nonblocking ones are outstanding, on the same communicator
/// (they match in issue order, as in MPI) and on a dup: the blocking calls must progress the
/// outstanding operations they depend on, and every result must be right.
fn blocking_calls_among_outstanding_ones(dev: DeviceKind) {
    let nps: &[usize] = match dev {
        DeviceKind::Shm => &[2, 3, 5],
        _ => &[3],
    };
    for &np in nps {
        run_job(dev, np, "blocking collectives among nonblocking ones", move |world| {
            let me = world.rank();
            for (k, tunings) in [Tunings::Default, Tunings::Native, Tunings::P2p].into_iter().enumerate() {
                let comm = world.with_tuning(tunings.tuning(k));
                let dup = comm.dup()?;
                for round in 0..10u64 {
                    let mut shared = Rng::new(mix(&[np as u64, k as u64, round, 77]));
                    let outstanding: Vec<Case> =
                        (0..shared.range(1, 4)).map(|_| random_case(&mut shared, np, true)).collect();
                    let between: Vec<(usize, Case)> = (0..shared.range(1, 3))
                        .map(|_| (shared.below(2) as usize, random_case(&mut shared, np, true)))
                        .collect();
                    let mut bufs: Vec<Bufs> = outstanding.iter().map(|case| case.bufs(np, me)).collect();
                    let mut between_got: Vec<Bufs> = between.iter().map(|(_, case)| case.bufs(np, me)).collect();
                    let what = || format!("{tunings:?} round {round}: {outstanding:?} then blocking {between:?}");
                    comm.scope(|s| {
                        let mut reqs = Vec::new();
                        for (case, b) in outstanding.iter().zip(bufs.iter_mut()) {
                            reqs.push(start(s, case, b)?);
                        }
                        for ((c, case), b) in between.iter().zip(between_got.iter_mut()) {
                            blocking(if *c == 0 { &comm } else { &dup }, case, b)?;
                        }
                        waitall(&mut reqs).map(drop)
                    })
                    .ctx(what)?;
                    for (case, got) in outstanding.iter().zip(&bufs) {
                        same(got, &twin_result(&comm, case)?, || {
                            format!("{}: nonblocking {case} on rank {me}", what())
                        })?;
                    }
                    for ((_, case), got) in between.iter().zip(&between_got) {
                        same(got, &reference(case, np, me), || format!("{}: blocking {case} on rank {me}", what()))?;
                    }
                }
            }
            Ok(())
        });
    }
}

/// Ranks arrive at native (slot) broadcasts in every order: each rank pauses for a random while
/// before starting and before waiting, so the root and the receivers take turns being first
/// (who copies then differs), blocking and nonblocking, and with several outstanding at once.
fn bcast_arrival_orders(dev: DeviceKind) {
    let nps: &[usize] = match dev {
        DeviceKind::Shm => &[2, 3, 4, 8],
        _ => &[3],
    };
    for &np in nps {
        run_job(dev, np, "bcasts in random arrival orders", move |world| {
            let me = world.rank();
            let comm = world.with_tuning(Tunings::Native.tuning(0));
            let mut mine = Rng::new(mix(&[np as u64, me as u64, 5]));
            let pause = |rng: &mut Rng| match rng.below(10) {
                0..=4 => {}
                5..=8 => (0..rng.range(1, 50)).for_each(|_| std::thread::yield_now()),
                _ => std::thread::sleep(Duration::from_micros(rng.range(50, 2000) as u64)),
            };
            for round in 0..60u64 {
                let mut shared = Rng::new(mix(&[np as u64, round, 6]));
                let cases: Vec<Case> = (0..shared.range(1, 3))
                    .map(|_| {
                        let n = *shared.pick(&[1, 100, 2048, 2049, 8192, BIG]);
                        Case::new(Kind::Bcast, n, shared.below(np as u64) as usize, Red::Sum, round)
                    })
                    .collect();
                let nonblocking = shared.chance(70);
                let mut bufs: Vec<Bufs> = cases.iter().map(|case| case.bufs(np, me)).collect();
                pause(&mut mine);
                if nonblocking {
                    comm.scope(|s| {
                        let mut reqs = Vec::new();
                        for (case, b) in cases.iter().zip(bufs.iter_mut()) {
                            reqs.push(start(s, case, b)?);
                            pause(&mut mine);
                        }
                        complete_randomly(reqs, vec![String::from("ibcast"); cases.len()], &mut mine)
                    })?;
                } else {
                    for (case, b) in cases.iter().zip(bufs.iter_mut()) {
                        blocking(&comm, case, b)?;
                        pause(&mut mine);
                    }
                }
                for (case, got) in cases.iter().zip(&bufs) {
                    let kind = if nonblocking { "ibcast" } else { "bcast" };
                    same(got, &reference(case, np, me), || format!("round {round}: {kind} {case} on rank {me}"))?;
                }
            }
            Ok(())
        });
    }
}

/// The random rounds and the point-to-point twins with the tcp device's progress thread on,
/// which then moves data concurrently with the ranks' own calls.
#[test]
fn tcp_with_the_progress_thread() {
    let with_thread = |np| config(DeviceKind::Tcp, np).progress_thread(true);
    for np in [2, 4] {
        random_rounds(with_thread(np), 12, 6, true, Second::Dup);
    }
    random_rounds(with_thread(5), 10, 12, true, Second::Split);
    twins_on(with_thread(3), Tunings::P2p);
}

// ---------------------------------------------------------------- 3. forgotten requests

/// The collectives whose requests are leaked or dropped, rendezvous sizes included.
fn forgotten_cases(np: usize) -> Vec<Case> {
    let last = np - 1;
    vec![
        Case::new(Kind::Bcast, BIG, last, Red::Sum, 1),
        Case::new(Kind::Allreduce, 33, 0, Red::Affine, 2),
        Case::new(Kind::Alltoall, BIG / np, 0, Red::Sum, 3),
        Case::new(Kind::Gatherv, 2000, np / 2, Red::Sum, 4),
        Case::new(Kind::Barrier, 0, 0, Red::Sum, 5),
        Case::new(Kind::Scan, 4000, 0, Red::Affine, 6),
        Case::new(Kind::Reduce, 17, last, Red::Affine, 7),
        Case::new(Kind::Allgatherv, 3000, 0, Red::Sum, 8),
    ]
}

/// Requests leaked with `mem::forget` or dropped unwaited, on fast and slow ranks, under the
/// default and the point-to-point tunings: the scope's end finishes them, the buffers then hold
/// the blocking twins' results, and later collectives still match.
fn forgotten_requests(dev: DeviceKind) {
    let nps: &[usize] = match dev {
        DeviceKind::Shm => &[1, 3, 4],
        _ => &[3],
    };
    for &np in nps {
        run_job(dev, np, "forgotten requests", move |world| {
            let me = world.rank();
            for (t, tunings) in [Tunings::Default, Tunings::P2p].into_iter().enumerate() {
                let comm = world.with_tuning(tunings.tuning(t));
                for slow in [None, Some(np - 1), Some(0)] {
                    let cases = forgotten_cases(np);
                    let what = || format!("{tunings:?} tuning, slow rank {slow:?}");
                    let mut bufs: Vec<Bufs> = cases.iter().map(|case| case.bufs(np, me)).collect();
                    comm.scope(|s| {
                        if slow == Some(me) {
                            std::thread::sleep(Duration::from_millis(30));
                        }
                        for (i, (case, b)) in cases.iter().zip(bufs.iter_mut()).enumerate() {
                            let req = start(s, case, b).ctx(|| format!("starting {case}"))?;
                            if i % 2 == 0 { mem::forget(req) } else { drop(req) }
                        }
                        Ok(())
                    })
                    .ctx(what)?;
                    for (case, got) in cases.iter().zip(&bufs) {
                        let want = twin_result(&comm, case)?;
                        same(got, &want, || format!("{}: forgotten {case} on rank {me}", what()))?;
                    }
                    // The communicator is still in step, nonblocking and blocking.
                    let (mine, mut sum) = ([me as u32; 3], [0u32; 3]);
                    comm.scope(|s| s.iallreduce(&mine, &mut sum, Red::Sum)?.wait()).ctx(what)?;
                    let total = (np * (np - 1) / 2) as u32;
                    if sum != [total; 3] {
                        return Err(Error::other(format!("{}: iallreduce after forgetting gave {sum:?}", what())));
                    }
                    comm.barrier().ctx(what)?;
                }
            }
            Ok(())
        });
    }
}

/// A forgotten collective is still matched in issue order by the ones started after it in the
/// same scope, which are waited for normally.
fn forgotten_then_waited(dev: DeviceKind) {
    run_job(dev, 3, "a forgotten collective followed by waited ones", |world| {
        let me = world.rank();
        let cases = forgotten_cases(3);
        let mut bufs: Vec<Bufs> = cases.iter().map(|case| case.bufs(3, me)).collect();
        world.scope(|s| {
            let mut reqs = Vec::new();
            for (i, (case, b)) in cases.iter().zip(bufs.iter_mut()).enumerate() {
                let req = start(s, case, b)?;
                if i < 2 { mem::forget(req) } else { reqs.push(req) }
            }
            waitall(&mut reqs).map(drop)
        })?;
        for (case, got) in cases.iter().zip(&bufs) {
            same(got, &twin_result(&world, case)?, || format!("{case} on rank {me}"))?;
        }
        Ok(())
    });
}

/// A panic inside a scope with collectives outstanding abandons them (the scope's end drops
/// their remaining stages instead of running them, see `Engine::finish_scope`). When every rank
/// panics and catches it, nothing hangs; when one rank's panic ends it, the job fails naming
/// that rank while the others wait in `waitall`, instead of hanging. (Whether an abandoned
/// operation writes a buffer after its scope is beyond what this test can see.)
fn panic_with_collectives_outstanding(dev: DeviceKind) {
    let outstanding = |world: &Comm, panics: bool| -> Result<()> {
        let (me, np) = (world.rank(), world.size());
        let cases = forgotten_cases(np);
        let mut bufs: Vec<Bufs> = cases.iter().map(|case| case.bufs(np, me)).collect();
        world.scope(|s| {
            let mut reqs = Vec::new();
            for (case, b) in cases.iter().zip(bufs.iter_mut()) {
                reqs.push(start(s, case, b)?);
            }
            if panics {
                panic!("deliberate panic on rank {me} with {} collectives outstanding", reqs.len());
            }
            waitall(&mut reqs).map(drop)
        })
    };
    run_job(dev, 3, "every rank panics with collectives outstanding", move |world| {
        // A rank may also see a peer's abandonment (or exit) first, as an `Err` from a start.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| outstanding(&world, true))) {
            Err(_) | Ok(Err(_)) => Ok(()),
            Ok(Ok(())) => Err(Error::other("the scope's panic was lost")),
        }
    });
    let what = format!("rank 1 panics with collectives outstanding ({dev:?})");
    // The job's error names rank 1: its panic, or a peer's error about rank 1's abandonment.
    match job(config(dev, 3), &what, move |world| outstanding(&world, world.rank() == 1)) {
        Err(Error::RankFailed { rank: 1, cause }) if cause.contains("deliberate panic") => {}
        Err(Error::RankFailed { cause, .. }) if cause.contains("rank 1 abandoned") => {}
        other => panic!("{what}: expected rank 1 to fail the job, got {other:?}"),
    }
}

/// A wildcard receive (any source, any tag) posted before collectives start on the same
/// communicator gets the user's message, never a collective's traffic.
fn wildcard_receive_among_collectives(dev: DeviceKind) {
    let nps: &[usize] = match dev {
        DeviceKind::Shm => &[2, 4],
        _ => &[3],
    };
    for &np in nps {
        run_job(dev, np, "a wildcard receive among collectives", move |world| {
            let me = world.rank();
            let (right, left) = ((me + 1) % np, (me + np - 1) % np);
            for (k, tunings) in [Tunings::Default, Tunings::P2p].into_iter().enumerate() {
                let comm = world.with_tuning(tunings.tuning(k));
                let cases = forgotten_cases(np);
                let mut bufs: Vec<Bufs> = cases.iter().map(|case| case.bufs(np, me)).collect();
                let (note, mut inbox) = ([me as u32, 1, 2], [SENTINEL; 3]);
                let status = comm.scope(|s| {
                    let wildcard = s.irecv(&mut inbox, ANY_SOURCE, ANY_TAG)?;
                    let mut reqs = Vec::new();
                    for (case, b) in cases.iter().zip(bufs.iter_mut()) {
                        reqs.push(start(s, case, b)?);
                    }
                    waitall(&mut reqs)?;
                    s.isend(&note, right, 42)?.wait()?;
                    wildcard.wait()
                })?;
                if (status.source, status.tag, inbox) != (left, 42, [left as u32, 1, 2]) {
                    return Err(Error::other(format!(
                        "{tunings:?}: rank {me}'s wildcard receive got {inbox:x?} from {} with tag {}",
                        status.source, status.tag
                    )));
                }
                for (case, got) in cases.iter().zip(&bufs) {
                    same(got, &twin_result(&comm, case)?, || format!("{case} under {tunings:?} on rank {me}"))?;
                }
            }
            Ok(())
        });
    }
}

// ---------------------------------------------------------------- 4. errors and request states

/// Starts one collective with `start` in a scope of its own and expects `InvalidArgument`
/// mentioning `want` at the call. A collective that started instead is leaked to the scope
/// (which then finishes or hangs it) and reported.
fn rejects<'e>(
    comm: &'e Comm,
    want: &str,
    what: &str,
    start: impl for<'s> FnOnce(&'s Scope<'s, 'e>) -> Result<Request<'s>>,
) -> Result<()> {
    comm.scope(|s| match start(s) {
        Err(Error::InvalidArgument(m)) if m.contains(want) => Ok(()),
        Err(e) => Err(Error::other(format!("{what}: expected InvalidArgument mentioning {want:?}, got {e}"))),
        Ok(req) => {
            mem::forget(req);
            Err(Error::other(format!("{what}: started instead of failing ({want})")))
        }
    })
}

/// Arguments every rank can see are wrong give `Err` at the call (nothing starts, so the
/// communicator stays in step and the next collectives match).
fn bad_arguments_fail_at_the_call(dev: DeviceKind) {
    const NP: usize = 3;
    run_job(dev, NP, "bad arguments", |world| {
        let me = world.rank();
        let (mut two, mut six, mut seven) = ([0u32; 2], [0u32; 6], [0u32; 7]);
        let (c, twos, displs) = (&world, [2; NP], [0, 2, 4]);
        for root in [NP, NP + 5, usize::MAX] {
            let bad = format!("root {root} out of range");
            rejects(c, &bad, "ibcast", |s| s.ibcast(&mut two, root))?;
            rejects(c, &bad, "iscatter", |s| s.iscatter(&[1; 6], &mut two, root))?;
            rejects(c, &bad, "iscatterv", |s| s.iscatterv(&[1; 6], &twos, &displs, &mut two, root))?;
            rejects(c, &bad, "igather", |s| s.igather(&[1; 2], &mut six, root))?;
            rejects(c, &bad, "igatherv", |s| s.igatherv(&[1; 2], &mut six, &twos, &displs, root))?;
            rejects(c, &bad, "ireduce", |s| s.ireduce(&[1; 2], &mut two, Red::Sum, root))?;
        }
        rejects(c, "receive buffer has 2 elements", "iallreduce", |s| s.iallreduce(&[1; 4], &mut two, Red::Sum))?;
        rejects(c, "receive buffer has 7 elements", "iallgather", |s| s.iallgather(&[1; 2], &mut seven))?;
        rejects(c, "7 elements", "ialltoall", |s| s.ialltoall(&[1; 7], &mut seven))?;
        rejects(c, "receive buffer has 2 elements", "ialltoall", |s| s.ialltoall(&[1; 6], &mut two))?;
        rejects(c, "2 counts", "iallgatherv", |s| s.iallgatherv(&[1; 2], &mut six, &[2; 2], &[0, 2]))?;
        rejects(c, "exceeds", "iallgatherv", |s| s.iallgatherv(&[1; 2], &mut six, &twos, &[0, 2, 5]))?;
        rejects(c, "overlap", "ialltoallv", |s| s.ialltoallv(&[1; 6], &twos, &displs, &mut six, &twos, &[0, 1, 4]))?;
        rejects(c, "counts", "ireduce_scatter", |s| s.ireduce_scatter(&[1; 6], &mut two, &[2; 2], Red::Sum))?;
        rejects(c, "send buffer has 4 elements", "ireduce_scatter", |s| {
            s.ireduce_scatter(&[1; 4], &mut two, &twos, Red::Sum)
        })?;
        rejects(c, "send buffer has 7 elements", "ireduce_scatter_block", |s| {
            s.ireduce_scatter_block(&[1; 7], &mut two, Red::Sum)
        })?;
        rejects(c, "receive buffer has 7 elements", "iscan", |s| s.iscan(&[1; 6], &mut seven, Red::Affine))?;
        rejects(c, "receive buffer has 2 elements", "iexscan", |s| s.iexscan(&[1; 6], &mut two, Red::Affine))?;
        // Nothing started: the next collectives, nonblocking and blocking, match across ranks.
        let mut data = [me as u32 + 10; 5];
        world.scope(|s| s.ibcast(&mut data, NP - 1)?.wait())?;
        if data != [NP as u32 + 9; 5] {
            return Err(Error::other(format!("ibcast after the errors gave {data:?}")));
        }
        world.barrier()?;
        // After finalize every nonblocking collective fails at once.
        world.finalize()?;
        let mut sum = [0u32; 4];
        world.scope(|s| {
            assert!(matches!(s.ibarrier(), Err(Error::Finalized(_))), "ibarrier after finalize");
            let after = s.iallreduce(&[1; 4], &mut sum, Red::Sum);
            assert!(matches!(after, Err(Error::Finalized(_))), "iallreduce after finalize");
        });
        Ok(())
    });
}

/// With one rank the root is everyone, so the root-only checks are local to every rank.
fn root_only_errors_on_a_single_rank(dev: DeviceKind) {
    run_job(dev, 1, "root-only argument errors", |world| {
        let (mut two, mut three, mut four) = ([0u32; 2], [0u32; 3], [0u32; 4]);
        let c = &world;
        rejects(c, "send buffer has 3 elements", "iscatter", |s| s.iscatter(&[0; 3], &mut two, 0))?;
        rejects(c, "receive buffer has 3 elements", "igather", |s| s.igather(&[0; 2], &mut three, 0))?;
        rejects(c, "receive buffer has 3 elements", "ireduce", |s| s.ireduce(&[0; 2], &mut three, Red::Sum, 0))?;
        rejects(c, "exceeds", "iscatterv", |s| s.iscatterv(&[0; 4], &[3], &[2], &mut three, 0))?;
        rejects(c, "receive buffer", "iscatterv", |s| s.iscatterv(&[0; 4], &[3], &[0], &mut two, 0))?;
        rejects(c, "send buffer", "igatherv", |s| s.igatherv(&[0; 2], &mut four, &[3], &[0], 0))
    });
}

/// Completed collective requests behave like point-to-point ones: inactive afterwards, `test`
/// is then an error, `wait`/`waitall` give empty statuses and `waitany`/`testany` find nothing.
fn request_states_after_completion(dev: DeviceKind) {
    run_job(dev, 3, "request states", |world| {
        let me = world.rank();
        let mut data = [me as u32; 4];
        let mut total = [0u32; 4];
        world.scope(|s| {
            let mut barrier = s.ibarrier()?;
            spin(|| Ok(barrier.test()?.is_some()))?;
            assert!(!barrier.is_active(), "a tested-complete ibarrier is inactive");
            assert!(matches!(barrier.test(), Err(Error::InvalidArgument(_))), "test on a completed ibarrier");
            let mut reqs = vec![barrier, s.ibcast(&mut data, 1)?, s.iallreduce(&[1u32; 4], &mut total, Red::Sum)?];
            waitall(&mut reqs)?;
            assert!(reqs.iter().all(|r| !r.is_active()), "waitall leaves every request inactive");
            assert!(waitany(&mut reqs)?.is_none(), "waitany over completed requests");
            assert!(testany(&mut reqs)?.is_none(), "testany over completed requests");
            assert_eq!(waitall(&mut reqs)?.len(), 3, "waitall over completed requests");
            reqs.pop().expect("three requests").wait()?;
            Ok::<_, Error>(())
        })?;
        assert_eq!((data, total), ([1; 4], [3; 4]));
        Ok(())
    });
}

/// Cancelling an outstanding collective is an error (as in MPI) and leaves it running: rank 1
/// cancels its ibarrier before rank 0 (which waits for rank 1's go-ahead) has even started its
/// own, so it cannot have completed yet.
fn collective_requests_cannot_be_cancelled(dev: DeviceKind) {
    run_job(dev, 3, "cancelling a collective", |world| {
        let me = world.rank();
        world.scope(|s| {
            if me == 0 {
                world.recv(&mut [0u8], 1, 9)?;
            }
            let barrier = s.ibarrier()?;
            if me == 1 {
                let cancelled = barrier.cancel();
                if !matches!(cancelled, Err(Error::InvalidArgument(_))) {
                    return Err(Error::other(format!("cancel of an outstanding ibarrier gave {cancelled:?}")));
                }
                world.send(&[1u8], 0, 9)?;
            }
            let status = barrier.wait()?;
            if status.cancelled {
                return Err(Error::other("the ibarrier's status says cancelled"));
            }
            Ok(())
        })
    });
}

// ---------------------------------------------------------------- 5. progress

/// The blocking call rank 1 waits in while rank 2 waits for the collective.
#[derive(Clone, Copy, Debug)]
enum Blocker {
    /// `recv` from rank 2, which sends once its collective is done.
    Recv,
    /// `probe` for that message (then `recv`).
    Probe,
    /// A blocking barrier on a dup, which the other ranks enter once their collective is done.
    DupBarrier,
}

/// MPI's progress rule: rank 1, an interior rank of `case`'s algorithm under `tuning`, is
/// blocked in a call that only returns after rank 2's collective completes, which needs rank 1's
/// part: every `blocker` must progress it.
fn progress_while_blocked(dev: DeviceKind, tuning: Tuning, case: Case) {
    for blocker in [Blocker::Recv, Blocker::Probe, Blocker::DupBarrier] {
        let tuning = tuning.clone();
        run_job(dev, 3, &format!("{case} while rank 1 is blocked in {blocker:?}"), move |world| {
            let comm = world.with_tuning(tuning.clone());
            let dup = comm.dup()?;
            let me = comm.rank();
            let mut got = case.bufs(3, me);
            comm.scope(|s| {
                let req = start(s, &case, &mut got)?;
                match (me, blocker) {
                    (1, Blocker::Recv) => drop(comm.recv(&mut [0u32], 2, 5)?),
                    (1, Blocker::Probe) => {
                        comm.probe(2, 5)?;
                        comm.recv(&mut [0u32], 2, 5)?;
                    }
                    (1, Blocker::DupBarrier) => dup.barrier()?,
                    _ => {}
                }
                req.wait()?;
                match (me, blocker) {
                    (1, _) => {}
                    (_, Blocker::DupBarrier) => dup.barrier()?,
                    (2, _) => comm.send(&[7u32], 1, 5)?,
                    _ => {}
                }
                Ok::<_, Error>(())
            })?;
            same(&got, &twin_result(&comm, &case)?, || format!("{case} on rank {me}"))
        });
    }
}

/// A bcast from rank 0 along the chain 0 → 1 → 2 (and under the default tuning).
fn progress_of_a_forwarded_bcast(dev: DeviceKind) {
    for n in [5, BIG] {
        for tuning in [chain_bcast(), Tuning::defaults()] {
            progress_while_blocked(dev, tuning, Case::new(Kind::Bcast, n, 0, Red::Sum, 9));
        }
    }
}

/// A ring allreduce: every rank's data passes through rank 1.
fn progress_of_a_ring_allreduce(dev: DeviceKind) {
    let ring = Tuning::defaults().force(Collective::Allreduce, Algorithm::Bkt).expect("valid");
    for n in [6, BIG] {
        progress_while_blocked(dev, ring.clone(), Case::new(Kind::Allreduce, n, 0, Red::Sum, 10));
    }
}

/// With the tcp progress thread on, the root's transfers (rendezvous sizes) are served while
/// the root makes no fastmp call at all: it sleeps until every other rank has its data. (The
/// progress thread moves data; a stage that depends on an earlier one, such as forwarding down
/// a tree, still starts only when its rank calls fastmp.)
#[test]
fn tcp_progress_thread_serves_a_root_that_makes_no_calls() {
    let done = Arc::new(AtomicUsize::new(0));
    let config = config(DeviceKind::Tcp, 3).progress_thread(true).tuning(flat_bcast());
    let result = job(config, "tcp progress thread", move |world| {
        let me = world.rank();
        let mut buf = if me == 0 { vec![42u32; BIG] } else { vec![SENTINEL; BIG] };
        world.scope(|s| {
            let req = s.ibcast(&mut buf, 0)?;
            if me == 0 {
                // Computes (no fastmp calls) until the others are done, or gives up after a minute.
                let since = Instant::now();
                while done.load(Ordering::SeqCst) < 2 && since.elapsed() < Duration::from_secs(60) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                if done.load(Ordering::SeqCst) < 2 {
                    return Err(Error::other("ranks 1 and 2 got no data while the root made no fastmp calls"));
                }
            }
            req.wait()?;
            if me != 0 {
                done.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        })?;
        if buf.iter().all(|&x| x == 42) { Ok(()) } else { Err(Error::other(format!("wrong bcast data on rank {me}"))) }
    });
    if let Err(e) = result {
        panic!("tcp progress thread: {e}");
    }
}

device_suite!(
    both: [
        twins_default_tuning,
        twins_native,
        twins_point_to_point,
        twins_at_other_eager_limits,
        random_interleavings,
        random_interleavings_with_a_split,
        random_interleavings_on_16_ranks,
        many_outstanding_newest_first,
        bcast_arrival_orders,
        blocking_calls_among_outstanding_ones,
        forgotten_requests,
        forgotten_then_waited,
        panic_with_collectives_outstanding,
        wildcard_receive_among_collectives,
        bad_arguments_fail_at_the_call,
        root_only_errors_on_a_single_rank,
        request_states_after_completion,
        collective_requests_cannot_be_cancelled,
        progress_of_a_forwarded_bcast,
        progress_of_a_ring_allreduce,
    ],
    tcp_ignored: [],
);
