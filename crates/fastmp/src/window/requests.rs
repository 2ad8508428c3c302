//! Request-based operations (MPI_Rput, MPI_Rget, MPI_Raccumulate, MPI_Rget_accumulate), plain
//! and strided: checked as the blocking ones, then started on the device.
//! - A contiguous operation is one device operation, handed to the scope's ledger, so the
//!   scope's end finishes it even if the request is dropped or leaked.
//! - A strided one is one device operation per contiguous stretch, all started in the call (so
//!   they are in flight together); those that did not complete at once become one operation of
//!   the rank's progress engine that tests them, whose request completes when the last has. The
//!   engine belongs to the scope like a nonblocking collective: the scope's end finishes (or,
//!   unwinding, releases) every stretch before the buffers' borrows end.

use std::future::poll_fn;
use std::task::Poll;

use bytemuck::Pod;

use super::{RmaElement, RmaOp, Window};
use crate::device::Started;
use crate::device::requests::Outcome;
use crate::error::Result;
use crate::layout::Layout;
use crate::scope::{Request, Scope};

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Request-based put (MPI_Rput): the request completes when `data` is free again.
    pub fn rput<T: Pod>(
        &'scope self,
        win: &'scope Window<'_, T>,
        data: &'scope [T],
        target: usize,
        disp: usize,
    ) -> Result<Request<'scope>> {
        // SAFETY: `data` is borrowed for 'scope and the operation joins the scope's ledger.
        let started = unsafe { win.core.start_put("rput", bytemuck::cast_slice(data), target, disp)? };
        // SAFETY: as above.
        Ok(unsafe { self.scoped_request(started, false) })
    }

    /// Request-based get (MPI_Rget): the request completes when `into` holds the data.
    pub fn rget<T: Pod>(
        &'scope self,
        win: &'scope Window<'_, T>,
        into: &'scope mut [T],
        target: usize,
        disp: usize,
    ) -> Result<Request<'scope>> {
        // SAFETY: `into` is exclusively borrowed for 'scope and the operation joins the scope's
        // ledger, which waits for (or releases) it before 'scope ends.
        let started = unsafe { win.core.start_get("rget", bytemuck::cast_slice_mut(into), target, disp)? };
        // SAFETY: as above.
        Ok(unsafe { self.scoped_request(started, true) })
    }

    /// Request-based accumulate (MPI_Raccumulate).
    pub fn raccumulate<T: RmaElement, O: RmaOp<T>>(
        &'scope self,
        win: &'scope Window<'_, T>,
        data: &'scope [T],
        target: usize,
        disp: usize,
        op: O,
    ) -> Result<Request<'scope>> {
        let _ = op;
        let data = bytemuck::cast_slice(data);
        // SAFETY: as in `rput`.
        let started = unsafe { win.core.start_accumulate("raccumulate", data, target, disp, T::ELEMENT, O::OP)? };
        // SAFETY: as in `rput`.
        Ok(unsafe { self.scoped_request(started, false) })
    }

    /// Request-based get-accumulate (MPI_Rget_accumulate; with [`super::NoOp`], `data` may be
    /// empty).
    pub fn rget_accumulate<T: RmaElement, O: RmaOp<T>>(
        &'scope self,
        win: &'scope Window<'_, T>,
        data: &'scope [T],
        result: &'scope mut [T],
        target: usize,
        disp: usize,
        op: O,
    ) -> Result<Request<'scope>> {
        let _ = op;
        let (data, result) = (bytemuck::cast_slice(data), bytemuck::cast_slice_mut(result));
        // SAFETY: `data` (shared) and `result` (exclusive) are borrowed for 'scope and the
        // operation joins the scope's ledger, which waits for (or releases) it before 'scope ends.
        let started =
            unsafe { win.core.start_get_accumulate("rget_accumulate", data, result, target, disp, T::ELEMENT, O::OP)? };
        // SAFETY: as above.
        Ok(unsafe { self.scoped_request(started, true) })
    }

    /// Request-based strided put (the request form of [`Window::put_strided`]): completes when
    /// every selected element of `origin` is free again.
    ///
    /// ```
    /// use fastmp::layout::Vector;
    /// use fastmp::window::Assert;
    /// fastmp::run(2, |world| {
    ///     let win = world.win_allocate::<i32>(8)?;
    ///     win.fence(Assert::NONE)?;
    ///     let column = [1, 0, 2, 0, 3, 0];
    ///     if world.rank() == 0 {
    ///         world.scope(|s| {
    ///             // Every other element of `column` into elements 4, 5, 6 of rank 1.
    ///             let every_other = Vector { count: 3, blocklength: 1, stride: 2 };
    ///             let run = Vector { count: 1, blocklength: 3, stride: 3 };
    ///             s.rput_strided(&win, &column, &every_other, 1, 4, &run)?.wait().map(drop)
    ///         })?;
    ///     }
    ///     win.fence(Assert::NONE)?;
    ///     if world.rank() == 1 {
    ///         assert_eq!(&win.local()?[4..7], &[1, 2, 3]);
    ///     }
    ///     win.free()
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn rput_strided<T: Pod>(
        &'scope self,
        win: &'scope Window<'_, T>,
        origin: &'scope [T],
        origin_layout: &impl Layout,
        target: usize,
        disp: usize,
        target_layout: &impl Layout,
    ) -> Result<Request<'scope>> {
        let call = "rput_strided";
        let core = &win.core;
        let mut stretches = Vec::new();
        win.strided(call, origin.len(), origin_layout, false, target, disp, target_layout, |o, t, n| {
            // SAFETY: `origin` is borrowed for 'scope; the stretch's operation is finished or
            // released before 'scope ends (`stretches`, then the scope's engine).
            let started = unsafe { core.start_put(call, bytemuck::cast_slice(&origin[o..o + n]), target, t)? };
            stretches.extend(started.map(|started| Outcome::of(&*core.comm.dev, started)));
            Ok(())
        })?;
        self.stretches_request(stretches)
    }

    /// Request-based strided get (the request form of [`Window::get_strided`]): completes when
    /// every selected element of `into` holds its data.
    pub fn rget_strided<T: Pod>(
        &'scope self,
        win: &'scope Window<'_, T>,
        into: &'scope mut [T],
        origin_layout: &impl Layout,
        target: usize,
        disp: usize,
        target_layout: &impl Layout,
    ) -> Result<Request<'scope>> {
        let call = "rget_strided";
        let core = &win.core;
        let (base, len) = (into.as_mut_ptr(), into.len());
        let mut stretches = Vec::new();
        win.strided(call, len, origin_layout, true, target, disp, target_layout, |o, t, n| {
            // SAFETY: `o + n <= len` (the layout's extent fits `into`, checked by `strided`) and
            // the stretches are disjoint (a written layout may not overlap, also checked), so
            // each is an exclusive part of `into`, which is exclusively borrowed for 'scope.
            let part: &'scope mut [T] = unsafe { std::slice::from_raw_parts_mut(base.add(o), n) };
            // SAFETY: the stretch's operation is finished or released before 'scope ends
            // (`stretches`, then the scope's engine).
            let started = unsafe { core.start_get(call, bytemuck::cast_slice_mut(part), target, t)? };
            stretches.extend(started.map(|started| Outcome::of(&*core.comm.dev, started)));
            Ok(())
        })?;
        self.stretches_request(stretches)
    }

    /// Request-based strided accumulate (the request form of [`Window::accumulate_strided`]).
    #[allow(clippy::too_many_arguments)]
    pub fn raccumulate_strided<T: RmaElement, O: RmaOp<T>>(
        &'scope self,
        win: &'scope Window<'_, T>,
        origin: &'scope [T],
        origin_layout: &impl Layout,
        target: usize,
        disp: usize,
        target_layout: &impl Layout,
        op: O,
    ) -> Result<Request<'scope>> {
        let _ = op;
        let call = "raccumulate_strided";
        let core = &win.core;
        let mut stretches = Vec::new();
        win.strided(call, origin.len(), origin_layout, false, target, disp, target_layout, |o, t, n| {
            let data = bytemuck::cast_slice(&origin[o..o + n]);
            // SAFETY: as in `rput_strided`.
            let started = unsafe { core.start_accumulate(call, data, target, t, T::ELEMENT, O::OP)? };
            stretches.extend(started.map(|started| Outcome::of(&*core.comm.dev, started)));
            Ok(())
        })?;
        self.stretches_request(stretches)
    }

    /// Request-based strided get-accumulate: `origin_layout` selects the elements of `data` and
    /// the places of their previous values in `result` alike (with [`super::NoOp`], `data` is
    /// not read and may be empty).
    #[allow(clippy::too_many_arguments)]
    pub fn rget_accumulate_strided<T: RmaElement, O: RmaOp<T>>(
        &'scope self,
        win: &'scope Window<'_, T>,
        data: &'scope [T],
        result: &'scope mut [T],
        origin_layout: &impl Layout,
        target: usize,
        disp: usize,
        target_layout: &impl Layout,
        op: O,
    ) -> Result<Request<'scope>> {
        let _ = op;
        let call = "rget_accumulate_strided";
        let core = &win.core;
        super::lifecycle::Core::check_fetch_lengths(call, data.len(), result.len(), O::OP)?;
        let no_op = O::OP == crate::device::one_sided::AccumulateOp::NoOp;
        let (base, len) = (result.as_mut_ptr(), result.len());
        let mut stretches = Vec::new();
        win.strided(call, len, origin_layout, true, target, disp, target_layout, |o, t, n| {
            // SAFETY: as in `rget_strided` (`result` is exclusively borrowed for 'scope).
            let part: &'scope mut [T] = unsafe { std::slice::from_raw_parts_mut(base.add(o), n) };
            let data: &[u8] = if no_op { &[] } else { bytemuck::cast_slice(&data[o..o + n]) };
            // SAFETY: as in `rput_strided` for `data` and `rget_strided` for `part`.
            let started = unsafe {
                core.start_get_accumulate(call, data, bytemuck::cast_slice_mut(part), target, t, T::ELEMENT, O::OP)?
            };
            stretches.extend(started.map(|started| Outcome::of(&*core.comm.dev, started)));
            Ok(())
        })?;
        self.stretches_request(stretches)
    }

    /// The request of one started operation (complete at once for `None`: `PROC_NULL` or no
    /// data, as in MPI).
    ///
    /// # Safety
    /// As for [`Scope::adopt_request`].
    unsafe fn scoped_request(&'scope self, started: Option<Started>, wait_at_end: bool) -> Request<'scope> {
        match started {
            // SAFETY: the caller's contract.
            Some(started) => unsafe { self.adopt_request(started, wait_at_end) },
            None => Request::empty(self),
        }
    }

    /// One request for the stretches of a strided operation: complete at once when every
    /// stretch completed in the call (or `Err`, when one failed), else an engine operation that tests the rest (the first
    /// error wins; dropping it releases those still in flight).
    fn stretches_request(&'scope self, stretches: Vec<Outcome<'scope>>) -> Result<Request<'scope>> {
        let mut failed = None;
        let mut in_flight = Vec::new();
        for stretch in stretches {
            match stretch {
                Outcome::Complete(Err(e)) => {
                    failed.get_or_insert(e);
                }
                Outcome::Complete(Ok(_)) => {}
                Outcome::InFlight(op) => in_flight.push(op),
            }
        }
        if in_flight.is_empty() {
            // Every stretch finished in the call: an error is the call's, as for the blocking form.
            return failed.map_or(Ok(Request::empty(self)), Err);
        }
        self.start_collective(move || async move {
            poll_fn(|_| {
                in_flight.retain_mut(|op| match op.test() {
                    Ok(None) => true,
                    Ok(Some(_)) => false,
                    Err(e) => {
                        failed.get_or_insert(e);
                        false
                    }
                });
                if in_flight.is_empty() { Poll::Ready(failed.take().map_or(Ok(()), Err)) } else { Poll::Pending }
            })
            .await
        })
    }
}
