#!/usr/bin/env bash
# Run the NAS Parallel Benchmarks kernels of fastmp-npb beside the NPB 3.4.1 MPI reference
# (../shared/reference/npb3.4-mpi, built here with gfortran and the system Open MPI), alternating
# the two, and print each side's median Mop/s and the ratio fastmp/reference.
#
# usage: bench/npb.sh [--kernels "ep is cg mg ft"] [--classes "W A"] [--np "1 2 4"] [--tcp]
#                     [--hybrid T | --mpi-device]
#
#   --kernels K   kernels to run (default: ep is cg mg ft)
#   --classes C   NPB classes (default: W A)
#   --np N        rank counts (default: 1 2 4); more ranks than cores run unpinned on both
#                 sides (mpirun --oversubscribe --bind-to none, fastmp --pin none)
#   --tcp         compare over TCP: the reference runs with `mpirun --mca btl tcp,self`, fastmp
#                 as processes under `fastmprun --device tcp`; otherwise shared memory (Open MPI's
#                 vader BTL beside fastmp's thread ranks on the shm device)
#   --hybrid T    fastmp as hybrid processes of T thread ranks each (`fastmprun --device hybrid
#                 --threads-per-process T`: shm inside a process, tcp between); the reference as
#                 before (vader, or tcp,self with --tcp)
#   --mpi-device  fastmp on its mpi device under the same mpirun and MPI as the reference
#                 (`mpirun -x FASTMP_DEVICE=mpi`, fastmp-npb built with `--features mpi`); with
#                 --tcp both run over tcp,self
#
# environment:
#   REPEAT          runs per side and configuration, alternating (default 3)
#   SETTLE_SECONDS  pause before each run (default 1)
#   NPB_REF_SRC     reference sources (default ../shared/reference/npb3.4-mpi)
#   NPB_REF_DIR     where the reference is built (default target/npb-ref); binaries that are
#                   already there are reused
#
# Needs: apt-get install -y openmpi-bin libopenmpi-dev gfortran python3
# A run that does not verify shows "FAILED" in place of its Mop/s and makes the script exit 1.
set -euo pipefail

cd "$(dirname "$0")/.."

die() {
    echo "npb.sh: $*" >&2
    exit 2
}

kernels="ep is cg mg ft"
classes="W A"
nps="1 2 4"
tcp=0
hybrid=0
mpi_device=0
while [ $# -gt 0 ]; do
    case "$1" in
        --kernels) kernels="${2:?--kernels needs a list}"; shift 2 ;;
        --classes) classes="${2:?--classes needs a list}"; shift 2 ;;
        --np) nps="${2:?--np needs a list}"; shift 2 ;;
        --tcp) tcp=1; shift ;;
        --hybrid) hybrid="${2:?--hybrid needs the threads per process}"; shift 2 ;;
        --mpi-device) mpi_device=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p;}' "$0"; exit 0 ;;
        *) die "unknown argument $1 (see --help)" ;;
    esac
done
[ "$hybrid" = 0 ] || [ "$mpi_device" = 0 ] || die "--hybrid and --mpi-device exclude each other"
repeat="${REPEAT:-3}"
settle="${SETTLE_SECONDS:-1}"
ref_src="${NPB_REF_SRC:-../shared/reference/npb3.4-mpi}"
ref_dir="${NPB_REF_DIR:-target/npb-ref}"

for tool in mpif90 mpicc mpirun python3; do
    command -v "$tool" >/dev/null 2>&1 ||
        die "$tool not found: apt-get install -y openmpi-bin libopenmpi-dev gfortran python3"
done
[ -d "$ref_src" ] || die "no NPB reference sources at $ref_src (set NPB_REF_SRC)"

# The reference, built once per kernel and class in a scratch copy (its README's recipe).
if [ ! -f "$ref_dir/config/make.def" ]; then
    mkdir -p "$ref_dir"
    cp -r "$ref_src"/. "$ref_dir"/
    sed -e 's/^FFLAGS\s*=.*/FFLAGS  = -O3 -fallow-argument-mismatch/' \
        -e 's/^CFLAGS\s*=.*/CFLAGS  = -O3/' "$ref_dir/config/make.def.template" >"$ref_dir/config/make.def"
fi
mkdir -p "$ref_dir/bin"
for k in $kernels; do
    for c in $classes; do
        if [ ! -x "$ref_dir/bin/$k.$c.x" ]; then
            echo "building the reference $k class $c" >&2
            make -C "$ref_dir" "$k" CLASS="$c" >"$ref_dir/build-$k.$c.log" 2>&1 ||
                die "building the reference $k.$c failed: see $ref_dir/build-$k.$c.log"
        fi
    done
done

if [ "$mpi_device" = 1 ]; then
    cargo build --release -q -p fastmp-npb --features mpi
else
    cargo build --release -q -p fastmp-npb
fi
npb=target/release/fastmp-npb
if [ "$tcp" = 1 ] || [ "$hybrid" != 0 ]; then
    cargo build --release -q -p fastmprun
fi
cores=$(nproc)

results=$(mktemp)
trap 'rm -f "$results"' EXIT

# mpirun with np processes, bound to cores unless oversubscribed, over tcp,self with --tcp;
# the rest of the arguments follow (the reference, and fastmp on its mpi device, alike).
mpirun_np() {
    local np=$1 bind=(--bind-to core) btl=()
    shift
    [ "$np" -gt "$cores" ] && bind=(--oversubscribe --bind-to none)
    [ "$tcp" = 1 ] && btl=(--mca btl tcp,self)
    mpirun --allow-run-as-root -np "$np" "${bind[@]}" "${btl[@]}" "$@"
}

# One run of each side; appends "side kernel class np mops|FAILED" to $results.
run_fastmp() {
    local k=$1 c=$2 np=$3 pin=compact out
    [ "$np" -gt "$cores" ] && pin=none
    if [ "$mpi_device" = 1 ]; then
        out=$(mpirun_np "$np" -x FASTMP_DEVICE=mpi \
            "$npb" "$k" --class "$c" --np "$np" --json 2>&1) || true
    elif [ "$hybrid" != 0 ]; then
        out=$(target/release/fastmprun -np "$np" --device hybrid --threads-per-process "$hybrid" \
            "$npb" "$k" --class "$c" --pin "$pin" --json 2>&1) || true
    elif [ "$tcp" = 1 ]; then
        out=$(target/release/fastmprun -np "$np" --device tcp "$npb" "$k" --class "$c" --pin "$pin" --json 2>&1) || true
    else
        out=$("$npb" "$k" --class "$c" --np "$np" --pin "$pin" --json 2>&1) || true
    fi
    python3 - "$k" "$c" "$np" "$out" >>"$results" <<'PY'
import json, sys
k, c, np, out = sys.argv[1:5]
mops = "FAILED"
for line in out.splitlines():
    if line.startswith("{"):
        r = json.loads(line)
        if r.get("verified") and r.get("mops") is not None:
            mops = r["mops"]
print("fastmp", k, c, np, mops)
PY
}

run_reference() {
    local k=$1 c=$2 np=$3 out
    out=$(mpirun_np "$np" "$ref_dir/bin/$k.$c.x" 2>&1) || true
    python3 - "$k" "$c" "$np" "$out" >>"$results" <<'PY'
import re, sys
k, c, np, out = sys.argv[1:5]
m = re.search(r"Mop/s total\s*=\s*([0-9.eE+-]+)", out)
ok = re.search(r"Verification\s*=\s*SUCCESSFUL", out)
print("reference", k, c, np, m.group(1) if (m and ok) else "FAILED")
PY
}

for k in $kernels; do
    for c in $classes; do
        for np in $nps; do
            for _ in $(seq "$repeat"); do
                sleep "$settle"
                run_fastmp "$k" "$c" "$np"
                sleep "$settle"
                run_reference "$k" "$c" "$np"
            done
            echo "done: $k class $c np $np" >&2
        done
    done
done

reference_btl=$([ "$tcp" = 1 ] && echo "--mca btl tcp,self" || echo "vader")
if [ "$mpi_device" = 1 ]; then
    transport="fastmp's mpi device over the same Open MPI ($reference_btl) as the reference"
elif [ "$hybrid" != 0 ]; then
    transport="hybrid ($hybrid thread ranks per process, tcp between) / Open MPI processes ($reference_btl)"
elif [ "$tcp" = 1 ]; then
    transport="tcp (fastmprun --device tcp / --mca btl tcp,self)"
else
    transport="shared memory (shm threads / Open MPI vader)"
fi
echo "NPB kernels, $transport, medians of $repeat alternating runs; CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $cores cores"
python3 - "$results" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    side, k, c, np, mops = line.split()
    rows.setdefault((k, c, int(np)), {"fastmp": [], "reference": []})[side].append(mops)
failed = False
print("| kernel | class | np | fastmp Mop/s | reference Mop/s | fastmp/reference |")
print("|---|---|---:|---:|---:|---:|")
for (k, c, np), sides in rows.items():
    med = {}
    for side, vals in sides.items():
        if not vals or "FAILED" in vals:
            med[side] = None
            failed = True
        else:
            med[side] = statistics.median(float(v) for v in vals)
    show = lambda v: "FAILED" if v is None else f"{v:.2f}"
    ratio = f"{med['fastmp'] / med['reference']:.2f}" if None not in med.values() else "-"
    print(f"| {k.upper()} | {c} | {np} | {show(med['fastmp'])} | {show(med['reference'])} | {ratio} |")
sys.exit(1 if failed else 0)
PY
