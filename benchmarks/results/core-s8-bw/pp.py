"""Per round trip: wall (median of batches), process CPU, minor page faults; aiopdbp vs mpi4py."""
import asyncio, os, resource, sys, time
import numpy as np
import aiopdbp
SIZES = [int(s) for s in os.environ.get("SIZES", "65536,1048576").split(",")]
N = int(os.environ.get("N", "1000")); B = 10
RO = os.environ.get("RO") == "1"; TORCH = os.environ.get("TORCH") == "1"

def ru():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_minflt, r.ru_utime + r.ru_stime

async def main():
    async with aiopdbp.open_node(**({"arrays": os.environ["ARRAYS"]} if os.environ.get("ARRAYS") else {})) as node:
        me = node.rank
        async with node.process(f"pp-{me}") as gp:
            peer = f"pp-{1 - me}"
            await node.lookup(peer, timeout=30)
            out = []
            for size in SIZES:
                n = N if size < (1 << 20) else max(100, N // 4)
                if TORCH:
                    import torch
                    pay = torch.ones(size, dtype=torch.uint8)
                elif RO:
                    pay = np.frombuffer(bytes(size), np.uint8)
                else:
                    pay = np.ones(size, np.uint8)
                for i in range(50):  # warm
                    if me == 0:
                        await gp.send(peer, pay); await gp.recv()
                    else:
                        m = await gp.recv(); await gp.send(peer, pay if RO else m.data)
                prof = None
                if os.environ.get("PROFILE"):
                    import cProfile; prof = cProfile.Profile(); prof.enable()
                sp0 = node.stats().transport.get("spins", 0)
                f0, c0 = ru(); walls = []
                for b in range(n // B):
                    t = time.perf_counter()
                    for i in range(B):
                        if me == 0:
                            await gp.send(peer, pay); await gp.recv()
                        else:
                            m = await gp.recv(); await gp.send(peer, pay if RO else m.data)
                    walls.append((time.perf_counter() - t) / B / 2 * 1e6)
                f1, c1 = ru(); k = n // B * B
                spins = (node.stats().transport.get("spins", 0) - sp0) / k
                if prof is not None:
                    prof.disable(); import pstats
                    ps = pstats.Stats(prof); rows = sorted(ps.stats.items(), key=lambda kv: -kv[1][1])
                    out.append(f"calls/RT r{me} {ps.total_calls / k:.1f}: " + "; ".join(
                        f"{r[1] / k:.2f} {os.path.basename(f)}:{fn}" for (f, ln, fn), r in rows[:int(os.environ.get('TOP', '40'))]))
                out.append(f"aiopdbp {size:9d} one way p50 {np.median(walls):8.2f} us  cpu/RT r{me} {(c1-c0)/k*1e6:8.1f} us  minflt/RT {(f1-f0)/k:6.2f}  engine spins/RT {spins:5.2f}")
            from mpi4py import MPI
            outs = MPI.COMM_WORLD.allgather(out)
            if me == 0:
                for a, b in zip(*outs):
                    if a.startswith("calls"):
                        print(a); print(b); continue
                    print(a); print("   ", b[b.index("cpu"):])

aiopdbp.run(main())
