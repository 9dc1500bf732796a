#!/bin/bash
# base (main 57f3454, /tmp/large15-base) / new (wt/large15) alternated, ROUNDS rounds:
#   bash ab.sh OUT ROUNDS
# per round and tree: bench pingpong over shared memory (64K,1M,16M), then over --tcp (64K,1M,16M),
# --repeat 3, aiopdbp and mpi4py rows; `uptime` before each run
OUT=$(realpath -m ${1:?}); N=${2:-3}; PY=/work/main/.venv/bin/python; mkdir -p $OUT
for i in $(seq 1 $N); do for v in base new; do
  if [ $v = base ]; then P=/tmp/large15-base; else P=/work/wt/large15; fi
  cd $P; echo "== $v $i $(date -u +%H:%M:%S) $(uptime)" >> $OUT/l-$v.txt
  PYTHONPATH=$P timeout 300 $PY -m aiopdbp bench pingpong --sizes 64K,1M,16M --repeat 3 --impls aiopdbp,mpi4py >> $OUT/l-$v.txt 2>&1
  echo "== $v $i $(date -u +%H:%M:%S) $(uptime)" >> $OUT/t-$v.txt
  PYTHONPATH=$P timeout 300 $PY -m aiopdbp bench pingpong --tcp --sizes 64K,1M,16M --repeat 3 --impls aiopdbp,mpi4py >> $OUT/t-$v.txt 2>&1
done; done
echo "== done $(date -u +%H:%M:%S) $(uptime)" >> $OUT/l-new.txt
