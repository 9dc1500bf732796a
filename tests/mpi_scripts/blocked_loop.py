"""Rank 1 blocks its event loop (time.sleep: a long call that does not await)
while rank 0 sends it more than its credit window; rank 0's sends stall, are
reported (stall_timeout 1 s) and complete once rank 1's loop runs again."""
import asyncio
import time

import aiopdbp
from aiopdbp.hosts.remote import RemoteConfig

WINDOW = 64 << 10
SIZE = 4096
N = 4 * WINDOW // SIZE


async def main() -> None:
    async with aiopdbp.open_node(remote=RemoteConfig(gp_window=WINDOW), stall_timeout=1.0) as node:
        me, other = f"g{node.rank}", f"g{1 - node.rank}"
        async with node.process(me) as gp:
            await node.lookup(other, timeout=30)
            if node.rank == 1:
                await asyncio.sleep(0.2)
                time.sleep(2.5)        # the scenario: this rank's loop does not run
                for _ in range(N):
                    await gp.recv(timeout=30)
                await gp.send(other, b"done")
                return
            for i in range(N):
                await gp.send(other, bytes(SIZE))
            await gp.recv(timeout=30)
            print("OK", flush=True)


aiopdbp.run(main())
