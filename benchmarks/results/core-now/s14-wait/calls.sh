#!/bin/bash
# Python calls per in-process 8 B round trip (cProfile; deterministic): calls.sh TREE...
# both forms, parked and driven
D=$(dirname "$(readlink -f "$0")")
for t in "$@"; do for pure in "" 1; do for d in "" 1; do
  f=compiled; [ -n "$pure" ] && f=pure; w=parked; [ -n "$d" ] && w=driven
  (cd $t; echo "$t $f $w: $(AIOPDBP_NO_EXTENSIONS=$pure PROFILE=1 DRIVE=$d N=200 PYTHONPATH=$t timeout 300 /work/main/.venv/bin/python $D/pingpong_ir.py)")
done; done; done
