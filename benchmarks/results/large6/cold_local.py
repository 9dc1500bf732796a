"""The same question as cold_python.py with aiopdbp's own working set: one local 8 B
``gp.send`` + ``gp.recv`` (one node, two GPs), timed right after copying SIZE bytes
between two warm numpy buffers (the copy outside the timed span); medians of 3,000.

    python benchmarks/results/large6/cold_local.py
"""
import asyncio, os, statistics, time
import numpy as np
import aiopdbp

ns = time.perf_counter_ns


async def main() -> None:
    async with aiopdbp.open_node() as node:
        async with node.process("a") as a, node.process("b") as b:
            print("load", os.getloadavg())
            print("| bytes copied before | local 8 B send + recv (us, median of 3000) |")
            print("|---|---|")
            sizes = (0, 65536, 1 << 20, 4 << 20)
            bufs = {s: (np.ones(max(s, 1), np.uint8), np.empty(max(s, 1), np.uint8)) for s in sizes}
            out: dict[int, list[float]] = {s: [] for s in sizes}
            for i in range(3300):
                for s in sizes:  # interleaved: the load hits every size alike
                    if s:
                        np.copyto(bufs[s][1], bufs[s][0])
                    t0 = ns()
                    await a.send("b", b"12345678")
                    await b.recv()
                    t1 = ns()
                    if i >= 300:
                        out[s].append((t1 - t0) / 1e3)
            for s in sizes:
                print(f"| {s} | {statistics.median(out[s]):.2f} |")

asyncio.run(main())
