"""cProfile (CPU clock) of one rank's open_node, GP close and node close in bench scale's all-to-all:
aiopdbp launch -n N python prof_phases.py OUT RANK"""
import asyncio, cProfile, io, pstats, sys, time
from pathlib import Path
import aiopdbp
from aiopdbp.bench.scale_job import _Inbox, _barrier, _pattern
from aiopdbp.runtime.node import open_node

out, who = Path(sys.argv[1]), int(sys.argv[2])
P = {k: cProfile.Profile(time.process_time) for k in ("open", "gpclose", "nodeclose")}
C = {}

async def main():
    me = None
    c = time.process_time()
    P["open"].enable()
    opening = open_node()
    node = await opening.__aenter__()
    P["open"].disable()
    C["open"] = time.process_time() - c
    rank, size = node.rank, node.size
    names = [f"scale-{r}" for r in range(size)]
    async with node.process(names[rank]) as gp:
        inbox = _Inbox(gp)
        await _barrier(inbox, rank, names, 0)
        await _pattern(inbox, rank, names, "alltoall", 20, bytes(256))
        await _barrier(inbox, rank, names, 1)
        c = time.process_time()
        if rank == who: P["gpclose"].enable()
    if rank == who: P["gpclose"].disable()
    C["gpclose"] = time.process_time() - c
    c = time.process_time()
    if rank == who: P["nodeclose"].enable()
    await opening.__aexit__(None, None, None)
    if rank == who: P["nodeclose"].disable()
    C["nodeclose"] = time.process_time() - c
    if rank == who:
        s = io.StringIO()
        s.write(f"rank {rank} of {size}: CPU s {C}\n")
        for k, pr in P.items():
            s.write(f"\n==== {k}\n")
            pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
            pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(30)
        Path(out, f"phases-{rank}.txt").write_text(s.getvalue())
    print(f"CPU {rank} {C}", flush=True)

aiopdbp.run(main())
