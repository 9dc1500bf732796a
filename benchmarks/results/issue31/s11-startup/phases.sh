#!/bin/bash
# callgrind instructions per start-up phase of both ranks of a 2-rank job (probe_open.py, or probe_raw.py
# with RAW=1), with checkout TREE first on sys.path. usage: phases.sh TREE OUTDIR
# (mpiexec of the shared venv; rankout as aiopdbp launch runs ranks; last words off: not under aiopdbp launch)
TREE=$1; OUT=$2; HERE=$(cd $(dirname $0) && pwd); PY=${PY:-/work/main/.venv/bin/python}
PROG=$HERE/probe_open.py; [ -n "$RAW" ] && PROG=$HERE/probe_raw.py
mkdir -p $OUT; cd ${EMPTY:-/tmp/import13-empty}
CGMARK=${CGMARK:-/tmp/import13-cgmark.so} PYTHONPATH=$TREE PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 AIOPDBP_LAST_WORDS=0 \
  timeout 900 /work/main/.venv/bin/mpiexec -n 2 valgrind --tool=callgrind --callgrind-out-file=$OUT/cg.%p \
  --dump-line=no --compress-strings=no $PY -m aiopdbp.rankout $PROG > $OUT/log.txt 2>&1
echo "rc $?"
for f in $OUT/cg.*.*; do   # cg.PID.N: the dumps at the marks, in order
  label=$(grep -m1 "^desc: Trigger: Client Request:" $f | sed 's/.*Request: //')
  echo "$(basename $f) $label $(grep -m1 -E '^(summary|totals):' $f | awk '{printf "%.1f M", $2/1e6}')"
done
