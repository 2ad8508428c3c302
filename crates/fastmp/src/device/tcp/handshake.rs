//! Job membership proof for every TCP connection of the tcp device.
//!
//! A rank's listener is reachable by anything on the network, so before a connection may carry
//! messages both ends prove they hold the job's shared secret ([`JobSecret`], handed out by the
//! launcher as `FASTMP_JOB_SECRET`). The proof is a challenge-response: the secret never crosses
//! the wire, and fresh nonces on both sides make a recorded handshake useless later.
//!
//! Protocol (both directions, all lengths fixed):
//! 1. each side sends `MAGIC` + a 32-byte random nonce (its *hello*) and reads the peer's;
//! 2. the connector sends `HMAC-SHA256(secret, LABEL || b'C' || acceptor_nonce || connector_nonce)`;
//! 3. the acceptor checks it and only then answers with
//!    `HMAC-SHA256(secret, LABEL || b'A' || connector_nonce || acceptor_nonce)`, which the
//!    connector checks.
//!
//! Why this shape:
//! - The sender's role byte inside the MAC means a proof made by one role is never accepted as
//!   the other's, so echoing a peer's own proof back (reflection) fails.
//! - The acceptor answers only after the connector has proven itself, so a stranger who connects
//!   learns nothing computed from the secret (the acceptor is no signing oracle).
//! - Every read and write runs against one deadline for the whole handshake, so a silent peer,
//!   or one that drips a byte at a time, cannot hold a listener's accept loop past `timeout`.
//!
//! What it does not do: it authenticates the connection's *start* only and does not encrypt, so
//! an attacker who can already rewrite traffic on the path (not merely connect) is out of scope.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{Error, Result};

/// First bytes of every fastmp TCP connection: tells a fastmp peer from a stray client (and the
/// trailing version byte lets a future protocol refuse an old one cleanly).
const MAGIC: &[u8; 8] = b"FASTMP\0\x01";
/// Per-connection random challenge size; 32 bytes make a repeated nonce practically impossible.
const NONCE_LEN: usize = 32;
/// Magic plus nonce.
const HELLO_LEN: usize = MAGIC.len() + NONCE_LEN;
/// HMAC-SHA256 output size.
const PROOF_LEN: usize = 32;
/// Domain separation: these MACs can never be confused with any other use of the secret.
const PROOF_LABEL: &[u8] = b"fastmp-auth-v1";
/// Length of the job secret in bytes (and half its hex length).
const SECRET_LEN: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// The job's shared secret (32 bytes), passed by the launcher as `FASTMP_JOB_SECRET` (64 hex chars).
#[derive(Clone)]
pub(crate) struct JobSecret([u8; SECRET_LEN]);

impl JobSecret {
    /// A fresh secret from the operating system's random source (the launcher makes one per job).
    pub(crate) fn random() -> Result<Self> {
        let mut bytes = [0u8; SECRET_LEN];
        fill_random(&mut bytes)?;
        Ok(JobSecret(bytes))
    }

    /// Parses the 64-hex-character form (either case). The error never echoes the secret itself.
    pub(crate) fn from_hex(hex: &str) -> Result<Self> {
        let char_count = hex.chars().count();
        if char_count != 2 * SECRET_LEN {
            return Err(Error::InvalidArgument(format!(
                "job secret (FASTMP_JOB_SECRET) must be {} hex characters ({SECRET_LEN} bytes), got {char_count} characters",
                2 * SECRET_LEN
            )));
        }
        if let Some((position, bad)) = hex.chars().enumerate().find(|(_, c)| !c.is_ascii_hexdigit()) {
            return Err(Error::InvalidArgument(format!(
                "job secret (FASTMP_JOB_SECRET) has a non-hex character {bad:?} at position {position} (expected 0-9, a-f)"
            )));
        }
        // All characters are ASCII hex digits now, so the string is exactly 64 bytes long.
        let mut bytes = [0u8; SECRET_LEN];
        for (byte, pair) in bytes.iter_mut().zip(hex.as_bytes().chunks_exact(2)) {
            *byte = (hex_digit_value(pair[0]) << 4) | hex_digit_value(pair[1]);
        }
        Ok(JobSecret(bytes))
    }

    /// The 64-lowercase-hex-character form the launcher exports.
    // Part of the agreed API (fastmprun makes its own secret today), so unused outside tests.
    #[allow(dead_code)]
    pub(crate) fn to_hex(&self) -> String {
        self.0.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// A fresh MAC keyed with the secret.
    fn mac(&self) -> HmacSha256 {
        // HMAC accepts keys of any length, so this cannot fail for a 32-byte key.
        <HmacSha256 as Mac>::new_from_slice(&self.0).expect("HMAC takes keys of any length")
    }
}

/// Never prints the secret: a `{:?}` in a log or error message must not leak it.
impl fmt::Debug for JobSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JobSecret(<redacted>)")
    }
}

/// Value of one ASCII hex digit (the caller has checked it is one).
fn hex_digit_value(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        _ => digit - b'A' + 10,
    }
}

/// Fills `bytes` from the OS random source.
pub(super) fn fill_random(bytes: &mut [u8]) -> Result<()> {
    getrandom::fill(bytes).map_err(|e| Error::other(format!("cannot get random bytes from the operating system: {e}")))
}

/// Which end of the connection this side is; the two ends must differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The side that called `connect`: proves itself first.
    Connector,
    /// The side that called `accept`: answers only a proven connector.
    Acceptor,
}

impl Role {
    /// The byte that binds a proof to the role of the side that made it.
    fn proof_byte(self) -> u8 {
        match self {
            Role::Connector => b'C',
            Role::Acceptor => b'A',
        }
    }

    fn other(self) -> Role {
        match self {
            Role::Connector => Role::Acceptor,
            Role::Acceptor => Role::Connector,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Connector => "connector",
            Role::Acceptor => "acceptor",
        })
    }
}

/// Mutual challenge-response on a fresh connection; `Ok` only if the peer knows the secret.
///
/// Blocking; the whole handshake must finish within `timeout`, so a silent or slow stranger fails
/// with [`Error::Rejected`] instead of stalling the caller. On success the socket's read and
/// write timeouts are back to `None` (blocking). On failure the caller should drop the stream.
pub(crate) fn authenticate(stream: &mut TcpStream, secret: &JobSecret, role: Role, timeout: Duration) -> Result<()> {
    if timeout.is_zero() {
        return Err(Error::InvalidArgument("handshake timeout must be longer than zero".into()));
    }
    let Some(deadline) = Instant::now().checked_add(timeout) else {
        return Err(Error::InvalidArgument(format!("handshake timeout {timeout:?} is too large")));
    };
    // Taken first: once the peer resets the connection its address is no longer available.
    let peer = stream.peer_addr().map_or_else(|_| "an unknown address".to_string(), |addr| addr.to_string());
    let outcome = DeadlineStream { stream, deadline, timeout }.handshake(secret, role);
    // Restore blocking mode on every path; only a success needs it to have worked.
    let restored = stream.set_read_timeout(None).and_then(|()| stream.set_write_timeout(None));
    match (outcome, restored) {
        (Err(reason), _) => Err(Error::Rejected(format!("handshake with {peer} (we are the {role}) failed: {reason}"))),
        (Ok(()), Err(e)) => Err(Error::Rejected(format!(
            "handshake with {peer} succeeded but restoring blocking mode on the socket failed: {e}"
        ))),
        (Ok(()), Ok(())) => Ok(()),
    }
}

/// A stream whose every read and write must finish before one shared deadline. Its methods
/// return a human-readable reason; [`authenticate`] adds the peer and role around it.
struct DeadlineStream<'a> {
    stream: &'a mut TcpStream,
    deadline: Instant,
    /// The caller's whole budget, only for messages.
    timeout: Duration,
}

type Reason = String;

impl DeadlineStream<'_> {
    fn handshake(&mut self, secret: &JobSecret, role: Role) -> std::result::Result<(), Reason> {
        let mut own_nonce = [0u8; NONCE_LEN];
        fill_random(&mut own_nonce).map_err(|e| e.to_string())?;
        let mut hello = [0u8; HELLO_LEN];
        hello[..MAGIC.len()].copy_from_slice(MAGIC);
        hello[MAGIC.len()..].copy_from_slice(&own_nonce);
        self.write_all(&hello, "hello")?;

        let mut peer_hello = [0u8; HELLO_LEN];
        self.read_exact(&mut peer_hello, "hello")?;
        if &peer_hello[..MAGIC.len()] != MAGIC {
            return Err("not a fastmp peer (bad magic)".into());
        }
        let mut peer_nonce = [0u8; NONCE_LEN];
        peer_nonce.copy_from_slice(&peer_hello[MAGIC.len()..]);
        // Our own nonce coming back means the other end is echoing us, not a second party.
        if peer_nonce == own_nonce {
            return Err("the peer echoed our own nonce (a reflection, not a fastmp peer)".into());
        }

        let own_proof = proof(secret, role, &peer_nonce, &own_nonce);
        let check_peer = |proof: &[u8; PROOF_LEN]| -> std::result::Result<(), Reason> {
            // `verify_slice` compares in constant time: timing reveals nothing about the right proof.
            proof_mac(secret, role.other(), &own_nonce, &peer_nonce)
                .verify_slice(proof)
                .map_err(|_| "the peer's proof is wrong (it does not know the job secret)".into())
        };
        let mut peer_proof = [0u8; PROOF_LEN];
        match role {
            Role::Connector => {
                self.write_all(&own_proof, "proof")?;
                self.read_exact(&mut peer_proof, "proof").map_err(|reason| {
                    format!("{reason} (an acceptor closes without answering when our proof is wrong: is our job secret the peer's?)")
                })?;
                check_peer(&peer_proof)
            }
            Role::Acceptor => {
                self.read_exact(&mut peer_proof, "proof")?;
                check_peer(&peer_proof)?;
                self.write_all(&own_proof, "proof")
            }
        }
    }

    /// Time left before the deadline, or the timeout reason if none is.
    fn remaining(&self, waiting_for: &str) -> std::result::Result<Duration, Reason> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() { Err(self.timed_out(waiting_for)) } else { Ok(left) }
    }

    fn timed_out(&self, waiting_for: &str) -> Reason {
        format!("timed out after {:?} {waiting_for}", self.timeout)
    }

    /// Reads exactly `buf.len()` bytes of the peer's `what`, giving up at the deadline.
    fn read_exact(&mut self, buf: &mut [u8], what: &str) -> std::result::Result<(), Reason> {
        let waiting_for = format!("waiting for the peer's {what}");
        let mut filled = 0;
        while filled < buf.len() {
            let left = self.remaining(&waiting_for)?;
            self.stream.set_read_timeout(Some(left)).map_err(|e| format!("cannot set a read timeout: {e}"))?;
            match self.stream.read(&mut buf[filled..]) {
                Ok(0) => {
                    return Err(format!(
                        "the peer closed the connection after {filled} of the {} bytes of its {what}",
                        buf.len()
                    ));
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // A peer that closes with our bytes still unread resets instead of closing cleanly.
                Err(e) if matches!(e.kind(), io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted) => {
                    return Err(format!(
                        "the peer reset the connection after {filled} of the {} bytes of its {what}",
                        buf.len()
                    ));
                }
                Err(e) if is_timeout(&e) => {
                    return Err(format!("{} ({filled} of {} bytes arrived)", self.timed_out(&waiting_for), buf.len()));
                }
                Err(e) => return Err(format!("reading the peer's {what} failed: {e}")),
            }
        }
        Ok(())
    }

    /// Writes all of our `what`, giving up at the deadline.
    fn write_all(&mut self, bytes: &[u8], what: &str) -> std::result::Result<(), Reason> {
        let waiting_for = format!("sending our {what}");
        let left = self.remaining(&waiting_for)?;
        self.stream.set_write_timeout(Some(left)).map_err(|e| format!("cannot set a write timeout: {e}"))?;
        // A handshake message is far smaller than any socket buffer, so one deadline-bounded
        // `write_all` suffices: it only blocks if the peer stopped reading entirely.
        self.stream.write_all(bytes).map_err(|e| {
            if is_timeout(&e) { self.timed_out(&waiting_for) } else { format!("sending our {what} failed: {e}") }
        })
    }
}

/// A socket timeout shows up as `WouldBlock` on Unix and `TimedOut` on Windows.
fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// The MAC over what a proof made by `sender` covers, not yet finalized.
fn proof_mac(
    secret: &JobSecret,
    sender: Role,
    receiver_nonce: &[u8; NONCE_LEN],
    sender_nonce: &[u8; NONCE_LEN],
) -> HmacSha256 {
    let mut mac = secret.mac();
    mac.update(PROOF_LABEL);
    mac.update(&[sender.proof_byte()]);
    mac.update(receiver_nonce);
    mac.update(sender_nonce);
    mac
}

/// The proof `sender` sends: it binds the secret, the sender's role and both nonces.
fn proof(
    secret: &JobSecret,
    sender: Role,
    receiver_nonce: &[u8; NONCE_LEN],
    sender_nonce: &[u8; NONCE_LEN],
) -> [u8; PROOF_LEN] {
    proof_mac(secret, sender, receiver_nonce, sender_nonce).finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::thread;

    use super::*;

    /// Hang guard for handshakes expected to finish; generous so slow CI never trips it.
    const GENEROUS: Duration = Duration::from_secs(30);
    /// Budget for handshakes expected to time out: short, since the test waits it out.
    const SHORT: Duration = Duration::from_millis(300);

    /// A connected loopback pair: (connector's end, acceptor's end).
    fn socket_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let connector = TcpStream::connect(listener.local_addr().expect("local addr")).expect("connect");
        let (acceptor, _) = listener.accept().expect("accept");
        (connector, acceptor)
    }

    fn secret(byte: u8) -> JobSecret {
        JobSecret([byte; SECRET_LEN])
    }

    /// Runs both ends of a handshake at once: (connector's result, acceptor's result).
    fn handshake_pair(
        connector_secret: &JobSecret,
        connector_role: Role,
        acceptor_secret: &JobSecret,
        acceptor_role: Role,
        timeout: Duration,
    ) -> (Result<()>, Result<()>) {
        let (mut connector, mut acceptor) = socket_pair();
        thread::scope(|s| {
            let other = s.spawn(move || authenticate(&mut acceptor, acceptor_secret, acceptor_role, timeout));
            let mine = authenticate(&mut connector, connector_secret, connector_role, timeout);
            // Closing our end wakes a peer that still waits for us, so the join cannot hang.
            drop(connector);
            (mine, other.join().expect("acceptor thread"))
        })
    }

    /// Runs `authenticate` as `role` against a hand-written peer script on the other end.
    fn against_script(role: Role, timeout: Duration, script: impl FnOnce(TcpStream) + Send) -> Result<()> {
        let (mut ours, theirs) = socket_pair();
        thread::scope(|s| {
            s.spawn(move || script(theirs));
            let result = authenticate(&mut ours, &secret(7), role, timeout);
            drop(ours);
            result
        })
    }

    fn rejection(result: Result<()>) -> String {
        match result {
            Err(Error::Rejected(reason)) => reason,
            other => panic!("expected Error::Rejected, got {other:?}"),
        }
    }

    /// A peer script that sends `bytes` without looking at ours, then waits for us to hang up.
    fn sends(bytes: Vec<u8>) -> impl FnOnce(TcpStream) + Send {
        move |mut peer| {
            let _ = peer.write_all(&bytes);
            let _ = peer.read_to_end(&mut Vec::new());
        }
    }

    fn hello_with(magic: &[u8; 8], nonce: [u8; NONCE_LEN]) -> Vec<u8> {
        [&magic[..], &nonce[..]].concat()
    }

    #[test]
    fn same_secret_succeeds_and_restores_blocking_mode() {
        let shared = JobSecret::random().expect("random secret");
        let (mut connector, mut acceptor) = socket_pair();
        thread::scope(|s| {
            let other = s.spawn(|| authenticate(&mut acceptor, &shared, Role::Acceptor, GENEROUS));
            authenticate(&mut connector, &shared, Role::Connector, GENEROUS).expect("connector side");
            other.join().expect("acceptor thread").expect("acceptor side");
        });
        for stream in [&connector, &acceptor] {
            assert_eq!(stream.read_timeout().expect("read timeout"), None);
            assert_eq!(stream.write_timeout().expect("write timeout"), None);
        }
        // The connection is still usable afterwards, in both directions.
        connector.write_all(b"ping").expect("write");
        let mut buf = [0u8; 4];
        acceptor.read_exact(&mut buf).expect("read");
        assert_eq!(&buf, b"ping");
        acceptor.write_all(b"pong").expect("write");
        connector.read_exact(&mut buf).expect("read");
        assert_eq!(&buf, b"pong");
    }

    #[test]
    fn wrong_secret_is_rejected_on_both_sides() {
        let (connector, acceptor) = handshake_pair(&secret(1), Role::Connector, &secret(2), Role::Acceptor, GENEROUS);
        assert!(rejection(acceptor).contains("does not know the job secret"));
        // The acceptor hangs up without answering, so the connector sees EOF or a reset.
        let reason = rejection(connector);
        assert!(reason.contains("job secret"), "{reason}");
    }

    #[test]
    fn acceptor_never_answers_a_stranger_with_a_proof() {
        let result = against_script(Role::Acceptor, GENEROUS, |mut stranger| {
            let mut hello = [0u8; HELLO_LEN];
            stranger.read_exact(&mut hello).expect("acceptor hello");
            stranger.write_all(&hello_with(MAGIC, [9; NONCE_LEN])).expect("write hello");
            stranger.write_all(&[0u8; PROOF_LEN]).expect("write proof");
            // Nothing computed from the secret may come back: only EOF (or a reset).
            let mut rest = Vec::new();
            let _ = stranger.read_to_end(&mut rest);
            assert!(rest.is_empty(), "acceptor sent {} bytes to a stranger", rest.len());
        });
        assert!(rejection(result).contains("does not know the job secret"));
    }

    #[test]
    fn garbage_bytes_are_rejected() {
        for role in [Role::Connector, Role::Acceptor] {
            let garbage: Vec<u8> = (0..200u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
            let result = against_script(role, GENEROUS, sends(garbage));
            assert!(rejection(result).contains("not a fastmp peer (bad magic)"), "{role}");
        }
    }

    #[test]
    fn wrong_magic_is_rejected_even_with_a_plausible_length() {
        let result = against_script(Role::Acceptor, GENEROUS, sends(hello_with(b"FASTMP\0\x02", [3; NONCE_LEN])));
        assert!(rejection(result).contains("bad magic"));
        let http =
            against_script(Role::Acceptor, GENEROUS, sends(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789abc".to_vec()));
        assert!(rejection(http).contains("bad magic"));
    }

    #[test]
    fn right_magic_with_a_forged_proof_is_rejected() {
        let forged = [hello_with(MAGIC, [5; NONCE_LEN]), vec![0xAB; PROOF_LEN]].concat();
        let result = against_script(Role::Connector, GENEROUS, sends(forged));
        assert!(rejection(result).contains("the peer's proof is wrong"));
    }

    #[test]
    fn a_silent_peer_times_out() {
        for role in [Role::Connector, Role::Acceptor] {
            let result = against_script(role, SHORT, sends(Vec::new()));
            let reason = rejection(result);
            assert!(reason.contains("timed out") && reason.contains("hello"), "{role}: {reason}");
        }
    }

    #[test]
    fn a_peer_dripping_bytes_cannot_outlast_the_deadline() {
        // Each byte alone would beat a per-read timeout; only a whole-handshake deadline stops it.
        let result = against_script(Role::Acceptor, SHORT, |mut drip| {
            for byte in hello_with(MAGIC, [4; NONCE_LEN]) {
                if drip.write_all(&[byte]).is_err() {
                    return;
                }
                thread::sleep(SHORT / 10);
            }
            let _ = drip.read_to_end(&mut Vec::new());
        });
        assert!(rejection(result).contains("timed out"));
    }

    #[test]
    fn a_peer_that_stops_after_its_hello_times_out_waiting_for_the_proof() {
        let result = against_script(Role::Acceptor, SHORT, sends(hello_with(MAGIC, [6; NONCE_LEN])));
        let reason = rejection(result);
        assert!(reason.contains("timed out") && reason.contains("proof"), "{reason}");
    }

    #[test]
    fn early_eof_is_reported_with_how_far_it_got() {
        for role in [Role::Connector, Role::Acceptor] {
            let result = against_script(role, GENEROUS, |mut peer| {
                // Read our hello first, so closing is a clean EOF rather than a reset.
                let _ = peer.read_exact(&mut [0u8; HELLO_LEN]);
                let _ = peer.write_all(&MAGIC[..5]);
                // Dropping closes the connection half-way through the hello.
            });
            let reason = rejection(result);
            assert!(reason.contains("closed the connection after 5 of the 40 bytes of its hello"), "{role}: {reason}");
            // Without reading our hello, the close is a reset (or, racing it, a plain EOF).
            let result = against_script(role, GENEROUS, drop);
            let reason = rejection(result);
            assert!(reason.contains("the connection after 0 of the 40 bytes of its hello"), "{role}: {reason}");
        }
    }

    #[test]
    fn an_echoing_peer_is_rejected() {
        for role in [Role::Connector, Role::Acceptor] {
            let result = against_script(role, GENEROUS, |mut echo| {
                let mut buf = [0u8; 64];
                while let Ok(n @ 1..) = echo.read(&mut buf) {
                    if echo.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
            assert!(rejection(result).contains("echoed our own nonce"), "{role}");
        }
    }

    #[test]
    fn reflecting_the_connectors_own_proof_fails() {
        // A fake acceptor with its own nonce, answering the connector's proof with that same proof.
        let result = against_script(Role::Connector, GENEROUS, |mut fake| {
            let mut hello = [0u8; HELLO_LEN];
            let _ = fake.read_exact(&mut hello);
            let _ = fake.write_all(&hello_with(MAGIC, [8; NONCE_LEN]));
            let mut proof = [0u8; PROOF_LEN];
            if fake.read_exact(&mut proof).is_ok() {
                let _ = fake.write_all(&proof);
            }
            let _ = fake.read_to_end(&mut Vec::new());
        });
        assert!(rejection(result).contains("the peer's proof is wrong"));
    }

    #[test]
    fn two_ends_with_the_same_role_never_authenticate() {
        let shared = secret(3);
        let (a, b) = handshake_pair(&shared, Role::Connector, &shared, Role::Connector, GENEROUS);
        assert!(rejection(a).contains("proof is wrong") && rejection(b).contains("proof is wrong"));
        // Two acceptors each wait for the other to prove itself first: the first to time out
        // hangs up, so the other sees a timeout or that hang-up, whichever comes first.
        let (a, b) = handshake_pair(&shared, Role::Acceptor, &shared, Role::Acceptor, SHORT);
        let (a, b) = (rejection(a), rejection(b));
        assert!(a.contains("the peer's proof") || a.contains("bytes of its proof"), "{a}");
        assert!(b.contains("the peer's proof") || b.contains("bytes of its proof"), "{b}");
        assert!(a.contains("timed out") || b.contains("timed out"), "{a} / {b}");
    }

    #[test]
    fn a_replayed_handshake_is_rejected() {
        // Record what an honest connector sends, then replay it to a fresh acceptor: the
        // acceptor's new nonce makes the recorded proof worthless.
        let shared = secret(4);
        let (mut connector, mut recorder) = socket_pair();
        let recorded = thread::scope(|s| {
            let shared = &shared;
            s.spawn(move || {
                let _ = authenticate(&mut connector, shared, Role::Connector, GENEROUS);
            });
            let _ = recorder.write_all(&hello_with(MAGIC, [1; NONCE_LEN]));
            let mut sent = [0u8; HELLO_LEN + PROOF_LEN];
            recorder.read_exact(&mut sent).expect("connector's hello and proof");
            drop(recorder);
            sent
        });
        let (replayer, mut acceptor) = socket_pair();
        let result = thread::scope(|s| {
            s.spawn(move || sends(recorded.to_vec())(replayer));
            let result = authenticate(&mut acceptor, &shared, Role::Acceptor, GENEROUS);
            // Closing our end ends the replayer's read, so the scope can finish.
            drop(acceptor);
            result
        });
        assert!(rejection(result).contains("does not know the job secret"));
    }

    #[test]
    fn zero_timeout_is_an_invalid_argument() {
        let (mut connector, _acceptor) = socket_pair();
        let result = authenticate(&mut connector, &secret(1), Role::Connector, Duration::ZERO);
        assert!(matches!(result, Err(Error::InvalidArgument(_))), "{result:?}");
    }

    #[test]
    fn hex_round_trips_in_either_case() {
        let secret = JobSecret::random().expect("random secret");
        let hex = secret.to_hex();
        assert_eq!(hex.len(), 64);
        assert!(hex.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
        assert_eq!(JobSecret::from_hex(&hex).expect("lowercase").0, secret.0);
        assert_eq!(JobSecret::from_hex(&hex.to_uppercase()).expect("uppercase").0, secret.0);
        let counting: String = (0u8..32).map(|b| format!("{b:02x}")).collect();
        assert_eq!(JobSecret::from_hex(&counting).expect("counting").0, std::array::from_fn(|i| i as u8));
    }

    #[test]
    fn bad_hex_is_a_precise_invalid_argument() {
        let valid = "0123456789abcdef".repeat(4);
        let cases = [
            (String::new(), "got 0 characters"),
            (valid[..63].to_string(), "got 63 characters"),
            (format!("{valid}0"), "got 65 characters"),
            (format!("{valid}\n"), "got 65 characters"),
            (format!("g{}", &valid[1..]), "non-hex character 'g' at position 0"),
            (format!("{}-", &valid[..63]), "non-hex character '-' at position 63"),
            (format!("{} ", &valid[..63]), "non-hex character ' ' at position 63"),
            // 63 ASCII characters plus one two-byte character: 64 characters but 65 bytes.
            (format!("{}é", &valid[..63]), "non-hex character 'é' at position 63"),
            ("é".repeat(32), "got 32 characters"),
        ];
        for (input, expected) in cases {
            match JobSecret::from_hex(&input) {
                Err(Error::InvalidArgument(message)) => assert!(message.contains(expected), "{input:?}: {message}"),
                other => panic!("{input:?}: expected InvalidArgument, got {other:?}"),
            }
        }
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let secret = JobSecret::random().expect("random secret");
        let shown = format!("{secret:?}");
        assert!(!shown.contains(&secret.to_hex()[..8]), "{shown}");
        assert_eq!(shown, "JobSecret(<redacted>)");
    }

    #[test]
    fn random_secrets_differ() {
        let a = JobSecret::random().expect("random secret");
        let b = JobSecret::random().expect("random secret");
        assert_ne!(a.0, b.0);
    }

    #[test]
    fn proofs_depend_on_role_secret_and_both_nonces() {
        let (n1, n2) = ([1; NONCE_LEN], [2; NONCE_LEN]);
        let base = proof(&secret(1), Role::Connector, &n1, &n2);
        assert_ne!(base, proof(&secret(1), Role::Acceptor, &n1, &n2));
        assert_ne!(base, proof(&secret(2), Role::Connector, &n1, &n2));
        assert_ne!(base, proof(&secret(1), Role::Connector, &n2, &n1));
        assert_eq!(base, proof(&secret(1), Role::Connector, &n1, &n2));
    }
}
