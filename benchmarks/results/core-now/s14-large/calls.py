"""Python function calls per 64 KiB round trip (cProfile, both ranks, after 20 warm-up
round trips), the plain ping-pong of cg/cgpp.py: which Python functions a large send and
receive run, counted (not timed).

    aiopdbp launch -n 2 calls.py [SIZE] [ITERS]"""
import asyncio, cProfile, pstats, sys
import numpy as np
import aiopdbp

SIZE = int(sys.argv[1]) if len(sys.argv) > 1 else 65536
N = int(sys.argv[2]) if len(sys.argv) > 2 else 100
#: what runs once per progress step or poll, however long a rank waits (bench/hops.py's
#: _POLLING, and the step's own helpers): a count of waiting, not of work
POLLING = {("progress.py", "step"), ("receives.py", "receive"), ("kernel.py", "probe"), ("progress.py", "drive"),
           ("mpi.py", "drive"), ("pipes.py", "ready"), ("progress.py", "_complete_sends"), ("progress.py", "_run"),
           ("progress.py", "pending"), ("progress.py", "<listcomp>"), ("backoff.py", "reset")}


async def main():
    async with aiopdbp.open_node() as node:
        me = node.rank
        async with node.process(f"f-{me}") as gp:
            peer = f"f-{1 - me}"
            await node.lookup(peer, timeout=600)
            a = [np.full(SIZE, k + 1, np.uint8) for k in range(2)]

            async def rts(n):
                for i in range(n):
                    if me == 0:
                        await gp.send(peer, a[i & 1], timeout=600.0)
                        await gp.recv(timeout=600.0)
                    else:
                        msg = await gp.recv(timeout=600.0)
                        await gp.send(peer, msg.data, timeout=600.0)

            await rts(20)
            prof = cProfile.Profile()
            prof.enable()
            await rts(N)
            prof.disable()
            st = pstats.Stats(prof)
            rows = [(v[1] / N, f"{k[0].split('aiopdbp/')[-1]}:{k[2]}") for k, v in st.stats.items()
                    if "aiopdbp/" in k[0] and "/bench/" not in k[0] and (k[0].rsplit("/", 1)[-1], k[2]) not in POLLING]
            tot = sum(n for n, _ in rows)
            top = ", ".join(f"{name} {n:.2f}" for n, name in sorted(rows, reverse=True) if n >= 0.05)
            print(f"rank {me}: {tot:.1f} Python calls into aiopdbp per round trip ({SIZE} B), polling excluded: {top}",
                  flush=True)

asyncio.run(main())
