#!/bin/bash
# instructions per 4 KiB unit, both sides: unit_ir.sh TREE KIND [SIZE] (N=0 and N=2000, PYTHONHASHSEED=0)
P=$1; K=$2; S=${3:-4096}
for n in 0 2000; do
  PYTHONHASHSEED=0 KIND=$K SIZE=$S N=$n PYTHONPATH=$P valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    "${PY:-/work/main/.venv/bin/python}" "$(dirname "$0")/unit_ir.py" 2>&1 | sed -n 's/.*Collected : //p'
done | paste -sd' ' | awk -v p=$P -v k=$K -v s=$S '{printf "%s %s %s instr/unit %.0f\n", p, k, s, ($2-$1)/2000}'
