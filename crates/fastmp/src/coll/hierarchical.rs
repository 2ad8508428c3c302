//! The `hierarchical` algorithms: a collective over the members inside each process (the local
//! level, where the device's native collectives run) and over one leader per process (the
//! network level), for communicators that span several processes (`Levels`).
//!
//! Each level's steps are ordinary collectives on the level's communicator, dispatched through
//! its own selection. Their operation numbers are taken when the hierarchical operation starts
//! ([`LevelRuns`]), so every member of a level numbers them alike however the parent's
//! nonblocking operations interleave. Long vectors move in chunks (`Tuning::hierarchical_chunk`)
//! through a two-stage pipeline: the stage that produces chunk k (a local reduce, a network
//! bcast) runs ahead while the other stage consumes chunk k - 1, so the network and the local
//! copies overlap. Pipelined levels run nonblocking (their steps yield), which is what lets the
//! two stages interleave inside a blocking call too.

use std::cell::Cell;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;

use bytemuck::Pod;

use super::fold::zeroed;
use super::hierarchy::{Grouping, Levels};
use super::op::Op;
use super::select::{Collective, Pick};
use super::transport::{LevelRuns, Run};
use super::vector::Layout;
use crate::error::{Error, Result};

/// The levels of `run`'s communicator (selection picks this algorithm only where they exist).
fn levels<'c>(run: &Run<'c>) -> Result<&'c Levels> {
    run.comm().levels().map(|levels| &**levels).ok_or_else(|| {
        Error::InvalidArgument(
            "the hierarchical algorithm needs a communicator spanning several processes, one of them with several members"
                .into(),
        )
    })
}

/// Chunks of `len` elements of `elem_size` bytes: the pipeline's unit, at least one element.
fn chunk_len(run: &Run<'_>, elem_size: usize) -> usize {
    (run.tuning.hierarchical_chunk() / elem_size.max(1)).max(1)
}

pub(super) async fn barrier(run: &Run<'_>) -> Result<()> {
    let levels = levels(run)?;
    let local = levels.local(&run.tuning);
    let leaders = levels.leaders(&run.tuning);
    let blocking = run.is_blocking();
    let local_runs = LevelRuns::take(&local, 2, blocking);
    let leader_runs = leaders.as_ref().map(|leaders| LevelRuns::take(leaders, 1, blocking));
    local_runs.next()?.barrier().await?;
    if let Some(leader_runs) = &leader_runs {
        leader_runs.next()?.barrier().await?;
    }
    local_runs.next()?.barrier().await
}

/// In the root's process the local bcast (from the root) produces each chunk and its leader
/// forwards it to the other leaders; elsewhere the leader receives each chunk from the network
/// and the local bcast (from the leader) passes it on.
pub(super) async fn bcast(run: &Run<'_>, buf: &mut [u8], root: usize) -> Result<()> {
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
    let local = levels.local(&run.tuning);
    let leaders = levels.leaders(&run.tuning);
    let local_runs = (local.size() > 1).then(|| LevelRuns::take(&local, chunks, false));
    let leader_runs = leaders.as_ref().map(|leaders| LevelRuns::take(leaders, chunks, false));
    let local_step = local_runs
        .as_ref()
        .map(|runs| async move |c: &mut [u8]| runs.next()?.dispatch_bcast(c, local_root, Pick::Tuned).await);
    let network_step = leader_runs
        .as_ref()
        .map(|runs| async move |c: &mut [u8]| runs.next()?.dispatch_bcast(c, root_process, Pick::Tuned).await);
    let slots: Vec<Cell<Option<&mut [u8]>>> = buf.chunks_mut(chunk).map(|c| Cell::new(Some(c))).collect();
    if in_root_process {
        pipeline(&slots, local_step, network_step).await
    } else {
        pipeline(&slots, network_step, local_step).await
    }
}

/// Local reduce of each chunk to the leader, leaders' allreduce of it, local bcast of the
/// result: three stages, the first running ahead of the other two.
pub(super) async fn allreduce<T: Pod>(run: &Run<'_>, send: Option<&[T]>, recv: &mut [T], op: &dyn Op<T>) -> Result<()> {
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
    let chunk = chunk_len(run, size_of::<T>());
    let chunks = recv.len().div_ceil(chunk) as u64;
    let local = levels.local(&run.tuning);
    let leaders = levels.leaders(&run.tuning);
    // The local level's reduces take their numbers before its bcasts, on every member.
    let reduces = (local.size() > 1).then(|| LevelRuns::take(&local, chunks, false));
    let bcasts = (local.size() > 1).then(|| LevelRuns::take(&local, chunks, false));
    let leader_runs = leaders.as_ref().map(|leaders| LevelRuns::take(leaders, chunks, false));
    let next_send = Cell::new(0);
    let reduce_step = async |c: &mut [T]| {
        let start = next_send.replace(next_send.get() + c.len());
        let mine = &send[start..start + c.len()];
        match &reduces {
            Some(runs) => runs.next()?.dispatch_reduce(mine, c, op, 0, Pick::Tuned).await,
            None => {
                c.copy_from_slice(mine);
                Ok(())
            }
        }
    };
    let share_step = async |c: &mut [T]| {
        if let Some(runs) = &leader_runs {
            runs.next()?.dispatch_allreduce(None, c, op).await?;
        }
        match &bcasts {
            Some(runs) => runs.next()?.dispatch_bcast(bytemuck::cast_slice_mut(c), 0, Pick::Tuned).await,
            None => Ok(()),
        }
    };
    let slots: Vec<Cell<Option<&mut [T]>>> = recv.chunks_mut(chunk).map(|c| Cell::new(Some(c))).collect();
    pipeline(&slots, Some(reduce_step), Some(share_step)).await
}

/// Local reduce to each process's leader, leaders' reduce to the root's leader, which hands the
/// result to the root if that is another rank.
pub(super) async fn reduce<T: Pod>(
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
    let local = levels.local(&run.tuning);
    let leaders = levels.leaders(&run.tuning);
    let blocking = run.is_blocking();
    let local_runs = (local.size() > 1).then(|| LevelRuns::take(&local, 1, blocking));
    let leader_runs = leaders.as_ref().map(|leaders| LevelRuns::take(leaders, 1, blocking));
    let Some(leader_runs) = leader_runs else {
        if let Some(runs) = &local_runs {
            runs.next()?.dispatch_reduce(send, &mut [], op, 0, Pick::Tuned).await?;
        }
        if me == root {
            run.coll_recv(bytemuck::cast_slice_mut(recv), root_leader, Collective::Reduce).await?;
        }
        return Ok(());
    };
    let mut partial = zeroed::<T>(send.len());
    match &local_runs {
        Some(runs) => runs.next()?.dispatch_reduce(send, &mut partial, op, 0, Pick::Tuned).await?,
        None => partial.copy_from_slice(send),
    }
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

/// Local gather to each leader, leaders' allgatherv of the processes' blocks, local bcast of the
/// whole result (reordered into rank order on the leaders). `send` is `None` in place.
pub(super) async fn allgather(run: &Run<'_>, send: Option<&[u8]>, recv: &mut [u8]) -> Result<()> {
    let levels = levels(run)?;
    let block = recv.len() / run.size();
    let me = run.rank();
    let mine = send.map_or_else(|| recv[me * block..(me + 1) * block].to_vec(), <[u8]>::to_vec);
    let local = levels.local(&run.tuning);
    let leaders = levels.leaders(&run.tuning);
    let blocking = run.is_blocking();
    let local_runs = (local.size() > 1).then(|| LevelRuns::take(&local, 2, blocking));
    let leader_runs = leaders.as_ref().map(|leaders| LevelRuns::take(leaders, 1, blocking));
    let mut ours = vec![0u8; if leader_runs.is_some() { local.size() * block } else { 0 }];
    match &local_runs {
        Some(runs) => runs.next()?.dispatch_gather(&mine, &mut ours, 0, Pick::Tuned).await?,
        None => ours.copy_from_slice(&mine),
    }
    if let (Some(runs), Some(leaders)) = (&leader_runs, &leaders) {
        let layout = process_layout(leaders, &levels.processes, block)?;
        let mut by_process = vec![0u8; recv.len()];
        runs.next()?.dispatch_allgatherv(Some(&ours), &mut by_process, &layout, Pick::Tuned).await?;
        into_rank_order(&levels.processes, &by_process, recv, block);
    }
    match &local_runs {
        Some(runs) => runs.next()?.dispatch_bcast(recv, 0, Pick::Tuned).await,
        None => Ok(()),
    }
}

/// [`allgather`] with per-rank blocks (every rank knows them all): local gatherv to the leader,
/// leaders' allgatherv of the processes' blocks, local bcast of them packed in process order,
/// which every rank unpacks into its blocks (a bcast of `recv` itself would overwrite the gaps
/// between blocks). `send` is `None` in place.
pub(super) async fn allgatherv(run: &Run<'_>, send: Option<&[u8]>, recv: &mut [u8], layout: &Layout) -> Result<()> {
    let levels = levels(run)?;
    let processes = &levels.processes;
    let me = run.rank();
    let mine = send.map_or_else(|| recv[layout.block(me)].to_vec(), <[u8]>::to_vec);
    let local = levels.local(&run.tuning);
    let leaders = levels.leaders(&run.tuning);
    let blocking = run.is_blocking();
    let local_runs = (local.size() > 1).then(|| LevelRuns::take(&local, 2, blocking));
    let leader_runs = leaders.as_ref().map(|leaders| LevelRuns::take(leaders, 1, blocking));
    let members = processes.members(processes.group_of(me));
    let lens = |ranks: &[usize]| ranks.iter().map(|&r| layout.block(r).len()).collect::<Vec<_>>();
    let mut ours = vec![0u8; if leader_runs.is_some() { lens(members).iter().sum() } else { 0 }];
    match &local_runs {
        Some(runs) => {
            let local_layout = leader_runs.is_some().then(|| packed_layout(&local, &lens(members))).transpose()?;
            runs.next()?.dispatch_gatherv(&mine, &mut ours, local_layout.as_ref(), 0, Pick::Tuned).await?
        }
        None => ours.copy_from_slice(&mine),
    }
    let per_process: Vec<usize> = (0..processes.groups()).map(|p| lens(processes.members(p)).iter().sum()).collect();
    let mut by_process = vec![0u8; per_process.iter().sum()];
    if let (Some(runs), Some(leaders)) = (&leader_runs, &leaders) {
        let process_layout = packed_layout(leaders, &per_process)?;
        runs.next()?.dispatch_allgatherv(Some(&ours), &mut by_process, &process_layout, Pick::Tuned).await?;
    }
    if let Some(runs) = &local_runs {
        runs.next()?.dispatch_bcast(&mut by_process, 0, Pick::Tuned).await?;
    }
    let members = (0..processes.groups()).flat_map(|p| processes.members(p).iter().copied());
    let mut at = 0;
    for member in members {
        let block = layout.block(member);
        recv[block.clone()].copy_from_slice(&by_process[at..at + block.len()]);
        at += block.len();
    }
    Ok(())
}

/// Local gather of every member's `np` blocks to the leader, leaders' alltoallv of the blocks
/// between their processes (to process `q`: from each of our members, the blocks for each of
/// `q`'s members), local scatter of each member's `np` received blocks, in source rank order.
/// Every block crosses the levels three times, so it pays only where the network's
/// per-message cost dominates (small blocks, many ranks per process).
pub(super) async fn alltoall(run: &Run<'_>, send: &[u8], recv: &mut [u8]) -> Result<()> {
    let levels = levels(run)?;
    let processes = &levels.processes;
    let (me, np) = (run.rank(), run.size());
    let block = send.len() / np;
    let ours_members = processes.members(processes.group_of(me));
    let local = levels.local(&run.tuning);
    let leaders = levels.leaders(&run.tuning);
    let blocking = run.is_blocking();
    let local_runs = (local.size() > 1).then(|| LevelRuns::take(&local, 2, blocking));
    let leader_runs = leaders.as_ref().map(|leaders| LevelRuns::take(leaders, 1, blocking));
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
        let displs: Vec<usize> = counts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect();
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

/// Blocks of `counts` bytes one after another, as a layout of `comm`'s ranks.
fn packed_layout(comm: &crate::comm::Comm, counts: &[usize]) -> Result<Layout> {
    let displs: Vec<usize> = counts.iter().scan(0, |at, &c| Some(std::mem::replace(at, *at + c))).collect();
    Layout::new::<u8>(comm, "hierarchical blocks", counts, &displs, counts.iter().sum())
}

/// Local gather to each leader, leaders' gatherv to the root's leader, which reorders the
/// blocks into rank order and hands them to the root if that is another rank.
pub(super) async fn gather(run: &Run<'_>, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    let levels = levels(run)?;
    let processes = &levels.processes;
    let (me, block) = (run.rank(), send.len());
    let root_process = processes.group_of(root);
    let root_leader = processes.members(root_process)[0];
    let local = levels.local(&run.tuning);
    let leaders = levels.leaders(&run.tuning);
    let blocking = run.is_blocking();
    let local_runs = (local.size() > 1).then(|| LevelRuns::take(&local, 1, blocking));
    let leader_runs = leaders.as_ref().map(|leaders| LevelRuns::take(leaders, 1, blocking));
    let mut ours = vec![0u8; if leader_runs.is_some() { local.size() * block } else { 0 }];
    match &local_runs {
        Some(runs) => runs.next()?.dispatch_gather(send, &mut ours, 0, Pick::Tuned).await?,
        None => ours.copy_from_slice(send),
    }
    if let (Some(runs), Some(leaders)) = (&leader_runs, &leaders) {
        let total = block * run.size();
        let layout = (me == root_leader).then(|| process_layout(leaders, processes, block)).transpose()?;
        let mut by_process = vec![0u8; if me == root_leader { total } else { 0 }];
        runs.next()?.dispatch_gatherv(&ours, &mut by_process, layout.as_ref(), root_process, Pick::Tuned).await?;
        if me == root_leader {
            if me == root {
                into_rank_order(processes, &by_process, recv, block);
            } else {
                let mut ordered = vec![0u8; total];
                into_rank_order(processes, &by_process, &mut ordered, block);
                run.coll_send(&ordered, root, Collective::Gather).await?;
            }
        }
    }
    if me == root && me != root_leader {
        run.coll_recv(recv, root_leader, Collective::Gather).await?;
    }
    Ok(())
}

/// Local scan (or exscan) inside each process, leaders' exscan of the processes' totals (the
/// last member's inclusive prefix, handed to its leader), local bcast of what precedes the
/// process, combined in front. Needs every process's members to be consecutive ranks.
pub(super) async fn scan<T: Pod>(
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
    let local = levels.local(&run.tuning);
    let leaders = levels.leaders(&run.tuning);
    let blocking = run.is_blocking();
    let local_runs = (local.size() > 1).then(|| LevelRuns::take(&local, 2, blocking));
    let leader_runs = leaders.as_ref().map(|leaders| LevelRuns::take(leaders, 1, blocking));
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
    if let (Some(runs), true) = (&local_runs, process > 0) {
        runs.next()?.dispatch_bcast(bytemuck::cast_slice_mut(&mut before), 0, Pick::Tuned).await?;
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

/// The mirror of [`gather`]: the root puts its blocks in process order and hands them to its
/// leader (unless it is the leader), leaders' scatterv of the processes' blocks, local scatter.
pub(super) async fn scatter(run: &Run<'_>, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    let levels = levels(run)?;
    let processes = &levels.processes;
    let (me, block) = (run.rank(), recv.len());
    let root_process = processes.group_of(root);
    let root_leader = processes.members(root_process)[0];
    let local = levels.local(&run.tuning);
    let leaders = levels.leaders(&run.tuning);
    let blocking = run.is_blocking();
    let local_runs = (local.size() > 1).then(|| LevelRuns::take(&local, 1, blocking));
    let leader_runs = leaders.as_ref().map(|leaders| LevelRuns::take(leaders, 1, blocking));
    let total = block * run.size();
    let mut by_process = vec![0u8; if me == root || me == root_leader { total } else { 0 }];
    if me == root {
        into_process_order(processes, send, &mut by_process, block);
        if me != root_leader {
            run.coll_send(&by_process, root_leader, Collective::Scatter).await?;
        }
    } else if me == root_leader {
        run.coll_recv(&mut by_process, root, Collective::Scatter).await?;
    }
    let mut ours = vec![0u8; if leader_runs.is_some() { local.size() * block } else { 0 }];
    if let (Some(runs), Some(leaders)) = (&leader_runs, &leaders) {
        let layout = (me == root_leader).then(|| process_layout(leaders, processes, block)).transpose()?;
        runs.next()?.dispatch_scatterv(&by_process, layout.as_ref(), &mut ours, root_process, Pick::Tuned).await?;
    }
    match &local_runs {
        Some(runs) => runs.next()?.scatter(&ours, recv, 0).await,
        None => {
            recv.copy_from_slice(&ours);
            Ok(())
        }
    }
}

/// The leaders' layout of the processes' blocks: each process's members' blocks of `block`
/// bytes, one after another in process order.
fn process_layout(leaders: &crate::comm::Comm, processes: &Grouping, block: usize) -> Result<Layout> {
    let counts: Vec<usize> = (0..processes.groups()).map(|p| processes.members(p).len() * block).collect();
    packed_layout(leaders, &counts)
}

/// Copies blocks gathered process by process (each process's members in rank order) to their
/// members' places in `ordered`.
fn into_rank_order(processes: &Grouping, by_process: &[u8], ordered: &mut [u8], block: usize) {
    let members = (0..processes.groups()).flat_map(|p| processes.members(p).iter().copied());
    for (from, member) in by_process.chunks_exact(block.max(1)).zip(members) {
        ordered[member * block..(member + 1) * block].copy_from_slice(from);
    }
}

/// The inverse of [`into_rank_order`]: every member's block of `ordered` to its place in
/// process order.
fn into_process_order(processes: &Grouping, ordered: &[u8], by_process: &mut [u8], block: usize) {
    let members = (0..processes.groups()).flat_map(|p| processes.members(p).iter().copied());
    for (to, member) in by_process.chunks_exact_mut(block.max(1)).zip(members) {
        to.copy_from_slice(&ordered[member * block..(member + 1) * block]);
    }
}

/// Runs `first` then `second` on every chunk in order; `second` of chunk k overlaps `first` of
/// the chunks after it. A missing stage passes chunks straight on. The first error ends both.
async fn pipeline<T>(
    chunks: &[Cell<Option<&mut [T]>>],
    first: Option<impl AsyncFn(&mut [T]) -> Result<()>>,
    second: Option<impl AsyncFn(&mut [T]) -> Result<()>>,
) -> Result<()> {
    let produced = Cell::new(0);
    let producer = async {
        for slot in chunks {
            if let Some(first) = &first {
                run_on(slot, first).await?;
            }
            produced.set(produced.get() + 1);
        }
        Ok(())
    };
    let consumer = async {
        let Some(second) = &second else { return Ok(()) };
        for (k, slot) in chunks.iter().enumerate() {
            poll_fn(|_| if produced.get() > k { Poll::Ready(()) } else { Poll::Pending }).await;
            run_on(slot, second).await?;
        }
        Ok(())
    };
    join(producer, consumer).await
}

/// Runs `step` on the chunk in `slot`, which is back in its slot when this returns.
async fn run_on<T>(slot: &Cell<Option<&mut [T]>>, step: &impl AsyncFn(&mut [T]) -> Result<()>) -> Result<()> {
    let chunk = slot.take().expect("a chunk is in one stage at a time");
    let outcome = step(&mut *chunk).await;
    slot.set(Some(chunk));
    outcome
}

/// Both futures to their ends (each polled once more after the other, so progress of one is
/// seen by the other in the same poll); the first error wins at once.
async fn join(a: impl Future<Output = Result<()>>, b: impl Future<Output = Result<()>>) -> Result<()> {
    let (mut a, mut b) = (pin!(a), pin!(b));
    let (mut a_done, mut b_done) = (false, false);
    poll_fn(|cx| {
        for _ in 0..2 {
            if !a_done && let Poll::Ready(result) = a.as_mut().poll(cx) {
                result?;
                a_done = true;
            }
            if !b_done && let Poll::Ready(result) = b.as_mut().poll(cx) {
                result?;
                b_done = true;
            }
        }
        if a_done && b_done { Poll::Ready(Ok(())) } else { Poll::Pending }
    })
    .await
}
