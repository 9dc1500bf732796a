import asyncio, sys, cProfile, pstats, io
import numpy as np, torch
from aiopdbp.runtime.cluster import open_cluster
SIZE = int(sys.argv[1]); KIND = sys.argv[2]; N = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
async def main():
    async with open_cluster(2) as (n0, n1):
        async with n0.process("a") as a, n1.process("b") as b:
            await n0.lookup("b", timeout=10); await n1.lookup("a", timeout=10)
            arr = np.arange(SIZE, dtype=np.uint8)
            p = arr if KIND == "numpy" else torch.from_numpy(arr.copy())
            async def echo():
                while True:
                    m = await b.recv()
                    if m.com == 1: return
                    await b.send("a", m.data)
            t = asyncio.create_task(echo())
            for _ in range(50):
                await a.send("b", p); m = await a.recv()
            pr = cProfile.Profile(); pr.enable()
            for _ in range(N):
                await a.send("b", p); m = await a.recv()
            pr.disable()
            await a.send("b", b"", com=1); await t
            s = io.StringIO(); st = pstats.Stats(pr, stream=s); st.sort_stats("tottime").print_stats(); print(s.getvalue())
asyncio.run(main())
