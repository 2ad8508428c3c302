#!/usr/bin/env bash
# Fuzzes the tcp device's receive path (fuzz/fuzz_targets/frame_decode.rs): arbitrary peer bytes,
# split into arbitrary reads, through the real `Rx::pump`, cross-checked against the header-only
# decoder (see crates/fastmp/src/device/tcp/fuzzing.rs). Built with AddressSanitizer, so an
# out-of-bounds write through the receive path's raw buffer pointers is caught, not just panics.
#
# Usage: scripts/fuzz.sh [SECONDS]        (default 60; one libFuzzer process)
# Env:   FUZZ_ARGS   extra libFuzzer flags, e.g. FUZZ_ARGS="-jobs=2 -workers=2"
#
# Needs the nightly toolchain (sanitizers) and cargo-fuzz; installs cargo-fuzz if it is missing.
# Findings land in fuzz/artifacts/frame_decode/; reproduce one with
#   cargo +nightly fuzz run frame_decode -a fuzz/artifacts/frame_decode/<file>
# The corpus it grows stays in fuzz/corpus/frame_decode/ (git-ignored) and speeds up later runs.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_TO_RUN="${1:-60}"
if ! [[ "$SECONDS_TO_RUN" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: scripts/fuzz.sh [SECONDS]   (a positive whole number, got '$SECONDS_TO_RUN')" >&2
    exit 2
fi

if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz.sh: the nightly toolchain is needed (rustup toolchain install nightly)" >&2
    exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

# Seeds: libFuzzer grows inputs slowly, so it rarely builds a rendezvous payload long enough
# (>= 16 KiB) to be read straight into the user buffer by itself. Hand it such streams.
CORPUS=fuzz/corpus/frame_decode
mkdir -p "$CORPUS"
byte() { printf "\\x$(printf %02x "$1")"; }
le32() { for shift in 0 8 16 24; do byte $((($1 >> shift) & 255)); done; }
le64() { for shift in 0 8 16 24 32 40 48 56; do byte $((($1 >> shift) & 255)); done; }
header() { # KIND A B: a frame header (magic 0xF4574D50) from rank 1 to rank 0 (the harness's
           # connection) with zero flags, context and tag
    byte "$1"; printf '\0\0\0PMW\xf4'; le32 1; le32 0; le64 0; le64 "$2"; le64 "$3"
}
seed() { # NAME CONTROL-BYTE: eager "abc", a 20000-byte rendezvous payload, bye
    { byte "$2"; header 1 3 0; printf abc; header 4 20000 7
      head -c 20000 /dev/zero | tr '\0' 'x'; header 5 0 0; } > "$CORPUS/seed-$1"
}
seed long-data-big-reads 0x60        # control: full-size receive buffers, 33 KiB reads
seed long-data-small-reads 0xc0      # control: full-size buffers, 1 KiB reads, WouldBlock between

# -a: debug assertions on (integer overflow panics too), as in the test profile.
# -max_len: inputs long enough for a rendezvous payload that skips the staging buffer (>= 16 KiB).
# -rss_limit_mb: a run that needs more memory than this is a finding (an unpaid allocation).
# shellcheck disable=SC2086 # FUZZ_ARGS is a list of flags
cargo +nightly fuzz run -a frame_decode -- \
    -max_total_time="$SECONDS_TO_RUN" -max_len=65536 -rss_limit_mb=1024 -print_final_stats=1 ${FUZZ_ARGS:-}
