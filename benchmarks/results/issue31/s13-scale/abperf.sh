#!/bin/bash
# abperf.sh OUT ROUNDS: the 32-rank job under perf, new and base alternated; per run the CPU (ms, all processes) per phase
OUT=$1; R=${2:-3}; mkdir -p $OUT; H=$(cd $(dirname $0) && pwd)
for k in $(seq 1 $R); do
  if [ $((k % 2)) = 1 ]; then order="new base"; else order="base new"; fi
  for t in $order; do
    if [ $t = new ]; then T=${NEW:-/work/wt/scale15}; else T=${BASE:-/tmp/scale15-base}; fi
    up=$(uptime | sed 's/.*average: //')
    $H/perfjob.sh $T $OUT/run > /dev/null
    line=$(/work/main/.venv/bin/python $H/split.py $OUT/run | awk 'NR==1{printf "total %s ", $2} NR>1{printf "%s %s ", $1, $2}')
    wall=$(/work/main/.venv/bin/python -c "
import json,glob
rs=[json.load(open(f)) for f in glob.glob('$OUT/run/aiopdbp-*.json')]
print(f\"end {max(r['phases']['closed'][0] for r in rs):.2f} mainmax {max(r['phases']['main'][0] for r in rs):.2f} initmax {max(r['phases']['init'][0] for r in rs):.2f}\")")
    echo "[$k] $t load $up | $line| $wall" | tee -a $OUT/ab.txt
  done
done
