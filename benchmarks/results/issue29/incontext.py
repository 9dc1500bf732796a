"""Time arrival() and cpu_tensor_array() in context (wrapped), tensor ping-pong in one process."""
import asyncio, sys, time, statistics
import numpy as np, torch
import aiopdbp.runtime.process as P
from aiopdbp.runtime.cluster import open_cluster
ns = time.perf_counter_ns
acc = {"arrival": [], "cpu_tensor_array": [], "from_numpy": [], "numpy": [], "empty": []}
orig_arr, orig_cta = P.arrival, P.cpu_tensor_array
def arrival(a, k):
    t0 = ns(); r = orig_arr(a, k); acc["arrival"].append(ns() - t0); return r
def cta(o):
    t0 = ns(); r = orig_cta(o); acc["cpu_tensor_array"].append(ns() - t0)
    t0 = ns(); acc["empty"].append(ns() - t0)
    if r is not None:
        t0 = ns(); x = o.numpy(); acc["numpy"].append(ns() - t0)
        y = r.copy()
        t0 = ns(); z = torch.from_numpy(y); acc["from_numpy"].append(ns() - t0)
    return r
P.arrival, P.cpu_tensor_array = arrival, cta
async def main():
    async with open_cluster(2) as (n0, n1):
        async with n0.process("a") as a, n1.process("b") as b:
            await n0.lookup("b", timeout=10); await n1.lookup("a", timeout=10)
            ten = torch.arange(8, dtype=torch.uint8)
            async def echo():
                for _ in range(5000):
                    m = await b.recv(); await b.send("a", m.data)
            t = asyncio.create_task(echo())
            for _ in range(5000):
                await a.send("b", ten); m = await a.recv()
            await t
    for k, v in acc.items():
        v.sort(); print(f"{k:18s} n={len(v)} min {v[0]} p25 {v[len(v)//4]} median {v[len(v)//2]} ns")
asyncio.run(main())
