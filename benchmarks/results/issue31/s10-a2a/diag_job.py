"""``bench scale``'s rank program with finer stamps (diagnostics for issue 31, s10-a2a).

Run as the rank program of ``aiopdbp launch -n N diag_job.py rank --pattern alltoall
--out D --launched T``: the same program as ``aiopdbp.bench.scale_job`` (imported from
PYTHONPATH), with each barrier, the round trips and the pattern wrapped so that every
rank also writes ``D/diag-RANK.json``: at each stamp the wall since launch, this
process's CPU, its voluntary / involuntary context switches (getrusage) and the
progress engine's counters."""
import json
import os
import resource
import sys
import time

from aiopdbp.bench import scale_job as sj

MARKS = []
STATE = {"launched": 0.0, "node": None, "out": None}
KEYS = ("steps", "spins", "idle_sleeps", "wakeups", "sends", "recvs", "drives", "driven_steps",
        "rings_heard", "rings_sent")


PERF = {"proc": None}


def _perf(name):
    """``DIAG_PERF=FILE``: rank 0 records every CPU (``perf record -a -g``) from its open to the pattern's end (perf takes a while to start)."""
    out = os.environ.get("DIAG_PERF")
    if not out or os.environ.get("PMI_RANK") != "0":
        return
    import signal
    import subprocess
    if name == "open":
        PERF["proc"] = subprocess.Popen(["perf", "record", "-F", "999", "-a", "-g", "-o", out],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    elif name == "pattern>" and PERF["proc"] is not None:
        PERF["proc"].send_signal(signal.SIGINT)
        PERF["proc"].wait()


PROF = {"p": None}


def _prof(name):
    """``DIAG_PROFILE=DIR``: every rank runs cProfile over the pattern, into DIR/prof-RANK."""
    out = os.environ.get("DIAG_PROFILE")
    if not out:
        return
    import cProfile
    if name == "pattern<":
        PROF["p"] = cProfile.Profile(time.thread_time)  # CPU, not wall: 32 ranks share 2 cores
        PROF["p"].enable()
    elif name == "pattern>" and PROF["p"] is not None:
        PROF["p"].disable()
        PROF["p"].dump_stats(os.path.join(out, f"prof-{os.environ.get('PMI_RANK', '0')}"))


def mark(name):
    _perf(name)
    _prof(name)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    node = STATE["node"]
    eng = {}
    if node is not None:
        t = node.stats().transport
        eng = {k: t.get(k, 0) for k in KEYS}
    MARKS.append({"name": name, "wall": time.time() - STATE["launched"], "mono": time.monotonic(), "cpu": time.process_time(),
                  "nvcsw": ru.ru_nvcsw, "nivcsw": ru.ru_nivcsw, "eng": eng})


class _Wrap:
    def __init__(self, cm):
        self.cm = cm

    async def __aenter__(self):
        node = await self.cm.__aenter__()
        STATE["node"] = node
        mark("open")
        return node

    async def __aexit__(self, *exc):
        mark("closing")
        STATE["node"] = None
        return await self.cm.__aexit__(*exc)


_open = sj.open_node
sj.open_node = lambda *a, **k: _Wrap(_open(*a, **k))


def wrap(fn, label):
    async def inner(*a, **k):
        mark(f"{label}<")
        try:
            return await fn(*a, **k)
        finally:
            mark(f"{label}>")
    return inner


sj._barrier = wrap(sj._barrier, "barrier")
sj._round_trips = wrap(sj._round_trips, "rtt")
sj._pattern = wrap(sj._pattern, "pattern")

if __name__ == "__main__":
    argv = sys.argv[1:]
    STATE["launched"] = float(argv[argv.index("--launched") + 1])
    out = argv[argv.index("--out") + 1]
    mark("main")
    rc = sj.main(argv)
    rank = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    with open(os.path.join(out, f"diag-{rank}.json"), "w") as f:
        json.dump(MARKS, f)
    raise SystemExit(rc)
