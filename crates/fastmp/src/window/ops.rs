//! The operations: every one is checked at the origin (usable window, target rank, access epoch,
//! range inside the target's part, buffer lengths) before the device moves a byte. Blocking forms
//! complete locally before returning; the request forms (`requests.rs`) share the checks.

use bytemuck::Pod;

use super::elements::{from_word, to_word};
use super::lifecycle::Core;
use super::{RmaElement, RmaOp, Window};
use crate::device::one_sided::{AccumulateOp, Element};
use crate::device::{PROC_NULL, Started};
use crate::error::{Error, Result};
use crate::layout::{self, Layout};

impl Core {
    /// Checks that `call` may reach elements `disp..disp + len` of `target`'s part now; returns
    /// the byte offset, or `None` for `PROC_NULL` (the operation is a no-op, as in MPI).
    #[inline]
    pub(crate) fn target(&self, call: &str, target: usize, disp: usize, len: usize) -> Result<Option<usize>> {
        self.usable(call)?;
        if target == PROC_NULL {
            return Ok(None);
        }
        let size = self.comm.size();
        if target >= size {
            return Err(Error::RankOutOfRange { rank: target, size });
        }
        self.epochs.access(call, target)?;
        let part = self.dev.part_lengths()[target];
        let end = disp.checked_add(len).and_then(|end| end.checked_mul(self.elem));
        match end {
            Some(end) if end <= part => Ok(Some(disp * self.elem)),
            _ => Err(Error::InvalidArgument(format!(
                "{call}: elements {disp}..{} lie outside rank {target}'s window part of {} elements",
                disp.saturating_add(len),
                part / self.elem
            ))),
        }
    }

    /// Waits for a started operation to complete locally (its buffers are free on return, also
    /// on errors: the device releases a failed request).
    #[inline]
    pub(crate) fn finish(&self, started: Started) -> Result<()> {
        match started {
            // Direct-access devices finish in the call: no device round trip.
            Started::Complete(result) => result.map(drop),
            pending => self.comm.dev.complete(pending).map(drop),
        }
    }

    /// Starts a put of `data` at element `disp` of `target`'s part; `None` when there is nothing
    /// to do (`PROC_NULL`, no data).
    ///
    /// # Safety
    /// `data` stays borrowed (unmodified) until the returned operation completes or is released.
    pub(crate) unsafe fn start_put(
        &self,
        call: &str,
        data: &[u8],
        target: usize,
        disp: usize,
    ) -> Result<Option<Started>> {
        let Some(offset) = self.target(call, target, disp, data.len() / self.elem)? else { return Ok(None) };
        if data.is_empty() {
            return Ok(None);
        }
        // SAFETY: the caller's contract.
        unsafe { self.dev.put(target, offset, data.as_ptr(), data.len()).map(Some) }
    }

    /// Starts a get into `into` from element `disp` of `target`'s part (`None` as `start_put`).
    ///
    /// # Safety
    /// `into` stays exclusively borrowed until the returned operation completes or is released.
    pub(crate) unsafe fn start_get(
        &self,
        call: &str,
        into: &mut [u8],
        target: usize,
        disp: usize,
    ) -> Result<Option<Started>> {
        let Some(offset) = self.target(call, target, disp, into.len() / self.elem)? else { return Ok(None) };
        if into.is_empty() {
            return Ok(None);
        }
        // SAFETY: the caller's contract.
        unsafe { self.dev.get(target, offset, into.as_mut_ptr(), into.len()).map(Some) }
    }

    /// Starts an accumulate of `data` (`None` as `start_put`).
    ///
    /// # Safety
    /// As for [`Core::start_put`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn start_accumulate(
        &self,
        call: &str,
        data: &[u8],
        target: usize,
        disp: usize,
        element: Element,
        op: AccumulateOp,
    ) -> Result<Option<Started>> {
        let Some(offset) = self.target(call, target, disp, data.len() / self.elem)? else { return Ok(None) };
        if data.is_empty() {
            return Ok(None);
        }
        // SAFETY: the caller's contract.
        unsafe { self.dev.accumulate(target, offset, data.as_ptr(), data.len(), element, op).map(Some) }
    }

    /// Starts a get-accumulate (`None` as `start_put`; `data` may be empty with `NoOp`).
    ///
    /// # Safety
    /// As for [`Core::start_put`] for `data` and [`Core::start_get`] for `result`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn start_get_accumulate(
        &self,
        call: &str,
        data: &[u8],
        result: &mut [u8],
        target: usize,
        disp: usize,
        element: Element,
        op: AccumulateOp,
    ) -> Result<Option<Started>> {
        Self::check_fetch_lengths(call, data.len() / self.elem, result.len() / self.elem, op)?;
        let Some(offset) = self.target(call, target, disp, result.len() / self.elem)? else { return Ok(None) };
        if result.is_empty() {
            return Ok(None);
        }
        // SAFETY: the caller's contract.
        unsafe {
            self.dev
                .get_accumulate(target, offset, data.as_ptr(), result.as_mut_ptr(), result.len(), element, op)
                .map(Some)
        }
    }

    /// Finishes what a `start_*` call started, if anything.
    #[inline]
    fn finish_started(&self, started: Option<Started>) -> Result<()> {
        started.map_or(Ok(()), |started| self.finish(started))
    }

    pub(crate) fn put(&self, call: &str, data: &[u8], target: usize, disp: usize) -> Result<()> {
        // SAFETY: `data` stays borrowed until `finish_started` returns, which completes or
        // releases the operation.
        let started = unsafe { self.start_put(call, data, target, disp)? };
        self.finish_started(started)
    }

    pub(crate) fn get(&self, call: &str, into: &mut [u8], target: usize, disp: usize) -> Result<()> {
        // SAFETY: as for `put`, with `into` exclusively borrowed.
        let started = unsafe { self.start_get(call, into, target, disp)? };
        self.finish_started(started)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn accumulate(
        &self,
        call: &str,
        data: &[u8],
        target: usize,
        disp: usize,
        element: Element,
        op: AccumulateOp,
    ) -> Result<()> {
        // SAFETY: as for `put`.
        let started = unsafe { self.start_accumulate(call, data, target, disp, element, op)? };
        self.finish_started(started)
    }

    /// Checks get-accumulate's buffers: `data` as long as `result`, or anything with `NoOp`.
    pub(crate) fn check_fetch_lengths(call: &str, data: usize, result: usize, op: AccumulateOp) -> Result<()> {
        if op != AccumulateOp::NoOp && data != result {
            return Err(Error::InvalidArgument(format!(
                "{call}: the origin buffer has {data} elements but the result buffer {result} (they must match \
                 except with NoOp)"
            )));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn get_accumulate(
        &self,
        call: &str,
        data: &[u8],
        result: &mut [u8],
        target: usize,
        disp: usize,
        element: Element,
        op: AccumulateOp,
    ) -> Result<()> {
        // SAFETY: as for `put`, with `result` exclusively borrowed.
        let started = unsafe { self.start_get_accumulate(call, data, result, target, disp, element, op)? };
        self.finish_started(started)
    }
}

/// Walks two run lists (origin and target, in elements) in step, calling `f(origin, target, len)`
/// for each stretch that is contiguous on both sides.
fn pieces(
    mut origin: impl Iterator<Item = (usize, usize)>,
    mut target: impl Iterator<Item = (usize, usize)>,
    mut f: impl FnMut(usize, usize, usize) -> Result<()>,
) -> Result<()> {
    let (mut a, mut b) = (origin.next(), target.next());
    while let (Some((ao, al)), Some((bo, bl))) = (a, b) {
        let n = al.min(bl);
        f(ao, bo, n)?;
        a = if n == al { origin.next() } else { Some((ao + n, al - n)) };
        b = if n == bl { target.next() } else { Some((bo + n, bl - n)) };
    }
    Ok(())
}

impl<T: Pod> Window<'_, T> {
    /// Checks a strided operation (layouts valid, equal element counts, origin buffer and target
    /// range large enough) and runs `piece(origin offset, target displacement, len)` per stretch.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn strided(
        &self,
        call: &str,
        origin_len: usize,
        origin_layout: &impl Layout,
        writes_origin: bool,
        target: usize,
        disp: usize,
        target_layout: &impl Layout,
        mut piece: impl FnMut(usize, usize, usize) -> Result<()>,
    ) -> Result<()> {
        let count = layout::check(call, origin_layout, origin_len, writes_origin)?;
        let target_count = layout::check(call, target_layout, usize::MAX, false)?;
        if count != target_count {
            return Err(Error::InvalidArgument(format!(
                "{call}: the origin layout selects {count} elements but the target layout {target_count}"
            )));
        }
        let extent = target_layout.extent()?;
        if self.core.target(call, target, disp, extent)?.is_none() {
            return Ok(());
        }
        pieces(origin_layout.runs(), target_layout.runs(), |o, t, n| piece(o, disp + t, n))
    }

    pub(super) fn put_strided_impl(
        &self,
        origin: &[T],
        origin_layout: &impl Layout,
        target: usize,
        disp: usize,
        target_layout: &impl Layout,
    ) -> Result<()> {
        let call = "put_strided";
        self.strided(call, origin.len(), origin_layout, false, target, disp, target_layout, |o, t, n| {
            self.core.put(call, bytemuck::cast_slice(&origin[o..o + n]), target, t)
        })
    }

    pub(super) fn get_strided_impl(
        &self,
        into: &mut [T],
        origin_layout: &impl Layout,
        target: usize,
        disp: usize,
        target_layout: &impl Layout,
    ) -> Result<()> {
        let call = "get_strided";
        let len = into.len();
        self.strided(call, len, origin_layout, true, target, disp, target_layout, |o, t, n| {
            self.core.get(call, bytemuck::cast_slice_mut(&mut into[o..o + n]), target, t)
        })
    }

    pub(super) fn accumulate_strided_impl<O: RmaOp<T>>(
        &self,
        origin: &[T],
        origin_layout: &impl Layout,
        target: usize,
        disp: usize,
        target_layout: &impl Layout,
    ) -> Result<()>
    where
        T: RmaElement,
    {
        let call = "accumulate_strided";
        self.strided(call, origin.len(), origin_layout, false, target, disp, target_layout, |o, t, n| {
            self.core.accumulate(call, bytemuck::cast_slice(&origin[o..o + n]), target, t, T::ELEMENT, O::OP)
        })
    }

    pub(super) fn fetch_and_op_impl(&self, value: T, target: usize, disp: usize, op: AccumulateOp) -> Result<T>
    where
        T: RmaElement,
    {
        let Some(offset) = self.core.target("fetch_and_op", target, disp, 1)? else { return Ok(T::zeroed()) };
        self.core.dev.fetch_and_op(target, offset, T::ELEMENT, op, to_word(value)).map(from_word)
    }

    pub(super) fn compare_and_swap_impl(&self, compare: T, new: T, target: usize, disp: usize) -> Result<T>
    where
        T: RmaElement,
    {
        let Some(offset) = self.core.target("compare_and_swap", target, disp, 1)? else { return Ok(T::zeroed()) };
        self.core.dev.compare_and_swap(target, offset, T::ELEMENT, to_word(compare), to_word(new)).map(from_word)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(a: &[(usize, usize)], b: &[(usize, usize)]) -> Vec<(usize, usize, usize)> {
        let mut out = Vec::new();
        pieces(a.iter().copied(), b.iter().copied(), |o, t, n| {
            out.push((o, t, n));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn pieces_split_runs_where_either_side_breaks() {
        assert_eq!(collect(&[(0, 6)], &[(0, 2), (4, 2), (8, 2)]), [(0, 0, 2), (2, 4, 2), (4, 8, 2)]);
        assert_eq!(collect(&[(0, 1), (4, 1), (8, 1)], &[(10, 3)]), [(0, 10, 1), (4, 11, 1), (8, 12, 1)]);
        assert_eq!(collect(&[(0, 3), (5, 3)], &[(0, 2), (3, 4)]), [(0, 0, 2), (2, 3, 1), (5, 4, 3)]);
        assert!(collect(&[], &[]).is_empty());
    }
}
