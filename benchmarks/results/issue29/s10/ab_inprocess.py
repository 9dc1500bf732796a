"""numpy array vs CPU tensor round trips between two in-process nodes
(open_cluster(2): encoding, credits, the short/owned paths, decoding -- the
network replaced by memory copies), in alternating batches in one process.

Each batch's time is the main thread's CPU time (time.thread_time): on a
shared 2-core VM under load, CPU time is what the code costs, wall time
mostly what the scheduler gave.  Prints min / p10 / median per round trip
(two hops, a tensor converted at each send and arrival) and torch - numpy.

    python ab_inprocess.py SIZE [BATCHES]
"""
import asyncio
import statistics
import sys
import time

import numpy as np
import torch

from aiopdbp.runtime.cluster import open_cluster

SIZE = int(sys.argv[1])
NB = int(sys.argv[2]) if len(sys.argv) > 2 else 60
BATCH = 50 if SIZE <= 4096 else 20 if SIZE <= 1 << 20 else 2


async def main() -> None:
    async with open_cluster(2) as (n0, n1):
        async with n0.process("a") as a, n1.process("b") as b:
            await n0.lookup("b", timeout=10)
            await n1.lookup("a", timeout=10)
            arr = np.arange(SIZE, dtype=np.uint8)
            ten = torch.from_numpy(arr.copy())

            async def echo() -> None:
                while True:
                    m = await b.recv()
                    if m.com == 1:
                        return
                    await b.send("a", m.data)

            task = asyncio.create_task(echo())
            res: dict[str, list[float]] = {"numpy": [], "torch": []}
            for i in range(NB + 3):
                for kind in (("numpy", "torch") if i % 2 else ("torch", "numpy")):
                    p = arr if kind == "numpy" else ten
                    t0 = time.thread_time()
                    for _ in range(BATCH):
                        await a.send("b", p)
                        m = await a.recv()
                    if i >= 3:  # warm-up batches left out
                        res[kind].append((time.thread_time() - t0) / BATCH * 1e6)
                    assert type(m.data) is type(p) and m.data.shape == p.shape and bool((m.data[:64] == p[:64]).all())
            await a.send("b", b"", com=1)
            await task
    q = {k: (min(v), sorted(v)[len(v) // 10], statistics.median(v)) for k, v in res.items()}
    for k, (lo, p10, med) in q.items():
        print(f"{SIZE:>9} B {k:6s} CPU us/RT: min {lo:9.2f}  p10 {p10:9.2f}  median {med:9.2f}")
    (nl, np10, nm), (tl, tp10, tm) = q["numpy"], q["torch"]
    print(f"{SIZE:>9} B torch-numpy us/RT: min {tl - nl:+.2f} p10 {tp10 - np10:+.2f} median {tm - nm:+.2f};"
          f" torch/numpy: min {tl / nl:.3f} median {tm / nm:.3f}")


asyncio.run(main())
