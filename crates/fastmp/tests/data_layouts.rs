//! Strided layouts (vector, subarray, indexed) against an independent reference: the element
//! indices each layout selects, computed the slow way. Pack/unpack by proptest (no job); the
//! transfers (strided ↔ contiguous ↔ strided) and their errors on both devices.

mod common;

use common::Rng;
use fastmp::layout::{Indexed, Layout, Order, Subarray, Vector, pack, unpack};
use fastmp::{Comm, Config, DeviceKind, Error, Result};
use proptest::prelude::*;

fn run<R: Send>(dev: DeviceKind, np: usize, f: impl Fn(Comm) -> Result<R> + Sync) -> Vec<R> {
    Config::new().device(dev).np(np).run(f).unwrap()
}

/// The element indices a layout selects, in message order, computed from the definitions.
trait Reference {
    fn indices(&self) -> Vec<usize>;
}

impl Reference for Vector {
    fn indices(&self) -> Vec<usize> {
        (0..self.count).flat_map(|i| (0..self.blocklength).map(move |j| i * self.stride + j)).collect()
    }
}

impl Reference for Indexed {
    fn indices(&self) -> Vec<usize> {
        self.displacements.iter().zip(&self.blocklengths).flat_map(|(&d, &l)| d..d + l).collect()
    }
}

impl Reference for Subarray {
    fn indices(&self) -> Vec<usize> {
        let n = self.sizes.len();
        // Dimensions from the fastest-varying one.
        let dims: Vec<usize> = match self.order {
            Order::RowMajor => (0..n).rev().collect(),
            Order::ColumnMajor => (0..n).collect(),
        };
        let mut stride = vec![0; n];
        let mut s = 1;
        for &d in &dims {
            stride[d] = s;
            s *= self.sizes[d];
        }
        let total: usize = self.subsizes.iter().product();
        let mut out = Vec::with_capacity(total);
        let mut idx = vec![0; n];
        for _ in 0..total {
            out.push((0..n).map(|d| (self.starts[d] + idx[d]) * stride[d]).sum());
            for &d in &dims {
                idx[d] += 1;
                if idx[d] < self.subsizes[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        out
    }
}

fn vector() -> impl Strategy<Value = Vector> {
    (0usize..6, 0usize..5, 0usize..9).prop_map(|(count, blocklength, stride)| Vector { count, blocklength, stride })
}

fn subarray() -> impl Strategy<Value = Subarray> {
    (prop::collection::vec((1usize..6, 0usize..6, 0usize..6), 1..4), any::<bool>()).prop_map(|(dims, fortran)| {
        let sizes: Vec<usize> = dims.iter().map(|d| d.0).collect();
        let subsizes: Vec<usize> = dims.iter().map(|d| d.1 % (d.0 + 1)).collect();
        let starts = dims.iter().zip(&subsizes).map(|(d, &sub)| d.2 % (d.0 - sub + 1)).collect();
        let order = if fortran { Order::ColumnMajor } else { Order::RowMajor };
        Subarray { sizes, subsizes, starts, order }
    })
}

fn indexed() -> impl Strategy<Value = Indexed> {
    prop::collection::vec((0usize..4, 0usize..20), 0..6).prop_map(|blocks| Indexed {
        blocklengths: blocks.iter().map(|b| b.0).collect(),
        displacements: blocks.iter().map(|b| b.1).collect(),
    })
}

/// Checks `pack` and (for receivable layouts) `unpack` against the reference on a buffer
/// `slack` elements longer than the layout's extent.
fn check_pack_unpack<L: Layout + Reference>(layout: &L, slack: usize) {
    let want = layout.indices();
    let extent = layout.extent().unwrap();
    assert_eq!(layout.elements().unwrap(), want.len());
    assert_eq!(extent, want.iter().map(|&i| i + 1).max().unwrap_or(0).max(extent), "extent covers every element");
    let buf: Vec<u32> = (0..(extent + slack) as u32).map(|i| i * 7 + 1).collect();
    let packed = pack(layout, &buf).unwrap();
    assert_eq!(packed, want.iter().map(|&i| buf[i]).collect::<Vec<_>>());

    let mut seen = vec![false; buf.len()];
    let distinct = want.iter().all(|&i| !std::mem::replace(&mut seen[i], true));
    let mut out = vec![0u32; buf.len()];
    match unpack(layout, &packed, &mut out) {
        Ok(()) => {
            assert!(distinct, "{layout:?} overlaps, unpack must refuse it");
            for (i, &x) in out.iter().enumerate() {
                assert_eq!(x, if seen[i] { buf[i] } else { 0 }, "element {i} of {layout:?}");
            }
        }
        Err(e) => {
            assert!(!distinct, "{layout:?}: {e}");
            assert!(e.to_string().contains("overlap"), "{e}");
        }
    }
    if extent > 0 {
        let err = pack(layout, &buf[..extent - 1]).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("pack") && msg.contains(&format!("{layout:?}")), "{msg}");
        assert!(msg.contains(&format!("at least {extent} elements, the buffer has {}", extent - 1)), "{msg}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn vector_packs_like_the_reference(v in vector(), slack in 0usize..3) {
        check_pack_unpack(&v, slack);
    }

    #[test]
    fn subarray_packs_like_the_reference(s in subarray(), slack in 0usize..3) {
        check_pack_unpack(&s, slack);
    }

    #[test]
    fn indexed_packs_like_the_reference(ix in indexed(), slack in 0usize..3) {
        check_pack_unpack(&ix, slack);
    }
}

#[test]
fn invalid_layouts_are_errors_naming_the_problem() {
    let bad = Subarray { sizes: vec![4, 4], subsizes: vec![2, 3], starts: vec![1, 2], order: Order::RowMajor };
    let msg = pack(&bad, &[0u8; 16]).unwrap_err().to_string();
    assert!(
        msg.contains("pack: Subarray") && msg.contains("dimension 1: starts 2 + subsizes 3 exceeds sizes 4"),
        "{msg}"
    );
    let bad = Subarray { sizes: vec![4, 4], subsizes: vec![2], starts: vec![1, 1], order: Order::RowMajor };
    assert!(bad.elements().unwrap_err().to_string().contains("same, nonzero number of dimensions"));
    let bad = Indexed { blocklengths: vec![1, 2], displacements: vec![0] };
    assert!(pack(&bad, &[0u8; 4]).unwrap_err().to_string().contains("2 blocklengths for 1 displacements"));
    let huge = Vector { count: usize::MAX, blocklength: 2, stride: 2 };
    assert!(huge.elements().unwrap_err().to_string().contains("overflows"));
    let column = Vector { count: 3, blocklength: 1, stride: 4 };
    let msg = unpack(&column, &[1u8, 2], &mut [0u8; 9]).unwrap_err().to_string();
    assert!(
        msg.contains(
            "unpack: Vector { count: 3, blocklength: 1, stride: 4 } selects 3 elements, the packed data has 2"
        ),
        "{msg}"
    );
}

/// A layout's transfer, `(comm, buffer, send?, peer)`, boxed because `Layout` is not object safe.
type Transfer = Box<dyn Fn(&Comm, &mut [u64], bool, usize) -> Result<()>>;

/// A random layout of any kind whose extent fits `cap`, with its reference indices.
fn random_layout(rng: &mut Rng, cap: usize) -> (Transfer, Vec<usize>) {
    fn wrap<L: Layout + Reference + 'static>(l: L) -> (Transfer, Vec<usize>) {
        let idx = l.indices();
        let f = move |c: &Comm, buf: &mut [u64], send: bool, peer: usize| {
            if send { c.send_strided(buf, &l, peer, 0) } else { c.recv_strided(buf, &l, peer, 0).map(drop) }
        };
        (Box::new(f), idx)
    }
    loop {
        let (f, idx) = match rng.below(3) {
            0 => {
                let (count, blocklength) = (rng.range(0, 40), rng.range(1, 5));
                wrap(Vector { count, blocklength, stride: blocklength + rng.range(0, 30) })
            }
            1 => {
                let n = rng.range(1, 3);
                let sizes: Vec<usize> = (0..n).map(|_| rng.range(1, 40)).collect();
                let subsizes: Vec<usize> = sizes.iter().map(|&s| rng.range(0, s)).collect();
                let starts = sizes.iter().zip(&subsizes).map(|(&s, &sub)| rng.range(0, s - sub)).collect();
                let order = if rng.chance(50) { Order::RowMajor } else { Order::ColumnMajor };
                wrap(Subarray { sizes, subsizes, starts, order })
            }
            _ => {
                // Distinct, shuffled blocks: a receivable layout.
                let mut blocks: Vec<(usize, usize)> =
                    (0..rng.range(0, 12)).map(|i| (i * 8 + rng.range(0, 3), rng.range(0, 5))).collect();
                for i in (1..blocks.len()).rev() {
                    blocks.swap(i, rng.range(0, i));
                }
                wrap(Indexed {
                    displacements: blocks.iter().map(|b| b.0).collect(),
                    blocklengths: blocks.iter().map(|b| b.1).collect(),
                })
            }
        };
        if idx.iter().all(|&i| i < cap) {
            return (f, idx);
        }
    }
}

fn value(seed: u64, i: usize) -> u64 {
    seed << 32 | i as u64
}

/// Random layouts both ways: strided → contiguous, contiguous → strided, strided → strided
/// (another layout of the same element count), checked element by element, including the
/// elements a receive layout must leave alone.
fn strided_transfers_match_the_reference(dev: DeviceKind) {
    const CAP: usize = 2000;
    const ROUNDS: u64 = 30;
    run(dev, 2, |world| {
        let me = world.rank();
        for round in 0..ROUNDS {
            // Both ranks draw the same layouts.
            let mut rng = Rng::new(round);
            let (send_layout, send_idx) = random_layout(&mut rng, CAP);
            let (recv_layout, recv_idx) = loop {
                let (f, idx) = random_layout(&mut rng, CAP);
                if idx.len() == send_idx.len() {
                    break (f, idx);
                }
            };
            let mut src: Vec<u64> = (0..CAP).map(|i| value(round, i)).collect();
            let want: Vec<u64> = send_idx.iter().map(|&i| src[i]).collect();
            if me == 0 {
                send_layout(&world, &mut src, true, 1)?;
                world.send(&want, 1, 0)?;
                send_layout(&world, &mut src, true, 1)?;
            } else {
                let mut contiguous = vec![0u64; want.len()];
                let st = world.recv(&mut contiguous, 0, 0)?;
                assert_eq!(
                    (st.count::<u64>(), &contiguous),
                    (want.len(), &want),
                    "round {round}: strided → contiguous"
                );
                for what in ["contiguous → strided", "strided → strided"] {
                    let mut dst = vec![u64::MAX; CAP];
                    recv_layout(&world, &mut dst, false, 0)?;
                    let mut expect = vec![u64::MAX; CAP];
                    recv_idx.iter().zip(&want).for_each(|(&i, &x)| expect[i] = x);
                    assert!(dst == expect, "round {round}: {what}");
                }
            }
        }
        Ok(())
    });
}

/// The benchmark's shape: one column of a row-major matrix, above the eager limits.
fn matrix_column_both_ways(dev: DeviceKind) {
    const N: usize = 512;
    run(dev, 2, |world| {
        let column = Vector { count: N, blocklength: 1, stride: N };
        let mut m: Vec<f64> = (0..N * N).map(|i| i as f64).collect();
        let peer = 1 - world.rank();
        for round in 0..3 {
            let col = (round * 37 + world.rank()) % N;
            if world.rank() == 0 {
                world.send_strided(&m[col..], &column, peer, round as i32)?;
            } else {
                let from = (round * 37) % N;
                let before = m.clone();
                world.recv_strided(&mut m[col..], &column, peer, round as i32)?;
                for (i, (&x, &b)) in m.iter().zip(&before).enumerate() {
                    let want = if i % N == col { ((i / N) * N + from) as f64 } else { b };
                    assert_eq!(x, want, "element {i}");
                }
            }
        }
        Ok(())
    });
}

fn strided_errors(dev: DeviceKind) {
    run(dev, 2, |world| {
        let column = Vector { count: 4, blocklength: 1, stride: 3 };
        let short = [0u32; 9];
        let msg = world.send_strided(&short, &column, 1 - world.rank(), 0).unwrap_err().to_string();
        assert_eq!(
            msg,
            "invalid argument: send_strided: Vector { count: 4, blocklength: 1, stride: 3 } needs a buffer of at least 10 elements, the buffer has 9"
        );
        let overlapping = Vector { count: 2, blocklength: 3, stride: 2 };
        let msg = world.recv_strided(&mut [0u32; 8], &overlapping, 0, 0).unwrap_err().to_string();
        assert!(
            msg.contains("recv_strided: Vector { count: 2, blocklength: 3, stride: 2 }") && msg.contains("overlap"),
            "{msg}"
        );
        let err = world.send_strided(&[0u32; 10], &column, 5, 0).unwrap_err();
        assert!(matches!(err, Error::RankOutOfRange { rank: 5, size: 2 }), "{err}");
        if world.rank() == 0 {
            // Overlapping blocks may be sent: element 2 twice.
            world.send_strided(&[1u32, 2, 3, 4, 5], &overlapping, 1, 1)?;
            world.send(&[1u32, 2, 3, 4, 5], 1, 2)?;
            world.send(&[6u32, 7], 1, 3)?;
            world.send(&[1u8, 2, 3], 1, 4)?;
        } else {
            let mut got = [0u32; 6];
            world.recv(&mut got, 0, 1)?;
            assert_eq!(got, [1, 2, 3, 3, 4, 5]);
            let mut buf = [0u32; 10];
            let err = world.recv_strided(&mut buf, &column, 0, 2).unwrap_err();
            assert!(matches!(err, Error::Truncated { message_bytes: 20, capacity: 16, .. }), "{err}");
            // A shorter message fills the first selected elements.
            let st = world.recv_strided(&mut buf, &column, 0, 3)?;
            assert_eq!((st.count::<u32>(), buf), (2, [6, 0, 0, 7, 0, 0, 0, 0, 0, 0]));
            let err = world.recv_strided(&mut buf, &column, 0, 4).unwrap_err();
            assert!(matches!(err, Error::ElementSize { bytes: 3, elem_size: 4 }), "{err}");
        }
        Ok(())
    });
}

/// Element sizes without a fixed-size copy path (3 and 32 bytes) and one with (16).
fn odd_element_sizes(dev: DeviceKind) {
    fn column_round_trip<T: fastmp::bytemuck::Pod + PartialEq + std::fmt::Debug>(
        world: &Comm,
        make: impl Fn(usize) -> T,
    ) -> Result<()> {
        let layout = Vector { count: 5, blocklength: 2, stride: 3 };
        let src: Vec<T> = (0..14).map(&make).collect();
        if world.rank() == 0 {
            world.send_strided(&src, &layout, 1, 0)?;
        } else {
            let mut dst = vec![make(99); 14];
            let st = world.recv_strided(&mut dst, &layout, 0, 0)?;
            assert_eq!(st.count::<T>(), 10);
            for (i, x) in dst.iter().enumerate() {
                assert_eq!(*x, if i % 3 < 2 { make(i) } else { make(99) }, "element {i}");
            }
        }
        Ok(())
    }
    run(dev, 2, |world| {
        column_round_trip(&world, |i| [i as u8, 1, 2])?;
        column_round_trip(&world, |i| [i as u64, 7, 8, 9])?;
        column_round_trip(&world, |i| i as u128)
    });
}

/// The generic collective route: pack → collective → unpack.
fn collectives_through_pack(dev: DeviceKind) {
    run(dev, 3, |world| {
        let (rank, np) = (world.rank(), world.size());
        // Each rank owns column `rank` of a 4×3 row-major matrix; allgather assembles it.
        let column = Vector { count: 4, blocklength: 1, stride: np };
        let mut m = vec![0i64; 4 * np];
        for r in 0..4 {
            m[r * np + rank] = (10 * r + rank) as i64;
        }
        let mine = pack(&column, &m[rank..])?;
        let mut all = vec![0i64; 4 * np];
        world.allgather(&mine, &mut all)?;
        for (c, block) in all.chunks(4).enumerate() {
            unpack(&column, block, &mut m[c..])?;
        }
        assert_eq!(m, (0..4 * np).map(|i| (10 * (i / np) + i % np) as i64).collect::<Vec<_>>());
        Ok(())
    });
}

macro_rules! device_suite {
    ($($name:ident),* $(,)?) => {
        mod shm {
            $(#[test] fn $name() { super::$name(fastmp::DeviceKind::Shm) })*
        }
        mod tcp {
            $(#[test] fn $name() { super::$name(fastmp::DeviceKind::Tcp) })*
        }
    };
}

device_suite!(
    strided_transfers_match_the_reference,
    matrix_column_both_ways,
    strided_errors,
    odd_element_sizes,
    collectives_through_pack,
);
