#!/bin/bash
# issue 31 s7: bench scale all-to-all, main (65a7baa) and aiopdbp asking MPICH for 16 / 8
# cells (wt/cells8's mpiload with SHM_CELLS = 16 / 8), alternated; the raw program is in each run
# and keeps MPICH's 64.  Trees: /tmp/cells8-old, /tmp/cells8-c16, /tmp/cells8-c8 (compiled core copied in).
PY=/work/wt/cells8/.venv/bin/python
for i in ${ROUNDS:-1 2}; do
 for v in ${VARIANTS:-old c16 c8}; do
  echo "== $v run $i $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')"
  PYTHONPATH=/tmp/cells8-$v nice -n 10 $PY -m aiopdbp bench scale -n 4,16,32 --patterns ${PATTERN:-alltoall} --cluster "" ${REPEAT:+--repeat $REPEAT} --out /tmp/cells8/sc/${PATTERN:-alltoall}${REPEAT:+-r$REPEAT}-$v$i 2>&1 | tail -30
 done
done
echo "== end $(date -u +%H:%M:%S) $(uptime | sed 's/.*load/load/')"
