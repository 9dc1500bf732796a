#!/bin/bash
# Tensors against numpy arrays, main (BASE) against this branch (BRANCH), alternated:
#   tensor_ab.sh OUT ROUNDS BASE BRANCH
# s10-final's tensor_ab.sh, with both trees in each round and a third payload, "numpyT": numpy
# arrays with torch imported at start-up (PRELOAD holds a sitecustomize.py that imports torch
# when T13_IMPORT_TORCH is set), to tell torch's presence in the process from a tensor's own path.
OUT=${1:?}; N=${2:-3}; BASE=${3:?}; BRANCH=${4:?}; PY=/work/main/.venv/bin/python
PRELOAD=${PRELOAD:-/tmp/t13/preload}; mkdir -p $OUT
for i in $(seq 1 $N); do for p in numpy torch numpyT; do for tree in base branch; do
  T=$BASE; [ $tree = branch ] && T=$BRANCH
  pay=$p; env=""; [ $p = numpyT ] && { pay=numpy; env="T13_IMPORT_TORCH=1"; }
  echo "== $tree $p $i $(uptime)" >> $OUT/${tree}_$p.txt
  (cd $T && env $env PYTHONPATH=$PRELOAD:$T timeout 600 $PY -m aiopdbp bench pingpong --sizes 8,64K,16M \
     --impls aiopdbp,floor --repeat 5 --payload $pay >> $OUT/${tree}_$p.txt 2>&1)
done; done; done
