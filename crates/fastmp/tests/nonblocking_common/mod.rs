//! The model shared by the nonblocking-collective suites (`nonblocking_*.rs`): the sixteen
//! collectives, one rank's buffers for a call and their sequential reference, the blocking twin
//! and the nonblocking start of a case, the tunings the twins are checked under, and jobs under
//! the watchdog of `coll_common::job`.
//!
//! A check runs a nonblocking collective and compares everything the rank passed (send and
//! receive buffers, gaps between the blocks of the `v` variants included) with its blocking twin
//! run in the same job on the same inputs, which must in turn agree with a sequential reference
//! computed from all ranks' buffers. Reductions use a non-commutative operation (composition of
//! affine maps) as well as a sum, so a combination out of rank order shows.

#![allow(dead_code)]

use std::fmt;

use fastmp::coll::{Algorithm, Collective, Tuning};
use fastmp::op::Op;
use fastmp::{Comm, Config, DeviceKind, Error, Request, Result, Scope};

use crate::coll_common::{Context, job, val};
use crate::common::{Rng, mix};

/// Elements of the large case: the vector of the vector collectives, and about what all ranks'
/// blocks add up to in the block and `v` collectives. Past both devices' eager limits per block
/// at the process counts checked on each device.
pub const BIG: usize = 70_001;
/// Fill of receive space that must not be written (gaps, rank 0's exscan output, ...).
pub const SENTINEL: u32 = 0xDEAD_BEEF;
/// Point-to-point choices of [`Tunings::P2p`]: as many as the collective with the most
/// point-to-point algorithms has, so every algorithm is checked.
pub const P2P_VARIANTS: usize = 7;
/// First tag of the point-to-point messages mixed into the random rounds.
pub const P2P_TAG: i32 = 700;

// ---------------------------------------------------------------- the sixteen collectives

/// A nonblocking collective (and its blocking twin).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
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
    pub const ALL: [Kind; 16] = [
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

    pub fn is_rooted(self) -> bool {
        matches!(self, Kind::Bcast | Kind::Scatter | Kind::Scatterv | Kind::Gather | Kind::Gatherv | Kind::Reduce)
    }

    pub fn reduces(self) -> bool {
        matches!(
            self,
            Kind::Reduce | Kind::Allreduce | Kind::ReduceScatter | Kind::ReduceScatterBlock | Kind::Scan | Kind::Exscan
        )
    }

    /// Whether a case's `n` is per rank (a block length, or the base of uneven counts) rather
    /// than the length of the whole vector.
    pub fn per_rank(self) -> bool {
        !matches!(self, Kind::Barrier | Kind::Bcast | Kind::Reduce | Kind::Allreduce | Kind::Scan | Kind::Exscan)
    }

    /// The sizes checked at `np` ranks: empty, one element, a few, and the rendezvous size.
    pub fn sizes(self, np: usize) -> Vec<usize> {
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
pub enum Red {
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
pub fn compose(f: u32, g: u32) -> u32 {
    let (mf, cf) = ((f >> 16) | 1, f & 0xFFFF);
    let (mg, cg) = ((g >> 16) | 1, g & 0xFFFF);
    let m = mf.wrapping_mul(mg) & 0xFFFF;
    let c = mf.wrapping_mul(cg).wrapping_add(cf) & 0xFFFF;
    (m << 16) | c
}

/// One call: which collective, its size parameter (see [`Kind::per_rank`]), root, reduction
/// and the seed of its data and layouts.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    pub kind: Kind,
    pub n: usize,
    pub root: usize,
    pub red: Red,
    pub seed: u64,
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
pub struct Bufs {
    pub send: Vec<u32>,
    pub recv: Vec<u32>,
    /// Counts and displacements of the `v` variants (the send side of alltoallv).
    pub counts: Vec<usize>,
    pub displs: Vec<usize>,
    /// The receive side of alltoallv.
    pub recv_counts: Vec<usize>,
    pub recv_displs: Vec<usize>,
}

impl Case {
    pub fn new(kind: Kind, n: usize, root: usize, red: Red, salt: u64) -> Case {
        let seed = mix(&[kind as u64, n as u64, root as u64, red as u64, salt]);
        Case { kind, n, root, red, seed }
    }

    /// Rank `rank`'s input, `len` elements.
    pub fn data(&self, rank: usize, len: usize) -> Vec<u32> {
        (0..len).map(|i| val(self.seed as u32, rank, i)).collect()
    }

    /// Uneven count of `rank`'s block (or of the pair `rank`→`to` in alltoallv): zero for about
    /// a quarter, otherwise between `n` and `2n`.
    pub fn count(&self, rank: usize, to: usize) -> usize {
        let x = val(self.seed as u32 ^ 0x5A5A, rank, to) as usize;
        if self.n == 0 || x.is_multiple_of(4) { 0 } else { self.n + (x >> 2) % (self.n + 1) }
    }

    /// This rank's buffers for the call, receive space filled with [`SENTINEL`].
    pub fn bufs(&self, np: usize, me: usize) -> Bufs {
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
pub fn layout(counts: &[usize], rng: &mut Rng) -> (Vec<usize>, usize) {
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

pub fn shuffle<T>(items: &mut [T], rng: &mut Rng) {
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
pub fn blocking(comm: &Comm, case: &Case, bufs: &mut Bufs) -> Result<()> {
    call!(comm, case, bufs;
        barrier bcast scatter scatterv gather gatherv allgather allgatherv alltoall alltoallv
        reduce allreduce reduce_scatter reduce_scatter_block scan exscan)
}

/// Starts the nonblocking collective of `case`.
pub fn start<'s>(s: &'s Scope<'s, '_>, case: &Case, bufs: &'s mut Bufs) -> Result<Request<'s>> {
    call!(s, case, bufs;
        ibarrier ibcast iscatter iscatterv igather igatherv iallgather iallgatherv ialltoall
        ialltoallv ireduce iallreduce ireduce_scatter ireduce_scatter_block iscan iexscan)
}

/// `case`'s result through the blocking twin on `comm`, which must agree with the sequential
/// [`reference`] (so a mistake shared by both paths shows too).
pub fn twin_result(comm: &Comm, case: &Case) -> Result<Bufs> {
    let (np, me) = (comm.size(), comm.rank());
    let mut want = case.bufs(np, me);
    blocking(comm, case, &mut want).ctx(|| format!("blocking {case}"))?;
    same(&want, &reference(case, np, me), || format!("blocking {case} on rank {me} against the sequential reference"))?;
    Ok(want)
}

/// `case`'s result on rank `me`, computed sequentially from every rank's buffers.
pub fn reference(case: &Case, np: usize, me: usize) -> Bufs {
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
pub fn same(got: &Bufs, want: &Bufs, what: impl FnOnce() -> String) -> Result<()> {
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
pub enum Tunings {
    /// The measured defaults (a mix of slot-based and point-to-point algorithms on shm).
    Default,
    /// Every collective forced to the shared-memory slot algorithm (on tcp: the fallbacks).
    Native,
    /// Every collective forced to a point-to-point algorithm, the `k`-th (cyclically) of those
    /// it has, so that the process counts of a sweep cover different ones.
    P2p,
}

impl Tunings {
    pub fn tuning(self, k: usize) -> Tuning {
        let pick = |c: Collective| match self {
            Tunings::Default => None,
            Tunings::Native => Some(Algorithm::Native),
            Tunings::P2p => {
                let p2p: Vec<Algorithm> = c
                    .algorithms()
                    .iter()
                    .copied()
                    .filter(|&a| !matches!(a, Algorithm::Native | Algorithm::Hierarchical))
                    .collect();
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
pub fn chain_bcast() -> Tuning {
    Tuning::defaults().force(Collective::Bcast, Algorithm::Fat).and_then(|t| t.with_kary_arity(1)).expect("valid")
}

pub fn flat_bcast() -> Tuning {
    Tuning::defaults().force(Collective::Bcast, Algorithm::Nbft).expect("valid")
}

pub fn config(dev: DeviceKind, np: usize) -> Config {
    Config::new().device(dev).np(np)
}

/// Runs a job on `np` ranks of `dev` that must succeed.
pub fn run_job<F>(dev: DeviceKind, np: usize, what: &str, f: F)
where
    F: Fn(Comm) -> Result<()> + Send + Sync + 'static,
{
    run_config(config(dev, np), what, f);
}

/// Runs a job of `config` that must succeed.
pub fn run_config<F>(config: Config, what: &str, f: F)
where
    F: Fn(Comm) -> Result<()> + Send + Sync + 'static,
{
    let what = format!("{what} (np={}, {:?})", config.get_np(), config.get_device());
    if let Err(e) = job(config, &what, f) {
        panic!("{what}: {e}");
    }
}

// ---------------------------------------------------------------- completion

/// Calls `done` until it says so, yielding the core in between.
pub fn spin(mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    while !done()? {
        std::thread::yield_now();
    }
    Ok(())
}
