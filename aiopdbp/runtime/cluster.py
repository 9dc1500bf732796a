"""Several hosts in one process, for tests and experiments.

``async with open_cluster(4) as nodes`` starts four nodes on one event loop,
connected by the in-process fabric: everything a multi-host run does --
encoding, pools, credits, tables and names, streams -- happens, with the
network replaced by memory copies.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from aiopdbp.runtime.node import Node
from aiopdbp.transport.inproc import InProcFabric


@contextlib.asynccontextmanager
async def open_cluster(n: int, **options: Any) -> AsyncIterator[list[Node]]:
    """``async with open_cluster(n) as nodes``: ``n`` nodes (ranks 0..n-1)
    in this one process, connected as a job of ``n`` ranks would be; all
    closed on exit.  For tests and experiments: the multi-host code paths
    without MPI.  ``options`` are the :class:`Node` options, the same for
    every node."""
    fabric = InProcFabric(n)
    nodes = [Node(fabric[r], **options) for r in range(n)]
    try:
        await asyncio.gather(*(node.start() for node in nodes))
        yield nodes
    finally:
        await asyncio.gather(*(node.aclose() for node in nodes), return_exceptions=True)
