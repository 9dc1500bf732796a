"""Stall watch over MPI (stall_timeout 1 s, a 64 KiB per-GP window).

``cycle``: two GPs on two ranks each send 4 windows to the other before
receiving (an application deadlock any bounded design allows).  Each rank
prints its DeadlockError's cycle as one JSON line and re-raises: the job
fails.  ``slow``: rank 1 is a slow receiver (it starts reading 2.5 s late);
rank 0's sends stall, are reported and complete: the job succeeds.
``streams``: each GP sends the other a 1 MiB stream (it returns once read)
before receiving: the same cycle, through the streams' DONE waits.
"""
import asyncio
import json
import os
import sys

import aiopdbp
from aiopdbp.hosts.remote import RemoteConfig

WINDOW = 64 << 10
SIZE = 4096
N = 4 * WINDOW // SIZE


def result(**kv: object) -> None:
    os.write(1, f"RESULT {json.dumps(kv)}\n".encode())  # one write: ranks' lines never merge


async def main(mode: str) -> None:
    async with aiopdbp.open_node(remote=RemoteConfig(gp_window=WINDOW), stall_timeout=1.0) as node:
        me, other = f"g{node.rank}", f"g{1 - node.rank}"
        async with node.process(me) as gp:
            await node.lookup(other, timeout=30)
            if mode == "slow" and node.rank == 1:
                await asyncio.sleep(2.5)                  # the scenario: a reader that is late
                got = [int.from_bytes((await gp.recv()).data[:4], "little") for _ in range(N)]
                result(rank=1, ok=got == list(range(N)), stall=node.stats().stall)
                await gp.send(other, b"done")
                return
            try:
                if mode == "streams":
                    await gp.send_stream(other, bytes(1 << 20))
                    await (await gp.recv()).read()
                    return
                for i in range(N):
                    await gp.send(other, i.to_bytes(4, "little") * (SIZE // 4))
            except aiopdbp.DeadlockError as exc:
                result(rank=node.rank, cycle=[[e.gp, e.rank, e.waits_for, e.waits_for_rank, e.resource]
                                              for e in exc.cycle])
                raise
            if mode == "slow":
                await gp.recv()
                result(rank=0, sent=N, stall=node.stats().stall)


aiopdbp.run(main(sys.argv[1] if len(sys.argv) > 1 else "cycle"))
