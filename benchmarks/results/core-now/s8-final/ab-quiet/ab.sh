#!/bin/bash
OUT=/tmp/lead/ab9; PY=/work/main/.venv/bin/python
for i in 1 2 3; do for v in base new; do
  if [ $v = base ]; then P=/tmp/lead-base; else P=/work/main; fi
  echo "== $v $i $(uptime)" >> $OUT/pp-$v.txt
  PYTHONPATH=$P timeout 300 $PY -m aiopdbp bench pingpong --sizes 64K,1M --repeat 5 --impls aiopdbp,mpi4py >> $OUT/pp-$v.txt 2>&1
  echo "== $v $i $(uptime)" >> $OUT/st-$v.txt
  PYTHONPATH=$P timeout 300 $PY -m aiopdbp bench streams -n 2 --sizes 4K --repeat 5 --out $OUT/st-$v-$i >> $OUT/st-$v.txt 2>&1
done; done
echo done >> $OUT/done
