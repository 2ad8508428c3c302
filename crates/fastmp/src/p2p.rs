//! Blocking point-to-point operations on [`Comm`]: `Pod` slices move as raw bytes (no
//! serialization); any serde type moves through `send_obj`/`recv_obj`.

use bytemuck::Pod;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::comm::{Comm, Status};
use crate::device::{MatchSpec, SendMode, Source, requests};
use crate::error::{Error, Result};

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

    pub(crate) fn send_bytes(&self, bytes: &[u8], dest: usize, tag: i32, mode: SendMode) -> Result<()> {
        let dest = self.check_dest(dest, tag)?;
        requests::send(&*self.dev, bytes, dest, tag, self.context, mode).map(drop)
    }

    /// Receives into `buf` from `source` (a rank or [`crate::ANY_SOURCE`]) with `tag` (or
    /// [`crate::ANY_TAG`]) (MPI_Recv). A longer message fails with [`Error::Truncated`] without
    /// writing past `buf`.
    pub fn recv<T: Pod>(&self, buf: &mut [T], source: impl Into<Source>, tag: i32) -> Result<Status> {
        let elem_size = size_of::<T>();
        self.recv_bytes(bytemuck::cast_slice_mut(buf), source.into(), tag).and_then(|raw| self.status(raw, elem_size))
    }

    pub(crate) fn recv_bytes(&self, bytes: &mut [u8], source: Source, tag: i32) -> Result<crate::device::RawStatus> {
        let spec = self.recv_spec(source, tag)?;
        requests::recv(&*self.dev, bytes, spec)
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
        self.check_dest(dest, sendtag)?;
        self.recv_spec(source, recvtag)?;
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
    /// (MPI_Probe). [`Status::count`] gives the message's length in elements of a type.
    pub fn probe(&self, source: impl Into<Source>, tag: i32) -> Result<Status> {
        let spec = self.probe_spec(source.into(), tag)?;
        let mut found = None;
        self.dev.wait_until(&mut || {
            found = self.dev.iprobe(spec)?;
            Ok(found.is_some())
        })?;
        self.status(found.expect("probe completed"), 1)
    }

    /// Non-blocking probe (MPI_Iprobe): `None` if no matching message has arrived.
    pub fn iprobe(&self, source: impl Into<Source>, tag: i32) -> Result<Option<Status>> {
        let spec = self.probe_spec(source.into(), tag)?;
        self.dev.iprobe(spec)?.map(|raw| self.status(raw, 1)).transpose()
    }

    fn probe_spec(&self, source: Source, tag: i32) -> Result<MatchSpec> {
        self.recv_spec(source, tag)
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
        self.check_dest(dest, tag)?;
        let bytes = postcard::to_allocvec(value).map_err(|e| Error::Serialization(e.to_string()))?;
        self.send_bytes(&bytes, dest, tag, SendMode::Standard)
    }

    /// Receives a value sent with [`Comm::send_obj`]. `Status::bytes` is the encoded size.
    pub fn recv_obj<T: DeserializeOwned>(&self, source: impl Into<Source>, tag: i32) -> Result<(T, Status)> {
        let probed = self.probe(source, tag)?;
        let mut bytes = vec![0u8; probed.bytes];
        // Same source and tag as the probed message: non-overtaking makes it the one we receive.
        let raw = self.recv_bytes(&mut bytes, Source::Rank(probed.source), probed.tag)?;
        let value = postcard::from_bytes(&bytes).map_err(|e| Error::Serialization(e.to_string()))?;
        Ok((value, self.status(raw, 1)?))
    }
}
