#!/bin/bash
# soak2.sh TREE FIRST LAST [soak args...]: one line per seed: the job's exit code and seconds, then
# phantom, lost, duplicated, corrupt, large sent/received and cancels summed over the ranks
# (aiopdbp launch -n 4); a job without 4 SOAK lines keeps its whole output in $LOGS
T=${1:?}; A=${2:?}; B=${3:?}; shift 3; PY=${PY:-/work/main/.venv/bin/python}; LOGS=${LOGS:-/tmp/pipe14}
SOAK=$(dirname "$(readlink -f "$0")")/../../soak.py
for s in $(seq $A $B); do
  log=$LOGS/soak-$(basename $T)-$s.log; t0=$(date +%s)
  cd /tmp && PYTHONPATH=$T timeout 300 $PY -m aiopdbp launch -n 4 $SOAK --cdus 20000 --gps 2 --seed $s "$@" > $log 2>&1
  rc=$?; t1=$(date +%s)
  sed -n 's/.*SOAK //p' $log | $PY -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
k = ("phantom", "lost", "duplicated", "corrupt", "large_sent", "large_received", "msgs_cancelled", "cancel_attempts")
print(sys.argv[1], "seed", sys.argv[2], "rc", sys.argv[3], "s", sys.argv[4], "ranks", len(rows),
      " ".join(f"{x}={sum(r.get(x, 0) for r in rows)}" for x in k))' $T $s $rc $((t1 - t0))
  [ "$(grep -c 'SOAK {' $log)" = 4 ] && rm -f $log
done
