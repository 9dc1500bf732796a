"""The scale benchmark's rank programs, by hand (``aiopdbp bench scale`` runs them for you).

    aiopdbp launch -n 16 benchmarks/scale_alltoall.py --out DIR                 # aiopdbp, all-to-all
    aiopdbp launch -n 16 benchmarks/scale_alltoall.py --pattern ring --out DIR  # the ring variant
    aiopdbp launch -n 16 benchmarks/scale_alltoall.py --raw --out DIR           # raw mpi4py twin

Each rank writes its figures (open time, peak RSS, registration messages,
round trips) to ``DIR/aiopdbp-RANK.json`` or ``DIR/raw-RANK.json``; see
:mod:`aiopdbp.bench.scale_job` and ``aiopdbp/bench/scale_raw.py``.  The raw
program is run by path, so that this wrapper imports nothing of aiopdbp for it.
"""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path

if __name__ == "__main__":
    args = sys.argv[1:]
    if "--raw" in args:
        spec = importlib.util.find_spec("aiopdbp")  # locates, does not import, the package
        assert spec is not None and spec.origin is not None, "aiopdbp is not installed"
        sys.argv = [sys.argv[0], *(a for a in args if a != "--raw")]
        runpy.run_path(str(Path(spec.origin).parent / "bench" / "scale_raw.py"), run_name="__main__")
    else:
        from aiopdbp.bench.scale_job import main

        raise SystemExit(main(["rank", *args]))
