#!/bin/bash
# A/B alternated (eighth session, wt/bw10): base = main at the session's start (6b957f4) in a
# worktree with its extensions built in place, new = this worktree (installed editable in its
# .venv).  Each round runs, per variant, `aiopdbp bench pingpong` with ARGS, `uptime` after each.
# Set-up: git worktree add /tmp/bw10-base 6b957f4 && cd /tmp/bw10-base &&
#   /work/wt/bw10/.venv/bin/python setup.py build_ext --inplace
# Usage: ARGS="--sizes 64K,1M,16M --repeat 3" ab.sh OUTDIR [ROUNDS]; summarise with summ.py OUTDIR.
OUT=${1:?usage: ab.sh OUTDIR [ROUNDS]}; ROUNDS=${2:-3}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd); NEW=$(cd "$HERE/../../.." && pwd); BASE=${BASE:-/tmp/bw10-base}
PY=$NEW/.venv/bin/python
cd /tmp
uptime > "$OUT/load.txt"
for i in $(seq "$ROUNDS"); do
  for v in ${VARIANTS:-base new}; do
    case $v in base) P=$BASE;; new) P=$NEW;; esac
    echo "== $v run $i" >> "$OUT/pp-$v.txt"
    PYTHONPATH=$P nice -n 10 "$PY" -m aiopdbp bench pingpong $ARGS >> "$OUT/pp-$v.txt" 2>&1
    echo "$v $i $(uptime)" >> "$OUT/load.txt"
  done
done
