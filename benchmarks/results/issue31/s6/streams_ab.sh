#!/bin/bash
# bench streams at 2 ranks, old (main) and new (wt/scale7) alternated
for i in 3 4 5; do
 for v in old new; do
  if [ $v = old ]; then P=/work/main; else P=/work/wt/scale7; fi
  echo "== $v run $i $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')"
  PYTHONPATH=$P nice -n 10 /work/wt/scale7/.venv/bin/python -m aiopdbp bench streams --sizes 4K,64K,1M --inflight 16 --repeat 1 --out /tmp/scale7/sc/streams-$v$i 2>&1 | tail -12
 done
done
echo "== end $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')"
