#!/bin/bash
# Expects: /tmp/old a worktree of the commit before (git worktree add /tmp/old f4a742d) and
# /work/main/.venv built from main (pip install -e .). Run from anywhere; outputs in $1.
# A/B/C: f4a742d (old, pure) vs main compiled vs main pure, alternated, on one machine
OUT=${1:-/tmp/finalab}; mkdir -p $OUT; cd /tmp
PY=/work/main/.venv/bin/python
run() { # variant outfile args...
  local v=$1; shift; local f=$1; shift
  case $v in
    old) PYTHONPATH=/tmp/old $PY -m aiopdbp "$@" ;;
    compiled) $PY -m aiopdbp "$@" ;;
    pure) AIOPDBP_NO_EXTENSIONS=1 $PY -m aiopdbp "$@" ;;
  esac >> $OUT/$f 2>&1
}
uptime > $OUT/load.txt
for i in 1 2 3; do
  for v in old compiled pure; do
    echo "== $v run $i" | tee -a $OUT/pingpong-$v.txt $OUT/rate-$v.txt $OUT/nton-$v.txt $OUT/streams-$v.txt >/dev/null
    run $v pingpong-$v.txt bench pingpong --sizes 8,4K,64K,1M,16M --repeat 5
    run $v rate-$v.txt bench -n 2 --tests rate --repeat 5 --no-plots
    run $v nton-$v.txt bench -n 2 --tests NtoN --sizes 64,291,1K --repeat 5 --no-plots
    run $v streams-$v.txt bench streams -n 2,4 --sizes 4K --repeat 3
    uptime >> $OUT/load.txt
  done
done
for v in old compiled pure; do run $v hops-$v.txt bench pingpong --sizes 8 --repeat 3 --hops; done
uptime >> $OUT/load.txt
