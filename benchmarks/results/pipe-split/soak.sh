#!/bin/bash
# soak.sh TREE FIRST LAST [soak args...]: one line per seed: phantom, lost, duplicated, corrupt,
# large sent/received and cancels, summed over the ranks (aiopdbp launch -n 4)
T=${1:?}; A=${2:?}; B=${3:?}; shift 3; PY=${PY:-/work/main/.venv/bin/python}
SOAK=$(dirname "$(readlink -f "$0")")/../../soak.py
for s in $(seq $A $B); do
  cd /tmp && PYTHONPATH=$T timeout 300 $PY -m aiopdbp launch -n 4 $SOAK --cdus 20000 --gps 2 --seed $s "$@" 2>&1 \
    | sed -n 's/.*SOAK //p' | $PY -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
k = ("phantom", "lost", "duplicated", "corrupt", "large_sent", "large_received", "msgs_cancelled", "cancel_attempts")
print(sys.argv[1], "seed", sys.argv[2], "ranks", len(rows), " ".join(f"{x}={sum(r.get(x, 0) for r in rows)}" for x in k))' $T $s
done
