"""Fair credit under a slow reader (issue 28 item 3): counts per sender.

    mpiexec -n N python tests/mpi_scripts/fair.py --senders K --size BYTES [--local L]
                                                  [--period S] [--seconds S] [--window BYTES]
                                                  [--warmup S] [--pipe-capacity N]

Ranks 1..N-1 each run K sender GPs (``s<rank>.<i>``), and rank 0, the
reader's own, L of them (``s0.<i>``, local senders: the reader's pipe
bounds them, not credit), that loop
``await gp.send("reader", bytes(size))``; the reader GP on rank 0 takes one
message per ``period`` seconds.  After a warm-up (the first windows go
without contention), the reader counts the messages of each sender it takes
over ``seconds`` seconds, then tells the senders to stop (each answers with
its last message, ``b"END"``) and drains.  Rank 0 prints one line::

    FAIR {"counts": {"s1.0": n, ...}, "taken": total}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import aiopdbp
from aiopdbp.hosts.remote import RemoteConfig
from aiopdbp.transport.mpi import load_mpi

MPI = load_mpi()
RANK = MPI.COMM_WORLD.Get_rank()
SIZE = MPI.COMM_WORLD.Get_size()


async def reader(node: aiopdbp.Node, names: list[str], args: argparse.Namespace) -> None:
    counts = dict.fromkeys(names, 0)
    async with node.process("reader") as gp:
        await gp.recv()                      # the senders are running
        t0 = time.monotonic()
        while time.monotonic() < t0 + args.warmup:
            await gp.recv()
            await asyncio.sleep(args.period)
        t1 = time.monotonic()
        while time.monotonic() < t1 + args.seconds:
            counts[(await gp.recv()).source] += 1
            await asyncio.sleep(args.period)
        for name in names:
            await gp.send(name, b"stop")
        ends = 0
        while ends < len(names):             # drain: every sender's parked send completes
            if (await gp.recv()).data == b"END":
                ends += 1
    print("FAIR " + json.dumps({"counts": counts, "taken": sum(counts.values())}), flush=True)


async def sender(node: aiopdbp.Node, name: str, size: int) -> None:
    async with node.process(name) as gp:
        await node.lookup("reader", timeout=30)
        stop = asyncio.ensure_future(gp.recv())
        data = bytes(size)
        while not stop.done():
            await gp.send("reader", data)
        await gp.send("reader", b"END")


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--senders", type=int, default=6)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--local", type=int, default=0)
    ap.add_argument("--period", type=float, default=0.005)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--window", type=int, default=64 << 10)
    ap.add_argument("--pipe-capacity", type=int, default=1024)
    args = ap.parse_args()
    names = ([f"s0.{i}" for i in range(args.local)]
             + [f"s{r}.{i}" for r in range(1, SIZE) for i in range(args.senders)])
    async with aiopdbp.open_node(remote=RemoteConfig(gp_window=args.window), close_timeout=10.0,
                                 pipe_capacity=args.pipe_capacity) as node:
        async with asyncio.timeout(args.seconds + 60):
            mine = [sender(node, n, args.size) for n in names if n.startswith(f"s{RANK}.")]
            if RANK == 0:
                await asyncio.gather(reader(node, names, args), *mine)
            else:
                await asyncio.gather(*mine)
    return 0


if __name__ == "__main__":
    sys.exit(aiopdbp.run(main()))
