"""A 64 KiB array's split frame goes whole: one data MPI message per send.

    mpiexec -n 2 python tests/mpi_scripts/whole_frames.py

Rank 0's GP sends arrays of several dtypes and shapes (64 KiB and a little
over, within ``WHOLE_MAX``) to rank 1's GP, which echoes each; every echo is
checked (values, dtype, shape, writable, aligned).  Counted per rank over the
round trips after the first of each shape (its header is new): data MPI
messages (``links[h].messages`` plus the transport's ``bulk_sends``) and
round trips whose frame carried credit grants (those go split: two).

Rank 0 prints one line::

    WHOLE {"rounds": n, "data": [rank 0, rank 1], "carried": [rank 0, rank 1], "ok": true}
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np

import aiopdbp

ARRAYS = [np.arange(8192, dtype=np.float64), np.arange(128 * 130, dtype=np.int32).reshape(128, 130),
          np.full((4, 4100), "ab", dtype="<U1")]
ROUNDS = 12
TIMEOUT = 30.0


def counts(node: aiopdbp.Node, peer: int) -> tuple[int, int]:
    st = node.stats()
    link = st.links.get(peer)
    data = (link.messages if link is not None else 0) + int(st.transport.get("bulk_sends", 0))
    return data, (link.credit_carried if link is not None else 0)


async def main() -> None:
    async with aiopdbp.open_node() as node:
        me, peer = node.rank, 1 - node.rank
        async with node.process(f"wf{me}") as gp:
            await node.lookup(f"wf{peer}", timeout=TIMEOUT)
            data = carried = rounds = 0
            for arr in ARRAYS:
                for i in range(ROUNDS + 1):
                    before = counts(node, peer)
                    if me == 0:
                        await gp.send(f"wf{peer}", arr.copy(), timeout=TIMEOUT)
                        got: Any = (await gp.recv(timeout=TIMEOUT)).data
                        assert got.dtype == arr.dtype and got.shape == arr.shape, (got.dtype, got.shape)
                        assert np.array_equal(got, arr) and got.flags.writeable and got.flags.aligned
                    else:
                        got = (await gp.recv(timeout=TIMEOUT)).data
                        await gp.send(f"wf{peer}", got, timeout=TIMEOUT)
                    after = counts(node, peer)
                    if i:   # (the first of a shape: its header is new on both sides)
                        rounds += 1
                        data += after[0] - before[0]
                        carried += after[1] - before[1]
            mine = (data, carried)
            other = await gp.recv(timeout=TIMEOUT) if me == 0 else None
            if me == 1:
                await gp.send("wf0", np.array(mine), timeout=TIMEOUT)
            else:
                print("WHOLE " + json.dumps({"rounds": rounds, "data": [data, int(other.data[0])],
                                             "carried": [carried, int(other.data[1])], "ok": True}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
