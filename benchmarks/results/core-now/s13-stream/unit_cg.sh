#!/bin/bash
# instructions per 4 KiB unit, both sides, only the N measured units collected:
#   unit_cg.sh TREE KIND [N]   (CGLIB=/tmp/stream15/libcgtoggle.so: gcc -shared -fPIC -o ... cgtoggle.c)
P=$1; K=$2; N=${3:-2000}
PYTHONHASHSEED=0 KIND=$K N=$N CGLIB=${CGLIB:-/tmp/stream15/libcgtoggle.so} PYTHONPATH=$P valgrind --tool=callgrind \
  --collect-atstart=no --callgrind-out-file=${CGOUT:-/dev/null} "${PY:-/work/main/.venv/bin/python}" \
  "$(dirname "$0")/unit_ir.py" 2>&1 | sed -n 's/.*Collected : //p' | awk -v p=$P -v k=$K -v n=$N '{printf "%s %s instr/unit %.0f\n", p, k, $1/n}'
