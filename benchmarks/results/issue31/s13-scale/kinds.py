"""Messages sent by kind during the pattern (+barrier) and during the close, rank WHO of the 32-rank job."""
import asyncio, collections, sys, time, os
from pathlib import Path
import aiopdbp
from aiopdbp.bench.scale_job import _Inbox, _barrier, _pattern
from aiopdbp.runtime.node import open_node
out, who = Path(sys.argv[1]), int(sys.argv[2])
def diff(a, b):
    k = collections.Counter()
    for host, per in b.items():
        for kind, n in per.items():
            k[kind] += n - a.get(host, {}).get(kind, 0)
    return {x: v for x, v in k.items() if v}
async def main():
    async with open_node() as node:
        rank, size = node.rank, node.size
        names = [f"scale-{r}" for r in range(size)]
        s0 = node.stats()
        async with node.process(names[rank]) as gp:
            inbox = _Inbox(gp)
            await _barrier(inbox, rank, names, 0)
            s1 = node.stats()
            await _pattern(inbox, rank, names, "alltoall", 20, bytes(256))
            await _barrier(inbox, rank, names, 1)
            s2 = node.stats()
        s3 = node.stats()
    if rank == who:
        (out / f"kinds-{rank}.txt").write_text(
            f"register+barrier sent {diff(s0.messages_sent, s1.messages_sent)}\n recv {diff(s0.messages_received, s1.messages_received)}\n"
            f"pattern+barrier sent {diff(s1.messages_sent, s2.messages_sent)}\n recv {diff(s1.messages_received, s2.messages_received)}\n"
            f"close sent {diff(s2.messages_sent, s3.messages_sent)}\n recv {diff(s2.messages_received, s3.messages_received)}\n")
aiopdbp.run(main())
