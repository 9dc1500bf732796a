#!/bin/bash
# Alternated base (910d5db, the session's start, built in ${BASE:-/tmp/base10}) / new (the merged main),
# each run of each command in its own tree's directory: pingpong 8 B and 4 KiB with the hop
# table, the 64 B rate and N-to-N. Usage: ab.sh OUT ROUNDS
OUT=${1:?}; N=${2:-3}; PY=/work/main/.venv/bin/python; mkdir -p $OUT
for i in $(seq ${START:-1} $N); do for v in base new; do
  if [ $v = base ]; then P=${BASE:-/tmp/base10}; else P=/work/main; fi
  cd $P
  echo "== $v $i $(uptime)" >> $OUT/pp-$v.txt
  PYTHONPATH=$P timeout 300 $PY -m aiopdbp bench pingpong --sizes 8,4K --repeat 5 --hops >> $OUT/pp-$v.txt 2>&1
  echo "== $v $i $(uptime)" >> $OUT/rate-$v.txt
  PYTHONPATH=$P timeout 300 $PY -m aiopdbp bench -n 2 --tests rate,NtoN --sizes 64,291,1K --repeat 3 --no-plots --out $OUT/rn-$v-$i >> $OUT/rate-$v.txt 2>&1
done; done
echo done > $OUT/done
