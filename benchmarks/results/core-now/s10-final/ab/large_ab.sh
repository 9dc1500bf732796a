#!/bin/bash
# 64 KiB-16 MiB over shared memory and 64 KiB-1 MiB over TCP, base (910d5db) / new alternated: large_ab.sh OUT ROUNDS
OUT=${1:?}; N=${2:-3}; PY=/work/main/.venv/bin/python; mkdir -p $OUT
for i in $(seq 1 $N); do for v in base new; do
  if [ $v = base ]; then P=${BASE:-/tmp/base10}; else P=/work/main; fi
  cd $P; echo "== $v $i $(uptime)" >> $OUT/l-$v.txt
  PYTHONPATH=$P timeout 300 $PY -m aiopdbp bench pingpong --sizes 64K,1M,16M --repeat 5 --impls aiopdbp,mpi4py >> $OUT/l-$v.txt 2>&1
  echo "== $v $i $(uptime)" >> $OUT/t-$v.txt
  PYTHONPATH=$P timeout 300 $PY -m aiopdbp bench pingpong --tcp --sizes 64K,1M --repeat 5 --impls aiopdbp,mpi4py >> $OUT/t-$v.txt 2>&1
done; done
