#!/bin/bash
# numpy and torch payloads alternated, ROUNDS rounds, one checkout (TREE); uptime before each run
# usage: TREE=/work/wt/tensor11 bash pp.sh OUTDIR ROUNDS
OUT=$1; ROUNDS=${2:-3}; TREE=${TREE:-/work/wt/tensor11}; mkdir -p $OUT; PY=/work/main/.venv/bin/python
ARGS=${ARGS:---sizes 8,64K,16M --repeat 3 --iters 500 --impls aiopdbp}
cd /tmp
for i in $(seq $ROUNDS); do for p in numpy torch; do
  echo "== $p round $i $(date -u +%H:%M:%S) $(uptime)" >> $OUT/pp-$p.txt
  PYTHONPATH=$TREE timeout 300 nice -n 5 $PY -m aiopdbp bench pingpong $ARGS --payload $p >> $OUT/pp-$p.txt 2>&1
done; done
echo "done $(date -u +%H:%M:%S) $(uptime)" >> $OUT/pp-torch.txt
