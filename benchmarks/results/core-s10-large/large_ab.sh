#!/bin/bash
# 64 KiB-16 MiB over shared memory and 64 KiB-1 MiB over TCP, base (main 910d5db) / new alternated:
# large_ab.sh OUT ROUNDS [NEWTREE]   (core-now/s9-final/ab/large_ab.sh with this session's trees)
OUT=${1:?}; N=${2:-3}; NEW=${3:-/tmp/large12-s2}; PY=/work/main/.venv/bin/python; mkdir -p $OUT
for i in $(seq 1 $N); do for v in base new; do
  if [ $v = base ]; then P=/tmp/large12-base; else P=$NEW; fi
  cd $P; echo "== $v $i $(date -u +%H:%M:%S) $(uptime)" >> $OUT/l-$v.txt
  PYTHONPATH=$P timeout 400 $PY -m aiopdbp bench pingpong --sizes 64K,1M,16M --repeat 3 --impls aiopdbp,mpi4py >> $OUT/l-$v.txt 2>&1
  echo "== $v $i $(date -u +%H:%M:%S) $(uptime)" >> $OUT/t-$v.txt
  PYTHONPATH=$P timeout 400 $PY -m aiopdbp bench pingpong --tcp --sizes 64K,1M --repeat 3 --impls aiopdbp,mpi4py >> $OUT/t-$v.txt 2>&1
done; done
echo "== done $(date -u +%H:%M:%S) $(uptime)" >> $OUT/l-new.txt
