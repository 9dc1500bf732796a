#!/bin/bash
# instructions per hop of micro.py: microcg.sh TREE KIND SIZE [K]  (callgrind, instrumented around K hops only)
T=$1 KIND=$2 SIZE=$3 K=${4:-2000}
for n in 0 $K; do
  PYTHONHASHSEED=0 CG=1 PYTHONPATH=$T:${CGCTL:-/tmp/t13/cg} K=$n KIND=$KIND SIZE=$SIZE timeout 1800 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/dev/null \
    /work/main/.venv/bin/python $(dirname "$0")/micro.py 2>&1 | sed -n 's/.*Collected : //p'
done | paste -sd' ' | awk -v t=$T -v k=$KIND -v s=$SIZE -v n=$K '{printf "%s %s %s B instr/hop %.0f\n", t, k, s, ($2-$1)/n}'
