"""A first round trip against a warm one in the in-process cluster (one event loop: no
scheduler between the hosts, so this is the path's own work, hop by hop).

    PYTHONPATH=TREE python inproc_first.py [N] [WARM]

Node 0's GP "p-0" sends to "p-d" (d = 1..N-1, never looked up: cold), "p-d" answers; then
WARM warm round trips of the same pair.  Prints the median cold and warm round trip (ms)
and the control messages node 0 sent and received for the cold ones.
"""
from __future__ import annotations

import asyncio
import statistics
import sys
import time

from aiopdbp.runtime.cluster import open_cluster


async def main(n: int, warm: int) -> None:
    async with open_cluster(n) as nodes:
        gps = [await nodes[r].register(f"p-{r}", bind=True) for r in range(n)]
        cold: list[float] = []
        hot: list[float] = []

        async def echo(r: int) -> None:
            while True:
                msg = await gps[r].recv()
                await gps[r].send(msg.source, msg.data)

        tasks = [asyncio.create_task(echo(r)) for r in range(1, n)]
        for d in range(1, n):
            for j in range(1 + warm):
                t = time.perf_counter()
                await gps[0].send(f"p-{d}", b"x" * 256, timeout=30)
                await gps[0].recv(timeout=30)
                (cold if j == 0 else hot).append(time.perf_counter() - t)
        for task in tasks:
            task.cancel()
        sent = sum(v for kinds in nodes[0].stats().messages_sent.values() for k, v in kinds.items() if k != "data")
        print(f"N={n}: cold {statistics.median(cold) * 1e3:.3f} ms, warm {statistics.median(hot) * 1e3:.3f} ms, "
              f"cold/warm {statistics.median(cold) / statistics.median(hot):.1f}x; node 0 sent {sent} control messages")
        for gp in gps:
            await gp.free()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 16, int(sys.argv[2]) if len(sys.argv) > 2 else 10))
