"""The receiver's marks and credit book, old against new, alternated (thread CPU ns per message, medians).

    python arrivals_ab.py OLD_CHECKOUT NEW_CHECKOUT [--rounds 9]

Each round runs a child per checkout (``PYTHONPATH`` set to it, old first,
then new): one host streams 64 B messages to one GP in batches of 64 (a
block's worth; 4 KiB ones in pairs), 16 batches arrive, then the reader
takes them all; with and without an ask outstanding (a parked sender).  The child times
``Arrivals.deliver_remote`` + ``Pipe.receive_nowait`` (with the marks,
``settle`` and the compiled ``CreditBook``) with ``time.thread_time_ns``.
"""
import json
import os
import statistics
import subprocess
import sys

CHILD = r'''
import json, time
from aiopdbp.hosts.tables import Tables
from aiopdbp.routing.arrivals import Arrivals
from aiopdbp.routing.pipes import PipePool
from aiopdbp.wire.message import CREDIT_OVERHEAD, Message
from aiopdbp.wire.mesp import Kind
PID = 7
def run(ask, size, per):
    pipe = PipePool(4, 4).apply_nowait()
    grants = []
    a = Arrivals(Tables(), {PID: pipe}, 0, window=1 << 20, grant=lambda h, g: grants.append(g))
    a.grants_at_once = True
    batch = [Message(("s", Kind.SHORT, 0, b"x" * size, 3)) for _ in range(per)]
    cost = per * (size + CREDIT_OVERHEAD)
    t = time.thread_time_ns()
    for _ in range(200):
        for _ in range(16):
            a.deliver_remote(1, PID, batch, cost)
        if ask:
            a.on_ask(1, PID)
        for _ in range(16 * per):
            pipe.receive_nowait()
    return (time.thread_time_ns() - t) / (200 * 16 * per), len(grants)
out = {}
for size, per in ((64, 64), (4096, 2)):
    for ask in (False, True):
        ns, g = run(ask, size, per)
        out[f"{size}B{' ask' if ask else ''}"] = [round(ns, 1), g]
print(json.dumps(out))
'''


def main() -> None:
    old, new = sys.argv[1:3]
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 9
    res = {"old": [], "new": []}
    for _ in range(rounds):
        for k, tree in (("old", old), ("new", new)):
            env = dict(os.environ, PYTHONPATH=tree)
            r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
            res[k].append(json.loads(r.stdout))
    for case in res["old"][0]:
        o = statistics.median(x[case][0] for x in res["old"])
        n = statistics.median(x[case][0] for x in res["new"])
        print(f"{case:9s}: old {o:6.1f} ns/msg ({res['old'][0][case][1]} grants)  new {n:6.1f} ns/msg "
              f"({res['new'][0][case][1]} grants)  {n / o:.3f}x  load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
