#!/bin/bash
# AIOPDBP_MPIEXEC for cg32.sh: the real mpiexec with rankwrap.sh put before each rank's command (after -n N)
HERE=$(cd $(dirname $0) && pwd); args=(); prev=
for a in "$@"; do
  args+=("$a"); [ "$prev" = "-n" ] && args+=("$HERE/rankwrap.sh"); prev=$a
done
exec /work/main/.venv/bin/mpiexec "${args[@]}"
