#!/bin/bash
# cg2all.sh BASE NEW N: cg2.sh for numpy and torch at 8 B, both trees (raw/cg2_*)
D=$(dirname "$(readlink -f "$0")")
for tree in base new; do
  T=$1; [ $tree = new ] && T=$2
  for k in numpy torch; do
    echo "== $tree $k $(date -u +%T) $(uptime | sed 's/.*load/load/')"
    bash $D/cg2.sh $T $k 8 $3 $D/raw/cg2_${tree}_${k}_8
  done
done
