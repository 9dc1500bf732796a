"""A rank's start-up in phases, for callgrind (``phases.sh``): the same imports and calls as
``aiopdbp/bench/scale_job.py``'s rank up to its first barrier, with a ``CALLGRIND_DUMP_STATS_AT``
mark (cgmark.so, env CGMARK) at each phase's end: imports / run (``aiopdbp.run`` until the
coroutine starts) / init (``open_node()``: MPI initialised) / open (the start-up exchange) /
registered (a GP registered, one message round with the next rank) /
closed.  Run with ``mpiexec -n 2 valgrind --tool=callgrind ... python probe_open.py``."""
import os
if os.environ.get("CGMARK"):
    import ctypes
    _m = ctypes.CDLL(os.environ["CGMARK"]).mark
    _m.argtypes = [ctypes.c_char_p]
else:   # no callgrind: each phase's CPU (user, sys) and minor page faults, printed at the end
    import resource, sys, time
    _marks = []

    def _m(label: bytes) -> None:
        r = resource.getrusage(resource.RUSAGE_SELF)
        _marks.append((label.decode(), time.time(), r.ru_utime, r.ru_stime, r.ru_minflt))
        if label == (b"4-open" if "probe_raw" in __file__ else b"6-closed"):
            prev = (0, 0, 0, 0)
            for name, _, u, s, f in _marks:
                print(f"phase {name:13} user {u - prev[0]:.4f} sys {s - prev[1]:.4f} minflt {f - prev[2]}")
                prev = (u, s, f, 0)
_m(b"0-start")
import argparse, asyncio, json, resource, time  # noqa: E401  (scale_job's)
from aiopdbp.runtime.job import run
from aiopdbp.runtime.node import open_node
from aiopdbp.runtime.process import GP  # noqa: F401
from aiopdbp.wire.message import Message  # noqa: F401
_m(b"1-imports")


async def main() -> int:
    _m(b"2-run")
    opening = open_node()
    _m(b"3-init")
    async with opening as node:
        _m(b"4-open")
        async with node.process(f"p{node.rank}") as gp:
            peer = f"p{(node.rank + 1) % node.size}"
            await gp.send(peer, b"x" * 256, timeout=120)
            await gp.recv(timeout=120)
            _m(b"5-registered")
            await gp.send(peer, b"x" * 256, timeout=120)
            await gp.recv(timeout=120)
    _m(b"6-closed")
    return 0


raise SystemExit(run(main()))
