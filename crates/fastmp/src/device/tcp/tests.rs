//! Device-level tests of the tcp endpoint: several user threads on one endpoint at once, the
//! placement the bootstrap exchanges, and frames that name the wrong ranks.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::bootstrap::{Bootstrap, Mesh, Rendezvous, Site, SocketOptions};
use super::frame::{Frame, Header};
use super::handshake::JobSecret;
use super::{TcpEndpoint, TcpOptions};
use crate::device::wait::WaitPolicy;
use crate::device::{Device, Failure, Locality, MatchSpec, SendMode, Source, Started};
use crate::error::Error;

/// The start-up of one test job: rank 0's rendezvous, its address, the secret.
struct TestJob {
    listener: Option<TcpListener>,
    address: SocketAddr,
    secret: JobSecret,
    size: usize,
}

impl TestJob {
    fn new(size: usize) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let address = listener.local_addr().unwrap();
        TestJob { listener: Some(listener), address, secret: JobSecret::random().unwrap(), size }
    }

    /// Rank `rank`'s bootstrap, reporting `site` (rank 0's is the first one asked for).
    fn rank(&mut self, rank: usize, site: Site) -> Bootstrap {
        let rendezvous = match self.listener.take() {
            Some(listener) if rank == 0 => Rendezvous::Listen(listener),
            taken => {
                self.listener = taken;
                Rendezvous::Connect(self.address)
            }
        };
        Bootstrap {
            rank,
            size: self.size,
            rendezvous,
            secret: self.secret.clone(),
            deadline: Instant::now() + Duration::from_secs(30),
            sockets: SocketOptions::default(),
            site,
        }
    }
}

/// Connects ranks `0..sites.len()`, each reporting its site, all as threads of this process.
pub(super) fn connect_all(sites: &[Site]) -> Vec<Mesh> {
    let mut job = TestJob::new(sites.len());
    let boots: Vec<Bootstrap> = sites.iter().enumerate().map(|(rank, site)| job.rank(rank, site.clone())).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = boots.into_iter().map(|boot| s.spawn(move || boot.connect().unwrap())).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn site(process: u64, node: &str) -> Site {
    Site { process: (1, process), node: node.to_string() }
}

/// A connected pair of endpoints (ranks 0 and 1) in this process.
fn pair(eager_limit: usize) -> (TcpEndpoint, TcpEndpoint) {
    let options =
        TcpOptions { eager_limit, progress_thread: false, pace: 0, peer_reads: true, policy: WaitPolicy::for_ranks(2) };
    let here = Site::of_this_process().unwrap();
    let mut meshes = connect_all(&[here.clone(), here]).into_iter();
    let (zero, one) = (meshes.next().unwrap(), meshes.next().unwrap());
    std::thread::scope(|s| {
        let a = s.spawn(move || TcpEndpoint::new(0, zero, options).unwrap());
        let b = s.spawn(move || TcpEndpoint::new(1, one, options).unwrap());
        (a.join().unwrap(), b.join().unwrap())
    })
}

fn complete(dev: &TcpEndpoint, started: Started) -> crate::device::RawStatus {
    dev.complete(started).unwrap()
}

/// Four threads per rank send and receive on their own tags through the same endpoints, with
/// eager and rendezvous sizes; every message arrives intact and in order per tag.
#[test]
fn concurrent_user_threads_share_an_endpoint() {
    const THREADS: usize = 4;
    const MESSAGES: usize = 40;
    let (zero, one) = pair(1024);
    let (zero, one) = (Arc::new(zero), Arc::new(one));
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let zero = zero.clone();
            s.spawn(move || {
                for m in 0..MESSAGES {
                    let len = [0, 7, 1024, 1025, 70_000][(m + t) % 5];
                    let data: Vec<u8> = (0..len).map(|i| (i + m * 31 + t) as u8).collect();
                    // SAFETY: `data` outlives the send, which completes before the next iteration.
                    let started =
                        unsafe { zero.isend(data.as_ptr(), len, 1, t as i32, 0, SendMode::Standard) }.unwrap();
                    complete(&zero, started);
                }
            });
        }
        for t in 0..THREADS {
            let one = one.clone();
            s.spawn(move || {
                for m in 0..MESSAGES {
                    let len = [0, 7, 1024, 1025, 70_000][(m + t) % 5];
                    let mut buf = vec![0u8; 70_000];
                    let spec = MatchSpec { context: 0, source: Source::Rank(0), tag: t as i32 };
                    // SAFETY: `buf` lives until the receive completes.
                    let started = unsafe { one.irecv(buf.as_mut_ptr(), buf.len(), spec) }.unwrap();
                    let status = complete(&one, started);
                    assert_eq!(status.bytes, len, "thread {t} message {m}");
                    assert!(
                        buf[..len].iter().enumerate().all(|(i, &b)| b == (i + m * 31 + t) as u8),
                        "thread {t} message {m}"
                    );
                }
            });
        }
    });
    let (zero, one) = (Arc::into_inner(zero).unwrap(), Arc::into_inner(one).unwrap());
    std::thread::scope(|s| {
        s.spawn(|| zero.shutdown().unwrap());
        s.spawn(|| one.shutdown().unwrap());
    });
}

/// Every rank learns every rank's process and node from the bootstrap, numbered the same way.
#[test]
fn placement_comes_from_the_sites_the_ranks_report() {
    // Ranks 0 and 1 share a process, rank 2 is another process on their node, rank 3 another node.
    let sites = [site(7, "node-a"), site(7, "node-a"), site(8, "node-a"), site(9, "node-b")];
    for (rank, mesh) in connect_all(&sites).into_iter().enumerate() {
        let placement = &mesh.placement;
        assert_eq!((0..4).map(|r| placement.process_of(r)).collect::<Vec<_>>(), [0, 0, 1, 2], "rank {rank}");
        assert_eq!((0..4).map(|r| placement.node_of(r)).collect::<Vec<_>>(), [0, 0, 0, 1], "rank {rank}");
        let expected = [Locality::SameProcess, Locality::SameProcess, Locality::SameNode, Locality::Remote];
        assert_eq!((0..4).map(|r| placement.locality(0, r)).collect::<Vec<_>>(), expected, "rank {rank}");
    }
}

/// Thread ranks see one site; it names this process and a node, within the bounds a peer accepts.
#[test]
fn this_process_has_one_site() {
    let sites: Vec<Site> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(|| Site::of_this_process().unwrap())).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(sites.iter().all(|s| *s == sites[0]), "{sites:?}");
    assert_eq!(sites[0].process.0, std::process::id());
    assert!(!sites[0].node.is_empty() && sites[0].node.len() <= 256, "{:?}", sites[0].node);
}

/// A hello whose node key is too long is rejected like a stranger's: the connection is dropped
/// and rank 0 keeps waiting for the real rank 1.
#[test]
fn a_hello_with_an_overlong_node_key_is_rejected() {
    let mut job = TestJob::new(2);
    let zero = job.rank(0, site(1, "node"));
    let impostor = job.rank(1, site(2, &"x".repeat(257)));
    let one = job.rank(1, site(3, "node"));
    std::thread::scope(|s| {
        let zero = s.spawn(move || zero.connect().unwrap());
        let refused = impostor.connect().err().expect("a node key over the bound is refused");
        assert!(refused.to_string().contains("no address table from rank 0"), "{refused}");
        let one = one.connect().unwrap();
        let zero = zero.join().unwrap();
        assert_eq!(zero.placement, one.placement);
        assert_eq!(zero.placement.processes(), 2);
    });
}

/// Rank 0's endpoint, and the raw connection rank 1 would use to talk to it.
fn endpoint_and_raw_peer() -> (TcpEndpoint, TcpStream) {
    let here = Site::of_this_process().unwrap();
    let mut meshes = connect_all(&[here.clone(), here]).into_iter();
    let (zero, mut one) = (meshes.next().unwrap(), meshes.next().unwrap());
    let raw = one.streams[0].take().unwrap();
    let endpoint = TcpEndpoint::new(
        0,
        zero,
        TcpOptions {
            eager_limit: 1024,
            progress_thread: false,
            pace: 0,
            peer_reads: true,
            policy: WaitPolicy::for_ranks(2),
        },
    )
    .unwrap();
    (endpoint, raw)
}

/// A frame on rank 1's connection that claims another sender, or is addressed to another rank,
/// is a protocol error: the job aborts, naming the connection and the wrong rank.
#[test]
fn a_frame_naming_the_wrong_ranks_aborts_the_job() {
    let eager = Frame::Eager { context: 0, tag: 5, len: 0 };
    let cases = [
        (Header { source: 2, dest: 0, frame: eager }, "claims to come from rank 2"),
        (Header { source: 1, dest: 7, frame: eager }, "addressed to rank 7"),
    ];
    for (header, cause) in cases {
        let (endpoint, mut raw) = endpoint_and_raw_peer();
        raw.write_all(&header.encode()).unwrap();
        let mut buf = [0u8; 8];
        let spec = MatchSpec { context: 0, source: Source::Rank(1), tag: 5 };
        // SAFETY: `buf` outlives the receive, which fails (or completes) inside `complete`.
        let started = unsafe { endpoint.irecv(buf.as_mut_ptr(), buf.len(), spec) }.unwrap();
        match endpoint.complete(started) {
            Err(Error::PeerFailed { rank: 1, cause: got }) => {
                assert!(got.contains("protocol error") && got.contains(cause), "{got}");
            }
            other => panic!("a misrouted frame was not a protocol error: {other:?}"),
        }
        endpoint.abort(Failure { rank: 0, cause: "test over".into(), code: None });
    }
}

/// A peer may offer a payload to read only after our ready-to-receive said we read its memory
/// (never on a socket connection): an unasked `Readable` is a protocol error, and nothing is
/// read from the address it names.
#[test]
fn an_unasked_offer_to_read_aborts_the_job() {
    let (endpoint, mut raw) = endpoint_and_raw_peer();
    let frame = Frame::Readable { recv_id: 1, send_id: 2, addr: 0x1000 };
    raw.write_all(&Header { source: 1, dest: 0, frame }.encode()).unwrap();
    let mut buf = [0u8; 8];
    let spec = MatchSpec { context: 0, source: Source::Rank(1), tag: 5 };
    // SAFETY: `buf` outlives the receive, which fails inside `complete`.
    let started = unsafe { endpoint.irecv(buf.as_mut_ptr(), buf.len(), spec) }.unwrap();
    match endpoint.complete(started) {
        Err(Error::PeerFailed { rank: 1, cause }) => {
            assert!(cause.contains("protocol error") && cause.contains("never asked for"), "{cause}");
        }
        other => panic!("an unasked Readable was not a protocol error: {other:?}"),
    }
    endpoint.abort(Failure { rank: 0, cause: "test over".into(), code: None });
}

/// An `Abort` frame names the rank that failed first (which the sender may only pass on): the
/// endpoint's operations fail naming that rank; one naming a rank outside the job is a protocol
/// error of the connection it came on.
#[test]
fn an_abort_names_its_origin_and_the_origin_is_checked() {
    let cases = [(1, Ok("rank 1 gave up")), (5, Err("its abort names rank 5, outside the job of 2"))];
    for (origin, expected) in cases {
        let (endpoint, mut raw) = endpoint_and_raw_peer();
        let text = b"rank 1 gave up";
        let frame = Frame::Abort { len: text.len() as u64, origin, code: Some(9) };
        raw.write_all(&Header { source: 1, dest: 0, frame }.encode()).unwrap();
        raw.write_all(text).unwrap();
        let mut buf = [0u8; 8];
        let spec = MatchSpec { context: 0, source: Source::Rank(1), tag: 5 };
        // SAFETY: `buf` outlives the receive, which fails inside `complete`.
        let started = unsafe { endpoint.irecv(buf.as_mut_ptr(), buf.len(), spec) }.unwrap();
        match (endpoint.complete(started), expected) {
            (Err(Error::PeerFailed { rank: 1, cause }), Ok(text)) => assert_eq!(cause, text),
            (Err(Error::PeerFailed { rank: 1, cause }), Err(why)) => {
                assert!(cause.contains("protocol error") && cause.contains(why), "{cause}");
            }
            (other, _) => panic!("origin {origin}: {other:?}"),
        }
        // The endpoint passes the recorded failure on, whatever this rank's own was.
        let own = Failure { rank: 0, cause: "test over".into(), code: None };
        let job = endpoint.abort(own);
        assert_eq!(job.rank, 1);
        assert_eq!(job.code, if origin == 1 { Some(9) } else { None });
    }
}
