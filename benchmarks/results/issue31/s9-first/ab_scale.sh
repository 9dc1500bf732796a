#!/bin/bash
# Alternated `bench scale` first-message figure, main (BASE) against wt/first12 (NEW, with --idle).
#   ab_scale.sh OUT [ROUNDS] [RANKS]      e.g. ab_scale.sh /tmp/first12-scale 3 16,32
set -u
OUT=$1; ROUNDS=${2:-3}; RANKS=${3:-16,32}
PY=${PY:-/work/main/.venv/bin/python}
BASE=${BASE:-/tmp/first12-base}; NEW=${NEW:-/work/wt/first12}
mkdir -p "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  for tree in base new; do
    [ $tree = base ] && T=$BASE && X="" || { T=$NEW; X="--idle 1.2"; }
    echo "round $r $tree $(date -u +%T) $(uptime | sed 's/.*load/load/')" | tee -a "$OUT/log.txt"
    (cd "$T" && PYTHONPATH=$T timeout 900 nice -n 10 "$PY" -m aiopdbp bench scale -n "$RANKS" --patterns ring \
      --cluster '' $X --out "$OUT/r$r-$tree" >"$OUT/r$r-$tree.out" 2>&1) || echo "  rc $?" | tee -a "$OUT/log.txt"
  done
done
for f in "$OUT"/r*-*/scale.json; do
  "$PY" -c "import json,sys; d=json.load(open(sys.argv[1]))
for row in d['mpi']:
    a=row['aiopdbp']; i=a.get('idle_rtt_s')
    print(sys.argv[1].split('/')[-2], 'N=%d'%row['n'], 'cold %.2f warm %.2f'%(a['first_rtt_s']*1e3, a['warm_rtt_s']*1e3) + ('' if i is None else ' idle %.2f'%(i*1e3)), 'ms; cold/warm %.1fx'%(a['first_rtt_s']/a['warm_rtt_s']) + ('' if i is None else ', cold/idle %.1fx'%(a['first_rtt_s']/i)))" "$f"
done | tee "$OUT/summary.txt"
