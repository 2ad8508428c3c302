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
}

impl Multigrid {
    /// The hierarchy for an `edge³` problem, with the levels of at most `replicate_up_to`
    /// points per axis on every rank (see [`Layout::levels`]), and `u = v = 0`.
    pub fn new(grid: ProcGrid, edge: usize, smoother: Smoother, replicate_up_to: usize) -> Self {
        let layouts = Layout::levels(edge, &grid, replicate_up_to);
        let top = *layouts.last().expect("at least one level");
        let gather =
            layouts.windows(2).find(|pair| !pair[0].is_distributed() && pair[1].is_distributed()).map(|pair| {
                let block = pair[1].extent.map(|n| n / 2);
                Gather::new(block, grid.comm().size())
            });
        let longest_row = layouts.iter().map(|l| l.extent[0] + 2).max().unwrap_or(0);
        let levels = layouts.into_iter().map(|layout| Level {
            layout,
            u: Field::new(layout.extent),
            r: Field::new(layout.extent),
        });
        Multigrid {
            halo: Halo::new(top.extent),
            gather,
            scratch: Scratch::new(longest_row),
            v: Field::new(top.extent),
            levels: levels.collect(),
            smoother,
            grid,
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

    /// `r = v − A u` on the finest level. Collective.
    pub fn residual(&mut self) -> fastmp::Result<()> {
        let top = self.top();
        let level = &mut self.levels[top];
        let wrapped = level.layout.wrapped_axes();
        stencil::residual(&LAPLACIAN, &level.u, Rhs::Given(&self.v), &mut level.r, wrapped, &mut self.scratch);
        self.halo.complete(&self.grid, &level.layout, &mut level.r)
    }

    /// The L2 norm of the finest residual, `sqrt(Σ r² / edge³)`, on every rank. Collective.
    pub fn residual_norm(&self) -> fastmp::Result<f64> {
        let level = &self.levels[self.top()];
        let local = level.r.interior_sum_of_squares();
        let mut total = [0.0];
        self.comm().allreduce(&[local], &mut total, fastmp::op::Sum)?;
        Ok((total[0] / (level.layout.edge as f64).powi(3)).sqrt())
    }

    /// One V-cycle, given the finest residual: restrict it down to 2³, smooth there, then on
    /// each level up interpolate the correction, take the residual and smooth. Collective.
    pub fn vcycle(&mut self) -> fastmp::Result<()> {
        let top = self.top();
        for k in (1..=top).rev() {
            self.restrict(k)?;
        }
        let bottom = &mut self.levels[0];
        bottom.u.fill(0.0);
        stencil::smooth(&self.smoother, &bottom.r, &mut bottom.u, bottom.layout.wrapped_axes(), &mut self.scratch);
        self.halo.complete(&self.grid, &bottom.layout, &mut bottom.u)?;
        for k in 1..top {
            self.prolong(k, Prolong::Assign);
            let level = &mut self.levels[k];
            let wrapped = level.layout.wrapped_axes();
            stencil::residual(&LAPLACIAN, &level.u, Rhs::InPlace, &mut level.r, wrapped, &mut self.scratch);
            self.halo.complete(&self.grid, &level.layout, &mut level.r)?;
            self.smooth(k)?;
        }
        self.prolong(top, Prolong::Add);
        self.residual()?;
        self.smooth(top)
    }

    /// `u = u + S r` on level `k`.
    fn smooth(&mut self, k: usize) -> fastmp::Result<()> {
        let level = &mut self.levels[k];
        stencil::smooth(&self.smoother, &level.r, &mut level.u, level.layout.wrapped_axes(), &mut self.scratch);
        self.halo.complete(&self.grid, &level.layout, &mut level.u)
    }

    /// The residual of level `k` restricted to level `k − 1`.
    fn restrict(&mut self, k: usize) -> fastmp::Result<()> {
        let (coarser, finer) = self.levels.split_at_mut(k);
        let (coarse, fine) = (&mut coarser[k - 1], &finer[0]);
        if fine.layout.is_distributed() && !coarse.layout.is_distributed() {
            let gather = self.gather.as_mut().expect("a gather where the levels turn replicated");
            stencil::restrict(&fine.r, gather.block_mut(), 0, &mut self.scratch);
            gather.share_blocks(&self.grid, &mut coarse.r)?;
            self.halo.refresh(&self.grid, &coarse.layout, &mut coarse.r)
        } else {
            stencil::restrict(&fine.r, &mut coarse.r, coarse.layout.wrapped_axes(), &mut self.scratch);
            self.halo.complete(&self.grid, &coarse.layout, &mut coarse.r)
        }
    }

    /// The correction of level `k − 1` interpolated onto level `k`, ghosts included.
    fn prolong(&mut self, k: usize, mode: Prolong) {
        let (coarser, finer) = self.levels.split_at_mut(k);
        let (coarse, fine) = (&coarser[k - 1], &mut finer[0]);
        stencil::prolong(&coarse.u, window(&coarse.layout, &fine.layout), &mut fine.u, mode, &mut self.scratch);
    }
}

/// Where this rank's part of a coarse level lies in its coarse field, in array indices
/// relative to the coarse field's own block: nothing for a block of the same process grid,
/// the block's place in the whole level for a replicated coarse level.
fn window(coarse: &Layout, fine: &Layout) -> [usize; 3] {
    [0, 1, 2].map(|a| fine.offset[a] / 2 - coarse.offset[a])
}
