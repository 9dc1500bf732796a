import asyncio, collections, json, sys
from pathlib import Path
C = collections.Counter(); phase = ["open"]
def patch():
    from aiopdbp.hosts.channel import ControlChannel
    from aiopdbp.wire.control import TableMsg, LookupMsg
    orig = ControlChannel.send
    def send(self, dest, msg, on_fail=None):
        k = type(msg).__name__
        if isinstance(msg, TableMsg): k += f":{msg.op}:{msg.seq}"
        if isinstance(msg, LookupMsg): k += ":name" if msg.name else ":pid"
        C[phase[0] + " " + k] += 1
        return orig(self, dest, msg, on_fail)
    ControlChannel.send = send
async def main(out):
    patch()
    from aiopdbp.bench.scale_job import _Inbox, _barrier, _pattern
    from aiopdbp.runtime.node import open_node
    async with open_node() as node:
        rank, size = node.rank, node.size
        names = [f"scale-{r}" for r in range(size)]
        async with node.process(names[rank]) as gp:
            inbox = _Inbox(gp)
            await _barrier(inbox, rank, names, 0)
            phase[0] = "pattern"
            await _pattern(inbox, rank, names, "alltoall", 20, bytes(256))
            await _barrier(inbox, rank, names, 1)
            phase[0] = "close"
    (out / f"k2-{rank}.json").write_text(json.dumps(C))
if __name__ == "__main__":
    if sys.argv[1] == "--sum":
        T = collections.Counter()
        for p in Path(sys.argv[2]).glob("k2-*.json"): T.update(json.loads(p.read_text()))
        for k, v in sorted(T.items()): print(k, v)
    else:
        import aiopdbp
        aiopdbp.run(main(Path(sys.argv[1])))
