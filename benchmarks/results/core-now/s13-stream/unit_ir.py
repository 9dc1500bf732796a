"""4 KiB units from GP a to GP b on two in-process hosts (open_cluster: the
host link, short records and the arrivals as between ranks, an in-process
fabric for MPI), as ``bench streams`` moves them: KIND=stream (send_stream,
the receiver read()s) or KIND=msg (gp.send, the receiver takes .data); 16
calls in flight.  N units after a warm-up, for instruction counting under
callgrind (N=0 vs N=K: instructions per unit, both sides) or, with PROF=file,
a cProfile of the N units.  With CGLIB (a cg_toggle library: cgtoggle.c) callgrind collects
only the N measured units (run it with --collect-atstart=no): the total / N is per unit."""
import asyncio
import ctypes
import gc
import os

import numpy as np

from aiopdbp.runtime.cluster import open_cluster

KIND = os.environ.get("KIND", "stream")
N = int(os.environ.get("N", "2000"))
SIZE = int(os.environ.get("SIZE", "4096"))
INFLIGHT = int(os.environ.get("INFLIGHT", "16"))
DATA = np.full(SIZE, 7, dtype=np.uint8)


async def once(a, b, units):
    it = iter(range(units))

    async def sender():
        for _ in it:
            if KIND == "stream":
                await a.send_stream("b", DATA, segment_size=SIZE)
            else:
                await a.send("b", DATA)

    async def receiver():
        for _ in range(units):
            item = await b.recv()
            got = await item.read() if KIND == "stream" else item.data
            if got.nbytes != SIZE:
                raise AssertionError("wrong size")

    await asyncio.gather(receiver(), *(sender() for _ in range(INFLIGHT)))


async def main():
    async with open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
            await a.lookup("b") if hasattr(a, "lookup") else None
            await once(a, b, 500)
            gc.collect()
            gc.disable()
            prof = None
            if os.environ.get("PROF"):
                import cProfile
                prof = cProfile.Profile()
                prof.enable()
            toggle = ctypes.CDLL(os.environ["CGLIB"]).cg_toggle if os.environ.get("CGLIB") else None
            if toggle:
                toggle()
            await once(a, b, N)
            if toggle:
                toggle()
            if prof is not None:
                prof.disable()
                prof.dump_stats(os.environ["PROF"])
            gc.enable()

asyncio.run(main())
