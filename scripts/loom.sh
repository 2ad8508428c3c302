#!/usr/bin/env bash
# Model-checks fastmp's lock-free core with loom: the `loom_tests` modules of the ring, board and
# send record run the real code under every interleaving of their 2-3 threads (up to
# LOOM_MAX_PREEMPTIONS preemptions), with loom's atomics and cells (see crates/fastmp/src/sync.rs).
#
# Usage: scripts/loom.sh [FILTER [-- TEST-BINARY-ARGS]]
#        FILTER defaults to `loom_tests`; give a narrower one, e.g. `record::loom_tests` (only loom
#        tests can run in a `--cfg loom` build: loom's types panic outside a model).
# Env:   LOOM_MAX_PREEMPTIONS   preemption bound (default 3)
#        LOOM_LOG=1, LOOM_LOCATION=1, LOOM_CHECKPOINT_FILE=...   loom's debugging aids
#
# Builds in target/loom so that `--cfg loom` does not invalidate the normal build's cache.
set -euo pipefail
cd "$(dirname "$0")/.."

export RUSTFLAGS="${RUSTFLAGS:-} --cfg loom"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/loom}"

cargo test -p fastmp --release --lib "${@:-loom_tests}"
