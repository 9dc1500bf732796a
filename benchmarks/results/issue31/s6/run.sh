#!/bin/bash
# old (main d5b8581) and new (wt/scale7) alternated, all-to-all only
for i in 1 2; do
 for v in old new; do
  if [ $v = old ]; then P=/work/main; else P=/work/wt/scale7; fi
  echo "== $v run $i $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')"
  PYTHONPATH=$P nice -n 10 /work/wt/scale7/.venv/bin/python -m aiopdbp bench scale -n 4,16,32 --patterns alltoall --cluster '' --out /tmp/scale7/sc/$v$i 2>&1 | tail -30
 done
done
echo "== end $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')"
