#!/bin/bash
# A/B of the bandwidth, alternated in rounds: A = the commit before (a worktree at
# $OLD with this tree's compiled twins copied in: their sources are unchanged),
# B = the commit after (a worktree at $NEW, the same; default: this tree); each
# run `bench pingpong` with aiopdbp and mpi4py in one job (this tree's venv).
#   bash benchmarks/results/core-bw/ab.sh OUTDIR ROUNDS [--tcp]
# then: python3 benchmarks/results/core-bw/parse_ab.py OUTDIR
set -u
OUT=$1; ROUNDS=${2:-3}; EXTRA=${3:-}
OLD=${OLD:-/tmp/bw-old}
HERE=$(cd "$(dirname "$0")/../../.." && pwd)
NEW=${NEW:-$HERE}
PY=$HERE/.venv/bin/python
mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    if [ $side = A ]; then export PYTHONPATH=$OLD; else export PYTHONPATH=$NEW; fi
    uptime > "$OUT/$side-$r.txt"
    (cd "$(dirname "$PYTHONPATH/x")" && "$PY" -m aiopdbp bench pingpong --sizes ${SIZES:-64K,1M} --repeat 1 \
        --impls aiopdbp,mpi4py $EXTRA --out "$OUT/$side-$r") >> "$OUT/$side-$r.txt" 2>&1
    uptime >> "$OUT/$side-$r.txt"
  done
done
