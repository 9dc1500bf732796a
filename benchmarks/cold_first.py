"""A first message to a peer with nothing made for it yet, against a warm one (issue 31).

Run under the launcher (oversubscribed is fine)::

    nice -n 10 aiopdbp launch -n 16 python benchmarks/cold_first.py --warm 10 [--out FILE]

Every rank registers ``cold-RANK`` and passes a dissemination barrier of GP
messages (rank r talks to r +- 2^k only).  Then rank 0 takes the ranks d the
barrier never paired it with (neither d nor N - d a power of two), one after
the other: a first round trip with d (0 sends to ``cold-d``, d answers to
``cold-0``: a link, pool rows and names made on both sides, whatever they
cost), then ``--warm`` round trips with d.  It prints, and writes as JSON to
``--out``, every cold round trip, the median warm one of each pair, and the
ratio of the medians.  A cold round trip is a first message each way, so a
first message within 2x a warm one is a ratio of at most 2.  Then, after
``--idle`` seconds in which d does nothing, one more round trip ("idle"): d
had been idle before its cold one too (an idle engine sleeps and must be
woken), so idle against cold is what the first contact itself costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

from aiopdbp.runtime.job import run
from aiopdbp.runtime.node import open_node
from aiopdbp.runtime.process import GP
from aiopdbp.wire.message import Message

TIMEOUT = 120.0
COM_BARRIER, COM_PING, COM_PONG = 1, 2, 3


def cold_peers(size: int) -> list[int]:
    """The ranks the dissemination barrier never pairs with rank 0."""
    return [d for d in range(1, size) if d & (d - 1) and (size - d) & (size - d - 1)]


class Inbox:
    """``recv`` by ``com`` (and barrier round): what arrives early waits here."""

    def __init__(self, gp: GP) -> None:
        self.gp = gp
        self.held: dict[tuple[int, bytes], list[Message]] = {}

    async def take(self, com: int, key: bytes = b"") -> Message:
        held = self.held.get((com, key))
        if held:
            return held.pop(0)
        while True:
            item = await self.gp.recv(timeout=TIMEOUT)
            assert isinstance(item, Message)
            got = (item.com, bytes(item.data) if item.com == COM_BARRIER else b"")
            if got == (com, key):
                return item
            self.held.setdefault(got, []).append(item)


async def barrier(inbox: Inbox, rank: int, names: list[str], epoch: int) -> None:
    size, k = len(names), 0
    while (1 << k) < size:
        key = bytes((epoch, k))
        await inbox.gp.send(names[(rank + (1 << k)) % size], key, com=COM_BARRIER, timeout=TIMEOUT)
        await inbox.take(COM_BARRIER, key)
        k += 1


async def main(warm: int, unit: int, out: str | None, idle: float) -> int:
    payload = bytes(unit)
    async with open_node() as node:
        rank, size = node.rank, node.size
        names = [f"cold-{r}" for r in range(size)]
        async with node.process(names[rank]) as gp:
            inbox = Inbox(gp)
            await barrier(inbox, rank, names, 0)
            rows = []
            for d in cold_peers(size):
                if rank == 0:
                    times = []
                    for i in range(2 + warm):
                        if i == 1 + warm:
                            await asyncio.sleep(idle)
                        t = time.perf_counter()
                        await gp.send(names[d], payload, com=COM_PING, timeout=TIMEOUT)
                        await inbox.take(COM_PONG)
                        times.append(time.perf_counter() - t)
                    rows.append({"peer": d, "cold_ms": times[0] * 1e3, "idle_ms": times[-1] * 1e3,
                                 "warm_ms": statistics.median(times[1:-1]) * 1e3 if warm else None})
                elif rank == d:
                    for _ in range(2 + warm):
                        await inbox.take(COM_PING)
                        await gp.send(names[0], payload, com=COM_PONG, timeout=TIMEOUT)
            await barrier(inbox, rank, names, 1)
    if rank == 0 and rows:
        cold = statistics.median(r["cold_ms"] for r in rows)
        warm_ms = statistics.median(r["warm_ms"] for r in rows) if warm else float("nan")
        idle_ms = statistics.median(r["idle_ms"] for r in rows)
        doc = {"size": size, "warm_rounds": warm, "unit": unit, "load": os.getloadavg()[0],
               "pairs": rows, "cold_median_ms": cold, "warm_median_ms": warm_ms, "idle_median_ms": idle_ms,
               "ratio": cold / warm_ms if warm else None}
        for r in rows:
            print(f"peer {r['peer']:3d}: cold {r['cold_ms']:8.2f} ms, warm {r['warm_ms']:8.2f} ms, "
                  f"idle {r['idle_ms']:8.2f} ms")
        print(f"N={size}: cold median {cold:.2f} ms, warm median {warm_ms:.2f} ms, idle median "
              f"{idle_ms:.2f} ms, cold/warm {cold / warm_ms:.2f}, cold/idle {cold / idle_ms:.2f} "
              f"(load {os.getloadavg()[0]:.1f})")
        if out:
            Path(out).write_text(json.dumps(doc, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--warm", type=int, default=10, help="warm round trips after each cold one")
    p.add_argument("--unit", type=int, default=256, help="bytes per message")
    p.add_argument("--idle", type=float, default=0.5, help="seconds the peer idles before the last round trip")
    p.add_argument("--out", help="write the figures here as JSON (rank 0)")
    a = p.parse_args()
    raise SystemExit(run(main(a.warm, a.unit, a.out, a.idle)))
