//! Start-up of the tcp mesh: a rendezvous at rank 0 exchanges listening addresses and where each
//! rank runs ([`Site`]), then every rank connects to the lower ranks and accepts the higher ones.
//!
//! Every connection is authenticated ([`super::handshake`]) before a single byte of it is trusted;
//! strangers and garbage are logged and dropped, and never stop the start-up. Each handshake runs
//! on its own short-lived thread, so a silent stranger cannot stall the accept loop.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use socket2::{SockRef, TcpKeepalive};

use super::handshake::{self, JobSecret, Role};
use super::shm_ring::{self, ShmRings};
use crate::device::{Placement, lock_ignoring_poison};
use crate::error::{Error, Result};

/// Longest hello accepted (a real one is at most a few hundred bytes, most of it the node key).
const MAX_HELLO: usize = 4096;
/// Longest node key accepted (a boot id and a host name take about a hundred bytes).
const MAX_NODE_KEY: usize = 256;
/// Bound on one rank's entry in the address table (address, process key, node key, and their
/// length prefixes), so the table's bound grows with the job.
const MAX_TABLE_ENTRY: usize = MAX_NODE_KEY + 64;
/// How long one connection may take to prove itself.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between attempts to reach a listener that is not up yet.
const RETRY_PAUSE: Duration = Duration::from_millis(20);
/// Accept-loop polling interval (the listener is non-blocking so the deadline holds).
const ACCEPT_PAUSE: Duration = Duration::from_millis(2);

/// Where rank 0's rendezvous is.
pub(crate) enum Rendezvous {
    /// Rank 0: the listener to accept on (bound by us, or inherited from the launcher).
    Listen(TcpListener),
    /// Other ranks: the address to connect to.
    Connect(SocketAddr),
}

/// Socket settings applied to every mesh connection.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SocketOptions {
    /// `SO_SNDBUF` in bytes (`FASTMP_TCP_SNDBUF`; 0: the kernel's own, autotuned; unset: 256 KiB).
    pub send_buffer: Option<usize>,
    pub recv_buffer: Option<usize>,
    /// Pacing fragment of long payloads in bytes (`FASTMP_TCP_PACE`; 0 or unset: off), see `tx`.
    pub pace: Option<usize>,
    /// Offer and accept shared-memory rings to and from ranks on this node (see `link`).
    pub shm_rings: bool,
}

/// Smallest pacing fragment: smaller ones would cost a system call per few segments.
const MIN_PACE: usize = 16 * 1024;
/// Default send buffer. A kernel left to autotune it queues megabytes, which on loopback it
/// sends from the receiver's CPU as acknowledgements arrive, out of order with the sender's own
/// transmissions, and each reordering costs a spurious fast retransmit. A 256 KiB buffer (the
/// kernel doubles it) keeps the queue within what the window sends at once, without the
/// sender polling its queue as pacing does. Ping-pong against Open MPI over tcp,self (2-vCPU
/// AMD EPYC VM, quiet, 4 alternating rounds): 256 KiB–4 MiB 0.76–0.94 / 0.83–0.95 / 0.94–0.99 /
/// 1.01–1.08 / 1.12–1.34, against 0.88–1.16 / 1.05–1.23 / 1.16–1.40 / 1.38–1.50 / 1.27–1.43
/// with the kernel's buffer and 256 KiB pacing (the previous default).
const DEFAULT_SEND_BUFFER: usize = 256 * 1024;

impl SocketOptions {
    /// The pacing fragment the endpoints use (0: off).
    pub(crate) fn pace_fragment(&self) -> usize {
        self.pace.unwrap_or(0)
    }

    /// The `SO_SNDBUF` to set (`None`: leave the kernel's).
    fn send_buffer_size(&self) -> Option<usize> {
        match self.send_buffer {
            None => Some(DEFAULT_SEND_BUFFER),
            Some(0) => None,
            Some(n) => Some(n),
        }
    }

    /// Rejects a pacing fragment too small to be useful (0 switches pacing off).
    pub(crate) fn check_pace(&self) -> Result<()> {
        match self.pace {
            Some(p) if p != 0 && p < MIN_PACE => Err(Error::InvalidArgument(format!(
                "FASTMP_TCP_PACE={p}: a pacing fragment must be 0 (off) or at least {MIN_PACE} bytes"
            ))),
            _ => Ok(()),
        }
    }
}

/// Everything a rank needs to join the mesh.
pub(crate) struct Bootstrap {
    pub rank: usize,
    pub size: usize,
    pub rendezvous: Rendezvous,
    pub secret: JobSecret,
    /// Start-up fails if the mesh is not complete by then.
    pub deadline: Instant,
    pub sockets: SocketOptions,
    /// Where this rank runs ([`Site::of_this_process`], or made up by tests).
    pub site: Site,
}

/// A rank's connected mesh and where every rank of the job runs.
pub(crate) struct Mesh {
    /// `streams[p]` leads to rank `p` (`None` for this rank).
    pub streams: Vec<Option<TcpStream>>,
    /// `rings[p]`: the shared-memory rings agreed with rank `p` on this node, if any.
    pub(super) rings: Vec<Option<ShmRings>>,
    /// Built from every rank's [`Site`]: the same on every rank.
    pub placement: Placement,
}

/// Where a rank runs: keys that are equal for ranks in one process, and for ranks on one node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Site {
    /// The process: its pid plus a random number drawn once per process, because pids repeat
    /// across nodes (and over time), while thread ranks of one process share both.
    pub process: (u32, u64),
    /// The node: the kernel's boot id (or, without one, the machine id) plus the host name. A boot
    /// id is random per boot, so it differs between machines even when they were cloned from one
    /// image or share a host name; the host name keeps containers with their own UTS namespace
    /// apart, which may not share memory with each other. Where none of these can be read the
    /// key is the process key, so each process counts as its own node (never wrongly "local").
    pub node: String,
}

impl Site {
    /// This process's site (the same for every thread rank in it).
    pub(crate) fn of_this_process() -> Result<Site> {
        // Drawn once per process; a child forked after that draws its own (its pid differs).
        static SITE: Mutex<Option<Site>> = Mutex::new(None);
        let mut cached = lock_ignoring_poison(&SITE);
        let pid = std::process::id();
        if let Some(site) = cached.as_ref().filter(|site| site.process.0 == pid) {
            return Ok(site.clone());
        }
        let mut nonce = [0u8; 8];
        handshake::fill_random(&mut nonce)?;
        let process = (pid, u64::from_le_bytes(nonce));
        let read = |path: &str| {
            let text = std::fs::read_to_string(path).ok()?;
            let text = text.trim();
            (!text.is_empty()).then(|| text.to_string())
        };
        let machine = read("/proc/sys/kernel/random/boot_id").or_else(|| read("/etc/machine-id"));
        let node = match (machine, read("/proc/sys/kernel/hostname")) {
            (None, None) => format!("process {}.{:016x}", process.0, process.1),
            (machine, host) => format!("{}/{}", machine.unwrap_or_default(), host.unwrap_or_default()),
        };
        let site = Site { process, node: truncated(node, MAX_NODE_KEY) };
        *cached = Some(site.clone());
        Ok(site)
    }

    /// Why a peer's site cannot be used, if it cannot.
    fn check(&self) -> std::result::Result<(), String> {
        if self.node.len() > MAX_NODE_KEY {
            return Err(format!("a node key of {} bytes (at most {MAX_NODE_KEY} allowed)", self.node.len()));
        }
        Ok(())
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn truncated(mut text: String, max: usize) -> String {
    if text.len() > max {
        let cut = (0..=max).rev().find(|&at| text.is_char_boundary(at)).unwrap_or(0);
        text.truncate(cut);
    }
    text
}

/// A lower rank's proposal to a higher one on its node, once the mesh is up.
#[derive(Serialize, Deserialize, Debug)]
enum RingOffer {
    /// Keep the data on the socket.
    Socket,
    /// Map this segment (rings of `capacity` bytes each).
    Segment { path: String, capacity: u64 },
}

/// The higher rank's answer to a [`RingOffer::Segment`].
#[derive(Serialize, Deserialize, Debug)]
struct RingAnswer {
    mapped: bool,
}

/// Segment files offered and not yet unlinked (unlinked on every way out).
struct Offered(Vec<(usize, ShmRings, String)>);

impl Drop for Offered {
    fn drop(&mut self) {
        for (_, _, path) in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn stream_to(streams: &mut [Option<TcpStream>], p: usize) -> &mut TcpStream {
    streams[p].as_mut().expect("the mesh connects every pair of ranks")
}

/// Sent by a connecting rank right after the handshake.
#[derive(Serialize, Deserialize, Debug)]
struct Hello {
    rank: u32,
    size: u32,
    /// Where this rank accepts connections from higher ranks.
    listen: SocketAddr,
    site: Site,
}

/// Rank 0's answer: every rank's listening address and site.
#[derive(Serialize, Deserialize, Debug)]
struct Table {
    listen: Vec<SocketAddr>,
    sites: Vec<Site>,
}

impl Table {
    /// Why a table cannot serve a job of `size` ranks, if it cannot.
    fn check(&self, size: usize) -> std::result::Result<(), String> {
        if self.listen.len() != size || self.sites.len() != size {
            return Err(format!(
                "rank 0 runs a job of {} ranks ({} sites), this rank was started for {size}",
                self.listen.len(),
                self.sites.len()
            ));
        }
        for (rank, site) in self.sites.iter().enumerate() {
            site.check().map_err(|why| format!("rank 0 reports for rank {rank} {why}"))?;
        }
        Ok(())
    }

    fn placement(&self) -> Placement {
        let processes: Vec<_> = self.sites.iter().map(|s| s.process).collect();
        let nodes: Vec<_> = self.sites.iter().map(|s| s.node.as_str()).collect();
        Placement::from_keys(&processes, &nodes)
    }
}

impl Bootstrap {
    /// Connects this rank to every other and learns where every rank runs.
    pub(crate) fn connect(self) -> Result<Mesh> {
        if self.rank >= self.size {
            return Err(Error::InvalidArgument(format!("rank {} is not below the job size {}", self.rank, self.size)));
        }
        // Frames and hellos carry ranks as 32-bit numbers.
        if u32::try_from(self.size).is_err() {
            return Err(Error::InvalidArgument(format!("a tcp job of {} ranks is too large", self.size)));
        }
        let mut streams: Vec<Option<TcpStream>> = (0..self.size).map(|_| None).collect();
        if self.size == 1 {
            return Ok(Mesh { streams, rings: vec![None], placement: Placement::single_process(1) });
        }
        let table = match &self.rendezvous {
            Rendezvous::Listen(listener) => self.serve_rendezvous(listener, &mut streams)?,
            Rendezvous::Connect(addr) => self.join_mesh(*addr, &mut streams)?,
        };
        for s in streams.iter().flatten() {
            configure(s, self.sockets)?;
        }
        let rings = self.same_node_rings(&mut streams, &table)?;
        Ok(Mesh { streams, rings, placement: table.placement() })
    }

    /// Agrees with every peer on this node whether their connection runs over shared-memory
    /// rings (see `link`): the lower rank offers a segment (or nothing, where rings are off or
    /// cannot be made), the higher answers whether it mapped it. Always exchanged, so ranks
    /// whose settings differ still agree, and a node where `/dev/shm` is missing or foreign
    /// (containers sharing a host name) falls back to the socket.
    fn same_node_rings(&self, streams: &mut [Option<TcpStream>], table: &Table) -> Result<Vec<Option<ShmRings>>> {
        let node = &table.sites[self.rank].node;
        let local: Vec<usize> = (0..self.size).filter(|&p| p != self.rank && table.sites[p].node == *node).collect();
        let mut rings: Vec<Option<ShmRings>> = (0..self.size).map(|_| None).collect();
        let capacity = shm_ring::capacity_for(local.len());
        let failed =
            |p: usize, e: std::io::Error| Error::other(format!("tcp start-up: ring agreement with rank {p}: {e}"));
        let mut offered = Offered(Vec::new());
        for &p in local.iter().filter(|&&p| p > self.rank) {
            let segment = if self.sockets.shm_rings { ShmRings::create(capacity).ok() } else { None };
            let offer = match segment {
                Some((rings, path)) => {
                    offered.0.push((p, rings, path.clone()));
                    RingOffer::Segment { path, capacity: capacity as u64 }
                }
                None => RingOffer::Socket,
            };
            write_message(stream_to(streams, p), &offer).map_err(|e| failed(p, e))?;
        }
        for &p in local.iter().filter(|&&p| p < self.rank) {
            let stream = stream_to(streams, p);
            let offer: RingOffer = read_message(stream, self.deadline, MAX_HELLO).map_err(|e| failed(p, e))?;
            // Only a segment offer waits for an answer.
            if let RingOffer::Segment { path, capacity } = offer {
                rings[p] = if self.sockets.shm_rings { ShmRings::open(&path, capacity as usize).ok() } else { None };
                write_message(stream, &RingAnswer { mapped: rings[p].is_some() }).map_err(|e| failed(p, e))?;
            }
        }
        for (p, segment, path) in std::mem::take(&mut offered.0) {
            let answer: std::io::Result<RingAnswer> = read_message(stream_to(streams, p), self.deadline, MAX_HELLO);
            let _ = std::fs::remove_file(&path);
            if answer.map_err(|e| failed(p, e))?.mapped {
                rings[p] = Some(segment);
            }
        }
        Ok(rings)
    }

    /// Rank 0: collects every other rank's hello, answers with the table; those connections
    /// become the mesh links to rank 0.
    fn serve_rendezvous(&self, listener: &TcpListener, streams: &mut [Option<TcpStream>]) -> Result<Table> {
        let own = listener.local_addr().map_err(|e| start_error("rendezvous address", e))?;
        let hellos = self.accept_ranks(listener, 1..self.size, "the rendezvous")?;
        let mut table = Table { listen: vec![own; self.size], sites: vec![self.site.clone(); self.size] };
        for (&rank, (_, hello)) in &hellos {
            table.listen[rank] = hello.listen;
            table.sites[rank] = hello.site.clone();
        }
        for (rank, (mut stream, _)) in hellos {
            write_message(&mut stream, &table)
                .map_err(|e| Error::other(format!("tcp start-up: sending the address table to rank {rank}: {e}")))?;
            streams[rank] = Some(stream);
        }
        Ok(table)
    }

    /// Ranks above 0: hello to rank 0, then connect down and accept up.
    fn join_mesh(&self, rendezvous: SocketAddr, streams: &mut [Option<TcpStream>]) -> Result<Table> {
        let mut to_zero = self.connect_authenticated(rendezvous, 0)?;
        // Listen where rank 0 reached us from: the interface the job's network uses.
        let ip: IpAddr = to_zero.local_addr().map_err(|e| start_error("local address", e))?.ip();
        let listener =
            TcpListener::bind((ip, 0)).map_err(|e| start_error(&format!("binding a listener on {ip}"), e))?;
        let listen = listener.local_addr().map_err(|e| start_error("listener address", e))?;
        let hello = Hello { rank: self.rank as u32, size: self.size as u32, listen, site: self.site.clone() };
        write_message(&mut to_zero, &hello).map_err(|e| start_error("sending hello to rank 0", e))?;
        let max_table = self.size.saturating_mul(MAX_TABLE_ENTRY);
        let table: Table = read_message(&mut to_zero, self.deadline, max_table)
            .map_err(|e| Error::other(format!("tcp start-up: no address table from rank 0: {e}")))?;
        table.check(self.size).map_err(|why| Error::other(format!("tcp start-up: {why}")))?;
        streams[0] = Some(to_zero);
        std::thread::scope(|s| {
            let higher = s.spawn(|| self.accept_ranks(&listener, self.rank + 1..self.size, "its listener"));
            for (lower, addr) in table.listen.iter().enumerate().take(self.rank).skip(1) {
                let mut stream = self.connect_authenticated(*addr, lower)?;
                write_message(&mut stream, &hello).map_err(|e| start_error(&format!("hello to rank {lower}"), e))?;
                streams[lower] = Some(stream);
            }
            let accepted = higher.join().map_err(|_| Error::other("tcp start-up: the accept thread panicked"))??;
            for (rank, (stream, _)) in accepted {
                streams[rank] = Some(stream);
            }
            Ok(())
        })?;
        Ok(table)
    }

    /// Connects to rank `to` at `addr` (retrying until the deadline: it may not listen yet) and
    /// proves job membership.
    fn connect_authenticated(&self, addr: SocketAddr, to: usize) -> Result<TcpStream> {
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            let attempt = TcpStream::connect_timeout(&addr, left.max(Duration::from_millis(1)));
            match attempt {
                Ok(mut stream) => {
                    handshake::authenticate(&mut stream, &self.secret, Role::Connector, HANDSHAKE_TIMEOUT).map_err(
                        |e| {
                            Error::other(format!(
                                "tcp start-up: rank {to} at {addr} rejected this rank or is not part of the job: {e}"
                            ))
                        },
                    )?;
                    return Ok(stream);
                }
                Err(e) if Instant::now() >= self.deadline => {
                    return Err(Error::other(format!(
                        "tcp start-up: could not reach rank {to} at {addr} before the start-up timeout: {e}"
                    )));
                }
                Err(_) => std::thread::sleep(RETRY_PAUSE),
            }
        }
    }

    /// Accepts one authenticated connection from each rank in `expected`; strangers, garbage
    /// and duplicates are logged and dropped.
    fn accept_ranks(
        &self,
        listener: &TcpListener,
        expected: std::ops::Range<usize>,
        place: &str,
    ) -> Result<BTreeMap<usize, (TcpStream, Hello)>> {
        let mut got = BTreeMap::new();
        if expected.is_empty() {
            return Ok(got);
        }
        listener.set_nonblocking(true).map_err(|e| start_error("listener mode", e))?;
        let (sender, arrivals) = mpsc::channel::<(SocketAddr, Result<(TcpStream, Hello)>)>();
        while got.len() < expected.len() {
            while let Ok((from, outcome)) = arrivals.try_recv() {
                match outcome {
                    Ok((stream, hello))
                        if !expected.contains(&(hello.rank as usize)) || hello.size as usize != self.size =>
                    {
                        drop(stream);
                        self.reject(
                            from,
                            &format!(
                                "claims rank {} of {}, expected one of {expected:?} of {}",
                                hello.rank, hello.size, self.size
                            ),
                        );
                    }
                    Ok((stream, hello)) => {
                        let rank = hello.rank as usize;
                        match got.entry(rank) {
                            Entry::Occupied(_) => {
                                self.reject(from, &format!("a second connection claiming rank {rank}"))
                            }
                            Entry::Vacant(slot) => {
                                slot.insert((stream, hello));
                            }
                        }
                    }
                    Err(e) => self.reject(from, &e.to_string()),
                }
            }
            if got.len() == expected.len() {
                break;
            }
            if Instant::now() >= self.deadline {
                let missing: Vec<usize> = expected.clone().filter(|r| !got.contains_key(r)).collect();
                return Err(Error::other(format!(
                    "tcp start-up: ranks {missing:?} did not reach {place} of rank {} before the start-up timeout",
                    self.rank
                )));
            }
            match listener.accept() {
                Ok((stream, from)) => {
                    let (sender, secret) = (sender.clone(), self.secret.clone());
                    let deadline = self.deadline;
                    std::thread::spawn(move || {
                        let _ = sender.send((from, welcome(stream, &secret, deadline)));
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(ACCEPT_PAUSE),
                Err(e) => self
                    .reject(listener.local_addr().unwrap_or(([0, 0, 0, 0], 0).into()), &format!("accept failed: {e}")),
            }
        }
        Ok(got)
    }

    fn reject(&self, from: SocketAddr, why: &str) {
        eprintln!("fastmp: rank {}: rejected a connection from {from}: {why}", self.rank);
    }
}

/// Server side of one incoming connection: authenticate, then read its hello.
fn welcome(mut stream: TcpStream, secret: &JobSecret, deadline: Instant) -> Result<(TcpStream, Hello)> {
    stream.set_nonblocking(false).map_err(|e| start_error("socket mode", e))?;
    handshake::authenticate(&mut stream, secret, Role::Acceptor, HANDSHAKE_TIMEOUT)?;
    let hello: Hello = read_message(&mut stream, deadline.min(Instant::now() + HANDSHAKE_TIMEOUT), MAX_HELLO)
        .map_err(|e| Error::other(format!("no valid hello after the handshake: {e}")))?;
    hello.site.check().map_err(|why| Error::other(format!("its hello (rank {}) carries {why}", hello.rank)))?;
    Ok((stream, hello))
}

/// Mesh-link settings: no Nagle delay, optional buffer sizes, keepalive so a vanished host is
/// noticed even when no traffic is flowing.
fn configure(stream: &TcpStream, opts: SocketOptions) -> Result<()> {
    stream.set_nodelay(true).map_err(|e| start_error("TCP_NODELAY", e))?;
    stream.set_read_timeout(None).map_err(|e| start_error("socket timeout", e))?;
    let sock = SockRef::from(stream);
    if let Some(n) = opts.send_buffer_size() {
        sock.set_send_buffer_size(n).map_err(|e| start_error("SO_SNDBUF", e))?;
    }
    if let Some(n) = opts.recv_buffer {
        sock.set_recv_buffer_size(n).map_err(|e| start_error("SO_RCVBUF", e))?;
    }
    let keepalive =
        TcpKeepalive::new().with_time(Duration::from_secs(10)).with_interval(Duration::from_secs(2)).with_retries(3);
    sock.set_tcp_keepalive(&keepalive).map_err(|e| start_error("TCP keepalive", e))?;
    Ok(())
}

fn start_error(what: &str, e: std::io::Error) -> Error {
    Error::other(format!("tcp start-up: {what}: {e}"))
}

/// Length-prefixed postcard message.
fn write_message<T: Serialize>(stream: &mut TcpStream, msg: &T) -> std::io::Result<()> {
    let body = postcard::to_allocvec(msg).map_err(std::io::Error::other)?;
    let mut framed = (body.len() as u32).to_le_bytes().to_vec();
    framed.extend_from_slice(&body);
    stream.write_all(&framed)
}

/// Reads a message of at most `max` bytes.
fn read_message<T: for<'de> Deserialize<'de>>(
    stream: &mut TcpStream,
    deadline: Instant,
    max: usize,
) -> std::io::Result<T> {
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    stream.set_read_timeout(Some(left))?;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > max {
        return Err(std::io::Error::other(format!("start-up message of {len} bytes is too long")));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    stream.set_read_timeout(None)?;
    postcard::from_bytes(&body).map_err(std::io::Error::other)
}
