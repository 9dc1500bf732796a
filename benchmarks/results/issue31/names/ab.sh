#!/bin/bash
# A/B alternated: before = 34e58d2 (/tmp/scalenames-old), after = wt/scalenames; in-process clusters
PY=/work/wt/scalenames/.venv/bin/python
cd /tmp/scalenames-bench
for round in 1 2; do
  for side in before after; do
    if [ $side = before ]; then src=/tmp/scalenames-old; else src=/work/wt/scalenames; fi
    echo "== $side round $round $(date -u +%H:%M:%S) $(uptime)"
    PYTHONPATH=$src nice -n 10 $PY -m aiopdbp bench scale --no-mpi --cluster 8,64,128,256 --out /tmp/scalenames-bench/$side-c$round 2>&1 | tail -8
  done
done
echo "== done $(date -u +%H:%M:%S) $(uptime)"
