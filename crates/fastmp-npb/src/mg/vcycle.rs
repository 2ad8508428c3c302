//! The multigrid hierarchy of one rank and NPB's V-cycle over it.

use super::charges;
use super::field::Field;
use super::gather::Gather;
use super::halo::Halo;
use super::layout::{Layout, ProcGrid};
use super::stencil::{self, Operator, Prolong, Rhs, Scratch, Smoother};

/// NPB's discrete Laplacian (the 27-point A of the specification).
pub const LAPLACIAN: Operator = Operator { center: -8.0 / 3.0, edge: 1.0 / 6.0, corner: 1.0 / 12.0 };

/// One level's fields: the correction `u` and the residual `r` (at the finest level, the
/// solution and its residual).
struct Level {
    layout: Layout,
    u: Field,
    r: Field,
}

/// The levels from 2³ up to the problem's grid, the right-hand side and the buffers every
/// operator reuses, so a cycle allocates nothing.
pub struct Multigrid {
    grid: ProcGrid,
    /// Coarsest first.
    levels: Vec<Level>,
    v: Field,
    smoother: Smoother,
    halo: Halo,
    /// Present when some levels are distributed and the coarser ones replicated.
    gather: Option<Gather>,
    scratch: Scratch,
    /// This rank's `Σ r²` of the last finest residual.
    residual_sum_of_squares: f64,
}

impl Multigrid {
    /// The hierarchy for an `edge³` problem, with the levels of at most `replicate_up_to`
    /// points per axis on every rank (see [`Layout::levels`]), and `u = v = 0`.
    pub fn new(grid: ProcGrid, edge: usize, smoother: Smoother, replicate_up_to: usize) -> Self {
        let layouts = Layout::levels(edge, &grid, replicate_up_to);
        let top = *layouts.last().expect("at least one level");
        let gather = layouts
            .windows(2)
            .find(|pair| turns_replicated(&pair[1], &pair[0]))
            .map(|pair| Gather::new(pair[1].extent.map(|n| n / 2), grid.comm().size()));
        let longest_row = layouts.iter().map(|l| l.extent[0] + 2).max().unwrap_or(0);
        // The finest residual is only ever read right behind the sweep that writes it where
        // the operators sweep the planes; each coarser one holds the restriction for the next
        // cycle.
        let levels = layouts.into_iter().map(|layout| {
            let finest_swept = layout.edge == edge && layout.sweeps_planes();
            let r = if finest_swept { Field::sweep(layout.extent) } else { Field::new(layout.extent) };
            Level { layout, u: Field::new(layout.extent), r }
        });
        Multigrid {
            halo: Halo::new(top.extent),
            gather,
            scratch: Scratch::new(longest_row),
            v: Field::new(top.extent),
            levels: levels.collect(),
            smoother,
            grid,
            residual_sum_of_squares: 0.0,
        }
    }

    fn top(&self) -> usize {
        self.levels.len() - 1
    }

    /// The grid's communicator.
    pub fn comm(&self) -> &fastmp::Comm {
        self.grid.comm()
    }

    /// Loads NPB's right-hand side into `v`. Collective.
    pub fn place_charges(&mut self) -> fastmp::Result<()> {
        let layout = self.levels[self.top()].layout;
        charges::place(&self.grid, &layout, &mut self.v)?;
        self.halo.refresh(&self.grid, &layout, &mut self.v)
    }

    /// Sets the solution to zero.
    pub fn clear_solution(&mut self) {
        let top = self.top();
        self.levels[top].u.fill(0.0);
    }

    /// `r = v − A u` on the finest level, and its restriction to the next level down, where
    /// the next V-cycle starts. Collective.
    ///
    /// Where a rank holds whole x-rows and y-columns, the two run in one sweep over the
    /// z-planes: each coarse plane is restricted as soon as the three fine planes under it
    /// are written; the last one waits for the residual's z-ghosts.
    pub fn residual(&mut self) -> fastmp::Result<()> {
        let top = self.top();
        let (coarser, finer) = self.levels.split_at_mut(top);
        let (coarse, level) = (&mut coarser[top - 1], &mut finer[0]);
        let (rhs, scratch) = (Rhs::Given(&self.v), &mut self.scratch);
        let wrapped = level.layout.wrapped_axes();
        let (target, target_wrapped) = restriction_target(&mut self.gather, &level.layout, coarse);
        if !level.layout.sweeps_planes() {
            self.residual_sum_of_squares = stencil::residual(&LAPLACIAN, &level.u, rhs, &mut level.r, wrapped, scratch);
            self.halo.complete(&self.grid, &level.layout, &mut level.r)?;
            stencil::restrict(&level.r, target, target_wrapped, scratch);
        } else {
            let nz = level.layout.extent[2];
            self.residual_sum_of_squares = 0.0;
            for z in 1..=nz {
                self.residual_sum_of_squares +=
                    stencil::residual_plane(&LAPLACIAN, &level.u, rhs, &mut level.r, z, wrapped, scratch);
                if z >= 3 && z % 2 == 1 {
                    stencil::restrict_plane(&level.r, target, (z - 1) / 2, target_wrapped, scratch);
                }
            }
            self.halo.complete(&self.grid, &level.layout, &mut level.r)?;
            stencil::restrict_plane(&level.r, target, nz / 2, target_wrapped, scratch);
        }
        finish_restriction(&self.grid, &mut self.halo, &mut self.gather, &level.layout, coarse)
    }

    /// The L2 norm of the last finest residual, `sqrt(Σ r² / edge³)`, on every rank.
    /// Collective.
    pub fn residual_norm(&self) -> fastmp::Result<f64> {
        let mut total = [0.0];
        self.comm().allreduce(&[self.residual_sum_of_squares], &mut total, fastmp::op::Sum)?;
        let edge = self.levels[self.top()].layout.edge as f64;
        Ok((total[0] / edge.powi(3)).sqrt())
    }

    /// One V-cycle, after [`Multigrid::residual`]: restrict the residual on down to 2³,
    /// smooth there, then on each level up interpolate the correction, take the residual and
    /// smooth. Collective.
    pub fn vcycle(&mut self) -> fastmp::Result<()> {
        let top = self.top();
        for k in (1..top).rev() {
            self.restrict(k)?;
        }
        let bottom = &mut self.levels[0];
        bottom.u.fill(0.0);
        stencil::smooth(&self.smoother, &bottom.r, &mut bottom.u, bottom.layout.wrapped_axes(), &mut self.scratch);
        self.halo.complete(&self.grid, &bottom.layout, &mut bottom.u)?;
        for k in 1..top {
            self.correct(k, Prolong::Assign)?;
        }
        self.correct(top, Prolong::Add)
    }

    /// Level `k`'s step up the V: `u = Q u_{k−1}` (or `u += Q u_{k−1}`), `r = rhs − A u`
    /// (the finest level's rhs is `v`; a coarser one's is the restricted residual in `r`),
    /// `u += S r`.
    ///
    /// Where a rank holds whole x-rows and y-columns, the three run in one sweep over the
    /// z-planes, each plane's data reused while in cache: interpolate plane z + 1, take the
    /// residual on plane z, smooth plane z − 1. The two planes next to the z-ghosts are
    /// smoothed last, once the residual's z-ghosts have arrived.
    fn correct(&mut self, k: usize, mode: Prolong) -> fastmp::Result<()> {
        let rhs = if k == self.top() { Rhs::Given(&self.v) } else { Rhs::InPlace };
        let (coarser, finer) = self.levels.split_at_mut(k);
        let (coarse, level) = (&coarser[k - 1], &mut finer[0]);
        let window = window(&coarse.layout, &level.layout);
        let (a, s, scratch) = (&LAPLACIAN, &self.smoother, &mut self.scratch);
        let wrapped = level.layout.wrapped_axes();
        if !level.layout.sweeps_planes() {
            stencil::prolong(&coarse.u, window, &mut level.u, mode, scratch);
            stencil::residual(a, &level.u, rhs, &mut level.r, wrapped, scratch);
            self.halo.complete(&self.grid, &level.layout, &mut level.r)?;
            stencil::smooth(s, &level.r, &mut level.u, wrapped, scratch);
            return self.halo.complete(&self.grid, &level.layout, &mut level.u);
        }
        let nz = level.layout.extent[2];
        for z in 0..=1 {
            stencil::prolong_plane(&coarse.u, window, &mut level.u, z, mode, scratch);
        }
        for z in 1..=nz {
            stencil::prolong_plane(&coarse.u, window, &mut level.u, z + 1, mode, scratch);
            stencil::residual_plane(a, &level.u, rhs, &mut level.r, z, wrapped, scratch);
            if z >= 3 {
                stencil::smooth_plane(s, &level.r, &mut level.u, z - 1, wrapped, scratch);
            }
        }
        self.halo.complete(&self.grid, &level.layout, &mut level.r)?;
        stencil::smooth_plane(s, &level.r, &mut level.u, 1, wrapped, scratch);
        if nz >= 2 {
            stencil::smooth_plane(s, &level.r, &mut level.u, nz, wrapped, scratch);
        }
        self.halo.complete(&self.grid, &level.layout, &mut level.u)
    }

    /// The residual of level `k` restricted to level `k − 1`.
    fn restrict(&mut self, k: usize) -> fastmp::Result<()> {
        let (coarser, finer) = self.levels.split_at_mut(k);
        let (coarse, fine) = (&mut coarser[k - 1], &finer[0]);
        let (target, wrapped) = restriction_target(&mut self.gather, &fine.layout, coarse);
        stencil::restrict(&fine.r, target, wrapped, &mut self.scratch);
        finish_restriction(&self.grid, &mut self.halo, &mut self.gather, &fine.layout, coarse)
    }
}

/// Whether restriction from `fine` to `coarse` crosses from the distributed levels to the
/// replicated ones.
fn turns_replicated(fine: &Layout, coarse: &Layout) -> bool {
    fine.is_distributed() && !coarse.is_distributed()
}

/// Where a restriction from `fine` writes, and how many axes it wraps there: the coarse
/// level's residual, or, where the coarse level is replicated, this rank's block in the
/// gather (no ghosts).
fn restriction_target<'a>(
    gather: &'a mut Option<Gather>,
    fine: &Layout,
    coarse: &'a mut Level,
) -> (&'a mut Field, usize) {
    match gather {
        Some(gather) if turns_replicated(fine, &coarse.layout) => (gather.block_mut(), 0),
        _ => (&mut coarse.r, coarse.layout.wrapped_axes()),
    }
}

/// Completes the coarse residual after a restriction into [`restriction_target`]: the
/// allgather of the blocks into a replicated level and all its ghosts, or the ghosts the
/// operator did not wrap. Collective.
fn finish_restriction(
    grid: &ProcGrid,
    halo: &mut Halo,
    gather: &mut Option<Gather>,
    fine: &Layout,
    coarse: &mut Level,
) -> fastmp::Result<()> {
    match gather {
        Some(gather) if turns_replicated(fine, &coarse.layout) => {
            gather.share_blocks(grid, &mut coarse.r)?;
            halo.refresh(grid, &coarse.layout, &mut coarse.r)
        }
        _ => halo.complete(grid, &coarse.layout, &mut coarse.r),
    }
}

/// Where this rank's part of a coarse level lies in its coarse field, in array indices
/// relative to the coarse field's own block: nothing for a block of the same process grid,
/// the block's place in the whole level for a replicated coarse level.
fn window(coarse: &Layout, fine: &Layout) -> [usize; 3] {
    [0, 1, 2].map(|a| fine.offset[a] / 2 - coarse.offset[a])
}
