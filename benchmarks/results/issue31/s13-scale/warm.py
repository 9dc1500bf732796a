"""CPU (process_time) per phase with a first-contact phase split off: one message to each peer
(+barrier), then the pattern (20 x 31 + barrier); writes OUT/warm-RANK.json. WARM=0: no warm phase."""
import json, os, sys, time
from pathlib import Path
import aiopdbp
from aiopdbp.bench.scale_job import _Inbox, _barrier, _pattern
from aiopdbp.runtime.node import open_node
out = Path(sys.argv[1]); warm = os.environ.get("WARM", "1") == "1"
async def main():
    c = {"start": time.process_time()}
    async with open_node() as node:
        c["open"] = time.process_time()
        rank, size = node.rank, node.size
        names = [f"scale-{r}" for r in range(size)]
        async with node.process(names[rank]) as gp:
            inbox = _Inbox(gp)
            await _barrier(inbox, rank, names, 0)
            c["registered"] = time.process_time()
            if warm:
                await _pattern(inbox, rank, names, "alltoall", 1, bytes(256))
                await _barrier(inbox, rank, names, 2)
            c["warm"] = time.process_time()
            await _pattern(inbox, rank, names, "alltoall", 20, bytes(256))
            await _barrier(inbox, rank, names, 1)
            c["pattern"] = time.process_time()
        c["gpclosed"] = time.process_time()
    c["closed"] = time.process_time()
    (out / f"warm-{rank}.json").write_text(json.dumps(c))
aiopdbp.run(main())
