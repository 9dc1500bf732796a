import asyncio, collections, sys
from aiopdbp.hosts.channel import ControlChannel
from aiopdbp.wire.control import TableMsg, LookupMsg
from aiopdbp.runtime.cluster import open_cluster
from aiopdbp.bench.scale_job import _Inbox, _barrier, _pattern
C = collections.Counter(); phase = ["open"]
orig = ControlChannel.send
def send(self, dest, msg, on_fail=None):
    k = type(msg).__name__
    if isinstance(msg, TableMsg): k += f":{msg.op}:{msg.seq}"
    if isinstance(msg, LookupMsg): k += ":name" if msg.name else ":pid"
    C[(phase[0], k)] += 1
    return orig(self, dest, msg, on_fail)
ControlChannel.send = send
async def main(n, units):
    async with open_cluster(n) as nodes:
        names = [f"scale-{r}" for r in range(n)]
        async def rank(r, ev):
            async with nodes[r].process(names[r]) as gp:
                inbox = _Inbox(gp)
                await _barrier(inbox, r, names, 0)
                await ev[0].wait() if False else None
                await _barrier(inbox, r, names, 5)
                if r == 0: phase[0] = "pattern"
                await _barrier(inbox, r, names, 6)
                await _pattern(inbox, r, names, "alltoall", units, bytes(256))
                await _barrier(inbox, r, names, 1)
                await _barrier(inbox, r, names, 7)
                if r == 0: phase[0] = "close"
                await _barrier(inbox, r, names, 8)
        await asyncio.gather(*(rank(r, [None]) for r in range(n)))
    for (p, k), v in sorted(C.items()):
        print(p, k, v)
asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
