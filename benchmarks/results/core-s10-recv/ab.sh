#!/bin/bash
# Alternated base (main 910d5db, built in /tmp/recv12-base) / new (wt/recv12), each run in its
# own tree's directory: pingpong 8 B with the hop table and CPU per round trip.
# Usage: ab.sh OUT ROUNDS   (s9-final/ab/ab.sh's pattern cut to 8 B, aiopdbp and the floor, 300 round trips, 3 repeats: at load 28-52 runs of 5 x every impl and 3 x 3,000 round trips ran past their timeouts (ab-killed/))
OUT=${1:?}; N=${2:-3}; PY=/work/main/.venv/bin/python; mkdir -p $OUT
for i in $(seq ${START:-1} $N); do for v in base new; do
  if [ $v = base ]; then P=/tmp/recv12-base; else P=/work/wt/recv12; fi
  cd $P
  echo "== $v $i $(date -u +%H:%M:%S) $(uptime)" >> $OUT/pp-$v.txt
  PYTHONPATH=$P timeout 240 $PY -m aiopdbp bench pingpong --sizes 8 --repeat 3 --iters 300 --impls aiopdbp,floor --hops >> $OUT/pp-$v.txt 2>&1
done; done
echo done > $OUT/done
