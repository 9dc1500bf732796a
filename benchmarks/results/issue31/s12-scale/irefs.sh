#!/bin/bash
# instructions (valgrind cachegrind I refs, millions) of a fresh interpreter running CODE with each checkout DIR
# first on sys.path, from an empty cwd (a busy /tmp as cwd made counts vary by +-40 M: its listing is re-read)
# usage: irefs.sh CODE DIR...
code="$1"; shift; mkdir -p ${EMPTY:-/tmp/emptycwd}
for d in "$@"; do
  n=$(cd ${EMPTY:-/tmp/emptycwd} && PYTHONPATH="$d" PYTHONHASHSEED=0 OPENBLAS_NUM_THREADS=1 nice -n 5 valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null ${PY:-python} -c "$code" 2>&1 | grep "I *refs" | awk '{gsub(",","",$NF); printf "%.1f", $NF/1e6}')
  echo "$n M  $d  ($code)"
done
