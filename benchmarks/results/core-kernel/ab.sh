#!/bin/bash
# Expects /tmp/prev, a worktree of b5a6441 with its extension built in place
# (git worktree add /tmp/prev b5a6441 && cd /tmp/prev && /work/main/.venv/bin/python setup.py build_ext --inplace),
# and /work/main/.venv built from main (pip install -e .). Usage: ab.sh OUTDIR
# A/B/C, alternated: prev = b5a6441 (compiled blocks), new = main compiled (blocks + kernel), pure = main with AIOPDBP_NO_EXTENSIONS=1
OUT=${1:-/tmp/kab/out}; mkdir -p $OUT; cd /tmp
PY=/work/main/.venv/bin/python
run() { local v=$1; shift; local f=$1; shift
  case $v in
    prev) PYTHONPATH=/tmp/prev $PY -m aiopdbp "$@" ;;
    new) $PY -m aiopdbp "$@" ;;
    pure) AIOPDBP_NO_EXTENSIONS=1 $PY -m aiopdbp "$@" ;;
  esac >> $OUT/$f 2>&1; }
uptime > $OUT/load.txt
for i in 1 2 3; do
  for v in prev new pure; do
    echo "== $v run $i" | tee -a $OUT/hops-$v.txt $OUT/rate-$v.txt >/dev/null
    run $v hops-$v.txt bench pingpong --sizes 8,4K --repeat 5 --hops
    run $v rate-$v.txt bench -n 2 --tests rate --repeat 5 --no-plots
    uptime >> $OUT/load.txt
  done
done
