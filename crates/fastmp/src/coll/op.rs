//! Reduction operations: MPI's predefined ops as unit structs, pairs for `MinLoc`/`MaxLoc`, and
//! user closures that say whether they commute.

use std::ops::Range;

use bytemuck::{Pod, Zeroable};

use crate::error::Result;

/// A reduction operation on elements of type `T` (MPI_Op).
///
/// `combine(input, inout)` computes `inout[i] = input[i] ∘ inout[i]` element-wise, where `input`
/// holds the values of *lower* ranks, as in `MPI_Reduce_local`. Collectives apply non-commutative
/// operations in rank order: the result is `x0 ∘ x1 ∘ … ∘ x(n-1)`.
pub trait Op<T> {
    /// `inout[i] = input[i] ∘ inout[i]`; both slices have the same length.
    fn combine(&self, input: &[T], inout: &mut [T]);
    /// Whether `a ∘ b == b ∘ a`; some algorithms are only used for commutative operations.
    fn is_commutative(&self) -> bool {
        true
    }
    /// Which of MPI's predefined operations this is, if any: a device that delegates reductions
    /// to an MPI library hands those to it as `MPI_SUM`, ... (user operations keep `None`).
    #[doc(hidden)]
    fn predefined(&self) -> Option<Predefined> {
        None
    }
    /// This op, if it may run on another thread (the progress agent reduces with it while the
    /// rank computes). The predefined ops are plain functions; user ops keep `None`, since a
    /// closure may hold state bound to its rank's thread.
    #[doc(hidden)]
    fn shareable(&self) -> Option<&(dyn Op<T> + Sync)> {
        None
    }
}

/// MPI's predefined element-wise operations, as [`Op::predefined`] names them.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Predefined {
    Sum,
    Prod,
    Min,
    Max,
    Land,
    Lor,
    Lxor,
    Band,
    Bor,
    Bxor,
}

impl<T, O: Op<T> + ?Sized> Op<T> for &O {
    fn combine(&self, input: &[T], inout: &mut [T]) {
        (**self).combine(input, inout)
    }
    fn is_commutative(&self) -> bool {
        (**self).is_commutative()
    }
    fn predefined(&self) -> Option<Predefined> {
        (**self).predefined()
    }
    fn shareable(&self) -> Option<&(dyn Op<T> + Sync)> {
        (**self).shareable()
    }
}

macro_rules! elementwise_op {
    ($(#[$doc:meta])* $name:ident, |$a:ident, $b:ident| $body:expr, $($t:ty),+) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name;
        $(impl Op<$t> for $name {
            #[inline]
            fn combine(&self, input: &[$t], inout: &mut [$t]) {
                for (&$a, b) in input.iter().zip(inout.iter_mut()) {
                    let $b = *b;
                    *b = $body;
                }
            }
            #[inline]
            fn predefined(&self) -> Option<Predefined> {
                Some(Predefined::$name)
            }
            fn shareable(&self) -> Option<&(dyn Op<$t> + Sync)> {
                Some(self)
            }
        })+
    };
}

elementwise_op!(
    /// Sum (MPI_SUM); integers wrap on overflow.
    Sum, |a, b| a.wrapping_add(b), i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize
);
elementwise_op!(
    /// Product (MPI_PROD); integers wrap on overflow.
    Prod, |a, b| a.wrapping_mul(b), i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize
);
elementwise_op!(
    /// Minimum (MPI_MIN); for floats, a NaN operand yields the other operand.
    Min, |a, b| a.min(b), i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize, f32, f64
);
elementwise_op!(
    /// Maximum (MPI_MAX); for floats, a NaN operand yields the other operand.
    Max, |a, b| a.max(b), i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize, f32, f64
);
elementwise_op!(
    /// Logical and (MPI_LAND): non-zero is true, the result is 0 or 1.
    Land, |a, b| ((a != 0) && (b != 0)) as _, i8, i16, i32, i64, isize, u8, u16, u32, u64, usize
);
elementwise_op!(
    /// Logical or (MPI_LOR): non-zero is true, the result is 0 or 1.
    Lor, |a, b| ((a != 0) || (b != 0)) as _, i8, i16, i32, i64, isize, u8, u16, u32, u64, usize
);
elementwise_op!(
    /// Logical exclusive or (MPI_LXOR): non-zero is true, the result is 0 or 1.
    Lxor, |a, b| ((a != 0) != (b != 0)) as _, i8, i16, i32, i64, isize, u8, u16, u32, u64, usize
);
elementwise_op!(
    /// Bitwise and (MPI_BAND).
    Band, |a, b| a & b, i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize
);
elementwise_op!(
    /// Bitwise or (MPI_BOR).
    Bor, |a, b| a | b, i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize
);
elementwise_op!(
    /// Bitwise exclusive or (MPI_BXOR).
    Bxor, |a, b| a ^ b, i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize
);

macro_rules! float_arith {
    ($($t:ty),+) => {$(
        impl Op<$t> for Sum {
            #[inline]
            fn combine(&self, input: &[$t], inout: &mut [$t]) {
                for (&a, b) in input.iter().zip(inout.iter_mut()) {
                    *b += a;
                }
            }
            #[inline]
            fn predefined(&self) -> Option<Predefined> {
                Some(Predefined::Sum)
            }
            fn shareable(&self) -> Option<&(dyn Op<$t> + Sync)> {
                Some(self)
            }
        }
        impl Op<$t> for Prod {
            #[inline]
            fn combine(&self, input: &[$t], inout: &mut [$t]) {
                for (&a, b) in input.iter().zip(inout.iter_mut()) {
                    *b *= a;
                }
            }
            #[inline]
            fn predefined(&self) -> Option<Predefined> {
                Some(Predefined::Prod)
            }
            fn shareable(&self) -> Option<&(dyn Op<$t> + Sync)> {
                Some(self)
            }
        }
    )+};
}
float_arith!(f32, f64);

/// A value with the index (usually a rank) it came from, for [`MinLoc`] and [`MaxLoc`]
/// (MPI's `MPI_2INT`, `MPI_DOUBLE_INT`, ...). Only layouts without padding are `Pod`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Loc<V, I> {
    pub value: V,
    pub index: I,
}

macro_rules! pod_loc {
    ($(($v:ty, $i:ty)),+) => {$(
        // SAFETY: `#[repr(C)]` with two fields whose sizes are equal (or the first a multiple of
        // the second's alignment and the total a multiple of the largest alignment), so the struct
        // has no padding, and both fields are Pod.
        unsafe impl Zeroable for Loc<$v, $i> {}
        // SAFETY: as above: no padding, every bit pattern valid, `Copy + 'static`.
        unsafe impl Pod for Loc<$v, $i> {}
    )+};
}
pod_loc!((f64, i64), (f64, u64), (f32, i32), (f32, u32), (i32, i32), (i64, i64), (u32, u32), (u64, u64));
pod_loc!((i64, u64), (u64, i64), (i32, u32), (u32, i32));

/// Minimum value and the smallest index holding it (MPI_MINLOC).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MinLoc;
/// Maximum value and the smallest index holding it (MPI_MAXLOC).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaxLoc;

impl<V: PartialOrd + Copy, I: Ord + Copy> Op<Loc<V, I>> for MinLoc {
    fn combine(&self, input: &[Loc<V, I>], inout: &mut [Loc<V, I>]) {
        for (a, b) in input.iter().zip(inout.iter_mut()) {
            if a.value < b.value || (a.value == b.value && a.index < b.index) {
                *b = *a;
            }
        }
    }
}

impl<V: PartialOrd + Copy, I: Ord + Copy> Op<Loc<V, I>> for MaxLoc {
    fn combine(&self, input: &[Loc<V, I>], inout: &mut [Loc<V, I>]) {
        for (a, b) in input.iter().zip(inout.iter_mut()) {
            if a.value > b.value || (a.value == b.value && a.index < b.index) {
                *b = *a;
            }
        }
    }
}

/// A user-defined operation (MPI_Op_create) from a closure with [`Op::combine`]'s contract.
///
/// ```
/// use fastmp::op::UserOp;
/// // 2x2 matrix product: associative but not commutative, so it is combined in rank order.
/// let matmul = UserOp::non_commutative(|input: &[[i64; 4]], inout: &mut [[i64; 4]]| {
///     for (a, b) in input.iter().zip(inout.iter_mut()) {
///         *b = [a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
///               a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]];
///     }
/// });
/// let results = fastmp::run(3, |world| {
///     let mine = [[1, world.rank() as i64 + 1, 0, 1]];
///     let mut product = [[0i64; 4]];
///     world.allreduce(&mine, &mut product, &matmul)?;
///     Ok(product[0])
/// })?;
/// assert_eq!(results[0], [1, 6, 0, 1]);
/// # Ok::<(), fastmp::Error>(())
/// ```
pub struct UserOp<F> {
    f: F,
    commutative: bool,
}

impl<F> UserOp<F> {
    /// An operation with `a ∘ b == b ∘ a`; any algorithm may be used.
    pub fn commutative<T>(f: F) -> Self
    where
        F: Fn(&[T], &mut [T]),
    {
        UserOp { f, commutative: true }
    }

    /// An associative operation that does not commute; it is applied in rank order.
    pub fn non_commutative<T>(f: F) -> Self
    where
        F: Fn(&[T], &mut [T]),
    {
        UserOp { f, commutative: false }
    }
}

impl<T, F: Fn(&[T], &mut [T])> Op<T> for UserOp<F> {
    fn combine(&self, input: &[T], inout: &mut [T]) {
        (self.f)(input, inout)
    }
    fn is_commutative(&self) -> bool {
        self.commutative
    }
}

/// `dest = x(first) ∘ … ∘ x(last)` over `ranks`, folded from the right (`dest = x(last)`, then
/// `dest = x(j) ∘ dest` for lower `j`): rank order is kept for non-commutative (associative)
/// operations without any temporary, so `input` may even be a peer's buffer (the shm device's native reductions) read in place.
/// Leaves `dest` alone when `ranks` or `dest` is empty.
pub(crate) fn fold_in_rank_order<'v, T: Pod>(
    op: &dyn Op<T>,
    dest: &mut [T],
    ranks: Range<usize>,
    input: impl Fn(usize) -> Result<&'v [T]>,
) -> Result<()> {
    let mut ranks = ranks.rev();
    let Some(last) = ranks.next().filter(|_| !dest.is_empty()) else { return Ok(()) };
    dest.copy_from_slice(input(last)?);
    for j in ranks {
        op.combine(input(j)?, dest);
    }
    Ok(())
}

/// [`fold_in_rank_order`] for MPI_IN_PLACE: `dest` already holds `x(own)`, which is not read
/// through `input`. Commutative operations fold every other rank straight into `dest`;
/// non-commutative ones fold the ranks above `own` into a temporary first (`x(own) ∘ higher`
/// cannot be computed in `dest`), then the ranks below `own` from the right, keeping rank order.
pub(crate) fn fold_into_own<'v, T: Pod>(
    op: &dyn Op<T>,
    dest: &mut [T],
    own: usize,
    ranks: Range<usize>,
    input: impl Fn(usize) -> Result<&'v [T]>,
) -> Result<()> {
    if dest.is_empty() {
        return Ok(());
    }
    if op.is_commutative() {
        for j in ranks.filter(|&j| j != own) {
            op.combine(input(j)?, dest);
        }
        return Ok(());
    }
    if own + 1 < ranks.end {
        let mut higher = vec![T::zeroed(); dest.len()];
        fold_in_rank_order(op, &mut higher, own + 1..ranks.end, &input)?;
        op.combine(dest, &mut higher);
        dest.copy_from_slice(&higher);
    }
    for j in (ranks.start..own).rev() {
        op.combine(input(j)?, dest);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predefined_ops_follow_mpi() {
        let mut v = [1i32, -2, 3];
        Sum.combine(&[10, 10, 10], &mut v);
        assert_eq!(v, [11, 8, 13]);
        Max.combine(&[0, 9, 0], &mut v);
        assert_eq!(v, [11, 9, 13]);
        let mut l = [0u8, 1, 2];
        Land.combine(&[1, 1, 0], &mut l);
        assert_eq!(l, [0, 1, 0]);
        let mut f = [1.5f64];
        Prod.combine(&[2.0], &mut f);
        assert_eq!(f, [3.0]);
        let mut loc = [Loc { value: 2.0f64, index: 3i64 }];
        MinLoc.combine(&[Loc { value: 2.0, index: 1 }], &mut loc);
        assert_eq!(loc[0].index, 1);
        MaxLoc.combine(&[Loc { value: 1.0, index: 0 }], &mut loc);
        assert_eq!(loc[0], Loc { value: 2.0, index: 1 });
    }

    #[test]
    fn predefined_ops_name_themselves_and_user_ops_do_not() {
        assert_eq!(Op::<f64>::predefined(&Sum), Some(Predefined::Sum));
        assert_eq!(Op::<u8>::predefined(&&Bxor), Some(Predefined::Bxor), "through a reference");
        assert_eq!(Op::<Loc<f64, i64>>::predefined(&MinLoc), None);
        let user = UserOp::commutative(|_: &[i32], _: &mut [i32]| {});
        assert_eq!(Op::<i32>::predefined(&user), None);
    }
}
