#!/bin/bash
# Alternated A/B of MPICH's CMA single-copy path for intranode rendezvous:
# MPIR_CVAR_CH4_CMA_ENABLE=0 (MPICH's default) then =1, PAIRS times, each a
# `bench pingpong` job whose mpi4py row runs under the same setting.
# bash cma_ab.sh PAIRS SIZES [extra bench options]
PAIRS=$1; SIZES=$2; shift 2
for i in $(seq "$PAIRS"); do
  for c in 0 1; do
    echo "# pair $i CMA=$c $(uptime)"
    MPIR_CVAR_CH4_CMA_ENABLE=$c timeout 600 nice -n 10 aiopdbp bench pingpong --sizes "$SIZES" --repeat 3 \
      --impls aiopdbp,mpi4py "$@" --out /tmp/large7/cma-$c-$i 2>&1 | grep "^| [0-9]"
  done
done
