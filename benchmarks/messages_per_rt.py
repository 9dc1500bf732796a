"""Messages per round trip: what each rank posts per request/response, by size.

    aiopdbp launch -n 2 benchmarks/messages_per_rt.py [--sizes 8,4K,64K,1M] [--iters 2000]

Rank 0 sends a writable numpy array to rank 1's GP, which echoes it (as
``aiopdbp bench pingpong`` does); after a warm-up, each rank counts what it
posted over the measured round trips from ``node.stats()``: data MPI messages
(blocks, lone frames, split headers, and the bulk payloads of large messages)
and control messages (credit grants and asks, table updates), per round trip,
and the control messages by kind.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import numpy as np

import aiopdbp
from aiopdbp.bench.plan import parse_sizes


def _counts(node: Any) -> tuple[int, int, dict[str, int]]:
    st = node.stats()
    data = sum(link.messages for link in st.links.values()) + int(st.transport.get("bulk_sends", 0))
    kinds: dict[str, int] = {}
    for per_host in st.messages_sent.values():
        for kind, n in per_host.items():
            if kind != "data":
                kinds[kind] = kinds.get(kind, 0) + n
    return data, sum(kinds.values()), kinds


async def main(ns: argparse.Namespace) -> None:
    async with aiopdbp.open_node() as node:
        me = node.rank
        if me > 1:
            return
        async with node.process(f"mrt-{me}") as gp:
            peer = f"mrt-{1 - me}"
            for size in ns.sizes:
                payload = np.ones(size, np.uint8)
                n = ns.iters if size < (1 << 20) else max(100, ns.iters // 8)
                before: tuple[int, int, dict[str, int]] = (0, 0, {})
                for i in range(n + 100):
                    if i == 100:
                        before = _counts(node)
                    if me == 0:
                        await gp.send(peer, payload)
                        msg = await gp.recv()
                        assert msg.data.nbytes == size
                    else:
                        msg = await gp.recv()
                        await gp.send(peer, msg.data)
                after = _counts(node)
                kinds = {k: (v - before[2].get(k, 0)) / n for k, v in after[2].items() if v != before[2].get(k, 0)}
                print(f"rank {me} {size:>8} B: data MPI messages {(after[0] - before[0]) / n:.3f}, control "
                      f"messages {(after[1] - before[1]) / n:.3f} per round trip {kinds}", flush=True)
            await asyncio.sleep(0.1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=parse_sizes, default=parse_sizes("8,4K,64K,1M"))
    ap.add_argument("--iters", type=int, default=2000)
    aiopdbp.run(main(ap.parse_args()))
