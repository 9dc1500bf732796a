#!/bin/bash
# after the shared-memory A/B (run.sh's first command): --tcp 64K and 8 B / 4 KiB, 2 alternated rounds each (time left)
cd /work/wt/large11
PY=/work/main/.venv/bin/python
D=/tmp/large11-res/ab-final
while pgrep -f "benchmarks/ab.py /tmp/large11-base /tmp/large11-s2 --repeats 3" > /dev/null; do sleep 5; done
(uptime; timeout 900 $PY benchmarks/ab.py /tmp/large11-base /tmp/large11-s2 --repeats 2 -- pingpong --tcp --sizes 64K --repeat 5 --impls aiopdbp,mpi4py; uptime) > $D/tcp-64K.txt 2>&1
(uptime; timeout 900 $PY benchmarks/ab.py /tmp/large11-base /tmp/large11-s2 --repeats 2 -- pingpong --sizes 8,4K --repeat 5 --impls aiopdbp,mpi4py; uptime) > $D/small-8-4K.txt 2>&1
