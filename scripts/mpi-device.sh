#!/usr/bin/env bash
# Builds fastmp with the `mpi` feature and runs the mpi-device test binaries under mpirun at
# np 2 and 4 (every process runs the same tests in the same order: --test-threads=1), then the
# device's unit tests (a singleton MPI process) and the failure tests (which start mpirun
# themselves).
#
# Usage: scripts/mpi-device.sh [--mpich] [TEST_NAME_FILTER]
#   --mpich  the same suites over MPICH installed beside Open MPI (mpicc.mpich, mpirun.mpich;
#            the system's default MPI is left alone): built with MPICC=mpicc.mpich into
#            target/mpich, run under mpirun.mpich at np 2 and 4. Optional (CI runs Open MPI only);
#            the hybrid and failure parts, which drive Open MPI's mpirun, are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

# The mpi-device suites (crates/fastmp/tests/<name>.rs, each `#![cfg(feature = "mpi")]`).
SUITES=(mpi_p2p mpi_collectives mpi_one_sided mpi_intercomm)

mpich=0
if [ "${1:-}" = --mpich ]; then
    mpich=1
    shift
    command -v mpicc.mpich >/dev/null && command -v mpirun.mpich >/dev/null ||
        { echo "mpi-device.sh --mpich: mpicc.mpich/mpirun.mpich not found (install mpich libmpich-dev)" >&2; exit 1; }
    export MPICC=mpicc.mpich CARGO_TARGET_DIR=target/mpich
fi
((mpich)) || command -v mpirun >/dev/null || { echo "mpi-device.sh: mpirun not found (install openmpi-bin libopenmpi-dev)" >&2; exit 1; }

root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
# launch NP VAR=VALUE... -- PROGRAM ARGS...: the program under the chosen MPI's launcher.
launch() {
    local np=$1 env=()
    shift
    while [ "$1" != -- ]; do
        if ((mpich)); then env+=(-genv "${1%%=*}" "${1#*=}"); else env+=(-x "$1"); fi
        shift
    done
    shift
    if ((mpich)); then
        timeout 300 mpirun.mpich -np "$np" "${env[@]}" "$@"
    else
        timeout 300 mpirun "${root[@]}" --oversubscribe -np "$np" "${env[@]}" "$@"
    fi
}

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

# MPICH 4.0.2 over UCX fails an assertion in MPI_Finalize (ucp_rcache: "destroying inuse
# region") when a window was never freed, which the one-sided misuse test does on purpose (a
# window dropped without free on every rank keeps its memory exposed): skipped there.
skips=()
((mpich == 0)) || skips=(--skip misuse_is_an_error_on_the_rank_that_made_it)
for np in 2 4; do
    for bin in "${binaries[@]}"; do
        echo "== mpirun -np $np $(basename "$bin")"
        launch "$np" FASTMP_DEVICE=mpi RUST_BACKTRACE=${RUST_BACKTRACE:-0} -- "$bin" --test-threads=1 -q "${skips[@]}" "$@"
    done
done

echo "== messages over one MPI count: the > 2 GiB path with small data (FASTMP_MPI_MAX_COUNT=65536)"
for bin in "${binaries[@]}"; do
    [[ $(basename "$bin") == mpi_p2p-* ]] || continue
    launch 2 FASTMP_DEVICE=mpi FASTMP_MPI_MAX_COUNT=65536 -- "$bin" --test-threads=1 -q long_messages
done
((mpich == 0)) || { echo "== MPICH: done"; exit 0; }

echo "== MPI_THREAD_SINGLE (FASTMP_MPI_THREADS=single): a job on a second thread is refused"
for bin in "${binaries[@]}"; do
    [[ $(basename "$bin") == mpi_p2p-* ]] || continue
    launch 2 FASTMP_DEVICE=mpi FASTMP_MPI_THREADS=single -- "$bin" --test-threads=1 -q --exact \
        jobs_on_other_threads_need_more_than_mpi_thread_single
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
