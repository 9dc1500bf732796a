#!/bin/bash
# alternated large_hops.py stamps: lh_alt.sh OUTDIR ROUNDS TREE_A TREE_B ... (the script from /work/wt/large11)
out=$1; rounds=$2; shift 2
mkdir -p $out
for r in $(seq 1 $rounds); do
  for t in "$@"; do
    n=$(basename $t)
    (uptime; PYTHONPATH=$t timeout 300 /work/main/.venv/bin/python -m aiopdbp launch -n 2 /work/wt/large11/benchmarks/large_hops.py --sizes 64K,1M --iters 400; uptime) > $out/$n-$r.txt 2>&1
  done
done
