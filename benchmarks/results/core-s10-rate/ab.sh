#!/bin/bash
# base/new alternated, ROUNDS rounds: the rate probe (cpu per message, messages per MPI message)
# and `bench -n 2 --tests rate`:  ab.sh OUT ROUNDS BASE NEW
OUT=${1:?}; N=${2:-3}; BASE=${3:?}; NEW=${4:?}; PY=/work/main/.venv/bin/python; mkdir -p $OUT
D=$(dirname "$(readlink -f "$0")")
for i in $(seq 1 $N); do for v in base new; do
  if [ $v = base ]; then P=$BASE; else P=$NEW; fi
  cd $P
  echo "== $v $i $(date -u +%H:%M:%S) $(uptime)" | tee -a $OUT/load.txt >> $OUT/probe-$v.txt
  PYTHONPATH=$P timeout 300 /work/main/.venv/bin/mpiexec -n 2 $PY $D/rate_probe.py >> $OUT/probe-$v.txt 2>&1
  echo "== $v $i $(date -u +%H:%M:%S) $(uptime)" | tee -a $OUT/load.txt >> $OUT/rate-$v.txt
  PYTHONPATH=$P timeout 300 $PY -m aiopdbp bench -n 2 --tests rate --repeat 3 --no-plots --out $OUT/r-$v-$i >> $OUT/rate-$v.txt 2>&1
done; done
