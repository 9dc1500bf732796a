#!/bin/bash
# CPU per unit of a stream of small segments against messages of the same
# size, base and new alternated:  chunks_ab.sh BASE NEW [ROUNDS] [SIZE] [UNITS]
# Each round runs, on each side, benchmarks/profile_streams.py (NEW's copy:
# it has --kind chunks) once as 16 streams of SIZE-byte segments per rank
# and once as messages, 2 ranks in a ring, and prints each rank's line.
# (run from the tree under test: python -m puts the working folder first on sys.path)
BASE=$1 NEW=$2 N=${3:-3} SIZE=${4:-64} UNITS=${5:-20000}
PY=/work/main/.venv/bin/python
SCRIPT=$NEW/benchmarks/profile_streams.py
uptime
for i in $(seq "$N"); do
  for side in base new; do
    tree=$BASE; [ $side = new ] && tree=$NEW
    for kind in chunks msg; do
      (cd "$tree" && PYTHONPATH=$tree timeout 300 $PY -m aiopdbp launch -n 2 "$SCRIPT" --kind $kind --size "$SIZE" \
          --units "$UNITS" --no-profile 2>&1) | grep -o "rank [01] $kind: .*" | sed "s/^/$side round $i /"
    done
  done
done
uptime
