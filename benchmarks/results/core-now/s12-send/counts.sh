#!/bin/bash
# every deterministic count of this folder, base then new: counts.sh BASE NEW OUTDIR
B=${1:?}; N=${2:?}; O=${3:?}; D=$(dirname "$(readlink -f "$0")"); mkdir -p "$O"
for t in "$B" "$N"; do tag=$([ "$t" = "$B" ] && echo base || echo new)
  HALVES=tx bash "$D/cg.sh" "$t" 100 10 > "$O/tx-$tag.txt"
  AIOPDBP_NO_EXTENSIONS=1 HALVES=tx bash "$D/cg.sh" "$t" 100 10 > "$O/tx-pure-$tag.txt"
  bash "$D/pp.sh" "$t" 500 > "$O/pp-$tag.txt"
  AIOPDBP_NO_EXTENSIONS=1 bash "$D/pp.sh" "$t" 200 > "$O/pp-pure-$tag.txt"
done
