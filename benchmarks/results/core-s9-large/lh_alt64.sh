#!/bin/bash
# alternated large_hops.py stamps at one size: lh_alt64.sh OUTDIR ROUNDS SIZES TREE_A TREE_B ...
out=$1; rounds=$2; sizes=$3; shift 3
mkdir -p $out
for r in $(seq 1 $rounds); do
  for t in "$@"; do
    n=$(basename $t)
    (uptime; PYTHONPATH=$t timeout 300 /work/main/.venv/bin/python -m aiopdbp launch -n 2 /work/wt/large11/benchmarks/large_hops.py --sizes $sizes --iters 1000; uptime) > $out/$n-$r.txt 2>&1
  done
done
