"""Fair credit under a slow reader (issue 28 item 3): counts per sender.

    mpiexec -n N python tests/mpi_scripts/fair.py --senders K --size BYTES [--local L]
                                                  [--period S] [--seconds S] [--window BYTES]
                                                  [--warmup S] [--pipe-capacity N] [--bucket S]
                                                  [--per-rank K1,K2,...] [--stagger S]
                                                  [--head-start S]

Ranks 1..N-1 each run K sender GPs (``s<rank>.<i>``), and rank 0, the
reader's own, L of them (``s0.<i>``, local senders: the reader's pipe
bounds them, not credit), that loop
``await gp.send("reader", bytes(size))``; the reader GP on rank 0 takes one
message per ``period`` seconds.  The senders start together: each waits for
the reader's ``b"go"`` (sent once every sender's name is registered).  After
a warm-up (``--warmup 0``: none, the counts start with the first message),
the reader counts the messages of each sender it takes over ``seconds``
seconds (and per ``--bucket`` seconds: 5 by default), then tells the senders to stop (each answers with its last message,
``b"END"``) and drains.  ``--window 0`` keeps the default credit window
(``RemoteConfig.gp_window``).  Rank 0 prints one line::

    FAIR {"counts": {"s1.0": n, ...}, "taken": total, "buckets": [{"s1.0": n, ...}, ...]}
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
        for name in names:
            await node.lookup(name, timeout=30)
        for name in names:                   # start them together
            await gp.send(name, b"go")
        t0 = time.monotonic()
        while time.monotonic() < t0 + args.warmup:
            await gp.recv()
            await asyncio.sleep(args.period)
        t1 = time.monotonic()
        buckets: list[dict[str, int]] = []
        while (now := time.monotonic()) < t1 + args.seconds:
            source = (await gp.recv()).source
            counts[source] += 1
            k = int((now - t1) / args.bucket)
            while len(buckets) <= k:
                buckets.append(dict.fromkeys(names, 0))
            buckets[k][source] += 1
            await asyncio.sleep(args.period)
        for name in names:
            await gp.send(name, b"stop")
        ends = 0
        while ends < len(names):             # drain: every sender's parked send completes
            if (await gp.recv()).data == b"END":
                ends += 1
    print("FAIR " + json.dumps({"counts": counts, "taken": sum(counts.values()), "buckets": buckets}),
          flush=True)


async def sender(node: aiopdbp.Node, name: str, size: int, delay: float = 0.0) -> None:
    async with node.process(name) as gp:
        await node.lookup("reader", timeout=30)
        await gp.recv()                      # go
        await asyncio.sleep(delay)           # --stagger: a head start for the earlier ones
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
    ap.add_argument("--bucket", type=float, default=5.0)
    ap.add_argument("--per-rank", default="", help="senders on ranks 1, 2, ... (overrides --senders)")
    ap.add_argument("--stagger", type=float, default=0.0,
                    help="sender i of a rank starts i * S seconds after the go")
    ap.add_argument("--head-start", type=float, default=0.0,
                    help="sender 0 of each rank starts S seconds before the others")
    args = ap.parse_args()
    per_rank = [int(k) for k in args.per_rank.split(",")] if args.per_rank else [args.senders] * (SIZE - 1)
    names = ([f"s0.{i}" for i in range(args.local)]
             + [f"s{r}.{i}" for r in range(1, SIZE) for i in range(per_rank[r - 1])])
    remote = RemoteConfig(gp_window=args.window) if args.window else RemoteConfig()
    async with aiopdbp.open_node(remote=remote, close_timeout=10.0,
                                 pipe_capacity=args.pipe_capacity) as node:
        async with asyncio.timeout(args.seconds + 60):
            mine = [sender(node, n, args.size, int(n.split(".")[1]) * args.stagger
                           + (args.head_start if int(n.split(".")[1]) else 0.0))
                    for n in names if n.startswith(f"s{RANK}.")]
            if RANK == 0:
                await asyncio.gather(reader(node, names, args), *mine)
            else:
                await asyncio.gather(*mine)
    return 0


if __name__ == "__main__":
    sys.exit(aiopdbp.run(main()))
