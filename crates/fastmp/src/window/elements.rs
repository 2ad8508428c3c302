//! Which element types and operators one-sided accumulates and atomics accept, and how their
//! values travel to the device (as the element's bytes in the low bytes of a `u64`).

use bytemuck::Pod;

use super::{NoOp, Replace, RmaElement, RmaOp, sealed::Sealed};
use crate::coll::op::{Band, Bor, Bxor, Land, Lor, Lxor, Max, Min, Prod, Sum};
use crate::device::one_sided::{AccumulateOp, Element};
use crate::device::rma_memory::load_element;

macro_rules! rma_elements {
    ($($t:ty => $e:ident),+ $(,)?) => {$(
        impl Sealed for $t {}
        impl RmaElement for $t {
            const ELEMENT: Element = Element::$e;
        }
    )+};
}
rma_elements!(i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8, u16 => U16, u32 => U32, u64 => U64,
    f32 => F32, f64 => F64);
#[cfg(target_pointer_width = "64")]
rma_elements!(isize => I64, usize => U64);

macro_rules! rma_ops {
    ($($op:ident => $a:ident for [$($t:ty),+]);+ $(;)?) => {$(
        impl Sealed for $op {}
        $(impl RmaOp<$t> for $op {
            const OP: AccumulateOp = AccumulateOp::$a;
        })+
    )+};
}

macro_rules! every_type {
    ($mac:ident: $($op:ident => $a:ident),+) => {
        $mac!($($op => $a for [i8, i16, i32, i64, u8, u16, u32, u64, f32, f64]);+);
    };
}
every_type!(rma_ops: Sum => Sum, Prod => Prod, Min => Min, Max => Max, Replace => Replace, NoOp => NoOp);

macro_rules! integers {
    ($mac:ident: $($op:ident => $a:ident),+) => {
        $mac!($($op => $a for [i8, i16, i32, i64, u8, u16, u32, u64]);+);
    };
}
integers!(rma_ops: Band => Band, Bor => Bor, Bxor => Bxor, Land => Land, Lor => Lor, Lxor => Lxor);

/// `isize`/`usize` take every operator their 64-bit twins take (the traits are sealed above).
#[cfg(target_pointer_width = "64")]
macro_rules! pointer_sized {
    ($($op:ident),+) => {$(
        impl RmaOp<isize> for $op {
            const OP: AccumulateOp = <$op as RmaOp<i64>>::OP;
        }
        impl RmaOp<usize> for $op {
            const OP: AccumulateOp = <$op as RmaOp<u64>>::OP;
        }
    )+};
}
#[cfg(target_pointer_width = "64")]
pointer_sized!(Sum, Prod, Min, Max, Replace, NoOp, Band, Bor, Bxor, Land, Lor, Lxor);

/// `value` zero-extended into the low-order bytes of a `u64` (the device's operand format).
pub(crate) fn to_word<T: Pod>(value: T) -> u64 {
    load_element(bytemuck::bytes_of(&value))
}

/// The `T` in the low-order bytes of `word` (the inverse of [`to_word`]).
pub(crate) fn from_word<T: Pod>(word: u64) -> T {
    let bytes = word.to_ne_bytes();
    let at = if cfg!(target_endian = "little") { 0 } else { 8 - size_of::<T>() };
    bytemuck::pod_read_unaligned(&bytes[at..at + size_of::<T>()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_every_element_type() {
        assert_eq!(from_word::<i8>(to_word(-3i8)), -3);
        assert_eq!(from_word::<u16>(to_word(0xBEEFu16)), 0xBEEF);
        assert_eq!(from_word::<f32>(to_word(1.5f32)), 1.5);
        assert_eq!(from_word::<f64>(to_word(-2.25f64)), -2.25);
        assert_eq!(from_word::<i64>(to_word(i64::MIN)), i64::MIN);
        assert_eq!(to_word(1u8), 1);
        assert_eq!(to_word(-1i16), 0xFFFF, "zero-extended");
        assert_eq!(<usize as RmaElement>::ELEMENT, Element::U64);
        assert_eq!(<Bxor as RmaOp<isize>>::OP, AccumulateOp::Bxor);
        assert_eq!(<NoOp as RmaOp<f32>>::OP, AccumulateOp::NoOp);
    }
}

/// Replace and NoOp are ordinary reduction operations too (MPI allows MPI_REPLACE and MPI_NO_OP
/// only in one-sided calls; here they also work in `reduce_local`-style folds).
impl<T: Copy> crate::coll::op::Op<T> for Replace {
    fn combine(&self, input: &[T], inout: &mut [T]) {
        inout.copy_from_slice(input);
    }
    fn is_commutative(&self) -> bool {
        false
    }
}

impl<T> crate::coll::op::Op<T> for NoOp {
    fn combine(&self, _input: &[T], _inout: &mut [T]) {}
}

#[cfg(test)]
mod op_tests {
    use super::{NoOp, Replace};
    use crate::coll::op::Op;

    #[test]
    fn replace_overwrites_and_no_op_keeps() {
        let mut inout = [1, 2, 3];
        Replace.combine(&[7, 8, 9], &mut inout);
        assert_eq!(inout, [7, 8, 9]);
        NoOp.combine(&[0, 0, 0], &mut inout);
        assert_eq!(inout, [7, 8, 9]);
        assert!(!Op::<i32>::is_commutative(&Replace));
    }
}
