//! Single values, vectors of unknown length and types with invalid bit patterns.
//!
//! Sends take `bytemuck::NoUninit` (every byte initialized: `Pod` types, `bool`, fieldless
//! `#[repr(u8)]` enums). Receives that write straight into the caller's memory need `Pod` (any
//! bytes are a valid value); [`Comm::recv_checked`], [`Comm::recv_value`] and [`Comm::recv_vec`]
//! accept `bytemuck::CheckedBitPattern` types and validate every element before the caller can
//! see it, so a `bool` that arrives as `2` is an `Err`, never undefined behaviour.
//!
//! Padded or nested structs are not `NoUninit` (padding bytes are uninitialized): give them
//! explicit padding fields and derive `Pod` + `Zeroable` (through the re-export, see
//! [`crate::bytemuck`]), or move them as serde objects with `send_obj`.

use std::cell::Cell;

use bytemuck::{CheckedBitPattern, NoUninit};

use crate::comm::{Comm, Status};
use crate::device::Source;
use crate::error::{Error, Result};

thread_local! {
    /// Staging bytes for packed layouts and checked receives, reused by the rank's later calls
    /// (each rank is a thread, or has its own per thread): no allocation once warm.
    static SCRATCH: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Staging kept between calls up to this size; a larger one is freed after its call.
const SCRATCH_KEEP: usize = 64 << 20;

/// Runs `f` on `len` bytes of the thread's staging buffer (zeroed when first grown, otherwise
/// holding earlier contents). Re-entrant: a nested call gets a buffer of its own.
pub(crate) fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    let mut buf = SCRATCH.take();
    if buf.len() < len {
        buf.resize(len, 0);
    }
    let result = f(&mut buf[..len]);
    if buf.capacity() <= SCRATCH_KEEP {
        SCRATCH.set(buf);
    }
    result
}

/// Checks that every `size_of::<T>()` chunk of `bytes` is a valid `T`; the error names `call`,
/// the first bad element and the message's origin.
fn validate<T: CheckedBitPattern>(bytes: &[u8], call: &'static str, status: &Status) -> Result<()> {
    // `chunks_exact(0)` panics; a zero-sized type has nothing to check.
    if size_of::<T>() == 0 {
        return Ok(());
    }
    match bytes.chunks_exact(size_of::<T>()).position(|c| bytemuck::checked::try_pod_read_unaligned::<T>(c).is_err()) {
        None => Ok(()),
        Some(index) => Err(Error::InvalidValue {
            call,
            type_name: std::any::type_name::<T>(),
            index,
            source_rank: status.source,
            tag: status.tag,
        }),
    }
}

/// Reads the validated element `index` of `bytes`.
fn read<T: CheckedBitPattern>(bytes: &[u8], index: usize) -> T {
    let size = size_of::<T>();
    bytemuck::checked::pod_read_unaligned(&bytes[index * size..(index + 1) * size])
}

impl Comm {
    /// Sends one value (MPI_Send with a count of 1); the same message as `send(&[*value], ..)`.
    ///
    /// ```
    /// fastmp::run(2, |world| {
    ///     if world.rank() == 0 {
    ///         world.send_value(&true, 1, 0)?;
    ///         world.send_value(&2.5f64, 1, 1)?;
    ///     } else {
    ///         let (done, _) = world.recv_value::<bool>(0, 0)?;
    ///         let (x, status) = world.recv_value::<f64>(0, 1)?;
    ///         assert_eq!((done, x, status.source), (true, 2.5, 0));
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn send_value<T: NoUninit>(&self, value: &T, dest: usize, tag: i32) -> Result<()> {
        self.send(std::slice::from_ref(value), dest, tag)
    }

    /// Receives exactly one value (MPI_Recv with a count of 1). A message of another length is
    /// [`Error::MessageLength`] (a longer one [`Error::Truncated`]); bytes that are not a valid
    /// `T` are [`Error::InvalidValue`].
    pub fn recv_value<T: CheckedBitPattern>(&self, source: impl Into<Source>, tag: i32) -> Result<(T, Status)> {
        let size = size_of::<T>();
        with_scratch(size, |bytes| {
            let raw = self.recv_bytes(bytes, source.into(), tag)?;
            let status = self.status(raw, 1)?;
            if raw.bytes != size {
                let (source_rank, tag) = (status.source, status.tag);
                return Err(Error::MessageLength {
                    call: "recv_value",
                    bytes: raw.bytes,
                    expected: size,
                    source_rank,
                    tag,
                });
            }
            validate::<T>(bytes, "recv_value", &status)?;
            Ok((read(bytes, 0), status))
        })
    }

    /// Receives a message of any length into a new vector of exactly its length (probe, allocate,
    /// receive: MPI_Probe + MPI_Get_count + MPI_Recv). Bytes that are not a valid `T` are
    /// [`Error::InvalidValue`]; a length that is not a whole number of `T`s is
    /// [`Error::ElementSize`].
    ///
    /// ```
    /// fastmp::run(2, |world| {
    ///     if world.rank() == 0 {
    ///         world.send(&[1u32, 2, 3], 1, 0)?;
    ///     } else {
    ///         let (v, status) = world.recv_vec::<u32>(0, 0)?;
    ///         assert_eq!((v, status.count::<u32>()), (vec![1, 2, 3], 3));
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn recv_vec<T: CheckedBitPattern>(&self, source: impl Into<Source>, tag: i32) -> Result<(Vec<T>, Status)> {
        let size = size_of::<T>();
        if size == 0 {
            return Err(Error::InvalidArgument(format!(
                "recv_vec::<{}>: a zero-sized element type has no length on the wire",
                std::any::type_name::<T>()
            )));
        }
        let probed = self.probe(source, tag)?;
        let len = probed.count_of::<T>().ok_or(Error::ElementSize { bytes: probed.bytes, elem_size: size })?;
        let mut vec = Vec::<T>::with_capacity(len);
        let spare = vec.spare_capacity_mut().as_mut_ptr().cast::<u8>();
        // SAFETY: the vector's spare capacity holds at least `len` elements, i.e. `probed.bytes`
        // bytes, owned by `vec` and not otherwise referenced; they are zeroed before the byte
        // slice over them is made, so it covers initialized `u8`s.
        let bytes = unsafe {
            std::ptr::write_bytes(spare, 0, probed.bytes);
            std::slice::from_raw_parts_mut(spare, probed.bytes)
        };
        // Same source and tag as the probed message: non-overtaking makes it the one we receive.
        let raw = self.recv_bytes(bytes, Source::Rank(probed.source), probed.tag)?;
        let status = self.status(raw, size)?;
        if raw.bytes != probed.bytes {
            let (source_rank, tag) = (status.source, status.tag);
            return Err(Error::MessageLength {
                call: "recv_vec",
                bytes: raw.bytes,
                expected: probed.bytes,
                source_rank,
                tag,
            });
        }
        validate::<T>(bytes, "recv_vec", &status)?;
        // SAFETY: `len` is within the capacity, and its `len` elements were all written by the
        // receive and are valid `T`s (validated just above).
        unsafe { vec.set_len(len) };
        Ok((vec, status))
    }

    /// Receives into `buf` for element types with invalid bit patterns (`bool`, fieldless
    /// enums: `bytemuck::CheckedBitPattern`), as [`Comm::recv`] does for `Pod` types: the message
    /// is staged, validated, and only then copied into `buf`, so on [`Error::InvalidValue`]
    /// `buf` is unchanged.
    ///
    /// ```
    /// fastmp::run(2, |world| {
    ///     if world.rank() == 0 {
    ///         world.send(&[true, false, true], 1, 0)?;
    ///         world.send(&[7u8], 1, 1)?; // not a bool
    ///     } else {
    ///         let mut flags = [false; 3];
    ///         world.recv_checked(&mut flags, 0, 0)?;
    ///         assert_eq!(flags, [true, false, true]);
    ///         let err = world.recv_checked(&mut flags[..1], 0, 1).unwrap_err();
    ///         assert!(matches!(err, fastmp::Error::InvalidValue { index: 0, .. }));
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn recv_checked<T: CheckedBitPattern>(
        &self,
        buf: &mut [T],
        source: impl Into<Source>,
        tag: i32,
    ) -> Result<Status> {
        let size = size_of::<T>();
        with_scratch(size_of_val(buf), |bytes| {
            let raw = self.recv_bytes(bytes, source.into(), tag)?;
            let status = self.status(raw, size)?;
            let got = &bytes[..raw.bytes];
            validate::<T>(got, "recv_checked", &status)?;
            for (i, slot) in buf.iter_mut().take(status.count::<T>()).enumerate() {
                *slot = read(got, i);
            }
            Ok(status)
        })
    }
}
