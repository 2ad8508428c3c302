//! The `hierarchical` collectives (a local level inside each process, one leader per process
//! between them) on jobs whose ranks span several processes: shm worlds that report simulated
//! processes (`Config::simulate_processes`), and the hybrid device (thread groups joined over
//! loopback tcp, the intra-process level on the shm native collectives). On shm, also with
//! simulated NUMA nodes inside each process (`Config::simulate_numa`), which adds the NUMA level.
//!
//! Layouts: 6 as 2×3, 5 as 2+2+1, 4 as 2×2, 7 as 3+3+1; with NUMA nodes (shm only): 6 as 2×3
//! on 2 nodes each (2+1 members), 9 as 4+4+1 on 3 nodes each (2+1+1). Two tables: `hierarchical` forced
//! (the levels then run the device's native collectives), and one whose rules send the levels
//! to message-based algorithms (`locality` rules), with a chunk of 64 bytes so that small
//! vectors already cross several chunks.

use std::sync::atomic::{AtomicUsize, Ordering};

use fastmp::coll::{Algorithm, Collective, CommLocality, Tuning};
use fastmp::op::{Sum, UserOp};
use fastmp::{Comm, Config, DeviceKind, Result};

const CHUNK: usize = 64;

/// (ranks, ranks per process, NUMA nodes per process).
const LAYOUTS: [(usize, usize, usize); 4] = [(6, 3, 1), (5, 2, 1), (4, 2, 1), (7, 3, 1)];

/// Layouts whose processes span several simulated NUMA nodes (shm only).
const NUMA_LAYOUTS: [(usize, usize, usize); 2] = [(6, 3, 2), (9, 4, 3)];

const HIERARCHICAL: [Collective; 14] = [
    Collective::Gatherv,
    Collective::Scatterv,
    Collective::Alltoallv,
    Collective::ReduceScatter,
    Collective::Alltoall,
    Collective::Allgatherv,
    Collective::Scan,
    Collective::Barrier,
    Collective::Bcast,
    Collective::Scatter,
    Collective::Gather,
    Collective::Allgather,
    Collective::Reduce,
    Collective::Allreduce,
];

/// `hierarchical` for every collective that has it.
fn forced() -> Tuning {
    let tuning = HIERARCHICAL.iter().fold(Tuning::defaults(), |t, &c| t.force(c, Algorithm::Hierarchical).unwrap());
    tuning.with_hierarchical_chunk(CHUNK).unwrap()
}

/// Native inside a process, message-based algorithms on the leaders (at most 3 of them in these
/// layouts), `hierarchical` on the whole communicator.
fn message_levels() -> Tuning {
    let rules = |leaders: &str| {
        format!(
            r#"[{{"locality": "process", "algorithm": "native"}}, {{"max_np": 3, "algorithm": "{leaders}"}},
                {{"algorithm": "hierarchical"}}]"#
        )
    };
    let json = format!(
        r#"{{"barrier": {}, "bcast": {}, "gather": {}, "allgather": {}, "reduce": {}, "allreduce": {},
            "gatherv": {}, "allgatherv": {}, "scatter": {}, "scatterv": {}, "scan": {}, "alltoall": {}, "alltoallv": {},
            "reduce_scatter": {}, "hierarchical_chunk": {CHUNK}}}"#,
        rules("bde"),
        rules("bt"),
        rules("mst"),
        rules("bkt"),
        rules("mst"),
        rules("bde"),
        rules("nbft"),
        rules("bkt"),
        rules("mst"),
        rules("mst"),
        rules("linear"),
        rules("bft"),
        rules("nb1ft"),
        rules("bde"),
    );
    Tuning::from_json(&json).unwrap()
}

fn tables() -> [(&'static str, Tuning); 2] {
    [("forced", forced()), ("message levels", message_levels())]
}

/// A job of `np` ranks in processes of `per_process` ranks, each on `numa` NUMA nodes, on
/// `device`.
fn job(device: DeviceKind, (np, per_process, numa): (usize, usize, usize), tuning: Tuning) -> Config {
    let config = Config::new().np(np).tuning(tuning);
    match device {
        DeviceKind::Shm if numa > 1 => config.simulate_processes(per_process).simulate_numa(numa),
        DeviceKind::Shm => config.simulate_processes(per_process),
        other => config.device(other).threads_per_process(per_process),
    }
}

/// The layouts `device` can run: the NUMA ones where NUMA nodes can be simulated.
fn layouts(device: DeviceKind) -> Vec<(usize, usize, usize)> {
    let numa: &[_] = if device == DeviceKind::Shm { &NUMA_LAYOUTS } else { &[] };
    LAYOUTS.iter().chain(numa).copied().collect()
}

/// Runs `body` on every layout and table, naming them in any error.
fn each_job(device: DeviceKind, body: impl Fn(&Comm) -> Result<()> + Sync) {
    for layout @ (np, t, numa) in layouts(device) {
        for (name, tuning) in tables() {
            job(device, layout, tuning)
                .run(|world| body(&world))
                .unwrap_or_else(|e| panic!("np {np} in processes of {t} on {numa} NUMA nodes, {name}: {e}"));
        }
    }
}

fn byte(seed: usize, i: usize) -> u8 {
    (seed.wrapping_mul(131) ^ i.wrapping_mul(7)) as u8
}

/// Sizes around the chunk: empty, one byte, a chunk ± 1, several chunks.
fn sizes(elem: usize) -> [usize; 5] {
    let per_chunk = (CHUNK / elem).max(1);
    [0, 1, per_chunk - 1, per_chunk + 1, per_chunk * 5 + 3]
}

/// An affine map x ↦ a·x + b as [a, b].
type Affine = [u64; 2];

/// Affine maps composed: associative, not commutative.
fn compose(l: Affine, r: Affine) -> Affine {
    [l[0].wrapping_mul(r[0]), l[0].wrapping_mul(r[1]).wrapping_add(l[1])]
}

fn affine(rank: usize, n: usize) -> Vec<[u64; 2]> {
    (0..n).map(|i| [(rank * 31 + i * 7) as u64 | 1, (rank * 17 + i) as u64]).collect()
}

/// The sequential fold of every rank's `affine` vector, in rank order (ranks given as world ranks
/// in communicator order).
fn affine_fold(ranks: &[usize], n: usize) -> Vec<[u64; 2]> {
    (0..n).map(|i| ranks.iter().map(|&r| affine(r, n)[i]).reduce(compose).expect("at least one rank")).collect()
}

fn values(rank: usize, n: usize) -> Vec<u64> {
    (0..n).map(|i| (rank as u64 + 1) * 1000 + i as u64).collect()
}

/// Composes every input map with the map it is combined into: `inout = input ∘ inout`.
fn compose_into(input: &[Affine], inout: &mut [Affine]) {
    for (l, r) in input.iter().zip(inout.iter_mut()) {
        *r = compose(*l, *r);
    }
}

fn bcast_every_root_and_size(device: DeviceKind) {
    each_job(device, |world| {
        assert_eq!(world.algorithm_for(Collective::Bcast, 1 << 20, true), Algorithm::Hierarchical);
        for root in 0..world.size() {
            for n in sizes(1) {
                let want: Vec<u8> = (0..n).map(|i| byte(root, i)).collect();
                let fresh = || if world.rank() == root { want.clone() } else { vec![0; n] };
                let mut buf = fresh();
                world.bcast(&mut buf, root)?;
                assert_eq!(buf, want, "bcast from {root}, {n} bytes");
                let mut buf = fresh();
                world.scope(|s| s.ibcast(&mut buf, root)?.wait().map(drop))?;
                assert_eq!(buf, want, "ibcast from {root}, {n} bytes");
            }
        }
        Ok(())
    });
}

fn allreduce_sum_and_non_commutative(device: DeviceKind) {
    each_job(device, |world| {
        let (me, np) = (world.rank(), world.size());
        let ranks: Vec<usize> = (0..np).collect();
        for n in sizes(8) {
            let want: Vec<u64> = (0..n).map(|i| (0..np).map(|r| values(r, n)[i]).sum()).collect();
            let mut got = vec![0; n];
            world.allreduce(&values(me, n), &mut got, Sum)?;
            assert_eq!(got, want, "allreduce of {n}");
            let mut got = values(me, n);
            world.allreduce_in_place(&mut got, Sum)?;
            assert_eq!(got, want, "allreduce_in_place of {n}");
            let mine = values(me, n);
            let mut got = vec![0; n];
            world.scope(|s| s.iallreduce(&mine, &mut got, Sum)?.wait().map(drop))?;
            assert_eq!(got, want, "iallreduce of {n}");
        }
        for n in sizes(16) {
            let mut got = vec![[0; 2]; n];
            world.allreduce(&affine(me, n), &mut got, UserOp::non_commutative(compose_into))?;
            assert_eq!(got, affine_fold(&ranks, n), "non-commutative allreduce of {n}");
        }
        Ok(())
    });
}

fn reduce_every_root(device: DeviceKind) {
    each_job(device, |world| {
        let (me, np) = (world.rank(), world.size());
        let ranks: Vec<usize> = (0..np).collect();
        for root in 0..np {
            for n in [1, 9] {
                let want: Vec<u64> = (0..n).map(|i| (0..np).map(|r| values(r, n)[i]).sum()).collect();
                let mut got = vec![0; if me == root { n } else { 0 }];
                world.reduce(&values(me, n), &mut got, Sum, root)?;
                let mut igot = vec![0; if me == root { n } else { 0 }];
                let mine = values(me, n);
                world.scope(|s| s.ireduce(&mine, &mut igot, Sum, root)?.wait().map(drop))?;
                let mut ordered = vec![[0; 2]; if me == root { n } else { 0 }];
                world.reduce(&affine(me, n), &mut ordered, UserOp::non_commutative(compose_into), root)?;
                if me == root {
                    assert_eq!(got, want, "reduce to {root}");
                    assert_eq!(igot, want, "ireduce to {root}");
                    assert_eq!(ordered, affine_fold(&ranks, n), "non-commutative reduce to {root}");
                }
            }
        }
        Ok(())
    });
}

fn gathers_and_scatters_every_root_and_size(device: DeviceKind) {
    each_job(device, |world| {
        let (me, np) = (world.rank(), world.size());
        for coll in [Collective::Scatter, Collective::Gather, Collective::Allgather, Collective::Reduce] {
            assert_eq!(world.algorithm_for(coll, 8, true), Algorithm::Hierarchical, "{coll}");
        }
        for n in sizes(1) {
            let block = |r: usize| (0..n).map(|i| byte(r + 1, i)).collect::<Vec<u8>>();
            let want: Vec<u8> = (0..np).flat_map(block).collect();
            let mut got = vec![0; n * np];
            world.allgather(&block(me), &mut got)?;
            assert_eq!(got, want, "allgather of {n}");
            let mut got = vec![0; n * np];
            got[me * n..(me + 1) * n].copy_from_slice(&block(me));
            world.allgather_in_place(&mut got)?;
            assert_eq!(got, want, "allgather_in_place of {n}");
            let mine = block(me);
            let mut got = vec![0; n * np];
            world.scope(|s| s.iallgather(&mine, &mut got)?.wait().map(drop))?;
            assert_eq!(got, want, "iallgather of {n}");
            for root in 0..np {
                let mut got = vec![0; if me == root { n * np } else { 0 }];
                world.gather(&mine, &mut got, root)?;
                let mut igot = vec![0; if me == root { n * np } else { 0 }];
                world.scope(|s| s.igather(&mine, &mut igot, root)?.wait().map(drop))?;
                if me == root {
                    assert_eq!(got, want, "gather of {n} to {root}");
                    assert_eq!(igot, want, "igather of {n} to {root}");
                }
                let all = if me == root { want.clone() } else { Vec::new() };
                let mut got = vec![0; n];
                world.scatter(&all, &mut got, root)?;
                assert_eq!(got, block(me), "scatter of {n} from {root}");
                let mut got = vec![0; n];
                world.scope(|s| s.iscatter(&all, &mut got, root)?.wait().map(drop))?;
                assert_eq!(got, block(me), "iscatter of {n} from {root}");
            }
        }
        Ok(())
    });
}

/// Uneven blocks with gaps between them (which must stay untouched), out of rank order.
fn allgatherv_keeps_gaps(device: DeviceKind) {
    each_job(device, |world| {
        let (me, np) = (world.rank(), world.size());
        assert_eq!(world.algorithm_for(Collective::Allgatherv, 8, true), Algorithm::Hierarchical);
        for scale in [0, 1, CHUNK / 4] {
            let counts: Vec<usize> = (0..np).map(|r| (r % 3) * scale + r % 2).collect();
            // Blocks in reverse rank order, two bytes apart.
            let mut displs = vec![0; np];
            let mut at = 0;
            for r in (0..np).rev() {
                displs[r] = at;
                at += counts[r] + 2;
            }
            let block = |r: usize| (0..counts[r]).map(|i| byte(r + 7, i)).collect::<Vec<u8>>();
            let mut want = vec![0xEEu8; at];
            for r in 0..np {
                want[displs[r]..displs[r] + counts[r]].copy_from_slice(&block(r));
            }
            let mut got = vec![0xEEu8; at];
            world.allgatherv(&block(me), &mut got, &counts, &displs)?;
            assert_eq!(got, want, "allgatherv, scale {scale}");
            let mut got = vec![0xEEu8; at];
            got[displs[me]..displs[me] + counts[me]].copy_from_slice(&block(me));
            world.allgatherv_in_place(&mut got, &counts, &displs)?;
            assert_eq!(got, want, "allgatherv_in_place, scale {scale}");
        }
        Ok(())
    });
}

fn alltoall_every_size(device: DeviceKind) {
    each_job(device, |world| {
        let (me, np) = (world.rank(), world.size());
        assert_eq!(world.algorithm_for(Collective::Alltoall, 8, true), Algorithm::Hierarchical);
        for block in [0, 1, 5] {
            // Byte i of the block from rank s to rank d.
            let b = |s: usize, d: usize, i: usize| byte(s * 31 + d, i);
            let send: Vec<u8> = (0..np).flat_map(|d| (0..block).map(move |i| b(me, d, i))).collect();
            let want: Vec<u8> = (0..np).flat_map(|s| (0..block).map(move |i| b(s, me, i))).collect();
            let mut got = vec![0; np * block];
            world.alltoall(&send, &mut got)?;
            assert_eq!(got, want, "alltoall of {block}-byte blocks");
            let mut got = vec![0; np * block];
            world.scope(|s| s.ialltoall(&send, &mut got)?.wait().map(drop))?;
            assert_eq!(got, want, "ialltoall of {block}-byte blocks");
        }
        Ok(())
    });
}

fn scans_keep_rank_order(device: DeviceKind) {
    each_job(device, |world| {
        let (me, np) = (world.rank(), world.size());
        assert_eq!(world.algorithm_for(Collective::Scan, 8, false), Algorithm::Hierarchical);
        let ranks: Vec<usize> = (0..np).collect();
        for n in [1, 5] {
            let prefix =
                |upto: usize| -> Vec<u64> { (0..n).map(|i| (0..upto).map(|r| values(r, n)[i]).sum()).collect() };
            let mut got = vec![0; n];
            world.scan(&values(me, n), &mut got, Sum)?;
            assert_eq!(got, prefix(me + 1), "scan of {n}");
            let sentinel = vec![u64::MAX; n];
            let mut got = sentinel.clone();
            world.exscan(&values(me, n), &mut got, Sum)?;
            assert_eq!(got, if me == 0 { sentinel.clone() } else { prefix(me) }, "exscan of {n}");
            let mine = values(me, n);
            let mut got = vec![0; n];
            world.scope(|s| s.iscan(&mine, &mut got, Sum)?.wait().map(drop))?;
            assert_eq!(got, prefix(me + 1), "iscan of {n}");
            let mut got = vec![[0; 2]; n];
            world.scan(&affine(me, n), &mut got, UserOp::non_commutative(compose_into))?;
            assert_eq!(got, affine_fold(&ranks[..=me], n), "non-commutative scan of {n}");
            let mut got = vec![[0; 2]; n];
            world.exscan(&affine(me, n), &mut got, UserOp::non_commutative(compose_into))?;
            if me > 0 {
                assert_eq!(got, affine_fold(&ranks[..me], n), "non-commutative exscan of {n}");
            }
        }
        Ok(())
    });
}

/// Per-rank blocks of `count(r)` bytes in reverse rank order with gaps, which must stay
/// untouched.
struct Uneven {
    counts: Vec<usize>,
    displs: Vec<usize>,
    len: usize,
}

impl Uneven {
    fn new(np: usize, count: impl Fn(usize) -> usize) -> Uneven {
        let counts: Vec<usize> = (0..np).map(count).collect();
        let mut displs = vec![0; np];
        let mut at = 1;
        for r in (0..np).rev() {
            displs[r] = at;
            at += counts[r] + 2;
        }
        Uneven { counts, displs, len: at }
    }

    /// A buffer of `GAP` bytes with `block(r)` at rank `r`'s place, for every rank in `ranks`.
    fn fill(&self, ranks: impl IntoIterator<Item = usize>, block: impl Fn(usize) -> Vec<u8>) -> Vec<u8> {
        let mut buf = vec![GAP; self.len];
        for r in ranks {
            buf[self.displs[r]..self.displs[r] + self.counts[r]].copy_from_slice(&block(r));
        }
        buf
    }
}

const GAP: u8 = 0xEE;

fn vector_gathers_and_scatters_every_root(device: DeviceKind) {
    each_job(device, |world| {
        let (me, np) = (world.rank(), world.size());
        for coll in [Collective::Gatherv, Collective::Scatterv] {
            assert_eq!(world.algorithm_for(coll, 8, true), Algorithm::Hierarchical, "{coll}");
        }
        for scale in [0, 1, CHUNK / 3] {
            let layout = Uneven::new(np, |r| (r % 3) * scale + r % 2);
            let block = |r: usize| (0..layout.counts[r]).map(|i| byte(r + 11, i)).collect::<Vec<u8>>();
            let want = layout.fill(0..np, block);
            let mine = block(me);
            for root in 0..np {
                let at_root = |buf: Vec<u8>| if me == root { buf } else { Vec::new() };
                let mut got = at_root(vec![GAP; layout.len]);
                world.gatherv(&mine, &mut got, &layout.counts, &layout.displs, root)?;
                let mut igot = at_root(vec![GAP; layout.len]);
                world
                    .scope(|s| s.igatherv(&mine, &mut igot, &layout.counts, &layout.displs, root)?.wait().map(drop))?;
                if me == root {
                    assert_eq!(got, want, "gatherv to {root}, scale {scale}");
                    assert_eq!(igot, want, "igatherv to {root}, scale {scale}");
                }
                let all = at_root(want.clone());
                let mut got = vec![0; layout.counts[me]];
                world.scatterv(&all, &layout.counts, &layout.displs, &mut got, root)?;
                assert_eq!(got, mine, "scatterv from {root}, scale {scale}");
                let mut got = vec![0; layout.counts[me]];
                world.scope(|s| s.iscatterv(&all, &layout.counts, &layout.displs, &mut got, root)?.wait().map(drop))?;
                assert_eq!(got, mine, "iscatterv from {root}, scale {scale}");
            }
        }
        Ok(())
    });
}

/// Blocks whose size depends on both ends (some empty), gaps between them on both sides.
fn alltoallv_uneven_blocks(device: DeviceKind) {
    each_job(device, |world| {
        let (me, np) = (world.rank(), world.size());
        assert_eq!(world.algorithm_for(Collective::Alltoallv, 0, true), Algorithm::Hierarchical);
        for scale in [0, 1, 7] {
            let count = |s: usize, d: usize| ((s + 2 * d) % 3) * scale + (s + d) % 2;
            let b = |s: usize, d: usize| (0..count(s, d)).map(|i| byte(s * 31 + d, i)).collect::<Vec<u8>>();
            let sends = Uneven::new(np, |d| count(me, d));
            let recvs = Uneven::new(np, |s| count(s, me));
            let send = sends.fill(0..np, |d| b(me, d));
            let want = recvs.fill(0..np, |s| b(s, me));
            let mut got = vec![GAP; recvs.len];
            world.alltoallv(&send, &sends.counts, &sends.displs, &mut got, &recvs.counts, &recvs.displs)?;
            assert_eq!(got, want, "alltoallv, scale {scale}");
            let mut got = vec![GAP; recvs.len];
            world.scope(|s| {
                s.ialltoallv(&send, &sends.counts, &sends.displs, &mut got, &recvs.counts, &recvs.displs)?
                    .wait()
                    .map(drop)
            })?;
            assert_eq!(got, want, "ialltoallv, scale {scale}");
        }
        Ok(())
    });
}

/// Counts on which a sender and its receiver disagree, though each pair of processes agrees on
/// the total between them: a clear error, not blocks delivered to the wrong places.
fn alltoallv_disagreeing_counts_fail_clearly(device: DeviceKind) {
    let outcome = job(device, (6, 3, 1), forced()).run(|world| {
        let (me, np) = (world.rank(), world.size());
        // Rank 0 sends 2 bytes to rank 3 and rank 1 none; rank 3 expects 1 from each.
        let count = |s: usize, d: usize, senders_view: bool| match (s, d) {
            (0, 3) if senders_view => 2,
            (1, 3) if senders_view => 0,
            _ => 1,
        };
        let send_counts: Vec<usize> = (0..np).map(|d| count(me, d, true)).collect();
        let recv_counts: Vec<usize> = (0..np).map(|s| count(s, me, false)).collect();
        let displs = |counts: &[usize]| counts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect();
        let (send_displs, recv_displs): (Vec<usize>, Vec<usize>) = (displs(&send_counts), displs(&recv_counts));
        let send = vec![me as u8; send_counts.iter().sum()];
        let mut recv = vec![0u8; recv_counts.iter().sum()];
        world.alltoallv(&send, &send_counts, &send_displs, &mut recv, &recv_counts, &recv_displs)
    });
    let err = outcome.expect_err("the counts disagree").to_string();
    // The job reports the first failure: usually the rank that found the counts wrong, else
    // (about one run in fifteen here) a peer whose native step that rank abandoned.
    assert!(err.contains("send_counts") || err.contains("arguments differ between ranks"), "{err}");
}

fn reduce_scatter_uneven_counts(device: DeviceKind) {
    each_job(device, |world| {
        let (me, np) = (world.rank(), world.size());
        let ranks: Vec<usize> = (0..np).collect();
        assert_eq!(world.algorithm_for(Collective::ReduceScatter, 8, true), Algorithm::Hierarchical);
        for scale in [0, 1, CHUNK / 8 + 1] {
            let counts: Vec<usize> = (0..np).map(|r| ((r + 1) % 3) * scale + r % 2).collect();
            let total: usize = counts.iter().sum();
            let start: usize = counts[..me].iter().sum();
            let mine = start..start + counts[me];
            let sum: Vec<u64> = (0..total).map(|i| (0..np).map(|r| values(r, total)[i]).sum()).collect();
            let mut got = vec![0; counts[me]];
            world.reduce_scatter(&values(me, total), &mut got, &counts, Sum)?;
            assert_eq!(got, sum[mine.clone()], "reduce_scatter, scale {scale}");
            let send = values(me, total);
            let mut got = vec![0; counts[me]];
            world.scope(|s| s.ireduce_scatter(&send, &mut got, &counts, Sum)?.wait().map(drop))?;
            assert_eq!(got, sum[mine.clone()], "ireduce_scatter, scale {scale}");
            let mut got = vec![[0; 2]; counts[me]];
            world.reduce_scatter(&affine(me, total), &mut got, &counts, UserOp::non_commutative(compose_into))?;
            assert_eq!(got, affine_fold(&ranks, total)[mine], "non-commutative reduce_scatter, scale {scale}");
            let block = scale + 1;
            let sum: Vec<u64> = (0..block * np).map(|i| (0..np).map(|r| values(r, block * np)[i]).sum()).collect();
            let mut got = vec![0; block];
            world.reduce_scatter_block(&values(me, block * np), &mut got, Sum)?;
            assert_eq!(got, sum[me * block..(me + 1) * block], "reduce_scatter_block of {block}");
        }
        Ok(())
    });
}

fn barrier_holds_every_rank(device: DeviceKind) {
    for layout @ (np, t, numa) in layouts(device) {
        for (name, tuning) in tables() {
            let arrived = AtomicUsize::new(0);
            job(device, layout, tuning)
                .run(|world| {
                    for round in 1..=4 {
                        arrived.fetch_add(1, Ordering::SeqCst);
                        if round % 2 == 0 {
                            world.barrier()?;
                        } else {
                            world.scope(|s| s.ibarrier()?.wait().map(drop))?;
                        }
                        let seen = arrived.load(Ordering::SeqCst);
                        assert!(seen >= round * np, "round {round}: {seen} arrivals seen after the barrier");
                        world.barrier()?;
                    }
                    Ok(())
                })
                .unwrap_or_else(|e| panic!("np {np} in processes of {t} on {numa} NUMA nodes, {name}: {e}"));
        }
    }
}

/// Several operations outstanding at once, finished in reverse order: the levels number their
/// steps when each operation starts, so they match however the operations progress.
fn nonblocking_operations_interleave(device: DeviceKind) {
    each_job(device, |world| {
        let (me, np) = (world.rank(), world.size());
        let n = CHUNK * 3 + 5;
        let want_sum: Vec<u64> = (0..n).map(|i| (0..np).map(|r| values(r, n)[i]).sum()).collect();
        let mine = values(me, n);
        let mut sums = [vec![0u64; n], vec![0u64; n]];
        let mut bufs: Vec<Vec<u8>> =
            (0..3).map(|k| if me == k % np { (0..n).map(|i| byte(k, i)).collect() } else { vec![0; n] }).collect();
        world.scope(|s| {
            let [first, second] = &mut sums;
            let [b0, b1, b2] = &mut bufs[..] else { unreachable!() };
            let requests = [
                s.ibcast(b0, 0)?,
                s.iallreduce(&mine, first, Sum)?,
                s.ibcast(b1, 1)?,
                s.ibarrier()?,
                s.iallreduce(&mine, second, Sum)?,
                s.ibcast(b2, 2 % np)?,
            ];
            for request in requests.into_iter().rev() {
                request.wait()?;
            }
            Ok::<_, fastmp::Error>(())
        })?;
        for (k, buf) in bufs.iter().enumerate() {
            assert!(buf.iter().enumerate().all(|(i, &b)| b == byte(k, i)), "ibcast {k}");
        }
        assert_eq!(sums[0], want_sum);
        assert_eq!(sums[1], want_sum);
        Ok(())
    });
}

/// MPI allows `ibcast(); recv()` on one rank against `send(); ibcast()` on another: starting
/// a hierarchical operation, even the first on a communicator (whose levels are built then),
/// must not wait for other ranks (the synchronous send below completes only once rank 0 has
/// started its ibcast and reached its receive).
fn a_nonblocking_start_never_blocks(device: DeviceKind) {
    each_job(device, |world| {
        let fresh = world.dup()?;
        let n = CHUNK * 2 + 1;
        let mut buf: Vec<u8> = if fresh.rank() == 0 { (0..n).map(|i| byte(4, i)).collect() } else { vec![0; n] };
        let last = fresh.size() - 1;
        fresh.scope(|s| {
            let mut token = [0u8];
            let request = if fresh.rank() == last {
                fresh.ssend(&[7u8], 0, 3)?;
                s.ibcast(&mut buf, 0)?
            } else {
                let request = s.ibcast(&mut buf, 0)?;
                if fresh.rank() == 0 {
                    fresh.recv(&mut token, last, 3)?;
                    assert_eq!(token, [7]);
                }
                request
            };
            request.wait().map(drop)
        })?;
        assert!(buf.iter().enumerate().all(|(i, &b)| b == byte(4, i)), "ibcast after a crossed send");
        Ok(())
    });
}

/// Processes interleaved in communicator order (a split by rank within the process): sums run
/// hierarchically, a non-commutative op cannot and falls to the next rule — right either way.
fn non_contiguous_processes(device: DeviceKind) {
    each_job(device, |world| {
        let process = |rank| world.placement().process_of(rank);
        let t = (0..world.size()).filter(|&r| process(r) == process(world.rank())).count();
        let key = (world.rank() % t) * world.size() + world.rank();
        let mixed = world.split(Some(0), key as i32)?.expect("every rank has a colour");
        let members: Vec<usize> = {
            let mut all = vec![0u64; mixed.size()];
            mixed.allgather(&[world.rank() as u64], &mut all)?;
            all.into_iter().map(|r| r as usize).collect()
        };
        let changes = members.windows(2).filter(|w| process(w[0]) != process(w[1])).count();
        let interleaved = changes >= world.placement().processes();
        assert_eq!(mixed.algorithm_for(Collective::Allreduce, 64, true), Algorithm::Hierarchical);
        if interleaved {
            assert_ne!(mixed.algorithm_for(Collective::Allreduce, 64, false), Algorithm::Hierarchical);
        }
        let n = CHUNK / 8 * 2 + 1;
        let want: Vec<u64> = (0..n).map(|i| members.iter().map(|&r| values(r, n)[i]).sum()).collect();
        let mut got = vec![0; n];
        mixed.allreduce(&values(world.rank(), n), &mut got, Sum)?;
        assert_eq!(got, want, "sum over interleaved processes");
        let mut got = vec![[0; 2]; n];
        mixed.allreduce(&affine(world.rank(), n), &mut got, UserOp::non_commutative(compose_into))?;
        assert_eq!(got, affine_fold(&members, n), "non-commutative allreduce over interleaved processes");
        let mut all = vec![0u8; mixed.size() * 3];
        mixed.allgather(&[world.rank() as u8; 3], &mut all)?;
        let want: Vec<u8> = members.iter().flat_map(|&r| [r as u8; 3]).collect();
        assert_eq!(all, want, "allgather over interleaved processes");
        let root = mixed.size() - 1;
        let mut gathered = vec![0u8; if mixed.rank() == root { mixed.size() * 3 } else { 0 }];
        mixed.gather(&[world.rank() as u8; 3], &mut gathered, root)?;
        if mixed.rank() == root {
            assert_eq!(gathered, want, "gather over interleaved processes");
        }
        if interleaved {
            assert_ne!(mixed.algorithm_for(Collective::Scan, 8, true), Algorithm::Hierarchical);
        }
        let mut prefix = [0u64];
        mixed.scan(&[world.rank() as u64], &mut prefix, Sum)?;
        let upto: u64 = members[..=mixed.rank()].iter().map(|&r| r as u64).sum();
        assert_eq!(prefix, [upto], "scan over interleaved processes");
        let send: Vec<u8> = (0..mixed.size()).map(|d| (world.rank() * 16 + d) as u8).collect();
        let mut got = vec![0u8; mixed.size()];
        mixed.alltoall(&send, &mut got)?;
        let expected: Vec<u8> = members.iter().map(|&s| (s * 16 + mixed.rank()) as u8).collect();
        assert_eq!(got, expected, "alltoall over interleaved processes");
        let mut mine = [0u8; 3];
        mixed.scatter(&gathered, &mut mine, root)?;
        assert_eq!(mine, [world.rank() as u8; 3], "scatter over interleaved processes");
        let mut buf: Vec<u8> = if mixed.rank() == root { (0..n).map(|i| byte(9, i)).collect() } else { vec![0; n] };
        mixed.bcast(&mut buf, root)?;
        assert!(buf.iter().enumerate().all(|(i, &b)| b == byte(9, i)));
        Ok(())
    });
}

/// Each process's members reordered (local members 0, 2, 4, ..., then 1, 3, ...), so that on
/// NUMA layouts the nodes interleave in rank order while the processes stay contiguous: sums
/// go through the NUMA level, a non-commutative op keeps the flat local level — right either
/// way, at every root.
fn numa_nodes_interleaved_in_rank_order(device: DeviceKind) {
    each_job(device, |world| {
        let (me, np) = (world.rank(), world.size());
        let process = |rank| world.placement().process_of(rank);
        let local_index = (0..me).filter(|&r| process(r) == process(me)).count();
        let key = process(me) * 4 * np + (local_index % 2) * 2 * np + local_index;
        let mixed = world.split(Some(0), key as i32)?.expect("every rank has a colour");
        let mut members = vec![0u64; np];
        mixed.allgather(&[me as u64], &mut members)?;
        let members: Vec<usize> = members.into_iter().map(|r| r as usize).collect();
        assert_eq!(mixed.algorithm_for(Collective::Allreduce, 64, false), Algorithm::Hierarchical);
        let n = CHUNK / 16 * 3 + 1;
        let mut got = vec![[0; 2]; n];
        mixed.allreduce(&affine(me, n), &mut got, UserOp::non_commutative(compose_into))?;
        assert_eq!(got, affine_fold(&members, n), "non-commutative allreduce");
        let want: Vec<u64> = (0..n).map(|i| members.iter().map(|&r| values(r, n)[i]).sum()).collect();
        let mut got = vec![0; n];
        mixed.allreduce(&values(me, n), &mut got, Sum)?;
        assert_eq!(got, want, "allreduce");
        for root in 0..np {
            let at_root = |len| if mixed.rank() == root { len } else { 0 };
            let mut got = vec![[0; 2]; at_root(n)];
            mixed.reduce(&affine(me, n), &mut got, UserOp::non_commutative(compose_into), root)?;
            let mut sum = vec![0; at_root(n)];
            mixed.reduce(&values(me, n), &mut sum, Sum, root)?;
            let mut buf: Vec<u8> =
                if mixed.rank() == root { (0..n).map(|i| byte(root, i)).collect() } else { vec![0; n] };
            mixed.bcast(&mut buf, root)?;
            assert!(buf.iter().enumerate().all(|(i, &b)| b == byte(root, i)), "bcast from {root}");
            if mixed.rank() == root {
                assert_eq!(got, affine_fold(&members, n), "non-commutative reduce to {root}");
                assert_eq!(sum, want, "reduce to {root}");
            }
        }
        let counts = vec![2; np];
        let mut got = vec![[0; 2]; 2];
        mixed.reduce_scatter(&affine(me, 2 * np), &mut got, &counts, UserOp::non_commutative(compose_into))?;
        let r = mixed.rank();
        assert_eq!(got, affine_fold(&members, 2 * np)[2 * r..2 * r + 2], "non-commutative reduce_scatter");
        mixed.barrier()
    });
}

/// A rank that fails instead of joining fails the others' hierarchical operations (blocking and
/// nonblocking, leaders and not) instead of leaving them waiting.
fn a_failed_rank_fails_the_others(device: DeviceKind) {
    for (failing, layout) in [(3, (6, 3, 1)), (4, (6, 3, 1)), (1, (6, 3, 2)), (2, (6, 3, 2))] {
        let outcome = job(device, layout, forced()).run(|world| {
            if world.rank() == failing {
                return Err(fastmp::Error::other("this rank gives up"));
            }
            let mut buf = vec![world.rank() as u8; CHUNK * 3];
            world.bcast(&mut buf, 0)?;
            let mut sum = vec![0u64; 40];
            world.scope(|s| s.iallreduce(&[1u64; 40], &mut sum, Sum)?.wait().map(drop))?;
            Ok(())
        });
        let err = outcome.expect_err("the job fails");
        assert!(err.to_string().contains("gives up"), "rank {failing}, {layout:?}: {err}");
    }
}

/// A communicator inside one process has no levels: `hierarchical` falls to the next rule, and
/// the communicator's locality is `process`.
fn one_process_falls_back(device: DeviceKind) {
    job(device, (6, 3, 1), forced())
        .run(|world| {
            assert_eq!(world.comm_locality(), CommLocality::Node);
            let local = world.split_type(fastmp::SplitType::SharedProcess, 0)?;
            assert_eq!(local.comm_locality(), CommLocality::Process);
            assert_eq!(local.algorithm_for(Collective::Bcast, 1 << 20, true), Collective::Bcast.fallback());
            let mut sum = [0u64];
            local.allreduce(&[1], &mut sum, Sum)?;
            assert_eq!(sum, [3]);
            Ok(())
        })
        .unwrap();
}

macro_rules! device_suite {
    ($($name:ident),* $(,)?) => {
        mod shm {
            $(#[test] fn $name() { super::$name(fastmp::DeviceKind::Shm) })*
        }
        mod hybrid {
            $(#[test] fn $name() { super::$name(fastmp::DeviceKind::Hybrid) })*
        }
    };
}

device_suite!(
    bcast_every_root_and_size,
    allreduce_sum_and_non_commutative,
    reduce_every_root,
    scans_keep_rank_order,
    alltoall_every_size,
    alltoallv_uneven_blocks,
    alltoallv_disagreeing_counts_fail_clearly,
    vector_gathers_and_scatters_every_root,
    reduce_scatter_uneven_counts,
    allgatherv_keeps_gaps,
    gathers_and_scatters_every_root_and_size,
    barrier_holds_every_rank,
    nonblocking_operations_interleave,
    a_nonblocking_start_never_blocks,
    non_contiguous_processes,
    numa_nodes_interleaved_in_rank_order,
    one_process_falls_back,
    a_failed_rank_fails_the_others,
);
