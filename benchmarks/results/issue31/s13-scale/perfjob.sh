#!/bin/bash
# perfjob.sh TREE OUT [--raw]: the 32-rank job under perf record (cpu-clock, realtime clock), pid->rank files
HERE=$(cd $(dirname $0) && pwd)
TREE=$1; OUT=$2; shift 2; mkdir -p $OUT; rm -rf $OUT/*; cd /tmp
T=$(date +%s.%N)
PIDDIR=$OUT PYTHONPATH=$TREE AIOPDBP_RANK_PREFIX=0 timeout 300 perf record -q -F 999 -k CLOCK_REALTIME -o $OUT/perf.data -- \
  /work/main/.venv/bin/python -m aiopdbp launch -n ${N:-32} $HERE/probe.py "$@" --pattern alltoall --out $OUT --launched $T > $OUT/log.txt 2>&1
echo "rc $? $(uptime)"; echo $T > $OUT/launched
