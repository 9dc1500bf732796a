#!/bin/bash
# Alternated A/B of `bench streams` at 4 KiB, 16 in flight, at 2 and 4 ranks:
#   [NS="2 4"] ab.sh OLD NEW OUTDIR RUNS
# (uptime before and after each rank count; benchmarks/ab_streams.py alternates old/new)
OLD=$1; NEW=$2; OUT=$3; RUNS=${4:-5}
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."   # benchmarks/ (ab_streams imports ab)
for n in ${NS:-2 4}; do
  { echo "== n=$n start $(date -u +%T) $(uptime)";
    timeout 3000 "${PY:-/work/main/.venv/bin/python}" ab_streams.py "$OLD" "$NEW" --runs "$RUNS" -- \
      -n $n --sizes 4K --repeat 5 --inflight 16;
    echo "== n=$n end $(date -u +%T) $(uptime)"; } > "$OUT/ab-4k-n$n.txt" 2>&1
done
