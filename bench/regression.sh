#!/usr/bin/env bash
# Compare two fastmp builds against each other and against the system MPI, in one run.
#
# usage: bench/regression.sh BEFORE_BIN AFTER_BIN [BENCH...] [--np N] [--tcp]
#                            [--min-size B] [--max-size B] [--sizes B,B,...]
#
#   BEFORE_BIN / AFTER_BIN  fastmp-bench binaries of the build before and after a change
#                           (e.g. built in a worktree of the old commit)
#   BENCH                   benchmark names as for bench/compare.sh (default: latency bw)
#   --sizes                 only report these sizes (the runs still cover --min/--max-size)
#   --tcp                   fastmp over fastmprun --device tcp (FASTMPRUN_BIN, default
#                           target/release/fastmprun, for both builds), MPI with --mca btl tcp,self
#
# Every repetition runs before, after and MPI back to back (rotating which goes first), so slow
# drifts of a shared VM hit all three alike; the table shows medians per size over REPEAT runs
# (default 5) and the ratios after/before and after/mpi (for latencies lower is better, for
# bandwidths higher). Set ITERATIONS to forward --iterations to the collectives of both sides.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "regression.sh: $*" >&2; exit 2; }
(($# >= 2)) || die "usage: bench/regression.sh BEFORE_BIN AFTER_BIN [BENCH...] [options]"
before=$1 after=$2
shift 2
[[ -x $before ]] || die "'$before' is not an executable fastmp-bench"
[[ -x $after ]] || die "'$after' is not an executable fastmp-bench"

benches=() np=2 tcp=0 sizes="" size_args=()
while (($# > 0)); do
    case $1 in
        --np) np=$2; shift 2 ;;
        --tcp) tcp=1; shift ;;
        --min-size | --max-size) size_args+=("$1" "$2"); shift 2 ;;
        --sizes) sizes=$2; shift 2 ;;
        -*) die "unknown option '$1'" ;;
        *) benches+=("$1"); shift ;;
    esac
done
((${#benches[@]} > 0)) || benches=(latency bw)
[[ -z ${ITERATIONS:-} ]] || size_args+=(--iterations "$ITERATIONS")
repeat=${REPEAT:-5}
fastmprun=${FASTMPRUN_BIN:-target/release/fastmprun}
((tcp == 0)) || [[ -x $fastmprun ]] || die "--tcp needs $fastmprun (cargo build --release -p fastmprun)"

mkdir -p target
mpicc -O2 -o target/mpi_bench bench/mpi_bench.c
mpi_args=(--allow-run-as-root -np "$np" --bind-to core)
((tcp == 0)) || mpi_args+=(--mca btl tcp,self)

out=$(mktemp -d "${TMPDIR:-/tmp}/fastmp-regression.XXXXXX")
trap 'rm -rf -- "$out"' EXIT

run_side() { # side bench rep
    local side=$1 bench=$2 rep=$3 cmd
    case $side in
        mpi) cmd=(mpirun "${mpi_args[@]}" target/mpi_bench "$bench" "${size_args[@]}" --json) ;;
        *)
            local bin=$before
            [[ $side == before ]] || bin=$after
            cmd=("$bin" "$bench" --np "$np" "${size_args[@]}" --json)
            ((tcp == 0)) || cmd=("$fastmprun" -np "$np" --device tcp "${cmd[@]}")
            ;;
    esac
    sleep "${SETTLE_SECONDS:-1}"
    echo "[regression] $bench $rep/$repeat $side" >&2
    "${cmd[@]}" 2>/dev/null | grep '^{' >"$out/$side.$bench.$rep.jsonl" || echo "[regression] $side $bench failed" >&2
}

sides=(before after mpi)
for bench in "${benches[@]}"; do
    for ((rep = 1; rep <= repeat; rep++)); do
        for ((k = 0; k < 3; k++)); do
            run_side "${sides[$(((rep + k) % 3))]}" "$bench" "$rep"
        done
    done
done

python3 - "$out" "$np" "$tcp" "$sizes" "${benches[@]}" <<'PY'
import glob, json, os, statistics, sys
out, np_, tcp, sizes = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
wanted = {int(s) for s in sizes.split(",") if s}
for bench in sys.argv[5:]:
    data, metric = {}, None
    for side in ("before", "after", "mpi"):
        for path in glob.glob(os.path.join(out, f"{side}.{bench}.*.jsonl")):
            for line in open(path):
                obj = json.loads(line)
                key = "avg_us" if "avg_us" in obj else "mb_s" if "mb_s" in obj else None
                if key is None:
                    continue
                metric = key
                # Size-less benchmarks (barrier) are reported as size 0.
                data.setdefault(int(obj.get("size", 0)), {}).setdefault(side, []).append(obj[key])
    lower = metric == "avg_us"
    print(f"# {bench} np={np_} {'tcp' if tcp else 'shm'}: median {metric} ({'lower' if lower else 'higher'} is better)")
    print(f"{'size':>9} {'before':>10} {'after':>10} {'mpi':>10} {'after/before':>13} {'after/mpi':>10}")
    for size in sorted(data):
        if wanted and size not in wanted and size != 0:
            continue
        med = {s: statistics.median(v) for s, v in data[size].items()}
        b, a, m = med.get("before"), med.get("after"), med.get("mpi")
        ratio = lambda x, y: f"{x / y:.3f}" if x and y else "-"
        cell = lambda v: f"{v:.3f}" if v is not None else "-"
        print(f"{size:>9} {cell(b):>10} {cell(a):>10} {cell(m):>10} {ratio(a, b):>13} {ratio(a, m):>10}")
    print()
PY
