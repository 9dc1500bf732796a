"""Instructions per 8 B round trip through ``gp.send``/``gp.recv`` (callgrind), in one process.

    PYTHONHASHSEED=0 PYTHONPATH=<tree>:. valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        python ir.py N [--cluster]     # run at two N: (Ir(N2) - Ir(N1)) / (N2 - N1) per round trip

The ping-pong of ``calls.py`` (500 round trips of warm-up, then N), nothing
timed: a run's instruction count differs from another N's by the round trips
alone, so the difference per round trip compares two trees exactly where a
time on a loaded machine cannot.
"""

from __future__ import annotations

import asyncio
import sys

import aiopdbp
from aiopdbp.runtime.cluster import open_cluster

from calls import _pingpong  # type: ignore[import-not-found]


async def main(n: int, cluster: bool) -> None:
    if cluster:
        async with open_cluster(2) as (n0, n1):
            async with n0.process("a") as a, n1.process("b") as b:
                await n0.lookup("b", timeout=10)
                await n1.lookup("a", timeout=10)
                await _pingpong(a, b, 500)
                await _pingpong(a, b, n)
    else:
        async with aiopdbp.open_node() as node:
            async with node.process("a") as a, node.process("b") as b:
                await _pingpong(a, b, 500)
                await _pingpong(a, b, n)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), "--cluster" in sys.argv))
