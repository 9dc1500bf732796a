#!/bin/bash
# Alternate diag_job.py runs of variants: diag_ab.sh OUTDIR REPEATS N 'name:ENV=V ENV2=V2' ...
# Each variant: PYTHONPATH and any env in its spec; prints diag_table.py per run with uptime.
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$1; R=$2; N=$3; shift 3
PY=${PY:-/work/main/.venv/bin/python}
mkdir -p "$OUT"
for r in $(seq 1 "$R"); do
  specs=("$@")
  if (( r % 2 == 0 )); then specs=(); for ((i=$#; i>0; i--)); do specs+=("${!i}"); done; fi
  for spec in "${specs[@]}"; do
    name=${spec%%:*}; envs=${spec#*:}
    D="$OUT/r$r-$name"; rm -rf "$D"; mkdir -p "$D"
    echo "== round $r $name ($envs) $(uptime)"
    T=$(date +%s.%N)
    s=$(date +%s.%N)
    (cd /tmp && env AIOPDBP_RANK_PREFIX=0 $envs timeout 300 "$PY" -m aiopdbp launch -n "$N" "$HERE/diag_job.py" rank \
       --pattern alltoall --out "$D" --launched "$T")
    e=$(date +%s.%N)
    echo "wall $(echo "$e - $s" | bc)"
    "$PY" "$HERE/diag_table.py" "$D" | tail -n +2
  done
done
