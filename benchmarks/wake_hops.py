"""Where an 8 B ping's time goes after an idle gap (issue 18 item 1).

    aiopdbp launch -n 2 benchmarks/wake_hops.py GAP_MS

Rank 0 sleeps GAP_MS, then sends 8 B to rank 1, which answers; 100 pings.
``time.perf_counter_ns`` stamps (one clock per host) on the progress engine's
methods, wrapped for this run: rank 0's ``post_send`` returned, rank 1's
doorbell callback (``_on_ring``), rank 1's step that received the ping, and
rank 1's ``gp.recv`` returning.  Prints the median of each stretch over the
pings that rang rank 1's doorbell (its engine was asleep).
"""
import asyncio, time, sys
import numpy as np
import aiopdbp
from aiopdbp.transport.progress import ProgressEngine
ns = time.perf_counter_ns
RING, STEP, POST = [], [], []
_on_ring = ProgressEngine._on_ring
def on_ring(self):
    RING.append(ns()); return _on_ring(self)
ProgressEngine._on_ring = on_ring
_step = ProgressEngine.step
def step(self):
    n, t = self.n_recvs, ns()
    b = _step(self)
    if self.n_recvs != n: STEP.append((t, ns()))
    return b
ProgressEngine.step = step
from aiopdbp.transport.sends import Sends
_post = Sends.post
def post(self, *a):
    r = _post(self, *a); POST.append(ns()); return r
Sends.post = post
GAP = float(sys.argv[1]) / 1e3
async def main():
    async with aiopdbp.open_node() as node:
        r = node.rank
        async with node.process(f"w{r}") as gp:
            await node.lookup(f"w{1-r}")
            T0, T1 = [], []
            for _ in range(100):
                if r == 0:
                    await asyncio.sleep(GAP)
                    T0.append(ns())
                    await gp.send("w1", b"12345678")
                    await gp.recv(timeout=10)
                else:
                    await gp.recv(timeout=30)
                    T1.append(ns())
                    await gp.send("w0", b"12345678")
            comm = node.transport.control_comm if hasattr(node.transport, "control_comm") else None
            from mpi4py import MPI
            data = MPI.COMM_WORLD.gather((T0, T1, RING, STEP, POST), root=0)
            if r == 0:
                (t0, _, _, _, post0), (_, t1, ring1, step1, _) = data
                import bisect
                rang, quiet = [], []
                starts = [s for s, _ in step1]
                for a, b in zip(t0[10:], t1[10:]):
                    p = post0[bisect.bisect_left(post0, a)]
                    j = bisect.bisect_left(starts, a)
                    if j == len(step1) or step1[j][1] > b:
                        continue
                    st = step1[j]
                    i = bisect.bisect_left(ring1, a)
                    if i < len(ring1) and ring1[i] < st[0]:  # the engine slept: the ring woke it
                        rang.append((p - a, st[0] - p, st[1] - st[0], b - st[1], b - a, ring1[i] - p))
                    else:
                        quiet.append((p - a, st[0] - p, st[1] - st[0], b - st[1], b - a, 0))
                for what, rows in (("engine asleep, woken by the doorbell", rang), ("engine awake", quiet)):
                    if not rows:
                        continue
                    m = np.median(np.array(rows), axis=0) / 1e3
                    ring = f" (of which posted -> ring callback {m[5]:.1f})" if what.startswith("engine asleep") else ""
                    print(f"gap {GAP * 1e3:g} ms, {what}, {len(rows)} pings, medians in us: send -> posted {m[0]:.1f}, "
                          f"posted -> receiving step {m[1]:.1f}{ring}, the step {m[2]:.1f}, "
                          f"step -> recv returns {m[3]:.1f}, ping total {m[4]:.1f}", flush=True)


aiopdbp.run(main())
