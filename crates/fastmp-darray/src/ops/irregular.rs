//! Irregular access (Adlib's `gather` and `scatter`, with CHAOS/PARTI-style schedules):
//! `gather` sets `dst[i] = src[subscripts[i]]`, `scatter` sets `dst[subscripts[i]] = src[i]`,
//! where the subscripts are a distributed array of global indices into the indexed array.
//!
//! Building a schedule negotiates once: each rank works out, from the arrays' metadata, which
//! rank stores each element its subscripts name and at which offset of its block, and tells
//! that rank (one `alltoall` of counts, one `alltoallv` of offsets over the grid
//! communicator). The schedule then keeps, per peer, the offsets to pack and where to unpack
//! them, so executing it is one message per peer, packed and unpacked with plain loops.
//!
//! Collectivity: building is collective over all ranks of the grid communicator
//! ([`crate::Grid::comm`]) of the destination, members of the arrays' grids or not (a rank
//! outside them may still store part of the other array); the source's grid must be over the
//! same ranks. Executing involves only the ranks that exchange elements, but every rank that
//! built the schedule should execute it (one with nothing to move returns at once).

mod exchange;

use bytemuck::Pod;
use fastmp::Result;
use ndarray::{Dimension, IntoDimension};
use serde::Serialize;
use serde::de::DeserializeOwned;

use self::exchange::{Buffers, Exchange, Incoming, check_offsets, negotiate};
use super::Signature;
use crate::array::DArray;
use crate::grid::Grid;
use crate::invalid;
use crate::plan::{for_each_coords, replica, untargeted};
use crate::range::Range;
use crate::section::{AsSection, AsSectionMut, Span};

/// A built gather, `dst[i] = src[subscripts[i]]`: the subscripts' values are resolved once,
/// at build, and the schedule reused for any contents of `src`. Only physical elements are
/// written; `dst`'s ghost cells are left for [`DArray::write_halo`].
///
/// ```
/// use fastmp_darray::{DArray, GatherSchedule, Grid, Range};
/// fastmp::run(3, |world| {
///     let grid = Grid::new(&world, &[3])?;
///     let src = DArray::from_fn(&grid, [Range::block(8, &grid, 0)?], |i| 100 + i as u32)?;
///     // Reverse the array: element i takes element 7 - i.
///     let subscripts = DArray::from_fn(&grid, [Range::cyclic(8, &grid, 0)?], |i| 7 - i)?;
///     let mut dst = DArray::from_elem(&grid, [Range::cyclic(8, &grid, 0)?], 0)?;
///     let mut reverse = GatherSchedule::build(&dst, &src, &subscripts)?;
///     reverse.execute(&mut dst, &src)?;
///     assert!(dst.overall().all(|(i, &x)| x == 107 - i as u32));
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
#[derive(Debug)]
pub struct GatherSchedule {
    exchange: Exchange,
    dst: Signature,
    src: Signature,
    bufs: Buffers,
}

/// A built scatter, `dst[subscripts[i]] = src[i]`. When several `i` name the same element of
/// `dst`, the one with the largest global index `i` (row-major) wins, as a sequential loop over
/// `i` would leave it; elements no subscript names keep their value, and ghost cells are left
/// for [`DArray::write_halo`].
///
/// ```
/// use fastmp_darray::{DArray, Grid, Range, ScatterSchedule};
/// fastmp::run(2, |world| {
///     let grid = Grid::new(&world, &[2])?;
///     let src = DArray::from_fn(&grid, [Range::block(6, &grid, 0)?], |i| i as i64)?;
///     // Elements 0..6 go to 0, 0, 2, 2, 4, 4 of a 5-element array: the later one wins.
///     let subscripts = DArray::from_fn(&grid, [Range::block(6, &grid, 0)?], |i| i / 2 * 2)?;
///     let mut dst = DArray::from_elem(&grid, [Range::cyclic(5, &grid, 0)?], -1)?;
///     ScatterSchedule::build(&dst, &src, &subscripts)?.execute(&mut dst, &src)?;
///     for (i, &x) in dst.overall() {
///         assert_eq!(x, [1, -1, 3, -1, 5][i]);
///     }
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
#[derive(Debug)]
pub struct ScatterSchedule {
    exchange: Exchange,
    dst: Signature,
    src: Signature,
    bufs: Buffers,
}

impl GatherSchedule {
    /// Builds `dst[i] = src[subscripts[i]]`. `dst` and `subscripts` must be aligned (same grid
    /// and ranges); `src` is any array or section, of any rank, on a grid over the same ranks,
    /// and `subscripts` holds global indices of `src` (of the section, for a section). A
    /// replicated `src` is read from this rank's own copy where it has one.
    ///
    /// Collective over all ranks of `dst`'s grid communicator (see the module docs). `Err` on
    /// every rank if the arguments do not fit together, or if some rank holds a subscript
    /// outside `src` (then the message names it and the rank).
    pub fn build<T, D: Dimension, E: Dimension>(
        dst: &DArray<T, E>,
        src: &impl AsSection<T, D>,
        subscripts: &DArray<D::Pattern, E>,
    ) -> Result<GatherSchedule> {
        let (sa, sspans) = src.parts();
        GatherSchedule::build_parts(dst, sa, &sspans, subscripts)
    }

    fn build_parts<T, D: Dimension, E: Dimension>(
        dst: &DArray<T, E>,
        src: &DArray<T, D>,
        sspans: &[Span],
        subscripts: &DArray<D::Pattern, E>,
    ) -> Result<GatherSchedule> {
        const CALL: &str = "gather";
        if !dst.aligned_with(subscripts) {
            return Err(invalid(CALL, "the destination and the subscripts are not aligned (same grid and ranges)"));
        }
        if !dst.grid().same_ranks(src.grid()) {
            return Err(invalid(CALL, "the source's grid is over different ranks than the destination's"));
        }
        let comm = dst.grid().comm().clone();
        let me = comm.rank();
        let source = Locator::new(src, sspans);
        let src_free = untargeted(src.grid(), src.ranges());
        // Per peer, (offset in its source block, offset in my destination block).
        let mut wanted: Vec<Vec<(usize, usize)>> = vec![Vec::new(); comm.size()];
        let mut bad = None;
        let mut coords = vec![0; src.grid().ndims()];
        for_each_local(subscripts, |to, i, sub| {
            let sub = sub.clone().into_dimension();
            match source.locate(sub.slice(), &mut coords) {
                Ok(from) => {
                    for &g in &src_free {
                        coords[g] = replica(src.grid(), g, me);
                    }
                    wanted[src.grid().rank_at(&coords)].push((from, to));
                }
                Err(why) => {
                    bad.get_or_insert_with(|| {
                        format!("{CALL}: subscript {:?} at destination index {i:?} {why}", sub.slice())
                    });
                }
            }
        });
        let local = std::mem::take(&mut wanted[me]);
        // Ask each owner once per element, however many destination elements take it.
        let mut outgoing: Vec<Vec<u64>> = vec![Vec::new(); comm.size()];
        let mut recvs = Vec::new();
        for (peer, mut pairs) in wanted.into_iter().enumerate().filter(|(_, p)| !p.is_empty()) {
            pairs.sort_unstable();
            let mut unpack = Vec::with_capacity(pairs.len());
            for (from, to) in pairs {
                if outgoing[peer].last() != Some(&(from as u64)) {
                    outgoing[peer].push(from as u64);
                }
                unpack.push((outgoing[peer].len() - 1, to));
            }
            recvs.push(Incoming { peer, count: outgoing[peer].len(), unpack });
        }
        let incoming = negotiate(&comm, &outgoing, bad)?;
        let block = src.storage().0.len();
        let mut sends = Vec::new();
        for (peer, words) in incoming.iter().enumerate().filter(|(_, w)| !w.is_empty()) {
            sends.push((peer, check_offsets(CALL, peer, words, block)?));
        }
        Ok(GatherSchedule {
            exchange: Exchange { comm, sends, recvs, local },
            dst: Signature::of(dst, &dst.whole_spans()),
            src: Signature::of(src, sspans),
            bufs: Buffers::default(),
        })
    }

    /// Moves the data. `dst` and `src` must be the arrays (and section) the schedule was built
    /// for (checked; `Err` before any communication otherwise). A warm execution allocates no
    /// buffers.
    pub fn execute<T: Pod, D: Dimension, E: Dimension>(
        &mut self,
        dst: &mut DArray<T, E>,
        src: &impl AsSection<T, D>,
    ) -> Result<()> {
        let (sa, sspans) = src.parts();
        self.check("GatherSchedule::execute", dst, sa, &sspans)?;
        self.exchange.execute(sa.storage().0, dst.storage_mut().0, &mut self.bufs)
    }

    /// [`GatherSchedule::execute`] for serde elements (each peer's elements travel as one
    /// encoded vector).
    pub fn execute_obj<T, D: Dimension, E: Dimension>(
        &mut self,
        dst: &mut DArray<T, E>,
        src: &impl AsSection<T, D>,
    ) -> Result<()>
    where
        T: Serialize + DeserializeOwned + Clone,
    {
        let (sa, sspans) = src.parts();
        self.check("GatherSchedule::execute_obj", dst, sa, &sspans)?;
        self.exchange.execute_obj(sa.storage().0, dst.storage_mut().0)
    }

    fn check<T, D: Dimension, E: Dimension>(
        &self,
        call: &str,
        dst: &DArray<T, E>,
        src: &DArray<T, D>,
        sspans: &[Span],
    ) -> Result<()> {
        self.src.check(call, "source", src, sspans)?;
        self.dst.check(call, "destination", dst, &dst.whole_spans())
    }
}

impl ScatterSchedule {
    /// Builds `dst[subscripts[i]] = src[i]`. `src` and `subscripts` must be aligned (same grid
    /// and ranges); `dst` is any array or section, of any rank, on a grid over the same ranks,
    /// and `subscripts` holds global indices of `dst` (of the section, for a section). Every
    /// copy of a replicated `dst` receives; each copy of a replicated `src` serves its own
    /// share of the receivers, so every element is sent once to each receiver.
    ///
    /// Collective and checked like [`GatherSchedule::build`].
    pub fn build<T, D: Dimension, E: Dimension>(
        dst: &impl AsSection<T, D>,
        src: &DArray<T, E>,
        subscripts: &DArray<D::Pattern, E>,
    ) -> Result<ScatterSchedule> {
        let (da, dspans) = dst.parts();
        ScatterSchedule::build_parts(da, &dspans, src, subscripts)
    }

    fn build_parts<T, D: Dimension, E: Dimension>(
        dst: &DArray<T, D>,
        dspans: &[Span],
        src: &DArray<T, E>,
        subscripts: &DArray<D::Pattern, E>,
    ) -> Result<ScatterSchedule> {
        const CALL: &str = "scatter";
        if !src.aligned_with(subscripts) {
            return Err(invalid(CALL, "the source and the subscripts are not aligned (same grid and ranges)"));
        }
        if !dst.grid().same_ranks(src.grid()) {
            return Err(invalid(CALL, "the source's grid is over different ranks than the destination's"));
        }
        let comm = dst.grid().comm().clone();
        let me = comm.rank();
        let target = Locator::new(dst, dspans);
        let (dst_free, src_free) = (untargeted(dst.grid(), dst.ranges()), untargeted(src.grid(), src.ranges()));
        let my_src_coords = src.grid().coords().unwrap_or_default().to_vec();
        let shape = src.shape();
        // Per peer: the source offsets to pack, and for each the destination offset and the
        // row-major global index of `i` (which decides between writes to one element).
        let mut packs: Vec<Vec<usize>> = vec![Vec::new(); comm.size()];
        let mut outgoing: Vec<Vec<u64>> = vec![Vec::new(); comm.size()];
        // My own writes: (destination offset, index of `i`, source offset).
        let mut mine: Vec<(usize, u64, usize)> = Vec::new();
        let mut bad = None;
        let fixed: Vec<usize> = dst.grid().fixed().iter().map(|f| f.unwrap_or(0)).collect();
        let mut coords = fixed.clone();
        for_each_local(subscripts, |from, i, sub| {
            let sub = sub.clone().into_dimension();
            coords.copy_from_slice(&fixed);
            let to = match target.locate(sub.slice(), &mut coords) {
                Ok(to) => to,
                Err(why) => {
                    bad.get_or_insert_with(|| {
                        format!("{CALL}: subscript {:?} at source index {i:?} {why}", sub.slice())
                    });
                    return;
                }
            };
            let order = i.iter().zip(&shape).fold(0u64, |acc, (&g, &n)| acc * n as u64 + g as u64);
            // Every copy of a replicated destination receives, from the copy of the source
            // that serves it.
            for_each_coords(dst.grid(), &dst_free, &mut coords, &mut |coords| {
                let peer = dst.grid().rank_at(coords);
                if src_free.iter().any(|&g| replica(src.grid(), g, peer) != my_src_coords[g]) {
                    return;
                }
                if peer == me {
                    mine.push((to, order, from));
                } else {
                    packs[peer].push(from);
                    outgoing[peer].extend([to as u64, order]);
                }
            });
        });
        let incoming = negotiate(&comm, &outgoing, bad)?;
        // Every write to this rank's block, mine and the peers'.
        let block = dst.storage().0.len();
        let mut recvs = Vec::new();
        let mut writes: Vec<Write> =
            mine.into_iter().map(|(to, order, from)| Write { to, order, origin: Origin::Mine(from) }).collect();
        for (peer, words) in incoming.iter().enumerate().filter(|(_, w)| !w.is_empty()) {
            let offsets: Vec<u64> = words.iter().step_by(2).copied().collect();
            let targets = check_offsets(CALL, peer, &offsets, block)?;
            let slot = recvs.len();
            recvs.push(Incoming { peer, count: targets.len(), unpack: Vec::new() });
            for (k, (to, &order)) in targets.into_iter().zip(words.iter().skip(1).step_by(2)).enumerate() {
                writes.push(Write { to, order, origin: Origin::Peer(slot, k) });
            }
        }
        // Of the writes to one element, the largest index of `i` wins.
        writes.sort_unstable_by_key(|w| (w.to, w.order));
        let mut local = Vec::new();
        for (n, w) in writes.iter().enumerate() {
            if writes.get(n + 1).is_some_and(|next| next.to == w.to) {
                continue;
            }
            match w.origin {
                Origin::Peer(slot, k) => recvs[slot].unpack.push((k, w.to)),
                Origin::Mine(from) => local.push((from, w.to)),
            }
        }
        let sends: Vec<(usize, Vec<usize>)> = packs.into_iter().enumerate().filter(|(_, p)| !p.is_empty()).collect();
        Ok(ScatterSchedule {
            exchange: Exchange { comm, sends, recvs, local },
            dst: Signature::of(dst, dspans),
            src: Signature::of(src, &src.whole_spans()),
            bufs: Buffers::default(),
        })
    }

    /// Moves the data. `dst` and `src` must be the arrays (and section) the schedule was built
    /// for (checked; `Err` before any communication otherwise). A warm execution allocates no
    /// buffers.
    pub fn execute<T: Pod, D: Dimension, E: Dimension>(
        &mut self,
        dst: &mut impl AsSectionMut<T, D>,
        src: &DArray<T, E>,
    ) -> Result<()> {
        let (da, dspans) = dst.parts_mut();
        self.execute_parts(da, &dspans, src)
    }

    fn execute_parts<T: Pod, D: Dimension, E: Dimension>(
        &mut self,
        dst: &mut DArray<T, D>,
        dspans: &[Span],
        src: &DArray<T, E>,
    ) -> Result<()> {
        self.check("ScatterSchedule::execute", dst, dspans, src)?;
        self.exchange.execute(src.storage().0, dst.storage_mut().0, &mut self.bufs)
    }

    /// [`ScatterSchedule::execute`] for serde elements.
    pub fn execute_obj<T, D: Dimension, E: Dimension>(
        &mut self,
        dst: &mut impl AsSectionMut<T, D>,
        src: &DArray<T, E>,
    ) -> Result<()>
    where
        T: Serialize + DeserializeOwned + Clone,
    {
        let (da, dspans) = dst.parts_mut();
        self.execute_obj_parts(da, &dspans, src)
    }

    fn execute_obj_parts<T, D: Dimension, E: Dimension>(
        &mut self,
        dst: &mut DArray<T, D>,
        dspans: &[Span],
        src: &DArray<T, E>,
    ) -> Result<()>
    where
        T: Serialize + DeserializeOwned + Clone,
    {
        self.check("ScatterSchedule::execute_obj", dst, dspans, src)?;
        self.exchange.execute_obj(src.storage().0, dst.storage_mut().0)
    }

    fn check<T, D: Dimension, E: Dimension>(
        &self,
        call: &str,
        dst: &DArray<T, D>,
        dspans: &[Span],
        src: &DArray<T, E>,
    ) -> Result<()> {
        self.dst.check(call, "destination", dst, dspans)?;
        self.src.check(call, "source", src, &src.whole_spans())
    }
}

/// `dst[i] = src[subscripts[i]]` in one call: builds a [`GatherSchedule`], executes it once
/// and drops it (build one to repeat the same access pattern).
pub fn gather<T: Pod, D: Dimension, E: Dimension>(
    dst: &mut DArray<T, E>,
    src: &impl AsSection<T, D>,
    subscripts: &DArray<D::Pattern, E>,
) -> Result<()> {
    GatherSchedule::build(dst, src, subscripts)?.execute(dst, src)
}

/// [`gather`] for serde elements.
pub fn gather_obj<T, D: Dimension, E: Dimension>(
    dst: &mut DArray<T, E>,
    src: &impl AsSection<T, D>,
    subscripts: &DArray<D::Pattern, E>,
) -> Result<()>
where
    T: Serialize + DeserializeOwned + Clone,
{
    GatherSchedule::build(dst, src, subscripts)?.execute_obj(dst, src)
}

/// `dst[subscripts[i]] = src[i]` in one call (see [`ScatterSchedule`] for which write wins
/// when subscripts repeat).
pub fn scatter<T: Pod, D: Dimension, E: Dimension>(
    dst: &mut impl AsSectionMut<T, D>,
    src: &DArray<T, E>,
    subscripts: &DArray<D::Pattern, E>,
) -> Result<()> {
    let (da, dspans) = dst.parts_mut();
    ScatterSchedule::build_parts(da, &dspans, src, subscripts)?.execute_parts(da, &dspans, src)
}

/// [`scatter`] for serde elements.
pub fn scatter_obj<T, D: Dimension, E: Dimension>(
    dst: &mut impl AsSectionMut<T, D>,
    src: &DArray<T, E>,
    subscripts: &DArray<D::Pattern, E>,
) -> Result<()>
where
    T: Serialize + DeserializeOwned + Clone,
{
    let (da, dspans) = dst.parts_mut();
    ScatterSchedule::build_parts(da, &dspans, src, subscripts)?.execute_obj_parts(da, &dspans, src)
}

/// One write into a scatter's destination block: the offset, the row-major global index of the
/// `i` it comes from, and where its value comes from.
struct Write {
    to: usize,
    order: u64,
    origin: Origin,
}

enum Origin {
    /// This rank's source block, at this offset.
    Mine(usize),
    /// The `k`-th element of the message from `recvs[slot]`'s peer: `(slot, k)`.
    Peer(usize, usize),
}

/// Where the elements of an array (or section) are stored, from its metadata alone.
struct Locator<'a> {
    grid: &'a Grid,
    ranges: &'a [Range],
    spans: &'a [Span],
    /// The section's shape.
    shape: Vec<usize>,
}

impl<'a> Locator<'a> {
    fn new<T, D: Dimension>(array: &'a DArray<T, D>, spans: &'a [Span]) -> Locator<'a> {
        let shape = spans.iter().map(|s| s.count).collect();
        Locator { grid: array.grid(), ranges: array.ranges(), spans, shape }
    }

    /// For section index `index`: sets the grid coordinates of the dimensions the ranges target
    /// in `coords` (the others are left alone) and returns the element's offset in the stored
    /// block of a rank at those coordinates. `Err` says why the index is outside.
    fn locate(&self, index: &[usize], coords: &mut [usize]) -> std::result::Result<usize, String> {
        if index.len() != self.shape.len() || index.iter().zip(&self.shape).any(|(&i, &n)| i >= n) {
            return Err(format!("is outside the shape {:?}", self.shape));
        }
        let (mut offset, mut stride) = (0, 1);
        for ((range, span), &i) in self.ranges.iter().zip(self.spans).zip(index).rev() {
            let (coord, local) = range.owner(span.at(i));
            offset += (range.ghosts().0 + local) * stride;
            stride *= range.stored_len(coord);
            if let Some(g) = range.grid_dim() {
                coords[g] = coord;
            }
        }
        debug_assert!(self.grid.ndims() == coords.len());
        Ok(offset)
    }
}

/// Calls `f(stored offset, global index, element)` for each element of this rank's physical
/// segment of `array`, in local row-major order.
fn for_each_local<T, D: Dimension>(array: &DArray<T, D>, mut f: impl FnMut(usize, &[usize], &T)) {
    let Some(coords) = array.coords() else { return };
    let strides = array.storage().1;
    let ranges = array.ranges();
    let mut global = vec![0; ranges.len()];
    for (local, x) in array.local().indexed_iter() {
        let local = local.into_dimension();
        let mut offset = 0;
        for (d, &l) in local.slice().iter().enumerate() {
            offset += (ranges[d].ghosts().0 + l) * strides[d];
            global[d] = ranges[d].global(coords[d], l);
        }
        f(offset, &global, x);
    }
}
