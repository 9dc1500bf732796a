#!/bin/bash
PY=/work/wt/scalenames/.venv/bin/python
cd /tmp/scalenames-bench
for round in 1 2; do
  for side in before after; do
    if [ $side = before ]; then src=/tmp/scalenames-old; else src=/work/wt/scalenames; fi
    echo "== $side round $round $(date -u +%H:%M:%S) $(uptime)"
    PYTHONPATH=$src nice -n 10 $PY -m aiopdbp bench scale -n 4,8,16,32 --patterns ring --cluster '' --out /tmp/scalenames-bench/$side-m$round 2>&1 | tail -12
  done
done
echo "== done $(date -u +%H:%M:%S) $(uptime)"
