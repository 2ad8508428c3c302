//! Helpers shared by the integration tests: a deterministic RNG and reproducible byte patterns.

#![allow(dead_code)]

/// Deterministic xorshift64* generator (never seeded with 0).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(splitmix(seed) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo + 1) as u64) as usize
    }

    /// `true` with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// Picks one element of a non-empty slice.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// SplitMix64 finalizer: spreads nearby seeds far apart.
pub fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Combines several values into one seed.
pub fn mix(parts: &[u64]) -> u64 {
    parts.iter().fold(0x1234_5678_9ABC_DEF0, |acc, &p| splitmix(acc ^ p))
}

/// `len` reproducible pseudo-random bytes for `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut rng = Rng::new(seed);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Asserts `got == pattern(seed, got.len())` with a readable message on the first difference.
pub fn check_pattern(got: &[u8], seed: u64, what: &str) {
    let want = pattern(seed, got.len());
    assert_bytes_eq(got, &want, what);
}

/// Byte-slice equality with the first mismatching offset in the failure message (instead of
/// dumping megabytes).
pub fn assert_bytes_eq(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length differs");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!("{what}: first difference at byte {i} of {} (got {:#04x}, want {:#04x})", got.len(), got[i], want[i]);
    }
}

/// Generates the `#[test]` wrappers of a suite whose test bodies take the device as a parameter:
/// `shm::name` runs `name(DeviceKind::Shm)`, `tcp::name` runs `name(DeviceKind::Tcp)` and
/// `hybrid::name` runs `name(DeviceKind::Hybrid)` (two processes of thread ranks, see
/// `Config::threads_per_process`), so one body serves every device. Tests under `tcp_ignored`
/// (grouped by reason) run on shm and are ignored on tcp and hybrid (which uses tcp between
/// processes) with that reason: known tcp device defects, to be un-ignored once fixed. An
/// optional leading `all_tcp_ignored: "reason",` ignores every tcp and hybrid test (a defect
/// that can hit any job); `all_hybrid_ignored: "reason",` every hybrid test (a feature the
/// hybrid device does not have yet).
#[allow(unused_macros)]
macro_rules! device_suite {
    (
        $(all_tcp_ignored: $all:literal,)?
        $(all_hybrid_ignored: $hall:literal,)?
        both: $both:tt,
        tcp_ignored: $ignored:tt $(,)?
    ) => {
        crate::common::device_suite!(
            @suite { $(#[ignore = $all])? } { $(#[ignore = $all])? $(#[ignore = $hall])? }
            both: $both, tcp_ignored: $ignored
        );
    };
    (
        @suite $tcp_attrs:tt $hybrid_attrs:tt
        both: [$($both:ident),* $(,)?],
        tcp_ignored: [$($reason:literal => [$($ignored:ident),* $(,)?]),* $(,)?]
    ) => {
        mod shm {
            $( #[test] fn $both() { super::$both(fastmp::DeviceKind::Shm) } )*
            $( $( #[test] fn $ignored() { super::$ignored(fastmp::DeviceKind::Shm) } )* )*
        }
        mod tcp {
            $( crate::common::device_suite!(@on Tcp $tcp_attrs $both); )*
            $( $( crate::common::device_suite!(@on Tcp { #[ignore = $reason] } $ignored); )* )*
        }
        mod hybrid {
            $( crate::common::device_suite!(@on Hybrid $hybrid_attrs $both); )*
            $( $( crate::common::device_suite!(@on Hybrid { #[ignore = $reason] } $ignored); )* )*
        }
    };
    (@on $device:ident { $(#[$attr:meta])* } $name:ident) => {
        #[test]
        $(#[$attr])*
        fn $name() {
            super::$name(fastmp::DeviceKind::$device)
        }
    };
}
#[allow(unused_imports)]
pub(crate) use device_suite;
