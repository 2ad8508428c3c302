//! Ghost refresh: after an operator writes a level's interior, each rank fills its ghost
//! layer from the faces of its neighbours, one axis after the other (x, y, z). Each axis's
//! faces span the ghosts of the axes before it, so edges and corners arrive too, with no
//! diagonal messages. An axis no rank shares wraps around inside the block instead
//! (the grid is periodic).

use fastmp::Comm;

use super::field::Field;
use super::layout::{AXES, Layout, ProcGrid};

/// The reusable face buffers of the x and y exchanges (z faces are whole planes, sent and
/// received in place).
pub struct Halo {
    send_lo: Vec<f64>,
    send_hi: Vec<f64>,
    recv_lo: Vec<f64>,
    recv_hi: Vec<f64>,
}

impl Halo {
    /// Buffers for fields of at most `extent` interior points per axis.
    pub fn new(extent: [usize; AXES]) -> Self {
        let [nx, ny, nz] = extent;
        let len = (ny * nz).max((nx + 2) * nz);
        Halo { send_lo: vec![0.0; len], send_hi: vec![0.0; len], recv_lo: vec![0.0; len], recv_hi: vec![0.0; len] }
    }

    /// Fills the ghost layer of `field`, laid out as `layout`. Every rank calls it for a
    /// distributed level (each exchanges with its neighbours); a replicated level needs no
    /// messages.
    pub fn refresh(&mut self, grid: &ProcGrid, layout: &Layout, field: &mut Field) -> fastmp::Result<()> {
        self.refresh_from(0, grid, layout, field)
    }

    /// Completes the ghost layer of `field` after an operator that wrapped the layout's
    /// leading local axes itself ([`Layout::wrapped_axes`]).
    pub fn complete(&mut self, grid: &ProcGrid, layout: &Layout, field: &mut Field) -> fastmp::Result<()> {
        self.refresh_from(layout.wrapped_axes(), grid, layout, field)
    }

    /// The ghosts across `first` and the axes after it.
    fn refresh_from(
        &mut self,
        first: usize,
        grid: &ProcGrid,
        layout: &Layout,
        field: &mut Field,
    ) -> fastmp::Result<()> {
        for axis in first..AXES {
            if layout.procs[axis] == 1 {
                wrap(field, axis);
            } else if axis == AXES - 1 {
                swap_planes(grid, field)?;
            } else {
                self.swap_packed(grid, axis, field)?;
            }
        }
        Ok(())
    }

    /// The x or y exchange: faces packed into the send buffers, ghosts unpacked from the
    /// receive buffers.
    fn swap_packed(&mut self, grid: &ProcGrid, axis: usize, field: &mut Field) -> fastmp::Result<()> {
        let n = field.extent()[axis];
        let len = face_len(field, axis);
        let (send_lo, send_hi) = (&mut self.send_lo[..len], &mut self.send_hi[..len]);
        let (recv_lo, recv_hi) = (&mut self.recv_lo[..len], &mut self.recv_hi[..len]);
        pack(field, axis, 1, send_lo);
        pack(field, axis, n, send_hi);
        swap(grid, axis, send_lo, send_hi, recv_lo, recv_hi)?;
        unpack(field, axis, 0, recv_lo);
        unpack(field, axis, n + 1, recv_hi);
        Ok(())
    }
}

/// The z exchange, straight between the field's planes: they are contiguous.
fn swap_planes(grid: &ProcGrid, field: &mut Field) -> fastmp::Result<()> {
    let (ghost_lo, first, last, ghost_hi) = field.z_ghosts_and_faces();
    swap(grid, AXES - 1, first, last, ghost_lo, ghost_hi)
}

/// Sends the lower face down and the upper face up along `axis`, and receives the ghosts
/// from the other sides. The tag tells the two directions apart when both neighbours are
/// the same rank.
fn swap(
    grid: &ProcGrid,
    axis: usize,
    send_lo: &[f64],
    send_hi: &[f64],
    recv_lo: &mut [f64],
    recv_hi: &mut [f64],
) -> fastmp::Result<()> {
    let (lo, hi) = grid.neighbours(axis);
    let (upward, downward) = (2 * axis as i32, 2 * axis as i32 + 1);
    let comm: &Comm = grid.comm();
    comm.scope(|s| {
        let from_lo = s.irecv(recv_lo, lo, upward)?;
        let from_hi = s.irecv(recv_hi, hi, downward)?;
        let to_hi = s.isend(send_hi, hi, upward)?;
        let to_lo = s.isend(send_lo, lo, downward)?;
        for request in [from_lo, from_hi, to_hi, to_lo] {
            request.wait()?;
        }
        Ok(())
    })
}

/// Points in a face across `axis`: the interior of the later axes, everything (ghosts
/// included) of the earlier ones.
fn face_len(field: &Field, axis: usize) -> usize {
    let [nx, ny, nz] = field.extent();
    match axis {
        0 => ny * nz,
        1 => (nx + 2) * nz,
        _ => field.plane_len(),
    }
}

/// Copies the face at array index `at` along `axis` (x or y) into `buf`.
fn pack(field: &Field, axis: usize, at: usize, buf: &mut [f64]) {
    let [_, ny, nz] = field.extent();
    if axis == 0 {
        let rows = (1..=nz).flat_map(|z| (1..=ny).map(move |y| (y, z)));
        for (slot, (y, z)) in buf.iter_mut().zip(rows) {
            *slot = field.row(y, z)[at];
        }
    } else {
        for (chunk, z) in buf.chunks_exact_mut(field.row_len()).zip(1..=nz) {
            chunk.copy_from_slice(field.row(at, z));
        }
    }
}

/// Copies `buf` into the face at array index `at` along `axis` (x or y).
fn unpack(field: &mut Field, axis: usize, at: usize, buf: &[f64]) {
    let [_, ny, nz] = field.extent();
    if axis == 0 {
        let rows = (1..=nz).flat_map(|z| (1..=ny).map(move |y| (y, z)));
        for (&value, (y, z)) in buf.iter().zip(rows) {
            field.row_mut(y, z)[at] = value;
        }
    } else {
        for (chunk, z) in buf.chunks_exact(field.row_len()).zip(1..=nz) {
            field.row_mut(at, z).copy_from_slice(chunk);
        }
    }
}

/// The periodic ghosts of an axis this rank holds whole: each ghost is the opposite face.
fn wrap(field: &mut Field, axis: usize) {
    let [_, ny, nz] = field.extent();
    match axis {
        0 => (1..=nz).for_each(|z| (1..=ny).for_each(|y| field.wrap_row(y, z))),
        1 => (1..=nz).for_each(|z| field.wrap_plane(z)),
        _ => {
            field.copy_plane(nz, 0);
            field.copy_plane(1, nz + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(global: [usize; 3]) -> f64 {
        global.iter().fold(0.0, |acc, &c| acc * 1000.0 + c as f64)
    }

    /// A field whose every point holds a code of its global position, ghosts zero.
    fn coded(layout: &Layout) -> Field {
        let mut f = Field::new(layout.extent);
        let [nx, ny, nz] = layout.extent;
        for z in 1..=nz {
            for y in 1..=ny {
                for x in 1..=nx {
                    let g = [0, 1, 2].map(|a| [x, y, z][a] - 1 + layout.offset[a]);
                    f.set(x, y, z, code(g));
                }
            }
        }
        f
    }

    /// After a refresh every ghost holds the code of the periodic point it stands for.
    fn ghosts_match_their_periodic_points(np: usize, replicated: bool) {
        fastmp::run(np, move |world| {
            let grid = ProcGrid::new(&world)?;
            let layout = if replicated { Layout::replicated(8) } else { Layout::distributed(8, &grid) };
            let mut field = coded(&layout);
            Halo::new(layout.extent).refresh(&grid, &layout, &mut field)?;
            let [nx, ny, nz] = layout.extent;
            for z in 0..nz + 2 {
                for y in 0..ny + 2 {
                    for x in 0..nx + 2 {
                        let g = [0, 1, 2].map(|a| ([x, y, z][a] + layout.offset[a] + 8 - 1) % 8);
                        assert_eq!(field.at(x, y, z), code(g), "({x}, {y}, {z}) on rank {}", world.rank());
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn ghosts_are_the_periodic_neighbours_points() {
        for np in [1, 2, 4, 8] {
            ghosts_match_their_periodic_points(np, false);
        }
        ghosts_match_their_periodic_points(4, true);
    }
}
