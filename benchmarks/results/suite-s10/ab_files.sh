#!/usr/bin/env bash
# ab_files.sh TAG FILES...: run FILES in the base tree and in suite12 at the same time
# (same period, same load); per-test durations to /tmp/suite12/TAG-{base,after}.jsonl
set -u
TAG=$1; shift
FILES=("$@")
PY=/work/main/.venv/bin/python
run() {  # TREE NAME
    ( cd "$1" && PYTHONPATH="$1:/tmp/suite12/plug" S12_TIMES=/tmp/suite12/$TAG-$2.jsonl \
      /usr/bin/time -f "$2 wall %e s" timeout 1500 $PY -m pytest -q -p no:cacheprovider -p s12times "${FILES[@]}" \
      > /tmp/suite12/$TAG-$2.log 2>&1; echo "rc=$?" >> /tmp/suite12/$TAG-$2.log )
}
uptime > /tmp/suite12/$TAG.uptime
run /tmp/suite12-base base &
run /work/wt/suite12 after &
wait
uptime >> /tmp/suite12/$TAG.uptime
