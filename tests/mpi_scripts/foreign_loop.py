"""A program that opens its node under another event loop than aiopdbp.run.

    mpiexec -n 2 python tests/mpi_scripts/foreign_loop.py asyncio|uvloop|runner [raise|clean]

``raise``: rank 1 raises KeyError inside its GP while rank 0 waits in recv()
for a message that never comes -- the job must end as under aiopdbp.run (rank
1's traceback, every rank's one line, a non-zero exit), not hang.
``clean``: both ranks exchange a message and end normally (exit 0).
"""

from __future__ import annotations

import asyncio
import sys

import aiopdbp

LOOP, MODE = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "raise")


async def main() -> None:
    async with aiopdbp.open_node() as node:
        async with node.process(f"g{node.rank}") as gp:
            if MODE == "clean":
                await gp.send(f"g{1 - node.rank}", b"hi")
                msg = await gp.recv()
                print(f"rank {node.rank} got {msg.data!r}", flush=True)
                return
            if node.rank == 1:
                await node.lookup("g0", timeout=30)
                raise KeyError("missing")
            await gp.recv()   # never comes: rank 1 fails instead


if LOOP == "asyncio":
    asyncio.run(main())
elif LOOP == "uvloop":
    import uvloop

    uvloop.run(main())
else:
    with asyncio.Runner() as runner:
        runner.run(main())
