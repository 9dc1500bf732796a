import asyncio, os, time, statistics, json
import numpy as np
import aiopdbp
from aiopdbp.transport.progress import ProgressEngine
from aiopdbp.hosts.inbound import Inbound
ns = time.perf_counter_ns
SIZE = int(os.environ.get("SIZE", "65536")); N = int(os.environ.get("N", "2000"))
S = {k: [] for k in ("send", "post", "sent", "head", "rpost", "landed", "recv", "deliver", "rpost_ret", "step_ret")}
def wrap(cls, name, key):
    orig = getattr(cls, name)
    def w(*a, **k):
        S[key].append(ns()); return orig(*a, **k)
    setattr(cls, name, w)
wrap(ProgressEngine, "post_bulk_send", "post"); wrap(ProgressEngine, "post_bulk_recv", "rpost")
wrap(Inbound, "on_data", "head"); wrap(Inbound, "_landed", "landed")
from aiopdbp.routing.arrivals import Arrivals
wrap(Arrivals, "deliver_remote", "deliver")
_o = ProgressEngine.post_bulk_recv
def _w(*a, **k):
    r = _o(*a, **k); S["rpost_ret"].append(ns()); return r
ProgressEngine.post_bulk_recv = _w
_os = ProgressEngine.step
_flag = [False]
def _ws(self):
    n = len(S["landed"]); r = _os(self)
    if len(S["landed"]) != n: S["step_ret"].append(ns())
    return r
ProgressEngine.step = _ws
async def main():
    async with aiopdbp.open_node() as node:
        rank = node.rank
        async with node.process("g%d" % rank) as gp:
            peer = "g%d" % (1 - rank)
            data = np.ones(SIZE, np.uint8)
            async def loop(n):
                for i in range(n):
                    if rank == 0:
                        S["send"].append(ns()); await gp.send(peer, data); S["sent"].append(ns())
                        m = await gp.recv(); S["recv"].append(ns())
                    else:
                        m = await gp.recv(); S["recv"].append(ns())
                        S["send"].append(ns()); await gp.send(peer, m.data); S["sent"].append(ns())
            await loop(200)
            for v in S.values(): v.clear()
            await loop(N)
            out = node.transport  # noqa
            import mpi4py.MPI as MPI
            allS = MPI.COMM_WORLD.gather({k: v[-N:] for k, v in S.items()}, root=0)
            if rank == 0:
                def hop(s, r):
                    a, b = allS[s], allS[r]
                    rows = {
                     "send -> payload posted (sender)": [p - q for p, q in zip(a["post"], a["send"])],
                     "posted -> header seen (receiver)": [p - q for p, q in zip(b["head"], a["post"])],
                     "header -> payload recv posted": [p - q for p, q in zip(b["rpost"], b["head"])],
                     "recv posted -> landed": [p - q for p, q in zip(b["landed"], b["rpost"])],
                     "landed -> deliver_remote": [p - q for p, q in zip(b["deliver"], b["landed"])],
                     "deliver_remote -> post_bulk_recv returned": [p - q for p, q in zip(b["rpost_ret"], b["deliver"])],
                     "post_bulk_recv returned -> step returned": [p - q for p, q in zip(b["step_ret"], b["rpost_ret"])],
                     "step returned -> recv returned": [p - q for p, q in zip(b["recv"], b["step_ret"])],
                     "send returned (owned done) - posted": [p - q for p, q in zip(a["sent"], a["post"])],
                    }
                    return {k: statistics.median(v) / 1e3 for k, v in rows.items()}
                for s, r in ((0, 1), (1, 0)):
                    print(f"hop {s}->{r}:", json.dumps({k: round(v, 2) for k, v in hop(s, r).items()}))
aiopdbp.run(main())
