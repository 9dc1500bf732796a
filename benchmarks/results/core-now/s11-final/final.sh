#!/bin/bash
# The eleventh session's closing measurements: the tenth's scripts (../s10-final/ab/), base the
# tenth session's final main 6682efd built in $BASE (default /tmp/base11: `git worktree add
# /tmp/base11 6682efd` + build_ext --inplace) against the merged main. Usage: final.sh OUT
OUT=${1:?}; S=$(cd "$(dirname "$0")/../s10-final/ab" && pwd); M=/work/main
export BASE=${BASE:-/tmp/base11}
mkdir -p $OUT; uptime > $OUT/uptime.txt
bash $S/ab.sh $OUT/small 3
bash $S/large_ab.sh $OUT/large 2
NS="2 4" bash $M/benchmarks/results/streams-s10/ab.sh $BASE $M $OUT/streams 3
cd /tmp && timeout 900 $M/.venv/bin/python $M/benchmarks/results/issue31/s7-start/ab_job.py -n 32 --repeats 3 \
  base=$M/.venv/bin/python:PYTHONPATH=$BASE main=$M/.venv/bin/python:PYTHONPATH=$M > $OUT/ab32.txt 2>&1
uptime >> $OUT/uptime.txt
echo done > $OUT/done
