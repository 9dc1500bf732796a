"""cProfile of one rank's all-to-all (bench scale's pattern) and of its close:
`aiopdbp launch -n N python prof_pattern.py OUT [RANK]` writes OUT/pattern-RANK.txt."""
import asyncio, cProfile, io, pstats, sys, time
from pathlib import Path

import aiopdbp
from aiopdbp.bench.scale_job import _Inbox, _barrier, _pattern
from aiopdbp.runtime.node import open_node

out, who = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 1


async def main():
    node = open_node()
    async with node:
        rank, size = node.rank, node.size
        names = [f"scale-{r}" for r in range(size)]
        prof = cProfile.Profile(time.process_time)
        async with node.process(names[rank]) as gp:
            inbox = _Inbox(gp)
            await _barrier(inbox, rank, names, 0)
            c0 = time.process_time()
            if rank == who:
                prof.enable()
            await _pattern(inbox, rank, names, "alltoall", 20, bytes(256))
            await _barrier(inbox, rank, names, 1)
            if rank == who:
                prof.disable()
            c1 = time.process_time()
            sent_before = node.stats().messages_sent
            if rank == who:
                prof_close = cProfile.Profile(time.process_time)
                prof_close.enable()
        if rank == who:
            prof_close.disable()
        sent_after = node.stats().messages_sent
    if rank == who:
        import collections
        kinds = collections.Counter()
        for host, per in sent_after.items():
            for kind, n in per.items():
                kinds[kind] += n - sent_before.get(host, {}).get(kind, 0)
        print(f"rank {rank}: messages sent while its GP closed, by kind: {dict(kinds)}", flush=True)
        s = io.StringIO()
        s.write(f"pattern CPU {c1 - c0:.3f} s (unprofiled ranks similar), N={size}\n")
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(40)
        s.write("\n==== close (process block exit and node close)\n")
        pstats.Stats(prof_close, stream=s).sort_stats("cumulative").print_stats(40)
        Path(out, f"pattern-{rank}.txt").write_text(s.getvalue())

aiopdbp.run(main())
