"""One rank of ``bench scale``'s all-to-all job (``aiopdbp/bench/scale_job.py``'s rank, or with ``--raw``
``scale_raw.py``), with a callgrind mark (cgmark.so, env CGMARK) at each of its phase stamps, on the
ranks listed in env CGRANKS (``rankwrap.sh`` runs those under callgrind): the stamps are the only callers
of ``time.process_time`` in the job, so wrapping it marks main / init / open / registered / pattern / closed
(raw: main / init / open / pattern).  Run by ``cg32.sh``."""
import os
import sys
import time

if os.environ.get("CGMARK") and os.environ.get("PMI_RANK", "") in os.environ.get("CGRANKS", "").split():
    import ctypes
    _mark = ctypes.CDLL(os.environ["CGMARK"]).mark
    _mark.argtypes = [ctypes.c_char_p]
    _orig = time.process_time
    _count = [0]

    def _marked() -> float:
        _count[0] += 1
        _mark(f"stamp{_count[0]}".encode())
        return _orig()

    time.process_time = _marked

if "--raw" in sys.argv:
    import importlib.util, runpy  # noqa: E401
    spec = importlib.util.find_spec("aiopdbp")
    sys.argv = [sys.argv[0], *(a for a in sys.argv[1:] if a != "--raw")]
    runpy.run_path(os.path.join(os.path.dirname(spec.origin), "bench", "scale_raw.py"), run_name="__main__")
else:
    # ranks under callgrind run ~50x slower: the start-up and the job's waits get room (every rank alike)
    import aiopdbp.bench.scale_job as job
    import aiopdbp.runtime.node as node
    node.DEFAULT_NAME_TIMEOUT = 900.0
    job.TIMEOUT = 900.0
    raise SystemExit(job.main(["rank", *sys.argv[1:]]))
