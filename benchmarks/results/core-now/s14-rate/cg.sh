#!/bin/bash
# instructions per 64 B message of each half: cg.sh TREE [B] [N]  (prefix AIOPDBP_NO_EXTENSIONS=1 for the pure form;
# HALVES="tx rx" for some)
P=${1:?}; B=${2:-100}; N=${3:-40}; PY=${PY:-/work/main/.venv/bin/python}; D=$(dirname "$(readlink -f "$0")")
for half in ${HALVES:-tx deliver rx}; do
  for n in $N; do  # (collection is off outside the measured bursts: nothing to subtract)
    PYTHONHASHSEED=0 HALF=$half B=$B N=$n PYTHONPATH=$P valgrind --tool=callgrind --collect-atstart=no \
      --callgrind-out-file=/tmp/rate16/cg-$(basename $P)${AIOPDBP_NO_EXTENSIONS:+-pure}-$half${RXMODE:+-$RXMODE}-$n.out "$PY" "$D/halves_ir.py" 2>&1 | sed -n 's/.*Collected : //p'
  done | paste -sd' ' | awk -v h=$half -v m=$((B*N)) -v p=$P '{printf "%s %-8s instr/msg %.0f\n", p, h, $1/m}'
done
