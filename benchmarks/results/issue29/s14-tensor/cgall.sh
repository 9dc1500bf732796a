#!/bin/bash
# cgall.sh BASE NEW TAG N SIZE: in-process round trips under callgrind, numpy and torch, base and new (raw/)
B=$1 NEW=$2 TAG=$3 N=${4:-300} SIZE=${5:-8}
D=$(dirname "$(readlink -f "$0")")
for tree in ${TREES:-base new}; do
  T=$B; [ $tree = new ] && T=$NEW
  for k in numpy torch; do
    echo "== $tree $k $SIZE B N=$N $(date -u +%T) $(uptime | sed 's/.*load/load/')"
    tot=$(bash $D/cgrun.sh $T $k $SIZE $N $D/raw/cg_${TAG}_${tree}_${k}_${SIZE}.out)
    echo "$tree $k $SIZE B: total $tot per round trip $(python3 -c "print(round(int('$tot'.replace(',','').split()[0])/$N))")"
  done
done
