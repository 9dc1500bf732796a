#!/bin/bash
# A/B alternated, ninth session (wt/cred11): base = main bd1f095 in a worktree with its
# extensions built in place, new = wt/cred11 (built in place). Each round runs, per variant,
# `bench pingpong --sizes 8,4K --repeat ${REPEAT:-5} --hops` (its table has the floor rows), with
# `uptime` before each run. Variants: base new (compiled), basepure pure (AIOPDBP_NO_EXTENSIONS=1).
# Set-up: git worktree add --detach /tmp/cred11-base bd1f095 && cd /tmp/cred11-base &&
#   /work/main/.venv/bin/python setup.py build_ext --inplace
# Usage: ab.sh OUTDIR [ROUNDS]; summarise with ../core-s8-recv/parse_ab.py OUTDIR base,new,basepure,pure
OUT=${1:?usage: ab.sh OUTDIR [ROUNDS]}; ROUNDS=${2:-3}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd); NEW=${NEW:-$(cd "$HERE/../../.." && pwd)}; BASE=${BASE:-/tmp/cred11-base}
PY=${PY:-/work/main/.venv/bin/python}
cd /tmp
for i in $(seq "$ROUNDS"); do
  for v in ${VARIANTS:-base new basepure pure}; do
    case $v in
      base) P=$BASE; X= ;; new) P=$NEW; X= ;;
      basepure) P=$BASE; X=1 ;; pure) P=$NEW; X=1 ;;
    esac
    echo "== $v run $i" >> "$OUT/hops-$v.txt"
    echo "$v $i $(uptime)" >> "$OUT/load.txt"
    if [ -n "$X" ]; then export AIOPDBP_NO_EXTENSIONS=1; else unset AIOPDBP_NO_EXTENSIONS; fi
    PYTHONPATH=$P timeout 900 "$PY" -m aiopdbp bench pingpong --sizes 8,4K --repeat ${REPEAT:-5} --hops ${IMPLS:+--impls $IMPLS} >> "$OUT/hops-$v.txt" 2>&1
  done
done
echo "done $(uptime)" >> "$OUT/load.txt"
