#!/bin/bash
# instructions per large message of large_ir.py (callgrind, N=0 and N=1000): irc.sh TREE
P=$1
for n in 0 1000; do
  PYTHONHASHSEED=0 N=$n PYTHONPATH=$P valgrind --tool=callgrind --callgrind-out-file=/dev/null /work/main/.venv/bin/python "$(dirname "$0")/large_ir.py" 2>&1 | sed -n 's/.*Collected : //p'
done | paste -sd' ' | awk -v p=$P '{printf "%s instr/message %.0f\n", p, ($2-$1)/1000}'
