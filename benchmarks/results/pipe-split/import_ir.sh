#!/bin/bash
# import_ir.sh BASE NEW: instructions (callgrind, whole process) of `python -c "import X"`, alternated
PY=${PY:-/work/main/.venv/bin/python}
for mod in aiopdbp aiopdbp.transport aiopdbp.streams.protocol; do
  for t in "$@"; do
    n=$(cd /tmp && PYTHONHASHSEED=0 PYTHONPATH=$t valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        $PY -c "import $mod" 2>&1 | sed -n 's/.*Collected : //p')
    echo "$mod $t instructions $n"
  done
done
