#!/bin/bash
# issue 31 s7: bench streams at 2 ranks, main (65a7baa, /tmp/cells8-old) and aiopdbp asking MPICH
# for 16 / 8 cells (/tmp/cells8-c16, /tmp/cells8-c8), alternated.
# ROUNDS, REPEAT (bench --repeat), VARIANTS, SIZES, EXTRA (more bench options), TAG (output name).
PY=/work/wt/cells8/.venv/bin/python
for i in ${ROUNDS:-1 2 3 4 5}; do
 for v in ${VARIANTS:-old c16 c8}; do
  echo "== $v run $i $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')"
  PYTHONPATH=/tmp/cells8-$v nice -n 10 $PY -m aiopdbp bench streams --sizes ${SIZES:-4K,64K,1M} --inflight 16 --repeat ${REPEAT:-1} $EXTRA --out /tmp/cells8/sc/${TAG:-streams}-$v$i 2>&1 | tail -5
 done
done
echo "== end $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')"
