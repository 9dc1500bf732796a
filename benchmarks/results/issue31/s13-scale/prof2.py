"""cProfile of one rank's pattern phase, full pstats dump to OUT/prof-RANK.pstats."""
import asyncio, cProfile, sys, time
from pathlib import Path
import aiopdbp
from aiopdbp.bench.scale_job import _Inbox, _barrier, _pattern
from aiopdbp.runtime.node import open_node
out, who = Path(sys.argv[1]), int(sys.argv[2])
async def main():
    async with open_node() as node:
        rank, size = node.rank, node.size
        names = [f"scale-{r}" for r in range(size)]
        prof = cProfile.Profile(time.process_time)
        async with node.process(names[rank]) as gp:
            inbox = _Inbox(gp)
            await _barrier(inbox, rank, names, 0)
            if rank == who: prof.enable()
            await _pattern(inbox, rank, names, "alltoall", 20, bytes(256))
            await _barrier(inbox, rank, names, 1)
            if rank == who:
                prof.disable(); prof.dump_stats(str(out / f"prof-{rank}.pstats"))
aiopdbp.run(main())
