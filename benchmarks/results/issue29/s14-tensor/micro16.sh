#!/bin/bash
# micro16.sh TREE PART DTYPE [N] [PURE]: instructions per call (N and 0 calls under callgrind, subtracted)
T=$1 PART=$2 DT=$3 N=${4:-2000}; D=$(dirname "$(readlink -f "$0")")
run() { PYTHONHASHSEED=0 CG=1 PYTHONPATH=$T:${CGCTL:-/tmp/t13/cg} N=$1 PART=$PART DTYPE=$DT ${PURE:+AIOPDBP_NO_EXTENSIONS=1} \
  timeout 600 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/t16m_$$_$1.out /work/main/.venv/bin/python $D/micro16.py 2>&1 \
  | sed -n 's/.*Collected : //p'; }
a=$(run 0); b=$(run $N)
echo "$(basename $T) ${PURE:+pure }$PART $DT: $(( (b - a) / N )) instructions a call"
rm -f /tmp/t16m_$$_*.out
