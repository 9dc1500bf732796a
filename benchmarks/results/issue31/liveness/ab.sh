#!/bin/bash
# A/B alternated: A = main 34e58d2 (/tmp/scalelive-old, its compiled twins copied), B = wt/scalelive
PY=/work/wt/scalelive/.venv/bin/python
for round in 1 2; do
  for side in A B; do
    if [ $side = A ]; then dir=/tmp/scalelive-old; else dir=/work/wt/scalelive; fi
    cp /work/wt/scalelive/benchmarks/liveness_scale.py $dir/benchmarks/ 2>/dev/null
    cp /work/wt/scalelive/tests/mpi_scripts/watch_job.py $dir/tests/mpi_scripts/ 2>/dev/null
    echo "## $side round $round"
    (cd $dir && PYTHONPATH=$dir nice -n 10 $PY benchmarks/liveness_scale.py -n 16,32 --timeout 4 --json /tmp/scalelive/ab-$side-$round.json)
    uptime
  done
done
