#!/bin/bash
# the 64 B rate alone, base/new alternated: rate_ab.sh OUT ROUNDS
OUT=${1:?}; N=${2:-4}; PY=/work/main/.venv/bin/python; mkdir -p $OUT
for i in $(seq 1 $N); do for v in base new; do
  if [ $v = base ]; then P=${BASE:-/tmp/base10}; else P=/work/main; fi
  cd $P; echo "== $v $i $(uptime)" >> $OUT/r-$v.txt
  PYTHONPATH=$P timeout 300 $PY -m aiopdbp bench -n 2 --tests rate --repeat 5 --no-plots --out $OUT/r-$v-$i >> $OUT/r-$v.txt 2>&1
done; done
