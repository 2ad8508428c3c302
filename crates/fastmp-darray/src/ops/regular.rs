//! Remap (any distribution or section to any other) and shift/cshift: section-to-section
//! copies, which differ only in which source index each destination index takes.

use bytemuck::Pod;
use fastmp::Result;
use ndarray::Dimension;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Signature, TAG};
use crate::array::DArray;
use crate::invalid;
use crate::plan::{Buffers, DimMap, Entry, Plan, Side, build};
use crate::range::Range;
use crate::section::{AsSection, AsSectionMut, Span};

/// A built remap (HPJava's `Remap`): copies a source section into a destination section of the
/// same shape, whatever their distributions, broadcasting into every copy of a replicated
/// destination.
///
/// ```
/// use fastmp_darray::{DArray, Grid, Range, RemapSchedule};
/// fastmp::run(3, |world| {
///     let grid = Grid::new(&world, &[3])?;
///     let block = DArray::from_fn(&grid, [Range::block(10, &grid, 0)?], |i| i as f64)?;
///     let mut cyclic = DArray::from_elem(&grid, [Range::cyclic(10, &grid, 0)?], 0.0)?;
///     let mut remap = RemapSchedule::build(&cyclic, &block)?;
///     for _ in 0..3 {
///         remap.execute(&mut cyclic, &block)?;
///     }
///     assert!(cyclic.overall().all(|(i, &x)| x == i as f64));
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
#[derive(Debug)]
pub struct RemapSchedule {
    plan: Plan,
    dst: Signature,
    src: Signature,
    bufs: Buffers,
}

/// A built `shift` or `cshift` along one dimension.
#[derive(Debug)]
pub struct ShiftSchedule(RemapSchedule);

impl RemapSchedule {
    /// Builds the schedule for `dst ← src`. Local: every rank computes its part from the
    /// arrays' metadata. `Err` (on every rank alike) if the shapes differ or the grids are over
    /// different communicators.
    pub fn build<T, D: Dimension>(dst: &impl AsSection<T, D>, src: &impl AsSection<T, D>) -> Result<RemapSchedule> {
        RemapSchedule::shifted("remap", dst, src, None)
    }

    /// `shift`: along `dim`, `(dim, amount, circular)`; `None`: a plain remap.
    fn shifted<T, D: Dimension>(
        call: &str,
        dst: &impl AsSection<T, D>,
        src: &impl AsSection<T, D>,
        shift: Option<(usize, isize, bool)>,
    ) -> Result<RemapSchedule> {
        let (da, dspans) = dst.parts();
        let (sa, sspans) = src.parts();
        let dshape: Vec<usize> = dspans.iter().map(|s| s.count).collect();
        let sshape: Vec<usize> = sspans.iter().map(|s| s.count).collect();
        if dshape != sshape {
            return Err(invalid(call, format!("the destination has shape {dshape:?}, the source {sshape:?}")));
        }
        if !da.grid().same_ranks(sa.grid()) {
            return Err(invalid(call, "the arrays' grids are over different communicators"));
        }
        if let Some((dim, _, _)) = shift
            && dim >= dshape.len()
        {
            return Err(invalid(call, format!("dimension {dim} does not exist in a {}-D array", dshape.len())));
        }
        let maps: Vec<DimMap> = (0..dshape.len())
            .map(|r| {
                let (amount, circular) = match shift {
                    Some((dim, amount, circular)) if dim == r => (amount, circular),
                    _ => (0, false),
                };
                section_map(&da.ranges()[r], &dspans[r], &sspans[r], amount, circular)
            })
            .collect();
        let dst_side = Side { grid: da.grid(), ranges: da.ranges(), strides: da.storage().1 };
        let src_side = Side { grid: sa.grid(), ranges: sa.ranges(), strides: sa.storage().1 };
        Ok(RemapSchedule {
            plan: build(&dst_side, &src_side, &maps, false),
            dst: Signature::of(da, &dspans),
            src: Signature::of(sa, &sspans),
            bufs: Buffers::default(),
        })
    }

    /// Moves the data. `dst` and `src` must be the arrays and sections the schedule was built
    /// for (checked; `Err` before any communication otherwise).
    pub fn execute<T: Pod, D: Dimension>(
        &mut self,
        dst: &mut impl AsSectionMut<T, D>,
        src: &impl AsSection<T, D>,
    ) -> Result<()> {
        let (sa, sspans) = src.parts();
        let (da, dspans) = dst.parts_mut();
        self.src.check("RemapSchedule::execute", "source", sa, &sspans)?;
        self.dst.check("RemapSchedule::execute", "destination", da, &dspans)?;
        let from = sa.storage().0;
        self.plan.execute(crate::plan::Source::Other(from), da.storage_mut().0, TAG, &mut self.bufs)
    }

    /// [`RemapSchedule::execute`] for serde elements (each peer's elements travel as one
    /// encoded vector).
    pub fn execute_obj<T, D: Dimension>(
        &mut self,
        dst: &mut impl AsSectionMut<T, D>,
        src: &impl AsSection<T, D>,
    ) -> Result<()>
    where
        T: Serialize + DeserializeOwned + Clone,
    {
        let (sa, sspans) = src.parts();
        let (da, dspans) = dst.parts_mut();
        self.src.check("RemapSchedule::execute_obj", "source", sa, &sspans)?;
        self.dst.check("RemapSchedule::execute_obj", "destination", da, &dspans)?;
        self.plan.execute_obj(Some(sa.storage().0), da.storage_mut().0, TAG)
    }
}

impl ShiftSchedule {
    /// Builds `shift` (edge-off: `circular == false`) or `cshift` along dimension `dim`:
    /// `dst[.., i, ..] = src[.., i + amount, ..]`; edge-off leaves destination elements whose
    /// source index falls outside the array unchanged, circular wraps it around.
    pub fn build<T, D: Dimension>(
        dst: &impl AsSection<T, D>,
        src: &impl AsSection<T, D>,
        amount: isize,
        dim: usize,
        circular: bool,
    ) -> Result<ShiftSchedule> {
        let call = if circular { "cshift" } else { "shift" };
        RemapSchedule::shifted(call, dst, src, Some((dim, amount, circular))).map(ShiftSchedule)
    }

    /// Moves the data (see [`RemapSchedule::execute`]).
    pub fn execute<T: Pod, D: Dimension>(
        &mut self,
        dst: &mut impl AsSectionMut<T, D>,
        src: &impl AsSection<T, D>,
    ) -> Result<()> {
        self.0.execute(dst, src)
    }

    /// Moves serde elements (see [`RemapSchedule::execute_obj`]).
    pub fn execute_obj<T, D: Dimension>(
        &mut self,
        dst: &mut impl AsSectionMut<T, D>,
        src: &impl AsSection<T, D>,
    ) -> Result<()>
    where
        T: Serialize + DeserializeOwned + Clone,
    {
        self.0.execute_obj(dst, src)
    }
}

/// One dimension of a section copy: destination section index `i` takes source section index
/// `i + shift` (wrapped if `circular`, skipped if outside otherwise).
fn section_map(dst: &Range, dspan: &Span, sspan: &Span, shift: isize, circular: bool) -> DimMap {
    let n = dspan.count as isize;
    let mut map: DimMap = vec![Vec::new(); dst.procs()];
    // Any amount: a circular one reduced first, an edge-off one saturating (far off the edge).
    let shift = if circular && n > 0 { shift.rem_euclid(n) } else { shift };
    for i in 0..n {
        let j = i.saturating_add(shift);
        let j = if circular {
            j.rem_euclid(n)
        } else if (0..n).contains(&j) {
            j
        } else {
            continue;
        };
        let (cd, local) = dst.owner(dspan.at(i as usize));
        map[cd].push(Entry { dst_pos: dst.ghosts().0 + local, src_global: sspan.at(j as usize), optional: false });
    }
    map
}

/// `dst ← src` for any distributions and sections of the same shape (HPJava's `remap`).
pub fn remap<T: Pod, D: Dimension>(dst: &mut impl AsSectionMut<T, D>, src: &impl AsSection<T, D>) -> Result<()> {
    let mut schedule = RemapSchedule::build(&SectionOf::of(dst), src)?;
    schedule.execute(dst, src)
}

/// [`remap`] for serde elements.
pub fn remap_obj<T, D: Dimension>(dst: &mut impl AsSectionMut<T, D>, src: &impl AsSection<T, D>) -> Result<()>
where
    T: Serialize + DeserializeOwned + Clone,
{
    let mut schedule = RemapSchedule::build(&SectionOf::of(dst), src)?;
    schedule.execute_obj(dst, src)
}

/// Edge-off shift along `dim`: `dst[.., i, ..] = src[.., i + amount, ..]` where `i + amount`
/// is inside the array; other destination elements are unchanged.
pub fn shift<T: Pod, D: Dimension>(
    dst: &mut impl AsSectionMut<T, D>,
    src: &impl AsSection<T, D>,
    amount: isize,
    dim: usize,
) -> Result<()> {
    let mut schedule = ShiftSchedule::build(&SectionOf::of(dst), src, amount, dim, false)?;
    schedule.execute(dst, src)
}

/// Circular shift along `dim`: `dst[.., i, ..] = src[.., (i + amount) mod n, ..]`.
pub fn cshift<T: Pod, D: Dimension>(
    dst: &mut impl AsSectionMut<T, D>,
    src: &impl AsSection<T, D>,
    amount: isize,
    dim: usize,
) -> Result<()> {
    let mut schedule = ShiftSchedule::build(&SectionOf::of(dst), src, amount, dim, true)?;
    schedule.execute(dst, src)
}

/// [`shift`] for serde elements.
pub fn shift_obj<T, D: Dimension>(
    dst: &mut impl AsSectionMut<T, D>,
    src: &impl AsSection<T, D>,
    amount: isize,
    dim: usize,
) -> Result<()>
where
    T: Serialize + DeserializeOwned + Clone,
{
    let mut schedule = ShiftSchedule::build(&SectionOf::of(dst), src, amount, dim, false)?;
    schedule.execute_obj(dst, src)
}

/// [`cshift`] for serde elements.
pub fn cshift_obj<T, D: Dimension>(
    dst: &mut impl AsSectionMut<T, D>,
    src: &impl AsSection<T, D>,
    amount: isize,
    dim: usize,
) -> Result<()>
where
    T: Serialize + DeserializeOwned + Clone,
{
    let mut schedule = ShiftSchedule::build(&SectionOf::of(dst), src, amount, dim, true)?;
    schedule.execute_obj(dst, src)
}

/// Element-wise copy between identically aligned arrays or sections (HPJava's
/// `HPutil.copy`): purely local, no communication. `Err` unless both have the same grid, ranges
/// and section; [`remap`] copies between any two.
pub fn copy<T: Clone, D: Dimension>(dst: &mut impl AsSectionMut<T, D>, src: &impl AsSection<T, D>) -> Result<()> {
    let (sa, sspans) = src.parts();
    let (da, dspans) = dst.parts_mut();
    if !da.aligned_with(sa) || dspans != sspans {
        return Err(invalid("copy", "the arrays (or sections) are not identically aligned; use remap"));
    }
    let dst_side = Side { grid: da.grid(), ranges: da.ranges(), strides: da.storage().1 };
    let src_side = Side { grid: sa.grid(), ranges: sa.ranges(), strides: sa.storage().1 };
    let maps: Vec<DimMap> =
        (0..dspans.len()).map(|r| section_map(&da.ranges()[r], &dspans[r], &sspans[r], 0, false)).collect();
    let plan = build(&dst_side, &src_side, &maps, false);
    debug_assert!(plan.sends.is_empty() && plan.recvs.is_empty());
    let from = sa.storage().0;
    let to = da.storage_mut().0;
    plan.copy_local(from, to);
    Ok(())
}

/// The metadata of a destination, borrowed only for building (so one-shot calls can build from
/// `dst` and then execute into it).
struct SectionOf<'a, T, D: Dimension> {
    array: &'a DArray<T, D>,
    spans: Vec<Span>,
}

impl<'a, T, D: Dimension> SectionOf<'a, T, D> {
    fn of(dst: &'a mut impl AsSectionMut<T, D>) -> SectionOf<'a, T, D> {
        let (array, spans) = dst.parts_mut();
        SectionOf { array, spans }
    }
}

impl<T, D: Dimension> AsSection<T, D> for SectionOf<'_, T, D> {
    fn parts(&self) -> (&DArray<T, D>, Vec<Span>) {
        (self.array, self.spans.clone())
    }
}
