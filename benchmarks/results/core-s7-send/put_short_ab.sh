#!/bin/bash
# put_short.py alternated between base (BASE, default /tmp/send9-base: baac7a0 with its
# extensions built in place) and this tree, compiled and pure, ROUNDS rounds, uptime after each.
# Usage: put_short_ab.sh OUTFILE [ROUNDS]
OUT=${1:?usage: put_short_ab.sh OUTFILE [ROUNDS]}; ROUNDS=${2:-3}
HERE=$(cd "$(dirname "$0")" && pwd); NEW=$(cd "$HERE/../../.." && pwd); BASE=${BASE:-/tmp/send9-base}
PY=$NEW/.venv/bin/python
cd /tmp
for i in $(seq "$ROUNDS"); do
  for v in base new; do
    d=$BASE; [ $v = new ] && d=$NEW
    echo "$v $i $(PYTHONPATH=$d nice -n 10 "$PY" "$HERE/put_short.py")" >> "$OUT"
    echo "${v}pure $i $(AIOPDBP_NO_EXTENSIONS=1 PYTHONPATH=$d nice -n 10 "$PY" "$HERE/put_short.py")" >> "$OUT"
    echo "$v $i $(uptime)" >> "$OUT"
  done
done
