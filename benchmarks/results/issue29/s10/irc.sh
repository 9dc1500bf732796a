#!/bin/bash
# instructions per in-process round trip: irc.sh TREE KIND SIZE [K]  (callgrind, N=0 and N=K;
# instrumented only around the round trips: CGCTL is the folder of the built cgctl.pyx)
T=$1 KIND=$2 SIZE=$3 K=${4:-2000}
for n in 0 $K; do
  PYTHONHASHSEED=0 CG=1 PYTHONPATH=$T:${CGCTL:-/tmp/t12/cg} N=$n KIND=$KIND SIZE=$SIZE valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/dev/null \
    "${PY:-/work/main/.venv/bin/python}" "$(dirname "$0")/rt_ir.py" 2>&1 | sed -n 's/.*Collected : //p'
done | paste -sd' ' | awk -v t=$T -v k=$KIND -v s=$SIZE -v n=$K '{printf "%s %s %s B instr/RT %.0f\n", t, k, s, ($2-$1)/n}'
