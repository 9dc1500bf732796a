#!/bin/bash
# Every figure of issue 27's target table, with the commands of core-baseline/README.md,
# on the machine as it is now (run it with nothing else running: `uptime` is recorded).
# Usage: run.sh OUTDIR  (from a checkout whose venv is active: `aiopdbp` on PATH)
set -u
OUT=${1:?usage: run.sh OUTDIR}; mkdir -p "$OUT"
step() { local f=$1; shift; echo "\$ $*" > "$OUT/$f"; uptime >> "$OUT/$f"; timeout 900 "$@" >> "$OUT/$f" 2>&1; echo "rc=$?" >> "$OUT/$f"; }
aiopdbp info > "$OUT/info.txt" 2>&1
step pingpong.txt aiopdbp bench pingpong --sizes 8,4K,64K,1M,16M --repeat 5 --hops
step tcp.txt aiopdbp bench pingpong --tcp --sizes 64K,1M,16M --repeat 5 --impls aiopdbp,mpi4py,floor
step rate.txt aiopdbp bench -n 2 --tests rate --repeat 5 --no-plots --out "$OUT/rate"
step nton.txt aiopdbp bench -n 2 --tests NtoN --sizes 64,291,1K --repeat 5 --no-plots --out "$OUT/nton"
step streams.txt aiopdbp bench streams --out "$OUT/streams"
step streams4.txt aiopdbp bench streams -n 4 --sizes 4K --repeat 5 --out "$OUT/streams4"
uptime > "$OUT/load-after.txt"
