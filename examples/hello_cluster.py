"""The smallest aiopdbp program that runs unchanged on one or many ranks::

    python examples/hello_cluster.py                     # one rank: a ring of one
    aiopdbp launch -n 4 examples/hello_cluster.py        # four ranks

One GP per rank, ``hello-<rank>``.  Each sends a message to the next GP of
the ring and receives one from the previous; each streams an array to
``hello-0``; all meet at a barrier; rank 0 prints a summary.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import numpy as np

import aiopdbp
from aiopdbp.sync import Barrier


async def main() -> int:
    async with aiopdbp.open_node() as node:                  # MPI when launched, else local
        rank, size = node.rank, node.size
        names = [f"hello-{r}" for r in range(size)]
        async with node.process(names[rank]) as gp:
            # 1. ring: a message to the next GP (waiting up to 30 s for it to exist)
            await gp.send(names[(rank + 1) % size], f"hello from {gp.name}".encode(), timeout=30)
            # 2. a stream to rank 0 (in a task: hello-0 streams to itself too)
            data = np.full(1000, rank, dtype=np.int32)
            sending = asyncio.create_task(gp.send_stream(names[0], data, timeout=30))
            ring = ""
            streams: dict[str, np.ndarray[Any, Any]] = {}
            while not ring or (rank == 0 and len(streams) < size):
                item = await gp.recv(timeout=30)
                if isinstance(item, aiopdbp.Message):
                    ring = f"{item.source} -> {gp.name}: {bytes(item.data).decode()!r}"
                else:
                    streams[item.source] = await item.read()
            await sending
            # 3. everybody meets at a barrier
            async with Barrier(gp, "hello", names, timeout=30) as bar:
                await bar.wait()
            if rank == 0:
                ok = all(int(a.sum()) == 1000 * int(src.split("-")[1]) for src, a in streams.items())
                print(f"hello_cluster: {size} rank(s), one GP each", flush=True)
                print(f"ring: {ring}", flush=True)
                print(f"streams to hello-0: {len(streams)} x {data.nbytes} bytes, "
                      f"{'all correct' if ok else 'WRONG'}", flush=True)
                print(f"barrier: all {size} GPs passed", flush=True)
                return 0 if ok and len(streams) == size else 1
    return 0


if __name__ == "__main__":
    sys.exit(aiopdbp.run(main()))
