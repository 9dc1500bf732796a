#!/bin/bash
# usage: ab.sh OUT ROUNDS -- `bench pingpong --sizes 8,64K --hops` of the base tree and this branch,
# numpy and torch payloads (IMPLS, ITERS: --impls, --iters; aiopdbp, 300 by default: a loaded machine), alternated (the order rotates each round); uptime before and after each run.
OUT=$1; N=${2:-3}; PY=/work/main/.venv/bin/python
BASE=${BASE:-/tmp/tensor12-base}; NEW=${NEW:-/work/wt/tensor12}
mkdir -p "$OUT"; cd /tmp
for i in $(seq "$N"); do
  if [ $((i % 2)) = 1 ]; then order="base:numpy new:torch base:torch new:numpy"; else order="new:numpy base:torch new:torch base:numpy"; fi
  for vp in $order; do
    v=${vp%%:*}; p=${vp##*:}; if [ "$v" = base ]; then T=$BASE; else T=$NEW; fi
    f=$OUT/r${i}_${v}_$p.txt
    { echo "== $v $p round $i $(date -u +%T) $(uptime)"
      PYTHONPATH=$T timeout 600 $PY -m aiopdbp bench pingpong --sizes ${SIZES:-8,64K} --impls ${IMPLS:-aiopdbp} --iters ${ITERS:-300} --repeat 3 --hops --payload $p 2>&1
      echo "== end $(date -u +%T) $(uptime)"; } > "$f"
  done
done
echo done > "$OUT/done"
