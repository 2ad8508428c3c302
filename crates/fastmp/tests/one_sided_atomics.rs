//! Atomic one-sided operations (modelled on MPICH's lockcontention, fetchandadd, compare_and_swap,
//! fetch_and_op, get_accumulate and acc tests): a counter under an exclusive lock, a
//! fetch_and_op ticket counter, a compare_and_swap spin lock guarding a plain counter, every
//! accumulate operator on every element type, get_accumulate/fetch_and_op with NoOp and Replace,
//! compare_and_swap's bitwise comparison, and concurrent accumulates on neighbouring bytes of
//! one word. Both devices.

mod common;
mod one_sided_common;

use std::fmt::Debug;

use common::device_suite;
use fastmp::op::{Band, Bor, Bxor, Land, Lor, Lxor, Max, Min, NoOp, Prod, Replace, Sum};
use fastmp::window::{Assert, LockKind, RmaElement, RmaOp, Window};
use fastmp::{Comm, DeviceKind, Result};
use one_sided_common::run;

/// Read-modify-write (get, then put) under an exclusive lock: no increment is lost.
fn exclusive_lock_counter(dev: DeviceKind) {
    const N: usize = 30;
    run(dev, 4, |world| {
        let (me, np) = (world.rank(), world.size());
        let win = world.win_allocate::<u64>(1)?;
        for i in 0..N {
            let t = (i + me) % np;
            win.lock(LockKind::Exclusive, t, Assert::NONE)?;
            let mut v = [0u64];
            win.get(&mut v, t, 0)?;
            win.put(&[v[0] + 1], t, 0)?;
            win.unlock(t)?;
        }
        world.barrier()?;
        // Rank r increments this rank's counter for every i with (i + r) % np == me.
        let exact: usize = (0..np).map(|r| (0..N).filter(|i| (i + r) % np == me).count()).sum();
        assert_eq!(win.local()?[0], exact as u64, "rank {me}'s counter");
        let mut total = [0u64];
        world.allreduce(&[win.local()?[0]], &mut total, Sum)?;
        assert_eq!(total[0], (N * np) as u64);
        win.free()
    })
    .unwrap();
}

/// Every rank takes tickets from one counter: the final value is the number of tickets and
/// every fetched value is unique.
fn fetch_and_op_counter(dev: DeviceKind) {
    const N: usize = 50;
    run(dev, 4, |world| {
        let (me, np) = (world.rank(), world.size());
        let win = world.win_allocate::<u64>(2)?;
        win.lock_all(Assert::NONE)?;
        let mut mine = Vec::with_capacity(N);
        for _ in 0..N {
            mine.push(win.fetch_and_op(1, 0, 0, Sum)?);
            // A second counter, counting down from zero in i64 terms.
            win.fetch_and_op(u64::MAX, 1, 1 % np, Sum)?;
        }
        win.unlock_all()?;
        let mut all = vec![0u64; N * np];
        world.allgather(&mine, &mut all)?;
        all.sort_unstable();
        assert_eq!(all, (0..(N * np) as u64).collect::<Vec<_>>(), "fetched tickets are not 0..{}", N * np);
        world.barrier()?;
        if me == 0 {
            assert_eq!(win.local()?[0], (N * np) as u64);
        }
        if me == 1 % np {
            assert_eq!(win.local()?[1], ((N * np) as u64).wrapping_neg());
        }
        win.free()
    })
    .unwrap();
}

/// A spin lock made of compare_and_swap (lock word at rank 0) guards a counter that is updated
/// with plain get + put (at the last rank): no increment is lost.
fn compare_and_swap_spin_lock(dev: DeviceKind) {
    const N: usize = 20;
    run(dev, 4, |world| {
        let (me, np) = (world.rank(), world.size());
        let (lock_at, counter_at) = (0, np - 1);
        let win = world.win_allocate::<i64>(2)?;
        win.lock_all(Assert::NONE)?;
        let token = me as i64 + 1;
        let mut holders_seen = Vec::new();
        for _ in 0..N {
            loop {
                let prev = win.compare_and_swap(0, token, lock_at, 0)?;
                if prev == 0 {
                    break;
                }
                assert!((1..=np as i64).contains(&prev) && prev != token, "lock word holds {prev}");
                holders_seen.push(prev);
                std::thread::yield_now();
            }
            let mut v = [0i64];
            win.get(&mut v, counter_at, 1)?;
            win.put(&[v[0] + 1], counter_at, 1)?;
            win.flush(counter_at)?;
            let released = win.fetch_and_op(0, lock_at, 0, Replace)?;
            assert_eq!(released, token, "rank {me} released a lock it did not hold");
        }
        win.unlock_all()?;
        world.barrier()?;
        if me == counter_at {
            assert_eq!(win.local()?[1], (N * np) as i64);
        }
        if me == lock_at {
            assert_eq!(win.local()?[0], 0);
        }
        win.free()
    })
    .unwrap();
}

/// The element types of the suite, with the arithmetic the tests compute expectations with.
trait Num: RmaElement + PartialEq + Debug {
    const FLOAT: bool;
    fn of(v: i64) -> Self;
    fn sum(a: Self, b: Self) -> Self;
    fn prod(a: Self, b: Self) -> Self;
    fn min(a: Self, b: Self) -> Self;
    fn max(a: Self, b: Self) -> Self;
    fn is_zero(self) -> bool;
    fn band(a: Self, b: Self) -> Self;
    fn bor(a: Self, b: Self) -> Self;
    fn bxor(a: Self, b: Self) -> Self;
}

macro_rules! int_num {
    ($($t:ty),*) => { $(
        impl Num for $t {
            const FLOAT: bool = false;
            fn of(v: i64) -> Self { v as $t }
            fn sum(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            fn prod(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            fn min(a: Self, b: Self) -> Self { Ord::min(a, b) }
            fn max(a: Self, b: Self) -> Self { Ord::max(a, b) }
            fn is_zero(self) -> bool { self == 0 }
            fn band(a: Self, b: Self) -> Self { a & b }
            fn bor(a: Self, b: Self) -> Self { a | b }
            fn bxor(a: Self, b: Self) -> Self { a ^ b }
        }
    )* };
}
int_num!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! float_num {
    ($($t:ty),*) => { $(
        impl Num for $t {
            const FLOAT: bool = true;
            fn of(v: i64) -> Self { v as $t }
            fn sum(a: Self, b: Self) -> Self { a + b }
            fn prod(a: Self, b: Self) -> Self { a * b }
            fn min(a: Self, b: Self) -> Self { a.min(b) }
            fn max(a: Self, b: Self) -> Self { a.max(b) }
            fn is_zero(self) -> bool { self == 0.0 }
            fn band(_: Self, _: Self) -> Self { unreachable!() }
            fn bor(_: Self, _: Self) -> Self { unreachable!() }
            fn bxor(_: Self, _: Self) -> Self { unreachable!() }
        }
    )* };
}
float_num!(f32, f64);

const ELEMS: usize = 6;

/// Target element `i` before the accumulates (small, so integer products do not overflow and
/// float sums are exact; negative where the type allows).
fn initial<T: Num>(i: usize) -> T {
    T::of([3, -2, 0, 5, 1, -1][i])
}

/// What origin `r` contributes to element `i` (zeros included, for the logical operators).
fn contribution<T: Num>(r: usize, i: usize) -> T {
    T::of(((r * 7 + i * 3) % 5) as i64 - 1)
}

/// Every rank accumulates with `op` into every rank's part (one fence epoch); each part must
/// then hold the fold of all contributions over the initial values, whatever their order.
fn check_op<T: Num, O: RmaOp<T>>(
    world: &Comm,
    win: &Window<'_, T>,
    op: O,
    name: &str,
    f: &dyn Fn(T, T) -> T,
) -> Result<()> {
    let (me, np) = (world.rank(), world.size());
    win.local()?.iter_mut().enumerate().for_each(|(i, x)| *x = initial(i));
    win.fence(Assert::NONE)?;
    let data: Vec<T> = (0..ELEMS).map(|i| contribution(me, i)).collect();
    for t in 0..np {
        win.accumulate(&data, t, 0, op)?;
    }
    win.fence(Assert::NONE)?;
    let want: Vec<T> = (0..ELEMS).map(|i| (0..np).fold(initial::<T>(i), |acc, r| f(contribution(r, i), acc))).collect();
    assert_eq!(&*win.local()?, &want[..], "{name} on {}, rank {me}", std::any::type_name::<T>());
    // All ranks read their result before the next case resets it.
    win.fence(Assert::NONE)
}

fn logical<T: Num>(f: fn(bool, bool) -> bool) -> impl Fn(T, T) -> T {
    move |a: T, b: T| T::of(f(!a.is_zero(), !b.is_zero()) as i64)
}

fn common_ops<T: Num>(world: &Comm, win: &Window<'_, T>) -> Result<()>
where
    Sum: RmaOp<T>,
    Prod: RmaOp<T>,
    Min: RmaOp<T>,
    Max: RmaOp<T>,
    NoOp: RmaOp<T>,
    Replace: RmaOp<T>,
{
    check_op(world, win, Sum, "Sum", &T::sum)?;
    check_op(world, win, Prod, "Prod", &T::prod)?;
    check_op(world, win, Min, "Min", &T::min)?;
    check_op(world, win, Max, "Max", &T::max)?;
    check_op(world, win, NoOp, "NoOp", &|_, t| t)?;
    // Replace from one origin only (several would leave any one of their values).
    let (me, np) = (world.rank(), world.size());
    win.local()?.iter_mut().enumerate().for_each(|(i, x)| *x = initial(i));
    win.fence(Assert::NONE)?;
    if me == np - 1 {
        let data: Vec<T> = (0..ELEMS).map(|i| contribution(me, i)).collect();
        for t in 0..np {
            win.accumulate(&data, t, 0, Replace)?;
        }
    }
    win.fence(Assert::NONE)?;
    let want: Vec<T> = (0..ELEMS).map(|i| contribution(np - 1, i)).collect();
    assert_eq!(&*win.local()?, &want[..], "Replace on {}", std::any::type_name::<T>());
    win.fence(Assert::NONE)
}

fn int_ops<T: Num>(world: &Comm) -> Result<()>
where
    Sum: RmaOp<T>,
    Prod: RmaOp<T>,
    Min: RmaOp<T>,
    Max: RmaOp<T>,
    NoOp: RmaOp<T>,
    Replace: RmaOp<T>,
    Band: RmaOp<T>,
    Bor: RmaOp<T>,
    Bxor: RmaOp<T>,
    Land: RmaOp<T>,
    Lor: RmaOp<T>,
    Lxor: RmaOp<T>,
{
    let win = world.win_allocate::<T>(ELEMS)?;
    common_ops(world, &win)?;
    check_op(world, &win, Band, "Band", &T::band)?;
    check_op(world, &win, Bor, "Bor", &T::bor)?;
    check_op(world, &win, Bxor, "Bxor", &T::bxor)?;
    check_op(world, &win, Land, "Land", &logical::<T>(|a, b| a && b))?;
    check_op(world, &win, Lor, "Lor", &logical::<T>(|a, b| a || b))?;
    check_op(world, &win, Lxor, "Lxor", &logical::<T>(|a, b| a != b))?;
    win.fence(Assert::NOSUCCEED)?;
    win.free()
}

fn float_ops<T: Num>(world: &Comm) -> Result<()>
where
    Sum: RmaOp<T>,
    Prod: RmaOp<T>,
    Min: RmaOp<T>,
    Max: RmaOp<T>,
    NoOp: RmaOp<T>,
    Replace: RmaOp<T>,
{
    assert!(T::FLOAT);
    let win = world.win_allocate::<T>(ELEMS)?;
    common_ops(world, &win)?;
    win.fence(Assert::NOSUCCEED)?;
    win.free()
}

fn accumulate_every_op_on_every_type(dev: DeviceKind) {
    run(dev, 3, |world| {
        int_ops::<i8>(&world)?;
        int_ops::<i16>(&world)?;
        int_ops::<i32>(&world)?;
        int_ops::<i64>(&world)?;
        int_ops::<u8>(&world)?;
        int_ops::<u16>(&world)?;
        int_ops::<u32>(&world)?;
        int_ops::<u64>(&world)?;
        float_ops::<f32>(&world)?;
        float_ops::<f64>(&world)
    })
    .unwrap();
}

/// get_accumulate and fetch_and_op return the previous values; NoOp reads without changing,
/// Replace swaps. Serialised by an exclusive lock so every previous value is known.
fn get_accumulate_and_fetch_and_op(dev: DeviceKind) {
    run(dev, 2, |world| {
        let me = world.rank();
        let win = world.win_allocate::<i32>(4)?;
        win.local()?.copy_from_slice(&[10, 20, 30, 40]);
        world.barrier()?;
        if me == 1 {
            win.lock(LockKind::Exclusive, 0, Assert::NONE)?;
            let mut old = [0i32; 4];
            win.get_accumulate(&[1, 2, 3, 4], &mut old, 0, 0, Sum)?;
            assert_eq!(old, [10, 20, 30, 40]);
            win.get_accumulate(&[], &mut old, 0, 0, NoOp)?;
            assert_eq!(old, [11, 22, 33, 44], "get_accumulate with NoOp reads");
            win.get_accumulate(&[-1, -2], &mut old[..2], 0, 2, Replace)?;
            assert_eq!(old[..2], [33, 44]);
            win.get_accumulate(&[0, 0], &mut old[2..], 0, 0, NoOp)?;
            assert_eq!(old, [33, 44, 11, 22], "NoOp ignores its data");
            assert_eq!(win.fetch_and_op(100, 0, 0, NoOp)?, 11);
            assert_eq!(win.fetch_and_op(100, 0, 0, Replace)?, 11);
            assert_eq!(win.fetch_and_op(5, 0, 1, Min)?, 22);
            assert_eq!(win.fetch_and_op(50, 0, 1, Max)?, 5);
            assert_eq!(win.fetch_and_op(-3, 0, 3, Prod)?, -2);
            win.unlock(0)?;
        }
        world.barrier()?;
        if me == 0 {
            assert_eq!(&*win.local()?, &[100, 50, -1, 6]);
        }
        win.free()
    })
    .unwrap();
}

/// compare_and_swap compares bits: 0.0 is not -0.0, and a NaN matches the same NaN.
fn compare_and_swap_is_bitwise(dev: DeviceKind) {
    run(dev, 2, |world| {
        let me = world.rank();
        let f = world.win_allocate::<f64>(3)?;
        let u = world.win_allocate::<u16>(3)?;
        let nan = f64::from_bits(0x7ff8_0000_0000_0abc);
        f.local()?.copy_from_slice(&[-0.0, nan, 1.5]);
        u.local()?.copy_from_slice(&[7, 8, 9]);
        world.barrier()?;
        if me == 1 {
            f.lock(LockKind::Shared, 0, Assert::NONE)?;
            assert_eq!(f.compare_and_swap(0.0, 9.0, 0, 0)?.to_bits(), (-0.0f64).to_bits());
            assert_eq!(f.compare_and_swap(nan, 2.0, 0, 1)?.to_bits(), nan.to_bits());
            assert_eq!(f.compare_and_swap(1.0, 3.0, 0, 2)?, 1.5);
            f.unlock(0)?;
            u.lock(LockKind::Exclusive, 0, Assert::NONE)?;
            assert_eq!(u.compare_and_swap(8, 80, 0, 1)?, 8);
            assert_eq!(u.compare_and_swap(8, 81, 0, 1)?, 80);
            assert_eq!(u.compare_and_swap(9, 90, 0, 2)?, 9);
            u.unlock(0)?;
        }
        world.barrier()?;
        if me == 0 {
            let got: Vec<u64> = f.local()?.iter().map(|x| x.to_bits()).collect();
            assert_eq!(got, [(-0.0f64).to_bits(), 2.0f64.to_bits(), 1.5f64.to_bits()]);
            assert_eq!(&*u.local()?, &[7, 80, 90], "neighbouring u16 elements of one word");
        }
        f.free()?;
        u.free()
    })
    .unwrap();
}

/// Concurrent accumulates and fetch_and_ops on different bytes of one 8-byte word (each rank its
/// own byte) and on one shared byte compose: no update is lost to a neighbour's.
fn concurrent_accumulates_on_one_word(dev: DeviceKind) {
    const N: usize = 60;
    run(dev, 4, |world| {
        let (me, np) = (world.rank(), world.size());
        let win = world.win_allocate::<u8>(8)?;
        win.lock_all(Assert::NONE)?;
        for i in 0..N {
            for t in 0..np {
                if i % 2 == 0 {
                    win.accumulate(&[1], t, me, Sum)?;
                } else {
                    win.fetch_and_op(1, t, me, Sum)?;
                }
                win.accumulate(&[1], t, 7, Sum)?;
            }
        }
        win.unlock_all()?;
        world.barrier()?;
        let part = win.local()?;
        for r in 0..np {
            assert_eq!(part[r], N as u8, "rank {me}: byte of rank {r}");
        }
        assert_eq!(part[7], (N * np) as u8, "rank {me}: shared byte");
        drop(part);
        win.free()
    })
    .unwrap();
}

device_suite! {
    both: [
        exclusive_lock_counter,
        fetch_and_op_counter,
        compare_and_swap_spin_lock,
        accumulate_every_op_on_every_type,
        get_accumulate_and_fetch_and_op,
        compare_and_swap_is_bitwise,
        concurrent_accumulates_on_one_word,
    ],
    tcp_ignored: [],
}
