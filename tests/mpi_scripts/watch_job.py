"""A job for liveness at scale: every rank opens its node with
``host_timeout`` = argv[1] seconds, registers ``w<rank>``, finds its ring
successor's GP, says ``ready <pid>``; after ``beats_s`` = argv[2] s of
quiet it says ``beats <heartbeats sent> <seconds since ready>``; then it
waits for a lost host and says ``LOST <rank> after <s>: <error>`` (the job
is then aborted: nothing after it is expected).
"""
import asyncio
import os
import sys
import time

import aiopdbp


async def main(timeout: float, beats_s: float) -> None:
    async with aiopdbp.open_node(host_timeout=timeout) as node:
        async with node.process(f"w{node.rank}"):
            await node.lookup(f"w{(node.rank + 1) % node.size}")
            sent0 = node.stats().liveness.get("sent", 0)
            t0 = time.monotonic()
            print(f"ready {os.getpid()}", flush=True)
            lost = asyncio.ensure_future(node.host_lost())
            done, _ = await asyncio.wait([lost], timeout=beats_s)
            if not done:
                sent = node.stats().liveness.get("sent", 0) - sent0
                print(f"beats {sent} {time.monotonic() - t0:.3f}", flush=True)
            t1 = time.monotonic()
            rank, err = await lost
            print(f"LOST {rank} after {time.monotonic() - t1:.2f}: {err}", flush=True)
            await asyncio.sleep(3600)   # the job is aborted before this ends


aiopdbp.run(main(float(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 0.0))
