#!/bin/bash
# alternated A/B of the 8 B ping-pong: ab.sh OUTDIR ROUNDS  (BASE: the base worktree of main)
# each variant runs from its own checkout (python -m puts the working directory first)
OUT=${1:?}; R=${2:-3}; PY=/work/main/.venv/bin/python; BASE=${BASE:-/tmp/wait16-base}; NEW=${NEW:-/work/wt/wait16}
mkdir -p $OUT
for i in $(seq 1 $R); do for v in base new; do
  if [ $v = base ]; then P=$BASE; else P=$NEW; fi
  echo "== $v $i $(date -u +%T) $(uptime)" >> $OUT/pp-$v.txt
  (cd $P && PYTHONPATH=$P timeout 300 $PY -m aiopdbp bench pingpong --sizes 8 --hops --repeat 5 --out $OUT/pp-$v-$i >> $OUT/pp-$v.txt 2>&1)
done; done
echo "done $(date -u +%T) $(uptime)" >> $OUT/done
