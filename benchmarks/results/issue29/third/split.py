# (variants: numpy; "tagged" = a tensor's tagged ndarray; "tnumpy" = t.numpy(), untagged; "tensor->numpy" = the tensor, received as numpy; "arr-tagged" = numpy memory with the tagged dtype)
"""Variants, alternating batches in one process: numpy, tagged ndarray (host_array(t)),
tensor, tensor received as numpy (arrays='numpy'); per RT."""
import asyncio, sys, time, statistics
import numpy as np, torch
from aiopdbp.runtime.cluster import open_cluster
from aiopdbp.arrays import host_array
SIZE = int(sys.argv[1]) if len(sys.argv) > 1 else 8
BATCH, NB = 50, int(sys.argv[2]) if len(sys.argv) > 2 else 100

async def main():
    async with open_cluster(2) as (n0, n1):
        async with n0.process("a") as a, n1.process("b") as b:
            await n0.lookup("b", timeout=10); await n1.lookup("a", timeout=10)
            arr = np.arange(SIZE, dtype=np.uint8)
            ten = torch.from_numpy(arr.copy())
            tagged = host_array(ten)
            variants = {"numpy": (arr, None), "tagged": (tagged, "numpy"), "tnumpy": (ten.numpy(), "numpy"), "tensor->numpy": (ten, "numpy"), "arr-tagged": (arr.view(tagged.dtype), "numpy")}
            mode = {"arrays": None}
            async def echo():
                while True:
                    m = await b.recv(arrays=mode["arrays"])
                    if m.com == 1: return
                    await b.send("a", m.data)
            t = asyncio.create_task(echo())
            res = {k: [] for k in variants}
            names = [n for n in variants if n in sys.argv[3].split(",")] if len(sys.argv) > 3 else list(variants)
            for i in range(NB + 3):
                order = names if i % 2 else names[::-1]
                for kind in order:
                    p, arrays = variants[kind]; mode["arrays"] = arrays
                    t0 = time.thread_time()
                    for _ in range(BATCH):
                        await a.send("b", p); m = await a.recv(arrays=arrays)
                    dt = (time.thread_time() - t0) / BATCH * 1e6
                    if i >= 3: res[kind].append(dt)
            await a.send("b", b"", com=1); await t
            base = sorted(res["numpy"])
            for k, v in [(k, v) for k, v in res.items() if v]:
                v.sort()
                print(f"{k:14s} size {SIZE}: min {v[0]:7.2f}  p10 {v[len(v)//10]:7.2f}  median {statistics.median(v):7.2f} us/RT   min-numpy {v[0]-base[0]:+6.2f}  p10-numpy {v[len(v)//10]-base[len(v)//10]:+6.2f}")
asyncio.run(main())
