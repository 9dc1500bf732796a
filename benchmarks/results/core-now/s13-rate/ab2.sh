#!/bin/bash
# (ab2: the rate only, the final tree) Alternated base (main 57f3454, built in ${BASE:-/tmp/rate15-base}) / new (wt/rate15, ${NEW:-/work/wt/rate15}),
# each command run from its own tree: the 64 B rate against raw windowed Isend, then 8 B pingpong
# (with the hop table) against the asyncio floor.  Usage: ab.sh OUT ROUNDS   (s11-rate's ab.sh, --hops added)
OUT=${1:?}; N=${2:-3}; PY=/work/main/.venv/bin/python; mkdir -p $OUT
for i in $(seq ${START:-1} $N); do for v in base new; do
  if [ $v = base ]; then P=${BASE:-/tmp/rate15-base}; else P=${NEW:-/work/wt/rate15}; fi
  cd $P
  echo "== $v $i $(date -u +%H:%M:%S) $(uptime)" >> $OUT/rate-$v.txt
  PYTHONPATH=$P timeout 300 $PY -m aiopdbp bench -n 2 --tests rate --rate-sizes 64 --impls aiopdbp-msg,raw \
    --repeat 3 --no-plots --out $OUT/r-$v-$i >> $OUT/rate-$v.txt 2>&1
done; done
echo done > $OUT/done
