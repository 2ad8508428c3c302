//! `upc_all_reduce` and `upc_all_prefix_reduce`.
//!
//! Each rank reads only its own source block and writes only its own destination block (the root
//! alone for reduce); partial results travel as one-value messages (the thesis's semaphores with
//! a payload), which also order the ranks. So the MYSYNC modes need no extra messages here: under
//! IN_MYSYNC a rank touches only its own blocks, which it has entered, and under OUT_MYSYNC no
//! other rank ever touches its blocks. IN_ALLSYNC is the team's barrier; OUT_ALLSYNC is a
//! barrier for prefix_reduce and, for reduce, a `Done` passed down the tree from the root.
//!
//! Ranks that hold none of the first `nelems` elements contribute nothing rather than a neutral
//! element (user operations have none): a partial is an empty or a one-element message.
//! Non-commutative operations are combined in global index order: a partial always covers a run
//! of consecutive ranks, and runs are joined lower first (`Op::combine(lower, upper)`).

use bytemuck::Pod;

use super::array::check_root;
use super::select::{Collective, Shape};
use super::team::{Signal, Team};
use super::tree::Tree;
use super::{OutSync, SharedArray, Sync};
use crate::coll::op::Op;
use crate::error::{Error, Result};

/// Reduces the first `nelems` elements of the whole of `src` (its blocks in rank order: element
/// `g` is element `g % B` of rank `g / B`'s block) with `op` into element 0 of `root`'s block of
/// `dst` (UPC `upc_all_reduce`): one value, `src[0] ∘ src[1] ∘ … ∘ src[nelems-1]`, in that order
/// for non-commutative operations. With `nelems == 0` there is no value and `dst` is untouched.
///
/// Algorithms (the thesis's Algorithm 7, push): `flat_push`, `binomial_push`,
/// `binomial_flat_push`, `hierarchical_push`. Each rank folds its own elements, then its
/// children's partials, and sends one value to its parent. Commutative operations use the tree
/// rooted at `root`; non-commutative ones a tree rooted at rank 0 whose subtrees are runs of
/// consecutive ranks (the chosen shape when it has that property, the binomial tree otherwise),
/// and rank 0 hands the result to `root` (the thesis's extra copy when the root is not the tree
/// root).
///
/// ```
/// use fastmp::op::Sum;
/// use fastmp::pgas::{self, Sync};
/// fastmp::run(3, |world| {
///     let src = world.shared_array::<u64>(2)?;
///     let dst = world.shared_array::<u64>(1)?;
///     let me = world.rank() as u64;
///     src.local()?.copy_from_slice(&[2 * me, 2 * me + 1]);
///     // The first five elements: 0 + 1 + 2 + 3 + 4.
///     pgas::reduce(&dst, &src, 2, 5, Sum, Sync::default())?;
///     if world.rank() == 2 {
///         assert_eq!(dst.local()?[0], 10);
///     }
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub fn reduce<T: Pod, O: Op<T>>(
    dst: &SharedArray<T>,
    src: &SharedArray<T>,
    root: usize,
    nelems: usize,
    op: O,
    sync: Sync,
) -> Result<()> {
    let (input, output) = dst.check_pair("reduce", src, sync)?;
    let team = &dst.team;
    let (me, np) = (team.rank(), team.size());
    check_root("reduce", root, np)?;
    check_nelems("reduce", src, nelems)?;
    if nelems > 0 && dst.block_len() == 0 {
        return Err(Error::InvalidArgument(
            "reduce: the destination's blocks have no element to hold the result (block length 0)".into(),
        ));
    }
    let shape = team.algorithm(Collective::Reduce, nelems.min(src.block_len()) * size_of::<T>()).shape;
    if nelems == 0 {
        team.enter(input)?;
        return team.leave(output);
    }
    let commutative = op.is_commutative();
    let tree = if commutative { team.tree(shape, root)? } else { ordered_tree(team, shape)? };
    team.enter(input)?;
    let mut acc = fold(&op, src, owned(me, src.block_len(), nelems))?;
    let children = tree.children(me);
    if commutative {
        // Binomial children come largest subtree first: the smallest subtrees report first.
        for &child in children.iter().rev() {
            acc = join(&op, acc, recv_partial(team, child)?);
        }
    } else {
        in_rank_order(children, |child| {
            acc = join(&op, acc, recv_partial(team, child)?);
            Ok(())
        })?;
    }
    let top = tree.root();
    match tree.parent(me) {
        Some(parent) => send_partial(team, parent, acc)?,
        None if top == root => write_result(dst, acc)?,
        None => send_partial(team, root, acc)?,
    }
    if me == root && top != root {
        write_result(dst, recv_partial(team, top)?)?;
    }
    if output == OutSync::All {
        // The root's write is the call's last touch of data (every other read precedes a send
        // that leads to it), so a `Done` passed down from the root replaces the barrier: the
        // root returns at once, every other rank after one message per tree level.
        if me == root && top != root {
            team.post(top, Signal::Done)?;
        }
        match tree.parent(me) {
            Some(parent) => team.wait(parent, Signal::Done)?,
            None if top != root => team.wait(root, Signal::Done)?,
            None => {}
        }
        for &child in children {
            team.post(child, Signal::Done)?;
        }
    }
    team.leave(if output == OutSync::All { OutSync::No } else { output })
}

/// Writes `dst[k] = src[0] ∘ … ∘ src[k]` for every global index `k < nelems` (UPC
/// `upc_all_prefix_reduce`); `dst` and `src` must have the same block length. Elements of `dst`
/// from `nelems` on are untouched.
///
/// Every rank holding elements folds its own block, obtains the combination of all lower ranks'
/// elements (its exclusive prefix) from the others, and scans its block from that prefix into
/// its `dst` block. Algorithms
/// for that prefix: `chain_push` (each rank waits for its left neighbour's prefix and passes
/// its own on: n−1 steps, the least traffic), `dissemination_pull` (Mellor-Crummey and Scott:
/// in round `j` a rank combines the partial of rank − 2^j, ⌈log2 n⌉ rounds) and
/// `hierarchical_pull` (a chain inside each run of consecutive ranks sharing a node and NUMA
/// region, dissemination between the runs' last ranks, then each run's last rank hands the run's
/// prefix to its members; on one region it is the chain). Only the ranks holding elements take
/// part; the others only synchronise.
///
/// ```
/// use fastmp::op::Sum;
/// use fastmp::pgas::{self, Sync};
/// fastmp::run(2, |world| {
///     let src = world.shared_array::<i32>(3)?;
///     let dst = world.shared_array::<i32>(3)?;
///     src.local()?.fill(1);
///     pgas::prefix_reduce(&dst, &src, 5, Sum, Sync::default())?;
///     let expect: &[i32] = if world.rank() == 0 { &[1, 2, 3] } else { &[4, 5, 0] };
///     assert_eq!(*dst.local()?, *expect);
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub fn prefix_reduce<T: Pod, O: Op<T>>(
    dst: &SharedArray<T>,
    src: &SharedArray<T>,
    nelems: usize,
    op: O,
    sync: Sync,
) -> Result<()> {
    let (input, output) = dst.check_pair("prefix_reduce", src, sync)?;
    if dst.block_len() != src.block_len() {
        return Err(Error::InvalidArgument(format!(
            "prefix_reduce: the destination's block length {} differs from the source's {}",
            dst.block_len(),
            src.block_len()
        )));
    }
    check_nelems("prefix_reduce", src, nelems)?;
    let team = &dst.team;
    let block = src.block_len();
    let shape = team.algorithm(Collective::PrefixReduce, nelems.min(block) * size_of::<T>()).shape;
    // Gathered by every rank on first use, before any rank drops out below.
    let regions = if shape == Shape::Hierarchical { Some(team.regions()?) } else { None };
    team.enter(input)?;
    let me = team.rank();
    let count = owned(me, block, nelems);
    if count > 0 {
        // Ranks holding elements are 0..active, all but the last with a full block.
        let active = nelems.div_ceil(block);
        let total = fold(&op, src, count)?.unwrap_or_else(|| unreachable!("count > 0"));
        let prefix = match (shape, regions) {
            (Shape::Chain, _) => chain(team, &op, me, 0..active, total)?.0,
            (Shape::Dissemination, _) => dissemination(team, &op, me, active, |i| i, total)?,
            (Shape::Hierarchical, Some(regions)) => hierarchical(team, &op, &regions, me, active, total)?,
            _ => return Err(Error::other(format!("prefix_reduce: no algorithm of shape {shape:?}"))),
        };
        scan(&op, dst, src, count, prefix)?;
    }
    team.leave(output)
}

/// `Err` unless the source holds `nelems` elements.
fn check_nelems<T: Pod>(call: &str, src: &SharedArray<T>, nelems: usize) -> Result<()> {
    if nelems > src.len() {
        return Err(Error::InvalidArgument(format!(
            "{call}: nelems {nelems} exceeds the source array's {} elements ({} per block × {} ranks)",
            src.len(),
            src.block_len(),
            src.team.size()
        )));
    }
    Ok(())
}

/// How many of the first `nelems` global elements `rank`'s block of `block` elements holds.
fn owned(rank: usize, block: usize, nelems: usize) -> usize {
    nelems.saturating_sub(rank * block).min(block)
}

/// `lower ∘ upper`, either side possibly absent.
fn join<T: Pod, O: Op<T>>(op: &O, lower: Option<T>, upper: Option<T>) -> Option<T> {
    match (lower, upper) {
        (Some(lower), Some(mut upper)) => {
            op.combine(&[lower], std::slice::from_mut(&mut upper));
            Some(upper)
        }
        (lower, None) => lower,
        (None, upper) => upper,
    }
}

/// Elements per piece when a rank walks its own block: blocks are read and written through the
/// device's direct access (an origin-side entry), not through `SharedArray::local`, whose guard
/// drains the part's origins with a process-wide memory barrier (tens of microseconds on shm):
/// far too slow for an 8-byte reduce.
const PIECE: usize = 256;

/// Calls `f(start, piece)` on this rank's elements `0..count` of `array`, a piece at a time in
/// a stack buffer (no allocation).
fn for_pieces<T: Pod>(
    array: &SharedArray<T>,
    count: usize,
    mut f: impl FnMut(usize, &mut [T]) -> Result<()>,
) -> Result<()> {
    let mut buf = [T::zeroed(); PIECE];
    let me = array.team.rank();
    for start in (0..count).step_by(PIECE) {
        let piece = &mut buf[..(count - start).min(PIECE)];
        array.team.read(array.block_at(me, start * size_of::<T>()), bytemuck::cast_slice_mut(piece))?;
        f(start, piece)?;
    }
    Ok(())
}

/// `src[0] ∘ … ∘ src[count-1]` of this rank's block, `None` for no elements. A commutative
/// operation folds whole pieces lane-wise (one `combine` over [`PIECE`] elements, which the
/// predefined operations vectorise) and the lanes at the end; a non-commutative one goes
/// element by element, in order.
fn fold<T: Pod, O: Op<T>>(op: &O, src: &SharedArray<T>, count: usize) -> Result<Option<T>> {
    let mut acc = None;
    let mut lanes: Option<[T; PIECE]> = None;
    let lane_wise = op.is_commutative();
    for_pieces(src, count, |_, piece| {
        match (&mut lanes, <&mut [T; PIECE]>::try_from(&mut *piece)) {
            (Some(lanes), Ok(whole)) if lane_wise => {
                op.combine(lanes, whole);
                *lanes = *whole;
            }
            (None, Ok(whole)) if lane_wise => lanes = Some(*whole),
            _ => {
                for &x in piece.iter() {
                    acc = join(op, acc, Some(x));
                }
            }
        }
        Ok(())
    })?;
    for x in lanes.into_iter().flatten() {
        acc = join(op, acc, Some(x));
    }
    Ok(acc)
}

/// Writes the inclusive scan of this rank's `src[..count]`, preceded by `prefix` (the lower
/// ranks' combination), into its `dst[..count]`.
fn scan<T: Pod, O: Op<T>>(
    op: &O,
    dst: &SharedArray<T>,
    src: &SharedArray<T>,
    count: usize,
    mut carry: Option<T>,
) -> Result<()> {
    let me = dst.team.rank();
    for_pieces(src, count, |start, piece| {
        for x in piece.iter_mut() {
            *x = join(op, carry, Some(*x)).unwrap_or(*x);
            carry = Some(*x);
        }
        dst.team.write(dst.block_at(me, start * size_of::<T>()), bytemuck::cast_slice(piece))
    })
}

fn send_partial<T: Pod>(team: &Team, to: usize, value: Option<T>) -> Result<()> {
    team.post_values(to, value.as_slice())
}

/// A partial from `from`: one value, or none when its ranks held no elements.
fn recv_partial<T: Pod>(team: &Team, from: usize) -> Result<Option<T>> {
    let mut value = [T::zeroed()];
    let status = team.comm.recv(&mut value, from, Signal::Value as i32)?;
    Ok((status.bytes > 0).then_some(value[0]))
}

fn send_value<T: Pod>(team: &Team, to: usize, value: T) -> Result<()> {
    team.post_values(to, &[value])
}

fn recv_value<T: Pod>(team: &Team, from: usize) -> Result<T> {
    let mut value = [T::zeroed()];
    team.wait_values(from, &mut value)?;
    Ok(value[0])
}

fn write_result<T: Pod>(dst: &SharedArray<T>, value: Option<T>) -> Result<()> {
    let value = value.ok_or_else(|| Error::other("reduce: the root received no value (an internal error)"))?;
    dst.team.write(dst.block_at(dst.team.rank(), 0), bytemuck::bytes_of(&value))
}

/// For non-commutative operations: `shape`'s tree rooted at rank 0 if a depth-first walk that
/// visits children in rank order meets the ranks in order (then every subtree is a run of
/// consecutive ranks headed by its root, and folding a node's own value, then its children's
/// partials in rank order, keeps the global order), else the binomial tree rooted at 0, which
/// always has that property. Flat and binomial trees have it; the region trees have it when
/// regions hold consecutive ranks.
fn ordered_tree(team: &Team, shape: Shape) -> Result<std::rc::Rc<Tree>> {
    let tree = team.tree(shape, 0)?;
    if rank_ordered(&tree, team.size()) { Ok(tree) } else { team.tree(Shape::Binomial, 0) }
}

/// Whether `tree` (over `np` ranks, rooted at 0) is walked in rank order depth first: rank r
/// follows rank r − 1 iff r's parent is r − 1 or one of its ancestors.
fn rank_ordered(tree: &Tree, np: usize) -> bool {
    tree.root() == 0
        && (1..np).all(|r| {
            let parent = tree.parent(r);
            let mut up = Some(r - 1);
            while up.is_some() && up != parent {
                up = up.and_then(|a| tree.parent(a));
            }
            up.is_some()
        })
}

/// Calls `f` on `children` in increasing rank order (the trees list them in serving order).
fn in_rank_order(children: &[usize], mut f: impl FnMut(usize) -> Result<()>) -> Result<()> {
    if children.is_sorted() {
        children.iter().try_for_each(|&c| f(c))
    } else if children.iter().rev().is_sorted() {
        children.iter().rev().try_for_each(|&c| f(c))
    } else {
        let mut sorted = children.to_vec();
        sorted.sort_unstable();
        sorted.into_iter().try_for_each(f)
    }
}

/// The chain over the consecutive ranks `run` (`me` among them): waits for the combination of
/// the run's ranks below `me` from `me − 1`, passes that combined with `total` to `me + 1`.
/// Returns (the part below `me`, the part up to and including `me`).
fn chain<T: Pod, O: Op<T>>(
    team: &Team,
    op: &O,
    me: usize,
    run: std::ops::Range<usize>,
    total: T,
) -> Result<(Option<T>, T)> {
    let below = if me > run.start { Some(recv_value(team, me - 1)?) } else { None };
    let upto = join(op, below, Some(total)).unwrap_or(total);
    if me + 1 < run.end {
        send_value(team, me + 1, upto)?;
    }
    Ok((below, upto))
}

/// Mellor-Crummey and Scott's dissemination over `n` participants, `rank_of(i)` being the rank
/// of participant `i` (`idx` this rank's): in round `j` participant `i` sends its partial (the
/// combination of participants `i − 2^j + 1 ..= i`) to `i + 2^j` and joins the one of `i − 2^j`
/// below its own. Returns the combination of every participant below `idx`.
fn dissemination<T: Pod, O: Op<T>>(
    team: &Team,
    op: &O,
    idx: usize,
    n: usize,
    rank_of: impl Fn(usize) -> usize,
    total: T,
) -> Result<Option<T>> {
    let (mut upto, mut below) = (total, None);
    let mut distance = 1;
    while distance < n {
        if idx + distance < n {
            send_value(team, rank_of(idx + distance), upto)?;
        }
        if idx >= distance {
            let lower = recv_value(team, rank_of(idx - distance))?;
            below = join(op, Some(lower), below);
            upto = join(op, Some(lower), Some(upto)).unwrap_or(upto);
        }
        distance *= 2;
    }
    Ok(below)
}

/// The hierarchical prefix: runs are maximal sequences of consecutive ranks in one (node, NUMA
/// region); a chain inside each run, dissemination between the runs' last ranks (which hold the
/// runs' totals), and each run's last rank sends the prefix of the runs below to its members.
/// Everything is computed from `regions` on the fly (no allocation per call).
fn hierarchical<T: Pod, O: Op<T>>(
    team: &Team,
    op: &O,
    regions: &[(usize, usize)],
    me: usize,
    active: usize,
    total: T,
) -> Result<Option<T>> {
    let starts_run = |r: usize| r == 0 || regions[r - 1] != regions[r];
    let start = (0..=me).rev().find(|&r| starts_run(r)).unwrap_or(0);
    let end = (me + 1..active).find(|&r| starts_run(r)).unwrap_or(active);
    let last = end - 1;
    let (inside, upto) = chain(team, op, me, start..end, total)?;
    let outside = if me == last {
        let idx = (1..=start).filter(|&r| starts_run(r)).count();
        let runs = 1 + (1..active).filter(|&r| starts_run(r)).count();
        // The last rank of run `g`: just before the start of run g + 1.
        let last_of = |g: usize| (1..active).filter(|&r| starts_run(r)).nth(g).map_or(active - 1, |next| next - 1);
        let outside = dissemination(team, op, idx, runs, last_of, upto)?;
        if let Some(prefix) = outside {
            for member in start..last {
                send_value(team, member, prefix)?;
            }
        }
        outside
    } else if start > 0 {
        Some(recv_value(team, last)?)
    } else {
        None
    };
    Ok(join(op, outside, inside))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::op::UserOp;

    #[test]
    fn rank_order_holds_for_runs_of_ranks_only() {
        for np in 1..=17 {
            for shape in [Shape::Flat, Shape::Binomial] {
                assert!(rank_ordered(&Tree::build(shape, np, 0, None), np), "{shape:?} np {np}");
            }
            let runs: Vec<(usize, usize)> = (0..np).map(|r| (r / 8, r / 4)).collect();
            for shape in [Shape::BinomialFlat, Shape::Hierarchical] {
                assert!(rank_ordered(&Tree::build(shape, np, 0, Some(&runs)), np), "{shape:?} np {np}");
            }
        }
        // Ranks placed round-robin over two regions: subtrees are not runs.
        let cyclic: Vec<(usize, usize)> = (0..8).map(|r| (0, r % 2)).collect();
        assert!(!rank_ordered(&Tree::build(Shape::Hierarchical, 8, 0, Some(&cyclic)), 8));
        assert!(!rank_ordered(&Tree::build(Shape::Binomial, 8, 3, None), 8));
    }

    /// The hierarchical prefix over several runs (the machine has one region, so the public
    /// path only ever sees one run): fake placements, several counts of active ranks.
    #[test]
    fn hierarchical_prefix_over_several_runs() {
        // Strings of rank numbers as base-16 digits: concatenation is not commutative.
        let concat = UserOp::non_commutative(|lower: &[[u64; 2]], upper: &mut [[u64; 2]]| {
            for (l, u) in lower.iter().zip(upper.iter_mut()) {
                *u = [l[0] << (4 * u[1]) | u[0], l[1] + u[1]];
            }
        });
        let placements: [&[(usize, usize)]; 3] = [
            &[(0, 0), (0, 0), (0, 1), (1, 0), (1, 0), (1, 0), (0, 0)],
            &[(0, 0), (0, 1), (0, 0), (0, 1), (0, 0), (0, 1), (0, 0)],
            &[(0, 0); 7],
        ];
        crate::run(7, |world| {
            let array = world.shared_array::<u8>(1)?;
            let me = world.rank();
            for regions in placements {
                for active in [1, 3, 4, 7] {
                    if me < active {
                        let mine = [me as u64 + 1, 1];
                        let below = hierarchical(&array.team, &concat, regions, me, active, mine)?;
                        let expect = (1..=me as u64).fold(0, |acc, d| acc << 4 | d);
                        assert_eq!(below.map(|b| b[0]), (me > 0).then_some(expect), "{regions:?} active {active}");
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    }
}
