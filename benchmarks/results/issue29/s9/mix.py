"""Variants of a 2-rank ping-pong, interleaved batch by batch in one job (same conditions).

  aiopdbp launch -n 2 mix.py      env: SIZE (65536), N (rounds of batches, 200), B (batch, 10),
                                       VARIANTS (comma list, default all below)
np       numpy array sent, ndarray arrives, echoed
torch    torch tensor sent (torch.from_numpy of the same array), tensor arrives, echoed
np+conv  numpy sent and echoed; the receiver also runs torch.from_numpy(data).numpy() on it
torch>np tensor sent, the receivers ask arrays="numpy" (the ndarray of the tensor is echoed)
Per variant: one-way p50 of batches (us), main-thread CPU and other threads' CPU per round trip,
involuntary context switches per round trip, engine spins / drives / driven steps per round trip.
"""
import asyncio, os, resource, time
import numpy as np
import aiopdbp

SIZE = int(os.environ.get("SIZE", "65536")); N = int(os.environ.get("N", "200")); B = int(os.environ.get("B", "10"))
ALL = ["np", "torch", "np+conv", "torch>np"]
VARIANTS = os.environ.get("VARIANTS", ",".join(ALL)).split(",")
CHECK = os.environ.get("CHECK") == "1"

def rus():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_nivcsw, r.ru_nvcsw

async def main():
    import torch
    async with aiopdbp.open_node() as node:
        me = node.rank
        async with node.process(f"mx-{me}") as gp:
            peer = f"mx-{1 - me}"
            await node.lookup(peer, timeout=30)
            base = np.ones(SIZE, np.uint8)
            pays = {"np": base, "torch": torch.from_numpy(base.copy()), "np+conv": base,
                    "torch>np": torch.from_numpy(base.copy())}
            acc = {v: {"walls": [], "thr": 0.0, "proc": 0.0, "ivcs": 0, "vcs": 0, "spins": 0, "drives": 0,
                       "driven": 0, "steps": 0} for v in VARIANTS}

            async def batch(v, n):
                pay = pays[v]
                kind = "numpy" if v == "torch>np" else None
                for _ in range(n):
                    if me == 0:
                        await gp.send(peer, pay)
                        m = await gp.recv(arrays=kind)
                        if v == "np+conv":
                            torch.from_numpy(m.data).numpy()
                        if CHECK:
                            d = m.data.numpy() if isinstance(m.data, torch.Tensor) else m.data
                            assert d[0] == 1
                    else:
                        m = await gp.recv(arrays=kind)
                        if v == "np+conv":
                            torch.from_numpy(m.data).numpy()
                        await gp.send(peer, m.data)

            for v in VARIANTS:
                await batch(v, 50)  # warm
            for r in range(N):
                order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]  # rotated: no variant always first
                for v in order:
                    a = acc[v]
                    st = node.stats().transport
                    s0, d0, dd0, stp0 = st["spins"], st["drives"], st["driven_steps"], st["steps"]
                    i0, vc0 = rus(); th0 = time.thread_time(); p0 = time.process_time()
                    t = time.perf_counter()
                    await batch(v, B)
                    w = time.perf_counter() - t
                    a["thr"] += time.thread_time() - th0; a["proc"] += time.process_time() - p0
                    i1, vc1 = rus(); a["ivcs"] += i1 - i0; a["vcs"] += vc1 - vc0
                    st = node.stats().transport
                    a["spins"] += st["spins"] - s0; a["drives"] += st["drives"] - d0
                    a["driven"] += st["driven_steps"] - dd0; a["steps"] += st["steps"] - stp0
                    a["walls"].append(w / B / 2 * 1e6)
            k = N * B
            out = []
            for v in VARIANTS:
                a = acc[v]
                p10, p25, p50 = np.percentile(a['walls'], [10, 25, 50])
                out.append(f"{v:9s} r{me} one way p10/25/50 {p10:7.2f} {p25:7.2f} {p50:7.2f} us  thread cpu/RT {a['thr']/k*1e6:7.1f}"
                           f"  other thr {(a['proc']-a['thr'])/k*1e6:6.1f}  ivcsw/RT {a['ivcs']/k:5.2f}  vcsw/RT {a['vcs']/k:5.2f}"
                           f"  spins/RT {a['spins']/k:5.2f}  drives/RT {a['drives']/k:5.2f}  driven/RT {a['driven']/k:5.2f}"
                           f"  steps/RT {a['steps']/k:6.2f}")
            from mpi4py import MPI
            outs = MPI.COMM_WORLD.allgather(out)
            if me == 0:
                print(f"SIZE {SIZE} N {N} B {B} torch threads {torch.get_num_threads()} tasks {len(os.listdir('/proc/self/task'))}")
                for a0, a1 in zip(*outs):
                    print(a0); print(a1)

aiopdbp.run(main())
