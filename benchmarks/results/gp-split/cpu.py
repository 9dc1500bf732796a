"""CPU time per 8 B round trip through ``gp.send``/``gp.recv``, in one process.

    PYTHONPATH=<tree> python benchmarks/results/gp-split/cpu.py [--iters 20000] [--cluster]

The ping-pong of ``calls.py`` (two GPs of one node, or with ``--cluster`` two
nodes of an in-process cluster), timed: the process's CPU time
(``time.process_time``) per round trip, the median of 5 batches, after a
warm-up.  One process and no MPI polling, so on a loaded shared machine the
CPU time is steadier than a wall time; still, only an alternated same-run
ratio against a base tree means anything (see this folder's README).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from aiopdbp.runtime.cluster import open_cluster
import aiopdbp

from calls import _pingpong  # type: ignore[import-not-found]


async def main(n: int, cluster: bool) -> None:
    async def timed(a: object, b: object) -> None:
        await _pingpong(a, b, 500)
        per = []
        for _ in range(5):
            t = time.process_time()
            await _pingpong(a, b, n // 5)
            per.append((time.process_time() - t) / (n // 5) * 1e6)
        print(f"cpu us per round trip {statistics.median(per):.3f}  batches {' '.join(f'{x:.2f}' for x in per)}")

    if cluster:
        async with open_cluster(2) as (n0, n1):
            async with n0.process("a") as a, n1.process("b") as b:
                await n0.lookup("b", timeout=10)
                await n1.lookup("a", timeout=10)
                await timed(a, b)
    else:
        async with aiopdbp.open_node() as node:
            async with node.process("a") as a, node.process("b") as b:
                await timed(a, b)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--cluster", action="store_true")
    ns = ap.parse_args()
    asyncio.run(main(ns.iters, ns.cluster))
