#!/bin/bash
# large_hops.py (this folder's copy), base / new alternated, under nice -n -15 (the VM is shared
# with ~5 helpers: the hop stamps of a rank preempted mid-hop are noise), ROUNDS rounds:
#   bash hops_ab.sh OUT ROUNDS
OUT=$(realpath -m ${1:?}); N=${2:-3}; PY=/work/main/.venv/bin/python; H=$(cd "$(dirname "$0")" && pwd)/large_hops.py
mkdir -p $OUT
for i in $(seq 1 $N); do for v in base new; do
  if [ $v = base ]; then P=/tmp/large15-base; else P=/work/wt/large15; fi
  cd $P; echo "== $v $i $(date -u +%H:%M:%S) $(uptime)" >> $OUT/hops-$v.txt
  PYTHONPATH=$P timeout 300 nice -n -15 $PY -m aiopdbp launch -n 2 $H --sizes 64K,1M --iters 400 >> $OUT/hops-$v.txt 2>&1
done; done
