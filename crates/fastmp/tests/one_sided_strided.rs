//! Strided one-sided operations (modelled on MPICH's strided_put/get/acc and transpose tests):
//! `Vector` and `Subarray` layouts on the origin, the target or both, checked element by
//! element against `layout::pack`/`unpack` computed locally; a matrix transpose through single
//! puts, through strided puts, and distributed over every rank. Both devices.

mod common;
mod one_sided_common;

use common::device_suite;
use fastmp::layout::{Layout, Order, Subarray, Vector, pack, unpack};
use fastmp::op::Sum;
use fastmp::window::NoOp;
use fastmp::window::{Assert, LockKind};
use fastmp::{DeviceKind, Result};
use one_sided_common::run;

const SENTINEL: i32 = -7;

/// What `target_part` must become when the elements `ol` selects from `origin` are put at
/// `disp` through `tl`.
fn expected_put(
    origin: &[i32],
    ol: &impl Layout,
    target_part: &[i32],
    disp: usize,
    tl: &impl Layout,
) -> Result<Vec<i32>> {
    let mut want = target_part.to_vec();
    unpack(tl, &pack(ol, origin)?, &mut want[disp..])?;
    Ok(want)
}

fn origin_data(rank: usize, len: usize) -> Vec<i32> {
    (0..len).map(|i| (rank * 1000 + i) as i32).collect()
}

/// Origin layout, target layout, displacement: rank 0 puts into rank 1 and gets back.
const CASES: [(Vector, Vector, usize); 3] = [
    // A column (stride 6) into a column.
    (Vector { count: 4, blocklength: 1, stride: 6 }, Vector { count: 4, blocklength: 1, stride: 6 }, 2),
    // Contiguous origin into a strided target and back.
    (Vector { count: 1, blocklength: 6, stride: 6 }, Vector { count: 3, blocklength: 2, stride: 5 }, 1),
    // Blocks of 3 into blocks of 2.
    (Vector { count: 2, blocklength: 3, stride: 4 }, Vector { count: 3, blocklength: 2, stride: 3 }, 0),
];

fn strided_put_get_vector(dev: DeviceKind) {
    const LEN: usize = 24;
    run(dev, 2, |world| {
        let me = world.rank();
        let win = world.win_allocate::<i32>(LEN)?;
        let origin = origin_data(me, LEN);
        for (ol, tl, disp) in CASES {
            win.local()?.fill(SENTINEL);
            win.fence(Assert::NONE)?;
            if me == 0 {
                win.put_strided(&origin, &ol, 1, disp, &tl)?;
            }
            win.fence(Assert::NONE)?;
            let want = expected_put(&origin_data(0, LEN), &ol, &[SENTINEL; LEN], disp, &tl)?;
            if me == 1 {
                assert_eq!(&*win.local()?, &want[..], "put_strided {ol:?} -> {tl:?} at {disp}");
            }
            // The mirror: get the target elements back into the origin layout's places.
            if me == 0 {
                let mut back = vec![0i32; LEN];
                win.get_strided(&mut back, &ol, 1, disp, &tl)?;
                let mut want_back = vec![0i32; LEN];
                unpack(&ol, &pack(&ol, &origin)?, &mut want_back)?;
                assert_eq!(back, want_back, "get_strided {ol:?} <- {tl:?} at {disp}");
            }
            win.fence(Assert::NOSUCCEED)?;
        }
        win.free()
    })
    .unwrap();
}

/// 3-d subarrays on both sides, under a lock, with the origin and target orders differing.
fn strided_subarray(dev: DeviceKind) {
    run(dev, 3, |world| {
        let (me, np) = (world.rank(), world.size());
        let sizes = vec![3, 4, 5];
        let len: usize = sizes.iter().product();
        let win = world.win_allocate::<i32>(len)?;
        win.local()?.fill(SENTINEL);
        world.barrier()?;
        let ol =
            Subarray { sizes: sizes.clone(), subsizes: vec![2, 2, 3], starts: vec![1, 0, 2], order: Order::RowMajor };
        let tl = Subarray {
            sizes: sizes.clone(),
            subsizes: vec![3, 2, 2],
            starts: vec![0, 1, 0],
            order: Order::ColumnMajor,
        };
        let origin = origin_data(me, len);
        let right = (me + 1) % np;
        win.lock(LockKind::Exclusive, right, Assert::NONE)?;
        win.put_strided(&origin, &ol, right, 0, &tl)?;
        win.flush(right)?;
        let mut back = vec![0i32; len];
        win.get_strided(&mut back, &ol, right, 0, &tl)?;
        win.unlock(right)?;
        let mut want_back = vec![0i32; len];
        unpack(&ol, &pack(&ol, &origin)?, &mut want_back)?;
        assert_eq!(back, want_back, "rank {me}: get_strided of the subarray");
        world.barrier()?;
        let left = (me + np - 1) % np;
        let want = expected_put(&origin_data(left, len), &ol, &vec![SENTINEL; len], 0, &tl)?;
        assert_eq!(&*win.local()?, &want[..], "rank {me}: subarray from {left}");
        win.free()
    })
    .unwrap();
}

/// Every rank accumulates a strided selection into rank 0 through a different target layout.
fn strided_accumulate(dev: DeviceKind) {
    const LEN: usize = 30;
    run(dev, 4, |world| {
        let (me, np) = (world.rank(), world.size());
        let win = world.win_allocate::<i32>(LEN)?;
        let ol = Vector { count: 5, blocklength: 2, stride: 3 };
        let tl = Vector { count: 2, blocklength: 5, stride: 7 };
        win.lock_all(Assert::NONE)?;
        win.accumulate_strided(&origin_data(me, LEN), &ol, 0, 3, &tl, Sum)?;
        win.unlock_all()?;
        world.barrier()?;
        if me == 0 {
            let mut want = [0i32; LEN];
            for r in 0..np {
                let mut one = vec![0i32; LEN];
                unpack(&tl, &pack(&ol, &origin_data(r, LEN))?, &mut one[3..])?;
                want.iter_mut().zip(&one).for_each(|(w, x)| *w += x);
            }
            assert_eq!(&*win.local()?, &want[..]);
        }
        win.free()
    })
    .unwrap();
}

/// Asserts equal contents, naming the first difference (the buffers are long).
fn same(got: &[i32], want: &[i32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        panic!("{what}: element {i} is {} instead of {}", got[i], want[i]);
    }
}

/// The request forms: every case of [`CASES`] (and one with stretches large enough to leave the
/// eager path) put, accumulated, got and get-accumulated through requests, several in flight at
/// once, one leaked with `mem::forget` (the scope's end still finishes it), one to `PROC_NULL`.
fn strided_requests(dev: DeviceKind) {
    const LEN: usize = 24;
    const BIG: usize = 3 * 20_000;
    let big = (
        Vector { count: 3, blocklength: 20_000, stride: 20_000 },
        Vector { count: 2, blocklength: 30_000, stride: 30_000 },
        0,
    );
    run(dev, 3, |world| {
        let me = world.rank();
        let win = world.win_allocate::<i32>(BIG)?;
        let origin = origin_data(me, BIG);
        for (case, (ol, tl, disp)) in CASES.into_iter().chain([big]).enumerate() {
            let len = if case < CASES.len() { LEN } else { BIG };
            win.local()?.fill(SENTINEL);
            win.fence(Assert::NONE)?;
            if me == 0 {
                world.scope(|s| {
                    let put = s.rput_strided(&win, &origin[..len], &ol, 1, disp, &tl)?;
                    let acc = s.raccumulate_strided(&win, &origin[..len], &ol, 2, disp, &tl, Sum)?;
                    let mut none = s.rput_strided(&win, &origin[..len], &ol, fastmp::PROC_NULL, disp, &tl)?;
                    assert!(none.test()?.is_some(), "a request to PROC_NULL is complete at once");
                    std::mem::forget(acc);
                    put.wait().map(drop)
                })?;
            }
            win.fence(Assert::NONE)?;
            let from_zero = origin_data(0, len);
            let mut want = expected_put(&from_zero, &ol, &vec![SENTINEL; BIG], disp, &tl)?;
            if me == 2 {
                want.iter_mut().for_each(|w| {
                    if *w != SENTINEL {
                        *w += SENTINEL
                    }
                });
            }
            if me > 0 {
                same(&win.local()?, &want, &format!("rank {me}, case {case}: {ol:?} -> {tl:?} at {disp}"));
            }
            // The checks above read what the requests below change.
            win.fence(Assert::NONE)?;
            if me == 0 {
                let mut back = vec![0i32; len];
                let mut previous = vec![0i32; len];
                let mut fetched = vec![0i32; len];
                world.scope(|s| {
                    let get = s.rget_strided(&win, &mut back, &ol, 1, disp, &tl)?;
                    let prev =
                        s.rget_accumulate_strided(&win, &origin[..len], &mut previous, &ol, 2, disp, &tl, Sum)?;
                    get.wait()?;
                    prev.wait().map(drop)
                })?;
                world.scope(|s| {
                    s.rget_accumulate_strided(&win, &[], &mut fetched, &ol, 2, disp, &tl, NoOp)?.wait().map(drop)
                })?;
                let mut selected = vec![0i32; len];
                unpack(&ol, &pack(&ol, &origin[..len])?, &mut selected)?;
                same(&back, &selected, &format!("case {case}: rget_strided"));
                let mut want_previous = vec![0i32; len];
                let sums: Vec<i32> = pack(&ol, &origin[..len])?.iter().map(|x| x + SENTINEL).collect();
                unpack(&ol, &sums, &mut want_previous)?;
                same(&previous, &want_previous, &format!("case {case}: rget_accumulate_strided's previous values"));
                let doubled: Vec<i32> = sums.iter().zip(pack(&ol, &origin[..len])?).map(|(s, x)| s + x).collect();
                let mut want_fetched = vec![0i32; len];
                unpack(&ol, &doubled, &mut want_fetched)?;
                same(&fetched, &want_fetched, &format!("case {case}: rget_accumulate_strided with NoOp"));
            }
            win.fence(Assert::NOSUCCEED)?;
        }
        win.free()
    })
    .unwrap();
}

/// The request forms check as the blocking ones do, before anything moves.
fn strided_request_errors(dev: DeviceKind) {
    run(dev, 2, |world| {
        let win = world.win_allocate::<i32>(16)?;
        let origin = [1i32; 16];
        let (mut into, mut short) = ([0i32; 16], [0i32; 4]);
        let three = Vector { count: 3, blocklength: 1, stride: 2 };
        let four = Vector { count: 4, blocklength: 1, stride: 2 };
        let overlapping = Vector { count: 2, blocklength: 3, stride: 1 };
        let six = Vector { count: 1, blocklength: 6, stride: 6 };
        world.scope(|s| {
            // Outside an epoch.
            assert!(s.rput_strided(&win, &origin, &three, 1, 0, &three).is_err());
            win.lock_all(Assert::NONE)?;
            let count = s.rput_strided(&win, &origin, &three, 1, 0, &four).err().expect("counts differ");
            assert!(count.to_string().contains("selects 3 elements but the target layout 4"), "{count}");
            let outside =
                s.raccumulate_strided(&win, &origin, &three, 1, 12, &three, Sum).err().expect("outside the part");
            assert!(outside.to_string().contains("outside rank 1's window part"), "{outside}");
            assert!(s.rget_strided(&win, &mut into, &overlapping, 1, 0, &six).is_err());
            assert!(s.rget_strided(&win, &mut short, &three, 1, 0, &three).is_err(), "origin too short");
            win.unlock_all()
        })?;
        win.free()
    })
    .unwrap();
}

const ROWS: usize = 5;
const COLS: usize = 7;

fn a(i: usize, j: usize) -> f64 {
    (i * COLS + j) as f64 + 0.25
}

/// MPICH transpose1/3: rank 0 holds A (ROWS×COLS), rank 1 receives Aᵀ (COLS×ROWS), once with
/// one put per element under fence, once with one strided put per row under a lock.
fn transpose_through_puts(dev: DeviceKind) {
    run(dev, 2, |world| {
        let me = world.rank();
        let win = world.win_allocate::<f64>(ROWS * COLS)?;
        let matrix: Vec<f64> = (0..ROWS * COLS).map(|k| a(k / COLS, k % COLS)).collect();
        let transposed: Vec<f64> = (0..ROWS * COLS).map(|k| a(k % ROWS, k / ROWS)).collect();
        // Element by element.
        win.fence(Assert::NONE)?;
        if me == 0 {
            for i in 0..ROWS {
                for j in 0..COLS {
                    win.put(&matrix[i * COLS + j..][..1], 1, j * ROWS + i)?;
                }
            }
        }
        win.fence(Assert::NOSUCCEED)?;
        if me == 1 {
            assert_eq!(&*win.local()?, &transposed[..], "transpose by single puts");
            win.local()?.fill(0.0);
        }
        world.barrier()?;
        // Row i of A (contiguous) becomes column i of Aᵀ (stride ROWS).
        if me == 0 {
            win.lock(LockKind::Exclusive, 1, Assert::NONE)?;
            let row = Vector { count: 1, blocklength: COLS, stride: COLS };
            let column = Vector { count: COLS, blocklength: 1, stride: ROWS };
            for i in 0..ROWS {
                win.put_strided(&matrix[i * COLS..(i + 1) * COLS], &row, 1, i, &column)?;
            }
            win.unlock(1)?;
        }
        world.barrier()?;
        if me == 1 {
            assert_eq!(&*win.local()?, &transposed[..], "transpose by strided puts");
        }
        win.free()
    })
    .unwrap();
}

/// An N×N matrix distributed by blocks of rows over every rank is transposed in place of the
/// same distribution: each rank puts each column of its block (a strided origin) into the
/// owner of that row of the transpose (a contiguous target run).
fn distributed_transpose(dev: DeviceKind) {
    const B: usize = 3;
    run(dev, 4, |world| {
        let (me, np) = (world.rank(), world.size());
        let n = B * np;
        let elem = |i: usize, j: usize| (i * n + j) as u32;
        let block: Vec<u32> = (0..B * n).map(|k| elem(me * B + k / n, k % n)).collect();
        let win = world.win_allocate::<u32>(B * n)?;
        win.fence(Assert::NOPRECEDE)?;
        let column = Vector { count: B, blocklength: 1, stride: n };
        let run_of_b = Vector { count: 1, blocklength: B, stride: B };
        for c in 0..n {
            // Column c of my rows is row c of the transpose, columns me*B.., at rank c / B.
            win.put_strided(&block[c..], &column, c / B, (c % B) * n + me * B, &run_of_b)?;
        }
        win.fence(Assert::NOSUCCEED)?;
        let want: Vec<u32> = (0..B * n).map(|k| elem(k % n, me * B + k / n)).collect();
        assert_eq!(&*win.local()?, &want[..], "rank {me}'s rows of the transpose");
        win.free()
    })
    .unwrap();
}

device_suite! {
    both: [
        strided_put_get_vector,
        strided_subarray,
        strided_accumulate,
        transpose_through_puts,
        distributed_transpose,
        strided_requests,
        strided_request_errors,
    ],
    tcp_ignored: [],
}
