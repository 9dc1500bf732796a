"""The receive half of a 4 KiB unit in one process (for callgrind: N=0 vs N=K
gives instructions per unit): the frame another host sent, through the
inbound side's ``on_data`` (decode, the arrivals, the GP's pipe), then the
GP's ``recv`` and, for KIND=stream, ``read()`` -- as ``bench streams``
receives.  KIND=msg: the same bytes as a message (``item.data``).  The frame
is captured from a real send between two in-process hosts (open_cluster)."""
import asyncio
import gc
import os

import numpy as np

from aiopdbp.runtime.cluster import open_cluster

KIND = os.environ.get("KIND", "stream")
N = int(os.environ.get("N", "2000"))
SIZE = int(os.environ.get("SIZE", "4096"))
DATA = np.full(SIZE, 7, dtype=np.uint8)


async def main():
    async with open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
            arr = nodes[1].arrivals
            od = nodes[1]._remote.inbound.on_data
            got = []
            orig = arr.place_shorts

            def spy(src, buf):
                got.append((src, bytes(buf)))
                return orig(src, buf)
            arr.place_shorts = spy
            for _ in range(3):
                if KIND == "stream":
                    await a.send_stream("b", DATA, segment_size=SIZE)
                    await (await b.recv()).read()
                else:
                    await a.send("b", DATA)
                    (await b.recv()).data
            del arr.place_shorts
            src, frame = got[-1]
            bufs = [memoryview(bytearray(frame)) for _ in range(N)]
            recv = b.recv
            gc.collect()
            gc.disable()
            if KIND == "stream":
                for mv in bufs:
                    od(src, mv)
                    await (await recv()).read()
            else:
                for mv in bufs:
                    od(src, mv)
                    (await recv()).data
            gc.enable()

asyncio.run(main())
