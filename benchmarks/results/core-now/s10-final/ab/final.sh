#!/bin/bash
# The tenth session's closing measurements, in order, base 910d5db (/tmp/base10) against the merged main:
# pingpong 8 B/4 KiB + rate/NtoN (ab.sh), large sizes (large_ab.sh), 4 KiB streams (streams-s10/ab.sh),
# the 32-rank whole job (issue31/s7-start/ab_job.py). Usage: final.sh OUT
OUT=${1:?}; D=$(cd "$(dirname "$0")" && pwd); M=/work/main
bash $D/ab.sh $OUT/small 2
bash $D/large_ab.sh $OUT/large 2
NS="2 4" bash $M/benchmarks/results/streams-s10/ab.sh /tmp/base10 $M $OUT/streams 3
cd /tmp && timeout 900 $M/.venv/bin/python $M/benchmarks/results/issue31/s7-start/ab_job.py -n 32 --repeats 3 \
  base=$M/.venv/bin/python:PYTHONPATH=/tmp/base10 main=$M/.venv/bin/python:PYTHONPATH=$M > $OUT/ab32.txt 2>&1
echo done > $OUT/done
