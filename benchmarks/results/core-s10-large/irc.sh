#!/bin/bash
# instructions per large message of large_ir.py (callgrind, N=0 and N=K, K=${K:-1000}): irc.sh TREE [pure]
P=$1; E=; [ "$2" = pure ] && E="AIOPDBP_NO_EXTENSIONS=1"
K=${K:-1000}
for n in 0 $K; do
  env $E PYTHONHASHSEED=0 N=$n PYTHONPATH=$P valgrind --tool=callgrind --callgrind-out-file=/dev/null /work/main/.venv/bin/python "$(dirname "$0")/large_ir.py" 2>&1 | sed -n 's/.*Collected : //p'
done | paste -sd' ' | awk -v k=$K -v p="$P $2" '{printf "%s instr/message %.0f\n", p, ($2-$1)/k}'
