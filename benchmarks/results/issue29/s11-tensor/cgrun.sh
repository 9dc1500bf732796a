#!/bin/bash
# cgrun.sh TREE KIND SIZE N OUTFILE : callgrind of N in-process round trips (instrumented around them only)
T=$1 KIND=$2 SIZE=$3 N=$4 OUT=$5
PYTHONHASHSEED=0 CG=1 PYTHONPATH=$T:${CGCTL:-/tmp/t13/cg} N=$N KIND=$KIND SIZE=$SIZE timeout 2400 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$OUT \
    /work/main/.venv/bin/python $(dirname "$0")/../s10/rt_ir.py > $OUT.log 2>&1
