//! `write_halo`: fill ghost cells from the elements their owners hold (GA's
//! `GA_Update_ghosts`, HPJava's `writeHalo`). One phase: each ghost cell, corners included,
//! comes straight from its owner, one message per neighbour.

use bytemuck::Pod;
use fastmp::Result;
use ndarray::Dimension;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Signature, TAG};
use crate::array::DArray;
use crate::invalid;
use crate::plan::{Buffers, DimMap, Entry, Plan, Side, Source, build};
use crate::range::Range;

/// Which ghost cells a halo update fills: per dimension the widths `(below, above)` (at most the
/// range's ghost widths; default all of them) and whether the dimension wraps around (cyclic:
/// the ghosts beyond the last index hold the first ones; default none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Halo {
    widths: Option<Vec<(usize, usize)>>,
    wrap: Vec<bool>,
}

impl Halo {
    /// Every ghost cell, no wrap-around.
    pub fn all() -> Halo {
        Halo::default()
    }

    /// Only `widths[r] = (below, above)` ghost cells in dimension `r`.
    pub fn widths(mut self, widths: &[(usize, usize)]) -> Halo {
        self.widths = Some(widths.to_vec());
        self
    }

    /// Cyclic wrap-around in the dimensions where `wrap[r]` is true.
    pub fn wrap(mut self, wrap: &[bool]) -> Halo {
        self.wrap = wrap.to_vec();
        self
    }
}

/// A built halo update for arrays aligned with the one it was built for.
///
/// ```
/// use fastmp_darray::{DArray, Grid, Halo, HaloSchedule, Range};
/// fastmp::run(2, |world| {
///     let grid = Grid::new(&world, &[2])?;
///     let mut a = DArray::from_fn(&grid, [Range::ghost_block(8, &grid, 0, 1, 1)?], |i| i as i64)?;
///     let mut halo = HaloSchedule::build(&a, &Halo::all().wrap(&[true]))?;
///     halo.execute(&mut a)?;
///     // Rank 0 holds 0..4: its ghosts are 7 (wrapped) and 4.
///     let g = a.local_with_ghosts();
///     if world.rank() == 0 {
///         assert_eq!((g[0], g[5]), (7, 4));
///     }
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
#[derive(Debug)]
pub struct HaloSchedule {
    plan: Plan,
    array: Signature,
    bufs: Buffers,
}

impl HaloSchedule {
    /// Builds the update of `halo`'s ghost cells of `array`. Local: no communication. `Err` if
    /// `halo` asks for more ghost cells than a range stores or names too many dimensions.
    pub fn build<T, D: Dimension>(array: &DArray<T, D>, halo: &Halo) -> Result<HaloSchedule> {
        let ranges = array.ranges();
        let n = ranges.len();
        let widths: Vec<(usize, usize)> = match &halo.widths {
            Some(w) if w.len() != n => {
                return Err(invalid("write_halo", format!("{} widths for a {n}-dimensional array", w.len())));
            }
            Some(w) => w.clone(),
            None => ranges.iter().map(Range::ghosts).collect(),
        };
        if halo.wrap.len() > n {
            return Err(invalid(
                "write_halo",
                format!("wrap-around given for {} dimensions of a {n}-D array", halo.wrap.len()),
            ));
        }
        for (r, (range, &(lo, hi))) in ranges.iter().zip(&widths).enumerate() {
            let (glo, ghi) = range.ghosts();
            if lo > glo || hi > ghi {
                return Err(invalid(
                    "write_halo",
                    format!("widths ({lo}, {hi}) in dimension {r} exceed its ghost widths ({glo}, {ghi})"),
                ));
            }
        }
        let maps: Vec<DimMap> = ranges
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(r, (range, &w))| ghost_map(range, w, halo.wrap.get(r).copied().unwrap_or(false)))
            .collect();
        let strides = array.storage().1;
        let side = |strides| Side { grid: array.grid(), ranges, strides };
        let plan = build(&side(strides.clone()), &side(strides), &maps, true);
        Ok(HaloSchedule { plan, array: Signature::of(array, &array.whole_spans()), bufs: Buffers::default() })
    }

    /// Fills the ghost cells of `array`, which must be aligned with the array the schedule was
    /// built for (checked).
    pub fn execute<T: Pod, D: Dimension>(&mut self, array: &mut DArray<T, D>) -> Result<()> {
        self.check(array)?;
        self.plan.execute(Source::InPlace, array.storage_mut().0, TAG, &mut self.bufs)
    }

    /// [`HaloSchedule::execute`] for serde elements.
    pub fn execute_obj<T, D: Dimension>(&mut self, array: &mut DArray<T, D>) -> Result<()>
    where
        T: Serialize + DeserializeOwned + Clone,
    {
        self.check(array)?;
        self.plan.execute_obj(None, array.storage_mut().0, TAG)
    }

    fn check<T, D: Dimension>(&self, array: &DArray<T, D>) -> Result<()> {
        self.array.check("HaloSchedule::execute", "array", array, &array.whole_spans())
    }
}

/// One dimension of a halo update: every stored position of each coordinate's block within
/// `widths` of its physical segment, with the global index it mirrors; the physical positions
/// are optional (a block needs moving only if some dimension is a ghost).
fn ghost_map(range: &Range, (wlo, whi): (usize, usize), wrap: bool) -> DimMap {
    let n = range.extent() as isize;
    let lo = range.ghosts().0;
    (0..range.procs())
        .map(|c| {
            let len = range.local_len(c);
            if len == 0 {
                return Vec::new();
            }
            let first = range.global(c, 0) as isize;
            (lo - wlo..lo + len + whi)
                .filter_map(|pos| {
                    let optional = (lo..lo + len).contains(&pos);
                    if optional {
                        // A physical position: any format (a cyclic one's indices are not
                        // contiguous).
                        return Some(Entry { dst_pos: pos, src_global: range.global(c, pos - lo), optional });
                    }
                    // A ghost: only block ranges have them, and their indices are contiguous.
                    let g = first + pos as isize - lo as isize;
                    let g = if (0..n).contains(&g) {
                        g
                    } else if wrap {
                        g.rem_euclid(n)
                    } else {
                        return None;
                    };
                    Some(Entry { dst_pos: pos, src_global: g as usize, optional })
                })
                .collect()
        })
        .collect()
}

impl<T: Pod, D: Dimension> DArray<T, D> {
    /// Fills every ghost cell from its owner (no wrap-around); see [`HaloSchedule`] to reuse
    /// the schedule and [`DArray::write_halo_with`] for a subset or wrap-around.
    pub fn write_halo(&mut self) -> Result<()> {
        self.write_halo_with(&Halo::all())
    }

    /// Fills the ghost cells `halo` selects.
    pub fn write_halo_with(&mut self, halo: &Halo) -> Result<()> {
        HaloSchedule::build(self, halo)?.execute(self)
    }
}

impl<T, D: Dimension> DArray<T, D>
where
    T: Serialize + DeserializeOwned + Clone,
{
    /// [`DArray::write_halo_with`] for serde elements.
    pub fn write_halo_obj(&mut self, halo: &Halo) -> Result<()> {
        HaloSchedule::build(self, halo)?.execute_obj(self)
    }
}
