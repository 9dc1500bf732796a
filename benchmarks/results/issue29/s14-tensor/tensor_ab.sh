#!/bin/bash
# Tensors against numpy arrays, base tree against the branch, alternated in every round:
#   [SIZES=8,64K] [RUN_S=600] tensor_ab.sh OUT ROUNDS BASE NEW
# (issue 29's cost target: +2 us a hop at 8 B, within 10 % at 64 KiB and 16 MiB; numpy no slower)
OUT=${1:?}; N=${2:-3}; B=${3:?}; W=${4:?}; PY=/work/main/.venv/bin/python; mkdir -p $OUT
for i in $(seq ${START:-1} $N); do
  if [ $((i % 2)) = 1 ]; then order="base new"; else order="new base"; fi
  for t in $order; do
    T=$B; [ $t = new ] && T=$W
    for p in numpy torch; do
      echo "== $t $p $i $(date +%T) $(uptime)" >> $OUT/$t-$p.txt
      (cd $T && PYTHONPATH=$T timeout ${RUN_S:-420} $PY -m aiopdbp bench pingpong --sizes ${SIZES:-8,64K,16M} --impls aiopdbp --repeat 5 --payload $p >> $OUT/$t-$p.txt 2>&1)
    done
  done
done
