//! Hierarchical barrier, bcast and the reductions: the local level's steps go NUMA-local
//! first ([`LocalLevel`]), except the local part of a scan.

use std::cell::Cell;

use bytemuck::Pod;

use super::super::fold::zeroed;
use super::super::hierarchy::Levels;
use super::super::op::Op;
use super::super::select::{Collective, Pick};
use super::super::transport::{LevelRuns, Run};
use super::super::vector::even_block;
use super::local::LocalLevel;
use super::{chunk_len, displacements, in_process_order, levels, packed_layout, pipeline};
use crate::comm::Comm;
use crate::error::Result;

/// Local arrival (NUMA nodes first), leaders' barrier, local departure.
pub(in crate::coll) async fn barrier(run: &Run<'_>) -> Result<()> {
    let levels = levels(run)?;
    let local = LocalLevel::new(levels, &run.tuning);
    let leaders = levels.leaders(&run.tuning);
    let blocking = run.is_blocking();
    let local_runs = local.runs(2, blocking, true);
    let leader_runs = leaders.as_ref().map(|leaders| run.network_level_runs(leaders, 1, blocking));
    local_runs.arrive().await?;
    if let Some(leader_runs) = &leader_runs {
        leader_runs.next()?.barrier().await?;
    }
    local_runs.depart().await
}

/// In the root's process the local bcast (from the root) produces each chunk and its leader
/// forwards it to the other leaders; elsewhere the leader receives each chunk from the network
/// and the local bcast (from the leader) passes it on. The local bcast goes NUMA-local first.
pub(in crate::coll) async fn bcast(run: &Run<'_>, buf: &mut [u8], root: usize) -> Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    let levels = levels(run)?;
    let processes = &levels.processes;
    let (me, chunk) = (run.rank(), chunk_len(run, 1));
    let chunks = buf.len().div_ceil(chunk) as u64;
    let root_process = processes.group_of(root);
    let in_root_process = processes.group_of(me) == root_process;
    let local_root = if in_root_process { processes.rank_in_group(root) } else { 0 };
    let local = LocalLevel::new(levels, &run.tuning);
    let leaders = levels.leaders(&run.tuning);
    let local_runs = (local.flat().size() > 1).then(|| local.runs(chunks, false, true));
    let leader_runs = leaders.as_ref().map(|leaders| run.network_level_runs(leaders, chunks, false));
    let local_step = local_runs.as_ref().map(|runs| async move |c: &mut [u8]| runs.bcast(c, local_root).await);
    let network_step = leader_runs
        .as_ref()
        .map(|runs| async move |c: &mut [u8]| runs.next()?.dispatch_bcast(c, root_process, Pick::Tuned).await);
    let slots: Vec<Cell<Option<&mut [u8]>>> = buf.chunks_mut(chunk).map(|c| Cell::new(Some(c))).collect();
    if in_root_process {
        pipeline(run, &slots, local_step, network_step).await
    } else {
        pipeline(run, &slots, network_step, local_step).await
    }
}

/// Where every process holds as many members, [`allreduce_by_slices`]. Otherwise local reduce
/// of each chunk to the leader, leaders' allreduce of it, local bcast of the result: three
/// stages, the first running ahead of the other two. The local steps go NUMA-local first.
pub(in crate::coll) async fn allreduce<T: Pod>(
    run: &Run<'_>,
    send: Option<&[T]>,
    recv: &mut [T],
    op: &dyn Op<T>,
) -> Result<()> {
    if recv.is_empty() {
        return Ok(());
    }
    let copy;
    let send = match send {
        Some(send) => send,
        None => {
            copy = recv.to_vec();
            &copy
        }
    };
    let levels = levels(run)?;
    if let Some(peers) = levels.peers(&run.tuning) {
        return allreduce_by_slices(run, levels, &peers, send, recv, op).await;
    }
    let chunk = chunk_len(run, size_of::<T>());
    let chunks = recv.len().div_ceil(chunk) as u64;
    let local = LocalLevel::new(levels, &run.tuning);
    let leaders = levels.leaders(&run.tuning);
    // The local level's reduces take their numbers before its bcasts, on every member.
    let reduces = local.runs(chunks, false, op.is_commutative());
    let bcasts = local.runs(chunks, false, true);
    let leader_runs = leaders.as_ref().map(|leaders| run.network_level_runs(leaders, chunks, false));
    let next_send = Cell::new(0);
    let reduce_step = async |c: &mut [T]| {
        let start = next_send.replace(next_send.get() + c.len());
        let mine = &send[start..start + c.len()];
        reduces.reduce(mine, c, op).await
    };
    let share_step = async |c: &mut [T]| {
        if let Some(runs) = &leader_runs {
            runs.next()?.dispatch_allreduce(None, c, op).await?;
        }
        bcasts.bcast(bytemuck::cast_slice_mut(c), 0).await
    };
    let slots: Vec<Cell<Option<&mut [T]>>> = recv.chunks_mut(chunk).map(|c| Cell::new(Some(c))).collect();
    pipeline(run, &slots, Some(reduce_step), Some(share_step)).await
}

/// [`allreduce`] where every process holds as many members: each member owns a slice of the
/// vector (local rank `i` the `i`-th of near-equal slices). Local reduce-scatter of the slices,
/// the peers' allreduce of each slice across processes (every member at once, each over its own
/// connections, so no member idles while a leader talks for the process and the network carries
/// one copy of the vector per process), local allgather. Slices combine in process order, which
/// is rank order where processes hold consecutive ranks (what non-commutative operations need).
async fn allreduce_by_slices<T: Pod>(
    run: &Run<'_>,
    levels: &Levels,
    peers: &Comm,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
) -> Result<()> {
    let local = levels.local(&run.tuning);
    let blocking = run.is_blocking();
    let (members, len) = (local.size(), recv.len());
    let counts: Vec<usize> = (0..members).map(|i| even_block(len, members, i).len()).collect();
    let local_runs = LevelRuns::take(&local, 2, blocking);
    let peer_runs = run.network_level_runs(peers, 1, blocking);
    let mine = even_block(len, members, local.rank());
    local_runs.next()?.reduce_scatter(send, &mut recv[mine.clone()], &counts, op).await?;
    peer_runs.next()?.dispatch_allreduce(None, &mut recv[mine], op).await?;
    let bytes: Vec<usize> = counts.iter().map(|c| c * size_of::<T>()).collect();
    let layout = packed_layout(&local, &bytes)?;
    local_runs.next()?.dispatch_allgatherv(None, bytemuck::cast_slice_mut(recv), &layout, Pick::Tuned).await
}

/// Local reduce to each process's leader, leaders' reduce to the root's leader, which hands the
/// result to the root if that is another rank. The local reduce goes NUMA-local first.
pub(in crate::coll) async fn reduce<T: Pod>(
    run: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    root: usize,
) -> Result<()> {
    let levels = levels(run)?;
    let processes = &levels.processes;
    let me = run.rank();
    let root_process = processes.group_of(root);
    let root_leader = processes.members(root_process)[0];
    let local = LocalLevel::new(levels, &run.tuning);
    let leaders = levels.leaders(&run.tuning);
    let blocking = run.is_blocking();
    let local_runs = local.runs(1, blocking, op.is_commutative());
    let leader_runs = leaders.as_ref().map(|leaders| run.network_level_runs(leaders, 1, blocking));
    let Some(leader_runs) = leader_runs else {
        local_runs.reduce(send, &mut [], op).await?;
        if me == root {
            run.coll_recv(bytemuck::cast_slice_mut(recv), root_leader, Collective::Reduce).await?;
        }
        return Ok(());
    };
    let mut partial = zeroed::<T>(send.len());
    local_runs.reduce(send, &mut partial, op).await?;
    if me == root {
        return leader_runs.next()?.dispatch_reduce(&partial, recv, op, root_process, Pick::Tuned).await;
    }
    let mut result = zeroed::<T>(if me == root_leader { send.len() } else { 0 });
    leader_runs.next()?.dispatch_reduce(&partial, &mut result, op, root_process, Pick::Tuned).await?;
    if me == root_leader {
        run.coll_send(bytemuck::cast_slice(&result), root, Collective::Reduce).await?;
    }
    Ok(())
}

/// Local reduce of the whole vector to each process's leader (NUMA-local first), which moves
/// its members' blocks next to each other (process by process: an element-wise reduction does
/// not mind where its elements lie), leaders' reduce-scatter of the processes' blocks, local
/// scatterv of each member's block. `counts` are elements of `T` per rank.
pub(in crate::coll) async fn reduce_scatter<T: Pod>(
    run: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    counts: &[usize],
    op: &dyn Op<T>,
) -> Result<()> {
    let levels = levels(run)?;
    let processes = &levels.processes;
    let local = LocalLevel::new(levels, &run.tuning);
    let leaders = levels.leaders(&run.tuning);
    let blocking = run.is_blocking();
    let reduces = local.runs(1, blocking, op.is_commutative());
    let scatters = (local.flat().size() > 1).then(|| LevelRuns::take(local.flat(), 1, blocking));
    let leader_runs = leaders.as_ref().map(|leaders| run.network_level_runs(leaders, 1, blocking));
    let members = processes.members(processes.group_of(run.rank()));
    let ours: Vec<usize> = members.iter().map(|&m| counts[m]).collect();
    let mut mine = zeroed::<T>(if leader_runs.is_some() { ours.iter().sum() } else { 0 });
    if let Some(runs) = &leader_runs {
        let mut partial = zeroed::<T>(send.len());
        reduces.reduce(send, &mut partial, op).await?;
        let offsets = displacements(counts);
        let mut by_process = Vec::with_capacity(send.len());
        for m in in_process_order(processes) {
            by_process.extend_from_slice(&partial[offsets[m]..offsets[m] + counts[m]]);
        }
        let per_process: Vec<usize> =
            (0..processes.groups()).map(|p| processes.members(p).iter().map(|&m| counts[m]).sum()).collect();
        runs.next()?.reduce_scatter(&by_process, &mut mine, &per_process, op).await?;
    } else {
        reduces.reduce(send, &mut [], op).await?;
    }
    match &scatters {
        Some(runs) => {
            let bytes: Vec<usize> = ours.iter().map(|&c| c * size_of::<T>()).collect();
            let layout = leader_runs.is_some().then(|| packed_layout(local.flat(), &bytes)).transpose()?;
            let recv = bytemuck::cast_slice_mut(recv);
            runs.next()?.dispatch_scatterv(bytemuck::cast_slice(&mine), layout.as_ref(), recv, 0, Pick::Tuned).await
        }
        None => {
            recv.copy_from_slice(&mine);
            Ok(())
        }
    }
}

/// Local scan (or exscan) inside each process, leaders' exscan of the processes' totals (the
/// last member's inclusive prefix, handed to its leader), local bcast of what precedes the
/// process, combined in front. Needs every process's members to be consecutive ranks. The
/// local scan stays flat (a prefix needs every member's place in rank order, which NUMA
/// leaders would only relay); the bcast goes NUMA-local first.
pub(in crate::coll) async fn scan<T: Pod>(
    run: &Run<'_>,
    send: &[T],
    recv: &mut [T],
    op: &dyn Op<T>,
    exclusive: bool,
) -> Result<()> {
    let levels = levels(run)?;
    let processes = &levels.processes;
    let me = run.rank();
    let process = processes.group_of(me);
    let members = processes.members(process);
    let (leader, last) = (members[0], members[members.len() - 1]);
    let local = LocalLevel::new(levels, &run.tuning);
    let leaders = levels.leaders(&run.tuning);
    let blocking = run.is_blocking();
    let local_runs = (local.flat().size() > 1).then(|| LevelRuns::take(local.flat(), 1, blocking));
    let bcasts = local.runs(1, blocking, true);
    let leader_runs = leaders.as_ref().map(|leaders| run.network_level_runs(leaders, 1, blocking));
    // This rank's prefix inside its process (undefined for the first member of an exscan).
    let mut part = zeroed::<T>(send.len());
    match &local_runs {
        Some(runs) if exclusive => runs.next()?.exscan(send, &mut part, op).await?,
        Some(runs) => runs.next()?.scan(send, &mut part, op).await?,
        None => part.copy_from_slice(send),
    }
    let mut total = zeroed::<T>(if me == leader || me == last { send.len() } else { 0 });
    if me == last {
        total.copy_from_slice(&part);
        if exclusive && me != leader {
            total.copy_from_slice(send);
            op.combine(&part, &mut total);
        }
        if me != leader {
            run.coll_send(bytemuck::cast_slice(&total), leader, Collective::Scan).await?;
        }
    } else if me == leader {
        run.coll_recv(bytemuck::cast_slice_mut(&mut total), last, Collective::Scan).await?;
    }
    // What precedes this process (nothing for the first).
    let mut before = zeroed::<T>(if process > 0 { send.len() } else { 0 });
    if let Some(runs) = &leader_runs {
        let mut exscanned = zeroed::<T>(send.len());
        runs.next()?.exscan(&total, &mut exscanned, op).await?;
        if process > 0 {
            before.copy_from_slice(&exscanned);
        }
    }
    if process > 0 {
        bcasts.bcast(bytemuck::cast_slice_mut(&mut before), 0).await?;
    }
    let first_of_exscan = exclusive && me == leader;
    match (process > 0, first_of_exscan) {
        (false, true) => {}
        (false, false) => recv.copy_from_slice(&part),
        (true, true) => recv.copy_from_slice(&before),
        (true, false) => {
            recv.copy_from_slice(&part);
            op.combine(&before, recv);
        }
    }
    Ok(())
}
