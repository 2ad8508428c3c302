//! Matched probe (MPI_Mprobe, MPI_Improbe, MPI_Mrecv): a probe that takes the message it finds
//! off matching, so the receive that follows gets exactly that message even when other threads
//! of the rank probe and receive on the same communicator at the same time.
//!
//! The device does the taking (`Device::improbe`, `mrecv`, `discard`); this module gives the
//! taken message an owner, [`Message`], whose drop discards it: the data is dropped and the
//! sender released (a synchronous or rendezvous sender is answered as if received), so a
//! forgotten message never holds a sender up.

use std::rc::Rc;

use bytemuck::Pod;
use serde::de::DeserializeOwned;

use crate::comm::{Comm, Status};
use crate::device::{
    ANY_TAG, Device, MatchSpec, MessageId, PROC_NULL, RawStatus, ReqId, SharedDevice, Source, Started,
};
use crate::error::{Error, Result};

/// The device a message was taken from: the rank's own (a `Comm`) or a thread handle.
pub(crate) enum Holder {
    Rank(Rc<dyn Device>),
    Shared(SharedDevice),
}

impl Holder {
    fn dev(&self) -> &dyn Device {
        match self {
            Holder::Rank(dev) => &**dev,
            Holder::Shared(dev) => &**dev,
        }
    }
}

/// A message taken off matching by [`Comm::mprobe`] / [`Comm::improbe`] (or the
/// [`crate::ThreadComm`] twins): MPI's `MPI_Message`. Nothing else can receive it; receive it
/// with [`Message::recv`] (MPI_Mrecv), [`Message::recv_vec`] or [`Message::recv_obj`].
///
/// Dropping a message without receiving it discards its data and completes its sender's side,
/// as a receive into a zero-length buffer would.
///
/// A probe of [`crate::PROC_NULL`] gives the "no process" message (MPI_MESSAGE_NO_PROC): receiving
/// it completes at once with source `PROC_NULL`, tag `ANY_TAG` and no data.
///
/// ```
/// fastmp::run(2, |world| {
///     if world.rank() == 0 {
///         world.send(&[1u32, 2, 3], 1, 5)?;
///     } else {
///         let (message, status) = world.mprobe(fastmp::ANY_SOURCE, fastmp::ANY_TAG)?;
///         let mut buf = vec![0u32; status.bytes / 4];
///         message.recv(&mut buf)?;
///         assert_eq!((buf, status.tag), (vec![1, 2, 3], 5));
///     }
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
#[must_use = "a dropped message is discarded"]
pub struct Message {
    /// `None`: the no-process message, or already received.
    taken: Option<(Holder, MessageId)>,
    /// The message's source in the probing communicator's numbering.
    source: usize,
    raw: RawStatus,
}

impl Message {
    /// The message a probe of `PROC_NULL` finds.
    fn no_proc() -> Self {
        let raw = RawStatus { source: PROC_NULL, tag: ANY_TAG, bytes: 0, cancelled: false };
        Message { taken: None, source: PROC_NULL, raw }
    }

    /// Whether this is the "no process" message of a probe of `PROC_NULL` (MPI_MESSAGE_NO_PROC).
    pub fn is_no_proc(&self) -> bool {
        self.source == PROC_NULL
    }

    /// Size of the message in bytes.
    pub fn bytes(&self) -> usize {
        self.raw.bytes
    }

    /// Receives the message into `buf` (MPI_Mrecv). A longer message fails with
    /// [`Error::Truncated`] (the message is used up either way).
    pub fn recv<T: Pod>(mut self, buf: &mut [T]) -> Result<Status> {
        let raw = self.receive(bytemuck::cast_slice_mut(buf))?;
        Status::of(raw, self.source, size_of::<T>())
    }

    /// Receives the message into a vector of exactly its length.
    pub fn recv_vec<T: Pod>(self) -> Result<(Vec<T>, Status)> {
        let size = size_of::<T>();
        if size == 0 || !self.raw.bytes.is_multiple_of(size) {
            return Err(Error::ElementSize { bytes: self.raw.bytes, elem_size: size });
        }
        let mut buf = vec![T::zeroed(); self.raw.bytes / size];
        let status = self.recv(&mut buf)?;
        Ok((buf, status))
    }

    /// Receives and decodes a value sent with `send_obj`.
    pub fn recv_obj<T: DeserializeOwned>(self) -> Result<(T, Status)> {
        let (bytes, status) = self.recv_vec::<u8>()?;
        let value = postcard::from_bytes(&bytes).map_err(|e| Error::Serialization(e.to_string()))?;
        Ok((value, status))
    }

    fn receive(&mut self, buf: &mut [u8]) -> Result<RawStatus> {
        let Some((holder, id)) = self.taken.take() else { return Ok(self.raw) };
        let dev = holder.dev();
        if dev.is_finalized() {
            dev.discard(id);
            return Err(Error::Finalized("message"));
        }
        // SAFETY: `buf` is exclusively borrowed until this returns, and `complete` leaves no
        // request pointing at it: it waits the receive out, or releases it (also on unwinding).
        let started = unsafe { dev.mrecv(id, buf.as_mut_ptr(), buf.len())? };
        complete(dev, started)
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        if let Some((holder, id)) = self.taken.take() {
            holder.dev().discard(id);
        }
    }
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("source", &self.source)
            .field("tag", &self.raw.tag)
            .field("bytes", &self.raw.bytes)
            .finish()
    }
}

/// Waits for a started receive; a request still outstanding when this frame is left (an error
/// or a panic in the wait) is released, so the device never writes into a buffer given back.
fn complete(dev: &dyn Device, started: Started) -> Result<RawStatus> {
    struct Release<'a>(&'a dyn Device, Option<ReqId>);
    impl Drop for Release<'_> {
        fn drop(&mut self) {
            if let Some(id) = self.1 {
                self.0.release(id);
            }
        }
    }
    match started {
        Started::Complete(result) => result,
        Started::Pending(id) => {
            let mut guard = Release(dev, Some(id));
            let result = dev.wait(id);
            if result.is_ok() {
                guard.1 = None;
            }
            result
        }
    }
}

/// Matched probe over any device view (a `Comm`'s or a `ThreadComm`'s): `spec` is `None` for a
/// probe of `PROC_NULL`; `holder` keeps the device for the message; `source_of` translates world
/// ranks into the communicator's.
pub(crate) struct Prober<'a, F> {
    pub dev: &'a dyn Device,
    pub source_of: F,
}

impl<F: Fn(usize) -> usize> Prober<'_, F> {
    fn message(&self, holder: impl FnOnce() -> Holder, found: (MessageId, RawStatus)) -> (Message, Status) {
        let (id, raw) = found;
        let source = (self.source_of)(raw.source);
        let status = Status::of(raw, source, 1).expect("whole bytes");
        (Message { taken: Some((holder(), id)), source, raw }, status)
    }

    pub(crate) fn improbe(
        &self,
        spec: Option<MatchSpec>,
        holder: impl FnOnce() -> Holder,
    ) -> Result<Option<(Message, Status)>> {
        let Some(spec) = spec else { return Ok(Some(no_proc())) };
        Ok(self.dev.improbe(spec)?.map(|found| self.message(holder, found)))
    }

    pub(crate) fn mprobe(&self, spec: Option<MatchSpec>, holder: impl FnOnce() -> Holder) -> Result<(Message, Status)> {
        let Some(spec) = spec else { return Ok(no_proc()) };
        let mut found = None;
        self.dev.wait_until(&mut || {
            found = self.dev.improbe(spec)?;
            Ok(found.is_some())
        })?;
        Ok(self.message(holder, found.expect("mprobe completed")))
    }
}

fn no_proc() -> (Message, Status) {
    let message = Message::no_proc();
    let status = Status::of(message.raw, PROC_NULL, 1).expect("empty");
    (message, status)
}

impl Comm {
    /// The probe's match spec; `None` for `PROC_NULL` (whose probe finds the no-process message).
    fn mprobe_spec(&self, source: Source, tag: i32) -> Result<Option<MatchSpec>> {
        if source == Source::Rank(PROC_NULL) {
            self.check_live()?;
            return Ok(None);
        }
        self.recv_spec(source, tag).map(Some)
    }

    fn prober(&self) -> Prober<'_, impl Fn(usize) -> usize + '_> {
        Prober { dev: &*self.dev, source_of: |world| self.group.group_rank_of(world).unwrap_or(world) }
    }

    /// Waits for a message matching `source`/`tag` and takes it off matching (MPI_Mprobe):
    /// no other receive or probe sees it again; receive it with [`Message::recv`]. `Status::bytes`
    /// is its size.
    pub fn mprobe(&self, source: impl Into<Source>, tag: i32) -> Result<(Message, Status)> {
        let spec = self.mprobe_spec(source.into(), tag)?;
        self.prober().mprobe(spec, || Holder::Rank(self.dev.clone()))
    }

    /// Non-blocking matched probe (MPI_Improbe): `None` if no matching message has arrived.
    ///
    /// ```
    /// fastmp::run(1, |world| {
    ///     assert!(world.improbe(0, 3)?.is_none());
    ///     world.send(&[7u8; 4], 0, 3)?;
    ///     let (message, status) = world.improbe(0, 3)?.expect("sent to itself");
    ///     assert_eq!(status.bytes, 4);
    ///     let (data, _) = message.recv_vec::<u8>()?;
    ///     assert_eq!(data, [7; 4]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn improbe(&self, source: impl Into<Source>, tag: i32) -> Result<Option<(Message, Status)>> {
        let spec = self.mprobe_spec(source.into(), tag)?;
        self.prober().improbe(spec, || Holder::Rank(self.dev.clone()))
    }

    /// Receives a message taken by [`Comm::mprobe`] into `buf` (MPI_Mrecv); the same as
    /// [`Message::recv`].
    pub fn mrecv<T: Pod>(&self, buf: &mut [T], message: Message) -> Result<Status> {
        message.recv(buf)
    }

    /// Receives a message taken by [`Comm::mprobe`] into a vector of exactly its length.
    pub fn mrecv_vec<T: Pod>(&self, message: Message) -> Result<(Vec<T>, Status)> {
        message.recv_vec()
    }
}
