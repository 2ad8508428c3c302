//! Moving bytes between blocks of shared arrays: one direct copy where the device can address
//! both blocks (thread ranks of one process), a get or put through a staging buffer where it can
//! address one, a get then a put where it can address neither. Every transfer is complete at its
//! destination when it returns, so a `post` that follows it announces data that is there.

use super::team::Team;
use crate::error::{Error, Result};
use crate::window::lifecycle::Core;

/// A place in one rank's block of one array: byte `offset` of `rank`'s part of `core`'s window.
#[derive(Clone, Copy)]
pub(super) struct Block<'a> {
    pub(super) core: &'a Core,
    pub(super) rank: usize,
    pub(super) offset: usize,
}

impl Block<'_> {
    /// The same block `bytes` further on.
    pub(super) fn at(self, bytes: usize) -> Self {
        Block { offset: self.offset + bytes, ..self }
    }

    fn check(&self, len: usize) -> Result<()> {
        let part = self.core.dev.part_lengths()[self.rank];
        match self.offset.checked_add(len) {
            Some(end) if end <= part => Ok(()),
            _ => Err(Error::InvalidArgument(format!(
                "pgas transfer: bytes {}..{} lie outside rank {}'s block of {part} bytes",
                self.offset,
                self.offset.saturating_add(len),
                self.rank
            ))),
        }
    }

    fn get(&self, into: &mut [u8]) -> Result<()> {
        // SAFETY: `into` stays exclusively borrowed until `finish` returns, which completes or
        // releases the operation.
        let started = unsafe { self.core.dev.get(self.rank, self.offset, into.as_mut_ptr(), into.len())? };
        self.core.finish(started)
    }

    /// Puts `data` and waits until it is at the target.
    fn put(&self, data: &[u8]) -> Result<()> {
        // SAFETY: `data` stays borrowed (unmodified) until `finish` returns, which completes or
        // releases the operation.
        let started = unsafe { self.core.dev.put(self.rank, self.offset, data.as_ptr(), data.len())? };
        self.core.finish(started)?;
        self.core.dev.flush(Some(self.rank))
    }
}

impl Team {
    /// Copies `len` bytes from `src` to `dst`.
    pub(super) fn copy(&self, dst: Block<'_>, src: Block<'_>, len: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        dst.check(len)?;
        src.check(len)?;
        if std::ptr::eq(dst.core, src.core) && dst.rank == src.rank {
            // Both ranges in one block (`SharedArray::memcpy` within an array): a segment cannot
            // copy from itself, so go through the staging buffer.
            let mut staging = self.staging(len);
            self.read(src, &mut staging[..len])?;
            return self.write(dst, &staging[..len]);
        }
        let dst_direct = dst.core.dev.with_part(dst.rank, &mut |to| {
            let src_direct =
                src.core.dev.with_part(src.rank, &mut |from| to.copy_from(dst.offset, from, src.offset, len))?;
            if !src_direct {
                let mut staging = self.staging(len);
                src.get(&mut staging[..len])?;
                to.write(dst.offset, &staging[..len])?;
            }
            Ok(())
        })?;
        if !dst_direct {
            let mut staging = self.staging(len);
            let src_direct =
                src.core.dev.with_part(src.rank, &mut |from| from.read(src.offset, &mut staging[..len]))?;
            if !src_direct {
                src.get(&mut staging[..len])?;
            }
            dst.put(&staging[..len])?;
        }
        Ok(())
    }

    /// Reads `into.len()` bytes of `src` into private memory.
    pub(super) fn read(&self, src: Block<'_>, into: &mut [u8]) -> Result<()> {
        if into.is_empty() {
            return Ok(());
        }
        src.check(into.len())?;
        if !src.core.dev.with_part(src.rank, &mut |from| from.read(src.offset, into))? {
            src.get(into)?;
        }
        Ok(())
    }

    /// Writes private `data` into `dst`, complete there on return.
    pub(super) fn write(&self, dst: Block<'_>, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        dst.check(data.len())?;
        if !dst.core.dev.with_part(dst.rank, &mut |to| to.write(dst.offset, data))? {
            dst.put(data)?;
        }
        Ok(())
    }

    /// The staging buffer, at least `len` bytes (kept for later calls up to the thesis's limit:
    /// see [`Team::trim_staging`]).
    fn staging(&self, len: usize) -> std::cell::RefMut<'_, Vec<u8>> {
        let mut staging = self.staging.borrow_mut();
        if staging.len() < len {
            staging.resize(len, 0);
        }
        staging
    }
}
