"""Three senders of 16 MiB arrays to one slow receiver: its peak RSS stays bounded.

    mpiexec -n 4 python tests/mpi_scripts/large_rss.py [COUNT]

Ranks 1..3 each send COUNT (default 4) writable 16 MiB arrays -- the same
buffer, rewritten after every send returns (MPI_Send ownership: no copy is
taken) -- to the GP ``sink`` on rank 0, which reads nothing until every
sender is parked for its credit (the senders' own link stats, reported on a
side GP).  Then it checks what it holds, reads everything (checking every
message's content) and drops it.  Rank 0 prints one line::

    RSS {"base_mib": b, "parked_mib": p, "peak_mib": m, "bound_mib": x, "ok": true}

and exits 1 when its peak RSS grew by more than the documented bound
(:mod:`aiopdbp.hosts.link`, "Large payloads"): per sending host at most
``max(window, largest message)`` bytes outstanding for the GP, plus one
message the reader holds, plus the receive cache's recycled blocks (one
message here) -- (senders + 2) x 16 MiB.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys

import numpy as np

import aiopdbp

MIB = 1 << 20
SIZE = 16 * MIB
COUNT = int(sys.argv[1]) if len(sys.argv) > 1 else 4
TIMEOUT = 60.0


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / MIB


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def sender(node: aiopdbp.Node) -> None:
    async with node.process(f"src{node.rank}") as gp, node.process(f"note{node.rank}") as note:
        await node.lookup("sink", timeout=TIMEOUT)
        await node.lookup("ctl", timeout=TIMEOUT)
        buf = np.empty(SIZE // 8, dtype=np.float64)

        async def send_all() -> None:
            for i in range(COUNT):
                buf[:] = node.rank * 100 + i
                await gp.send("sink", buf, com=i, timeout=TIMEOUT)

        task = asyncio.create_task(send_all())
        while getattr(node.stats().links.get(0), "credit_parked", 0) == 0:   # polls our own link (made at the first send): not a delay
            if task.done():
                task.result()
                raise AssertionError("all sends went without waiting for credit")
            await asyncio.sleep(0.001)
        await note.send("ctl", b"parked", timeout=TIMEOUT)
        await asyncio.wait_for(task, TIMEOUT)


async def receiver(node: aiopdbp.Node) -> None:
    senders = node.size - 1
    async with node.process("sink") as sink, node.process("ctl") as ctl:
        base = rss_mib()
        for _ in range(senders):
            msg = await ctl.recv(timeout=TIMEOUT)
            assert isinstance(msg, aiopdbp.Message) and msg.data == b"parked"
        parked = rss_mib()
        queued = len(sink.pipe or ())
        assert queued <= senders, f"{queued} messages of 16 MiB queued for a GP that reads nothing"
        nxt = dict.fromkeys(range(1, node.size), 0)
        for _ in range(senders * COUNT):
            msg = await sink.recv(timeout=TIMEOUT)
            assert isinstance(msg, aiopdbp.Message)
            r = int(msg.source[3:])
            assert msg.com == nxt[r], (msg.com, nxt[r])
            assert msg.data.nbytes == SIZE and (msg.data == r * 100 + msg.com).all()
            nxt[r] += 1
            del msg
        peak = peak_mib()
        bound = (senders + 2) * SIZE / MIB
        ok = peak - base <= bound
        print("RSS " + json.dumps({"base_mib": round(base, 1), "parked_mib": round(parked, 1),
                                   "peak_mib": round(peak, 1), "bound_mib": bound, "ok": ok}), flush=True)
        if not ok:
            raise SystemExit(f"peak RSS grew by {peak - base:.0f} MiB, bound {bound:.0f} MiB")


async def main() -> None:
    async with aiopdbp.open_node() as node:
        if node.rank == 0:
            await receiver(node)
        else:
            await sender(node)


asyncio.run(main())
