#!/bin/bash
# instructions per 8 B round trip in process: pp.sh TREE [N]  (env WHERE=remote|local; prefix
# AIOPDBP_NO_EXTENSIONS=1 for the pure form)
P=${1:?}; N=${2:-1000}; PY=${PY:-/work/main/.venv/bin/python}; D=$(dirname "$(readlink -f "$0")")
PYTHONHASHSEED=0 N=$N PYTHONPATH=$P valgrind --tool=callgrind --collect-atstart=no \
  --callgrind-out-file=/tmp/pipe14/pp-$(basename $P)${AIOPDBP_NO_EXTENSIONS:+-pure}-${WHERE:-remote}-$N.out "$PY" "$D/pp_ir.py" 2>&1 \
  | sed -n 's/.*Collected : //p' | awk -v n=$N -v p=$P -v w=${WHERE:-remote} -v f=${AIOPDBP_NO_EXTENSIONS:+pure} '{printf "%s %s %s 8 B instr/round trip %.0f\n", p, w, f, $1/n}'
