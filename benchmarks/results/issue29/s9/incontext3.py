"""Is torch.from_numpy slow right after a 64 KiB message arrives because of the array it is given
(the landing buffer) or because of when it runs?  The echoing rank, right after recv returned,
alternates: (a) from_numpy of a fixed array made at start, then of the landing buffer;
(b) from_numpy of the landing buffer, then of the fixed array.  Wall and thread CPU per call.

  aiopdbp launch -n 2 incontext3.py     env SIZE (65536), N (round trips, 3000)
"""
import asyncio, os, time
import numpy as np
import aiopdbp

SIZE = int(os.environ.get("SIZE", "65536")); N = int(os.environ.get("N", "3000"))
ns, cns = time.perf_counter_ns, time.thread_time_ns

async def main():
    import torch
    fn = torch.from_numpy
    fixed = np.ones(SIZE, np.uint8)
    async with aiopdbp.open_node() as node:
        me = node.rank
        async with node.process(f"ic-{me}") as gp:
            peer = f"ic-{1 - me}"
            await node.lookup(peer, timeout=30)
            pay = np.ones(SIZE, np.uint8)
            rec = {}
            def put(k, v): rec.setdefault(k, []).append(v)
            for i in range(N):
                if me == 0:
                    await gp.send(peer, pay); await gp.recv()
                else:
                    m = await gp.recv()
                    d = m.data
                    first, second = (fixed, d) if i & 1 else (d, fixed)
                    a, b = ("fixed", "landing") if i & 1 else ("landing", "fixed")
                    c0 = cns(); t0 = ns(); x = fn(first); t1 = ns(); c1 = cns(); y = fn(second); t2 = ns(); c2 = cns()
                    put(f"1st: {a:8s} wall", t1 - t0); put(f"1st: {a:8s} CPU ", c1 - c0)
                    put(f"2nd: {b:8s} wall", t2 - t1); put(f"2nd: {b:8s} CPU ", c2 - c1)
                    del x, y
                    await gp.send(peer, d)
            if me == 1:
                print(f"SIZE {SIZE} N {N}: ns per torch.from_numpy on the echoing rank, right after recv returned")
                for k, v in sorted(rec.items()):
                    print(f"  {k:24s} p25 {np.percentile(v, 25):7.0f}  p50 {np.median(v):7.0f}  p75 {np.percentile(v, 75):7.0f}")

aiopdbp.run(main())
