"""Leaving a stalled job (issue 15 item 5): every rank must be gone within
seconds, not after the close timeout.  2 ranks, stall_timeout 1 s, a 64 KiB
per-GP window; GP ``g1`` on rank 1 never reads.

``ctrlc``    rank 0's ``g0`` sends 4 windows to ``g1`` and stalls; once the
             stall is reported, rank 0 prints ``stalled`` (the test then
             interrupts the job).
``finished`` rank 0 sends ``g1`` less than a window and leaves its node
             (``finished``), so it waits in the close handshake for rank 1,
             whose application waits forever; the test then interrupts rank 1.
``cancel``   as ``ctrlc``, but rank 0's application gives up on the stalled
             send after 2 s (``asyncio.timeout``) and lets the error leave
             its node: the job fails.

Every rank prints ``ready <pid>`` first.
"""
import asyncio
import os
import sys
import time

import aiopdbp
from aiopdbp.hosts.remote import RemoteConfig

WINDOW = 64 << 10


def say(text: str) -> None:
    os.write(1, f"{text}\n".encode())  # one write: the ranks' lines never merge


async def stalled(node: aiopdbp.Node) -> None:
    while not node.stats().stall.get("stalls"):
        await asyncio.sleep(0.05)


async def main(mode: str) -> None:
    async with aiopdbp.open_node(remote=RemoteConfig(gp_window=WINDOW), stall_timeout=1.0,
                                 close_timeout=60.0) as node:
        me, other = f"g{node.rank}", f"g{1 - node.rank}"
        async with node.process(me) as gp:
            await node.lookup(other, timeout=30)
            say(f"ready rank {node.rank} pid {os.getpid()}")
            if node.rank == 1:
                await asyncio.Event().wait()       # an application that never reads
            if mode == "finished":
                await gp.send(other, b"x" * 1000)
                say(f"finished {time.time():.3f}")
                return
            sends = asyncio.ensure_future(_flood(gp, other))
            await stalled(node)
            say(f"stalled {time.time():.3f}")
            if mode == "cancel":
                async with asyncio.timeout(1.0):
                    await sends
            await sends


async def _flood(gp: aiopdbp.GP, dest: str) -> None:
    for _ in range(4 * WINDOW // 4096):
        await gp.send(dest, b"x" * 4096)


aiopdbp.run(main(sys.argv[1] if len(sys.argv) > 1 else "ctrlc"))
