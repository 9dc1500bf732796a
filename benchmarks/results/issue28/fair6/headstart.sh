#!/bin/bash
# Head-start cases, old (7ab905b) and new alternated; fair.py is this branch's
# (it has --head-start) with PYTHONPATH set to the tree under test.
#   bash benchmarks/results/issue28/fair6/headstart.sh OLD NEW ROUNDS
OLD=$1; NEW=$2; ROUNDS=${3:-2}
D=$(dirname "$0")
for r in $(seq "$ROUNDS"); do
  for tree in "$OLD" "$NEW"; do
    for c in "--size 1024 --period 0.01 --seconds 10 --stagger 0.2" \
             "--size 1024 --period 0.02 --seconds 10 --head-start 0.5" \
             "--size 1048576 --period 0.02 --seconds 10 --head-start 0.5"; do
      echo "## tree $tree round $r: per-rank 1,5 $c (load $(cut -d' ' -f1 /proc/loadavg))"
      PYTHONPATH=$tree nice -n 10 timeout 120 mpiexec -n 3 python tests/mpi_scripts/fair.py --per-rank 1,5 \
        --window 0 --warmup 0 --bucket 0.5 $c 2>&1 | grep FAIR | python3 "$D/shares.py" 0.5
    done
  done
done
