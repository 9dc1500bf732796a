#!/bin/bash
# Alternated A/B of one environment setting: VAR=A then VAR=B, PAIRS times,
# each a `bench pingpong` job (its mpi4py row in the same job).
# bash env_ab.sh VAR A B PAIRS SIZES [extra bench options]
VAR=$1; A=$2; B=$3; PAIRS=$4; SIZES=$5; shift 5
for i in $(seq "$PAIRS"); do
  for v in "$A" "$B"; do
    echo "# pair $i $VAR=$v $(uptime)"
    env "$VAR=$v" timeout 600 nice -n 10 aiopdbp bench pingpong --sizes "$SIZES" --repeat 3 \
      --impls aiopdbp,mpi4py "$@" --out /tmp/large7/ab-$v-$i 2>&1 | grep "^| [0-9]"
  done
done
