"""The receiving rank's turn of a 64 KiB ping-pong: payload landed -> the reply's bulk Isend posted.

  aiopdbp launch -n 2 turn.py    env: SIZE (65536), N (rounds, 150), B (round trips a batch, 10),
                                      VARIANTS (np,torch), CHECK=1 (rank 0 checks the echo, as the bench),
                                      SPLIT=1 (rank 1 drops the previous message before recv, timed as "drop",
                                      and stamps when recv returned), PARTS=1 (arrival and cpu_tensor_array timed)
Variants are interleaved batch by batch (order rotated each round), so they share the load.
Per variant and rank: the turn's thread CPU time (load-independent to first order: preemption
is not counted) and wall time, medians over hops; plus the one way wall p50 of batches.
No waiting happens inside the turn (the landing step runs in the GP's driving task), so its CPU
time is what the code costs in context.
"""
import asyncio, os, time
import numpy as np
import aiopdbp
from aiopdbp.hosts.inbound import Inbound
from aiopdbp.transport.progress import ProgressEngine

SIZE = int(os.environ.get("SIZE", "65536")); N = int(os.environ.get("N", "150")); B = int(os.environ.get("B", "10"))
VARIANTS = os.environ.get("VARIANTS", "np,torch").split(",")
CHECK = os.environ.get("CHECK") == "1"
SPLIT = os.environ.get("SPLIT") == "1"
cpu, wall = time.thread_time_ns, time.perf_counter_ns
ST = {"landed": None, "rec": None, "marks": []}
_landed, _post = Inbound._landed, ProgressEngine.post_bulk_send

def landed(self, *a):
    ST["landed"] = (cpu(), wall())
    return _landed(self, *a)

def post(self, *a, **k):
    r = _post(self, *a, **k)
    t = ST["landed"]
    if t is not None and ST["rec"] is not None:
        ST["rec"].append((cpu() - t[0], wall() - t[1]))
    ST["landed"] = None
    return r

Inbound._landed = landed
CUR = {"parts": {}}  # parts: name -> thread CPU ns of the variant running
if os.environ.get("PARTS") == "1":
    import aiopdbp.runtime.process as _proc
    def timed(name, f):
        def w(*a):
            t = cpu(); r = f(*a); CUR["parts"].setdefault(name, []).append(cpu() - t); return r
        return w
    _proc.arrival = timed("arrival", _proc.arrival)
    _proc.cpu_tensor_array = timed("cpu_tensor_array", _proc.cpu_tensor_array)
ProgressEngine.post_bulk_send = post

async def main():
    import torch
    async with aiopdbp.open_node() as node:
        me = node.rank
        async with node.process(f"tu-{me}") as gp:
            peer = f"tu-{1 - me}"
            await node.lookup(peer, timeout=30)
            base = np.ones(SIZE, np.uint8)
            pays = {"np": [base, base.copy()], "torch": [torch.from_numpy(base.copy()), torch.from_numpy(base.copy())]}
            acc = {v: {"turn": [], "walls": [], "marks": [], "parts": {}} for v in VARIANTS}

            async def batch(v, n):
                pay = pays[v]
                for i in range(n):
                    if me == 0:
                        await gp.send(peer, pay[i & 1])
                        m = await gp.recv()
                        if CHECK:
                            d = m.data.numpy() if type(m.data) is not np.ndarray else m.data
                            assert np.array_equal(d, base)
                    else:
                        if SPLIT:  # the previous message dies here, outside the turn (else: when m is rebound)
                            t = cpu()
                            m = None
                            if ST["rec"] is not None:
                                CUR["parts"].setdefault("drop", []).append(cpu() - t)
                        m = await gp.recv()
                        if SPLIT and ST["landed"] is not None:
                            ST["marks"].append(cpu() - ST["landed"][0])
                        await gp.send(peer, m.data)

            for v in VARIANTS:
                await batch(v, 50)
            for r in range(N):
                order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
                for v in order:
                    ST["rec"] = acc[v]["turn"]; ST["marks"] = acc[v]["marks"]; CUR["parts"] = acc[v]["parts"]
                    t = time.perf_counter()
                    await batch(v, B)
                    acc[v]["walls"].append((time.perf_counter() - t) / B / 2 * 1e6)
                    ST["rec"] = None
            out = []
            for v in VARIANTS:
                out.append(f"{v:6s} r{me} parts (median thread CPU us): " + ", ".join(
                    f"{k} {np.median(x)/1e3:.2f} (n {len(x)})" for k, x in sorted(acc[v]["parts"].items())))
            for v in VARIANTS:
                a = acc[v]; tc = np.array([x[0] for x in a["turn"]]) / 1e3; tw = np.array([x[1] for x in a["turn"]]) / 1e3
                out.append(f"{v:6s} r{me} one way p25/p50 {np.percentile(a['walls'], 25):7.2f} {np.median(a['walls']):7.2f} us"
                           f"  turn CPU p25/p50 {np.percentile(tc, 25):6.2f} {np.median(tc):6.2f} us"
                           + (f" (landed -> recv returned {np.median(a['marks'])/1e3:6.2f})" if a['marks'] else "") + f"  turn wall p50 {np.median(tw):6.2f} us  (n {len(tc)})")
            from mpi4py import MPI
            outs = MPI.COMM_WORLD.allgather(out)
            if me == 0:
                print(f"SIZE {SIZE} N {N} B {B} CHECK {CHECK}")
                for a0, a1 in zip(*outs):
                    print(a0); print(a1)

aiopdbp.run(main())
