#!/bin/bash
# callgrind instructions per phase of chosen ranks of the N-rank all-to-all job (others run plainly).
# usage: cg32.sh TREE OUTDIR [N] [RANKS] ; RAW=1 for the raw mpi4py program (under the same launcher)
TREE=$1; OUT=$2; N=${3:-32}; RANKS=${4:-"0 17"}; HERE=$(cd $(dirname $0) && pwd)
PY=/work/main/.venv/bin/python; mkdir -p $OUT /tmp/scale14-empty; rm -f $OUT/cg.* $OUT/*.json
EXTRA=; [ -n "$RAW" ] && EXTRA=--raw
cd /tmp/scale14-empty
CGMARK=/tmp/scale14-cgmark.so CGRANKS="$RANKS" CGOUT=$OUT AIOPDBP_MPIEXEC=$HERE/mpiexec-wrap.sh \
  PYTHONPATH=$TREE PYTHONHASHSEED=0 AIOPDBP_RANK_PREFIX=0 \
  timeout 1500 $PY -m aiopdbp launch -n $N $HERE/probe_job.py $EXTRA --pattern alltoall --out $OUT > $OUT/log.txt 2>&1
echo "rc $? (uptime: $(uptime))"
for f in $OUT/cg.r*.*.*; do
  label=$(grep -m1 "^desc: Trigger: Client Request:" $f | sed 's/.*Request: //')
  echo "$(basename $f) $label $(grep -m1 -E '^(summary|totals):' $f | awk '{printf "%.1f M", $2/1e6}')"
done | sort -t. -k1,1 -k3n
