"""In-context thread CPU of the tensor conversions: process.cpu_tensor_array,
process.arrival and process.Message wrapped with thread_time accumulators
(wrapper overhead measured on a no-op and subtracted); torch round trips."""
import asyncio, sys, time
import numpy as np, torch
import aiopdbp.runtime.process as P
from aiopdbp.runtime.cluster import open_cluster
SIZE = int(sys.argv[1]); N = int(sys.argv[2])
acc = {}
def wrap(name, f):
    tt = time.thread_time
    def w(*a):
        t0 = tt(); r = f(*a); acc[name] = acc.get(name, 0.0) + tt() - t0; return r
    return w
noop = wrap("noop", lambda *a: None)
P.cpu_tensor_array = wrap("cpu_tensor_array", P.cpu_tensor_array)
P.arrival = wrap("arrival", P.arrival)
async def main():
    async with open_cluster(2) as (n0, n1):
        async with n0.process("a") as a, n1.process("b") as b:
            await n0.lookup("b", timeout=10); await n1.lookup("a", timeout=10)
            ten = torch.arange(SIZE, dtype=torch.uint8)
            async def echo():
                while True:
                    m = await b.recv()
                    if m.com == 1: return
                    await b.send("a", m.data)
            task = asyncio.create_task(echo())
            for _ in range(200):
                await a.send("b", ten); m = await a.recv()
            acc.clear(); t0 = time.thread_time()
            for _ in range(N):
                await a.send("b", ten); m = await a.recv(); noop(); noop(); noop(); noop()
            total = time.thread_time() - t0
            await a.send("b", b"", com=1); await task
    per = {k: v / N * 1e6 for k, v in acc.items()}
    print(f"{SIZE} B: {total / N * 1e6:.2f} us/RT; per RT (2 hops): " + ", ".join(f"{k} {v:.2f}" for k, v in per.items())
          + f"; wrapper overhead per call ~{per['noop'] / 4:.2f}")
asyncio.run(main())
