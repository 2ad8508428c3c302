//! `upc_all_exchange` and `upc_all_permute`: flat patterns of direct copies (the thesis's
//! exchange and permute need no tree), pushed into the peers' destination blocks or pulled from
//! their source blocks.
//!
//! Both share one loop ([`flat`]): every rank moves data between its own blocks and the blocks
//! of a set of peers (all others for exchange, one for permute). Under IN_MYSYNC a rank posts
//! `Entered` to the ranks that will touch its blocks and waits for the `Entered` of each peer
//! before touching that peer's block; under OUT_MYSYNC it posts `Done` to each peer after its
//! transfer and returns once every rank touching its blocks posted `Done`. The ALLSYNC halves are
//! the team's barriers; NOSYNC sends no message at all.

use bytemuck::Pod;

use super::select::{Collective, Transfer};
use super::team::{Signal, Team};
use super::{InSync, OutSync, SharedArray, Sync};
use crate::error::{Error, Result};

/// Copies elements `i*len..(i+1)*len` of rank `j`'s block of `src` into elements
/// `j*len..(j+1)*len` of rank `i`'s block of `dst`, for all `i`, `j` (UPC `upc_all_exchange`).
///
/// Algorithms: `flat_push` (each rank writes its slices into the peers' `dst` blocks) and
/// `flat_pull` (each rank reads its slices from the peers' `src` blocks); peers are served in
/// the order `me+1, me+2, …` so that no rank is everyone's first target.
///
/// ```
/// use fastmp::pgas::{self, Sync};
/// fastmp::run(3, |world| {
///     let (me, np) = (world.rank() as u32, world.size());
///     let src = world.shared_array::<u32>(np)?;
///     let dst = world.shared_array::<u32>(np)?;
///     // Slice i of rank me says "from me to i".
///     src.local()?.iter_mut().enumerate().for_each(|(i, x)| *x = 10 * me + i as u32);
///     pgas::exchange(&dst, &src, 1, Sync::default())?;
///     // Slice j of rank me came from rank j.
///     let expect: Vec<u32> = (0..np as u32).map(|j| 10 * j + me).collect();
///     assert_eq!(*dst.local()?, expect[..]);
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub fn exchange<T: Pod>(dst: &SharedArray<T>, src: &SharedArray<T>, len: usize, sync: Sync) -> Result<()> {
    let modes = dst.check_pair("exchange", src, sync)?;
    let team = &dst.team;
    let (me, np) = (team.rank(), team.size());
    let need = len.checked_mul(np);
    for (array, which) in [(dst, "destination"), (src, "source")] {
        if need.is_none_or(|n| n > array.block_len()) {
            return Err(Error::InvalidArgument(format!(
                "exchange: len {len} × {np} ranks does not fit in the {which}'s blocks of {} elements",
                array.block_len()
            )));
        }
    }
    let e = size_of::<T>();
    let push = team.algorithm(Collective::Exchange, len * e).transfer == Transfer::Push;
    // Peers from me+1 on, so that no rank is everyone's first; my own slice last.
    let peers = (1..=np).map(|k| (me + k) % np);
    let slice = len * e;
    flat(team, modes, peers.clone(), peers, |peer| {
        // Slice `peer` of my source goes to slice `me` of peer's destination (push), or slice
        // `me` of peer's source comes to slice `peer` of mine (pull); `peer == me` is the local
        // slice either way.
        let (to, from) = if push {
            (dst.block_at(peer, me * slice), src.block_at(me, peer * slice))
        } else {
            (dst.block_at(me, peer * slice), src.block_at(peer, me * slice))
        };
        team.copy(to, from, slice)
    })
}

/// Copies elements `0..len` of rank `i`'s block of `src` into elements `0..len` of rank
/// `perm[i]`'s block of `dst`, for every rank `i` (UPC `upc_all_permute`). `perm` must be a
/// permutation of the ranks (its length the number of ranks, every rank once), `Err` otherwise;
/// it must be the same on every rank, which is not checked (that would cost a collective step
/// per call): different permutations on different ranks are a program error, as mismatched
/// arguments of any collective are.
///
/// Algorithms: `flat_push` (rank `i` writes into `perm[i]`'s block) and `flat_pull` (rank `k`
/// reads the block of the rank `i` with `perm[i] == k`).
///
/// ```
/// use fastmp::pgas::{self, Sync};
/// fastmp::run(3, |world| {
///     let src = world.shared_array::<u8>(2)?;
///     let dst = world.shared_array::<u8>(2)?;
///     src.local()?.fill(world.rank() as u8);
///     pgas::permute(&dst, &src, &[2, 0, 1], 2, Sync::default())?;
///     // Rank 0 received rank 1's block, rank 1 rank 2's, rank 2 rank 0's.
///     assert_eq!(*dst.local()?, [((world.rank() + 1) % 3) as u8; 2]);
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub fn permute<T: Pod>(
    dst: &SharedArray<T>,
    src: &SharedArray<T>,
    perm: &[usize],
    len: usize,
    sync: Sync,
) -> Result<()> {
    let modes = dst.check_pair("permute", src, sync)?;
    let team = &dst.team;
    let (me, np) = (team.rank(), team.size());
    check_permutation(perm, np)?;
    for (array, which) in [(dst, "destination"), (src, "source")] {
        if len > array.block_len() {
            return Err(Error::InvalidArgument(format!(
                "permute: len {len} exceeds the {which}'s blocks of {} elements",
                array.block_len()
            )));
        }
    }
    let e = size_of::<T>();
    let push = team.algorithm(Collective::Permute, len * e).transfer == Transfer::Push;
    // `into` writes my destination block, `outof` reads my source block.
    let outof = perm[me];
    let into = perm.iter().position(|&p| p == me).expect("checked: a permutation");
    // The peer whose block I touch, and the peer who touches mine.
    let (mine, theirs) = if push { (outof, into) } else { (into, outof) };
    flat(team, modes, std::iter::once(mine), std::iter::once(theirs), |peer| {
        let (to, from) = if push { (peer, me) } else { (me, peer) };
        team.copy(dst.block_at(to, 0), src.block_at(from, 0), len * e)
    })
}

/// `Err` unless `perm` lists each of `0..np` once.
fn check_permutation(perm: &[usize], np: usize) -> Result<()> {
    if perm.len() != np {
        return Err(Error::InvalidArgument(format!(
            "permute: perm has {} entries; it must have one per rank ({np})",
            perm.len()
        )));
    }
    // A bit per rank: on the stack for up to 4096 ranks, so the check allocates nothing there.
    let mut small = [0u64; 64];
    let mut large = Vec::new();
    let seen: &mut [u64] = if np <= 64 * 64 {
        &mut small
    } else {
        large.resize(np.div_ceil(64), 0);
        &mut large
    };
    for (i, &p) in perm.iter().enumerate() {
        if p >= np {
            return Err(Error::InvalidArgument(format!("permute: perm[{i}] = {p} is not a rank (there are {np})")));
        }
        let (word, bit) = (p / 64, 1u64 << (p % 64));
        if seen[word] & bit != 0 {
            return Err(Error::InvalidArgument(format!(
                "permute: perm is not a permutation: rank {p} appears twice (again at perm[{i}])"
            )));
        }
        seen[word] |= bit;
    }
    Ok(())
}

/// The sync-mode skeleton of a flat pattern: this rank makes one transfer `mv(peer)` per rank in
/// `targets` (touching that rank's block; `me` stands for the copy between its own blocks, which
/// needs no synchronisation), while `touchers` are the ranks whose transfers touch this rank's
/// blocks (`me` among them is ignored). Posts and waits pair up per ordered pair of ranks
/// because every rank's `targets` are exactly the ranks that list it among their `touchers`.
fn flat(
    team: &Team,
    (input, output): (InSync, OutSync),
    targets: impl Iterator<Item = usize>,
    touchers: impl Iterator<Item = usize> + Clone,
    mut mv: impl FnMut(usize) -> Result<()>,
) -> Result<()> {
    let me = team.rank();
    let touchers = touchers.filter(move |&r| r != me);
    team.enter(input)?;
    if input == InSync::My {
        for peer in touchers.clone() {
            team.post(peer, Signal::Entered)?;
        }
    }
    for peer in targets {
        let remote = peer != me;
        if remote && input == InSync::My {
            team.wait(peer, Signal::Entered)?;
        }
        mv(peer)?;
        if remote && output == OutSync::My {
            team.post(peer, Signal::Done)?;
        }
    }
    if output == OutSync::My {
        for peer in touchers {
            team.wait(peer, Signal::Done)?;
        }
    }
    team.leave(output)
}
