#!/bin/bash
# the final alternated A/Bs: base (main bd1f095) against /tmp/large11-s2 (wt/large11 27032e4), 3 rounds each
cd /work/wt/large11
PY=/work/main/.venv/bin/python
D=/tmp/large11-res/ab-final
(uptime; timeout 2400 $PY benchmarks/ab.py /tmp/large11-base /tmp/large11-s2 --repeats 3 -- pingpong --sizes 64K,1M --repeat 5 --impls aiopdbp,mpi4py; uptime) > $D/shm-64K-1M.txt 2>&1
(uptime; timeout 1200 $PY benchmarks/ab.py /tmp/large11-base /tmp/large11-s2 --repeats 3 -- pingpong --tcp --sizes 64K --repeat 5 --impls aiopdbp,mpi4py; uptime) > $D/tcp-64K.txt 2>&1
(uptime; timeout 1200 $PY benchmarks/ab.py /tmp/large11-base /tmp/large11-s2 --repeats 3 -- pingpong --sizes 8,4K --repeat 5 --impls aiopdbp,floor; uptime) > $D/small-8-4K.txt 2>&1
