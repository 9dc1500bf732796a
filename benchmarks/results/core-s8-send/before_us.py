"""The send half before the link's encoder: ``await gp.send`` to a GP on
another (in-process) node with the link's ``offer`` replaced by ``return True``
-- what is left is ``GP.send``, ``GP._send`` (checks, snapshot, credit cost,
burst count) and ``Router.try_send``.  PAYLOAD=bytes|ro|rw, SIZE bytes;
prints the median per send (ns) over R repeats of N sends."""
import asyncio, os, statistics, time
import numpy as np
from aiopdbp.runtime.cluster import open_cluster

N = int(os.environ.get("N", "20000"))
R = int(os.environ.get("R", "5"))
SIZE = int(os.environ.get("SIZE", "8"))
KIND = os.environ.get("PAYLOAD", "ro")


def payload():
    raw = b"x" * SIZE
    if KIND == "bytes":
        return raw
    if KIND == "ro":
        return np.frombuffer(raw, dtype=np.uint8)
    return np.frombuffer(bytearray(raw), dtype=np.uint8)


async def main():
    ns = time.perf_counter_ns
    async with open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
            data = payload()
            await a.send("b", data)   # the name known, the dtype's meta cached
            await b.recv()
            link = nodes[0]._link(1)
            orig = vars(link).get("offer")   # the sender's (an attribute), or None: the class's method
            link.offer = lambda pid, nbytes, fields: True  # (an instance attribute: it shadows the method)
            meds = []
            try:
                for r in range(R):
                    t = []
                    for _ in range(N):
                        t0 = ns()
                        await a.send("b", data)
                        t.append(ns() - t0)
                    meds.append(statistics.median(t))
            finally:
                if orig is None:
                    del link.offer
                else:
                    link.offer = orig
    print("%.0f" % statistics.median(meds))

asyncio.run(main())
