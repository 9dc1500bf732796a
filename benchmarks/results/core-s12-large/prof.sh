#!/bin/bash
# Python calls per 64 KiB round trip and the hop stamps, base then new, with this folder's large_hops.py
#   bash prof.sh OUTDIR
OUT=${1:?}; PY=/work/main/.venv/bin/python; H=/work/wt/large14/benchmarks/results/core-s12-large/large_hops.py
mkdir -p $OUT
for v in base new; do
  if [ $v = base ]; then P=/tmp/large14-base; else P=/work/wt/large14; fi
  (echo "== $v $(date -u +%H:%M:%S) $(uptime)"; cd $P; PYTHONPATH=$P timeout 300 $PY -m aiopdbp launch -n 2 $H --sizes 64K --iters 400 --profile --top 70) > $OUT/profile-64K-$v.txt 2>&1
done
