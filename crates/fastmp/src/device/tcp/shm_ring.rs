//! Shared-memory byte rings between two processes of one node: the memory of the tcp device's
//! same-node link (see `link`).
//!
//! One segment per connection, a file in `/dev/shm` that both processes map and that is unlinked
//! as soon as both have it: a header, then two single-producer single-consumer byte rings, one
//! per direction (ring 0 carries the creator's bytes). Each ring has a producer-owned `tail`, a
//! consumer-owned `head` (both counting bytes since the start, so `tail - head` is the fill) and
//! two sleep flags, each on its own cache line.
//!
//! Nothing read from the segment is trusted: a fill beyond the capacity (a corrupt or hostile
//! peer) is an `InvalidData` error of the connection, and every copy stays inside the rings.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering, fence};

use super::peer_memory::PeerProcess;

const MAGIC: u64 = u64::from_le_bytes(*b"fastmpR1");
/// Where segment files live, and the name prefix an opener insists on.
const PREFIX: &str = "/dev/shm/fastmp-ring-";
/// Bytes before the first ring's data: magic, capacity, then the two rings' control blocks.
const DATA_START: usize = 4096;
const CONTROL_START: usize = 256;
/// Bounds of one ring's capacity (a power of two).
pub(super) const MIN_CAPACITY: usize = 16 * 1024;
pub(super) const MAX_CAPACITY: usize = 256 * 1024;
/// Ring memory one rank's outbound rings may take together, split over its same-node peers.
const OUTBOUND_BUDGET: usize = 4 << 20;

/// A value alone on its cache line pair (adjacent-line prefetch pulls lines in twos).
#[repr(C, align(128))]
struct Line<T>(T);

/// Control block of one ring, shared by its producer and consumer.
#[repr(C)]
struct Control {
    /// Bytes produced so far (written by the producer only).
    tail: Line<AtomicU64>,
    /// Bytes consumed so far (written by the consumer only).
    head: Line<AtomicU64>,
    /// The consumer's progress thread is about to sleep in `poll(2)`: the producer rings the
    /// doorbell after its next write (and clears the flag).
    reader_sleeping: Line<AtomicU32>,
    /// The producer's progress thread sleeps waiting for space: the consumer rings after its
    /// next read (and clears the flag).
    writer_waiting: Line<AtomicU32>,
}

const _: () = assert!(CONTROL_START + 2 * size_of::<Control>() <= DATA_START);

/// Where each side of the segment lives, for single-copy reads (see `peer_memory`): a random
/// nonce (written by the creator) and each side's process id and mapping address, written by
/// that side when it maps the segment. A side reads the nonce through the other's address to
/// learn whether the kernel lets it read that process.
#[repr(C)]
struct Whereabouts {
    nonce: AtomicU64,
    /// Per side (0: the creator): process id and the address of this segment in it.
    sides: [[AtomicU64; 2]; 2],
}

const WHEREABOUTS_START: usize = 64;
const _: () = assert!(WHEREABOUTS_START + size_of::<Whereabouts>() <= CONTROL_START);

/// Ring capacity for a rank with `peers` connections on its node: the outbound budget split
/// over them, a power of two within [`MIN_CAPACITY`]..=[`MAX_CAPACITY`].
pub(super) fn capacity_for(peers: usize) -> usize {
    let share = (OUTBOUND_BUDGET / peers.max(1)).clamp(MIN_CAPACITY, MAX_CAPACITY);
    1 << (usize::BITS - 1 - share.leading_zeros())
}

/// What a ring operation leaves for the caller: bytes moved, and whether the other side asked
/// to be woken (the caller rings its doorbell).
pub(super) struct Moved {
    pub bytes: usize,
    pub doorbell: bool,
}

/// Both rings of one connection, mapped; this side produces on `out` and consumes the other.
pub(super) struct ShmRings {
    base: *mut u8,
    len: usize,
    capacity: usize,
    out: usize,
    /// The connection's socket ended: once the inbound ring is empty, so is the stream.
    eof: AtomicBool,
}

// SAFETY: the mapping is owned by this value and lives until it drops. Shared state is read and
// written only through atomics; ring bytes only by the side the SPSC protocol gives them to (the
// producer between `tail` and `head + capacity`, the consumer between `head` and `tail`), and each
// side's calls are serialized by the connection's rx or tx lock.
unsafe impl Send for ShmRings {}
// SAFETY: as for `Send`.
unsafe impl Sync for ShmRings {}

impl ShmRings {
    /// A fresh segment with rings of `capacity` bytes (a power of two), as its creator (ring 0
    /// outbound); returns it with the file's path, for the peer to open and then to unlink.
    pub(super) fn create(capacity: usize) -> io::Result<(ShmRings, String)> {
        assert!(capacity.is_power_of_two() && (MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity));
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(|e| io::Error::other(e.to_string()))?;
        let path = format!("{PREFIX}{}-{:016x}", std::process::id(), u64::from_le_bytes(nonce));
        let file = OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&path)?;
        let made = (|| {
            file.set_len((DATA_START + 2 * capacity) as u64)?;
            let rings = Self::map(&file, capacity, 0)?;
            // SAFETY: the header's first 16 bytes are inside the fresh mapping, 8-aligned (page
            // start), and nobody else has the file yet.
            unsafe {
                rings.base.cast::<u64>().add(1).write(capacity as u64);
                rings.base.cast::<u64>().write(MAGIC);
            }
            rings.whereabouts().nonce.store(u64::from_le_bytes(nonce), Ordering::Release);
            rings.publish_side();
            Ok(rings)
        })();
        match made {
            Ok(rings) => Ok((rings, path)),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// Opens the segment a peer created at `path` (ring 1 outbound). Refuses paths outside our
    /// prefix and files whose size, magic or capacity differ from what the offer said.
    pub(super) fn open(path: &str, capacity: usize) -> io::Result<ShmRings> {
        let name = path.strip_prefix(PREFIX).unwrap_or("/");
        if name.is_empty() || name.contains('/') || name.contains("..") {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("not a ring segment: {path}")));
        }
        if !capacity.is_power_of_two() || !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("ring capacity {capacity}")));
        }
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        if file.metadata()?.len() != (DATA_START + 2 * capacity) as u64 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "ring segment of the wrong size"));
        }
        let rings = Self::map(&file, capacity, 1)?;
        // SAFETY: the first 16 bytes are inside the mapping (its size was checked), 8-aligned.
        let (magic, stored) =
            unsafe { (rings.base.cast::<u64>().read_volatile(), rings.base.cast::<u64>().add(1).read_volatile()) };
        if magic != MAGIC || stored != capacity as u64 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "not a fastmp ring segment"));
        }
        rings.publish_side();
        Ok(rings)
    }

    fn map(file: &File, capacity: usize, out: usize) -> io::Result<ShmRings> {
        let len = DATA_START + 2 * capacity;
        // SAFETY: maps `len` bytes of a file at least that long; the result is checked and owned
        // by the returned value, which unmaps it on drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(ShmRings { base: base.cast(), len, capacity, out, eof: AtomicBool::new(false) })
    }

    fn whereabouts(&self) -> &Whereabouts {
        // SAFETY: inside the mapping below `CONTROL_START` (checked at compile time), 8-aligned
        // (page-aligned base plus 64); any bits are valid atomics.
        unsafe { &*self.base.add(WHEREABOUTS_START).cast::<Whereabouts>() }
    }

    /// Records this process and where it maps the segment, for the other side's probe.
    fn publish_side(&self) {
        let side = &self.whereabouts().sides[self.out];
        side[0].store(u64::from(std::process::id()), Ordering::Relaxed);
        side[1].store(self.base as u64, Ordering::Release);
    }

    /// The other side's process, if the kernel lets this one read its memory: call once both
    /// sides have mapped the segment (after the bootstrap's ring agreement).
    pub(super) fn peer_process(&self) -> Option<PeerProcess> {
        let w = self.whereabouts();
        let side = &w.sides[1 - self.out];
        let base = side[1].load(Ordering::Acquire);
        let pid = side[0].load(Ordering::Relaxed);
        let nonce = w.nonce.load(Ordering::Acquire);
        // Only the creator's nonce is random; an all-zero one would prove nothing.
        if nonce == 0 || base == 0 {
            return None;
        }
        PeerProcess::probe(pid, base.wrapping_add(WHEREABOUTS_START as u64), nonce)
    }

    fn control(&self, ring: usize) -> &Control {
        // SAFETY: both control blocks lie inside the mapping below `DATA_START` (checked at
        // compile time), page-aligned base plus multiples of 128; any bits are valid atomics.
        unsafe { &*self.base.add(CONTROL_START + ring * size_of::<Control>()).cast::<Control>() }
    }

    fn data(&self, ring: usize) -> *mut u8 {
        // SAFETY: ring `ring`'s `capacity` bytes start here, inside the mapping.
        unsafe { self.base.add(DATA_START + ring * self.capacity) }
    }

    /// The fill of a ring, or an error if the peer corrupted its indices.
    fn fill(&self, head: u64, tail: u64) -> io::Result<usize> {
        let fill = tail.wrapping_sub(head);
        if fill > self.capacity as u64 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "shared-memory ring indices are corrupt"));
        }
        Ok(fill as usize)
    }

    /// Writes as much of `parts` (in order) as fits; 0 bytes when the ring is full.
    pub(super) fn write(&self, parts: &[&[u8]]) -> io::Result<Moved> {
        let c = self.control(self.out);
        let tail = c.tail.0.load(Ordering::Relaxed);
        let free = self.capacity - self.fill(c.head.0.load(Ordering::Acquire), tail)?;
        let mut written = 0;
        for part in parts {
            let take = part.len().min(free - written);
            self.copy_in(tail.wrapping_add(written as u64), &part[..take]);
            written += take;
        }
        if written == 0 {
            return Ok(Moved { bytes: 0, doorbell: false });
        }
        c.tail.0.store(tail.wrapping_add(written as u64), Ordering::Release);
        // Dekker with `arm_reader`: either the sleeper sees our bytes, or we see its flag.
        fence(Ordering::SeqCst);
        let doorbell =
            c.reader_sleeping.0.load(Ordering::Relaxed) != 0 && c.reader_sleeping.0.swap(0, Ordering::Relaxed) != 0;
        Ok(Moved { bytes: written, doorbell })
    }

    /// Reads up to `dst.len()` bytes; 0 when the ring is empty.
    pub(super) fn read(&self, dst: &mut [u8]) -> io::Result<Moved> {
        let c = self.control(1 - self.out);
        let head = c.head.0.load(Ordering::Relaxed);
        let n = self.fill(head, c.tail.0.load(Ordering::Acquire))?.min(dst.len());
        if n == 0 {
            return Ok(Moved { bytes: 0, doorbell: false });
        }
        self.copy_out(head, &mut dst[..n]);
        c.head.0.store(head.wrapping_add(n as u64), Ordering::Release);
        // Dekker with `arm_writer`.
        fence(Ordering::SeqCst);
        let doorbell =
            c.writer_waiting.0.load(Ordering::Relaxed) != 0 && c.writer_waiting.0.swap(0, Ordering::Relaxed) != 0;
        Ok(Moved { bytes: n, doorbell })
    }

    fn copy_in(&self, at: u64, src: &[u8]) {
        let offset = (at as usize) & (self.capacity - 1);
        let first = src.len().min(self.capacity - offset);
        let data = self.data(self.out);
        // SAFETY: `offset + first <= capacity` and `src.len() - first <= offset` bytes at the
        // ring's start: both inside our outbound ring, in its free part (the caller took at most
        // the free bytes), which the consumer does not touch until `tail` moves past them.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), data.add(offset), first);
            std::ptr::copy_nonoverlapping(src.as_ptr().add(first), data, src.len() - first);
        }
    }

    fn copy_out(&self, at: u64, dst: &mut [u8]) {
        let offset = (at as usize) & (self.capacity - 1);
        let first = dst.len().min(self.capacity - offset);
        let data = self.data(1 - self.out);
        // SAFETY: as in `copy_in`, inside the inbound ring, in its filled part (at most the fill
        // is read), which the producer does not touch until `head` moves past it.
        unsafe {
            std::ptr::copy_nonoverlapping(data.add(offset), dst.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(data, dst.as_mut_ptr().add(first), dst.len() - first);
        }
    }

    /// Before the progress thread sleeps: asks the producer for a doorbell; `true` if bytes are
    /// already waiting (then it must not sleep).
    pub(super) fn arm_reader(&self) -> bool {
        let c = self.control(1 - self.out);
        c.reader_sleeping.0.store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        c.tail.0.load(Ordering::Acquire) != c.head.0.load(Ordering::Relaxed)
    }

    /// Before the progress thread sleeps with bytes queued: asks the consumer for a doorbell
    /// once it frees space; `true` if there is space already.
    pub(super) fn arm_writer(&self) -> bool {
        let c = self.control(self.out);
        c.writer_waiting.0.store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let fill = c.tail.0.load(Ordering::Relaxed).wrapping_sub(c.head.0.load(Ordering::Acquire));
        fill < self.capacity as u64
    }

    /// After the sleep: no more doorbells wanted.
    pub(super) fn disarm(&self) {
        self.control(1 - self.out).reader_sleeping.0.store(0, Ordering::Relaxed);
        self.control(self.out).writer_waiting.0.store(0, Ordering::Relaxed);
    }

    pub(super) fn set_eof(&self) {
        self.eof.store(true, Ordering::Release);
    }

    pub(super) fn eof(&self) -> bool {
        self.eof.load(Ordering::Acquire)
    }
}

impl Drop for ShmRings {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping this value owns; no reference into it outlives
        // `self` (every accessor borrows `self`).
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(capacity: usize) -> (ShmRings, ShmRings) {
        let (a, path) = ShmRings::create(capacity).unwrap();
        let b = ShmRings::open(&path, capacity).unwrap();
        std::fs::remove_file(&path).unwrap();
        (a, b)
    }

    #[test]
    #[cfg_attr(miri, ignore = "process_vm_readv is a system call Miri does not run")]
    fn each_side_finds_the_other_process_through_the_segment() {
        let (a, b) = pair(MIN_CAPACITY);
        // Both sides are this process here: the probe reads the nonce through the other's mapping.
        assert!(a.peer_process().is_some() && b.peer_process().is_some());
        b.whereabouts().nonce.store(0, Ordering::Relaxed);
        assert!(a.peer_process().is_none(), "without a nonce nothing is proven");
    }

    #[test]
    fn bytes_cross_in_both_directions_and_wrap_around() {
        let (a, b) = pair(MIN_CAPACITY);
        let mut got = Vec::new();
        let mut sent = Vec::new();
        let mut buf = vec![0u8; 5000];
        // 40 odd-sized writes wrap the 16 KiB ring several times.
        for i in 0..40u32 {
            let chunk: Vec<u8> = (0..(1000 + i * 37)).map(|j| (i * 7 + j) as u8).collect();
            let moved = a.write(&[&chunk[..10], &chunk[10..]]).unwrap();
            assert_eq!(moved.bytes, chunk.len());
            sent.extend_from_slice(&chunk);
            loop {
                let n = b.read(&mut buf).unwrap().bytes;
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
        }
        assert_eq!(got, sent);
        assert_eq!(b.write(&[b"back"]).unwrap().bytes, 4);
        assert_eq!(a.read(&mut buf).unwrap().bytes, 4);
        assert_eq!(&buf[..4], b"back");
    }

    #[test]
    fn a_full_ring_takes_what_fits_and_sleep_flags_ask_for_one_doorbell() {
        let (a, b) = pair(MIN_CAPACITY);
        let big = vec![7u8; MIN_CAPACITY + 100];
        assert_eq!(a.write(&[&big]).unwrap().bytes, MIN_CAPACITY);
        assert_eq!(a.write(&[b"x"]).unwrap().bytes, 0, "full");
        assert!(!a.arm_writer(), "no space yet");
        let mut buf = vec![0u8; 10];
        let moved = b.read(&mut buf).unwrap();
        assert!(moved.doorbell, "the waiting writer asked for a doorbell");
        assert!(!b.read(&mut buf).unwrap().doorbell, "only once");
        // An empty ring: the reader arms, the next write rings once.
        let mut rest = vec![0u8; MIN_CAPACITY];
        while b.read(&mut rest).unwrap().bytes > 0 {}
        assert!(!b.arm_reader());
        assert!(a.write(&[b"y"]).unwrap().doorbell);
        assert!(!a.write(&[b"z"]).unwrap().doorbell);
        assert!(b.arm_reader(), "bytes are waiting");
        b.disarm();
        assert!(!a.write(&[b"w"]).unwrap().doorbell);
    }

    #[test]
    fn corrupt_indices_and_foreign_paths_are_errors() {
        let (a, b) = pair(MIN_CAPACITY);
        a.control(0).tail.0.store(MIN_CAPACITY as u64 + 1, Ordering::Relaxed);
        assert_eq!(b.read(&mut [0u8; 8]).err().map(|e| e.kind()), Some(io::ErrorKind::InvalidData));
        assert_eq!(a.write(&[b"x"]).err().map(|e| e.kind()), Some(io::ErrorKind::InvalidData));
        for path in ["/etc/passwd", "/dev/shm/fastmp-ring-../x", "/dev/shm/fastmp-ring-"] {
            assert_eq!(ShmRings::open(path, MIN_CAPACITY).err().map(|e| e.kind()), Some(io::ErrorKind::InvalidInput));
        }
        let (_c, path) = ShmRings::create(MIN_CAPACITY).unwrap();
        let wrong = ShmRings::open(&path, 2 * MIN_CAPACITY).err().map(|e| e.kind());
        std::fs::remove_file(&path).unwrap();
        assert_eq!(wrong, Some(io::ErrorKind::InvalidData));
    }

    #[test]
    fn the_budget_is_split_over_peers_in_powers_of_two() {
        assert_eq!(capacity_for(1), MAX_CAPACITY);
        assert_eq!(capacity_for(3), 1 << 20 >> 2);
        assert_eq!(capacity_for(15), 256 * 1024);
        assert_eq!(capacity_for(31), 128 * 1024);
        assert_eq!(capacity_for(1000), MIN_CAPACITY);
    }
}
