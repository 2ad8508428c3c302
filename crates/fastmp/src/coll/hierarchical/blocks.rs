//! Hierarchical gathers, scatters and allgathers. The blocks keep the flat local level (every
//! block must reach its destination anyway: NUMA leaders would add a copy without saving a
//! crossing), except the allgathers' final bcast of the whole result, NUMA-local first.

use super::super::hierarchy::Grouping;
use super::super::select::{Collective, Pick};
use super::super::transport::{LevelRuns, Run};
use super::super::vector::Layout;
use super::local::LocalLevel;
use super::{in_process_order, into_process_order, into_rank_order, levels, packed_layout, process_layout};
use crate::comm::Comm;
use crate::error::Result;

/// Local gather to each leader, leaders' allgatherv of the processes' blocks, local bcast of the
/// whole result (reordered into rank order on the leaders), NUMA-local first. `send` is
/// `None` in place.
pub(in crate::coll) async fn allgather(run: &Run<'_>, send: Option<&[u8]>, recv: &mut [u8]) -> Result<()> {
    let levels = levels(run)?;
    let block = recv.len() / run.size();
    let me = run.rank();
    let mine = send.map_or_else(|| recv[me * block..(me + 1) * block].to_vec(), <[u8]>::to_vec);
    let level = LocalLevel::new(levels, &run.tuning);
    let local = level.flat();
    let leaders = levels.leaders(&run.tuning);
    let blocking = run.is_blocking();
    let local_runs = (local.size() > 1).then(|| LevelRuns::take(local, 1, blocking));
    let bcasts = level.runs(1, blocking, true);
    let leader_runs = leaders.as_ref().map(|leaders| run.network_level_runs(leaders, 1, blocking));
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
    bcasts.bcast(recv, 0).await
}

/// [`allgather`] with per-rank blocks (every rank knows them all): local gatherv to the leader,
/// leaders' allgatherv of the processes' blocks, local bcast (NUMA-local first) of them packed
/// in process order, which every rank unpacks into its blocks (a bcast of `recv` itself would
/// overwrite the gaps between blocks). `send` is `None` in place.
pub(in crate::coll) async fn allgatherv(
    run: &Run<'_>,
    send: Option<&[u8]>,
    recv: &mut [u8],
    layout: &Layout,
) -> Result<()> {
    let levels = levels(run)?;
    let processes = &levels.processes;
    let me = run.rank();
    let mine = send.map_or_else(|| recv[layout.block(me)].to_vec(), <[u8]>::to_vec);
    let level = LocalLevel::new(levels, &run.tuning);
    let local = level.flat();
    let leaders = levels.leaders(&run.tuning);
    let blocking = run.is_blocking();
    let local_runs = (local.size() > 1).then(|| LevelRuns::take(local, 1, blocking));
    let bcasts = level.runs(1, blocking, true);
    let leader_runs = leaders.as_ref().map(|leaders| run.network_level_runs(leaders, 1, blocking));
    let members = processes.members(processes.group_of(me));
    let lens = |ranks: &[usize]| ranks.iter().map(|&r| layout.block(r).len()).collect::<Vec<_>>();
    let mut ours = vec![0u8; if leader_runs.is_some() { lens(members).iter().sum() } else { 0 }];
    match &local_runs {
        Some(runs) => {
            let local_layout = leader_runs.is_some().then(|| packed_layout(local, &lens(members))).transpose()?;
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
    bcasts.bcast(&mut by_process, 0).await?;
    unpack_by_process(processes, layout, &by_process, recv);
    Ok(())
}

/// Local gather to each leader, leaders' gatherv to the root's leader, which reorders the
/// blocks into rank order and hands them to the root if that is another rank.
pub(in crate::coll) async fn gather(run: &Run<'_>, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    let rooted = Rooted::new(run, root)?;
    let Rooted { processes, me, root_process, root_leader, ref local, ref leaders, .. } = rooted;
    let block = send.len();
    let (local_runs, leader_runs) = rooted.runs(run, 1);
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

/// [`gather`] with per-rank blocks, which only the root knows: each leader first gathers its
/// members' block lengths, the root hands its layout's lengths to its leader (unless it is the
/// leader); then local gatherv to each leader, leaders' gatherv to the root's leader, which
/// hands the blocks, packed process by process, to the root to unpack. `layout` is the root's.
pub(in crate::coll) async fn gatherv(
    run: &Run<'_>,
    send: &[u8],
    recv: &mut [u8],
    layout: Option<&Layout>,
    root: usize,
) -> Result<()> {
    let rooted = Rooted::new(run, root)?;
    let Rooted { processes, me, root_process, root_leader, ref local, ref leaders, .. } = rooted;
    let (local_runs, leader_runs) = rooted.runs(run, 2);
    let (lens, per_process) = rooted
        .lengths(run, local_runs.as_ref(), leader_runs.is_some(), send.len(), layout, Collective::Gatherv)
        .await?;
    let mut ours = vec![0u8; lens.iter().sum()];
    match &local_runs {
        Some(runs) => {
            let local_layout = leader_runs.is_some().then(|| packed_layout(local, &lens)).transpose()?;
            runs.next()?.dispatch_gatherv(send, &mut ours, local_layout.as_ref(), 0, Pick::Tuned).await?
        }
        None => ours.copy_from_slice(send),
    }
    let mut by_process = vec![0u8; per_process.iter().sum()];
    if let (Some(runs), Some(leaders)) = (&leader_runs, &leaders) {
        let process_layout = (me == root_leader).then(|| packed_layout(leaders, &per_process)).transpose()?;
        runs.next()?
            .dispatch_gatherv(&ours, &mut by_process, process_layout.as_ref(), root_process, Pick::Tuned)
            .await?;
        if me == root_leader && me != root {
            run.coll_send(&by_process, root, Collective::Gatherv).await?;
        }
    }
    if let Some(layout) = layout {
        if me != root_leader {
            run.coll_recv(&mut by_process, root_leader, Collective::Gatherv).await?;
        }
        unpack_by_process(processes, layout, &by_process, recv);
    }
    Ok(())
}

/// The mirror of [`gatherv`]: the root packs its blocks process by process and hands them,
/// after their lengths, to its leader (unless it is the leader); each leader gathers its
/// members' lengths; leaders' scatterv of the processes' blocks, local scatterv.
pub(in crate::coll) async fn scatterv(
    run: &Run<'_>,
    send: &[u8],
    layout: Option<&Layout>,
    recv: &mut [u8],
    root: usize,
) -> Result<()> {
    let rooted = Rooted::new(run, root)?;
    let Rooted { processes, me, root_process, root_leader, ref local, ref leaders, .. } = rooted;
    let (local_runs, leader_runs) = rooted.runs(run, 2);
    let (lens, per_process) = rooted
        .lengths(run, local_runs.as_ref(), leader_runs.is_some(), recv.len(), layout, Collective::Scatterv)
        .await?;
    let mut by_process = vec![0u8; if me == root || me == root_leader { per_process.iter().sum() } else { 0 }];
    if let Some(layout) = layout {
        pack_by_process(processes, layout, send, &mut by_process);
        if me != root_leader {
            run.coll_send(&by_process, root_leader, Collective::Scatterv).await?;
        }
    } else if me == root_leader {
        run.coll_recv(&mut by_process, root, Collective::Scatterv).await?;
    }
    let mut ours = vec![0u8; if leader_runs.is_some() { lens.iter().sum() } else { 0 }];
    if let (Some(runs), Some(leaders)) = (&leader_runs, &leaders) {
        let process_layout = (me == root_leader).then(|| packed_layout(leaders, &per_process)).transpose()?;
        runs.next()?
            .dispatch_scatterv(&by_process, process_layout.as_ref(), &mut ours, root_process, Pick::Tuned)
            .await?;
    }
    match &local_runs {
        Some(runs) => {
            let local_layout = leader_runs.is_some().then(|| packed_layout(local, &lens)).transpose()?;
            runs.next()?.dispatch_scatterv(&ours, local_layout.as_ref(), recv, 0, Pick::Tuned).await
        }
        None => {
            recv.copy_from_slice(&ours);
            Ok(())
        }
    }
}

/// What the rooted hierarchical collectives (gather, scatter and their `v` forms) set up alike:
/// the levels seen from this rank and where the root's process leads.
struct Rooted<'l> {
    processes: &'l Grouping,
    me: usize,
    root: usize,
    root_process: usize,
    root_leader: usize,
    local: Comm,
    /// On leaders.
    leaders: Option<Comm>,
}

impl<'l> Rooted<'l> {
    fn new(run: &'l Run<'_>, root: usize) -> Result<Self> {
        let levels = levels(run)?;
        let processes = &levels.processes;
        let root_process = processes.group_of(root);
        Ok(Rooted {
            processes,
            me: run.rank(),
            root,
            root_process,
            root_leader: processes.members(root_process)[0],
            local: levels.local(&run.tuning),
            leaders: levels.leaders(&run.tuning),
        })
    }

    /// `local_steps` steps of the local level (none alone in the process) and one of the
    /// leaders' level (on leaders), numbered now.
    fn runs<'s>(&'s self, run: &'s Run<'_>, local_steps: u64) -> (Option<LevelRuns<'s>>, Option<LevelRuns<'s>>) {
        let blocking = run.is_blocking();
        let local = (self.local.size() > 1).then(|| LevelRuns::take(&self.local, local_steps, blocking));
        (local, self.leaders.as_ref().map(|leaders| run.network_level_runs(leaders, 1, blocking)))
    }

    /// The `v` forms' lengths in bytes: this process's members' blocks (`mine` on each) on its
    /// leader, gathered over the next step of `local_runs` (empty on the other members), and
    /// each process's total on the root and its leader (the root tells the leader its layout's
    /// lengths; empty elsewhere).
    async fn lengths(
        &self,
        run: &Run<'_>,
        local_runs: Option<&LevelRuns<'_>>,
        leader: bool,
        mine: usize,
        layout: Option<&Layout>,
        coll: Collective,
    ) -> Result<(Vec<usize>, Vec<usize>)> {
        let members = self.processes.members(self.processes.group_of(self.me)).len();
        let lens = match local_runs {
            None => vec![mine as u64],
            Some(runs) => {
                let mut lens = vec![0u64; if leader { members } else { 0 }];
                let (mine, lens_bytes) = (mine as u64, bytemuck::cast_slice_mut(&mut lens));
                runs.next()?.dispatch_gather(bytemuck::bytes_of(&mine), lens_bytes, 0, Pick::Tuned).await?;
                lens
            }
        };
        let (me, root_leader) = (self.me, self.root_leader);
        let mut all = vec![0u64; if me == self.root || me == root_leader { run.size() } else { 0 }];
        if let Some(layout) = layout {
            all.iter_mut().enumerate().for_each(|(r, len)| *len = layout.block(r).len() as u64);
            if me != root_leader {
                run.coll_send(bytemuck::cast_slice(&all), root_leader, coll).await?;
            }
        } else if me == root_leader {
            run.coll_recv(bytemuck::cast_slice_mut(&mut all), self.root, coll).await?;
        }
        let per_process = if all.is_empty() {
            Vec::new()
        } else {
            let groups = 0..self.processes.groups();
            groups.map(|p| self.processes.members(p).iter().map(|&m| all[m] as usize).sum()).collect()
        };
        Ok((lens.into_iter().map(|l| l as usize).collect(), per_process))
    }
}

/// Calls `copy(block, at)` for each block of `layout` in process order, `at` its start when
/// the blocks are packed one after another: the one walk of packing and unpacking.
fn by_process(processes: &Grouping, layout: &Layout, mut copy: impl FnMut(std::ops::Range<usize>, usize)) {
    let mut at = 0;
    for member in in_process_order(processes) {
        let block = layout.block(member);
        let len = block.len();
        copy(block, at);
        at += len;
    }
}

/// Copies the blocks of `layout`, packed one after another in process order in `packed`, to
/// their places in `buf`.
fn unpack_by_process(processes: &Grouping, layout: &Layout, packed: &[u8], buf: &mut [u8]) {
    by_process(processes, layout, |block, at| buf[block.clone()].copy_from_slice(&packed[at..at + block.len()]));
}

/// The inverse of [`unpack_by_process`].
fn pack_by_process(processes: &Grouping, layout: &Layout, buf: &[u8], packed: &mut [u8]) {
    by_process(processes, layout, |block, at| packed[at..at + block.len()].copy_from_slice(&buf[block]));
}

/// The mirror of [`gather`]: the root puts its blocks in process order and hands them to its
/// leader (unless it is the leader), leaders' scatterv of the processes' blocks, local scatter.
pub(in crate::coll) async fn scatter(run: &Run<'_>, send: &[u8], recv: &mut [u8], root: usize) -> Result<()> {
    let rooted = Rooted::new(run, root)?;
    let Rooted { processes, me, root_process, root_leader, ref local, ref leaders, .. } = rooted;
    let block = recv.len();
    let (local_runs, leader_runs) = rooted.runs(run, 1);
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
