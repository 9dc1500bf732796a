"""2-rank ping-pong with gp.send/gp.recv as `bench pingpong` does it (rank 0 sends the
payload, rank 1 echoes what arrived), with per-rank counts per round trip:
minor page faults (getrusage), and with PROF=1 cProfile calls (by function).
    mpiexec -n 2 python pp2.py KIND SIZE N
(s12: GC=1 keeps the collector on, as the bench has it; a stat of /MARK-start and /MARK-stop
around the measured loop for strace; voluntary/involuntary context switches and collections per round trip)"""
import asyncio, gc, os, resource, sys, time
import numpy as np
from aiopdbp.runtime import open_node

KIND, SIZE, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
WARM = 200

async def main():
    async with open_node() as node:
        rank = node.rank
        me = f"g{rank}"
        async with node.process(me) as gp:
            peer = f"g{1-rank}"
            await node.lookup(peer, timeout=30)
            arr = np.frombuffer(bytearray(np.arange(SIZE, dtype=np.uint8).tobytes()), dtype=np.uint8)
            if KIND == "torch":
                import torch
                p = torch.from_numpy(arr)
            else:
                p = arr
            async def rts(n):
                for _ in range(n):
                    if rank == 0:
                        await gp.send(peer, p)
                        m = await gp.recv()
                    else:
                        m = await gp.recv()
                        await gp.send(peer, m.data)
                del m
            await rts(WARM)
            gc.collect()
            if not os.environ.get("GC"):
                gc.disable()
            g0 = [st["collections"] for st in gc.get_stats()]
            prof = None
            if os.environ.get("PROF"):
                import cProfile
                prof = cProfile.Profile(); prof.enable()
            os.path.exists("/MARK-start")  # (a marker for strace: the measured loop begins)
            r0 = resource.getrusage(resource.RUSAGE_SELF); c0 = time.thread_time()
            await rts(N)
            c1 = time.thread_time(); r1 = resource.getrusage(resource.RUSAGE_SELF)
            g1 = [st["collections"] for st in gc.get_stats()]
            os.path.exists("/MARK-stop")
            if prof:
                prof.disable()
            gc.enable()
            out = [f"rank {rank} {KIND} {SIZE} B: minflt/RT {(r1.ru_minflt-r0.ru_minflt)/N:.3f} "
                   f"majflt {(r1.ru_majflt-r0.ru_majflt)} cpu us/RT {(c1-c0)/N*1e6:.1f} "
                   f"vcsw/RT {(r1.ru_nvcsw-r0.ru_nvcsw)/N:.3f} ivcsw/RT {(r1.ru_nivcsw-r0.ru_nivcsw)/N:.3f} "
                   f"gc gen0/1/2 per 1000 RT {[round((b - a) * 1000 / N, 1) for a, b in zip(g0, g1)]}"]
            if prof:
                import pstats
                st = pstats.Stats(prof)
                rows = sorted(st.stats.items(), key=lambda kv: -kv[1][1])
                total = sum(v[1] for _, v in rows)
                out.append(f"rank {rank}: {total/N:.1f} calls per RT")
                for (f, line, name), v in rows:
                    if v[1] >= N // 2:
                        out.append(f"rank {rank} {v[1]/N:6.2f}  {os.path.basename(f)}:{line}({name})")
            print("\n".join(out), flush=True)
            # barrier: both done before closing
            if rank == 0:
                await gp.send(peer, b"end"); await gp.recv()
            else:
                await gp.recv(); await gp.send(peer, b"end")

asyncio.run(main())
