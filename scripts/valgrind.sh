#!/usr/bin/env bash
# Runs fastmp integration-test binaries under valgrind memcheck: invalid reads/writes, uses of
# uninitialised memory, and definite leaks all fail the run.
#
# Usage: scripts/valgrind.sh [-t TARGET]... [TEST_FILTER...]
#   -t TARGET    integration-test target to run (a file stem under crates/fastmp/tests/);
#                repeatable. Default: stress, the p2p_* suites, miri_smoke, matching_model,
#                one_sided_stress, one_sided_atomics
#                (whichever exist).
#   TEST_FILTER  passed on to the test harness (e.g. a test-name substring, or --exact NAME).
# Env:
#   VALGRIND_FLAGS   extra valgrind flags
#   PROPTEST_CASES   cases for property tests (default 16 here: valgrind is ~50x slower)
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 2; }

TARGETS=()
while getopts "t:h" opt; do
    case $opt in
        t) TARGETS+=("$OPTARG") ;;
        h) sed -n '2,14p' "$0"; exit 0 ;;
        *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
FILTER=("$@")
if [[ ${#TARGETS[@]} -eq 0 ]]; then
    TARGETS=(stress p2p_matching p2p_transfers p2p_requests p2p_errors miri_smoke matching_model
        one_sided_stress one_sided_atomics)
fi
export PROPTEST_CASES="${PROPTEST_CASES:-16}"
read -r -a EXTRA <<<"${VALGRIND_FLAGS:-}"

# Build every integration test once and read the binaries' paths from cargo's JSON messages.
declare -A BIN
while IFS=$'\t' read -r name exe; do
    BIN[$name]=$exe
done < <(cargo test -p fastmp --tests --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "test" in m["target"]["kind"]:
        print(m["target"]["name"] + "\t" + m["executable"])
')
# Surface build errors (the JSON pass above hides them).
cargo test -p fastmp --tests --no-run --quiet

ran=0
failed=()
for t in "${TARGETS[@]}"; do
    exe="${BIN[$t]:-}"
    if [[ -z "$exe" ]]; then
        echo "---- $t: no such test target, skipped"
        continue
    fi
    echo "==== valgrind: $t (${exe#"$PWD/"}) ${FILTER[*]:-}"
    # --test-threads=1: one test at a time (each test still runs its rank threads).
    # Definite leaks are errors; "possibly lost" blocks from thread-locals/statics are not.
    if valgrind --quiet --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
        --show-leak-kinds=definite "${EXTRA[@]}" \
        "$exe" --test-threads=1 "${FILTER[@]}"; then
        echo "==== $t: clean"
    else
        echo "==== $t: FAILED (exit $?)"
        failed+=("$t")
    fi
    ran=$((ran + 1))
done

if [[ $ran -eq 0 ]]; then
    echo "no test binary ran" >&2
    exit 2
fi
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "valgrind found errors in: ${failed[*]}" >&2
    exit 1
fi
echo "valgrind: $ran test binaries clean"
