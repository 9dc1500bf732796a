"""In-process round trips (two open_cluster nodes: the whole send/receive path,
the network replaced by memory copies) for deterministic counts.

    N=K KIND=numpy|torch SIZE=8 [PROF=1] python rt_ir.py

Under callgrind (``--instr-atstart=no``: imports run uninstrumented), with
CG=1 and ``cgctl`` (a two-line extension: CALLGRIND_START/STOP_INSTRUMENTATION)
importable, instrumentation covers the measured round trips only.  Run N=0 and N=K: (instructions(K) - instructions(0)) / K is
instructions per round trip (two hops: a send and an arrival on each side).
PROF=1 prints cProfile's calls per round trip instead (functions by calls)."""
import asyncio
import gc
import os

import numpy as np

from aiopdbp.runtime.cluster import open_cluster

N = int(os.environ.get("N", "1000"))
KIND = os.environ.get("KIND", "numpy")
SIZE = int(os.environ.get("SIZE", "8"))
WARM = 50


async def main() -> None:
    async with open_cluster(2) as (n0, n1):
        async with n0.process("a") as a, n1.process("b") as b:
            await n0.lookup("b", timeout=10)
            await n1.lookup("a", timeout=10)
            arr = np.arange(SIZE, dtype=np.uint8)
            if KIND == "torch":
                import torch
                p = torch.from_numpy(arr)
            else:
                p = arr

            async def echo(n: int) -> None:
                for _ in range(n):
                    m = await b.recv()
                    await b.send("a", m.data)

            async def rts(n: int) -> None:
                t = asyncio.create_task(echo(n))
                for _ in range(n):
                    await a.send("b", p)
                    m = await a.recv()
                await t
                assert type(m.data) is type(p) if n else True

            await rts(WARM)  # every cache filled, torch imported on both sides
            gc.collect()
            gc.disable()
            if os.environ.get("PROF"):
                import cProfile
                import pstats
                pr = cProfile.Profile()
                pr.enable()
                await rts(N)
                pr.disable()
                st = pstats.Stats(pr)
                rows = sorted(st.stats.items(), key=lambda kv: -kv[1][1])
                total = sum(v[1] for _, v in rows)
                print(f"{KIND} {SIZE} B: {total / N:.1f} calls per round trip")
                for (f, line, name), v in rows:
                    if v[1] >= N // 2:
                        print(f"{v[1] / N:6.2f}  {os.path.basename(f)}:{line}({name})")
            elif os.environ.get("CG"):
                import cgctl
                cgctl.start()
                await rts(N)
                cgctl.stop()
            else:
                await rts(N)
            gc.enable()


asyncio.run(main())
