"""In the running 2-rank ping-pong (numpy payloads, 64 KiB by default): the echoing rank times
one torch.from_numpy of what arrived, then a second one at once, and the same for a control
(numpy's own ndarray.view), each with perf_counter_ns: is the first call cold?

  aiopdbp launch -n 2 incontext2.py     env SIZE, N (round trips, 6000)
"""
import asyncio, os, resource, time
import numpy as np
import aiopdbp

SIZE = int(os.environ.get("SIZE", "65536")); N = int(os.environ.get("N", "6000"))
ns = time.perf_counter_ns
ru = lambda: resource.getrusage(resource.RUSAGE_THREAD)

async def main():
    import torch
    fn = torch.from_numpy
    async with aiopdbp.open_node() as node:
        me = node.rank
        async with node.process(f"ic-{me}") as gp:
            peer = f"ic-{1 - me}"
            await node.lookup(peer, timeout=30)
            pay = np.ones(SIZE, np.uint8)
            rec = {k: [] for k in ("view 1st", "view 2nd", "from_numpy 1st", "from_numpy 2nd", "is_cpu 1st", "is_cpu 2nd",
                                    "faults in from_numpy 1st", "from_numpy 1st, faulted", "from_numpy 1st, no fault",
                                    "vol. switches in from_numpy 1st", "invol. switches in from_numpy 1st",
                                    "from_numpy 1st, thread CPU")}
            for i in range(N):
                if me == 0:
                    await gp.send(peer, pay); await gp.recv()
                else:
                    m = await gp.recv()
                    d = m.data
                    if i & 1:
                        t0 = ns(); x = d.view(); t1 = ns(); y = d.view(); t2 = ns()
                        rec["view 1st"].append(t1 - t0); rec["view 2nd"].append(t2 - t1)
                    else:
                        r0 = ru(); f0 = r0.ru_minflt
                        c0 = time.thread_time_ns(); t0 = ns(); x = fn(d); t1 = ns(); c1 = time.thread_time_ns()
                        r1 = ru(); f1 = r1.ru_minflt
                        rec["from_numpy 1st, thread CPU"].append(c1 - c0)
                        rec["vol. switches in from_numpy 1st"].append(r1.ru_nvcsw - r0.ru_nvcsw)
                        rec["invol. switches in from_numpy 1st"].append(r1.ru_nivcsw - r0.ru_nivcsw)
                        y = fn(d); t2 = ns(); c = x.is_cpu; t3 = ns(); c = y.is_cpu; t4 = ns()
                        rec["faults in from_numpy 1st"].append(f1 - f0)
                        (rec["from_numpy 1st, faulted"] if f1 > f0 else rec["from_numpy 1st, no fault"]).append(t1 - t0)
                        rec["from_numpy 1st"].append(t1 - t0); rec["from_numpy 2nd"].append(t2 - t1)
                        rec["is_cpu 1st"].append(t3 - t2); rec["is_cpu 2nd"].append(t4 - t3)
                    del x, y
                    await gp.send(peer, d)
            if me == 1:
                print("threads:", sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")))
                print(f"SIZE {SIZE} N {N}: median ns per call on the echoing rank, right after recv returned")
                for k, v in rec.items():
                    if not v: continue
                    print(f"  {k:26s} n {len(v):5d} mean {np.mean(v):9.1f} p25 {np.percentile(v, 25):7.0f}  p50 {np.median(v):7.0f}  p75 {np.percentile(v, 75):7.0f}")
                for t in os.listdir("/proc/self/task"):
                    st = open(f"/proc/self/task/{t}/stat").read().split(")")[-1].split()
                    print(f"  thread {t} {open(f'/proc/self/task/{t}/comm').read().strip()}: utime {st[11]} stime {st[12]} ticks, wchan {open(f'/proc/self/task/{t}/wchan').read()}")

aiopdbp.run(main())
