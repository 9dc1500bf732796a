#!/bin/bash
# issue 29: numpy against torch payloads, alternated, this worktree; ROUNDS rounds
OUT=$1; ROUNDS=${2:-3}; mkdir -p $OUT; PY=/work/wt/bw10/.venv/bin/python
cd /tmp; uptime > $OUT/load.txt
for i in $(seq $ROUNDS); do for p in numpy torch; do
  echo "== $p run $i" >> $OUT/pp-$p.txt
  nice -n 10 $PY -m aiopdbp bench pingpong --sizes 8,64K --repeat 5 --impls aiopdbp,floor --payload $p >> $OUT/pp-$p.txt 2>&1
  echo "$p $i $(uptime)" >> $OUT/load.txt
done; done
