#!/bin/bash
# every deterministic count of this folder for one tree: counts.sh TREE OUTFILE
# (each half of a 64 B message in the rate's shape, compiled: tx = the sending rank's send loop,
#  deliver = the block's flush on the sender + its read and placing on the receiver, rx = the
#  receiving rank's recv loop with the benchmark's per-message check (to s13), rx nocheck = the recv loop alone,
#  rx window = the recv loop with the bench's per-window check (s14))
T=${1:?}; O=${2:?}; D=$(dirname "$(readlink -f "$0")")
{ bash "$D/cg.sh" "$T" 100 10; RXMODE=nocheck HALVES=rx bash "$D/cg.sh" "$T" 100 10 | sed 's/rx      /rx-nocheck/'
  RXMODE=window HALVES=rx bash "$D/cg.sh" "$T" 100 10 | sed 's/rx      /rx-window/'; } > "$O"
