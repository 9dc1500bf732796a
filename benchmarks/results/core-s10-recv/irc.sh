#!/bin/bash
# instructions per message: irc.sh PATH [N] (rx_ir.py with 0 and N messages, default 20000; PYTHONHASHSEED=0)
P=$1; K=${2:-20000}
for n in 0 $K; do
  PYTHONHASHSEED=0 N=$n NP=1 PYTHONPATH=$P valgrind --tool=callgrind --callgrind-out-file=/dev/null "${PY:-/work/main/.venv/bin/python}" "$(dirname "$0")/rx_ir.py" 2>&1 | sed -n 's/.*Collected : //p'
done | paste -sd' ' | awk -v p=$P -v k=$K '{printf "%s instr/msg %.0f\n", p, ($2-$1)/k}'
