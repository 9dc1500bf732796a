"""numpy vs torch vs numpy+the two torch calls a tensor needs per hop (done
outside the library), alternating batches in one process; thread CPU us/RT."""
import asyncio, statistics, sys, time
import numpy as np, torch
from aiopdbp.runtime.cluster import open_cluster
SIZE = int(sys.argv[1]); NB = int(sys.argv[2]) if len(sys.argv) > 2 else 60
KINDS = sys.argv[3].split(",") if len(sys.argv) > 3 else ["numpy", "torch", "numpy+calls"]
BATCH = 50 if SIZE <= 4096 else 20
async def main():
    async with open_cluster(2) as (n0, n1):
        async with n0.process("a") as a, n1.process("b") as b:
            await n0.lookup("b", timeout=10); await n1.lookup("a", timeout=10)
            arr = np.arange(SIZE, dtype=np.uint8); ten = torch.from_numpy(arr.copy())
            mode = {"calls": False}
            async def echo():
                while True:
                    m = await b.recv()
                    if m.com == 1: return
                    if mode["calls"]:
                        torch.from_numpy(m.data); ten.numpy()
                    await b.send("a", m.data)
            task = asyncio.create_task(echo())
            res = {k: [] for k in KINDS}
            for i in range(NB + 3):
                for kind in (KINDS if i % 2 else KINDS[::-1]):
                    p = ten if kind == "torch" else arr
                    calls = mode["calls"] = kind == "numpy+calls"
                    t0 = time.thread_time()
                    for _ in range(BATCH):
                        if calls: ten.numpy()
                        await a.send("b", p); m = await a.recv()
                        if calls: torch.from_numpy(m.data)
                    if i >= 3: res[kind].append((time.thread_time() - t0) / BATCH * 1e6)
                    assert type(m.data) is type(p)
            await a.send("b", b"", com=1); await task
    base = sorted(res[KINDS[0]])
    for k, v in res.items():
        v.sort(); n = len(v)
        print(f"{SIZE:>8} B {k:12s} CPU us/RT min {v[0]:8.2f} p10 {v[n//10]:8.2f} median {statistics.median(v):8.2f}"
              f"   -{KINDS[0]}: min {v[0]-base[0]:+6.2f} p10 {v[n//10]-base[n//10]:+6.2f} median {statistics.median(v)-statistics.median(base):+6.2f}")
asyncio.run(main())
