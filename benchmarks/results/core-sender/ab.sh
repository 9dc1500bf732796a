#!/bin/bash
# A/B alternated for the compiled link sender: base = ff10a72 (the session's start, its
# compiled blocks, kernel and gate), new = the working tree (+ the compiled sender),
# pure = the working tree with AIOPDBP_NO_EXTENSIONS=1, basepure = ff10a72 pure.
# Expects /tmp/lead/s4base, a worktree of ff10a72 with its extensions built in place
# (git worktree add /tmp/lead/s4base ff10a72 && cd /tmp/lead/s4base &&
#  /work/main/.venv/bin/python setup.py build_ext --inplace), and /work/main/.venv
# installed from the working tree (pip install -e .). Usage: ab.sh OUTDIR [ROUNDS]
OUT=${1:?usage: ab.sh OUTDIR [ROUNDS]}; ROUNDS=${2:-3}; mkdir -p "$OUT"; cd /tmp
PY=/work/main/.venv/bin/python
run() { local v=$1; shift; local f=$1; shift
  case $v in
    base) PYTHONPATH=/tmp/lead/s4base $PY -m aiopdbp "$@" ;;
    new) $PY -m aiopdbp "$@" ;;
    pure) AIOPDBP_NO_EXTENSIONS=1 $PY -m aiopdbp "$@" ;;
    basepure) AIOPDBP_NO_EXTENSIONS=1 PYTHONPATH=/tmp/lead/s4base $PY -m aiopdbp "$@" ;;
  esac >> "$OUT/$f" 2>&1; }
uptime > "$OUT/load.txt"
for i in $(seq "$ROUNDS"); do
  for v in ${VARIANTS:-base new basepure pure}; do
    echo "== $v run $i" | tee -a "$OUT/hops-$v.txt" "$OUT/rate-$v.txt" >/dev/null
    run $v hops-$v.txt bench pingpong --sizes 8,4K --repeat 3 --hops
    run $v rate-$v.txt bench -n 2 --tests rate --repeat 3 --no-plots
    uptime >> "$OUT/load.txt"
  done
done
