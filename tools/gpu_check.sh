#!/usr/bin/env bash
# One command for a GPU machine: what a first run of aiopdbp's GPU path must learn.
#
#   bash tools/gpu_check.sh [OUTDIR]          # default OUTDIR: $OUT
#   AIOPDBP_DEVICE=sim bash tools/gpu_check.sh OUTDIR   # the same steps, simulated (< 60 s)
#
# Steps (each in its own process, hard-killed at its limit; the whole run is
# bounded by GPU_CHECK_BUDGET seconds, default 230): info (device, driver,
# CUDA, CuPy, NVRTC), bandwidth (pinned copies per chunk size, 256 MiB),
# blocking (which calls block behind a running kernel), tests (the device
# test files), bench (benchmarks/gpu_stream.py at 2 ranks on one GPU).
# OUTDIR/gpu_check.json is rewritten after every step, so a killed run still
# returns what it learned; each step's output is in OUTDIR/<step>.log.
#
# It needs Python with numpy (and, on a GPU, CuPy); aiopdbp runs from this
# checkout in its pure-Python form.  Pure-Python wheels (pytest, pluggy,
# iniconfig, packaging, pytest-asyncio, pytest-timeout, hypothesis, ...) and
# the mpich wheel may travel as files in GPU_CHECK_WHEELS (default:
# shared/wheels or wheels/ of the checkout): they are used from there.
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
OUTDIR=${1:-${OUT:-}}
if [ -z "$OUTDIR" ]; then
    echo "usage: tools/gpu_check.sh OUTDIR (or set OUT)" >&2
    exit 2
fi
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
MODE=cupy
[ "${AIOPDBP_DEVICE:-}" = sim ] && MODE=sim
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET:-230}
START=$(date +%s)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cd "$HERE"

export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"
export AIOPDBP_NO_EXTENSIONS=1  # an extension built for another Python does not load there
export PYTHONDONTWRITEBYTECODE=1
NOTES=""
note() { NOTES="$NOTES$1; "; echo "gpu_check: $1" >&2; }

# wheels carried as files: pure-Python ones are importable from the .whl itself
WHEELS=${GPU_CHECK_WHEELS:-}
for d in "$HERE/shared/wheels" "$HERE/wheels"; do
    [ -z "$WHEELS" ] && [ -d "$d" ] && WHEELS=$d
done
if [ -n "$WHEELS" ]; then
    for w in "$WHEELS"/*.whl; do
        [ -e "$w" ] || continue
        case $(basename "$w") in
            mpich-*) ;;
            *-none-any.whl) PYTHONPATH="$PYTHONPATH:$w" ;;
        esac
    done
fi

# mpiexec: AIOPDBP_MPIEXEC, the system's, a carried mpich wheel, or aiopdbp's search
MPIEXEC=${AIOPDBP_MPIEXEC:-}
[ -z "$MPIEXEC" ] && MPIEXEC=$(command -v mpiexec || true)
if [ -z "$MPIEXEC" ] && [ -n "$WHEELS" ]; then
    for w in "$WHEELS"/mpich-*.whl; do
        [ -e "$w" ] || continue
        "$PY" -m zipfile -e "$w" "$TMP/mpich" >/dev/null 2>&1 || continue
        bin=$(find "$TMP/mpich" -type f -name mpiexec.hydra -path '*bin*' | head -n 1)
        if [ -n "$bin" ]; then
            chmod +x "$(dirname "$bin")"/* 2>/dev/null
            MPIEXEC=$(dirname "$bin")/mpiexec
            lib=$(find "$TMP/mpich" -name 'libmpi.so*' | head -n 1)
            [ -n "$lib" ] && export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            export PYTHONPATH="$PYTHONPATH:$TMP/mpich"
        fi
    done
fi
[ -z "$MPIEXEC" ] && MPIEXEC=$("$PY" -c 'from aiopdbp.launch.launcher import find_mpiexec; print(find_mpiexec())' 2>/dev/null || true)
[ -z "$MPIEXEC" ] && note "no mpiexec (no system MPI, no mpich wheel in GPU_CHECK_WHEELS): the bench step is skipped"
"$PY" -c 'import pytest, pytest_asyncio, pytest_timeout' 2>/dev/null || \
    note "pytest, pytest-asyncio or pytest-timeout is not importable (carry their wheels in GPU_CHECK_WHEELS): the tests step is skipped"

export PYTHONPATH
record() {  # step rc seconds limit [note]
    "$PY" tools/gpu_check.py record "$OUTDIR" --step "$1" --rc "$2" --seconds "$3" --limit "$4" --note "${5:-}" \
        || echo "gpu_check: could not record step $1" >&2
}
step() {  # name max_seconds command...
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET - ($(date +%s) - START)))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 5 ]; then
        record "$name" -1 0 "$limit" "no time left in the ${BUDGET}s budget"
        return
    fi
    local t0 rc
    t0=$(date +%s)
    timeout -k 5 "$limit" "$@" >"$OUTDIR/$name.log" 2>&1
    rc=$?
    record "$name" "$rc" "$(($(date +%s) - t0))" "$limit"
    echo "gpu_check: $name rc=$rc" >&2
}

record setup 0 0 0 "mode $MODE; mpiexec ${MPIEXEC:-none}; python $("$PY" -V 2>&1); $NOTES"
if [ "$MODE" = sim ]; then
    SIZE=$((16 << 20))
    TESTS=(tests/test_device_defects.py -k sim)
    BENCH=(--device sim --size 8M --chunks 256K,1M --inflight 2,4 --repeat 1)
    L=(15 15 15 40 75)  # (the bench: ~5 s alone, 20-60 s at load 15-30 on 2 cores)
else
    SIZE=$((256 << 20))
    TESTS=(tests/test_device_defects.py tests/test_device_cupy.py tests/test_devicepath_cupy.py -m "gpu or not gpu")
    BENCH=(--device cupy --size 256M --chunks 1M,4M,16M --inflight 2,4 --repeat 3)
    L=(20 35 40 80 55)
fi
step info "${L[0]}" "$PY" tools/gpu_check.py info "$OUTDIR" --mode "$MODE"
step bandwidth "${L[1]}" "$PY" tools/gpu_check.py bandwidth "$OUTDIR" --mode "$MODE" --size "$SIZE"
step blocking "${L[2]}" "$PY" tools/gpu_check.py blocking "$OUTDIR" --mode "$MODE"
if "$PY" -c 'import pytest, pytest_asyncio, pytest_timeout' 2>/dev/null; then
    step tests "${L[3]}" "$PY" -m pytest -q -p no:cacheprovider -o addopts="" --timeout 60 "${TESTS[@]}"
else
    record tests -1 0 0 "pytest is not importable"
fi
if [ -n "$MPIEXEC" ]; then
    step bench "${L[4]}" "$MPIEXEC" -n 2 "$PY" benchmarks/gpu_stream.py "${BENCH[@]}" --json "$OUTDIR/bench.json"
else
    record bench -1 0 0 "no mpiexec"
fi
echo "gpu_check: $OUTDIR/gpu_check.json ($(($(date +%s) - START)) s)"
"$PY" -c 'import json, sys; d = json.load(open(sys.argv[1])); bad = [k for k, v in d["steps"].items() if v["status"] not in ("ok",)]; print("gpu_check: not ok:", bad or "none"); sys.exit(1 if bad else 0)' "$OUTDIR/gpu_check.json"
