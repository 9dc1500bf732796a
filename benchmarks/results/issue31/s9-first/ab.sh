#!/bin/bash
# Alternated before/after of a first round trip (issue 31, s9-first): s8-first's cold_parts.py (copied here,
# its hook of NameService.want taking want's new argument, and stamping a carried lookup at the home)
# run on main (BASE) and wt/first12 (NEW), each under `aiopdbp launch -n N`, R rounds.
#   ab.sh OUT [ROUNDS] [SIZES]      e.g. ab.sh /tmp/first12-bench 3 "16 32"
set -u
OUT=$1; ROUNDS=${2:-3}; SIZES=${3:-"16 32"}
PY=${PY:-/work/main/.venv/bin/python}
BASE=${BASE:-/tmp/first12-base}; NEW=${NEW:-/work/wt/first12}
PROBE=$NEW/benchmarks/results/issue31/s9-first/cold_parts.py   # s8-first's, its want hook taking the carry
mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  for n in $SIZES; do
    for tree in base new; do
      [ $tree = base ] && T=$BASE || T=$NEW
      echo "round $r n=$n $tree $(date -u +%T) $(uptime | sed 's/.*load/load/')" | tee -a "$OUT/log.txt"
      PYTHONPATH=$T timeout 400 nice -n 10 "$PY" -m aiopdbp launch -n "$n" "$PY" "$PROBE" \
        "$OUT/r$r-$tree-n$n" --warm 10 --idle 1.5 >"$OUT/r$r-$tree-n$n.out" 2>&1 || echo "  rc $?" | tee -a "$OUT/log.txt"
    done
  done
done
