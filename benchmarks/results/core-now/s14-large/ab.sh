#!/bin/bash
# base (main d375774, /tmp/large16-base) / new (wt/large16 at cd8aada, /tmp/large16-m) alternated,
# ROUNDS rounds, bench pingpong over shared memory, --hops, aiopdbp and mpi4py rows; uptime before each:
#   bash ab.sh OUT ROUNDS
OUT=$(realpath -m ${1:?}); N=${2:-3}; PY=/work/main/.venv/bin/python; mkdir -p $OUT
for i in $(seq 1 $N); do for v in base new; do
  if [ $v = base ]; then P=/tmp/large16-base; else P=/tmp/large16-m; fi
  cd $P; echo "== $v $i $(date -u +%H:%M:%S) $(uptime)" >> $OUT/l-$v.txt
  PYTHONPATH=$P timeout 300 $PY -m aiopdbp bench pingpong --sizes 64K,1M,16M --repeat 3 --hops --impls aiopdbp,mpi4py >> $OUT/l-$v.txt 2>&1
done; done
echo "== done $(date -u +%H:%M:%S) $(uptime)" >> $OUT/l-new.txt
