//! Data beyond slices of numbers (MPI's derived datatypes): a `#[repr(C)]` struct sent as raw
//! bytes (`Pod`, derived through `fastmp::bytemuck`), complex numbers reduced with a user
//! operation, `bool` and enums received with validation, strided layouts (a matrix column as
//! `layout::Vector`, a block of a grid as `layout::Subarray`, picked blocks as `layout::Indexed`),
//! `pack`/`unpack`, and serde objects for everything else.
//!
//! Needs at least 2 ranks. Run it with thread ranks (shm device) or one process per rank (tcp):
//!
//! ```text
//! FASTMP_NP=4 cargo run --example datatypes
//! fastmprun -np 4 --device tcp target/debug/examples/datatypes
//! ```

use fastmp::Error;
use fastmp::bytemuck::{CheckedBitPattern, NoUninit, Pod, Zeroable};
use fastmp::layout::{self, Indexed, Order, Subarray, Vector};
use fastmp::op::UserOp;
use fastmp::serde::{Deserialize, Serialize};

/// Plain data (MPI_Type_create_struct): no padding (the fields fill 8-byte units), so `Pod`.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[bytemuck(crate = "fastmp::bytemuck")]
#[repr(C)]
struct Particle {
    id: u32,
    charge: i32,
    pos: [f64; 3],
}

#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[bytemuck(crate = "fastmp::bytemuck")]
#[repr(C)]
struct Complex {
    re: f64,
    im: f64,
}

fn mul(a: Complex, b: Complex) -> Complex {
    Complex { re: a.re * b.re - a.im * b.im, im: a.re * b.im + a.im * b.re }
}

/// Not every byte is a valid `Phase`: it is sent as `NoUninit`, received with a check.
#[derive(Clone, Copy, Debug, PartialEq, NoUninit, CheckedBitPattern)]
#[bytemuck(crate = "fastmp::bytemuck")]
#[repr(u8)]
enum Phase {
    Setup = 1,
    Solve = 2,
}

/// Anything else (strings, vectors, nested data) moves as a serde object.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(crate = "fastmp::serde")]
struct Task {
    name: String,
    steps: Vec<u32>,
}

fn main() {
    fastmp::main(|world| {
        let (rank, size) = (world.rank(), world.size());
        if size < 2 {
            return Err(Error::InvalidArgument(format!("the datatypes example needs at least 2 ranks, not {size}")));
        }
        let particle = |r: usize| Particle { id: r as u32, charge: -(r as i32), pos: [r as f64, 0.5, -1.0] };
        // A 3 × size row-major matrix with element (i, j) = 10 i + j, on every rank.
        let cols = size;
        let matrix: Vec<f64> = (0..3 * cols).map(|k| (10 * (k / cols) + k % cols) as f64).collect();
        let column = Vector { count: 3, blocklength: 1, stride: cols };
        // The 2×2 block at (1, 1) of a 4×4 grid, and the block at (0, 0) it lands in.
        let block = |at: usize| Subarray {
            sizes: vec![4, 4],
            subsizes: vec![2, 2],
            starts: vec![at, at],
            order: Order::RowMajor,
        };
        let picks = Indexed { blocklengths: vec![2, 1], displacements: vec![5, 0] };

        if rank == 0 {
            let grid: Vec<i32> = (0..16).collect();
            for r in 1..size {
                world.send(&[particle(r)], r, 0)?;
                world.send(&[true, false, r % 2 == 1], r, 1)?;
                world.send(&[0u8, 1, 2], r, 2)?; // 2 is no bool: the receiver's check refuses it
                world.send_value(&Phase::Solve, r, 3)?;
                world.send_strided(&matrix[r..], &column, r, 4)?; // column r
                world.send_strided(&grid, &block(1), r, 5)?;
                world.send_strided(&grid, &picks, r, 6)?;
                world.send_obj(&Task { name: format!("task {r}"), steps: vec![1, 2, 3] }, r, 7)?;
            }
        } else {
            let mut got = [Particle::zeroed()];
            world.recv(&mut got, 0, 0)?;
            assert_eq!(got[0], particle(rank));

            let mut flags = [false; 3];
            world.recv_checked(&mut flags, 0, 1)?;
            assert_eq!(flags, [true, false, rank % 2 == 1]);
            let refused = world.recv_checked(&mut flags, 0, 2);
            assert!(matches!(refused, Err(Error::InvalidValue { index: 2, .. })), "{refused:?}");
            assert_eq!(world.recv_value::<Phase>(0, 3)?.0, Phase::Solve);
            assert_ne!(Phase::Setup, Phase::Solve);

            // Column `rank` arrives contiguous; received with the same layout, it lands in
            // column `rank` of a zeroed matrix.
            let mut mine = vec![0.0; matrix.len()];
            world.recv_strided(&mut mine[rank..], &column, 0, 4)?;
            assert_eq!(layout::pack(&column, &mine[rank..])?, [rank as f64, 10.0 + rank as f64, 20.0 + rank as f64]);

            let mut corner = [0i32; 16];
            world.recv_strided(&mut corner, &block(0), 0, 5)?;
            assert_eq!(corner[..6], [5, 6, 0, 0, 9, 10]);
            assert_eq!(world.recv_vec::<i32>(0, 6)?.0, [5, 6, 0]);

            let (task, _) = world.recv_obj::<Task>(0, 7)?;
            assert_eq!(task, Task { name: format!("task {rank}"), steps: vec![1, 2, 3] });
        }

        // Collectives take plain slices: pack the strided part, run the collective, unpack.
        let mut last_column = if rank == 0 { matrix.clone() } else { vec![0.0; matrix.len()] };
        let mut packed = layout::pack(&column, &last_column[cols - 1..])?;
        world.bcast(&mut packed, 0)?;
        layout::unpack(&column, &packed, &mut last_column[cols - 1..])?;
        assert_eq!(packed, [(cols - 1) as f64, (cols + 9) as f64, (cols + 19) as f64]);

        // Complex product over all ranks with a user operation (MPI_Op_create).
        let product = UserOp::commutative(|input: &[Complex], inout: &mut [Complex]| {
            inout.iter_mut().zip(input).for_each(|(b, &a)| *b = mul(a, *b));
        });
        let one_plus_i = Complex { re: 1.0, im: 1.0 };
        let mut total = [Complex::zeroed()];
        world.allreduce(&[one_plus_i], &mut total, &product)?;
        let expected = (1..size).fold(one_plus_i, |acc, _| mul(acc, one_plus_i));
        assert_eq!(total[0], expected);

        println!("datatypes: rank {rank}/{size} ok ((1+i)^{size} = {} + {}i)", total[0].re, total[0].im);
        Ok(())
    });
}
