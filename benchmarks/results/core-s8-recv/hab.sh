#!/bin/bash
# quick alternated A/B of 8 B hops: hab.sh ROUNDS variant=path ...
R=$1; shift
for i in $(seq $R); do for vp in "$@"; do v=${vp%%=*}; P=${vp#*=}
  echo "== $v $i $(uptime | sed 's/.*average: //')"
  (cd /tmp && PYTHONPATH=$P nice -n 10 "${PY:-/work/wt/recv10/.venv/bin/python}" -m aiopdbp bench pingpong --sizes 8 --repeat 3 --hops 2>&1 | grep -E "^\| 8 B \| (aiopdbp-ro|floor )|probe and|decoding|delivery|wake-up|one way|receive path|send path")
done; done
