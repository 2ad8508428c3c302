#!/usr/bin/env bash
# Runs fastmp's unsafe core under Miri (undefined behaviour, data races, leaks):
#   1. the unit tests of the ring, board, send record and request table (two-thread tests
#      included), the one-sided window memory (rma_memory) and shm windows (gate, locks), and the
#      tcp receive path's truncating copy, and the nonblocking futures' reused memory
#      (future_pool), under Stacked Borrows and again
#      under Tree Borrows;
#   2. the same modules with several scheduler seeds (different thread interleavings and
#      weak-memory outcomes);
#   3. tests/miri_smoke.rs: tiny jobs through the public API (eager, rendezvous,
#      receiver-first, synchronous, leaked requests) and the native shm collectives (np = 3,
#      a 70 KB ibcast whose root and receivers share the copy,
#      buffers freed right after each call, a panicking user op), and nonblocking collectives
#      (futures in reused blocks, a leaked request).
#   4. tests/miri_agent.rs: a native ialltoall through the progress agent (np = 3, 64 KiB
#      blocks copied in chunks by the agent's thread and the ranks);
#   5. crates/fastmp-darray/tests/miri_direct.rs: the distributed arrays' direct copies
#      between thread ranks (a strided halo and a remap on a 2×2 grid).
#
# Usage: scripts/miri.sh [--quick]      (--quick: step 1 under Stacked Borrows only)
# Env:   MIRI_SEEDS   seed range for step 2 (default 0..8)
#        MIRIFLAGS    extra flags, appended to the ones below
#
# Flags: strict provenance checking stays on (ring messages carry their `Arc<SendRecord>` as a
# raw pointer, not an integer). Isolation stays on: the library needs no host clock or files under
# Miri (park timeouts use Miri's virtual clock; membarrier / sched_setaffinity are cfg(not(miri))).
set -euo pipefail
cd "$(dirname "$0")/.."

QUICK=0
[[ "${1:-}" == "--quick" ]] && QUICK=1

rustup component add --toolchain nightly miri rust-src >/dev/null 2>&1 \
    || rustup component add --toolchain nightly miri rust-src
cargo +nightly miri setup >/dev/null

# frame_props::payload_longer...: the tcp receive path's raw-pointer copies into a receive buffer
# shorter than the payload (Miri caught a pointer formed past such a buffer's end there).
MODULES=(device::shm::ring device::shm::board device::shm::record device::shm::copy device::slab device::rma_memory future_pool
    device::shm::one_sided
    device::tcp::frame_props::payload_longer_than_its_buffer_is_cut_in_place)
BASE_FLAGS="${MIRIFLAGS:-}"

step() { printf '\n==== %s\n' "$*"; }

step "unit tests of the unsafe core (Stacked Borrows)"
MIRIFLAGS="$BASE_FLAGS" cargo +nightly miri test -p fastmp --lib -- "${MODULES[@]}"
if [[ $QUICK == 1 ]]; then
    exit 0
fi

step "unit tests of the unsafe core (Tree Borrows)"
MIRIFLAGS="$BASE_FLAGS -Zmiri-tree-borrows" cargo +nightly miri test -p fastmp --lib -- "${MODULES[@]}"

step "unit tests of the unsafe core, scheduler seeds ${MIRI_SEEDS:-0..8}"
MIRIFLAGS="$BASE_FLAGS -Zmiri-many-seeds=${MIRI_SEEDS:-0..8}" \
    cargo +nightly miri test -p fastmp --lib -- "${MODULES[@]}"

step "public API smoke tests (point-to-point and native collectives)"
MIRIFLAGS="$BASE_FLAGS" cargo +nightly miri test -p fastmp --test miri_smoke
MIRIFLAGS="$BASE_FLAGS -Zmiri-many-seeds=${MIRI_SEEDS:-0..8}" \
    cargo +nightly miri test -p fastmp --test miri_smoke

# The progress agent's workers outlive the job (they serve the whole process), hence
# -Zmiri-ignore-leaks for this binary alone; four CPUs, so that three ranks leave the agent an
# idle one (only then does the native ialltoall hand its copies over); one schedule (a run takes
# about 4 minutes).
step "progress agent: a native ialltoall copied in chunks by the agent and the ranks"
MIRIFLAGS="$BASE_FLAGS -Zmiri-ignore-leaks -Zmiri-num-cpus=4" cargo +nightly miri test -p fastmp --test miri_agent

# The distributed arrays' direct copies: thread ranks read each other's blocks through exposed
# addresses (hence Miri's integer-to-pointer warnings) while the owners write their ghost cells.
step "fastmp-darray direct copies between thread ranks (Stacked, then Tree Borrows)"
MIRIFLAGS="$BASE_FLAGS" cargo +nightly miri test -p fastmp-darray --test miri_direct
MIRIFLAGS="$BASE_FLAGS -Zmiri-tree-borrows" cargo +nightly miri test -p fastmp-darray --test miri_direct

step "Miri: no undefined behaviour found"
