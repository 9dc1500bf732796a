#!/bin/bash
# A/B alternated, eighth session (wt/recv10): base = 6b957f4 (main at the session's
# start) in a worktree with its extensions built in place, new = this worktree
# (installed editable in its .venv). Each round runs, per variant: bench pingpong
# --sizes 8,4K --repeat 3 --hops, the in-process receive half (rx_half.py here,
# bytes and numpy payloads) and thread CPU per in-process round trip
# (core-arrivals/cpu_pp.py), with `uptime` after each.
# Set-up: git worktree add /tmp/recv10-base 6b957f4 && cd /tmp/recv10-base &&
#   /work/wt/recv10/.venv/bin/python setup.py build_ext --inplace
# MICRO_ONLY=1: the in-process figures only. Usage: ab.sh OUTDIR [ROUNDS]; summarise
# with ../core-sender/parse_ab.py and ../core-s7/summ.py.
OUT=${1:?usage: ab.sh OUTDIR [ROUNDS]}; ROUNDS=${2:-3}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd); NEW=$(cd "$HERE/../../.." && pwd); BASE=${BASE:-/tmp/recv10-base}
PY=$NEW/.venv/bin/python
cd /tmp
py() { local v=$1; shift
  case $v in
    base) PYTHONPATH=$BASE nice -n 10 "$PY" "$@" ;;
    new) PYTHONPATH=$NEW nice -n 10 "$PY" "$@" ;;
    pure) AIOPDBP_NO_EXTENSIONS=1 PYTHONPATH=$NEW nice -n 10 "$PY" "$@" ;;
    basepure) AIOPDBP_NO_EXTENSIONS=1 PYTHONPATH=$BASE nice -n 10 "$PY" "$@" ;;
  esac; }
run() { local v=$1; shift; local f=$1; shift; py $v "$@" >> "$OUT/$f" 2>&1; }
uptime > "$OUT/load.txt"
for i in $(seq "$ROUNDS"); do
  for v in ${VARIANTS:-base new}; do
    for f in hops micro; do echo "== $v run $i" >> "$OUT/$f-$v.txt"; done
    if [ -z "$MICRO_ONLY" ]; then
      run $v hops-$v.txt -m aiopdbp bench pingpong --sizes 8,4K --repeat 3 --hops
    fi
    echo "bytes $(R=5 py $v "$HERE/rx_half.py" 2>&1 | tail -1)" >> "$OUT/micro-$v.txt"
    echo "numpy $(NP=1 R=5 py $v "$HERE/rx_half.py" 2>&1 | tail -1)" >> "$OUT/micro-$v.txt"
    echo "cpu_pp $(N=5000 py $v "$HERE/../core-arrivals/cpu_pp.py" 2>&1)" >> "$OUT/micro-$v.txt"
    echo "$v $i $(uptime)" >> "$OUT/load.txt"
  done
done
