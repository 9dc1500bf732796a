#!/bin/bash
# The four callgrind runs of irc.sh at once (base and new, 0 and K messages), the outputs kept for
# cgdiff.py; prints instructions per message per tree. Usage: irc_par.sh BASE NEW K OUTDIR
B=$1; W=$2; K=$3; O=$4; mkdir -p $O; PY=${PY:-/work/main/.venv/bin/python}
for t in base:$B new:$W; do for n in 0 $K; do
  PYTHONHASHSEED=0 N=$n NP=1 PYTHONPATH=${t#*:} timeout 1800 valgrind --tool=callgrind \
    --callgrind-out-file=$O/${t%%:*}-$n.cg $PY "$(dirname "$0")/rx_ir.py" > $O/${t%%:*}-$n.log 2>&1 &
done; done; wait
for v in base new; do
  a=$(sed -n 's/.*Collected : //p' $O/$v-0.log); b=$(sed -n 's/.*Collected : //p' $O/$v-$K.log)
  echo "$v instr/msg $(( (b - a) / K ))"
done
