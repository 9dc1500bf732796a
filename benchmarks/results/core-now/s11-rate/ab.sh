#!/bin/bash
# Alternated base (main 795ce05, built in ${BASE:-/tmp/rate13-base}) / new (wt/rate13, ${NEW:-/work/wt/rate13}),
# each command run from its own tree: the 64 B rate against raw windowed Isend, then 8 B pingpong
# against the asyncio floor.  Usage: ab.sh OUT ROUNDS
OUT=${1:?}; N=${2:-3}; PY=/work/main/.venv/bin/python; mkdir -p $OUT
for i in $(seq ${START:-1} $N); do for v in base new; do
  if [ $v = base ]; then P=${BASE:-/tmp/rate13-base}; else P=${NEW:-/work/wt/rate13}; fi
  cd $P
  echo "== $v $i $(date -u +%H:%M:%S) $(uptime)" >> $OUT/rate-$v.txt
  PYTHONPATH=$P timeout 300 $PY -m aiopdbp bench -n 2 --tests rate --rate-sizes 64 --impls aiopdbp-msg,raw \
    --repeat 3 --no-plots --out $OUT/r-$v-$i >> $OUT/rate-$v.txt 2>&1
  echo "== $v $i $(date -u +%H:%M:%S) $(uptime)" >> $OUT/pp-$v.txt
  PYTHONPATH=$P timeout 200 $PY -m aiopdbp bench pingpong --sizes 8 --impls aiopdbp,floor --repeat 3 >> $OUT/pp-$v.txt 2>&1
done; done
echo done > $OUT/done
