#!/bin/bash
# Tensors against numpy arrays in one tree, alternated, quiet: tensor_ab.sh OUT ROUNDS [TREE]
# (issue 29's cost target: +2 us a hop at 8 B, within 10 % at 64 KiB and 16 MiB)
OUT=${1:?}; N=${2:-3}; T=${3:-/work/main}; PY=/work/main/.venv/bin/python; mkdir -p $OUT
cd $T
for i in $(seq 1 $N); do for p in numpy torch; do
  echo "== $p $i $(uptime)" >> $OUT/$p.txt
  PYTHONPATH=$T timeout 300 $PY -m aiopdbp bench pingpong --sizes 8,64K,16M --impls aiopdbp,floor --repeat 5 --payload $p >> $OUT/$p.txt 2>&1
done; done
