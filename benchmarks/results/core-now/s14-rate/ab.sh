#!/bin/bash
# Alternated A/B of the 64 B rate (aiopdbp-msg against raw windowed Isend, 2 ranks), each command run
# from its own tree: base = main d375774 (${BASE:-/tmp/rate16-base}), lib = base + this branch's three
# library commits, its bench harness unchanged (${LIB:-/tmp/rate16-lib}), new = wt/rate16 (library +
# the bench's per-window check, ${NEW:-/work/wt/rate16}).  Usage: ab.sh OUT ROUNDS
OUT=${1:?}; N=${2:-3}; PY=/work/main/.venv/bin/python; mkdir -p $OUT
for i in $(seq ${START:-1} $N); do for v in ${VARIANTS:-base lib new}; do
  case $v in base) P=${BASE:-/tmp/rate16-base};; lib) P=${LIB:-/tmp/rate16-lib};; new) P=${NEW:-/work/wt/rate16};; esac
  cd $P
  echo "== $v $i $(date -u +%H:%M:%S) $(uptime)" >> $OUT/rate-$v.txt
  PYTHONPATH=$P timeout 300 $PY -m aiopdbp bench -n 2 --tests rate --rate-sizes 64 --impls aiopdbp-msg,raw \
    --repeat 3 --no-plots --out $OUT/r-$v-$i >> $OUT/rate-$v.txt 2>&1
done; done
echo done > $OUT/done
