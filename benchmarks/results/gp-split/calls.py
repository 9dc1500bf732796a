"""Python calls per 8 B round trip through ``gp.send``/``gp.recv``, in one process (deterministic).

    PYTHONPATH=<tree> python benchmarks/results/gp-split/calls.py [--iters 2000]

Two ping-pongs of a writable 8-byte numpy array, each counted under cProfile
after a warm-up: two GPs of one node (the local path: the pipe), and two
nodes of an in-process cluster (the multi-host path: host links, blocks,
credit, the in-process fabric instead of MPI).  One event loop, no polling
and no other process: the same tree gives the same counts run after run, so
two trees' counts compare exactly.  Prints, per case, all calls per round
trip and those of the functions defined in ``aiopdbp/runtime/`` (where GP
and its parts live), then every function of ``aiopdbp/runtime/`` with its
calls per round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
from typing import Any

import numpy as np

import aiopdbp
from aiopdbp.runtime.cluster import open_cluster


async def _pingpong(a: Any, b: Any, n: int) -> None:
    pay = np.ones(8, np.uint8)

    async def echo() -> None:
        for _ in range(n):
            m = await b.recv()
            await b.send(a.name, m.data)

    task = asyncio.create_task(echo())
    for _ in range(n):
        await a.send(b.name, pay)
        await a.recv()
    await task


async def _counted(a: Any, b: Any, n: int, label: str) -> None:
    await _pingpong(a, b, 200)   # warm: names known, pools and caches filled
    prof = cProfile.Profile()
    prof.enable()
    await _pingpong(a, b, n)
    prof.disable()
    st = pstats.Stats(prof)
    rows = st.stats  # type: ignore[attr-defined]
    runtime = f"{os.sep}aiopdbp{os.sep}runtime{os.sep}"
    ours = {(os.path.basename(f), fn): r[1] for (f, _, fn), r in rows.items() if runtime in f}
    print(f"{label}: calls per round trip: all {st.total_calls / n:.2f}, "  # type: ignore[attr-defined]
          f"aiopdbp/runtime {sum(ours.values()) / n:.2f}")
    for (f, fn), c in sorted(ours.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"    {c / n:6.2f}  {f}:{fn}")


async def main(n: int) -> None:
    async with aiopdbp.open_node() as node:
        async with node.process("a") as a, node.process("b") as b:
            await _counted(a, b, n, "one node, two GPs")
    async with open_cluster(2) as (n0, n1):
        async with n0.process("a") as a, n1.process("b") as b:
            await n0.lookup("b", timeout=10)
            await n1.lookup("a", timeout=10)
            await _counted(a, b, n, "two nodes in one process")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=2000)
    asyncio.run(main(ap.parse_args().iters))
