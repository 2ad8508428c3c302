#!/usr/bin/env bash
# MPI_IN_PLACE against out-of-place: alternating runs of `fastmp-bench <coll>` and
# `fastmp-bench <coll> --in-place`, then the median of each size's average latency per mode.
# Usage: bench/in_place.sh [ROUNDS] [NP] [BENCH_BINARY]   (shm, thread ranks, 8 B .. 1 MiB)
set -euo pipefail
rounds=${1:-5}
np=${2:-2}
bin=${3:-target/release/fastmp-bench}
out=$(mktemp -d)
for coll in ${COLLS:-allreduce allgather alltoall reduce scan}; do
    for round in $(seq "$rounds"); do
        for mode in out in; do
            flag=$([ "$mode" = in ] && echo --in-place || true)
            "$bin" "$coll" --np "$np" --min-size 8 --max-size 1048576 --json $flag >>"$out/$coll.$mode"
        done
    done
done
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
printf '%-10s %8s %12s %12s %7s\n' collective size out_us in_place_us ratio
for coll in ${COLLS:-allreduce allgather alltoall reduce scan}; do
    for size in $(grep -o '"size":[0-9]*' "$out/$coll.out" | cut -d: -f2 | sort -n -u); do
        pick() { grep "\"size\":$size," "$out/$coll.$1" | grep -o '"avg_us":[0-9.]*' | cut -d: -f2 | median; }
        o=$(pick out)
        i=$(pick in)
        printf '%-10s %8s %12s %12s %7.3f\n' "$coll" "$size" "$o" "$i" "$(awk -v a="$i" -v b="$o" 'BEGIN {print a / b}')"
    done
done
