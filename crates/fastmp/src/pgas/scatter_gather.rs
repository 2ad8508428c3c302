//! `upc_all_scatter`, `upc_all_gather` and `upc_all_gather_all`, on the tree engine of
//! [`super::broadcast`] (flat and binomial trees in rank order relative to the root, whose
//! subtrees hold consecutive pieces) and the ring of the thesis's Alg. 5/6.

use std::cell::Ref;

use bytemuck::Pod;

use super::array::{check_fits, check_root};
use super::broadcast::Flow;
use super::select::{Algorithm, Collective, Pipeline, Shape, Transfer};
use super::team::{KEEP_BUFFER_LIMIT, Signal, Team};
use super::{InSync, OutSync, SharedArray, Sync};
use crate::error::Result;
use crate::window::{Assert, Window};

/// Copies elements `i*len..(i+1)*len` of `root`'s block of `src` into elements `0..len` of rank
/// `i`'s block of `dst`, for every rank `i` (UPC `upc_all_scatter`).
///
/// Flat pull: every rank reads its piece from the root's `src` block (after the root's `Ready`
/// under `IN_MYSYNC`, at once otherwise). Binomial trees stage a subtree's pieces in a scratch
/// buffer of the inner ranks, announced chunk by chunk with `Ready`. Ring: a token from the root
/// passes from rank to rank; each holder passes it on, then reads its piece. MYSYNC is point to
/// point: under `OUT_MYSYNC` the ranks that read the root's `src` post `Done` to it and the root
/// waits for them; a pushing root posts `Done` to each leaf it wrote (under `IN_MYSYNC` after
/// the leaf's `Entered`).
///
/// Inner ranks of a binomial tree always wait for their children's `Done` before returning,
/// whatever the exit mode, since the next call refills their scratch buffer; the buffer is kept
/// between calls and given back (a collective step) after a call that needed more than 16 MiB.
///
/// ```
/// use fastmp::pgas::{self, Sync};
/// fastmp::run(3, |world| {
///     let src = world.shared_array::<u16>(6)?;
///     let dst = world.shared_array::<u16>(2)?;
///     if world.rank() == 0 {
///         src.local()?.copy_from_slice(&[0, 1, 10, 11, 20, 21]);
///     }
///     pgas::scatter(&dst, &src, 0, 2, Sync::default())?;
///     let r = world.rank() as u16;
///     assert_eq!(*dst.local()?, [10 * r, 10 * r + 1]);
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub fn scatter<T: Pod>(dst: &SharedArray<T>, src: &SharedArray<T>, root: usize, len: usize, sync: Sync) -> Result<()> {
    const CALL: &str = "scatter";
    let (input, output) = dst.check_pair(CALL, src, sync)?;
    let np = dst.team.size();
    check_root(CALL, root, np)?;
    check_fits(CALL, "dst", len, dst.block_len())?;
    check_fits(CALL, "src", np.checked_mul(len), src.block_len())?;
    let piece = len * size_of::<T>();
    let algorithm = dst.team.algorithm(Collective::Scatter, piece);
    let from_root = |r: usize| (dst.block_at(r, 0), src.block_at(root, r * piece));
    pieces_call(dst, src.block_at(root, 0), src, root, piece, algorithm, (input, output), true, from_root)
}

/// Copies elements `0..len` of rank `i`'s block of `src` into elements `i*len..(i+1)*len` of
/// `root`'s block of `dst`, for every rank `i` (UPC `upc_all_gather`).
///
/// Flat push: every rank writes its piece into the root's `dst` block (after the root's
/// `Entered` under `IN_MYSYNC`). Binomial trees gather a subtree's pieces in a scratch buffer of
/// the inner ranks (written only after their owner's `Entered`, announced chunk by chunk with
/// `Ready`) and forward them up. Ring: a token from the root passes from rank to rank; each
/// holder passes it on, then writes its piece. MYSYNC is point to point: under `OUT_MYSYNC` the
/// ranks that write the root's `dst` post `Done` to it; a pulling root posts `Done` to each rank
/// whose `src` it read (under `IN_MYSYNC` after that rank's `Ready`).
///
/// ```
/// use fastmp::pgas::{self, Sync};
/// fastmp::run(3, |world| {
///     let src = world.shared_array::<u8>(1)?;
///     let dst = world.shared_array::<u8>(3)?;
///     src.local()?[0] = b'a' + world.rank() as u8;
///     pgas::gather(&dst, &src, 1, 1, Sync::IN_MYSYNC | Sync::OUT_MYSYNC)?;
///     if world.rank() == 1 {
///         assert_eq!(&*dst.local()?, b"abc");
///     }
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub fn gather<T: Pod>(dst: &SharedArray<T>, src: &SharedArray<T>, root: usize, len: usize, sync: Sync) -> Result<()> {
    const CALL: &str = "gather";
    let (input, output) = dst.check_pair(CALL, src, sync)?;
    let np = dst.team.size();
    check_root(CALL, root, np)?;
    check_fits(CALL, "dst", np.checked_mul(len), dst.block_len())?;
    check_fits(CALL, "src", len, src.block_len())?;
    let piece = len * size_of::<T>();
    let algorithm = dst.team.algorithm(Collective::Gather, piece);
    let to_root = |r: usize| (dst.block_at(root, r * piece), src.block_at(r, 0));
    pieces_call(dst, dst.block_at(root, 0), src, root, piece, algorithm, (input, output), false, to_root)
}

/// Scatter (`down`) or gather (`!down`) with `algorithm`: the ring, or the tree engine over the
/// root's block `root_store`; `copy(r)` gives rank `r`'s (destination, source) pieces.
#[allow(clippy::too_many_arguments)]
fn pieces_call<'a, T: Pod>(
    dst: &'a SharedArray<T>,
    root_store: super::transfer::Block<'a>,
    src: &'a SharedArray<T>,
    root: usize,
    piece: usize,
    algorithm: Algorithm,
    (input, output): (InSync, OutSync),
    down: bool,
    copy: impl Fn(usize) -> (super::transfer::Block<'a>, super::transfer::Block<'a>),
) -> Result<()> {
    let team = &dst.team;
    if algorithm.shape == Shape::Ring {
        team.enter(input)?;
        ring(team, root, output, |r| {
            let (to, from) = copy(r);
            team.copy(to, from, piece)
        })?;
        return team.leave(output);
    }
    let tree = team.tree(algorithm.shape, root)?;
    let inner = if algorithm.shape == Shape::Binomial { binomial_inner_span(team.size()) } else { 0 };
    let scratch = scratch(team, inner * piece)?;
    team.enter(input)?;
    let flow = Flow {
        team,
        tree: &tree,
        np: team.size(),
        piece,
        pieces: true,
        pipeline: algorithm.pipeline,
        input,
        output,
        root_store,
        root_ready: down && input != InSync::My,
        user: if down { dst.win.core() } else { src.win.core() },
        scratch: scratch.as_ref().map(|w| w.core()),
        root_needs_data: false,
    };
    let moved = if down { flow.down(algorithm.transfer) } else { flow.up(algorithm.transfer) };
    drop(scratch);
    moved?;
    release_scratch(team)?;
    team.leave(output)
}

/// The most pieces an inner non-root rank of a binomial tree over `np` ranks holds (0: none).
fn binomial_inner_span(np: usize) -> usize {
    (1..np).map(|p| (1usize << p.trailing_zeros()).min(np - p)).filter(|&n| n > 1).max().unwrap_or(0)
}

/// The team's scratch window with at least `bytes` per rank, allocated collectively the first
/// time a call needs more than it has (every rank knows the same sizes, so all decide alike).
fn scratch(team: &Team, bytes: usize) -> Result<Ref<'_, Option<Window<'static, u8>>>> {
    let have = team.scratch.borrow().as_ref().map_or(0, |w| w.len());
    if bytes > have {
        free_scratch(team)?;
        let win = team.comm.win_allocate::<u8>(bytes)?;
        win.lock_all(Assert::NOCHECK)?;
        *team.scratch.borrow_mut() = Some(win);
    }
    Ok(team.scratch.borrow())
}

/// Gives the scratch window back when it outgrew what the thesis keeps between calls
/// (collective: every rank's window has the same size).
fn release_scratch(team: &Team) -> Result<()> {
    if team.scratch.borrow().as_ref().is_some_and(|w| w.len() > KEEP_BUFFER_LIMIT) {
        free_scratch(team)
    } else {
        Ok(())
    }
}

fn free_scratch(team: &Team) -> Result<()> {
    match team.scratch.borrow_mut().take() {
        Some(win) => {
            let unlocked = win.unlock_all();
            unlocked.and(win.free())
        }
        None => Ok(()),
    }
}

/// The thesis's ring (Alg. 5/6): the root starts a token that visits every other rank in rank
/// order from root + 1; a holder passes it on, then makes its own copy (`copy(rank)`), so the
/// root's block serves one rank at a time. Under OUT_MYSYNC every rank posts `Done` to the root,
/// whose block they touched.
fn ring(team: &Team, root: usize, output: OutSync, copy: impl Fn(usize) -> Result<()>) -> Result<()> {
    let (me, np) = (team.rank(), team.size());
    let next = (me + 1) % np;
    if me != root {
        team.wait((me + np - 1) % np, Signal::Token)?;
    }
    if next != root {
        team.post(next, Signal::Token)?;
    }
    copy(me)?;
    if output == OutSync::My {
        if me == root {
            for r in (0..np).filter(|&r| r != root) {
                team.wait(r, Signal::Done)?;
            }
        } else {
            team.post(root, Signal::Done)?;
        }
    }
    Ok(())
}

/// Copies elements `0..len` of rank `i`'s block of `src` into elements `i*len..(i+1)*len` of
/// every rank's block of `dst` (UPC `upc_all_gather_all`).
///
/// Tree algorithms (`*_pull[_static]`): every rank writes its piece into rank 0's `dst` and posts
/// `Done`; rank 0 then announces the gathered block with `Ready` and it is pulled down the tree
/// from `dst` block to `dst` block, with no barrier between. `flat_push`: every rank writes its
/// piece into every rank's `dst`. MYSYNC is point to point: under `IN_MYSYNC` a writer waits for
/// the `Entered` of the rank it writes; under `OUT_MYSYNC` it posts `Done` there afterwards, and
/// a tree rank waits for the `Done` of the children that read its `dst`.
///
/// ```
/// use fastmp::pgas::{self, Sync};
/// fastmp::run(3, |world| {
///     let src = world.shared_array::<i32>(1)?;
///     let dst = world.shared_array::<i32>(3)?;
///     src.local()?[0] = -(world.rank() as i32);
///     pgas::gather_all(&dst, &src, 1, Sync::default())?;
///     assert_eq!(*dst.local()?, [0, -1, -2]);
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub fn gather_all<T: Pod>(dst: &SharedArray<T>, src: &SharedArray<T>, len: usize, sync: Sync) -> Result<()> {
    const CALL: &str = "gather_all";
    let (input, output) = dst.check_pair(CALL, src, sync)?;
    let team = &dst.team;
    let np = team.size();
    check_fits(CALL, "dst", np.checked_mul(len), dst.block_len())?;
    check_fits(CALL, "src", len, src.block_len())?;
    let piece = len * size_of::<T>();
    let algorithm = team.algorithm(Collective::GatherAll, piece);
    if algorithm.transfer == Transfer::Push {
        team.enter(input)?;
        all_to_all(team, input, output, |t| {
            team.copy(dst.block_at(t, team.rank() * piece), src.block_at(team.rank(), 0), piece)
        })?;
        return team.leave(output);
    }
    let gather_tree = team.tree(Shape::Flat, 0)?;
    let tree = team.tree(algorithm.shape, 0)?;
    team.enter(input)?;
    let gather = Flow {
        team,
        tree: &gather_tree,
        np,
        piece,
        pieces: true,
        pipeline: Pipeline::None,
        input,
        output,
        root_store: dst.block_at(0, 0),
        root_ready: false,
        user: src.win.core(),
        scratch: None,
        root_needs_data: true,
    };
    gather.up(Transfer::Push)?;
    let broadcast = Flow {
        tree: &tree,
        piece: np * piece,
        pieces: false,
        pipeline: algorithm.pipeline,
        user: dst.win.core(),
        root_needs_data: false,
        ..gather
    };
    broadcast.down(Transfer::Pull)?;
    team.leave(output)
}

/// Every rank writes into every rank's block (`write(target)`, its own included), starting with
/// its right neighbour so that writers spread over the targets.
fn all_to_all(team: &Team, input: InSync, output: OutSync, write: impl Fn(usize) -> Result<()>) -> Result<()> {
    let (me, np) = (team.rank(), team.size());
    let others = || (1..np).map(|i| (me + i) % np);
    if input == InSync::My {
        for t in others() {
            team.post(t, Signal::Entered)?;
        }
    }
    for t in others() {
        if input == InSync::My {
            team.wait(t, Signal::Entered)?;
        }
        write(t)?;
        if output == OutSync::My {
            team.post(t, Signal::Done)?;
        }
    }
    write(me)?;
    if output == OutSync::My {
        for t in others() {
            team.wait(t, Signal::Done)?;
        }
    }
    Ok(())
}
