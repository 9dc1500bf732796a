#!/bin/bash
# instructions per 8 B in-process round trip whose receives wait: cg.sh TREE [N1] [N2]
# (the difference of two runs / (N2-N1): the fixed cost cancels; prefix AIOPDBP_NO_EXTENSIONS=1 for the pure form)
T=${1:?}; N1=${2:-100}; N2=${3:-300}; PY=${PY:-/work/main/.venv/bin/python}; D=$(dirname "$(readlink -f "$0")")
mkdir -p /tmp/wait16
for n in $N1 $N2; do
  PYTHONHASHSEED=0 N=$n PYTHONPATH=$T valgrind --tool=callgrind --collect-atstart=no \
    --callgrind-out-file=/tmp/wait16/cg-$(basename $T)${AIOPDBP_NO_EXTENSIONS:+-pure}${DRIVE:+-drive}-$n.out "$PY" "$D/pingpong_ir.py" 2>&1 \
    | sed -n 's/.*Collected : //p'
done | paste -sd' ' | awk -v a=$N1 -v b=$N2 -v t=$T '{printf "%s%s%s instr/RT %.0f  (N=%d: %d, N=%d: %d)\n", t, ENVIRON["AIOPDBP_NO_EXTENSIONS"] ? " pure" : "", ENVIRON["DRIVE"] ? " drive" : "", ($2-$1)/(b-a), a, $1, b, $2}'
