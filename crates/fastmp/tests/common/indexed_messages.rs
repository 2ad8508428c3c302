//! Messages that carry bytes derived from their index, and whose tag is that index, so a
//! receiver can check order as well as content: any misplaced, torn or reordered payload fails.
//! Shared by the shm ring suites (`shm_packed.rs`, `shm_packed_direct.rs`), each with its own
//! choice of lengths.

use fastmp::{Comm, Result};

/// Message `i`'s payload of `len` bytes.
pub fn payload(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i.wrapping_mul(131) ^ j.wrapping_mul(7) ^ (j >> 8)) as u8).collect()
}

/// Message `i` (of `len` bytes) arrived as `bytes` bytes at the start of `buf`, intact.
pub fn check(i: usize, len: usize, buf: &[u8], bytes: usize) {
    let want = payload(i, len);
    assert_eq!(bytes, want.len(), "message {i}: length");
    assert_eq!(&buf[..bytes], &want[..], "message {i}: payload");
}

/// Sends messages `from..to`, message `i` of `length(i)` bytes with tag `i`, as one burst of
/// nonblocking sends (every third one synchronous).
pub fn send_burst(world: &Comm, dest: usize, from: usize, to: usize, length: fn(usize) -> usize) -> Result<()> {
    let payloads: Vec<Vec<u8>> = (from..to).map(|i| payload(i, length(i))).collect();
    world.scope(|s| {
        let mut reqs = Vec::with_capacity(payloads.len());
        for (k, p) in payloads.iter().enumerate() {
            let i = from + k;
            let tag = i32::try_from(i).expect("index fits a tag");
            reqs.push(if i.is_multiple_of(3) { s.issend(p, dest, tag)? } else { s.isend(p, dest, tag)? });
        }
        fastmp::waitall(&mut reqs).map(drop)
    })
}
