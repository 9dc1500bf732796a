"""Credit grants ride on the replies of a large request/response, and still flow one way.

    mpiexec -n 2 python tests/mpi_scripts/carried_grants.py

1. Ping-pong: rank 0's GP sends writable arrays of SIZE (64 KiB, then 1 MiB:
   a quarter window and a whole one) to rank 1's GP, which echoes each; every
   echo is checked.  Counted over the round trips after a warm-up, per rank:
   ``CreditMsg`` sent (``node.stats().messages_sent``) and split headers
   that carried grants (``links[h].credit_carried``).
2. One way: rank 0 sends ONEWAY 1 MiB arrays to rank 1, which only reads
   (each needs the whole window back: no reply can carry it).

Rank 0 prints one line::

    CARRIED {"pingpong": {size: [[credit msgs, carried] rank 0, rank 1]}, "oneway_s": t, ...}
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np

import aiopdbp

SIZES = (64 << 10, 1 << 20)
ROUNDS, WARM, ONEWAY = 40, 10, 20
TIMEOUT = 30.0


def counts(node: aiopdbp.Node, peer: int) -> tuple[int, int]:
    st = node.stats()
    link = st.links.get(peer)
    return (st.messages_sent.get(peer, {}).get("CreditMsg", 0),
            link.credit_carried if link is not None else 0)


async def main() -> None:
    async with aiopdbp.open_node() as node:
        me, peer = node.rank, 1 - node.rank
        async with node.process(f"cg{me}") as gp:
            await node.lookup(f"cg{peer}", timeout=TIMEOUT)
            out: dict[str, Any] = {"pingpong": {}}
            for size in SIZES:
                arrs = [np.full(size, k + 1, np.uint8) for k in range(2)]
                before = (0, 0)
                for i in range(WARM + ROUNDS):
                    if i == WARM:
                        before = counts(node, peer)
                    if me == 0:
                        await gp.send(f"cg{peer}", arrs[i & 1], timeout=TIMEOUT)
                        msg = await gp.recv(timeout=TIMEOUT)
                        assert msg.data.nbytes == size and int(msg.data[0]) == (i & 1) + 1
                    else:
                        msg = await gp.recv(timeout=TIMEOUT)
                        await gp.send(f"cg{peer}", msg.data, timeout=TIMEOUT)
                after = counts(node, peer)
                mine = [after[0] - before[0], after[1] - before[1]]
                # the peers' counts, on the GPs themselves (small messages)
                if me == 1:
                    await gp.send(f"cg{peer}", json.dumps(mine).encode(), timeout=TIMEOUT)
                else:
                    theirs = json.loads(bytes((await gp.recv(timeout=TIMEOUT)).data))
                    out["pingpong"][str(size)] = [mine, theirs]
            big = np.ones(1 << 20, np.uint8)
            if me == 0:
                t0 = time.perf_counter()
                for i in range(ONEWAY):
                    await gp.send(f"cg{peer}", big, timeout=TIMEOUT)
                await gp.recv(timeout=TIMEOUT)   # the reader has them all
                out["oneway_s"] = time.perf_counter() - t0
                print("CARRIED " + json.dumps(out), flush=True)
            else:
                for i in range(ONEWAY):
                    msg = await gp.recv(timeout=TIMEOUT)
                    assert msg.data.nbytes == 1 << 20
                await gp.send(f"cg{peer}", b"done", timeout=TIMEOUT)
            await asyncio.sleep(0)


if __name__ == "__main__":
    aiopdbp.run(main())
