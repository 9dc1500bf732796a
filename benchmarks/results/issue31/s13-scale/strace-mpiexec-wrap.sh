#!/bin/bash
args=(); prev=
for a in "$@"; do args+=("$a"); [ "$prev" = "-n" ] && args+=("$(dirname $0)/strace-rank.sh"); prev=$a; done
exec /work/main/.venv/bin/mpiexec "${args[@]}"
