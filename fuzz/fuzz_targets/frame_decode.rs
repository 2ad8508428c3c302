//! Arbitrary bytes from a peer through the tcp device's receive path: any input must end in
//! frames or an error; a panic (a broken invariant of the harness) or a sanitizer report is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| fastmp::device::fuzz_decode_frames(data));
