"""A job that waits to be stopped: every rank reports "ready <pid>" and the
shared-memory segments it maps, then waits in recv() forever.

Modes (argv[1]):
  wait      -- every rank opens its node and waits (default)
  startup   -- rank 1 never opens its node: the others are stuck in start-up
  selfkill  -- rank 1 kills itself with SIGKILL once everyone is ready
  exit0     -- rank 1 leaves by os._exit(0) once everyone is ready
  import    -- rank 1 raises before it starts aiopdbp.run (at import, say)
  beforerun -- no rank reaches aiopdbp.run: each reports "ready <pid>" and
              sleeps, as in a long import (torch on a loaded machine)
  busy      -- four GPs of every rank keep sending 4 KiB arrays to theirs on both
              neighbours (coalesced into blocks that MPI copies by CMA) and
              read what comes, until they are stopped
"""
import asyncio
import os
import signal
import sys
import time

import numpy as np

import aiopdbp
import aiopdbp.env


def report() -> None:
    with open("/proc/self/maps", encoding="ascii", errors="replace") as f:
        segs = sorted({line.split(None, 5)[5].strip() for line in f if "/dev/shm/mpich_shm_" in line})
    for seg in segs:
        print(f"shm {seg}", flush=True)
    print(f"ready {os.getpid()}", flush=True)


async def main(mode: str) -> None:
    rank = aiopdbp.runtime.job.env_rank()
    if mode == "startup" and rank == 1:
        print(f"ready {os.getpid()}", flush=True)
        await asyncio.sleep(3600)
    print(f"opening {os.getpid()}", flush=True)
    async with aiopdbp.open_node() as node:
        async with node.process(f"w{node.rank}") as gp:
            await node.lookup(f"w{(node.rank + 1) % node.size}")
            report()
            if mode == "selfkill" and node.rank == 1:
                await node.lookup("w0")
                os.kill(os.getpid(), signal.SIGKILL)
            if mode == "exit0" and node.rank == 1:
                await node.lookup("w0")
                os._exit(0)
            if mode == "busy":
                await busy(node, gp)
            await gp.recv()


async def busy(node: aiopdbp.Node, gp: aiopdbp.GP) -> None:
    x = np.zeros(4096, dtype=np.uint8)
    r, n = node.rank, node.size
    started = asyncio.Barrier(5)

    async def one(k: int) -> None:
        async with node.process(f"b{r}.{k}") as me:
            async def pump() -> None:
                while True:
                    for peer in (f"b{(r + 1) % n}.{k}", f"b{(r - 1) % n}.{k}"):
                        await me.send(peer, x)

            async with asyncio.TaskGroup() as tg:
                tg.create_task(pump())
                for _ in range(2):
                    await me.recv()
                await started.wait()
                while True:
                    await me.recv()

    async with asyncio.TaskGroup() as tg:
        for k in range(4):
            tg.create_task(one(k))
        await started.wait()
        print("exchanging", flush=True)


if sys.argv[1:] == ["beforerun"]:
    print(f"ready {os.getpid()}", flush=True)
    time.sleep(3600)
if sys.argv[1:] == ["import"] and aiopdbp.env.env_rank() == 1:
    print(f"ready {os.getpid()}", flush=True)
    raise RuntimeError("rank 1 failed before aiopdbp.run")
aiopdbp.run(main(sys.argv[1] if len(sys.argv) > 1 else "wait"))
