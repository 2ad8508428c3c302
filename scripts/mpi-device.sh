#!/usr/bin/env bash
# Builds fastmp with the `mpi` feature and runs the mpi-device test binaries under mpirun at
# np 2 and 4 (every process runs the same tests in the same order: --test-threads=1), then the
# device's unit tests (a singleton MPI process) and the failure tests (which start mpirun
# themselves).
#
# Usage: scripts/mpi-device.sh [TEST_NAME_FILTER]
set -euo pipefail
cd "$(dirname "$0")/.."

# The mpi-device suites (crates/fastmp/tests/<name>.rs, each `#![cfg(feature = "mpi")]`).
SUITES=(mpi_p2p mpi_collectives mpi_one_sided mpi_intercomm)

command -v mpirun >/dev/null || { echo "mpi-device.sh: mpirun not found (install openmpi-bin libopenmpi-dev)" >&2; exit 1; }

# Build every suite once and find its executable from cargo's JSON messages.
args=()
for suite in "${SUITES[@]}"; do args+=(--test "$suite"); done
mapfile -t binaries < <(cargo test -p fastmp --features mpi "${args[@]}" --no-run --message-format=json \
    | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])
')
[ "${#binaries[@]}" -eq "${#SUITES[@]}" ] || { echo "mpi-device.sh: expected ${#SUITES[@]} test binaries, got ${#binaries[@]}" >&2; exit 1; }

root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
for np in 2 4; do
    for bin in "${binaries[@]}"; do
        echo "== mpirun -np $np $(basename "$bin")"
        timeout 300 mpirun "${root[@]}" --oversubscribe -np "$np" -x FASTMP_DEVICE=mpi -x RUST_BACKTRACE \
            "$bin" --test-threads=1 -q "$@"
    done
done

echo "== MPI_THREAD_MULTIPLE (FASTMP_MPI_THREADS=multiple): Comm::threaded on the mpi device"
for bin in "${binaries[@]}"; do
    timeout 300 mpirun "${root[@]}" --oversubscribe -np 2 -x FASTMP_DEVICE=mpi -x FASTMP_MPI_THREADS=multiple \
        "$bin" --test-threads=1 -q threads
done

echo "== the hybrid device over MPI (FASTMP_INTERPROCESS=mpi): processes x threads 2x2, 2x3, 3x1"
hybrid=$(cargo test -p fastmp --features mpi --test mpi_hybrid --no-run --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])
')
for shape in "2 2" "2 3" "3 1"; do
    read -r processes threads <<<"$shape"
    timeout 120 mpirun "${root[@]}" --oversubscribe -np "$processes" -x FASTMP_DEVICE=hybrid -x FASTMP_INTERPROCESS=mpi \
        -x FASTMP_THREADS_PER_PROCESS="$threads" -x RUST_BACKTRACE "$hybrid" --test-threads=1 -q job_
done
# Outside mpirun: these start mpirun on the binary themselves.
"$hybrid" --test-threads=1 -q failure_

echo "== unit tests of the mpi device (singleton MPI process)"
cargo test -p fastmp --features mpi --lib device::mpi -q
echo "== a failing rank under mpirun"
cargo test -p fastmp --features mpi --test mpi_failure -q -- --test-threads=1
