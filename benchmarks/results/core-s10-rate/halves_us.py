"""Time of each half of a 64 B message in the rate benchmark's shape, in process (two
nodes over the in-process fabric, one task): a burst of B `await gp.send(dest, unit,
timeout=300)` that do not wait (they coalesce into a block), the block delivered, then B
`await gp.recv(timeout=300)` + the benchmark's `Checker.check`.  Prints ns per send and ns
per receive (median over R rounds of K bursts).  env: B=100 K=200 R=5 SIZE=64."""
import asyncio, gc, os, statistics, time

from aiopdbp.bench.workload import Checker, Ring
from aiopdbp.runtime.cluster import open_cluster

B = int(os.environ.get("B", "100")); K = int(os.environ.get("K", "200"))
R = int(os.environ.get("R", "5")); SIZE = int(os.environ.get("SIZE", "64"))


async def main():
    ring = Ring(SIZE, 64)
    units, p = ring.units, ring.count
    ns = time.perf_counter_ns
    tx, rx = [], []
    async with open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
            checker = Checker(ring, "x")
            send, recv, check = a.send, b.recv, checker.check
            i = 0
            for r in range(R + 1):
                ts = tr = 0
                gc.collect(); gc.disable()
                for _ in range(K):
                    t0 = ns()
                    for _ in range(B):
                        await send("b", units[i % p], timeout=300.0)
                        i += 1
                    t1 = ns()
                    while len(b._pipe) < B:
                        await asyncio.sleep(0)
                    t2 = ns()
                    for _ in range(B):
                        msg = await recv(timeout=300.0)
                        check(msg.source, msg.data)
                    ts += t1 - t0; tr += ns() - t2
                gc.enable()
                if r:
                    tx.append(ts / (K * B)); rx.append(tr / (K * B))
            assert not checker.errors, checker.errors
    print(f"send {statistics.median(tx):.0f} ns  recv+check {statistics.median(rx):.0f} ns")

asyncio.run(main())
