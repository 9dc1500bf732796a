#!/bin/bash
# cg2.sh TREE KIND SIZE N OUT: 2 ranks under callgrind (pp2cg.py), one output per rank (OUT.<pid>)
T=$1 KIND=$2 SIZE=$3 N=$4 OUT=$5
D=$(dirname "$(readlink -f "$0")")
cd $T && PYTHONHASHSEED=0 PYTHONPATH=$T:${CGCTL:-/tmp/t13/cg} timeout 1200 /work/main/.venv/bin/mpiexec -n 2 \
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$OUT.%p \
  /work/main/.venv/bin/python $D/pp2cg.py $KIND $SIZE $N > $OUT.log 2>&1
grep "Collected" $OUT.log
