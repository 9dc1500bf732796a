#!/bin/bash
# instructions per in-process round trip: irc.sh TREE KIND SIZE [K]  (callgrind, N=0 and N=K)
T=$1 KIND=$2 SIZE=$3 K=${4:-2000}
for n in 0 $K; do
  PYTHONHASHSEED=0 N=$n KIND=$KIND SIZE=$SIZE PYTHONPATH=$T valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    "${PY:-/work/main/.venv/bin/python}" "$(dirname "$0")/rt_ir.py" 2>&1 | sed -n 's/.*Collected : //p'
done | paste -sd' ' | awk -v t=$T -v k=$KIND -v s=$SIZE -v n=$K '{printf "%s %s %s B instr/RT %.0f\n", t, k, s, ($2-$1)/n}'
