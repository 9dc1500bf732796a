#!/bin/bash
# callgrind of cgpp.py (a plain ping-pong), both ranks, collecting only inside the compiled
# send's awaitable (csendpath's am_send: gp.send's every step, the owned send's route, the
# link's owned, its wait) and the receive of a landed payload (ArraysIn.take: header seen
# before -> payload landed -> delivered)
#   cg.sh TREE OUTPREFIX SIZE ITERS
T=${1:?}; O=${2:?}; S=${3:-65536}; N=${4:-100}
cd $T
PYTHONPATH=$T timeout 900 /work/main/.venv/bin/mpiexec -n 2 valgrind --tool=callgrind --collect-atstart=no \
  --toggle-collect='__pyx_f_7aiopdbp_7runtime_9csendpath__am_send' \
  --toggle-collect='__pyx_pw_7aiopdbp_5hosts_8csplitin_8ArraysIn_5take' \
  --callgrind-out-file=$O.%p /work/main/.venv/bin/python /work/wt/large16/benchmarks/results/core-now/s14-large/cg/cgpp.py $S $N
