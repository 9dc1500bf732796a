#!/bin/bash
# Python calls per round trip (cProfile), base then new: prof.sh OUT SIZE
OUT=${1:?}; S=${2:-64K}; PY=/work/main/.venv/bin/python
for v in ${VS:-base new}; do
  if [ $v = base ]; then P=/tmp/large12-base; else P=/work/wt/large12; fi
  cd $P; echo "== $v $(date -u +%H:%M:%S) $(uptime)" > $OUT-$v.txt
  PYTHONPATH=$P timeout 600 $PY -m aiopdbp launch -n 2 /work/wt/large12/benchmarks/large_hops.py --sizes $S --iters 400 --profile --top 80 >> $OUT-$v.txt 2>&1
  echo "== end $(date -u +%H:%M:%S) $(uptime)" >> $OUT-$v.txt
done
