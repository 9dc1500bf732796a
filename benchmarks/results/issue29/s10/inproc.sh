#!/bin/bash
# usage: inproc.sh OUT ROUNDS -- ab_inprocess.py (numpy and torch batches alternated in one process,
# thread CPU per round trip) in the base tree and this branch, alternated, at 8 B and 64 KiB
OUT=$1; N=${2:-3}; PY=/work/main/.venv/bin/python; HERE=$(cd "$(dirname "$0")" && pwd)
BASE=${BASE:-/tmp/tensor12-base}; NEW=${NEW:-/work/wt/tensor12}
mkdir -p "$OUT"; cd /tmp
for i in $(seq "$N"); do
  if [ $((i % 2)) = 1 ]; then order="base new"; else order="new base"; fi
  for s in 8 65536; do for v in $order; do
    if [ "$v" = base ]; then T=$BASE; else T=$NEW; fi
    { echo "== $v $s round $i $(date -u +%T) $(uptime)"
      PYTHONPATH=$T timeout 600 $PY "$HERE/ab_inprocess.py" $s ${NB:-30} 2>&1
      echo "== end $(date -u +%T) $(uptime)"; } > "$OUT/s${s}_r${i}_$v.txt"
  done; done
done
echo done > "$OUT/done"
