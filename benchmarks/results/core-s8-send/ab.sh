#!/bin/bash
# A/B alternated, eighth session (wt/send10, the send half of an 8 B message).
# base = 6b957f4 (main at the session's start), new = a commit of wt/send10; each in
# a worktree with its extensions built in place:
#   git worktree add /tmp/send10-base 6b957f4 && cd /tmp/send10-base &&
#     /work/wt/send10/.venv/bin/python setup.py build_ext --inplace   (the same for NEW)
# Each round runs, per variant: bench pingpong --sizes 8,4K --repeat 3 --hops, thread
# CPU per in-process round trip (core-arrivals/cpu_pp.py), and this folder's send-half
# micro benchmarks (send_us.py: await gp.send in an in-process ping-pong; before_us.py:
# the same with the link's offer stubbed); `uptime` after each.  Variants base, new,
# and basepure/pure (AIOPDBP_NO_EXTENSIONS=1).  Usage: ab.sh OUTDIR [ROUNDS];
# summarise with summ.py OUTDIR [VARIANTS].
OUT=${1:?usage: ab.sh OUTDIR [ROUNDS]}; ROUNDS=${2:-3}; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd); BASE=${BASE:-/tmp/send10-base}; NEW=${NEW:-/tmp/send10-new}
PY=${PY:-/work/wt/send10/.venv/bin/python}
cd /tmp
py() { local v=$1; shift
  case $v in
    base) PYTHONPATH=$BASE nice -n 10 "$PY" "$@" ;;
    new) PYTHONPATH=$NEW nice -n 10 "$PY" "$@" ;;
    pure) AIOPDBP_NO_EXTENSIONS=1 PYTHONPATH=$NEW nice -n 10 "$PY" "$@" ;;
    basepure) AIOPDBP_NO_EXTENSIONS=1 PYTHONPATH=$BASE nice -n 10 "$PY" "$@" ;;
  esac; }
uptime > "$OUT/load.txt"
for i in $(seq "$ROUNDS"); do
  for v in ${VARIANTS:-base new basepure pure}; do
    echo "== $v run $i" >> "$OUT/hops-$v.txt"
    [ -n "$MICRO_ONLY" ] || py $v -m aiopdbp bench pingpong --sizes 8,4K --repeat 3 --hops >> "$OUT/hops-$v.txt" 2>&1
    echo "cpu_pp $(N=5000 py $v "$HERE/../core-arrivals/cpu_pp.py" 2>&1)" >> "$OUT/micro-$v.txt"
    for k in bytes ro rw; do
      echo "send_us $k $(PAYLOAD=$k py $v "$HERE/send_us.py" 2>&1)" >> "$OUT/micro-$v.txt"
      echo "before_ns $k $(PAYLOAD=$k py $v "$HERE/before_us.py" 2>&1)" >> "$OUT/micro-$v.txt"
    done
    echo "$v $i $(uptime)" >> "$OUT/load.txt"
  done
done
