//! The public API's unsafe escape hatches, kept apart from the safe typed layer.

use bytemuck::Pod;

use crate::device::Source;
use crate::error::{Error, Result};
use crate::scope::{Request, Scope};

impl<'scope> Scope<'scope, '_> {
    /// Starts a receive into raw memory, for callers that need what safe borrows forbid — chiefly
    /// OSU-style benchmarks that post a whole window of receives into one buffer.
    ///
    /// # Safety
    /// `buf` must be valid for writes of `len` elements until this scope ends, and must not be
    /// read or written by anything else meanwhile. Several receives into overlapping memory race
    /// with each other exactly as they would in C (the final contents are unspecified).
    pub unsafe fn irecv_raw<T: Pod>(
        &'scope self,
        buf: *mut T,
        len: usize,
        source: impl Into<Source>,
        tag: i32,
    ) -> Result<Request<'scope>> {
        let Some(spec) = self.comm.spec_or_null(source.into(), tag)? else {
            return Ok(Request::empty(self));
        };
        let bytes = len
            .checked_mul(size_of::<T>())
            .ok_or_else(|| Error::InvalidArgument(format!("irecv_raw: {len} elements overflow the address space")))?;
        // SAFETY: forwarded caller contract (valid and exclusive until the scope ends).
        let started = unsafe { self.ledger().irecv_raw(buf.cast::<u8>(), bytes, spec) };
        Request::started(self, started, size_of::<T>())
    }
}
