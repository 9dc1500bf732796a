#!/bin/bash
# cgrun.sh TREE KIND SIZE N OUTFILE : callgrind of N in-process round trips (rt_ir.py; instrumented around them only)
# CGCTL: a folder with cgctl built (s10's cgctl.pyx: CALLGRIND_START/STOP_INSTRUMENTATION)
T=$1 KIND=$2 SIZE=$3 N=$4 OUT=$5
PYTHONHASHSEED=0 CG=1 PYTHONPATH=$T:${CGCTL:-/tmp/t13/cg} N=$N KIND=$KIND SIZE=$SIZE timeout 2400 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$OUT \
    /work/main/.venv/bin/python $(dirname "$(readlink -f "$0")")/rt_ir.py > $OUT.log 2>&1
sed -n 's/.*Collected : //p' $OUT.log
