#!/bin/bash
# The fourteenth session's closing measurements: the tenth's scripts (../s10-final/ab/), base the
# thirteenth session's final main d375774 built in $BASE (default /tmp/base14: `git worktree add
# /tmp/base14 d375774` + build_ext --inplace) against the merged main, then tensors against numpy
# in both trees (../../issue29/s12-tensor/tensor_ab.sh). Usage: final.sh OUT
OUT=${1:?}; S=$(cd "$(dirname "$0")/../s10-final/ab" && pwd); M=/work/main
export BASE=${BASE:-/tmp/base14}
mkdir -p $OUT; uptime > $OUT/uptime.txt
# Both trees' bytecode first: this machine sets PYTHONDONTWRITEBYTECODE, so a tree with edited or
# fresh sources would compile them in every process (a pip install compiles them once).
for T in $BASE $M; do (cd $T && $M/.venv/bin/python -m compileall -q aiopdbp > /dev/null); done
bash $S/ab.sh $OUT/small 3; uptime >> $OUT/uptime.txt
bash $S/large_ab.sh $OUT/large 2; uptime >> $OUT/uptime.txt
NS="2 4" bash $M/benchmarks/results/streams-s10/ab.sh $BASE $M $OUT/streams 3; uptime >> $OUT/uptime.txt
cd /tmp && timeout 900 $M/.venv/bin/python $M/benchmarks/results/issue31/s7-start/ab_job.py -n 32 --repeats 3 --raw-each \
  base=$M/.venv/bin/python:PYTHONPATH=$BASE main=$M/.venv/bin/python:PYTHONPATH=$M > $OUT/ab32.txt 2>&1
uptime >> $OUT/uptime.txt
SIZES=8,64K,16M RUN_S=400 bash $M/benchmarks/results/issue29/s12-tensor/tensor_ab.sh $OUT/tensor 3 $BASE $M
uptime >> $OUT/uptime.txt
echo done > $OUT/done
