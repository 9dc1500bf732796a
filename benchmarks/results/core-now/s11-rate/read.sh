#!/bin/bash
# instructions per record read (a block of B 64 B messages): read.sh TREE [B] [N]
P=${1:?}; B=${2:-127}; N=${3:-200}; PY=${PY:-/work/main/.venv/bin/python}; D=$(dirname "$(readlink -f "$0")")
PYTHONHASHSEED=0 B=$B N=$N PYTHONPATH=$P valgrind --tool=callgrind --collect-atstart=no \
  --callgrind-out-file=/tmp/rate13/read-$(basename $P)${AIOPDBP_NO_EXTENSIONS:+-pure}.out "$PY" "$D/read_ir.py" 2>&1 \
  | sed -n 's/.*Collected : //p' | awk -v m=$((B*N)) -v p=$P '{printf "%s block read instr/record %.0f\n", p, $1/m}'
