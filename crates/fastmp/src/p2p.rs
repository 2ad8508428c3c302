//! Blocking point-to-point operations on [`Comm`]: `Pod` slices move as raw bytes (no
//! serialization); any serde type moves through `send_obj`/`recv_obj`.

use bytemuck::Pod;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::comm::{Comm, Status};
use crate::device::RawStatus;
use crate::device::{ANY_TAG, PROC_NULL, SendMode, Source, requests};
use crate::error::{Error, Result};
use crate::scope::EMPTY_STATUS;
use crate::trace::{self, Event, Kind};

/// What an operation with [`crate::PROC_NULL`] reports from the device layer: `Comm::status`
/// turns it into [`EMPTY_STATUS`] (source `PROC_NULL`, which no group contains, `ANY_TAG`, no
/// bytes).
pub(crate) const NULL_RAW: RawStatus = RawStatus { source: PROC_NULL, tag: ANY_TAG, bytes: 0, cancelled: false };

impl Comm {
    /// Sends `buf` to `dest` with `tag` (MPI_Send): returns once `buf` may be reused.
    ///
    /// ```
    /// fastmp::run(2, |world| {
    ///     if world.rank() == 0 {
    ///         world.send(&[1.5f64, 2.5], 1, 7)?;
    ///     } else {
    ///         let mut buf = [0.0f64; 2];
    ///         let status = world.recv(&mut buf, 0, 7)?;
    ///         assert_eq!((buf, status.count::<f64>()), ([1.5, 2.5], 2));
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn send<T: bytemuck::NoUninit>(&self, buf: &[T], dest: usize, tag: i32) -> Result<()> {
        self.send_bytes(bytemuck::cast_slice(buf), dest, tag, SendMode::Standard)
    }

    /// Synchronous send (MPI_Ssend): returns only once the receiver has matched the message.
    pub fn ssend<T: bytemuck::NoUninit>(&self, buf: &[T], dest: usize, tag: i32) -> Result<()> {
        self.send_bytes(bytemuck::cast_slice(buf), dest, tag, SendMode::Synchronous)
    }

    /// Ready-mode send (MPI_Rsend). fastmp does not require the receive to be posted first: it is
    /// a standard send, so a program that is correct in MPI's ready mode behaves the same.
    pub fn rsend<T: bytemuck::NoUninit>(&self, buf: &[T], dest: usize, tag: i32) -> Result<()> {
        self.send(buf, dest, tag)
    }

    /// Buffered send (MPI_Bsend): returns at once, whether or not the receiver has posted its
    /// receive, and `buf` may be reused. A message the device cannot send at once (above the
    /// eager limit, or while the link is busy) is copied into memory the device owns until
    /// delivered, so no `MPI_Buffer_attach` is needed and the buffer never runs out. Delivery
    /// errors after the return are not reported, as in MPI.
    ///
    /// ```
    /// fastmp::run(2, |world| {
    ///     let peer = 1 - world.rank();
    ///     // Both ranks send first: with bsend this cannot deadlock, whatever the size.
    ///     world.bsend(&vec![world.rank() as u8; 1 << 20], peer, 0)?;
    ///     let mut inc = vec![0u8; 1 << 20];
    ///     world.recv(&mut inc, peer, 0)?;
    ///     assert!(inc.iter().all(|&b| b == peer as u8));
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn bsend<T: bytemuck::NoUninit>(&self, buf: &[T], dest: usize, tag: i32) -> Result<()> {
        let Some(dest) = self.dest_or_null(dest, tag)? else { return Ok(()) };
        requests::detached_send(&*self.dev, bytemuck::cast_slice(buf), dest, tag, self.context)
    }

    /// Sends `bytes` (nothing to [`crate::PROC_NULL`]).
    pub(crate) fn send_bytes(&self, bytes: &[u8], dest: usize, tag: i32, mode: SendMode) -> Result<()> {
        let Some(dest) = self.dest_or_null(dest, tag)? else { return Ok(()) };
        let started = trace::start();
        self.dev.send(bytes, dest, tag, self.context, mode)?;
        trace::record(started, || (self.dev.rank(), Event::p2p(Kind::Send, dest, tag, bytes.len())));
        Ok(())
    }

    /// Receives into `buf` from `source` (a rank or [`crate::ANY_SOURCE`]) with `tag` (or
    /// [`crate::ANY_TAG`]) (MPI_Recv). A longer message fails with [`Error::Truncated`] without
    /// writing past `buf`. From [`crate::PROC_NULL`] it returns at once with an empty status
    /// (source `PROC_NULL`, tag `ANY_TAG`, no bytes), leaving `buf` as it was.
    pub fn recv<T: Pod>(&self, buf: &mut [T], source: impl Into<Source>, tag: i32) -> Result<Status> {
        let elem_size = size_of::<T>();
        self.recv_bytes(bytemuck::cast_slice_mut(buf), source.into(), tag).and_then(|raw| self.status(raw, elem_size))
    }

    /// Receives into `bytes`; from [`crate::PROC_NULL`] at once, with [`NULL_RAW`].
    pub(crate) fn recv_bytes(&self, bytes: &mut [u8], source: Source, tag: i32) -> Result<RawStatus> {
        let Some(spec) = self.spec_or_null(source, tag)? else { return Ok(NULL_RAW) };
        let Some(started) = trace::start() else { return requests::recv(&*self.dev, bytes, spec) };
        // Traced: a message that has not arrived yet makes this receive a wait on its sender.
        let waits = self.dev.iprobe(spec)?.is_none();
        let raw = requests::recv(&*self.dev, bytes, spec)?;
        let event = Event::p2p(Kind::Recv, raw.source, raw.tag, raw.bytes);
        trace::record(Some(started), || (self.dev.rank(), event));
        if waits {
            trace::record(Some(started), || (self.dev.rank(), Event { on: Some("recv"), kind: Kind::Wait, ..event }));
        }
        Ok(raw)
    }

    /// Sends `sendbuf` to `dest` and receives into `recvbuf` from `source` at the same time
    /// (MPI_Sendrecv), so exchanges in a ring cannot deadlock.
    #[allow(clippy::too_many_arguments)]
    pub fn sendrecv<S: bytemuck::NoUninit, R: Pod>(
        &self,
        sendbuf: &[S],
        dest: usize,
        sendtag: i32,
        recvbuf: &mut [R],
        source: impl Into<Source>,
        recvtag: i32,
    ) -> Result<Status> {
        let source = source.into();
        self.dest_or_null(dest, sendtag)?;
        self.spec_or_null(source, recvtag)?;
        self.scope(|s| {
            let recv = s.irecv(recvbuf, source, recvtag)?;
            let send = s.isend(sendbuf, dest, sendtag)?;
            let status = recv.wait();
            send.wait()?;
            status
        })
    }

    /// Like [`Comm::sendrecv`] with one buffer: sends its contents, then replaces them with the
    /// received message (MPI_Sendrecv_replace).
    pub fn sendrecv_replace<T: Pod>(
        &self,
        buf: &mut [T],
        dest: usize,
        sendtag: i32,
        source: impl Into<Source>,
        recvtag: i32,
    ) -> Result<Status> {
        let outgoing = buf.to_vec();
        self.sendrecv(&outgoing, dest, sendtag, buf, source, recvtag)
    }

    /// Waits for a message matching `source`/`tag` and reports it without receiving it
    /// (MPI_Probe). [`Status::count`] gives the message's length in elements of a type. With
    /// [`crate::PROC_NULL`] it returns an empty status at once.
    pub fn probe(&self, source: impl Into<Source>, tag: i32) -> Result<Status> {
        let Some(spec) = self.spec_or_null(source.into(), tag)? else { return Ok(EMPTY_STATUS) };
        let mut found = None;
        self.dev.wait_until(&mut || {
            found = self.dev.iprobe(spec)?;
            Ok(found.is_some())
        })?;
        self.status(found.expect("probe completed"), 1)
    }

    /// Non-blocking probe (MPI_Iprobe): `None` if no matching message has arrived; an empty
    /// status at once with [`crate::PROC_NULL`].
    pub fn iprobe(&self, source: impl Into<Source>, tag: i32) -> Result<Option<Status>> {
        let Some(spec) = self.spec_or_null(source.into(), tag)? else { return Ok(Some(EMPTY_STATUS)) };
        self.dev.iprobe(spec)?.map(|raw| self.status(raw, 1)).transpose()
    }

    /// Sends any serde value; it is serialized (postcard) on this side and deserialized by
    /// [`Comm::recv_obj`].
    ///
    /// ```
    /// use std::collections::HashMap;
    /// fastmp::run(2, |world| {
    ///     if world.rank() == 0 {
    ///         let map = HashMap::from([("answer".to_string(), vec![4, 2])]);
    ///         world.send_obj(&map, 1, 0)?;
    ///     } else {
    ///         let (map, _status): (HashMap<String, Vec<i32>>, _) = world.recv_obj(0, 0)?;
    ///         assert_eq!(map["answer"], [4, 2]);
    ///     }
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn send_obj<T: Serialize + ?Sized>(&self, value: &T, dest: usize, tag: i32) -> Result<()> {
        if self.dest_or_null(dest, tag)?.is_none() {
            return Ok(());
        }
        let bytes = postcard::to_allocvec(value).map_err(|e| Error::Serialization(e.to_string()))?;
        self.send_bytes(&bytes, dest, tag, SendMode::Standard)
    }

    /// Receives a value sent with [`Comm::send_obj`]. `Status::bytes` is the encoded size.
    /// From [`crate::PROC_NULL`] there is no value to return: that is an error.
    pub fn recv_obj<T: DeserializeOwned>(&self, source: impl Into<Source>, tag: i32) -> Result<(T, Status)> {
        let source = source.into();
        if self.spec_or_null(source, tag)?.is_none() {
            return Err(Error::InvalidArgument(
                "recv_obj: source is PROC_NULL, which sends no value (use recv for an empty receive)".into(),
            ));
        }
        let probed = self.probe(source, tag)?;
        let mut bytes = vec![0u8; probed.bytes];
        // Same source and tag as the probed message: non-overtaking makes it the one we receive.
        let raw = self.recv_bytes(&mut bytes, Source::Rank(probed.source), probed.tag)?;
        let value = postcard::from_bytes(&bytes).map_err(|e| Error::Serialization(e.to_string()))?;
        Ok((value, self.status(raw, 1)?))
    }
}
