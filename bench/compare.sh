#!/usr/bin/env bash
# Compare fastmp against the system MPI (Open MPI) on OSU-style benchmarks.
#
# usage: bench/compare.sh [BENCH...] [--np N] [--tcp | --mpi-device] [--hybrid]
#                         [--threads-per-process T] [--max] [--min-size B]
#                         [--max-size B] [--iterations N] [--win KIND] [--sync MODE]
#                         [--plot DIR]
#
#   uoms ...     the PGAS collectives (UOMS) against bench/mpi_uoms.c and fastmp's
#                two-sided collectives: see `bench/compare.sh uoms --help`
#   darray ...   the distributed arrays of fastmp-darray (halo, remap) against
#                bench/darray_mpi.c: see `bench/compare.sh darray --help`
#   BENCH        benchmark names (default: latency bw bibw); they are passed
#                unchanged to both fastmp-bench and target/mpi_bench:
#                point-to-point: latency bw bibw mbw_mr strided (a matrix column
#                  sent with a layout / MPI_Type_vector)
#                collectives: barrier bcast scatter scatterv gather gatherv
#                  allgather allgatherv alltoall alltoallv reduce allreduce
#                  reduce_scatter scan (or "collectives" for all of them)
#                nonblocking collectives: ibarrier ibcast iscatter igather
#                  iallgather ialltoall ireduce iallreduce (or "nbc" for all)
#                one-sided (exactly 2 ranks; MPI side: target/mpi_rma from
#                  bench/mpi_rma.c): put_latency get_latency put_bw get_bw
#                  put_bibw acc_latency fop_latency cas_latency (or "rma" for
#                  all); fop_latency and cas_latency have the one size 8, so
#                  --min-size/--max-size are not passed to them. An MPI run of
#                  cas_latency that fails shows "crashed" and does not fail the
#                  comparison (Open MPI 4.1.4's MPI_Compare_and_swap on an
#                  MPI_Win_allocate window segfaults over shared memory)
#   --np N       number of ranks (default $NP, else 2); with more ranks than
#                cores both sides run unpinned (MPI: --oversubscribe
#                --bind-to none; fastmp: --pin none), e.g. NP=4 or NP=8 on 2 cores
#   --tcp        compare over TCP: MPI runs with `--mca btl tcp,self` (one-sided
#                benchmarks add `--mca osc pt2pt`); fastmp runs its processes
#                through fastmprun --device tcp (built here)
#   --hybrid     adds a third column, fastmp on the hybrid device: processes of
#                T thread ranks (`fastmprun -np N --device hybrid
#                --threads-per-process T`, built here), run in turn with the
#                other two sides; ratios hybrid/mpi and hybrid/fastmp are shown
#                beside fastmp/mpi (with --tcp: the hybrid column against the tcp
#                device and MPI over tcp,self, the issue's comparison)
#   --threads-per-process T
#                hybrid thread ranks per process (default 2; needs --hybrid);
#                np need not be a multiple of T (the last process has fewer)
#   --max        collectives: compare the maximum latency over ranks (max_us)
#                instead of OSU's average (avg_us)
#   --mpi-device fastmp on its mpi device, over the same MPI as the C side:
#                fastmp-bench built with `--features mpi` runs under the same
#                mpirun command line as target/mpi_bench, with -x FASTMP_DEVICE=mpi
#                and --pin none (mpirun binds the ranks); its collectives are the
#                MPI library's own unless FASTMP_BENCH_ARGS forces an algorithm
#   --min-size B / --max-size B
#                message size range, forwarded to both sides
#   --iterations N
#                timed iterations per size, forwarded to both sides (default
#                OSU's: collectives 1000, 100 above 8 KiB, ibarrier 100;
#                point-to-point latency 10000 / 1000, bw, bibw and mbw_mr 100 / 20
#                windows); one-sided: N timed iterations at every size (default
#                OSU's 10000 / 1000 latency, 100 / 20 bandwidth)
#   --win KIND   one-sided only: allocate (default) or create, forwarded to both
#   --sync MODE  one-sided only: flush (default; put_bibw: pscw), flush_local,
#                lock, lock_all, fence or pscw, forwarded to both
#   --plot DIR   also saves each benchmark's medians as DIR/BENCH.jsonl (one point per
#                line: bench, series = fastmp/mpi/hybrid, size, value, metric,
#                lower_is_better, np, device, cpu; nonblocking collectives: their pure
#                communication time) and draws DIR/BENCH.svg from it with
#                `fastmp-bench plot --input DIR/BENCH.jsonl --out DIR` (which also
#                redraws saved files on its own)
#
# environment:
#   REPEAT            runs per side, alternating fastmp and MPI (default 3);
#   SETTLE_SECONDS    pause before each run (default 1), so runs never overlap;
#                     the table shows the median per size
#   FASTMP_BENCH_BIN  use this fastmp-bench binary and skip `cargo build`
#   FASTMPRUN_BIN     fastmprun launcher for --tcp and --hybrid (default
#                     target/release/fastmprun)
#   MPIRUN_ARGS       extra arguments for mpirun (word-split), e.g. "--mca btl self,vader"
#   FASTMP_BENCH_ARGS extra arguments for fastmp-bench only (word-split), e.g.
#                     "--algorithm mst" to compare one fastmp algorithm
#   NP                default for --np
#
# Every benchmark binary prints one JSON object per line and size, e.g.
#   {"bench":"latency","device":"shm","np":2,"size":8,"avg_us":0.15}
#   {"bench":"bw","device":"mpi","np":2,"size":8,"mb_s":123.45}
#   {"bench":"bcast","device":"shm","np":4,"size":8,"avg_us":0.4,"min_us":0.3,
#    "max_us":0.5,"mb_s":80.0,"algorithm":"native"}
#   {"bench":"ibcast","device":"shm","np":2,"size":8,"overall_us":2.5,"compute_us":1.2,
#    "pure_comm_us":1.25,"overlap_pct":0.0,"blocking_us":1.1}   (ibarrier: no "size")
#   {"bench":"put_latency","device":"shm","np":2,"size":8,"avg_us":0.05,
#    "win":"allocate","sync":"flush"}
# Collectives are compared on avg_us (the average over ranks, as OSU prints; --max:
# max_us, the slowest rank's);
# the algorithm fastmp used is shown beside the ratio. Nonblocking collectives
# show OSU's four columns (Overall, Compute, Pure Comm., Overlap %) of both
# sides, the pure-communication ratio fastmp/mpi, and fastmp's pure
# communication over its blocking latency measured in the same run (pure/blk;
# the goal is <= 1.1); each column is the median of its own values over the runs.
# Latency-like metrics (avg_us, any *_us) are lower-is-better; bandwidth-like
# (mb_s and others) higher-is-better. The ratio column is always fastmp/mpi.
set -euo pipefail

cd "$(dirname "$0")/.."

usage() {
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"
}

die() {
    echo "compare.sh: $*" >&2
    exit 2
}

note() {
    echo "[compare] $*" >&2
}

is_uint() {
    [[ $1 =~ ^[0-9]+$ ]]
}

# fastmp_launcher DEVICE NP THREADS: the fastmprun command line the fastmp side of the uoms and
# darray modes runs under (into the array `launcher`): nothing for shm, `--device tcp`, or
# `--device hybrid --threads-per-process THREADS`; builds fastmprun unless FASTMPRUN_BIN is set.
fastmp_launcher() {
    local device=$1 np=$2 threads=$3
    launcher=()
    [[ $device != shm ]] || return 0
    local fastmprun_bin=${FASTMPRUN_BIN:-target/release/fastmprun}
    if [[ -z ${FASTMPRUN_BIN:-} ]]; then
        note "cargo build --release -p fastmprun"
        cargo build --release -p fastmprun >&2
    fi
    launcher=("$fastmprun_bin" -np "$np" --device "$device")
    [[ $device != hybrid ]] || launcher+=(--threads-per-process "$threads")
}

# hybrid_threads_checked T: T if it is a positive integer, else the script stops.
hybrid_threads_checked() {
    is_uint "$1" && (($1 >= 1)) || die "--threads-per-process must be a positive integer, got '$1'"
    echo "$1"
}

# ------------------------------------------------------------ the uoms mode
# bench/compare.sh uoms [BENCH...] [--np N] [--tcp | --hybrid [--threads-per-process T]] [--min-size B] [--max-size B]
#                       [--iterations N] [--sync-mode FLAGS] [--algorithm NAME]
# runs `fastmp-bench uoms BENCH` (the PGAS collectives on shared arrays),
# target/mpi_uoms BENCH (bench/mpi_uoms.c: MPI_Bcast, MPI_Scatter, ...) and
# fastmp's own two-sided twin (bcast, scatter, gather, allgather, alltoall,
# reduce, scan, barrier; get_latency / put_latency for memget / memput at np=2)
# alternately, REPEAT rounds, and prints per size the medians of t_avg and
# t_min (ns) of both UOMS sides with their ratio fastmp/mpi, and the two-sided
# twin's OSU avg_us (in ns) with pgas/two-sided. The UOMS sides report the
# maximum over ranks per iteration; the two-sided column is OSU's statistic
# (the mean of the ranks' means), so it flatters the two-sided side slightly.
# Default benchmarks: all twelve; default sizes UOMS's 4 B .. 16 MiB.
# --hybrid: fastmp (both its sides) runs under fastmprun --device hybrid
# --threads-per-process T (default 2), MPI over shared memory.
uoms_main() {
    local all=(broadcast scatter gather gather_all exchange permute reduce prefix_reduce memget memput memcpy barrier)
    local list=() np=${NP:-2} tcp=0 device=shm threads=2 sizes=() sync_mode="" algorithm="" iterations=()
    while (($# > 0)); do
        case $1 in
            -h | --help)
                sed -n '/^# bench\/compare.sh uoms/,/^uoms_main()/{/^uoms_main()/d;s/^# \{0,1\}//;p;}' "$0"
                return 0
                ;;
            --np | -np | -n)
                (($# >= 2)) || die "$1 needs a value"
                np=$2
                shift 2
                ;;
            --tcp)
                tcp=1
                device=tcp
                shift
                ;;
            --hybrid)
                device=hybrid
                shift
                ;;
            --threads-per-process)
                (($# >= 2)) || die "$1 needs a value"
                threads=$(hybrid_threads_checked "$2")
                shift 2
                ;;
            --min-size | --max-size)
                (($# >= 2)) || die "$1 needs a value"
                is_uint "$2" || die "$1 must be a byte count, got '$2'"
                sizes+=("$1" "$2")
                shift 2
                ;;
            --iterations)
                (($# >= 2)) || die "$1 needs a value"
                is_uint "$2" && (($2 >= 1)) || die "--iterations must be a positive integer, got '$2'"
                iterations=(--iterations "$2")
                shift 2
                ;;
            --sync-mode)
                (($# >= 2)) || die "$1 needs a value"
                sync_mode=$2
                shift 2
                ;;
            --algorithm)
                (($# >= 2)) || die "$1 needs a value"
                algorithm=$2
                shift 2
                ;;
            -*) die "uoms: unknown option '$1' (see bench/compare.sh uoms --help)" ;;
            *)
                [[ " ${all[*]} " == *" $1 "* ]] || die "uoms: unknown benchmark '$1' (one of: ${all[*]})"
                list+=("$1")
                shift
                ;;
        esac
    done
    ((${#list[@]} > 0)) || list=("${all[@]}")
    is_uint "$np" && ((np >= 1)) || die "--np must be a positive integer, got '$np'"
    local repeat=${REPEAT:-3}
    is_uint "$repeat" && ((repeat >= 1)) || die "REPEAT must be a positive integer, got '$repeat'"
    command -v python3 >/dev/null 2>&1 || die "python3 is needed to summarise the results"

    local fastmp_bin=${FASTMP_BENCH_BIN:-}
    if [[ -z $fastmp_bin ]]; then
        note "cargo build --release -p fastmp-bench"
        cargo build --release -p fastmp-bench >&2
        fastmp_bin=target/release/fastmp-bench
    fi
    ((tcp == 0)) || [[ $device != hybrid ]] || die "--tcp and --hybrid exclude each other"
    local launcher=()
    fastmp_launcher "$device" "$np" "$threads"
    local cores pin=compact mpi_bind=(--bind-to core)
    cores=$(nproc 2>/dev/null || echo 1)
    if ((np > cores)); then
        note "np=$np > $cores cores: both sides run unpinned"
        pin=none
        mpi_bind=(--oversubscribe --bind-to none)
    fi
    local have_mpi=0 mpirun_args=()
    if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then
        have_mpi=1
        mkdir -p target
        note "mpicc -O2 -o target/mpi_uoms bench/mpi_uoms.c"
        mpicc -O2 -o target/mpi_uoms bench/mpi_uoms.c >&2
        mpirun_args=(-np "$np")
        if mpirun --version 2>&1 | grep -q 'Open MPI'; then
            mpirun_args=(--allow-run-as-root -np "$np" "${mpi_bind[@]}")
            ((tcp == 0)) || mpirun_args+=(--mca btl "tcp,self" --mca osc pt2pt)
        fi
        if [[ -n ${MPIRUN_ARGS:-} ]]; then
            read -r -a extra <<<"$MPIRUN_ARGS"
            mpirun_args+=("${extra[@]}")
        fi
    else
        note "mpicc/mpirun not found: fastmp's numbers alone"
    fi

    results=$(mktemp -d "${TMPDIR:-/tmp}/fastmp-uoms.XXXXXX")
    trap 'rm -rf -- "$results"' EXIT
    mkdir -p "$results/pgas" "$results/mpi" "$results/twosided"
    local failures=0
    # uoms_run SIDE BENCH REP CMD...: keep the JSON lines; a failure is counted, not fatal.
    uoms_run() {
        local side=$1 bench=$2 rep=$3
        shift 3
        local out="$results/$side/$bench.$rep.jsonl"
        note "$bench run $rep/$repeat: $side: $*"
        settle
        if "$@" >"$out.raw" 2>"$out.log"; then
            grep '^{' "$out.raw" >"$out" || true
        else
            note "WARNING: $side $bench run $rep failed (exit $?):"
            tail -n 5 "$out.log" >&2 || true
            failures=$((failures + 1))
        fi
    }
    local bench rep twin pgas_args
    for bench in "${list[@]}"; do
        case $bench in
            broadcast) twin=bcast ;;
            gather_all) twin=allgather ;;
            exchange) twin=alltoall ;;
            prefix_reduce) twin=scan ;;
            scatter | gather | reduce | barrier) twin=$bench ;;
            memget) twin=get_latency ;;
            memput) twin=put_latency ;;
            *) twin="" ;;
        esac
        [[ $twin != *_latency ]] || ((np == 2)) || twin=""
        pgas_args=(uoms "$bench" --np "$np" --pin "$pin" --json "${iterations[@]}")
        [[ $bench == barrier ]] || pgas_args+=("${sizes[@]}")
        if [[ -n $sync_mode && $bench != mem* && $bench != barrier ]]; then
            pgas_args+=(--sync-mode "$sync_mode")
        fi
        if [[ -n $algorithm && $bench != mem* && $bench != barrier ]]; then
            pgas_args+=(--algorithm "$algorithm")
        fi
        for ((rep = 1; rep <= repeat; rep++)); do
            uoms_run pgas "$bench" "$rep" "${launcher[@]}" "$fastmp_bin" "${pgas_args[@]}"
            if ((have_mpi)); then
                local mpi_args=("$bench" --json "${iterations[@]}")
                [[ $bench == barrier ]] || mpi_args+=("${sizes[@]}")
                uoms_run mpi "$bench" "$rep" mpirun "${mpirun_args[@]}" target/mpi_uoms "${mpi_args[@]}"
            fi
            if [[ -n $twin ]]; then
                local twin_args=("$twin" --np "$np" --pin "$pin" --json)
                [[ $twin == barrier ]] || twin_args+=("${sizes[@]}")
                [[ $twin == *_latency ]] || twin_args+=("${iterations[@]}")
                uoms_run twosided "$bench" "$rep" "${launcher[@]}" "$fastmp_bin" "${twin_args[@]}"
            fi
        done
    done

    local transport=$device
    [[ $device != hybrid ]] || transport="hybrid, $threads threads per process (mpi: shared memory)"
    python3 - "$results" "$np" "$repeat" "$transport" "${list[@]}" <<'PY'
import glob
import json
import os
import statistics
import sys

results, np_, repeat, transport = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]


def load(side, bench, keys):
    """size -> key -> values over the runs; plus the algorithms fastmp reports per size."""
    values, algorithms, devices = {}, {}, set()
    for path in sorted(glob.glob(os.path.join(results, side, f"{bench}.*.jsonl"))):
        for line in open(path):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if "size" not in obj:
                continue
            devices.add(str(obj.get("device", "?")))
            per = values.setdefault(int(obj["size"]), {})
            for key in keys:
                if isinstance(obj.get(key), (int, float)):
                    per.setdefault(key, []).append(float(obj[key]))
            if side == "pgas" and "algorithm" in obj:
                algorithms.setdefault(int(obj["size"]), set()).add(str(obj["algorithm"]))
    return values, algorithms, devices


def med(data, size, key, scale=1.0):
    vals = data.get(size, {}).get(key)
    return statistics.median(vals) * scale if vals else None


def cell(v):
    return "-" if v is None else f"{v:.0f}"


def ratio(a, b):
    return f"{a / b:.3f}" if a is not None and b else "-"


for i, bench in enumerate(sys.argv[5:]):
    pgas, algos, pdev = load("pgas", bench, ("t_avg_ns", "t_min_ns"))
    mpi, _, mdev = load("mpi", bench, ("t_avg_ns", "t_min_ns"))
    two, _, _ = load("twosided", bench, ("avg_us",))
    if i:
        print()
    print(f"# uoms {bench}  np={np_}  transport={transport}  median of {repeat} run(s)  "
          f"[fastmp={'/'.join(sorted(pdev)) or 'n/a'}, mpi={'/'.join(sorted(mdev)) or 'n/a'}]")
    print("# times in ns, lower is better; f = fastmp PGAS (uoms), m = Open MPI (mpi_uoms), "
          "2s = fastmp two-sided (OSU avg); ratios f/m and f/2s")
    head = ["avg f", "avg m", "avg f/m", "min f", "min m", "min f/m", "avg 2s", "avg f/2s"]
    if bench in ("reduce", "prefix_reduce"):
        print("# 2s is OSU's reduce/scan: an elementwise f32 vector of size/4 (UPC's result is one value "
              "/ a prefix over the global index), so f/2s compares different work")
    if bench in ("memget", "memput"):
        print("# 2s is fastmp's own one-sided get_latency/put_latency (flush per op, rank 0 alone timed)")
    print(f"{'size':<10}" + "".join(f"{h:>12}" for h in head) + "  fastmp algorithm")
    for size in sorted(set(pgas) | set(mpi)):
        fa, ma, fm, mm = (med(pgas, size, "t_avg_ns"), med(mpi, size, "t_avg_ns"),
                          med(pgas, size, "t_min_ns"), med(mpi, size, "t_min_ns"))
        ts = med(two, size, "avg_us", 1000.0)
        cells = [cell(fa), cell(ma), ratio(fa, ma), cell(fm), cell(mm), ratio(fm, mm), cell(ts), ratio(fa, ts)]
        algo = "/".join(sorted(algos.get(size, ()))) or "-"
        print(f"{size:<10}" + "".join(f"{c:>12}" for c in cells) + f"  {algo}")
    if not pgas and not mpi:
        print("# no results")
PY
    if ((failures > 0)); then
        note "$failures run(s) failed; see the warnings above"
        return 1
    fi
}

# ---------------------------------------------------------- the darray mode
# bench/compare.sh darray [halo] [remap] [--np N] [--tcp | --hybrid [--threads-per-process T]] [--size N] [--width W]
#                         [--iterations N]
# runs `fastmp-bench halo|remap` (fastmp-darray's write_halo and remap on an
# N x N f64 array over the 2-D grid dims_create(np, 2) gives) and
# target/darray_mpi (bench/darray_mpi.c: MPI_Cart_create, MPI_Sendrecv of the
# four faces with MPI_Type_vector columns; pack + MPI_Alltoallv + unpack)
# alternately, REPEAT rounds (default 5), and prints per size the medians of
# fastmp's built schedule (exec), its one-shot call (1shot) and MPI, with the
# ratios exec/mpi, 1shot/mpi and 1shot/exec (how much a kept schedule saves).
# halo: block x block, --width W ghost cells per side (default 1); remap: rows
# block -> cyclic, columns block. Default sizes 256 .. 4096. shm: fastmp-bench
# --np N --pin compact against mpirun --bind-to core; --tcp: fastmprun
# --device tcp against mpirun --mca btl tcp,self; --hybrid: fastmprun --device
# hybrid --threads-per-process T (default 2) against mpirun's shared memory;
# np > cores: both unpinned.
darray_main() {
    local list=() np=${NP:-2} tcp=0 device=shm threads=2 args=()
    while (($# > 0)); do
        case $1 in
            -h | --help)
                sed -n '/^# bench\/compare.sh darray/,/^darray_main()/{/^darray_main()/d;s/^# \{0,1\}//;p;}' "$0"
                return 0
                ;;
            --np | -np | -n)
                (($# >= 2)) || die "$1 needs a value"
                np=$2
                shift 2
                ;;
            --tcp)
                tcp=1
                device=tcp
                shift
                ;;
            --hybrid)
                device=hybrid
                shift
                ;;
            --threads-per-process)
                (($# >= 2)) || die "$1 needs a value"
                threads=$(hybrid_threads_checked "$2")
                shift 2
                ;;
            --size | --width | --iterations)
                (($# >= 2)) || die "$1 needs a value"
                is_uint "$2" && (($2 >= 1)) || die "$1 must be a positive integer, got '$2'"
                args+=("$1" "$2")
                shift 2
                ;;
            halo | remap)
                list+=("$1")
                shift
                ;;
            *) die "darray: unknown argument '$1' (see bench/compare.sh darray --help)" ;;
        esac
    done
    ((${#list[@]} > 0)) || list=(halo remap)
    is_uint "$np" && ((np >= 1)) || die "--np must be a positive integer, got '$np'"
    local repeat=${REPEAT:-5}
    is_uint "$repeat" && ((repeat >= 1)) || die "REPEAT must be a positive integer, got '$repeat'"
    command -v python3 >/dev/null 2>&1 || die "python3 is needed to summarise the results"
    command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 ||
        die "darray compares with MPI: mpicc and mpirun are needed (openmpi-bin libopenmpi-dev)"

    local fastmp_bin=${FASTMP_BENCH_BIN:-}
    if [[ -z $fastmp_bin ]]; then
        note "cargo build --release -p fastmp-bench"
        cargo build --release -p fastmp-bench >&2
        fastmp_bin=target/release/fastmp-bench
    fi
    ((tcp == 0)) || [[ $device != hybrid ]] || die "--tcp and --hybrid exclude each other"
    local launcher=()
    fastmp_launcher "$device" "$np" "$threads"
    local cores pin=compact mpirun_args=(--allow-run-as-root -np "$np" --bind-to core)
    cores=$(nproc 2>/dev/null || echo 1)
    if ((np > cores)); then
        note "np=$np > $cores cores: both sides run unpinned"
        pin=none
        mpirun_args=(--allow-run-as-root -np "$np" --oversubscribe --bind-to none)
    fi
    ((tcp == 0)) || mpirun_args+=(--mca btl "tcp,self")
    if [[ -n ${MPIRUN_ARGS:-} ]]; then
        read -r -a extra <<<"$MPIRUN_ARGS"
        mpirun_args+=("${extra[@]}")
    fi
    mkdir -p target
    note "mpicc -O2 -o target/darray_mpi bench/darray_mpi.c"
    mpicc -O2 -o target/darray_mpi bench/darray_mpi.c >&2

    results=$(mktemp -d "${TMPDIR:-/tmp}/fastmp-darray.XXXXXX")
    trap 'rm -rf -- "$results"' EXIT
    mkdir -p "$results/fastmp" "$results/mpi"
    local failures=0
    # darray_run SIDE BENCH REP CMD...: keep the JSON lines; a failure is counted, not fatal.
    darray_run() {
        local side=$1 bench=$2 rep=$3
        shift 3
        local out="$results/$side/$bench.$rep.jsonl"
        note "$bench run $rep/$repeat: $side: $*"
        settle
        if "$@" >"$out.raw" 2>"$out.log"; then
            grep '^{' "$out.raw" >"$out" || true
        else
            note "WARNING: $side $bench run $rep failed (exit $?):"
            tail -n 5 "$out.log" >&2 || true
            failures=$((failures + 1))
        fi
    }
    local bench rep bench_args
    for bench in "${list[@]}"; do
        bench_args=()
        local i
        for ((i = 0; i < ${#args[@]}; i += 2)); do
            [[ ${args[i]} != --width || $bench == halo ]] || continue
            bench_args+=("${args[i]}" "${args[i + 1]}")
        done
        for ((rep = 1; rep <= repeat; rep++)); do
            darray_run fastmp "$bench" "$rep" "${launcher[@]}" "$fastmp_bin" "$bench" --np "$np" --pin "$pin" \
                "${bench_args[@]}" --json
            darray_run mpi "$bench" "$rep" mpirun "${mpirun_args[@]}" target/darray_mpi "$bench" \
                "${bench_args[@]}" --json
        done
    done

    local transport=$device
    [[ $device != hybrid ]] || transport="hybrid, $threads threads per process (mpi: shared memory)"
    python3 - "$results" "$np" "$repeat" "$transport" "$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')" \
        "${list[@]}" <<'PY'
import glob
import json
import os
import statistics
import sys

results, np_, repeat, transport, cpu = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]


def load(side, bench):
    """size -> key -> values over the runs; the widths and devices seen."""
    values, widths, devices = {}, set(), set()
    for path in sorted(glob.glob(os.path.join(results, side, f"{bench}.*.jsonl"))):
        for line in open(path):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if obj.get("bench") != bench or "size" not in obj:
                continue
            devices.add(str(obj.get("device", "?")))
            if "width" in obj:
                widths.add(str(obj["width"]))
            per = values.setdefault(int(obj["size"]), {})
            for key in ("avg_us", "oneshot_us"):
                if isinstance(obj.get(key), (int, float)):
                    per.setdefault(key, []).append(float(obj[key]))
    return values, widths, devices


def med(data, size, key):
    vals = data.get(size, {}).get(key)
    return statistics.median(vals) if vals else None


def cell(v):
    return "-" if v is None else f"{v:.2f}"


def ratio(a, b):
    return f"{a / b:.3f}" if a is not None and b else "-"


for i, bench in enumerate(sys.argv[6:]):
    ours, widths, fdev = load("fastmp", bench)
    mpi, mwidths, mdev = load("mpi", bench)
    if i:
        print()
    width = f"  width={'/'.join(sorted(widths | mwidths))}" if bench == "halo" else ""
    print(f"# darray {bench}  np={np_}  transport={transport}{width}  median of {repeat} run(s)  "
          f"[fastmp={'/'.join(sorted(fdev)) or 'n/a'}, mpi={'/'.join(sorted(mdev)) or 'n/a'}]  cpu: {cpu or '?'}")
    print("# times in us per operation, lower is better; exec = fastmp built schedule, 1shot = fastmp "
          "one-shot call, mpi = bench/darray_mpi.c")
    head = ["exec", "1shot", "mpi", "exec/mpi", "1shot/mpi", "1shot/exec"]
    print(f"{'size':<10}" + "".join(f"{h:>12}" for h in head))
    for size in sorted(set(ours) | set(mpi)):
        e, o, m = med(ours, size, "avg_us"), med(ours, size, "oneshot_us"), med(mpi, size, "avg_us")
        cells = [cell(e), cell(o), cell(m), ratio(e, m), ratio(o, m), ratio(o, e)]
        print(f"{size:<10}" + "".join(f"{c:>12}" for c in cells))
    if not ours and not mpi:
        print("# no results")
PY
    if ((failures > 0)); then
        note "$failures run(s) failed; see the warnings above"
        return 1
    fi
}

# Pause between runs so one side's teardown (mpirun's daemons take a moment to exit) never
# overlaps the other side's first measurements on a small machine.
settle() { sleep "${SETTLE_SECONDS:-1}"; }

if [[ ${1:-} == uoms ]]; then
    shift
    uoms_main "$@"
    exit $?
fi
if [[ ${1:-} == darray ]]; then
    shift
    darray_main "$@"
    exit $?
fi

benches=()
np=${NP:-2}
tcp=0
mpi_device=0
hybrid=0
hybrid_threads=""
compare_max=0
plot_dir=""
min_size=""
max_size=""
iterations=""
win=""
sync=""
collectives=(barrier bcast scatter scatterv gather gatherv allgather allgatherv alltoall alltoallv
    reduce allreduce reduce_scatter scan)
nonblocking=(ibarrier ibcast iscatter igather iallgather ialltoall ireduce iallreduce)
one_sided=(put_latency get_latency put_bw get_bw put_bibw acc_latency fop_latency cas_latency)
is_one_sided() {
    [[ " ${one_sided[*]} " == *" $1 "* ]]
}

while (($# > 0)); do
    case $1 in
        -h | --help)
            usage
            exit 0
            ;;
        --np | -np | -n)
            (($# >= 2)) || die "$1 needs a value"
            np=$2
            shift 2
            ;;
        --np=*)
            np=${1#*=}
            shift
            ;;
        --tcp)
            tcp=1
            shift
            ;;
        --mpi-device)
            mpi_device=1
            shift
            ;;
        --hybrid)
            hybrid=1
            shift
            ;;
        --threads-per-process)
            (($# >= 2)) || die "$1 needs a value"
            hybrid_threads=$2
            shift 2
            ;;
        --threads-per-process=*)
            hybrid_threads=${1#*=}
            shift
            ;;
        --max)
            compare_max=1
            shift
            ;;
        --plot)
            (($# >= 2)) || die "$1 needs a directory"
            plot_dir=$2
            shift 2
            ;;
        --plot=*)
            plot_dir=${1#*=}
            shift
            ;;
        --min-size)
            (($# >= 2)) || die "$1 needs a value"
            min_size=$2
            shift 2
            ;;
        --min-size=*)
            min_size=${1#*=}
            shift
            ;;
        --max-size)
            (($# >= 2)) || die "$1 needs a value"
            max_size=$2
            shift 2
            ;;
        --max-size=*)
            max_size=${1#*=}
            shift
            ;;
        --iterations)
            (($# >= 2)) || die "$1 needs a value"
            iterations=$2
            shift 2
            ;;
        --iterations=*)
            iterations=${1#*=}
            shift
            ;;
        collectives)
            benches+=("${collectives[@]}")
            shift
            ;;
        nbc)
            benches+=("${nonblocking[@]}")
            shift
            ;;
        rma)
            benches+=("${one_sided[@]}")
            shift
            ;;
        --win | --sync)
            (($# >= 2)) || die "$1 needs a value"
            if [[ $1 == --win ]]; then win=$2; else sync=$2; fi
            shift 2
            ;;
        --win=*)
            win=${1#*=}
            shift
            ;;
        --sync=*)
            sync=${1#*=}
            shift
            ;;
        -*)
            die "unknown option '$1' (see --help)"
            ;;
        *)
            benches+=("$1")
            shift
            ;;
    esac
done

((${#benches[@]} > 0)) || benches=(latency bw bibw)
# Each benchmark once, in the order first named: runs are stored per name, so a name given twice
# (alone and in a group) would overwrite its own results.
declare -A seen=()
unique=()
for bench in "${benches[@]}"; do
    [[ -n ${seen[$bench]:-} ]] || unique+=("$bench")
    seen[$bench]=1
done
benches=("${unique[@]}")
if ! is_uint "$np" || ((np < 1)); then
    die "--np must be a positive integer, got '$np'"
fi
[[ -z $min_size ]] || is_uint "$min_size" || die "--min-size must be a byte count, got '$min_size'"
[[ -z $max_size ]] || is_uint "$max_size" || die "--max-size must be a byte count, got '$max_size'"
if [[ -n $iterations ]] && { ! is_uint "$iterations" || ((iterations < 1)); }; then
    die "--iterations must be a positive integer, got '$iterations'"
fi
if [[ -n $hybrid_threads ]]; then
    ((hybrid)) || die "--threads-per-process applies to the hybrid column: add --hybrid"
    is_uint "$hybrid_threads" && ((hybrid_threads >= 1)) ||
        die "--threads-per-process must be a positive integer, got '$hybrid_threads'"
fi
hybrid_threads=${hybrid_threads:-2}
repeat=${REPEAT:-3}
if ! is_uint "$repeat" || ((repeat < 1)); then
    die "REPEAT must be a positive integer, got '$repeat'"
fi
command -v python3 >/dev/null 2>&1 || die "python3 is needed to summarise the results"

size_args=()
[[ -z $min_size ]] || size_args+=(--min-size "$min_size")
[[ -z $max_size ]] || size_args+=(--max-size "$max_size")
[[ -z $iterations ]] || size_args+=(--iterations "$iterations")
any_one_sided=0
for bench in "${benches[@]}"; do
    ! is_one_sided "$bench" || any_one_sided=1
done
if [[ -n $win || -n $sync ]] && ((any_one_sided == 0)); then
    die "--win and --sync apply to the one-sided benchmarks only"
fi
# Arguments of benchmark $1 for both sides (into the array bench_args).
bench_arguments() {
    local bench=$1
    bench_args=()
    if ! is_one_sided "$bench"; then
        bench_args=("${size_args[@]}")
        return
    fi
    [[ -z $win ]] || bench_args+=(--win "$win")
    [[ -z $sync ]] || bench_args+=(--sync "$sync")
    [[ -z $iterations ]] || bench_args+=(--iterations "$iterations")
    if [[ $bench != fop_latency && $bench != cas_latency ]]; then
        [[ -z $min_size ]] || bench_args+=(--min-size "$min_size")
        [[ -z $max_size ]] || bench_args+=(--max-size "$max_size")
    fi
}
cores=$(nproc 2>/dev/null || echo 1)
oversubscribed=0
((np <= cores)) || oversubscribed=1

# ---------------------------------------------------------------- fastmp side
fastmp_mode=none # shm | tcp | mpi | none
fastmp_bin=""
fastmprun_bin=${FASTMPRUN_BIN:-target/release/fastmprun}
((tcp == 0 || mpi_device == 0)) || die "--tcp and --mpi-device exclude each other"
if ((mpi_device)); then
    command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 ||
        die "--mpi-device runs fastmp over the system MPI: mpicc and mpirun are needed (openmpi-bin libopenmpi-dev)"
    fastmp_mode=mpi
elif ((tcp)); then
    fastmp_mode=tcp
else
    fastmp_mode=shm
fi
if [[ $fastmp_mode == tcp ]] || ((hybrid)); then
    if [[ -z ${FASTMPRUN_BIN:-} ]]; then
        note "cargo build --release -p fastmprun"
        cargo build --release -p fastmprun >&2
    fi
    [[ -x $fastmprun_bin ]] || die "fastmprun launcher '$fastmprun_bin' is missing or not executable"
fi

if [[ $fastmp_mode != none ]]; then
    if [[ -n ${FASTMP_BENCH_BIN:-} ]]; then
        fastmp_bin=$FASTMP_BENCH_BIN
        note "using FASTMP_BENCH_BIN=$fastmp_bin (skipping cargo build)"
    else
        features=()
        [[ $fastmp_mode != mpi ]] || features=(--features mpi)
        note "cargo build --release -p fastmp-bench ${features[*]}"
        cargo build --release -p fastmp-bench "${features[@]}" >&2
        fastmp_bin=target/release/fastmp-bench
    fi
    [[ -x $fastmp_bin ]] || die "fastmp benchmark binary '$fastmp_bin' is missing or not executable"
fi

fastmp_extra=()
[[ -z ${FASTMP_BENCH_ARGS:-} ]] || read -r -a fastmp_extra <<<"$FASTMP_BENCH_ARGS"
fastmp_pin=compact
if [[ $fastmp_mode == mpi ]]; then
    fastmp_pin=none # mpirun binds the ranks
elif ((oversubscribed)); then
    note "np=$np > $cores cores: fastmp runs unpinned (--pin none)"
    fastmp_pin=none
fi

# Command line for one fastmp run of benchmark $1 (into the array fastmp_cmd); $2 = hybrid: the
# run of the hybrid column.
fastmp_command() {
    local bench=$1
    bench_arguments "$bench"
    local args=("$bench" --np "$np" --pin "$fastmp_pin" "${bench_args[@]}" --json "${fastmp_extra[@]}")
    if [[ ${2:-} == hybrid ]]; then
        fastmp_cmd=("$fastmprun_bin" -np "$np" --device hybrid --threads-per-process "$hybrid_threads"
            "$fastmp_bin" "${args[@]}")
    elif [[ $fastmp_mode == tcp ]]; then
        fastmp_cmd=("$fastmprun_bin" -np "$np" --device tcp "$fastmp_bin" "${args[@]}")
    elif [[ $fastmp_mode == mpi ]]; then
        fastmp_cmd=(mpirun "${mpirun_args[@]}" -x FASTMP_DEVICE=mpi "$fastmp_bin" "${args[@]}")
    else
        fastmp_cmd=("$fastmp_bin" "${args[@]}")
    fi
}

# ------------------------------------------------------------------- MPI side
have_mpi=0
mpi_bin=target/mpi_bench
mpirun_args=()
if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then
    have_mpi=1
    mkdir -p target
    note "mpicc -O2 -o $mpi_bin bench/mpi_bench.c"
    mpicc -O2 -o "$mpi_bin" bench/mpi_bench.c >&2
    if ((any_one_sided)); then
        note "mpicc -O2 -o target/mpi_rma bench/mpi_rma.c"
        mpicc -O2 -o target/mpi_rma bench/mpi_rma.c >&2
    fi
    if mpirun --version 2>&1 | grep -q 'Open MPI'; then
        mpirun_args=(--allow-run-as-root -np "$np")
        if ((oversubscribed)); then
            note "np=$np > $cores cores: MPI runs oversubscribed and unbound (--bind-to none)"
            mpirun_args+=(--oversubscribe --bind-to none)
        else
            mpirun_args+=(--bind-to core)
        fi
        ((tcp == 0)) || mpirun_args+=(--mca btl "tcp,self")
    else
        note "mpirun is not Open MPI: using plain '-np $np -bind-to core' (and --tcp is ignored for MPI)"
        mpirun_args=(-np "$np" -bind-to core)
    fi
    if [[ -n ${MPIRUN_ARGS:-} ]]; then
        read -r -a extra <<<"$MPIRUN_ARGS"
        mpirun_args+=("${extra[@]}")
    fi
else
    note "mpicc/mpirun not found: showing fastmp's numbers alone (install openmpi-bin libopenmpi-dev to compare)"
fi

[[ $fastmp_mode != none || $have_mpi == 1 ]] || die "nothing to run: neither fastmp ($fastmp_mode) nor MPI is available"

# ------------------------------------------------------------------- the runs
results=$(mktemp -d "${TMPDIR:-/tmp}/fastmp-compare.XXXXXX")
trap 'rm -rf -- "$results"' EXIT
mkdir -p "$results/fastmp" "$results/hybrid" "$results/mpi"
failures=0

# run_one SIDE BENCH REP CMD... : run CMD, keep its JSON lines in
# $results/SIDE/BENCH.REP.jsonl; a failure is reported and counted, not fatal.
run_one() {
    local side=$1 bench=$2 rep=$3
    shift 3
    local out="$results/$side/$bench.$rep.jsonl" log="$results/$side/$bench.$rep.log"
    note "$bench run $rep/$repeat: $side: $*"
    if "$@" >"$out.raw" 2>"$log"; then
        grep '^{' "$out.raw" >"$out" || true
        [[ -s $out ]] || {
            note "WARNING: $side $bench run $rep printed no JSON lines"
            failures=$((failures + 1))
        }
    else
        local rc=$?
        if [[ $side == mpi && $bench == cas_latency ]]; then
            note "MPI cas_latency run $rep failed (exit $rc): shown as crashed, not counted"
            touch "$results/$side/$bench.crashed"
            return
        fi
        note "WARNING: $side $bench run $rep failed (exit $rc); its output starts with:"
        head -n 20 "$log" >&2 || true
        tail -n 3 "$out.raw" >&2 || true
        failures=$((failures + 1))
    fi
}

for bench in "${benches[@]}"; do
    for ((rep = 1; rep <= repeat; rep++)); do
        if [[ $fastmp_mode != none ]]; then
            fastmp_command "$bench"
            settle
            run_one fastmp "$bench" "$rep" "${fastmp_cmd[@]}"
        fi
        if ((hybrid)); then
            fastmp_command "$bench" hybrid
            settle
            run_one hybrid "$bench" "$rep" "${fastmp_cmd[@]}"
        fi
        if ((have_mpi)); then
            settle
            bench_arguments "$bench"
            if is_one_sided "$bench"; then
                osc=()
                ((tcp == 0)) || osc=(--mca osc pt2pt)
                run_one mpi "$bench" "$rep" mpirun "${mpirun_args[@]}" "${osc[@]}" target/mpi_rma "$bench" \
                    "${bench_args[@]}" --json
            else
                run_one mpi "$bench" "$rep" mpirun "${mpirun_args[@]}" "$mpi_bin" "$bench" "${bench_args[@]}" --json
            fi
        fi
    done
done

# ------------------------------------------------------------------ the table
transport=shm
((tcp == 0)) || transport=tcp
((mpi_device == 0)) || transport="mpi (fastmp's mpi device and the C benchmark on the same MPI)"
((hybrid == 0)) || transport+=", hybrid ${hybrid_threads} threads per process"
[[ -z $plot_dir ]] || mkdir -p "$plot_dir"
python3 - "$results" "$np" "$repeat" "$transport" "$hybrid" "$compare_max" \
    "$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p')" "$plot_dir" "${benches[@]}" <<'PY'
import glob
import json
import os
import statistics
import sys

results, np_, repeat, transport = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
hybrid, compare_max, cpu = sys.argv[5] == "1", sys.argv[6] == "1", sys.argv[7]
plot_dir = sys.argv[8]
benches = sys.argv[9:]
# The columns, mpi last; the ratios are each fastmp column over mpi (and hybrid over fastmp).
SIDES = ("fastmp", "hybrid", "mpi") if hybrid else ("fastmp", "mpi")
META = {"bench", "device", "np", "size"}
# Preferred metric keys, in order; True means lower is better.
KNOWN = [("max_us", True)] if compare_max else []
KNOWN += [("avg_us", True), ("mb_s", False)]
if cpu:
    print(f"# cpu: {cpu}")


def pick_metric(obj):
    for key, lower in KNOWN:
        if isinstance(obj.get(key), (int, float)):
            return key, lower
    for key, val in obj.items():
        if key not in META and isinstance(val, (int, float)) and not isinstance(val, bool):
            return key, key.endswith("_us")
    return None, None


def rows(side, bench):
    """Every JSON object the runs of `bench` on `side` printed."""
    for path in sorted(glob.glob(os.path.join(results, side, f"{bench}.*.jsonl"))):
        with open(path) as f:
            for line in f:
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    yield obj


def load(side, bench):
    """size -> list of metric values over all runs; plus metric info and, per size, the
    algorithms the runs report (collectives)."""
    values, metric, lower, devices, algorithms = {}, None, None, set(), {}
    modes = set()
    for obj in rows(side, bench):
        if "size" not in obj:
            continue
        key, low = pick_metric(obj)
        if key is None:
            continue
        if metric is None:
            metric, lower = key, low
        if key != metric:
            continue
        devices.add(str(obj.get("device", "?")))
        if "sync" in obj:
            modes.add(f"win {obj.get('win', '?')}, sync {obj['sync']}")
        values.setdefault(int(obj["size"]), []).append(float(obj[metric]))
        if "algorithm" in obj:
            algorithms.setdefault(int(obj["size"]), set()).add(str(obj["algorithm"]))
    return values, metric, lower, devices, algorithms, modes


def crashed(side, bench):
    return os.path.exists(os.path.join(results, side, f"{bench}.crashed"))


def fmt(v, lower):
    if v is None:
        return "-"
    return f"{v:.3f}" if lower else f"{v:.2f}"


NBC_KEYS = ("overall_us", "compute_us", "pure_comm_us", "overlap_pct", "blocking_us")


def load_nbc(side, bench):
    """Nonblocking rows: size (None for ibarrier) -> key -> values over all runs; devices."""
    values, devices = {}, set()
    for obj in rows(side, bench):
        if not isinstance(obj.get("overlap_pct"), (int, float)):
            continue
        devices.add(str(obj.get("device", "?")))
        per_key = values.setdefault(obj.get("size"), {})
        for key in NBC_KEYS:
            if isinstance(obj.get(key), (int, float)):
                per_key.setdefault(key, []).append(float(obj[key]))
    return values, devices


def save_points(bench, metric, lower, medians):
    """--plot: the medians of `bench` (side -> size -> value) as DIR/BENCH.jsonl, one point
    per line, for `fastmp-bench plot`."""
    if not plot_dir:
        return
    with open(os.path.join(plot_dir, f"{bench}.jsonl"), "w") as f:
        for side, per_size in medians.items():
            for size, value in sorted(per_size.items()):
                if value is None or size is None:
                    continue
                f.write(json.dumps({"bench": bench, "series": side, "size": size, "value": value,
                                    "metric": metric, "lower_is_better": lower, "np": int(np_),
                                    "device": transport, "cpu": cpu}) + "\n")


def quotient(a, b):
    return f"{a / b:.3f}" if a is not None and b else "-"


def print_nbc(bench, data):
    """OSU's four columns of both sides (medians over the runs), the pure-communication
    ratio fastmp/mpi and fastmp's pure communication over its blocking latency."""
    devs = ", ".join(f"{s}={'/'.join(sorted(data[s][1])) or 'n/a'}" for s in SIDES)
    print(f"# {bench}  np={np_}  transport={transport}  median of {repeat} run(s)  [{devs}]")
    print("# times in us (lower is better), overlap in % (higher is better); f = fastmp, m = mpi;")
    print("# pure f/m = pure comm. fastmp/mpi; pure/blk = fastmp pure comm. / fastmp blocking latency")
    columns = ["overall f", "overall m", "compute f", "compute m", "pure f", "pure m", "pure f/m",
               "ovl% f", "ovl% m", "pure/blk"]
    if hybrid:
        print("# h = fastmp on the hybrid device; pure h/m = its pure comm. over mpi's")
        columns += ["overall h", "pure h", "pure h/m", "ovl% h"]
    print(f"{'size':<10}" + "".join(f"{c:>11}" for c in columns))
    short = False
    sizes = sorted(set().union(*(data[s][0] for s in SIDES)), key=lambda s: -1 if s is None else s)
    pure = {side: {} for side in SIDES}
    for size in sizes:
        med = {}
        for side in SIDES:
            per_key = data[side][0].get(size, {})
            for key in NBC_KEYS:
                vals = per_key.get(key)
                med[side, key] = statistics.median(vals) if vals else None
                if vals and len(vals) < repeat:
                    short = True
        for side in SIDES:
            pure[side][size] = med[side, "pure_comm_us"]
        cells = []
        for key in ("overall_us", "compute_us", "pure_comm_us"):
            cells += [fmt(med["fastmp", key], True), fmt(med["mpi", key], True)]
        cells.append(quotient(med["fastmp", "pure_comm_us"], med["mpi", "pure_comm_us"]))
        cells += [fmt(med["fastmp", "overlap_pct"], False), fmt(med["mpi", "overlap_pct"], False)]
        cells.append(quotient(med["fastmp", "pure_comm_us"], med["fastmp", "blocking_us"]))
        if hybrid:
            cells += [fmt(med["hybrid", "overall_us"], True), fmt(med["hybrid", "pure_comm_us"], True),
                      quotient(med["hybrid", "pure_comm_us"], med["mpi", "pure_comm_us"]),
                      fmt(med["hybrid", "overlap_pct"], False)]
        label = "-" if size is None else str(size)
        print(f"{label:<10}" + "".join(f"{c:>11}" for c in cells))
    if not sizes:
        print("# no results")
    if short:
        print(f"# note: some sizes have fewer than {repeat} samples (failed runs)")
    save_points(bench, "pure_comm_us", True, pure)


first = True
for bench in benches:
    nbc = {side: load_nbc(side, bench) for side in SIDES}
    if any(nbc[side][0] for side in SIDES):
        if not first:
            print()
        first = False
        print_nbc(bench, nbc)
        continue
    data = {side: load(side, bench) for side in SIDES}
    reporting = [side for side in SIDES if data[side][1]]
    metric = data[reporting[0]][1] if reporting else None
    lower = data[reporting[0]][2] if reporting else None
    if not first:
        print()
    first = False
    if metric is None:
        print(f"# {bench}: no results" + ("; mpi crashed" if crashed("mpi", bench) else ""))
        continue
    for side in reporting:
        if data[side][1] != metric:
            print(f"# {bench}: note: {reporting[0]} reports {metric}, {side} reports {data[side][1]}")
    better = "lower is better" if lower else "higher is better"
    devs = ", ".join(f"{s}={'/'.join(sorted(data[s][3])) or 'n/a'}" for s in SIDES)
    print(f"# {bench}  np={np_}  transport={transport}  median of {repeat} run(s)  [{devs}]")
    print(f"# {metric}: {better}; ratio = fastmp/mpi ({better})")
    modes = set().union(*(data[side][5] for side in SIDES))
    if modes:
        print(f"# one-sided: {'; '.join(sorted(modes))}")
    if crashed("mpi", bench):
        print("# mpi: crashed in at least one run (see the notes above the table)")
    algos = data["fastmp"][4]
    hybrid_algos = data["hybrid"][4] if hybrid else {}
    algo_head = f"  {'fastmp algorithm'}" if algos else ""
    if hybrid_algos:
        algo_head += "  hybrid algorithm"
    if hybrid:
        print("# hybrid = fastmp on the hybrid device; h/m = hybrid/mpi, h/f = hybrid/fastmp")
        print(f"{'size':<10}{'fastmp':>16}{'hybrid':>16}{'mpi':>16}{'ratio':>10}{'h/m':>10}{'h/f':>10}{algo_head}")
    else:
        print(f"{'size':<10}{'fastmp':>16}{'mpi':>16}{'ratio':>10}{algo_head}")
    sizes = sorted(set().union(*(data[side][0] for side in SIDES)))
    short = False
    medians = {side: {} for side in SIDES}
    for size in sizes:
        med = {}
        for side in SIDES:
            vals = data[side][0].get(size)
            med[side] = statistics.median(vals) if vals else None
            medians[side][size] = med[side]
            if vals and len(vals) < repeat:
                short = True
        f, m = med["fastmp"], med["mpi"]
        ratio = quotient(f, m)
        algo = f"  {'/'.join(sorted(algos.get(size, ()))) or '-'}" if algos else ""
        if hybrid_algos:
            algo += f"  {'/'.join(sorted(hybrid_algos.get(size, ()))) or '-'}"
        mpi_cell = "crashed" if m is None and crashed("mpi", bench) else fmt(m, lower)
        if hybrid:
            h = med["hybrid"]
            print(f"{size:<10}{fmt(f, lower):>16}{fmt(h, lower):>16}{mpi_cell:>16}{ratio:>10}"
                  f"{quotient(h, m):>10}{quotient(h, f):>10}{algo}")
        else:
            print(f"{size:<10}{fmt(f, lower):>16}{mpi_cell:>16}{ratio:>10}{algo}")
    if short:
        print(f"# note: some sizes have fewer than {repeat} samples (failed runs)")
    save_points(bench, metric, lower, medians)
PY

# ------------------------------------------------------------------ the plots
if [[ -n $plot_dir ]]; then
    plot_bin=$fastmp_bin
    if [[ -z $plot_bin ]]; then
        note "cargo build --release -p fastmp-bench (for the plots)"
        cargo build --release -p fastmp-bench >&2
        plot_bin=target/release/fastmp-bench
    fi
    for bench in "${benches[@]}"; do
        [[ -s $plot_dir/$bench.jsonl ]] || continue
        "$plot_bin" plot --input "$plot_dir/$bench.jsonl" --out "$plot_dir" || failures=$((failures + 1))
    done
fi

if ((failures > 0)); then
    note "$failures run(s) failed or printed nothing; see warnings above"
    exit 1
fi
