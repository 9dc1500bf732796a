"""The send half alone: the median time of ``await gp.send`` (it completes
without suspending) in an in-process ping-pong of two nodes, per payload
kind.  PAYLOAD=bytes|ro|rw (8 B read-only numpy is what `bench pingpong`
sends), N round trips, R repeats (median of medians printed, in us)."""
import asyncio, os, statistics, time
import numpy as np
from aiopdbp.runtime.cluster import open_cluster

N = int(os.environ.get("N", "3000"))
R = int(os.environ.get("R", "5"))
SIZE = int(os.environ.get("SIZE", "8"))
KIND = os.environ.get("PAYLOAD", "ro")


def payload():
    raw = bytes(range(SIZE % 256)) * (SIZE // max(1, SIZE % 256)) if False else b"x" * SIZE
    if KIND == "bytes":
        return raw
    if KIND == "ro":
        return np.frombuffer(raw, dtype=np.uint8)
    return np.frombuffer(bytearray(raw), dtype=np.uint8)


async def main():
    ns = time.perf_counter_ns
    meds = []
    async with open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
            data = payload()

            async def echo():
                while True:
                    m = await b.recv()
                    if m.data is None:
                        return
                    await b.send("a", data)
            t = asyncio.ensure_future(echo())
            for r in range(R + 1):
                times = []
                for _ in range(N):
                    t0 = ns()
                    await a.send("b", data)
                    times.append(ns() - t0)
                    await a.recv()
                if r:
                    meds.append(statistics.median(times) / 1e3)
            await a.send("b", None)
            await t
    print("%.3f" % statistics.median(meds))

asyncio.run(main())
