//! Request-based operations (MPI_Rput, MPI_Rget, MPI_Raccumulate, MPI_Rget_accumulate): checked
//! as the blocking ones, then the device's started operation is handed to the scope's ledger, so
//! the scope's end finishes it even if the request is dropped or leaked.

use bytemuck::Pod;

use super::{RmaElement, RmaOp, Window};
use crate::error::Result;
use crate::scope::{EMPTY_STATUS, Request, Scope};

impl<'scope, 'env> Scope<'scope, 'env> {
    /// Request-based put (MPI_Rput): the request completes when `data` is free again.
    pub fn rput<T: Pod>(
        &'scope self,
        win: &'scope Window<'_, T>,
        data: &'scope [T],
        target: usize,
        disp: usize,
    ) -> Result<Request<'scope>> {
        let core = &win.core;
        let Some(offset) = core.target("rput", target, disp, data.len())? else { return Ok(self.null_request()) };
        if data.is_empty() {
            return Ok(self.null_request());
        }
        let bytes: &'scope [u8] = bytemuck::cast_slice(data);
        // SAFETY: `data` is borrowed for 'scope and the request joins the scope's ledger, which
        // completes or releases it before 'scope ends.
        unsafe {
            let started = core.dev.put(target, offset, bytes.as_ptr(), bytes.len())?;
            Ok(self.adopt_request(started, false))
        }
    }

    /// Request-based get (MPI_Rget): the request completes when `into` holds the data.
    pub fn rget<T: Pod>(
        &'scope self,
        win: &'scope Window<'_, T>,
        into: &'scope mut [T],
        target: usize,
        disp: usize,
    ) -> Result<Request<'scope>> {
        let core = &win.core;
        let Some(offset) = core.target("rget", target, disp, into.len())? else { return Ok(self.null_request()) };
        if into.is_empty() {
            return Ok(self.null_request());
        }
        let bytes: &'scope mut [u8] = bytemuck::cast_slice_mut(into);
        // SAFETY: `into` is exclusively borrowed for 'scope and the request joins the scope's
        // ledger, which waits for (or releases) it before 'scope ends.
        unsafe {
            let started = core.dev.get(target, offset, bytes.as_mut_ptr(), bytes.len())?;
            Ok(self.adopt_request(started, true))
        }
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
        let core = &win.core;
        let Some(offset) = core.target("raccumulate", target, disp, data.len())? else {
            return Ok(self.null_request());
        };
        if data.is_empty() {
            return Ok(self.null_request());
        }
        let bytes: &'scope [u8] = bytemuck::cast_slice(data);
        // SAFETY: as in `rput`.
        unsafe {
            let started = core.dev.accumulate(target, offset, bytes.as_ptr(), bytes.len(), T::ELEMENT, O::OP)?;
            Ok(self.adopt_request(started, false))
        }
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
        let core = &win.core;
        super::lifecycle::Core::check_fetch_lengths("rget_accumulate", data.len(), result.len(), O::OP)?;
        let Some(offset) = core.target("rget_accumulate", target, disp, result.len())? else {
            return Ok(self.null_request());
        };
        if result.is_empty() {
            return Ok(self.null_request());
        }
        let (data, result): (&'scope [u8], &'scope mut [u8]) =
            (bytemuck::cast_slice(data), bytemuck::cast_slice_mut(result));
        // SAFETY: `data` (shared) and `result` (exclusive) are borrowed for 'scope and the request
        // joins the scope's ledger, which waits for (or releases) it before 'scope ends.
        unsafe {
            let started = core.dev.get_accumulate(
                target,
                offset,
                data.as_ptr(),
                result.as_mut_ptr(),
                result.len(),
                T::ELEMENT,
                O::OP,
            )?;
            Ok(self.adopt_request(started, true))
        }
    }

    /// The request of an operation on `PROC_NULL`: complete at once, as in MPI.
    fn null_request(&'scope self) -> Request<'scope> {
        Request::completed(self, Ok(EMPTY_STATUS))
    }
}
