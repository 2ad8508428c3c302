//! Hierarchical alltoalls: every block crosses the levels three times (gathered to its
//! process's leader, exchanged between leaders, scattered to its destination), which pays
//! only where the network's per-message cost dominates. Flat local level (a NUMA level would
//! add a fourth copy of every block).

use super::super::select::Pick;
use super::super::transport::{LevelRuns, Run};
use super::super::vector::Layout;
use super::{displacements, levels, packed_layout};
use crate::error::{Error, Result};

/// Local gather of every member's `np` blocks to the leader, leaders' alltoallv of the blocks
/// between their processes (to process `q`: from each of our members, the blocks for each of
/// `q`'s members), local scatter of each member's `np` received blocks, in source rank order.
/// Every block crosses the levels three times, so it pays only where the network's
/// per-message cost dominates (small blocks, many ranks per process).
pub(in crate::coll) async fn alltoall(run: &Run<'_>, send: &[u8], recv: &mut [u8]) -> Result<()> {
    let levels = levels(run)?;
    let processes = &levels.processes;
    let (me, np) = (run.rank(), run.size());
    let block = send.len() / np;
    let ours_members = processes.members(processes.group_of(me));
    let local = levels.local(&run.tuning);
    let leaders = levels.leaders(&run.tuning);
    let blocking = run.is_blocking();
    let local_runs = (local.size() > 1).then(|| LevelRuns::take(&local, 2, blocking));
    let leader_runs = leaders.as_ref().map(|leaders| run.network_level_runs(leaders, 1, blocking));
    let row = np * block;
    let mut ours = vec![0u8; if leader_runs.is_some() { local.size() * row } else { 0 }];
    match &local_runs {
        Some(runs) => runs.next()?.dispatch_gather(send, &mut ours, 0, Pick::Tuned).await?,
        None => ours.copy_from_slice(send),
    }
    // Each member's `np` received blocks, in source rank order (on the leader).
    let mut theirs = vec![0u8; ours.len()];
    if let Some(runs) = &leader_runs {
        let count = |p: usize| ours_members.len() * processes.members(p).len() * block;
        let counts: Vec<usize> = (0..processes.groups()).map(count).collect();
        let displs = displacements(&counts);
        let mut outgoing = Vec::with_capacity(ours.len());
        for p in 0..processes.groups() {
            for i in 0..ours_members.len() {
                for &to in processes.members(p) {
                    outgoing.extend_from_slice(&ours[i * row + to * block..i * row + (to + 1) * block]);
                }
            }
        }
        let mut incoming = vec![0u8; ours.len()];
        runs.next()?.alltoallv(&outgoing, &counts, &displs, &mut incoming, &counts, &displs).await?;
        let mut at = 0;
        for p in 0..processes.groups() {
            for &from in processes.members(p) {
                for i in 0..ours_members.len() {
                    theirs[i * row + from * block..i * row + (from + 1) * block]
                        .copy_from_slice(&incoming[at..at + block]);
                    at += block;
                }
            }
        }
    }
    match &local_runs {
        Some(runs) => runs.next()?.scatter(&theirs, recv, 0).await,
        None => {
            recv.copy_from_slice(&theirs);
            Ok(())
        }
    }
}

/// [`alltoall`] with per-pair blocks: each leader first gathers its members' send and
/// receive lengths (every rank's), then the blocks travel as in [`alltoall`], packed: local
/// gatherv of each member's blocks in rank order, leaders' alltoallv (to process `q`: from each
/// of our members, the blocks for each of `q`'s members), local scatterv of each member's
/// received blocks in source rank order, unpacked into its receive layout.
pub(in crate::coll) async fn alltoallv(
    run: &Run<'_>,
    send: &[u8],
    send_layout: &Layout,
    recv: &mut [u8],
    recv_layout: &Layout,
) -> Result<()> {
    let levels = levels(run)?;
    let processes = &levels.processes;
    let (me, np) = (run.rank(), run.size());
    let ours_members = processes.members(processes.group_of(me));
    let local = levels.local(&run.tuning);
    let leaders = levels.leaders(&run.tuning);
    let blocking = run.is_blocking();
    let local_runs = (local.size() > 1).then(|| LevelRuns::take(&local, 3, blocking));
    let leader_runs = leaders.as_ref().map(|leaders| run.network_level_runs(leaders, 1, blocking));
    let leader = leader_runs.is_some();
    // This rank's lengths to every rank, then from every rank; on the leader, every member's.
    let block_lens = |layout: &Layout| (0..np).map(|r| layout.block(r).len() as u64).collect::<Vec<_>>();
    let mine: Vec<u64> = [block_lens(send_layout), block_lens(recv_layout)].concat();
    let mut lens = vec![0u64; if leader { ours_members.len() * 2 * np } else { 0 }];
    match &local_runs {
        Some(runs) => {
            let lens_bytes = bytemuck::cast_slice_mut(&mut lens);
            runs.next()?.dispatch_gather(bytemuck::cast_slice(&mine), lens_bytes, 0, Pick::Tuned).await?;
        }
        None => lens.copy_from_slice(&mine),
    }
    let mut packed = Vec::with_capacity(send_layout.total_bytes());
    (0..np).for_each(|to| packed.extend_from_slice(&send[send_layout.block(to)]));
    let sent = |i: usize, to: usize| lens[i * 2 * np + to] as usize;
    let received = |i: usize, from: usize| lens[i * 2 * np + np + from] as usize;
    let members = 0..ours_members.len();
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let totals = |of: &dyn Fn(usize, usize) -> usize| -> Vec<usize> {
        members.clone().map(|i| (0..np).map(|r| of(i, r)).sum()).collect()
    };
    if leader {
        ours = vec![0u8; totals(&sent).iter().sum()];
    }
    match &local_runs {
        Some(runs) => {
            let layout = leader.then(|| packed_layout(&local, &totals(&sent))).transpose()?;
            runs.next()?.dispatch_gatherv(&packed, &mut ours, layout.as_ref(), 0, Pick::Tuned).await?;
        }
        None => ours.copy_from_slice(&packed),
    }
    if let Some(runs) = &leader_runs {
        // Where member `i`'s block to (or from) rank `r` starts in `ours` (or `theirs`).
        let offsets = |of: &dyn Fn(usize, usize) -> usize| -> Vec<usize> {
            let lens: Vec<usize> =
                members.clone().flat_map(|i| (0..np).map(move |r| (i, r))).map(|(i, r)| of(i, r)).collect();
            displacements(&lens)
        };
        let (send_at, recv_at) = (offsets(&sent), offsets(&received));
        let groups = 0..processes.groups();
        let mut outgoing = Vec::with_capacity(ours.len());
        let mut counts = Vec::with_capacity(groups.len());
        let pairs = |p: usize| processes.members(p).len() * members.len();
        for q in groups.clone() {
            let start = outgoing.len();
            // The blocks' lengths first, so the receiving leader can check them.
            for i in members.clone() {
                for &to in processes.members(q) {
                    outgoing.extend_from_slice(&(sent(i, to) as u64).to_le_bytes());
                }
            }
            for i in members.clone() {
                for &to in processes.members(q) {
                    let at = send_at[i * np + to];
                    outgoing.extend_from_slice(&ours[at..at + sent(i, to)]);
                }
            }
            counts.push(outgoing.len() - start);
        }
        let in_counts: Vec<usize> = groups
            .clone()
            .map(|p| {
                processes
                    .members(p)
                    .iter()
                    .flat_map(|&from| members.clone().map(move |d| (d, from)))
                    .map(|(d, from)| received(d, from))
                    .sum::<usize>()
                    + pairs(p) * size_of::<u64>()
            })
            .collect();
        let mut incoming = vec![0u8; in_counts.iter().sum()];
        runs.next()?
            .alltoallv(
                &outgoing,
                &counts,
                &displacements(&counts),
                &mut incoming,
                &in_counts,
                &displacements(&in_counts),
            )
            .await?;
        theirs = vec![0u8; totals(&received).iter().sum()];
        let mut at = 0;
        for p in groups {
            let header = at;
            at += pairs(p) * size_of::<u64>();
            for (k, &from) in processes.members(p).iter().enumerate() {
                for d in members.clone() {
                    let (to, len) = (recv_at[d * np + from], received(d, from));
                    let entry = header + (k * members.len() + d) * size_of::<u64>();
                    let announced = u64::from_le_bytes(incoming[entry..entry + 8].try_into().expect("8 bytes"));
                    if announced != len as u64 {
                        return Err(Error::InvalidArgument(format!(
                            "alltoallv: rank {from} sends {announced} bytes to rank {} where that rank expects {len} \
                             (a rank's send_counts and its peer's recv_counts differ)",
                            ours_members[d]
                        )));
                    }
                    theirs[to..to + len].copy_from_slice(&incoming[at..at + len]);
                    at += len;
                }
            }
        }
    }
    let mut arrived = vec![0u8; recv_layout.total_bytes()];
    match &local_runs {
        Some(runs) => {
            let layout = leader.then(|| packed_layout(&local, &totals(&received))).transpose()?;
            runs.next()?.dispatch_scatterv(&theirs, layout.as_ref(), &mut arrived, 0, Pick::Tuned).await?;
        }
        None => arrived.copy_from_slice(&theirs),
    }
    let mut at = 0;
    for from in 0..np {
        let block = recv_layout.block(from);
        recv[block.clone()].copy_from_slice(&arrived[at..at + block.len()]);
        at += block.len();
    }
    Ok(())
}
