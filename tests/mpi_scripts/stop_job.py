"""A job that waits to be stopped: every rank reports "ready <pid>" and the
shared-memory segments it maps, then waits in recv() forever.

Modes (argv[1]):
  wait      -- every rank opens its node and waits (default)
  startup   -- rank 1 never opens its node: the others are stuck in start-up
  selfkill  -- rank 1 kills itself with SIGKILL once everyone is ready
  exit0     -- rank 1 leaves by os._exit(0) once everyone is ready
  import    -- rank 1 raises before it starts aiopdbp.run (at import, say)
"""
import asyncio
import os
import signal
import sys

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
            await gp.recv()


if sys.argv[1:] == ["import"] and aiopdbp.env.env_rank() == 1:
    print(f"ready {os.getpid()}", flush=True)
    raise RuntimeError("rank 1 failed before aiopdbp.run")
aiopdbp.run(main(sys.argv[1] if len(sys.argv) > 1 else "wait"))
