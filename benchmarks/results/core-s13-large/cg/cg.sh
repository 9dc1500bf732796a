#!/bin/bash
# callgrind of large_hops.py, both ranks, collecting only inside the compiled entry points
#   cg.sh TREE OUTPREFIX SIZE ITERS
T=${1:?}; O=${2:?}; S=${3:-64K}; N=${4:-60}
cd $T
PYTHONPATH=$T timeout 900 /work/main/.venv/bin/mpiexec -n 2 valgrind --tool=callgrind --collect-atstart=no \
  --toggle-collect='__pyx_pw_7aiopdbp_5hosts_7csender_10LinkSender_5owned' \
  --toggle-collect='__pyx_pw_7aiopdbp_9transport_7ckernel_6Prober_*probe' \
  --callgrind-out-file=$O.%p /work/main/.venv/bin/python $T/benchmarks/results/core-s13-large/large_hops.py --sizes $S --iters $N
